"""Figures of the sync watcher: save-to-settled latency, bursts, start-up on big trees.

    .venv/bin/python bench/watch.py            # 10,000 files and 10,000 folders
    .venv/bin/python bench/watch.py --large    # also 100,000 files
    .venv/bin/python bench/watch.py --compare-default-events   # watchdog's default set

"Settled" is the moment the sink receives the batch; the store's commit comes
after it and is measured by the store's own bench. The debounce quiet period is
part of every latency and is printed separately, with the latency minus it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mnoted.sync.debounce import DebounceConfig, SettledBatch
from mnoted.sync.watcher import ReconcileReason, Watcher, WatcherConfig


class TimingSink:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.arrivals: list[tuple[float, SettledBatch]] = []
        self.changes = 0
        self.signals: list[ReconcileReason] = []

    def on_changes(self, batch: SettledBatch) -> None:
        now = time.monotonic()
        with self.cond:
            self.arrivals.append((now, batch))
            self.changes += len(batch.paths)
            self.cond.notify_all()

    def on_reconcile_needed(self, reason: ReconcileReason, detail: str) -> None:
        with self.cond:
            self.signals.append(reason)

    def wait_changes(self, count: int, timeout: float = 30.0) -> float:
        """Wait until ``count`` changes arrived; return the arrival time of the last batch."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.changes < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"only {self.changes} of {count} changes arrived")
                self.cond.wait(left)
            return self.arrivals[-1][0]


def write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def save_in_place(root: Path, i: int) -> None:
    write(root / "note.md", b"# note\nrevision %d\n" % i)


def save_by_rename(root: Path, i: int) -> None:  # gedit, sed -i, mnoted's own writes
    write(root / ".goutputstream-BENCH", b"# note\nrevision %d\n" % i)
    os.rename(root / ".goutputstream-BENCH", root / "note.md")


def save_vim(root: Path, i: int) -> None:
    os.rename(root / "note.md", root / "note.md~")
    write(root / "note.md", b"# note\nrevision %d\n" % i)
    os.unlink(root / "note.md~")


PATTERNS: dict[str, Callable[[Path, int], None]] = {
    "write in place (VS Code, cp)": save_in_place,
    "temp + rename (gedit, sed -i)": save_by_rename,
    "rename aside + write (vim)": save_vim,
}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_latency(base: Path, saves: int, config: DebounceConfig) -> None:
    window = config.quiet_period + config.coalesce
    shown = f"debounce window {window * 1000:.0f} ms = quiet period + coalesce"
    print(f"\n## save -> settled batch ({saves} saves per pattern; {shown})")
    print(f"{'pattern':34} {'median':>9} {'p99':>9} {'median-window':>14} {'p99-window':>11}")
    for name, pattern in PATTERNS.items():
        root = base / f"latency-{len(name)}"
        root.mkdir()
        (root / "note.md").write_text("# note\n")
        sink = TimingSink()
        watcher = Watcher(root, sink, config=WatcherConfig(debounce=config))
        watcher.start()
        samples: list[float] = []
        try:
            for i in range(saves):
                started = time.monotonic()
                pattern(root, i)
                arrived = sink.wait_changes(i + 1)
                samples.append(arrived - started)
                time.sleep(0.005)
        finally:
            watcher.stop(flush=False)
        med, p99 = statistics.median(samples), pct(samples, 0.99)
        print(
            f"{name:34} {med * 1000:8.1f}ms {p99 * 1000:8.1f}ms "
            f"{(med - window) * 1000:13.1f}ms {(p99 - window) * 1000:10.1f}ms"
        )


def bench_burst(base: Path, files: int, config: DebounceConfig) -> None:
    root = base / "burst"
    folders = 10
    for f in range(folders):
        (root / f"f{f}").mkdir(parents=True)
    sink = TimingSink()
    watcher = Watcher(root, sink, config=WatcherConfig(debounce=config))
    watcher.start()
    try:
        first = time.monotonic()
        for i in range(files):
            write(root / f"f{i % folders}" / f"n{i:05}.md", b"burst %d\n" % i)
        last_write = time.monotonic()
        done = sink.wait_changes(files, timeout=120)
        health = watcher.health()
    finally:
        watcher.stop(flush=False)
    print(f"\n## burst of {files} new files in {folders} folders")
    print(f"writing took                 {(last_write - first) * 1000:8.1f} ms")
    print(f"last write -> last settled   {(done - last_write) * 1000:8.1f} ms")
    print(f"first write -> all settled   {(done - first) * 1000:8.1f} ms")
    print(f"batches                      {len(sink.arrivals):8d}")
    print(f"overflows                    {health.overflows:8d}")


def make_tree(root: Path, files: int, per_folder: int) -> int:
    folders = 0
    for i in range(files):
        if i % per_folder == 0:
            folder = root / f"g{i // (per_folder * 100):03}" / f"d{i // per_folder:06}"
            folder.mkdir(parents=True)
            folders += 1
        (folder / f"n{i:06}.md").write_bytes(b"# note\n")
    return folders


def bench_startup(base: Path, label: str, files: int, per_folder: int) -> None:
    root = base / f"tree-{files}-{per_folder}"
    root.mkdir()
    built = time.monotonic()
    folders = make_tree(root, files, per_folder)
    built = time.monotonic() - built
    sink = TimingSink()
    watcher = Watcher(root, sink, config=WatcherConfig())
    started = time.monotonic()
    watcher.start()
    elapsed = time.monotonic() - started
    health = watcher.health()
    for _ in os.walk(root):  # a reader of the whole tree: must not flood the queue
        pass
    deepest = max(root.rglob("*.md"))
    write(deepest, b"# changed\n")
    sink.wait_changes(1, timeout=30)
    time.sleep(1.0)
    overflows = watcher.health().overflows
    watcher.stop(flush=False)
    print(
        f"{label:28} {files:>8} {folders:>8} {elapsed * 1000:9.0f} ms "
        f"{health.watch_count:>8} {overflows:>9} {built:7.1f} s"
    )


def bench_default_event_set(base: Path, folders: int) -> None:
    """watchdog's default event set on many folders: reading the tree floods the queue."""
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers.inotify import InotifyObserver

    root = base / "default-set"
    for i in range(folders):
        (root / f"g{i // 100:03}" / f"d{i:05}").mkdir(parents=True)
    overflows: list[float] = []

    import logging

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "overflowed" in record.getMessage():
                overflows.append(time.monotonic())

    logger = logging.getLogger("watchdog.observers.inotify_c")
    handler = Count()
    logger.addHandler(handler)
    logger.propagate = False  # counted, not printed
    logging.getLogger("watchdog.observers.inotify").setLevel(logging.ERROR)
    observer = InotifyObserver()
    observer.schedule(FileSystemEventHandler(), str(root), recursive=True)
    observer.start()
    try:
        for _ in os.walk(root):  # any reader of the tree (grep -r, an indexer, the rebuild)
            pass
        time.sleep(3)
        n_first = len(overflows)
        time.sleep(3)
    finally:
        observer.stop()
        observer.join(10)
        logger.removeHandler(handler)
    print(f"\n## watchdog default event set, {folders} folders, one os.walk of the tree")
    print(f"overflows in the first 3 s: {n_first}; in the next 3 s: {len(overflows) - n_first}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--saves", type=int, default=200)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--large", action="store_true", help="also a 100,000-file workspace")
    parser.add_argument("--compare-default-events", action="store_true")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the trees")
    args = parser.parse_args()
    config = DebounceConfig()
    print(
        f"debounce: quiet {config.quiet_period}s, coalesce {config.coalesce}s, "
        f"max delay {config.max_delay}s, "
        f"close timeout {config.close_timeout}s"
    )
    base = Path(tempfile.mkdtemp(prefix="mnoted-bench-watch-", dir=args.dir))
    try:
        bench_latency(base, args.saves, config)
        bench_burst(base, args.burst, config)
        print("\n## start-up (watches in place) and watch count")
        print(
            f"{'workspace':28} {'files':>8} {'folders':>8} {'start-up':>12} {'watches':>8} "
            f"{'overflows':>9} {'build':>9}"
        )
        bench_startup(base, "10,000 files, 10 per folder", 10_000, 10)
        bench_startup(base, "10,000 folders, 1 file each", 10_000, 1)
        if args.large:
            bench_startup(base, "100,000 files, 10 per folder", 100_000, 10)
        if args.compare_default_events:
            bench_default_event_set(base, 10_000)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
