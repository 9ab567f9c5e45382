"""Shared fixtures of the sync tests: a clean environment, a workspace, a recording sink."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pygit2
import pytest

from mnoted.sync.debounce import DebounceConfig, SettledBatch
from mnoted.sync.ignore import IgnoreRules
from mnoted.sync.watcher import ReconcileReason, Watcher, WatcherConfig

QUIET = 0.15
"""Quiet period of the real-watcher tests: short, but far longer than an editor's save
(microseconds between its system calls), with room for a loaded CI machine."""


@pytest.fixture(autouse=True)
def clean_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No GIT_* leaks from the caller; HOME and XDG dirs point at a temp folder."""
    for name in list(os.environ):
        if name.startswith("GIT_"):
            monkeypatch.delenv(name)
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(home / var.lower()))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home / "run"))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "test@example.invalid")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "test@example.invalid")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


class RecordingSink:
    """Collects what the watcher delivers; waits for it with a timeout."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root
        self.batches: list[SettledBatch] = []
        self.read_at_delivery: list[tuple[str, bytes | None]] = []
        self.signals: list[tuple[ReconcileReason, str]] = []
        self.fail_next = 0
        self._cond = threading.Condition()

    def on_changes(self, batch: SettledBatch) -> None:
        with self._cond:
            if self.fail_next:
                self.fail_next -= 1
                raise RuntimeError("sink refused the batch")
            self.batches.append(batch)
            if self.root is not None:  # what a store reading the files now would commit
                for path in batch.paths:
                    try:
                        data: bytes | None = (self.root / path).read_bytes()
                    except OSError:
                        data = None
                    self.read_at_delivery.append((path, data))
            self._cond.notify_all()

    def on_reconcile_needed(self, reason: ReconcileReason, detail: str) -> None:
        with self._cond:
            self.signals.append((reason, detail))
            self._cond.notify_all()

    @property
    def paths(self) -> list[str]:
        """Every delivered path, in delivery order."""
        with self._cond:
            return [p for b in self.batches for p in b.paths]

    def reasons(self) -> list[ReconcileReason]:
        with self._cond:
            return [r for r, _ in self.signals]

    def wait(self, predicate: Callable[[RecordingSink], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def clear(self) -> None:
        with self._cond:
            self.batches.clear()
            self.signals.clear()


def wait_quiet(watcher: Watcher, quiet: float = 0.6, timeout: float = 15.0) -> None:
    """Wait until no event arrived for ``quiet`` s and nothing is pending.

    0.6 s covers the reader's 0.5 s hold of an IN_MOVED_FROM read last (docs/sync.md).
    """
    deadline = time.monotonic() + timeout
    last = watcher.health().events_seen
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        health = watcher.health()
        if health.events_seen != last:
            last, stable_since = health.events_seen, time.monotonic()
        elif health.pending == 0 and time.monotonic() - stable_since >= quiet:
            return
    raise AssertionError(f"watcher never went quiet: {watcher.health()}")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    pygit2.init_repository(str(root))
    return root


@pytest.fixture
def sink(workspace: Path) -> RecordingSink:
    return RecordingSink(workspace)


WatcherFactory = Callable[..., Watcher]
QuietFn = Callable[[Watcher], None]


@pytest.fixture
def make_watcher(workspace: Path, sink: RecordingSink) -> Iterator[WatcherFactory]:
    """Start a real watcher on ``workspace``; stopped at the end of the test."""
    started: list[Watcher] = []

    def make(
        root: Path | None = None,
        *,
        ignore: IgnoreRules | None = None,
        **config: Any,
    ) -> Watcher:
        config.setdefault("debounce", DebounceConfig(QUIET, 2.0, 0.5))
        cfg = WatcherConfig(**config)
        watcher = Watcher(root or workspace, sink, config=cfg, ignore=ignore)
        watcher.start()
        started.append(watcher)
        return watcher

    yield make
    for watcher in started:
        watcher.stop(flush=False)


@pytest.fixture
def quiet() -> QuietFn:
    """``quiet(watcher)``: wait until the watcher has nothing left to deliver."""
    return wait_quiet
