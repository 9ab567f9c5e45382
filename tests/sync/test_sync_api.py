"""Pin the public API of mnoted.sync and keep its pure modules pure."""

from __future__ import annotations

import ast
from pathlib import Path

import mnoted.sync

SYNC = Path(mnoted.sync.__file__).parent


def test_public_api_is_pinned() -> None:
    assert sorted(mnoted.sync.__all__) == sorted(
        [
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
    )
    for name in mnoted.sync.__all__:
        assert getattr(mnoted.sync, name) is not None


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_pure_modules_do_no_io_and_never_import_the_store() -> None:
    allowed = {
        "__future__",
        "collections",
        "collections.abc",
        "dataclasses",
        "enum",
        "heapq",
        "itertools",
        "re",
        "threading",
    }
    for name in ("debounce.py", "ignore.py"):
        assert imported_modules(SYNC / name) <= allowed, name
    for path in SYNC.glob("*.py"):
        assert not any(m.startswith("mnoted.store") for m in imported_modules(path)), path
