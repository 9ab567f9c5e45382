"""fsyncs handed to the kernel in one system call (Linux AIO), not to threads of ours.

A landing syncs several files and folders at once (``store.durable``). Through a pool of
threads, each fsync costs two hand-overs: a pool thread is woken for it, and when it returns
it must take the interpreter's lock again to wake the writer, often from another CPU and
while the writer runs Python. ``io_submit`` of ``IOCB_CMD_FSYNC`` requests (Linux 4.18 and
later) has the kernel run the same ``vfs_fsync`` as ``fsync(2)`` on its own workers, all of
them at once, while the caller waits in ``io_getevents`` without the interpreter's lock: a
durable write is 5-10% faster (``docs/performance.md``, *fsyncs through the kernel*).

:func:`start` returns None where this cannot be used (another system or architecture, no
such system call, a sandbox that forbids it, no context left), and leaves out the files the
kernel refused to take (a file system without AIO fsync, more than a context holds): the
caller syncs those through its pool, as before.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import itertools
import logging
import os
import platform
import sys
import threading
from collections.abc import Sequence

from mnoted.store import dirfd

log = logging.getLogger("mnoted.store")

_SYSCALLS = {  # io_setup, io_destroy, io_getevents, io_submit
    "x86_64": (206, 207, 208, 209),
    "aarch64": (0, 1, 4, 2),
}
IOCB_CMD_FSYNC = 2
CAPACITY = 64
"""Requests one thread's context holds at once (a landing has a handful in flight)."""


class _Iocb(ctypes.Structure):
    """``struct iocb`` (``linux/aio_abi.h``), little-endian."""

    _fields_ = [
        ("aio_data", ctypes.c_uint64),
        ("aio_key", ctypes.c_uint32),
        ("aio_rw_flags", ctypes.c_int32),
        ("aio_lio_opcode", ctypes.c_uint16),
        ("aio_reqprio", ctypes.c_int16),
        ("aio_fildes", ctypes.c_uint32),
        ("aio_buf", ctypes.c_uint64),
        ("aio_nbytes", ctypes.c_uint64),
        ("aio_offset", ctypes.c_int64),
        ("aio_reserved2", ctypes.c_uint64),
        ("aio_flags", ctypes.c_uint32),
        ("aio_resfd", ctypes.c_uint32),
    ]


class _Event(ctypes.Structure):
    """``struct io_event``."""

    _fields_ = [
        ("data", ctypes.c_uint64),
        ("obj", ctypes.c_uint64),
        ("res", ctypes.c_int64),
        ("res2", ctypes.c_int64),
    ]


_NUMBERS = _SYSCALLS.get(platform.machine()) if sys.platform.startswith("linux") else None
"""This system's numbers of the calls (None: not Linux, or an architecture not listed)."""
_call = getattr(dirfd.libc, "syscall", None)
if _call is not None:
    _call.restype = ctypes.c_long
enabled = _NUMBERS is not None and _call is not None
"""Whether fsyncs go through the kernel; False where it cannot be used (and in tests that
fail ``os.fsync`` on purpose: the pool calls it)."""
_ids = itertools.count(1)
_local = threading.local()


def _syscall(index: int, *args: object) -> int:
    assert _NUMBERS is not None and _call is not None
    result = int(_call(ctypes.c_long(_NUMBERS[index]), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


class _Context:
    """One thread's AIO context, and the results it has read for requests not yet waited
    for (any thread may wait: one at a time reads the context, under :attr:`lock`)."""

    def __init__(self) -> None:
        assert _NUMBERS is not None and _call is not None
        handle = ctypes.c_ulong(0)
        _syscall(0, ctypes.c_uint(CAPACITY), ctypes.byref(handle))
        self.handle = handle
        self.lock = threading.Lock()
        self.results: dict[int, int] = {}
        # (what __del__ needs, held here: at exit, globals may be gone)
        self._destroy = functools.partial(_call, ctypes.c_long(_NUMBERS[1]), handle)

    def submit(self, fds: Sequence[int]) -> list[int]:
        """Start syncing a prefix of ``fds``; the ids of those the kernel took (maybe none:
        it refuses what its context has no room for, and a file it cannot sync this way)."""
        n = min(len(fds), CAPACITY)
        ids = [next(_ids) for _ in range(n)]
        blocks = (_Iocb * n)()
        pointers = (ctypes.POINTER(_Iocb) * n)()
        for i, (fd, ident) in enumerate(zip(fds, ids, strict=False)):
            blocks[i].aio_data = ident
            blocks[i].aio_lio_opcode = IOCB_CMD_FSYNC
            blocks[i].aio_fildes = fd
            pointers[i] = ctypes.pointer(blocks[i])
        try:  # (the kernel copies the requests: they need not outlive the call)
            taken = _syscall(3, self.handle, ctypes.c_long(n), pointers)
        except OSError as exc:
            if exc.errno in (errno.ENOSYS, errno.EPERM):
                _give_up(exc)
            taken = 0
        return ids[:taken]

    def wait(self, ids: list[int]) -> list[int]:
        """The results of requests ``ids`` (0, or a negated errno), once all are done."""
        events = (_Event * CAPACITY)()
        with self.lock:
            while missing := sum(1 for i in ids if i not in self.results):
                try:
                    got = _syscall(
                        2,
                        self.handle,
                        ctypes.c_long(missing),
                        ctypes.c_long(CAPACITY),
                        events,
                        None,
                    )
                except InterruptedError:
                    continue
                for event in events[:got]:
                    self.results[event.data] = event.res
            return [self.results.pop(i) for i in ids]

    def __del__(self) -> None:
        """The thread ended: its context goes (the kernel first ends what it still runs)."""
        self._destroy()


def _give_up(exc: OSError) -> None:
    global enabled
    if enabled:
        log.info("fsyncs go through the thread pool: Linux AIO is not available (%s)", exc)
    enabled = False


def _context() -> _Context | None:
    """The calling thread's context (made the first time), or None."""
    if not enabled:
        return None
    held: _Context | bool | None = getattr(_local, "context", None)
    if held is None:
        try:
            held = _Context()
        except OSError as exc:
            if exc.errno in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
                _give_up(exc)
            held = False  # (EAGAIN: the system's contexts are all taken: this thread goes without)
        _local.context = held
    return held if isinstance(held, _Context) else None


class Pending:
    """fsyncs handed to the kernel; :attr:`refused` lists the fds it did not take."""

    def __init__(self, context: _Context, fds: Sequence[int], ids: list[int]) -> None:
        self._context = context
        self._ids = ids
        self.refused = list(fds[len(ids) :])

    def wait(self) -> list[OSError]:
        """Wait for every fsync taken; the errors of those that failed."""
        ids, self._ids = self._ids, []
        if not ids:
            return []
        return [OSError(-res, os.strerror(-res)) for res in self._context.wait(ids) if res < 0]


def start(fds: Sequence[int]) -> Pending | None:
    """Start syncing ``fds`` through the kernel; None where AIO cannot be used."""
    context = _context()
    if context is None:
        return None
    return Pending(context, fds, context.submit(fds))


def usable() -> bool:
    """Whether fsyncs go through the kernel on this thread."""
    return _context() is not None
