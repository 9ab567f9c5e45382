"""Watch a workspace with inotify and hand settled changes to a sink.

Threads: watchdog's inotify reader, its emitter and its dispatcher produce
events; :class:`Watcher` normalizes them, drops ``.git/`` at once and folds the
rest into a :class:`~mnoted.sync.debounce.Debouncer` under one lock. A driver
thread sleeps until the debouncer's next deadline and calls the sink. Every sink
call comes from that one driver thread.

Events can be lost (queue overflow, watch limit, a dead thread). None of these
crash the watcher: each sets ``needs_reconcile`` in :meth:`Watcher.health` and
calls ``sink.on_reconcile_needed`` so the integrator compares the working tree
with the index by content. While watching is incomplete (watch limit) or down,
that signal repeats every ``fallback_interval`` seconds.

Linux only (inotify); this module relies on watchdog 7.1's inotify internals
(``InotifyFD``, ``InotifyWatchGroup``) to see overflows, watch-limit errors and
to keep ``.git/`` unwatched, which watchdog's public API does not expose.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver
from watchdog.observers.inotify import InotifyEmitter, InotifyWatchGroup
from watchdog.observers.inotify_c import (
    CallbackId,
    InotifyConstants,
    InotifyEvent,
    InotifyFD,
    Mask,
    Watch,
    WatchCallback,
    WatchDescriptor,
)
from watchdog.observers.inotify_move_event_grouper import PathedInotifyEvent

from mnoted.errors import MnoteError
from mnoted.sync import listing
from mnoted.sync.debounce import (
    ChangeKind,
    DebounceConfig,
    Debouncer,
    EventKind,
    FsEvent,
    SettledBatch,
    SettledChange,
)
from mnoted.sync.ignore import INTERNAL_DIRS, MNOTE_TEMP_PREFIX, IgnoreRules, is_internal
from mnoted.sync.own_writes import Content, OwnWrites, read_blob_id_at

__all__ = [
    "EVENT_FILTER",
    "ReconcileReason",
    "SyncSink",
    "Watcher",
    "WatcherConfig",
    "WatcherHealth",
    "WatcherState",
]

logger = logging.getLogger(__name__)

EVENT_FILTER: tuple[type[FileSystemEvent], ...] = (
    FileCreatedEvent,  # IN_CREATE, and IN_MOVED_TO from outside the workspace
    FileModifiedEvent,  # IN_MODIFY: data written (a writer that never closes, truncate(2))
    FileAttribEvent,  # IN_ATTRIB: mode changes (Git tracks the executable bit)
    FileClosedEvent,  # IN_CLOSE_WRITE: the writer is done; ends "writing" in the debouncer
    FileDeletedEvent,  # IN_DELETE, and IN_MOVED_FROM to outside the workspace
    FileMovedEvent,  # IN_MOVED_FROM + IN_MOVED_TO paired by cookie: renames
    DirCreatedEvent,  # new folders get watches; their content is rescanned
    DirDeletedEvent,  # a folder removed or moved out: its files are rescanned
    DirMovedEvent,  # folder renames (watchdog also reports each file inside)
)
"""What mnoted subscribes to. Never IN_OPEN / IN_ACCESS / IN_CLOSE_NOWRITE: reads
(including the watcher's own walk of new folders and Git reading objects)
would flood the queue; that is what overflows watchdog's default set at about
5,000 folders."""

_PRUNED_DIRS = frozenset(os.fsencode(d) for d in INTERNAL_DIRS)
_TEMP_NAME = os.fsencode(MNOTE_TEMP_PREFIX)
_CREATE_DIR = Mask(InotifyConstants.IN_CREATE | InotifyConstants.IN_ISDIR)
_CREATE_FILE = Mask(InotifyConstants.IN_CREATE)
_MAX_OWN_RENAMES = 1024

_FILE_KINDS: dict[type[FileSystemEvent], EventKind] = {
    FileCreatedEvent: EventKind.CREATED,
    FileModifiedEvent: EventKind.MODIFIED,
    FileClosedEvent: EventKind.CLOSED,
    FileAttribEvent: EventKind.ATTRIB,
    FileDeletedEvent: EventKind.DELETED,
    FileMovedEvent: EventKind.MOVED,
}
_DIR_KINDS: dict[type[FileSystemEvent], EventKind] = {
    DirCreatedEvent: EventKind.CREATED,
    DirDeletedEvent: EventKind.DELETED,
    DirMovedEvent: EventKind.MOVED,
}


class ReconcileReason(StrEnum):
    """Why the watcher asks for a reconciliation pass."""

    STARTED = "started"  # watches are in place: catch up on edits made before
    QUEUE_OVERFLOW = "queue_overflow"  # the kernel dropped events
    WATCH_LIMIT = "watch_limit"  # some folders are not watched (fs.inotify.max_user_watches)
    WATCHER_DIED = "watcher_died"  # a watcher thread ended; events since then are unknown
    WATCHER_UNAVAILABLE = "watcher_unavailable"  # the watch could not be set up at all
    ROOT_GONE = "root_gone"  # the workspace folder was removed or moved
    SINK_FAILED = "sink_failed"  # on_changes raised: that batch was not applied


class WatcherState(StrEnum):
    STOPPED = "stopped"
    RUNNING = "running"  # every folder watched
    DEGRADED = "degraded"  # watching, but not every folder (watch limit): periodic reconcile
    FAILED = "failed"  # not watching; periodic reconcile, restart attempts if enabled


class SyncSink(Protocol):
    """What the watcher calls, always from its one driver thread."""

    def on_changes(self, batch: SettledBatch) -> None:
        """Commit the settled changes (the store compares content with the index)."""

    def on_reconcile_needed(self, reason: ReconcileReason, detail: str) -> None:
        """Compare the whole working tree with the index by content, then call
        :meth:`Watcher.mark_reconciled` with the generation read before starting."""


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


class _Monitor(Protocol):
    def _on_overflow(self) -> None: ...
    def _is_own_rename(self, path: bytes) -> bool: ...
    def _on_watch_failure(self, path: bytes, exc: OSError) -> None: ...
    def _on_thread_died(self, name: str, exc: BaseException | None) -> None: ...


class _InotifyFD(InotifyFD):
    """watchdog's inotify reader, reporting overflows and failed watches."""

    def __init__(self, monitor: _Monitor, watch_limit: int | None) -> None:
        self._monitor = monitor
        self._watch_limit = watch_limit
        super().__init__()
        self.name = "mnoted-sync-inotify"

    @property
    def watch_count(self) -> int:
        with self._lock:
            return len(self._watch_for_wd)

    def _get_or_create_watch(self, path: bytes, mask: Mask) -> Watch:
        try:
            limit = self._watch_limit
            if limit is not None and len(self._watch_for_wd) >= limit:
                raise OSError(
                    errno.ENOSPC, "inotify watch limit reached (WatcherConfig.watch_limit)"
                )
            return super()._get_or_create_watch(path, mask)
        except OSError as exc:
            # watchdog swallows failures below the root: report them before it does.
            self._monitor._on_watch_failure(path, exc)
            raise

    def _add_callback(
        self, path: bytes, mask: Mask, callback: WatchCallback, id_: CallbackId
    ) -> WatchDescriptor:
        # A folder made just after its new parent is found twice: by the walk that follows
        # the parent's watch, and by its own creation event. watchdog keeps the one
        # callback but warns each time ("Callback with id ... already exists"), into the
        # daemon's log; the same watch and callback are kept here without a word.
        watch = self._get_or_create_watch(path, mask)
        watch.callbacks[id_] = callback
        return watch.wd

    def handle_event(self, event: InotifyEvent) -> None:
        # The store's temporary files come and go with every write (made, written, closed,
        # renamed): only the rename that puts one in place matters (the watch group below
        # looks at it). The rest is dropped here, before watchdog builds, pairs and
        # dispatches events that the ignore rules would drop anyway.
        if event.name.startswith(_TEMP_NAME) and not event.is_moved_from:
            return
        super().handle_event(event)
        if event.is_queue_overflow:
            # After watchdog has rebuilt the watches: a reconcile pass started on this
            # signal sees every edit, including those made while watches were missing.
            self._monitor._on_overflow()

    def run(self) -> None:
        try:
            super().run()
        except BaseException as exc:
            logger.exception("inotify reader thread died")
            self._monitor._on_thread_died(self.name, exc)


@dataclass(eq=False)
class _PrunedWatchGroup(InotifyWatchGroup):
    """Recursive watches that never enter ``.git/`` or ``.mnote/`` nor follow symlinks.

    The daemon's own commits write dozens of files under ``.git/``; not watching
    it drops those events before they exist and saves ~300 watches a repository.
    New folders are listed through folder fds (:mod:`mnoted.sync.listing`), not by
    path: a folder swapped for a symlink meanwhile is not listed through the link.
    """

    monitor: _Monitor | None = None
    # a store's temporary file renamed: its IN_MOVED_FROM, by cookie, until the IN_MOVED_TO
    _own_renames: dict[int, InotifyEvent] = field(default_factory=dict, init=False)

    def on_event(self, event: InotifyEvent) -> None:
        """Drop a file renamed into place that holds what the store said it wrote there
        (:class:`OwnWrites`): the store's own writes, made in a temporary file beside the
        page. A file exchanged with the page's old one (``renameat2(RENAME_EXCHANGE)``) also
        moves that file out: its ``IN_MOVED_FROM`` is dropped when the page's name holds the
        store's bytes.

        Left in, each of the store's writes woke three more threads to find, a quiet
        period later, that nothing had changed. Any other rename goes on, both halves in
        order, and is settled like an editor's save.
        """
        if event.is_moved_from and not event.is_directory:
            if event.name.startswith(_TEMP_NAME):
                if len(self._own_renames) >= _MAX_OWN_RENAMES:  # halves that never paired
                    for held in self._own_renames.values():
                        super().on_event(held)
                    self._own_renames.clear()
                self._own_renames[event.cookie] = event
                return
            if self._holds_own(event):
                return
        if event.is_moved_to and not event.is_directory:
            moved_from = self._own_renames.pop(event.cookie, None)
            if self._holds_own(event):
                return
            if moved_from is not None:
                super().on_event(moved_from)
        super().on_event(event)

    def _holds_own(self, event: InotifyEvent) -> bool:
        """Whether the name ``event`` is about holds what the store wrote there."""
        with self._lock:
            path = self._build_event_source_path(event)
        return path is not None and self.monitor is not None and self.monitor._is_own_rename(path)

    def _add_all_callbacks(self, path: bytes) -> None:
        if path != self.path and os.path.basename(path) in _PRUNED_DIRS:
            return
        self._add_callback(path)
        if not self.is_recursive:
            return
        for folder, subfolders, _ in listing.walk(self.path, path, _PRUNED_DIRS):
            for name in subfolders:
                self._add_callback(os.path.join(folder, name))

    def _recursive_simulate(self, src_path: bytes) -> list[InotifyEvent]:
        """Creations for what a new folder already holds (watchdog's, listed by fd)."""
        events = []
        for folder, subfolders, files in listing.walk(self.path, src_path, _PRUNED_DIRS):
            wd = self._active_callbacks_by_path.get(folder)
            if wd is None:
                continue  # not watched (yet): its own IN_CREATE reports its content
            for name in subfolders:
                events.append(InotifyEvent(wd, _CREATE_DIR, 0, name))
            for name in files:
                events.append(InotifyEvent(wd, _CREATE_FILE, 0, name))
        return events


class _Emitter(InotifyEmitter):
    def __init__(self, *args: Any, monitor: _Monitor, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._monitor = monitor
        self.name = "mnoted-sync-emitter"

    def on_thread_start(self) -> None:
        self._inotify = _PrunedWatchGroup(
            self._inotify_fd,
            os.fsencode(self.watch.path),
            is_recursive=self.watch.is_recursive,
            event_mask=self.get_event_mask_from_filter(),
            follow_symlink=False,
            monitor=self._monitor,
        )

    def build_and_queue_event(self, event: Any, *, full_events: bool = False) -> None:
        """watchdog's, except that a folder moved or moved in is listed through fds."""
        if not self.watch.is_recursive:
            super().build_and_queue_event(event, full_events=full_events)
        elif not isinstance(event, PathedInotifyEvent):
            move_from, move_to = event
            if not move_from.ev.is_directory:
                super().build_and_queue_event(event, full_events=full_events)
                return
            src, dest = self._decode_path(move_from.path), self._decode_path(move_to.path)
            self.queue_event(DirMovedEvent(src, dest))
            self.queue_event(DirModifiedEvent(os.path.dirname(src)))
            self.queue_event(DirModifiedEvent(os.path.dirname(dest)))
            for path, is_dir in self._below(move_to.path):
                old = self._decode_path(move_from.path + path[len(move_to.path) :])
                new = self._decode_path(path)
                self.queue_event(DirMovedEvent(old, new) if is_dir else FileMovedEvent(old, new))
        elif event.ev.is_moved_to and event.ev.is_directory and not full_events:
            folder = self._decode_path(event.path)
            self.queue_event(DirCreatedEvent(folder))
            self.queue_event(DirModifiedEvent(os.path.dirname(folder)))
            for sub, is_dir in self._below(event.path):
                created = self._decode_path(sub)
                self.queue_event(DirCreatedEvent(created) if is_dir else FileCreatedEvent(created))
        else:
            super().build_and_queue_event(event, full_events=full_events)

    def _below(self, folder: bytes) -> list[tuple[bytes, bool]]:
        """Every folder and file below ``folder``, listed through fds."""
        out: list[tuple[bytes, bool]] = []
        root = os.fsencode(self.watch.path)
        for parent, subfolders, files in listing.walk(root, folder):
            out.extend((os.path.join(parent, name), True) for name in subfolders)
            out.extend((os.path.join(parent, name), False) for name in files)
        return out

    def run(self) -> None:
        try:
            super().run()
        except BaseException as exc:
            logger.exception("inotify emitter thread died")
            self._monitor._on_thread_died(self.name, exc)


class _Observer(BaseObserver):
    def __init__(self, monitor: _Monitor, watch_limit: int | None) -> None:
        self.inotify_fd = _InotifyFD(monitor, watch_limit)
        self.inotify_fd.start()
        super().__init__(_Emitter, inotify_fd=self.inotify_fd, monitor=monitor)
        self._monitor = monitor
        self.name = "mnoted-sync-dispatch"

    def on_thread_stop(self) -> None:
        super().on_thread_stop()
        self.inotify_fd.stop()
        if self.inotify_fd.is_alive() and self.inotify_fd is not threading.current_thread():
            self.inotify_fd.join(timeout=5)

    def run(self) -> None:
        try:
            super().run()
        except BaseException as exc:
            logger.exception("watchdog dispatcher thread died")
            self._monitor._on_thread_died(self.name, exc)

    def dead_threads(self) -> list[str]:
        threads: list[threading.Thread] = [self, self.inotify_fd, *self.emitters]
        return [t.name for t in threads if not t.is_alive()]


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: Watcher) -> None:
        self._watcher = watcher

    def dispatch(self, event: FileSystemEvent) -> None:
        try:
            self._watcher._on_fs_event(event)
        except Exception:  # the dispatcher thread must survive anything we do
            logger.exception("sync: failed to handle %r", event)


def _identity(path: str) -> tuple[int, int]:
    """(device, inode): tells the watched folder from one put in its place."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _is_gitignore(rel: str) -> bool:
    return rel == ".gitignore" or rel.endswith("/.gitignore")


def _blob_reader(root: str) -> Callable[[str], Content | None]:
    def read(rel: str) -> Content | None:
        return read_blob_id_at(root, rel)  # through folder fds: a swapped folder is no way out

    return read


class Watcher:
    """Watch ``root`` recursively and deliver settled batches to ``sink``.

    ``ignore`` is the predicate of :mod:`mnoted.sync.ignore` (pass an
    :class:`IgnoreRules` wired to the repository's ``.gitignore``); its cache is
    invalidated when a ``.gitignore`` changes. ``own_writes`` is the registry the
    store fills before and after its writes.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        sink: SyncSink,
        *,
        config: WatcherConfig | None = None,
        ignore: IgnoreRules | None = None,
        own_writes: OwnWrites | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = os.path.realpath(os.fspath(root))
        self._prefix = self.root.rstrip(os.sep) + os.sep
        self._sink = sink
        self.config = config if config is not None else WatcherConfig()
        self.ignore = ignore if ignore is not None else IgnoreRules()
        self.own_writes = own_writes if own_writes is not None else OwnWrites()
        self._clock = clock
        self._read_blob = _blob_reader(self.root)
        # path → (stat data, registered content) of the last file found to be the store's
        # own when renamed into place (the inotify reader's thread only)
        self._own_seen: dict[str, tuple[object, ...]] = {}

        self._cond = threading.Condition(threading.Lock())
        self._debouncer = Debouncer(self.config.debounce, ignore=self.ignore)
        self._observer: _Observer | None = None
        self._observer_lock = threading.RLock()  # start / retire of the watchdog threads
        self._closing = False
        self._root_identity: tuple[int, int] | None = None
        self._driver: threading.Thread | None = None
        self._stopping = False
        self._planned_wake = float("-inf")
        self._flush_waiters: list[threading.Event] = []
        self._signals: deque[tuple[ReconcileReason, str]] = deque()

        self._state = WatcherState.STOPPED
        self._watch_limit_hit = False
        self._watch_failures = 0
        self._overflows = 0
        self._last_event_at: float | None = None
        self._events_seen = 0
        self._events_ignored = 0
        self._batches = 0
        self._changes = 0
        self._own_dropped = 0
        self._needs_reconcile = False
        self._generation = 0
        self._reasons: list[ReconcileReason] = []
        self._restarts = 0
        self._startup_seconds: float | None = None
        self._last_error: str | None = None
        self._next_restart: float | None = None
        self._backoff = self.config.restart_backoff
        self._next_fallback: float | None = None
        self._fallback_reason = ReconcileReason.WATCHER_DIED  # repeated while not RUNNING

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> WatcherHealth:
        """Set up the watches (blocking until they are in place) and the driver thread.

        Never raises for filesystem trouble: a watch that cannot be set up
        leaves the watcher FAILED or DEGRADED and asks for reconciliation.
        """
        with self._cond:
            if self._driver is not None and self._driver.is_alive():
                raise RuntimeError("watcher already started")
            self._stopping = False
        with self._observer_lock:
            self._closing = False
        self._start_observer()
        driver = threading.Thread(target=self._drive, name="mnoted-sync-driver", daemon=True)
        self._driver = driver
        driver.start()
        return self.health()

    def stop(self, *, flush: bool = True, timeout: float = 10.0) -> None:
        """Stop watching; with ``flush`` pending changes are delivered first."""
        with self._observer_lock:
            self._closing = True  # no restart from the driver from now on
            self._retire_observer()
        with self._cond:
            self._stopping = True
            if not flush:
                self._debouncer = Debouncer(self.config.debounce, ignore=self.ignore)
            self._cond.notify_all()
        driver = self._driver
        if driver is not None and driver is not threading.current_thread():
            driver.join(timeout)
        self._driver = None
        with self._cond:
            self._state = WatcherState.STOPPED

    def restart(self) -> WatcherHealth:
        """Tear down and rebuild the watches (after a failure); the driver keeps running."""
        with self._observer_lock:
            self._retire_observer()
            with self._cond:
                self._restarts += 1
            self._start_observer()
        with self._cond:
            self._cond.notify_all()
        return self.health()

    def __enter__(self) -> Watcher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- integration API -------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> bool:
        """Deliver everything pending now (before shutdown, or to sync explicitly).

        Returns False if the driver did not get to it within ``timeout``.
        """
        done = threading.Event()
        with self._cond:
            if self._driver is None or not self._driver.is_alive():
                return False
            self._flush_waiters.append(done)
            self._cond.notify_all()
        return done.wait(timeout)

    def is_pending(self, rel_path: str) -> bool:
        """Whether ``rel_path`` has an external change waiting for its quiet period."""
        with self._cond:
            return self._debouncer.is_pending(rel_path)

    def take_pending(self, paths: list[str]) -> SettledBatch | None:
        """Remove and return the pending changes of ``paths`` (the caller applies them).

        For a tool write on a path with a debounced external edit: the store
        commits these first, then judges its write against them.
        """
        with self._cond:
            return self._debouncer.take(paths, self._clock())

    def mark_reconciled(self, generation: int) -> None:
        """Clear ``needs_reconcile`` if no new signal came after ``generation``."""
        with self._cond:
            if generation >= self._generation:
                self._needs_reconcile = False
                self._reasons.clear()

    def health(self) -> WatcherHealth:
        observer = self._observer
        watch_count = observer.inotify_fd.watch_count if observer is not None else None
        driver = self._driver
        with self._cond:
            state = self._state
            if state is not WatcherState.STOPPED and (driver is None or not driver.is_alive()):
                state = WatcherState.FAILED  # nothing would be delivered
            return WatcherHealth(
                state=state,
                running=state in (WatcherState.RUNNING, WatcherState.DEGRADED),
                watch_count=watch_count,
                watch_limit_hit=self._watch_limit_hit,
                watch_failures=self._watch_failures,
                overflows=self._overflows,
                last_event_at=self._last_event_at,
                pending=self._debouncer.pending_count,
                events_seen=self._events_seen,
                events_ignored=self._events_ignored,
                batches_delivered=self._batches,
                changes_delivered=self._changes,
                own_writes_dropped=self._own_dropped,
                needs_reconcile=self._needs_reconcile,
                reconcile_generation=self._generation,
                reconcile_reasons=tuple(self._reasons),
                restarts=self._restarts,
                startup_seconds=self._startup_seconds,
                last_error=self._last_error,
            )

    # -- observer management ---------------------------------------------------

    def _start_observer(self) -> bool:
        with self._observer_lock:
            if self._closing:
                return False
            return self._start_observer_locked()

    def _start_observer_locked(self) -> bool:
        started = self._clock()
        with self._cond:
            self._watch_limit_hit = False
        observer: _Observer | None = None
        try:
            observer = _Observer(self, self.config.watch_limit)
            observer.schedule(
                _Handler(self), self.root, recursive=True, event_filter=list(EVENT_FILTER)
            )
            observer.start()
            self._root_identity = _identity(self.root)
        except OSError as exc:
            if observer is not None:
                observer.inotify_fd.stop()
            reason = ReconcileReason.WATCHER_UNAVAILABLE
            if exc.errno == errno.ENOSPC:
                reason = ReconcileReason.WATCH_LIMIT
            elif not os.path.isdir(self.root):
                reason = ReconcileReason.ROOT_GONE
            message = f"cannot watch {self.root}: {exc}"
            logger.error("sync: %s; falling back to periodic reconciliation", message)
            with self._cond:
                self._state = WatcherState.FAILED
                self._last_error = message
                self._fallback_reason = reason
                self._schedule_restart_locked()
                self._signal_locked(reason, message)
            return False
        with self._cond:
            self._observer = observer
            self._startup_seconds = self._clock() - started
            self._state = WatcherState.DEGRADED if self._watch_limit_hit else WatcherState.RUNNING
            self._backoff = self.config.restart_backoff
            self._next_restart = None
            self._signal_locked(ReconcileReason.STARTED, f"watching {self.root}")
        return True

    def _retire_observer(self) -> None:
        with self._observer_lock:
            observer, self._observer = self._observer, None
            if observer is not None:
                self._stop_observer(observer)

    @staticmethod
    def _stop_observer(observer: _Observer) -> None:
        try:
            if observer.is_alive():
                observer.stop()
                if observer is not threading.current_thread():
                    observer.join(timeout=5)
            else:
                observer.on_thread_stop()
        except Exception:
            logger.exception("sync: error while stopping the watcher threads")

    def _schedule_restart_locked(self) -> None:
        if self.config.auto_restart:
            self._next_restart = self._clock() + self._backoff
            self._backoff = min(self._backoff * 2, self.config.restart_backoff_max)
        if self._next_fallback is None:
            self._next_fallback = self._clock() + self.config.fallback_interval

    # -- monitor callbacks (watchdog threads) -----------------------------------

    def _on_overflow(self) -> None:
        logger.warning("sync: inotify queue overflowed under %s; reconciling", self.root)
        with self._cond:
            self._overflows += 1
            self._signal_locked(ReconcileReason.QUEUE_OVERFLOW, "the kernel dropped events")

    def _is_own_rename(self, path: bytes) -> bool:
        """Whether the file just renamed to ``path`` holds what the store registered for it
        (then the rename's events are dropped at once, and counted).

        An exchange reports the page's name twice: the second check finds the stat data the
        first one read the file under, for the same registered content, and reads nothing.
        A write in place since would carry events of its own (``IN_MODIFY``), never dropped.
        """
        rel = self._relative(os.fsdecode(path))
        registry = self.own_writes
        expected = registry.registered(rel) if rel else None
        if not rel or expected is None:
            return False
        try:
            st = os.lstat(path)  # (before the read: a change after it shows in the next one)
            seen: tuple[object, ...] | None = (
                (st.st_ino, st.st_dev, st.st_size, st.st_mode, st.st_mtime_ns, st.st_ctime_ns),
                expected,
            )
        except OSError:
            seen = None
        if seen is None or self._own_seen.get(rel) != seen:
            if not registry.is_own(
                SettledChange(ChangeKind.MODIFIED, rel), {rel: self._read_blob(rel)}
            ):
                return False
            if seen is not None:
                if len(self._own_seen) >= _MAX_OWN_RENAMES:
                    self._own_seen.clear()
                self._own_seen[rel] = seen
        registry.dropped += 1
        with self._cond:
            self._own_dropped += 1
        return True

    def _on_watch_failure(self, path: bytes, exc: OSError) -> None:
        shown = os.fsdecode(path)
        with self._cond:
            self._watch_failures += 1
            if exc.errno == errno.ENOSPC:
                first = not self._watch_limit_hit
                self._watch_limit_hit = True
                if self._state is WatcherState.RUNNING:
                    self._state = WatcherState.DEGRADED
                if first:
                    message = (
                        f"inotify watch limit reached at {shown}: folders beyond it are not "
                        "watched; raise fs.inotify.max_user_watches. Falling back to "
                        f"reconciliation every {self.config.fallback_interval:g} s"
                    )
                    logger.error("sync: %s", message)
                    self._last_error = message
                    self._fallback_reason = ReconcileReason.WATCH_LIMIT
                    self._next_fallback = self._clock() + self.config.fallback_interval
                    self._signal_locked(ReconcileReason.WATCH_LIMIT, message)
            else:
                self._last_error = f"cannot watch {shown}: {exc}"
                logger.warning("sync: %s", self._last_error)

    def _on_thread_died(self, name: str, exc: BaseException | None) -> None:
        with self._cond:
            self._last_error = f"watcher thread {name} died: {exc!r}"
            self._cond.notify_all()

    # -- event intake (watchdog dispatcher thread) -------------------------------

    def _on_fs_event(self, event: FileSystemEvent) -> None:
        src = os.fsdecode(event.src_path)
        rel = self._relative(src)
        if rel is None:
            return
        if rel == "":
            return  # the root itself: its loss is noticed by the liveness check
        is_dir = event.is_directory
        kinds = _DIR_KINDS if is_dir else _FILE_KINDS
        kind = kinds.get(type(event))
        if kind is None or (is_dir and event.is_synthetic):
            return
        dest: str | None = None
        if kind is EventKind.MOVED:
            dest = self._relative(os.fsdecode(event.dest_path))
            if dest is None or dest == "":
                kind, dest = EventKind.DELETED, None
        # .git/ and .mnote/ are not watched; their top entries still show at the root.
        if is_internal(rel) and (dest is None or is_internal(dest)):
            with self._cond:
                self._events_seen += 1
                self._events_ignored += 1
            return
        if not is_dir and (_is_gitignore(rel) or (dest is not None and _is_gitignore(dest))):
            self.ignore.invalidate()
        fs_event = FsEvent(kind, rel, dest, is_dir)
        with self._cond:
            now = self._clock()
            self._events_seen += 1
            if self._debouncer.add(fs_event, now):
                self._last_event_at = now
                if now + self.config.debounce.quiet_period < self._planned_wake:
                    self._cond.notify_all()
            else:
                self._events_ignored += 1

    def _relative(self, path: str) -> str | None:
        if path == self.root:
            return ""
        if not path.startswith(self._prefix):
            return None
        rel = path[len(self._prefix) :]
        return rel.replace(os.sep, "/") if os.sep != "/" else rel

    # -- driver thread -----------------------------------------------------------

    def _drive(self) -> None:
        while True:
            try:
                if not self._drive_once():
                    return
            except Exception as exc:  # a bug here must not silently end delivery
                logger.exception("sync: driver iteration failed")
                with self._cond:
                    self._last_error = f"sync driver error: {exc!r}"
                    self._signal_locked(ReconcileReason.WATCHER_DIED, self._last_error)
                time.sleep(self.config.liveness_interval)

    def _drive_once(self) -> bool:
        """One turn of the driver: deliver what is due, check health, sleep; False to stop."""
        with self._cond:
            now = self._clock()
            waiters: list[threading.Event] = []
            if self._flush_waiters or self._stopping:
                batch = self._debouncer.flush(now)
                waiters, self._flush_waiters = self._flush_waiters, []
            else:
                batch = self._debouncer.due(now)
            signals = list(self._signals)
            self._signals.clear()
            stopping = self._stopping
        try:
            for reason, detail in signals:
                self._deliver_signal(reason, detail)
            if batch is not None:
                self._deliver(batch)
        finally:
            for waiter in waiters:
                waiter.set()
        if stopping:
            return False
        self._check_liveness()
        with self._cond:
            if self._signals or self._flush_waiters or self._stopping:
                return True
            now = self._clock()
            timeout = self.config.liveness_interval
            deadline = self._debouncer.next_deadline()
            if deadline is not None:
                timeout = min(timeout, max(0.0, deadline - now))
            if timeout > 0:
                self._planned_wake = now + timeout
                self._cond.wait(timeout)
                self._planned_wake = float("-inf")
        return True

    def _deliver(self, batch: SettledBatch) -> None:
        kept = self._drop_own_writes(batch)
        if kept is None:
            return
        try:
            self._sink.on_changes(kept)
        except Exception as exc:
            if isinstance(exc, MnoteError):  # a state the sink named (HEAD detached, a lock)
                logger.warning(
                    "sync: a batch of %d changes waits: %s", len(kept.changes), exc.message
                )
            else:
                logger.exception("sync: sink failed on a batch of %d changes", len(kept.changes))
            with self._cond:
                self._last_error = f"sink failed: {exc!r}"
                paths = ", ".join(c.path for c in kept.changes[:5])
                self._signal_locked(ReconcileReason.SINK_FAILED, f"batch not applied: {paths}")
            return
        with self._cond:
            self._batches += 1
            self._changes += len(kept.changes)

    def _drop_own_writes(self, batch: SettledBatch) -> SettledBatch | None:
        registry = self.own_writes
        if not len(registry):
            return batch
        kept: list[SettledChange] = []
        for change in batch.changes:
            paths = [change.path] + ([change.old_path] if change.old_path else [])
            if not any(registry.knows(p) for p in paths):
                kept.append(change)
                continue
            current = {p: self._read_blob(p) for p in paths}
            if registry.is_own(change, current):
                registry.dropped += 1
                with self._cond:
                    self._own_dropped += 1
            else:
                kept.append(change)
        if len(kept) == len(batch.changes):
            return batch
        result = replace(batch, changes=tuple(kept))
        return result if result else None

    def _deliver_signal(self, reason: ReconcileReason, detail: str) -> None:
        try:
            self._sink.on_reconcile_needed(reason, detail)
        except Exception:
            logger.exception("sync: sink failed on reconcile signal %s", reason)

    def _signal_locked(self, reason: ReconcileReason, detail: str) -> None:
        self._needs_reconcile = True
        self._generation += 1
        if reason not in self._reasons:
            self._reasons.append(reason)
        self._signals.append((reason, detail))
        self._cond.notify_all()

    def _check_liveness(self) -> None:
        observer = self._observer
        now = self._clock()
        if observer is not None:
            dead = observer.dead_threads()
            try:
                root_moved = _identity(self.root) != self._root_identity
            except OSError:
                root_moved = True
            if dead or root_moved:
                root_gone = root_moved or not os.path.isdir(self.root)
                reason = ReconcileReason.ROOT_GONE if root_gone else ReconcileReason.WATCHER_DIED
                message = (
                    f"workspace folder {self.root} is gone or was replaced"
                    if root_gone
                    else f"watcher thread(s) stopped: {', '.join(dead)}"
                )
                logger.error("sync: %s", message)
                self._retire_observer()
                with self._cond:
                    self._state = WatcherState.FAILED
                    if self._last_error is None or root_gone:
                        self._last_error = message
                    self._fallback_reason = reason
                    self._schedule_restart_locked()
                    self._signal_locked(reason, message)
                return
        with self._cond:
            state = self._state
            restart_due = self._next_restart is not None and (
                now >= self._next_restart
                # a folder put back is watched at once, not after the restarts' backoff
                or (self._fallback_reason is ReconcileReason.ROOT_GONE and os.path.isdir(self.root))
            )
            fallback_due = self._next_fallback is not None and now >= self._next_fallback
            if state is WatcherState.RUNNING:
                self._next_fallback = None
            elif fallback_due and state in (WatcherState.DEGRADED, WatcherState.FAILED):
                self._next_fallback = now + self.config.fallback_interval
                self._signal_locked(
                    self._fallback_reason, "periodic reconciliation while watching is incomplete"
                )
        if state is WatcherState.FAILED and restart_due and not self._stopping:
            with self._cond:
                self._restarts += 1
            self._start_observer()
