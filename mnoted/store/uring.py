"""fsyncs submitted together through Linux's io_uring, with no Python thread between them.

The thread pool of :mod:`mnoted.store.durable` syncs files concurrently, but each sync is a
Python task: a worker woken, the GIL taken to call ``fsync`` and again to hand its result
back, the waiter woken, while the writer's thread wants the GIL for the next command. Here
one system call submits every ``fsync`` of a wait and the kernel runs them on its own
workers: the same disk work with less CPU and fewer context switches, and no thread
handing a result back through the GIL (compare with ``bench/turns.py``).

The rings are read and written from Python through ``mmap``: x86-64 only, whose ordering of
memory accesses needs no barrier the language cannot give (elsewhere, and where the kernel
refuses io_uring, :func:`ring` returns None and the pool syncs).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import mmap
import os
import platform
import struct
import sys
import threading
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("mnoted.store")

ENTRIES = 256  # submissions at once (a longer list is submitted in parts)
_SETUP, _ENTER = 425, 426  # system call numbers (the same on every Linux architecture)
_OFF_SQES = 0x10000000
_OP_FSYNC = 3
_ENTER_GETEVENTS, _ENTER_EXT_ARG = 1, 8
_FEAT_SINGLE_MMAP, _FEAT_NODROP, _FEAT_EXT_ARG = 1, 2, 1 << 8
_NEEDED = _FEAT_SINGLE_MMAP | _FEAT_NODROP | _FEAT_EXT_ARG
_WAKE_NS = 10_000_000  # the longest a wait blocks before it looks again
_SQE = struct.Struct("BBHiQQIIQ")  # opcode, flags, ioprio, fd, off, addr, len, flags, user_data
_CQE = struct.Struct("QiI")  # user_data, res, flags
_U32 = struct.Struct("I")


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _syscall(number: int, *args: int | ctypes.Array[Any] | None) -> int:
    """A system call's result, or minus its errno (every argument passed as a C long)."""
    longs = [a if not isinstance(a, int) else ctypes.c_long(a) for a in args]
    got = int(_libc().syscall(ctypes.c_long(number), *longs))
    return got if got >= 0 else -ctypes.get_errno()


class Ring:
    """One io_uring shared by the process's threads: :meth:`submit` under a lock, and
    :meth:`wait` with one thread at a time blocked in the kernel for completions (it hands
    those of others to them), so syncs started on one thread may be awaited on another."""

    def __init__(self) -> None:
        params = ctypes.create_string_buffer(120)
        fd = _syscall(_SETUP, ENTRIES, params)
        if fd < 0:
            raise OSError(-fd, os.strerror(-fd))
        self._fd = fd
        raw = params.raw
        sq_entries, cq_entries, _flags, _cpu, _idle, features = struct.unpack_from("6I", raw, 0)
        if features & _NEEDED != _NEEDED:
            os.close(fd)
            raise OSError(errno.ENOSYS, "io_uring without waits with a timeout (Linux < 5.11)")
        # offsets into the rings' mapping (io_sqring_offsets, io_cqring_offsets)
        self._sq_head, self._sq_tail, sq_mask_at, _, _, _, self._sq_array = struct.unpack_from(
            "7I", raw, 40
        )
        self._cq_head, self._cq_tail, cq_mask_at, _, _, self._cqes = struct.unpack_from(
            "6I", raw, 80
        )
        share = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        both = mmap.PROT_READ | mmap.PROT_WRITE
        size = max(self._sq_array + sq_entries * 4, self._cqes + cq_entries * _CQE.size)
        try:
            self._rings = mmap.mmap(fd, size, share, both, offset=0)
            self._sqes = mmap.mmap(fd, sq_entries * 64, share, both, offset=_OFF_SQES)
        except BaseException:  # (ENOMEM, a locked-memory limit: the ring is not to be had)
            os.close(fd)
            raise
        self._sq_mask = _U32.unpack_from(self._rings, sq_mask_at)[0]
        self._cq_mask = _U32.unpack_from(self._rings, cq_mask_at)[0]
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._results: dict[int, int] = {}  # request id -> 0 or an errno, until awaited
        self._next = 1
        self._reaping = False
        # io_uring_getevents_arg (no signal mask) pointing at a timespec of _WAKE_NS
        self._timeout = (ctypes.c_int64 * 2)(0, _WAKE_NS)
        self._wait_arg = (ctypes.c_uint64 * 3)(0, 0, ctypes.addressof(self._timeout))

    def submit(self, fds: Sequence[int]) -> list[int]:
        """Start an ``fsync`` of each of ``fds``; the ids to :meth:`wait` for."""
        ids: list[int] = []
        with self._lock:
            for start in range(0, len(fds), ENTRIES):
                ids += self._submit(fds[start : start + ENTRIES])
        return ids

    def _submit(self, fds: Sequence[int]) -> list[int]:
        ring, tail = self._rings, _U32.unpack_from(self._rings, self._sq_tail)[0]
        ids = list(range(self._next, self._next + len(fds)))
        self._next += len(fds)
        for n, (fd, ident) in enumerate(zip(fds, ids, strict=True)):
            slot = (tail + n) & self._sq_mask
            self._sqes[slot * 64 : slot * 64 + 64] = bytes(64)
            _SQE.pack_into(self._sqes, slot * 64, _OP_FSYNC, 0, 0, fd, 0, 0, 0, 0, ident)
            _U32.pack_into(ring, self._sq_array + slot * 4, slot)
        _U32.pack_into(ring, self._sq_tail, (tail + len(fds)) & 0xFFFFFFFF)
        left = len(fds)
        while left:
            took = self._enter(left, 0, 0)
            if took == -errno.EINTR:
                continue
            if took == -errno.EBUSY:  # completions are waiting to be read: read them
                self._reap()
                continue
            if took < 0:
                raise OSError(-took, f"io_uring_enter: {os.strerror(-took)}")
            left -= took
        return ids

    def wait(self, ids: Sequence[int]) -> list[int]:
        """Block until the syncs ``ids`` are done; each one's 0, or its errno.

        One thread at a time waits in the kernel and reads the completions; the others wait
        for it to hand them theirs. Its wait has a timeout: a completion read by a submitter
        (``EBUSY``) just before it blocked would otherwise leave it blocked with its own
        results already read.
        """
        with self._done:
            while True:
                if not self._reaping:
                    self._reap()
                if all(i in self._results for i in ids):
                    return [self._results.pop(i) for i in ids]
                if self._reaping:  # another thread is in the kernel: it wakes us
                    self._done.wait()
                    continue
                self._reaping = True
                self._lock.release()
                try:
                    got = self._enter(0, 1, _ENTER_GETEVENTS | _ENTER_EXT_ARG, self._wait_arg, 24)
                finally:
                    self._lock.acquire()
                    self._reaping = False
                    self._done.notify_all()
                if got < 0 and got not in (-errno.EINTR, -errno.ETIME):
                    raise OSError(-got, f"io_uring_enter: {os.strerror(-got)}")

    def _reap(self) -> None:
        """Take the completions the kernel posted (the lock held)."""
        ring = self._rings
        head = _U32.unpack_from(ring, self._cq_head)[0]
        tail = _U32.unpack_from(ring, self._cq_tail)[0]
        if head == tail:
            return
        while head != tail:
            ident, res, _ = _CQE.unpack_from(ring, self._cqes + (head & self._cq_mask) * _CQE.size)
            self._results[ident] = -res if res < 0 else 0
            head = (head + 1) & 0xFFFFFFFF
        _U32.pack_into(ring, self._cq_head, head)
        self._done.notify_all()

    def _enter(
        self,
        submit: int,
        complete: int,
        flags: int,
        arg: ctypes.Array[Any] | None = None,
        size: int = 0,
    ) -> int:
        return _syscall(_ENTER, self._fd, submit, complete, flags, arg, size)


_ring: Ring | None = None
_tried = False
_ring_lock = threading.Lock()
ENABLED = sys.platform == "linux" and platform.machine() == "x86_64"
"""Whether to try io_uring at all (tests turn it off to sync through ``os.fsync``)."""


def ring() -> Ring | None:
    """The process's ring (made the first time), or None where io_uring is not to be had."""
    global _ring, _tried
    if not ENABLED:
        return None
    with _ring_lock:
        if not _tried:
            _tried = True
            try:
                _ring = Ring()
            except (OSError, ValueError) as exc:  # ENOSYS, EPERM (seccomp), ENOMEM, ...
                log.info("io_uring unavailable (%s): files are synced by a thread pool", exc)
        return _ring


def give_up(error: OSError) -> None:
    """Sync through the pool from now on: the ring refused a submission."""
    global _ring
    with _ring_lock:
        if _ring is not None:
            log.warning("io_uring refused syncs (%s): a thread pool syncs files from now on", error)
            _ring = None
