"""watchdog's public observer, where no inotify instance can be had.

Not Linux, or ``inotify_init1`` refused (``EMFILE``: ``fs.inotify.max_user_instances``
reached): watchdog's ``PollingObserver`` on Linux (its ``Observer`` would be inotify
again), the platform's ``Observer`` elsewhere. Its threads hand events to the watcher,
which folds them into the same debouncer and wakes its own thread. Nothing watchdog
keeps private is used.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from mnoted.sync.debounce import EventKind
from mnoted.sync.events import Event

__all__ = ["start_observer"]

logger = logging.getLogger(__name__)

_WATCHDOG_KINDS = {
    "created": EventKind.CREATED,
    "modified": EventKind.MODIFIED,
    "closed": EventKind.CLOSED,
    "deleted": EventKind.DELETED,
    "moved": EventKind.MOVED,
}
_DIR_KINDS = frozenset({EventKind.CREATED, EventKind.DELETED, EventKind.MOVED})


class _Handler(FileSystemEventHandler):
    """Events of watchdog's observer (the fallback), handed to the watcher."""

    def __init__(self, intake: Callable[[Iterable[Event]], None], wake: Callable[[], None]) -> None:
        self._intake = intake
        self._wake = wake

    def dispatch(self, event: FileSystemEvent) -> None:
        try:
            kind = _WATCHDOG_KINDS.get(event.event_type)
            if kind is None or (event.is_directory and kind not in _DIR_KINDS):
                return  # opened, closed without writing, a folder's own times
            dest = os.fsdecode(event.dest_path) if kind is EventKind.MOVED else None
            self._intake([(kind, os.fsdecode(event.src_path), dest, event.is_directory)])
            self._wake()
        except Exception:  # watchdog's thread must survive anything we do
            logger.exception("sync: failed to handle %r", event)


def start_observer(
    root: str,
    intake: Callable[[Iterable[Event]], None],
    wake: Callable[[], None],
    why: OSError,
    poll_interval: float,
) -> tuple[BaseObserver, str]:
    """A started observer of ``root`` feeding ``intake``, and a note saying why it serves."""
    observer: BaseObserver
    if sys.platform.startswith("linux"):
        observer = PollingObserver(timeout=poll_interval)
    else:
        observer = Observer()
    observer.name = "mnoted-sync-fallback"
    observer.schedule(_Handler(intake, wake), root, recursive=True)
    observer.start()
    note = (
        f"inotify unavailable ({why.strerror or why}): watching through watchdog's "
        f"{type(observer).__name__}"
    )
    logger.warning("sync: %s for %s", note, root)
    return observer, note
