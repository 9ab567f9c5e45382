"""Syncs through io_uring (`store.uring`): errors reach the waiter, waits cross threads."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from mnoted.store import durable, uring

pytestmark = pytest.mark.skipif(uring.ring() is None, reason="no io_uring here")


def files(folder: Path, n: int, tag: str) -> list[int]:
    fds = []
    for i in range(n):
        fd = os.open(folder / f"{tag}-{i}", os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, b"x" * 4096)
        fds.append(fd)
    return fds


def test_a_failed_sync_is_raised_and_the_others_complete(tmp_path: Path) -> None:
    good = files(tmp_path, 3, "good")
    read_end, write_end = os.pipe()  # fsync of a pipe: EINVAL
    try:
        syncing = durable.Syncing([good[0], read_end, good[1]])
        with pytest.raises(OSError) as raised:
            syncing.wait()
        assert raised.value.errno == errno.EINVAL
        durable.sync_fds(good)  # the ring goes on serving
        closed = files(tmp_path, 1, "closed")[0]
        os.close(closed)
        with pytest.raises(OSError) as raised:
            durable.sync_fds([good[2], closed])
        assert raised.value.errno == errno.EBADF
    finally:
        for fd in (*good, read_end, write_end):
            os.close(fd)
    assert uring.ring() is not None


def test_syncs_started_on_one_thread_are_awaited_on_another_under_load(tmp_path: Path) -> None:
    """The store waits on its writer's thread for folder syncs it started a landing before,
    while the merge thread syncs packs: one thread in the kernel at a time, the others
    handed their completions."""
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            fds = files(tmp_path, 3, f"w{k}")
            try:
                for _ in range(100):
                    first, second = durable.Syncing(fds[:2]), durable.Syncing(fds[2:])
                    second.wait()
                    first.wait()
            finally:
                for fd in fds:
                    os.close(fd)
        except BaseException as exc:  # (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    handed = files(tmp_path, 2, "handed")
    started = durable.Syncing(handed)
    waiter = threading.Thread(target=started.wait)
    waiter.start()
    for t in [*threads, waiter]:
        t.join(timeout=60)
        assert not t.is_alive(), "a wait never returned"
    for fd in handed:
        os.close(fd)
    assert errors == []


def test_a_refused_submission_hands_the_syncs_to_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fds = files(tmp_path, 2, "refused")
    monkeypatch.setattr(uring, "_ring", uring.ring())  # (the process's ring is back after)

    def refuse(self: uring.Ring, fds: list[int]) -> list[int]:
        raise OSError(errno.EINVAL, "refused")

    monkeypatch.setattr(uring.Ring, "submit", refuse)
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    try:
        durable.Syncing(fds).wait()
        assert sorted(synced) == sorted(fds)
        assert uring.ring() is None  # the pool from now on
    finally:
        for fd in fds:
            os.close(fd)


def test_a_ring_that_cannot_be_mapped_leaves_no_descriptor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOMEM, "no memory for the rings")

    monkeypatch.setattr(uring.mmap, "mmap", refused)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        with pytest.raises(OSError):
            uring.Ring()
    assert len(os.listdir("/proc/self/fd")) == before
