"""Threads a served workspace adds to the daemon (issue 42's budget: at most 4 per workspace).

A daemon serving one workspace and one serving two, each after a write in every workspace
and once its work is done (Git's index in step): the difference is what one more workspace
costs. The fsync pool and the event loop's executor (`asyncio_*`) are the process's, and
grow with the work asked of them at once, so their threads are left out of both counts.
The daemon runs under a wrapper that lists its threads' names on SIGUSR1.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import sys
import time
from pathlib import Path

from mnoted.store import Workspace
from tests.e2e.conftest import DaemonProcess

BUDGET = 4
"""Issue 42's target. Today three: the writer, the watcher's one thread and maintenance. The
remote sync loop runs only while the repository has a remote, and a Git index refresh has a
thread only while it runs."""
SHARED = ("mnoted-fsync", "asyncio_")
"""Name prefixes of the process-wide threads, left out of the counts."""

WRAPPER = """\
import os, runpy, signal, sys, threading
def dump(*_):
    names = "\\n".join(t.name for t in threading.enumerate())
    with open(os.environ["MNOTE_TEST_THREADS"] + ".tmp", "w") as fh:
        fh.write(names)
    os.replace(os.environ["MNOTE_TEST_THREADS"] + ".tmp", os.environ["MNOTE_TEST_THREADS"])
signal.signal(signal.SIGUSR1, dump)
sys.argv = ["mnoted", *sys.argv[4:]]  # (after the interpreter and its `-m mnoted.cli.main`)
runpy.run_module("mnoted.cli.main", run_name="__main__", alter_sys=True)
"""


def _names(daemon: DaemonProcess, out: Path) -> list[str]:
    assert daemon.proc is not None
    out.unlink(missing_ok=True)
    os.kill(daemon.proc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while not out.exists():
        assert time.monotonic() < deadline, "the daemon did not list its threads"
        time.sleep(0.05)
    return [n for n in out.read_text().split("\n") if not n.startswith(SHARED)]


def _settled_threads(daemon: DaemonProcess, roots: list[Path], out: Path) -> list[str]:
    """The daemon's threads after a write in each of ``roots``, once every workspace is idle
    and the list has held for a second (threads started by the write have ended)."""
    client = daemon.client()
    for ws in client.request("GET", "/v1/workspaces")[1]["workspaces"]:
        deadline = time.monotonic() + 30  # (until the daemon has committed the page)
        while True:
            answer = client.call(
                "mnote.doc.markdown_edit",
                "plan.md",
                {"operations": [{"search": "Monday", "replace": "Friday"}]},
                workspace=ws["workspaceId"],
            )
            if answer["ok"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert answer["ok"], answer
    for root in roots:
        daemon.workspace = root
        daemon.wait_idle_clean()
    seen = [sorted(_names(daemon, out))]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.25)
        seen.append(sorted(_names(daemon, out)))
        if len(seen) >= 4 and all(names == seen[-1] for names in seen[-4:]):
            break
    return seen[-1]


def test_threads_per_additional_workspace(tmp_path: Path) -> None:
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER)
    roots = [tmp_path / "first", tmp_path / "second"]
    for root in roots:
        Workspace.init(root).close()
        (root / "plan.md").write_text("# Plan\n\nShip on Monday.\n")
    counts = []
    for served in (1, 2):
        base = tmp_path / f"d{served}"
        base.mkdir()
        daemon = DaemonProcess(base, roots[0])
        daemon.env["MNOTE_TEST_THREADS"] = str(base / "threads.txt")
        daemon.prefix = [sys.executable, str(wrapper)]
        daemon.start(*[arg for root in roots[1:served] for arg in ("--workspace", str(root))])
        try:
            names = _settled_threads(daemon, roots[:served], base / "threads.txt")
        finally:
            daemon.stop()
        kinds = collections.Counter(re.sub(r"(first|second|\d+)$", "*", n) for n in names)
        print(f"{served} workspace(s): {len(names)} threads {dict(sorted(kinds.items()))}")
        counts.append(len(names))
        for root in roots:
            (root / "plan.md").write_text("# Plan\n\nShip on Monday.\n")
    per_workspace = counts[1] - counts[0]
    print(f"threads per additional workspace: {per_workspace}")
    assert per_workspace <= BUDGET, counts
