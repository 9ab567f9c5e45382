"""Durability barriers: many written files made durable with about one wait.

The store writes objects and files without syncing each one, then makes a whole set durable
at once before the next step that depends on it (the journal, the branch, the answer).
``fsync`` calls issued together let the file system serve them with one journal commit
(ext4 and xfs group concurrent fsyncs), so a group of commands pays for about one flush
instead of one per object, file and folder. libgit2's own fsync is off for the same reason:
it would sync each object, and its parent folder, one after the other. A set goes to the
kernel in one system call (:mod:`~mnoted.store.aio`); what it does not take, and every set
where Linux AIO is missing, goes to a pool of threads, one fsync each.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from mnoted.store import aio

log = logging.getLogger("mnoted.store")

T = TypeVar("T")

_WORKERS = 8
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="mnoted-fsync")
        return _pool


class Syncing:
    """fsyncs started together (by the kernel, else on the pool): the caller goes on with
    other work and calls :meth:`wait` before it depends on them."""

    def __init__(self, fds: Sequence[int], *, owned: Sequence[int] = ()) -> None:
        self._owned = list(owned)  # closed once synced
        # through the kernel where it can (`store.aio`); what it does not take, on the pool
        self._kernel = aio.start(fds) if fds else None
        rest = self._kernel.refused if self._kernel is not None else fds
        self._pending: list[Future[None]] = [_executor().submit(os.fsync, fd) for fd in rest]

    def wait(self, error: BaseException | None = None) -> None:
        """Return once every fsync is done; raise ``error`` or the first one that failed."""
        if self._kernel is not None:
            try:
                failed = self._kernel.wait()
            except OSError as exc:  # (io_getevents itself failed: what the syncs did is unknown)
                failed = [exc]
            error = error or (failed[0] if failed else None)
        for done in self._pending:
            try:
                done.result()
            except BaseException as exc:
                error = error or exc
        self._pending = []
        for fd in self._owned:
            os.close(fd)
        self._owned = []
        if error is not None:
            raise error


def run(fn: Callable[..., T], *args: Any) -> Future[T]:
    """``fn(*args)`` on the pool: work that mostly runs without the GIL (checksums, writes)
    goes on beside the caller's."""
    return _executor().submit(fn, *args)


def close_later(fd: int) -> None:
    """Close ``fd`` on the pool: closing the last reference to a large file whose name is
    gone frees its pages, a cost the caller need not wait for."""
    _executor().submit(_close_quietly, fd)


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError as exc:  # (nothing depends on it: the file's name is gone already)
        log.warning("closing a replaced file failed: %s", exc)


def start_paths(paths: Sequence[str | os.PathLike[str]], fds: Sequence[int] = ()) -> Syncing:
    """Open ``paths`` (files or folders) and start syncing them with ``fds`` on the pool;
    :meth:`Syncing.wait` closes what was opened here."""
    opened = _open_all(paths)
    return Syncing([*fds, *opened], owned=opened)


def _open_all(paths: Sequence[str | os.PathLike[str]]) -> list[int]:
    """``paths`` opened for syncing (all of them, or none: an error closes what was open)."""
    opened: list[int] = []
    try:
        for path in paths:
            opened.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise
    return opened


def sync_fds(fds: Sequence[int]) -> None:
    """fsync every fd, concurrently when there are several; raise the first error.

    The kernel syncs them all at once; without it, the first is synced on the calling
    thread while the pool syncs the others. Every fd is synced (or has failed) before this
    returns, so the caller may close them.
    """
    if not fds:
        return
    if aio.usable():  # (the kernel syncs them all at once)
        Syncing(fds).wait()
        return
    others = Syncing(fds[1:])
    error: BaseException | None = None
    try:
        os.fsync(fds[0])
    except BaseException as exc:
        error = exc
    others.wait(error)


def sync_paths(paths: Sequence[str | os.PathLike[str]], fds: Sequence[int] = ()) -> None:
    """Open ``paths`` (files or folders), then sync them with ``fds`` in one wait
    (:func:`sync_fds`); what was opened here is closed again."""
    opened = _open_all(paths)
    try:
        sync_fds([*fds, *opened])
    finally:
        for fd in opened:
            os.close(fd)


CHUNK = 256
"""Files open at once while syncing: a commit of 75,000 new files must not hit the
process's file limit (1,024 under systemd by default)."""
