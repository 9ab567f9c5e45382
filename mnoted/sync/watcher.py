"""Watch a workspace and hand settled batches of dirty paths to a sink, from one thread.

The watcher's one thread (``mnoted-sync-watcher``) does all of it: it polls the inotify fd
(:mod:`mnoted.sync.inotify`) and a wake pipe with the debouncer's next deadline as
timeout, folds what it reads into a :class:`~mnoted.sync.debounce.Debouncer`, hands due
batches and reconcile signals to the sink, checks that the workspace folder is still the
one watched, and sets the watch up again after a failure. Every sink call comes from
that thread; other threads only post requests (flush, restart, stop) and wake it.

Where inotify is missing, watchdog's public observer stands in (:mod:`mnoted.sync.fallback`):
its threads feed the same debouncer and wake the watcher's thread.

Events can be lost (queue overflow, watch limit, a failed reader). None of these crash
the watcher: each sets ``needs_reconcile`` in :meth:`Watcher.health` and calls
``sink.on_reconcile_needed`` so the integrator compares the working tree with the index
by content. While watching is incomplete (watch limit) or down, that signal repeats every
``fallback_interval`` seconds.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from mnoted.errors import MnoteError
from mnoted.sync.debounce import (
    Debouncer,
    SettledBatch,
)
from mnoted.sync.events import Event, normalize, relative
from mnoted.sync.fallback import start_observer
from mnoted.sync.health import (
    Counters,
    ReconcileReason,
    SyncSink,
    WatcherConfig,
    WatcherHealth,
    WatcherState,
)
from mnoted.sync.ignore import IgnoreRules
from mnoted.sync.inotify import Inotify, InotifyReader, Wakeup
from mnoted.sync.own_writes import OwnWrites, read_blob_id_at

if TYPE_CHECKING:
    from watchdog.observers.api import BaseObserver

__all__ = [
    "ReconcileReason",
    "SyncSink",
    "Watcher",
    "WatcherConfig",
    "WatcherHealth",
    "WatcherState",
]

logger = logging.getLogger(__name__)


def _identity(path: str) -> tuple[int, int]:
    """(device, inode): tells the watched folder from one put in its place."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


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
        self._sink = sink
        self.config = config if config is not None else WatcherConfig()
        self.ignore = ignore if ignore is not None else IgnoreRules()
        self.own_writes = own_writes if own_writes is not None else OwnWrites()
        self._clock = clock
        # through folder fds: a folder swapped for a symlink is no way out
        self._read_blob = functools.partial(read_blob_id_at, self.root)

        self._lock = threading.Lock()
        self._debouncer = Debouncer(self.config.debounce, ignore=self.ignore)
        # the event source: our inotify reader, or watchdog's observer where inotify is missing
        self._reader: InotifyReader | None = None
        self._observer: BaseObserver | None = None
        self._root_identity: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        self._wakeup = Wakeup()
        self._stopping = False
        self._flush_waiters: list[threading.Event] = []
        self._restart_waiters: list[threading.Event] = []
        self._signals: deque[tuple[ReconcileReason, str]] = deque()
        self._next_liveness = float("-inf")
        self._in_flight: tuple[SettledBatch, Future[object]] | None = None

        self._state = WatcherState.STOPPED
        self._watch_limit_hit = False
        self._count = Counters()
        self._last_event_at: float | None = None
        self._needs_reconcile = False
        self._generation = 0
        self._reasons: list[ReconcileReason] = []
        self._startup_seconds: float | None = None
        self._last_error: str | None = None
        self._next_restart: float | None = None
        self._backoff = self.config.restart_backoff
        self._next_fallback: float | None = None
        self._fallback_reason = ReconcileReason.WATCHER_DIED  # repeated while not RUNNING

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> WatcherHealth:
        """Set up the watches (blocking until they are in place) and the watcher's thread.

        Never raises for filesystem trouble: a watch that cannot be set up
        leaves the watcher FAILED or DEGRADED and asks for reconciliation.
        """
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                raise RuntimeError("watcher already started")
            self._stopping = False
        self._wakeup.open()
        self._start_source()
        thread = threading.Thread(target=self._run, name="mnoted-sync-watcher", daemon=True)
        self._thread = thread
        thread.start()
        return self.health()

    def stop(self, *, flush: bool = True, timeout: float = 10.0) -> None:
        """Stop watching; with ``flush`` pending changes are delivered first."""
        with self._lock:
            self._stopping = True
            if not flush:
                self._debouncer = Debouncer(self.config.debounce, ignore=self.ignore)
        self._wake()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if thread is None or not thread.is_alive():
            self._retire_source()
            self._thread = None
        with self._lock:
            self._state = WatcherState.STOPPED

    def restart(self) -> WatcherHealth:
        """Tear down and set up the watches again (after a failure), on the watcher's thread."""
        thread = self._thread
        if thread is None or not thread.is_alive() or thread is threading.current_thread():
            with self._lock:
                self._count.restarts += 1
            self._retire_source()
            self._start_source()
            return self.health()
        done = threading.Event()
        with self._lock:
            self._restart_waiters.append(done)
        self._wake()
        done.wait(60)
        return self.health()

    # -- integration API -------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> bool:
        """Deliver everything pending now, with what the kernel has queued (before
        shutdown, or to sync explicitly).

        Returns False if the watcher's thread did not get to it within ``timeout``.
        """
        done = threading.Event()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                return False
            self._flush_waiters.append(done)
        self._wake()
        return done.wait(timeout)

    def is_pending(self, rel_path: str) -> bool:
        """Whether ``rel_path`` has an external change waiting for its quiet period."""
        with self._lock:
            return self._debouncer.is_pending(rel_path)

    def take_pending(self, paths: list[str]) -> SettledBatch | None:
        """Remove and return the pending changes of ``paths`` (the caller applies them).

        For a tool write on a path with a debounced external edit: the store
        commits these first, then judges its write against them.
        """
        with self._lock:
            return self._debouncer.take(paths, self._clock())

    def mark_reconciled(self, generation: int) -> None:
        """Clear ``needs_reconcile`` if no new signal came after ``generation``."""
        with self._lock:
            if generation >= self._generation:
                self._needs_reconcile = False
                self._reasons.clear()

    def health(self) -> WatcherHealth:
        reader = self._reader
        watch_count = reader.watch_count if reader is not None else None
        thread = self._thread
        with self._lock:
            state = self._state
            if state is not WatcherState.STOPPED and (thread is None or not thread.is_alive()):
                state = WatcherState.FAILED  # nothing would be delivered
            return WatcherHealth(
                state=state,
                running=state in (WatcherState.RUNNING, WatcherState.DEGRADED),
                watch_count=watch_count,
                watch_limit_hit=self._watch_limit_hit,
                last_event_at=self._last_event_at,
                pending=self._debouncer.pending_count,
                needs_reconcile=self._needs_reconcile,
                reconcile_generation=self._generation,
                reconcile_reasons=tuple(self._reasons),
                startup_seconds=self._startup_seconds,
                last_error=self._last_error,
                **dataclasses.asdict(self._count),
            )

    # -- the event source --------------------------------------------------------

    def _start_source(self) -> bool:
        """Watch the tree (inotify, else watchdog's observer); False when that failed."""
        started = self._clock()
        with self._lock:
            self._watch_limit_hit = False
        note: str | None = None
        try:
            try:
                inotify = Inotify()
            except OSError as exc:
                self._observer, note = start_observer(
                    self.root, self._intake, self._wake, exc, self.config.poll_interval
                )
            else:
                reader = InotifyReader(
                    inotify,
                    os.fsencode(self.root),
                    is_own=self._is_own_rename,
                    on_watch_failure=self._on_watch_failure,
                    watch_limit=self.config.watch_limit,
                )
                try:
                    reader.watch_root()
                except OSError:
                    reader.close()
                    raise
                self._reader = reader
            self._root_identity = _identity(self.root)
        except OSError as exc:
            reason = ReconcileReason.WATCHER_UNAVAILABLE
            if exc.errno == errno.ENOSPC:
                reason = ReconcileReason.WATCH_LIMIT
            elif not os.path.isdir(self.root):
                reason = ReconcileReason.ROOT_GONE
            self._source_failed(reason, f"cannot watch {self.root}: {exc}", first=True)
            return False
        with self._lock:
            self._startup_seconds = self._clock() - started
            self._state = WatcherState.DEGRADED if self._watch_limit_hit else WatcherState.RUNNING
            if note is not None:
                self._last_error = note
            self._backoff = self.config.restart_backoff
            self._next_restart = None
            self._signal_locked(ReconcileReason.STARTED, f"watching {self.root}")
        return True

    def _retire_source(self) -> None:
        reader, self._reader = self._reader, None
        observer, self._observer = self._observer, None
        if reader is not None:
            reader.close()
        if observer is not None:
            try:
                observer.stop()
                if observer is not threading.current_thread():
                    observer.join(timeout=5)
            except Exception:
                logger.exception("sync: error while stopping watchdog's observer")

    def _source_failed(self, reason: ReconcileReason, message: str, first: bool = False) -> None:
        """Not watching: periodic reconciliation, and restarts if enabled."""
        logger.error("sync: %s; falling back to periodic reconciliation", message)
        self._retire_source()
        with self._lock:
            self._state = WatcherState.FAILED
            if first or self._last_error is None or reason is ReconcileReason.ROOT_GONE:
                self._last_error = message
            self._fallback_reason = reason
            self._schedule_restart_locked()
            self._signal_locked(reason, message)

    def _schedule_restart_locked(self) -> None:
        if self.config.auto_restart:
            self._next_restart = self._clock() + self._backoff
            self._backoff = min(self._backoff * 2, self.config.restart_backoff_max)
        if self._next_fallback is None:
            self._next_fallback = self._clock() + self.config.fallback_interval

    # -- callbacks of the reader -------------------------------------------------

    def _is_own_rename(self, path: bytes) -> bool:
        """Whether the file just renamed to ``path`` holds what the store registered for it
        (then the rename's events are dropped at once, and counted)."""
        rel = relative(self.root, os.fsdecode(path))
        if not rel or not self.own_writes.renamed_in(rel, path, self._read_blob):
            return False
        with self._lock:
            self._count.own_writes_dropped += 1
        return True

    def _on_watch_failure(self, path: bytes, exc: OSError) -> None:
        shown = os.fsdecode(path)
        with self._lock:
            self._count.watch_failures += 1
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

    # -- event intake ------------------------------------------------------------

    def _intake(self, events: Iterable[Event]) -> None:
        """Fold events into the debouncer (made relative, ``.git/`` dropped)."""
        found = normalize(self.root, events)
        if found.gitignore_changed:
            self.ignore.invalidate()
        if not found.events and not found.internal:
            return
        with self._lock:
            now = self._clock()
            self._count.events_seen += found.internal + len(found.events)
            self._count.events_ignored += found.internal
            for event in found.events:
                if self._debouncer.add(event, now):
                    self._last_event_at = now
                else:
                    self._count.events_ignored += 1

    def _read_source(self) -> None:
        """Take in what the inotify reader has (a held move-out included, once due)."""
        reader = self._reader
        if reader is None:
            return
        try:
            now = self._clock()
            raw = reader.read(now) + reader.expire(now)
            overflows, reader.overflowed = reader.overflowed, 0
        except Exception as exc:
            logger.exception("sync: the inotify reader failed")
            self._source_failed(ReconcileReason.WATCHER_DIED, f"inotify reader failed: {exc!r}")
            return
        decode = os.fsdecode
        self._intake(
            (c.kind, decode(c.path), decode(c.dest) if c.dest is not None else None, c.is_dir)
            for c in raw
        )
        if overflows:
            # After the reader has watched the folders made meanwhile: a reconcile pass
            # started on this signal sees every edit, including those made while unwatched.
            logger.warning("sync: inotify queue overflowed under %s; reconciling", self.root)
            with self._lock:
                self._count.overflows += overflows
                self._signal_locked(ReconcileReason.QUEUE_OVERFLOW, "the kernel dropped events")

    # -- the watcher's thread ----------------------------------------------------

    def _wake(self) -> None:
        self._wakeup.wake()

    def _run(self) -> None:
        try:
            while True:
                try:
                    if not self._turn():
                        return
                except Exception as exc:  # a bug here must not silently end delivery
                    logger.exception("sync: watcher iteration failed")
                    with self._lock:
                        self._last_error = f"sync driver error: {exc!r}"
                        self._signal_locked(ReconcileReason.WATCHER_DIED, self._last_error)
                    time.sleep(self.config.liveness_interval)
        finally:
            self._retire_source()
            self._wakeup.close()

    def _turn(self) -> bool:
        """One turn: requests, delivery, health, then wait for events; False to stop."""
        with self._lock:
            stopping = self._stopping
            restarts, self._restart_waiters = self._restart_waiters, []
            flushing = bool(self._flush_waiters)
        if stopping:
            self._retire_source()
        elif restarts:
            with self._lock:
                self._count.restarts += 1
            self._retire_source()
            self._start_source()
            for done in restarts:
                done.set()
        elif flushing:
            self._read_source()
        self._deliver_due()
        if stopping:
            return False
        now = self._clock()
        reader = self._reader
        if now >= self._next_liveness or (reader is not None and reader.root_lost):
            self._check_liveness()
            self._next_liveness = self._clock() + self.config.liveness_interval
        self._wait()
        return True

    def _wait(self) -> None:
        """Sleep until an event, a wake-up or the next deadline, then read what came."""
        reader = self._reader
        with self._lock:
            busy = self._signals or self._flush_waiters or self._stopping or self._restart_waiters
            # (while a batch is in flight, its end wakes the thread, not the debouncer)
            deadline = self._debouncer.next_deadline() if self._in_flight is None else None
        now = self._clock()
        timeout = self._next_liveness - now
        held = reader.next_deadline() if reader is not None else None
        for due in (deadline, held):
            if due is not None:
                timeout = min(timeout, due - now)
        fd = reader.fileno() if reader is not None else None
        readable = self._wakeup.wait(fd, 0 if busy else timeout)
        if readable or (held is not None and self._clock() >= held):
            self._read_source()

    def _deliver_due(self) -> None:
        with self._lock:
            flushing = bool(self._flush_waiters or self._stopping)
            signals = list(self._signals)
            self._signals.clear()
        for reason, detail in signals:
            try:
                self._sink.on_reconcile_needed(reason, detail)
            except Exception:
                logger.exception("sync: sink failed on reconcile signal %s", reason)
        if not self._landed(wait=flushing):
            return  # one batch at a time: the next waits in the debouncer
        with self._lock:
            now = self._clock()
            waiters: list[threading.Event] = []
            if self._flush_waiters or self._stopping:
                batch = self._debouncer.flush(now)
                waiters, self._flush_waiters = self._flush_waiters, []
            else:
                batch = self._debouncer.due(now)
        try:
            if batch is not None:
                self._deliver(batch)
                if waiters:
                    self._landed(wait=True)
        finally:
            for waiter in waiters:
                waiter.set()

    def _deliver(self, batch: SettledBatch) -> None:
        """Hand ``batch`` to the sink. A sink that answers with a future applies it
        elsewhere: the thread goes on reading events meanwhile (the kernel's queue would
        fill while a big batch is committed) and delivers the next batch once it is done."""
        kept, dropped = self.own_writes.drop_from(batch, self._read_blob)
        if dropped:
            with self._lock:
                self._count.own_writes_dropped += dropped
        if kept is None:
            return
        try:
            applying = self._sink.on_changes(kept)
        except Exception as exc:
            self._sink_failed(kept, exc)
            return
        if isinstance(applying, Future):
            self._in_flight = (kept, applying)
            applying.add_done_callback(lambda _: self._wake())
        else:
            self._applied(kept)

    def _landed(self, *, wait: bool) -> bool:
        """Whether no batch is in flight; a finished one is taken in (``wait``: waited for)."""
        if self._in_flight is None:
            return True
        batch, applying = self._in_flight
        if not (wait or applying.done()):
            return False
        self._in_flight = None
        try:
            applying.result(timeout=30)  # (a flush or stop waits for it, within reason)
        except Exception as exc:
            self._sink_failed(batch, exc)
        else:
            self._applied(batch)
        return True

    def _applied(self, batch: SettledBatch) -> None:
        with self._lock:
            self._count.batches_delivered += 1
            self._count.changes_delivered += len(batch.paths)

    def _sink_failed(self, batch: SettledBatch, exc: Exception) -> None:
        if isinstance(exc, MnoteError):  # a state the sink named (HEAD detached, a lock)
            logger.warning("sync: a batch of %d paths waits: %s", len(batch.paths), exc.message)
        else:
            logger.error("sync: sink failed on a batch of %d paths", len(batch.paths), exc_info=exc)
        with self._lock:
            self._last_error = f"sink failed: {exc!r}"
            paths = ", ".join(batch.paths[:5])
            self._signal_locked(ReconcileReason.SINK_FAILED, f"batch not applied: {paths}")

    def _signal_locked(self, reason: ReconcileReason, detail: str) -> None:
        self._needs_reconcile = True
        self._generation += 1
        if reason not in self._reasons:
            self._reasons.append(reason)
        self._signals.append((reason, detail))
        self._wake()

    def _check_liveness(self) -> None:
        reader, observer = self._reader, self._observer
        now = self._clock()
        if reader is not None or observer is not None:
            dead = observer is not None and not observer.is_alive()
            try:
                root_moved = _identity(self.root) != self._root_identity
            except OSError:
                root_moved = True
            if reader is not None and reader.root_lost:
                root_moved = True
            if dead or root_moved:
                root_gone = root_moved or not os.path.isdir(self.root)
                if root_gone:
                    reason = ReconcileReason.ROOT_GONE
                    message = f"workspace folder {self.root} is gone or was replaced"
                else:
                    reason = ReconcileReason.WATCHER_DIED
                    message = "watchdog's observer thread stopped"
                self._source_failed(reason, message)
                return
        with self._lock:
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
            with self._lock:
                self._count.restarts += 1
            self._start_source()
