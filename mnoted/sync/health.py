"""What the watcher is configured with, reports, and calls (docs/sync.md, *Failure modes*)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from mnoted.sync.debounce import DebounceConfig, SettledBatch

__all__ = [
    "Counters",
    "ReconcileReason",
    "SyncSink",
    "WatcherConfig",
    "WatcherHealth",
    "WatcherState",
]


class ReconcileReason(StrEnum):
    """Why the watcher asks for a reconciliation pass."""

    STARTED = "started"  # watches are in place: catch up on edits made before
    QUEUE_OVERFLOW = "queue_overflow"  # the kernel dropped events
    WATCH_LIMIT = "watch_limit"  # some folders are not watched (fs.inotify.max_user_watches)
    WATCHER_DIED = "watcher_died"  # reading events failed; events since then are unknown
    WATCHER_UNAVAILABLE = "watcher_unavailable"  # the watch could not be set up at all
    ROOT_GONE = "root_gone"  # the workspace folder was removed or moved
    SINK_FAILED = "sink_failed"  # on_changes raised: that batch was not applied


class WatcherState(StrEnum):
    STOPPED = "stopped"
    RUNNING = "running"  # every folder watched
    DEGRADED = "degraded"  # watching, but not every folder (watch limit): periodic reconcile
    FAILED = "failed"  # not watching; periodic reconcile, restart attempts if enabled


class SyncSink(Protocol):
    """What the watcher calls, always from its one thread."""

    def on_changes(self, batch: SettledBatch) -> Future[Any] | None:
        """Commit what differs at the settled paths (the store compares content with the
        index), or return a future of that commit made elsewhere: the watcher then reads
        events meanwhile and delivers the next batch once it is done."""

    def on_reconcile_needed(self, reason: ReconcileReason, detail: str) -> None:
        """Compare the whole working tree with the index by content, then call the
        watcher's ``mark_reconciled`` with the generation read before starting."""


@dataclass(frozen=True, slots=True)
class WatcherConfig:
    """Knobs of the watcher; ``watch_limit`` caps inotify watches below the kernel's
    (leave room for other programs, or test the limit without touching sysctl)."""

    debounce: DebounceConfig = field(default_factory=DebounceConfig)
    fallback_interval: float = 30.0
    liveness_interval: float = 0.5
    auto_restart: bool = True
    restart_backoff: float = 1.0
    restart_backoff_max: float = 60.0
    watch_limit: int | None = None
    poll_interval: float = 1.0  # watchdog's polling observer, where inotify is missing


@dataclass(frozen=True, slots=True)
class WatcherHealth:
    """A snapshot for the daemon's status endpoint and for tests.

    Times are in the watcher's clock (``time.monotonic`` by default).
    """

    state: WatcherState
    running: bool
    watch_count: int | None
    watch_limit_hit: bool
    watch_failures: int
    overflows: int
    last_event_at: float | None
    pending: int
    events_seen: int
    events_ignored: int
    batches_delivered: int
    changes_delivered: int
    own_writes_dropped: int
    needs_reconcile: bool
    reconcile_generation: int
    reconcile_reasons: tuple[ReconcileReason, ...]
    restarts: int
    startup_seconds: float | None
    last_error: str | None


@dataclass(slots=True)
class Counters:
    """The watcher's running counts (kept under its lock), as :class:`WatcherHealth` has them."""

    watch_failures: int = 0
    overflows: int = 0
    events_seen: int = 0
    events_ignored: int = 0
    batches_delivered: int = 0
    changes_delivered: int = 0
    own_writes_dropped: int = 0
    restarts: int = 0
