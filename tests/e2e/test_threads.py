"""Threads a served workspace adds to the daemon (issue 42's budget: at most 4 per workspace).

A daemon serving one workspace and one serving two, each after a write in every workspace
and once its work is done (Git's index in step): the difference is what one more workspace
costs. The process-wide threads (the event loop's, the fsync pool's) are in both counts.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from mnoted.store import Workspace
from tests.e2e.conftest import DaemonProcess

BUDGET = 8
"""Threads per additional workspace the daemon may use today (issue 42's target is 4)."""


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _settled_threads(daemon: DaemonProcess, roots: list[Path]) -> int:
    """The daemon's thread count after a write in each of ``roots``, once every workspace is
    idle and the count has held for a second (threads started by the write, such as an index
    refresh, have ended)."""
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
    assert daemon.proc is not None
    counts = [_threads(daemon.proc.pid)]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.25)
        counts.append(_threads(daemon.proc.pid))
        if len(counts) >= 4 and len(set(counts[-4:])) == 1:
            break
    return counts[-1]


def test_threads_per_additional_workspace(tmp_path: Path) -> None:
    roots = [tmp_path / "first", tmp_path / "second"]
    for root in roots:
        Workspace.init(root).close()
        (root / "plan.md").write_text("# Plan\n\nShip on Monday.\n")
    counts = []
    for served in (1, 2):
        base = tmp_path / f"d{served}"
        base.mkdir()
        daemon = DaemonProcess(base, roots[0])
        daemon.start(*[arg for root in roots[1:served] for arg in ("--workspace", str(root))])
        try:
            counts.append(_settled_threads(daemon, roots[:served]))
        finally:
            daemon.stop()
        for root in roots:
            (root / "plan.md").write_text("# Plan\n\nShip on Monday.\n")
    per_workspace = counts[1] - counts[0]
    print(f"threads: 1 workspace {counts[0]}, 2 workspaces {counts[1]}: {per_workspace} each")
    assert per_workspace <= BUDGET, counts
