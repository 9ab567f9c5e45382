"""Edits made outside mnoted, turned into settled batches of dirty paths for the store.

``debounce`` and ``ignore`` are pure (time and Git's ignore rules are
injected); ``own_writes`` reads files; ``inotify`` reads the kernel's events;
``watcher`` owns the one thread that reads them and delivers. See docs/sync.md.
"""

from mnoted.sync.debounce import (
    DebounceConfig,
    Debouncer,
    EventKind,
    FsEvent,
    SettledBatch,
)
from mnoted.sync.gitstatus import changes_by_git
from mnoted.sync.ignore import IgnoreReason, IgnoreRules, is_temp
from mnoted.sync.own_writes import ABSENT, OwnWrites, blob_id, read_blob_id
from mnoted.sync.watcher import (
    ReconcileReason,
    SyncSink,
    Watcher,
    WatcherConfig,
    WatcherHealth,
    WatcherState,
)

__all__ = [
    "ABSENT",
    "DebounceConfig",
    "Debouncer",
    "EventKind",
    "FsEvent",
    "IgnoreReason",
    "IgnoreRules",
    "OwnWrites",
    "ReconcileReason",
    "SettledBatch",
    "SyncSink",
    "Watcher",
    "WatcherConfig",
    "WatcherHealth",
    "WatcherState",
    "blob_id",
    "changes_by_git",
    "is_temp",
    "read_blob_id",
]
