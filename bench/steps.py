"""Where a durable write's time goes inside the daemon: each step's wall time per write.

Starts the daemon on a bench workspace with timers wrapped around the functions of the
write path (``STEPS``), makes ``--writes`` markdown edits of the 10 KB page through the
project's client after 20 unmeasured ones, and prints, per step in ``STEPS``'s order, calls
per write and its mean wall time per call, beside the client's median. Steps nest (the
landing holds the pack's write); a call is timed on whichever thread makes it (a pack
merge's write is listed apart, with the name of its thread). The timers cost a few
microseconds a call.

    python bench/steps.py [--size 100] [--writes 400] [--step module:Class.method ...]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

STEPS = [
    "mnoted.host.runner:WorkspaceRunner._run_group",
    "mnoted.service.executor:Service.answer",
    "mnoted.service.calls:Call.load",
    "mnoted.store.writer:Writer.commit_external",
    "mnoted.store.writer:Writer.apply",
    "mnoted.service.writes:read_back",
    "mnoted.store.landing:Landing.land",
    "mnoted.store.worktree:FileWrites.__init__",
    "mnoted.store.packs:entries_of",
    "mnoted.store.packs:PackWrite.__init__",
    "mnoted.store.packs:PackWrite.install",
    "mnoted.store.refs:lock_branch",
    "mnoted.store.refs:commit_branch",
    "mnoted.store.indexkeeper:IndexKeeper.prepare",
    "mnoted.store.indexkeeper:IndexKeeper.install",
    "mnoted.store.journal:Journal.write",
    "mnoted.store.journal:Journal.clear",
    "mnoted.store.landing:Landing._sync_landing",
    "mnoted.store.writer:Writer._finish",
    "mnoted.store.worktree:FileWrites.finish",
    "mnoted.store.sidecar:Sidecar.commit",
]


def serve(steps: list[str], out: str, argv: list[str]) -> None:
    """The daemon (``argv``), its steps timed: SIGUSR1 starts over, SIGUSR2 writes ``out``."""
    times: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])

    def timed(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                thread = threading.current_thread().name
                kept = times[name if thread.startswith("mnoted-ws-") else f"{name} [{thread}]"]
                kept[0] += 1
                kept[1] += time.perf_counter() - t0

        return inner

    for step in steps:
        module, _, attr = step.partition(":")
        owner: Any = importlib.import_module(module)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, name, timed(getattr(owner, name), attr))

    def dump(*_: object) -> None:
        lines = [f"{attr}\t{n}\t{total}" for attr, (n, total) in times.items()]
        Path(f"{out}.tmp").write_text("\n".join(lines))
        os.replace(f"{out}.tmp", out)  # (whole when the driver sees it)

    signal.signal(signal.SIGUSR1, lambda *_: times.clear())
    signal.signal(signal.SIGUSR2, dump)
    from mnoted.cli.main import main

    raise SystemExit(main(argv))


def drive(size: int, writes: int, steps: list[str]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import daemon as bench
    from fixture import daemon_env

    with tempfile.TemporaryDirectory(prefix="mns") as tmp:
        base = Path(tmp)
        env = daemon_env(base)
        root = bench.workspace(base, size, env)
        with (root / "page.md").open("a") as fh:
            fh.write("\nmnoted bench marker A\n")
        out = base / "steps.tsv"
        env["MNOTED_BENCH_STEPS"] = ",".join(steps)
        env["MNOTED_BENCH_STEPS_OUT"] = str(out)
        daemon = bench.Daemon(root, base, env, command=(sys.executable, __file__, "--serve"))
        try:
            client = daemon.client()
            bench.search_ready(client)
            samples = []
            for i in range(20 + writes):
                if i == 20:
                    daemon.proc.send_signal(signal.SIGUSR1)
                body = bench.edit_body(client, i)
                t0 = time.perf_counter()
                answer = client.request("POST", "/v1/tools/call", body)[1]
                samples.append(time.perf_counter() - t0)
                assert answer.get("ok"), answer
            daemon.proc.send_signal(signal.SIGUSR2)
            while not out.exists():
                time.sleep(0.05)
        finally:
            daemon.stop()
        print(
            f"{size:,} files, {writes} writes: through the client median "
            f"{statistics.median(samples[20:]) * 1000:.2f} ms, "
            f"mean {statistics.mean(samples[20:]) * 1000:.2f} ms"
        )
        print(f"  {'step':<44} {'calls/write':>11} {'ms/call':>8} {'ms/write':>9}")
        rows = [row.split("\t") for row in out.read_text().splitlines()]
        for step in steps:
            name = step.partition(":")[2]
            for key, calls_, seconds_ in rows:
                if key == name or key.startswith(f"{name} ["):
                    calls, seconds = int(calls_), float(seconds_)
                    print(
                        f"  {key:<44} {calls / writes:11.2f} {seconds / calls * 1000:8.3f} "
                        f"{seconds / writes * 1000:9.3f}"
                    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        steps = os.environ["MNOTED_BENCH_STEPS"].split(",")
        serve(steps, os.environ["MNOTED_BENCH_STEPS_OUT"], sys.argv[2:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--writes", type=int, default=400)
    parser.add_argument("--step", action="append", help="module:Class.method (default: STEPS)")
    args = parser.parse_args()
    drive(args.size, args.writes, args.step or STEPS)


if __name__ == "__main__":
    main()
