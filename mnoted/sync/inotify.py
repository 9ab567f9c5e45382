"""A small inotify reader of mnoted's own (Linux): one watch per folder, events as changes.

:class:`Inotify` is the kernel instance (``inotify_init1`` through ctypes, the fd read
with ``os.read``). :class:`InotifyReader` keeps the watch table of a root and turns raw
``struct inotify_event`` records into :class:`Change` records on absolute byte paths:

* one watch per folder, added top-down through folder fds (:mod:`mnoted.sync.listing`),
  never in ``.git/`` or ``.mnote/`` and never through a symlink (``IN_DONT_FOLLOW``,
  ``IN_ONLYDIR``);
* a new folder (made or moved in) is watched as it appears, and what it already holds
  is reported as created: files written there before the watch existed have no event;
* ``IN_MOVED_FROM`` is paired with the ``IN_MOVED_TO`` that follows it with the same
  cookie; one the next record does not pair is a move out (a delete), after a hold of
  ``MOVE_HOLD`` seconds when it was the last record read;
* a moved folder's watches follow it (paths rewritten); a folder moved out loses its
  watches, since the kernel keeps reporting it under its old name;
* ``IN_Q_OVERFLOW``: folders made meanwhile get their watches, those of folders gone are
  dropped, then the caller is told (:attr:`InotifyReader.overflowed`) and reconciles by
  content.

The mask subscribes to writes only. ``IN_OPEN``, ``IN_ACCESS`` and ``IN_CLOSE_NOWRITE``
fire on every read (Git reading objects, an indexer, this reader's own listing of new
folders) and flood the kernel's queue on big trees.

Nothing here holds a thread or a lock: the watcher's one thread polls :meth:`fileno`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import select
import struct
import threading
from collections.abc import Callable
from typing import NamedTuple

from mnoted.sync import listing
from mnoted.sync.debounce import EventKind
from mnoted.sync.ignore import INTERNAL_DIRS, MNOTE_TEMP_PREFIX

__all__ = [
    "MOVE_HOLD",
    "Change",
    "Inotify",
    "InotifyReader",
    "RawEvent",
    "Wakeup",
    "parse_events",
]

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

MASK = (
    IN_CREATE
    | IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_DELETE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_DELETE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
)
"""Every folder's mask; the root's adds ``IN_MOVE_SELF`` (the workspace renamed away)."""

MOVE_HOLD = 0.5
"""Seconds an ``IN_MOVED_FROM`` read last waits for its ``IN_MOVED_TO``."""

_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
_READ_SIZE = 64 * 1024
_READ_MAX = 1024 * 1024  # per call, so that delivery goes on under a flood
_PRUNED = frozenset(os.fsencode(d) for d in INTERNAL_DIRS)
_TEMP = os.fsencode(MNOTE_TEMP_PREFIX)


class RawEvent(NamedTuple):
    """One ``struct inotify_event``."""

    wd: int
    mask: int
    cookie: int
    name: bytes


class Change(NamedTuple):
    """One event on absolute byte paths; ``dest`` is set for MOVED only."""

    kind: EventKind
    path: bytes
    dest: bytes | None
    is_dir: bool


def parse_events(buf: bytes) -> list[RawEvent]:
    """The records of one ``read(2)`` of an inotify fd (names without their NUL padding)."""
    out: list[RawEvent] = []
    offset, size, header = 0, len(buf), _HEADER.size
    while offset + header <= size:
        wd, mask, cookie, length = _HEADER.unpack_from(buf, offset)
        start = offset + header
        name = buf[start : start + length].rstrip(b"\0")
        out.append(RawEvent(wd, mask, cookie, name))
        offset = start + length
    return out


def _libc() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    lib.inotify_init1.argtypes = [ctypes.c_int]
    lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    lib.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    return lib


class Inotify:
    """One inotify instance (non-blocking, close-on-exec).

    Raises :class:`OSError` when the system has none to give (not Linux: ``ENOSYS``;
    ``fs.inotify.max_user_instances`` reached: ``EMFILE``).
    """

    def __init__(self) -> None:
        try:
            self._lib = _libc()
            init = self._lib.inotify_init1
        except (OSError, AttributeError) as exc:
            raise OSError(errno.ENOSYS, f"inotify is not available: {exc}") from exc
        fd = init(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"inotify_init1: {os.strerror(code)}")
        self.fd: int = fd

    def add_watch(self, path: bytes, mask: int) -> int:
        wd = int(self._lib.inotify_add_watch(self.fd, path, mask))
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), os.fsdecode(path))
        return wd

    def rm_watch(self, wd: int) -> None:
        self._lib.inotify_rm_watch(self.fd, wd)  # (EINVAL: already gone; nothing to do)

    def read(self) -> bytes:
        """What the kernel has queued (up to ``_READ_MAX`` bytes), b"" if nothing."""
        chunks: list[bytes] = []
        total = 0
        while total < _READ_MAX:
            try:
                chunk = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Wakeup:
    """A pipe other threads write to, to end the reading thread's wait early."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fds = (-1, -1)

    def open(self) -> None:
        with self._lock:
            read_end, write_end = os.pipe()
            os.set_blocking(read_end, False)
            os.set_blocking(write_end, False)
            self._fds = (read_end, write_end)

    def wake(self) -> None:
        with self._lock:
            if self._fds[1] >= 0:
                with contextlib.suppress(BlockingIOError):  # (already full of wake-ups)
                    os.write(self._fds[1], b"!")

    def wait(self, fd: int | None, timeout: float) -> bool:
        """Until ``fd`` is readable, a wake-up, or ``timeout`` seconds; whether ``fd`` is."""
        poller = select.poll()
        wake_fd = self._fds[0]
        poller.register(wake_fd, select.POLLIN)
        if fd is not None:
            poller.register(fd, select.POLLIN)
        ready = {ready_fd for ready_fd, _ in poller.poll(max(0, int(timeout * 1000) + 1))}
        if wake_fd in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_fd, 4096):
                    pass
        return fd is not None and fd in ready

    def close(self) -> None:
        with self._lock:
            for fd in self._fds:
                if fd >= 0:
                    os.close(fd)
            self._fds = (-1, -1)


class _Held(NamedTuple):
    event: RawEvent
    path: bytes
    until: float


class InotifyReader:
    """The watches of ``root`` on one :class:`Inotify`, and its events as :class:`Change`.

    ``is_own(path)`` says whether a file just renamed to ``path`` holds what mnoted wrote
    there (then the rename is dropped); ``on_watch_failure(path, exc)`` hears of folders
    below the root that could not be watched. ``watch_limit`` caps the watches held.
    """

    def __init__(
        self,
        inotify: Inotify,
        root: bytes,
        *,
        is_own: Callable[[bytes], bool],
        on_watch_failure: Callable[[bytes, OSError], None],
        watch_limit: int | None = None,
    ) -> None:
        self.inotify = inotify
        self.root = root
        self._is_own = is_own
        self._on_watch_failure = on_watch_failure
        self._limit = watch_limit
        self._path_of: dict[int, bytes] = {}
        self._wd_of: dict[bytes, int] = {}
        self._held: _Held | None = None
        self._touched: set[int] | None = None  # watches seen by a rewalk after an overflow
        self.overflowed = 0
        """Queue overflows seen (each after the watches were rebuilt)."""
        self.root_lost = False
        """The root's own watch reported it deleted, moved or unmounted."""

    # -- the watch table -----------------------------------------------------------

    @property
    def watch_count(self) -> int:
        return len(self._path_of)

    def fileno(self) -> int:
        return self.inotify.fd

    def watch_root(self) -> None:
        """Watch the root and every folder below it; raises :class:`OSError` if the root
        itself cannot be watched."""
        self._watch_tree(self.root, files=False)

    def _watch(self, path: bytes) -> int:
        limit = self._limit
        if limit is not None and len(self._path_of) >= limit and path not in self._wd_of:
            raise OSError(errno.ENOSPC, "inotify watch limit reached (WatcherConfig.watch_limit)")
        mask = MASK | IN_MOVE_SELF if path == self.root else MASK
        wd = self.inotify.add_watch(path, mask)
        if self._touched is not None:
            self._touched.add(wd)
        old = self._path_of.get(wd)
        if old is not None and old != path and self._wd_of.get(old) == wd:
            del self._wd_of[old]  # the same folder under a new name
        self._path_of[wd] = path
        self._wd_of[path] = wd
        return wd

    def _watch_tree(self, top: bytes, *, files: bool = True) -> list[listing.Step]:
        """Watch ``top`` and the folders below it, top-down; returns what was listed (with
        ``files``; the start-up and the walk after an overflow need folders only).

        A folder is watched before it is listed, so a file made in it after the listing
        has an event, and one made before is in the listing.
        """
        if top != self.root and os.path.basename(top) in _PRUNED:
            return []
        try:
            self._watch(top)
        except OSError as exc:
            if top == self.root:
                raise
            self._failed(top, exc)
            return []
        steps: list[listing.Step] = []
        for step in listing.walk(self.root, top, _PRUNED, files=files):
            folder, subfolders, _ = step
            if files:
                steps.append(step)
            kept = []
            for name in subfolders:
                path = os.path.join(folder, name)
                try:
                    self._watch(path)
                except OSError as exc:
                    self._failed(path, exc)
                    if exc.errno == errno.ENOSPC:
                        subfolders[:] = []
                        return steps  # the rest would fail the same way
                    continue
                kept.append(name)
            subfolders[:] = kept
        return steps

    def _rewatch(self) -> None:
        """After an overflow: watch the folders made while events were lost, and drop the
        watches of folders gone meanwhile (their ``IN_IGNORED`` may be lost too)."""
        self._touched = set()
        try:
            self._watch_tree(self.root, files=False)
        finally:
            touched, self._touched = self._touched, None
        for wd in [wd for wd in self._path_of if wd not in touched]:
            self.inotify.rm_watch(wd)
            self._forget(wd)

    def _failed(self, path: bytes, exc: OSError) -> None:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return  # gone or swapped for a link meanwhile: its own event says so
        self._on_watch_failure(path, exc)

    def _moved(self, src: bytes, dst: bytes) -> None:
        """A watched folder was renamed within the root: its watches follow it."""
        prefix = src + b"/"
        for wd, path in list(self._path_of.items()):
            if path == src or path.startswith(prefix):
                new = dst + path[len(src) :]
                self._path_of[wd] = new
                if self._wd_of.get(path) == wd:
                    del self._wd_of[path]
                self._wd_of[new] = wd

    def _unwatch(self, top: bytes) -> None:
        """A folder moved out: its watches would report it under its old name."""
        prefix = top + b"/"
        for wd, path in list(self._path_of.items()):
            if path == top or path.startswith(prefix):
                self.inotify.rm_watch(wd)
                del self._path_of[wd]
                if self._wd_of.get(path) == wd:
                    del self._wd_of[path]

    def _forget(self, wd: int) -> None:
        path = self._path_of.pop(wd, None)
        if path is not None and self._wd_of.get(path) == wd:
            del self._wd_of[path]

    def close(self) -> None:
        self.inotify.close()
        self._path_of.clear()
        self._wd_of.clear()

    # -- events --------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When a held ``IN_MOVED_FROM`` stops waiting for its pair, or None."""
        return self._held.until if self._held is not None else None

    def read(self, now: float) -> list[Change]:
        """Read what the kernel queued and turn it into changes (in the kernel's order)."""
        out: list[Change] = []
        for event in parse_events(self.inotify.read()):
            self._handle(event, now, out)
        return out

    def expire(self, now: float) -> list[Change]:
        """A held ``IN_MOVED_FROM`` whose pair did not come in time: a move out."""
        out: list[Change] = []
        if self._held is not None and now >= self._held.until:
            self._release(out)
        return out

    def _release(self, out: list[Change]) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._moved_out(held.event, held.path, out)

    def _handle(self, event: RawEvent, now: float, out: list[Change]) -> None:
        mask = event.mask
        if self._held is not None:
            if mask & IN_MOVED_TO and event.cookie == self._held.event.cookie:
                held, self._held = self._held, None
                dst = self._path(event)
                if dst is not None:
                    self._moved_within(held.event, held.path, event, dst, out)
                else:
                    self._moved_out(held.event, held.path, out)
                return
            self._release(out)
        if mask & IN_Q_OVERFLOW:
            self._rewatch()
            self.overflowed += 1
            return
        if mask & IN_IGNORED:
            if self._path_of.get(event.wd) == self.root:
                self.root_lost = True
            self._forget(event.wd)
            return
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT):
            if self._path_of.get(event.wd) == self.root:
                self.root_lost = True
            return  # a folder below: its parent's event reports it
        if event.name.startswith(_TEMP) and not mask & IN_MOVED_FROM:
            return  # mnoted's temporary files: only the rename that puts one in place counts
        path = self._path(event)
        if path is None:
            return  # a watch already dropped (a folder moved out or gone)
        is_dir = bool(mask & IN_ISDIR)
        if mask & IN_MOVED_FROM:
            self._held = _Held(event, path, now + MOVE_HOLD)
        elif mask & IN_MOVED_TO:
            self._moved_in(event, path, out)
        elif mask & IN_CREATE:
            if is_dir:
                self._new_folder(path, out)
            else:
                out.append(Change(EventKind.CREATED, path, None, False))
        elif mask & IN_DELETE:
            out.append(Change(EventKind.DELETED, path, None, is_dir))
        elif is_dir:
            return  # a folder's own mode or times: nothing Git keeps
        elif mask & IN_CLOSE_WRITE:
            out.append(Change(EventKind.CLOSED, path, None, False))
        elif mask & IN_MODIFY:
            out.append(Change(EventKind.MODIFIED, path, None, False))
        elif mask & IN_ATTRIB:
            out.append(Change(EventKind.ATTRIB, path, None, False))

    def _path(self, event: RawEvent) -> bytes | None:
        folder = self._path_of.get(event.wd)
        if folder is None:
            return None
        return os.path.join(folder, event.name) if event.name else folder

    def _new_folder(self, path: bytes, out: list[Change]) -> None:
        """A folder made or moved in: watch it, and report what it already holds."""
        out.append(Change(EventKind.CREATED, path, None, True))
        for folder, _, files in self._watch_tree(path):
            for name in files:
                if not name.startswith(_TEMP):
                    out.append(Change(EventKind.CREATED, os.path.join(folder, name), None, False))

    def _moved_in(self, event: RawEvent, path: bytes, out: list[Change]) -> None:
        if event.mask & IN_ISDIR:
            self._new_folder(path, out)
        elif not event.name.startswith(_TEMP) and not self._is_own(path):
            out.append(Change(EventKind.CREATED, path, None, False))

    def _moved_out(self, event: RawEvent, path: bytes, out: list[Change]) -> None:
        if event.mask & IN_ISDIR:
            self._unwatch(path)
            out.append(Change(EventKind.DELETED, path, None, True))
        elif not event.name.startswith(_TEMP) and not self._is_own(path):
            out.append(Change(EventKind.DELETED, path, None, False))

    def _moved_within(
        self, src_event: RawEvent, src: bytes, dst_event: RawEvent, dst: bytes, out: list[Change]
    ) -> None:
        """Both halves of a rename inside the root."""
        if src_event.mask & IN_ISDIR:
            if os.path.basename(dst) in _PRUNED:
                self._moved_out(src_event, src, out)
            elif os.path.basename(src) in _PRUNED:
                self._new_folder(dst, out)
            else:
                self._moved(src, dst)
                out.append(Change(EventKind.MOVED, src, dst, True))
                for folder, _, files in listing.walk(self.root, dst, _PRUNED):
                    old = src + folder[len(dst) :]
                    for name in files:
                        moved = (os.path.join(old, name), os.path.join(folder, name))
                        out.append(Change(EventKind.MOVED, *moved, False))
            return
        # The store's writes: a temporary file renamed over a page (dropped when the page
        # holds what the store registered), or a page exchanged with one.
        src_temp = src_event.name.startswith(_TEMP)
        src_dropped = src_temp or self._is_own(src)
        dst_dropped = dst_event.name.startswith(_TEMP) or self._is_own(dst)
        if not src_dropped and not dst_dropped:
            out.append(Change(EventKind.MOVED, src, dst, False))
        elif not dst_dropped:
            if src_temp:  # a safe save: the debouncer folds it as a write of dst
                out.append(Change(EventKind.MOVED, src, dst, False))
            else:
                out.append(Change(EventKind.CREATED, dst, None, False))
        elif not src_dropped:
            out.append(Change(EventKind.DELETED, src, None, False))
