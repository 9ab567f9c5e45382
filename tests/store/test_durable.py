"""Durability barriers: fsyncs handed to the kernel (Linux AIO) or to the pool, and every
error of either reaching the caller."""

from __future__ import annotations

import errno
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnoted.store import aio, durable


def _kernel_takes_fsyncs() -> bool:
    """Whether this machine's kernel takes an fsync through AIO (Linux 4.18+, not forbidden)."""
    fd, name = tempfile.mkstemp()
    try:
        pending = aio.start([fd])
        return pending is not None and not pending.refused and not pending.wait()
    finally:
        os.close(fd)
        os.unlink(name)


needs_aio = pytest.mark.skipif(not _kernel_takes_fsyncs(), reason="no Linux AIO fsync here")


@pytest.fixture
def files(tmp_path: Path) -> Iterator[list[int]]:
    """Four written files and their folder, open."""
    fds = []
    for i in range(4):
        fd = os.open(tmp_path / f"f{i}", os.O_CREAT | os.O_WRONLY)
        os.write(fd, b"x" * 4096)
        fds.append(fd)
    fds.append(os.open(tmp_path, os.O_RDONLY))
    yield fds
    for fd in fds:
        os.close(fd)


@needs_aio
def test_files_and_folders_are_synced_by_the_kernel(files: list[int]) -> None:
    syncing = durable.Syncing(files)
    assert syncing._kernel is not None and syncing._kernel.refused == []
    assert syncing._pending == []  # no pool thread involved
    syncing.wait()
    durable.sync_fds(files)


@needs_aio
def test_what_the_kernel_refuses_goes_to_the_pool_and_its_error_is_raised(
    files: list[int],
) -> None:
    read_end, write_end = os.pipe()  # (a pipe cannot be synced: EINVAL, as os.fsync says)
    try:
        syncing = durable.Syncing([files[0], read_end, files[1]])
        assert syncing._kernel is not None and syncing._kernel.refused == [read_end, files[1]]
        with pytest.raises(OSError) as caught:
            syncing.wait()
        assert caught.value.errno == errno.EINVAL
        with pytest.raises(OSError) as caught:
            durable.sync_fds([files[0], read_end])
        assert caught.value.errno == errno.EINVAL
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_closed_fd_is_an_error(files: list[int]) -> None:
    fd = os.dup(files[0])
    os.close(fd)
    with pytest.raises(OSError) as caught:
        durable.sync_fds([fd])
    assert caught.value.errno == errno.EBADF


@needs_aio
def test_a_failure_the_kernel_reports_is_raised_after_every_sync_ended(
    files: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = aio._Context.wait

    def one_failed(self: aio._Context, ids: list[int]) -> list[int]:
        results = real(self, ids)
        return [-errno.EIO, *results[1:]]

    monkeypatch.setattr(aio._Context, "wait", one_failed)
    syncing = durable.Syncing(files)
    with pytest.raises(OSError) as caught:
        syncing.wait()
    assert caught.value.errno == errno.EIO
    with pytest.raises(ValueError):  # the caller's own error comes first
        durable.Syncing(files).wait(ValueError("first"))


@needs_aio
def test_more_fds_than_a_context_holds(tmp_path: Path) -> None:
    fds = [os.open(tmp_path / f"f{i}", os.O_CREAT | os.O_WRONLY) for i in range(aio.CAPACITY + 5)]
    try:
        syncing = durable.Syncing(fds)
        assert syncing._kernel is not None and len(syncing._kernel.refused) == 5
        syncing.wait()
    finally:
        for fd in fds:
            os.close(fd)


@needs_aio
def test_a_sync_started_on_one_thread_may_be_waited_for_on_another(files: list[int]) -> None:
    syncings = [durable.Syncing(files[:2]), durable.Syncing(files[2:])]
    errors: list[BaseException] = []

    def wait(s: durable.Syncing) -> None:
        try:
            s.wait()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wait, args=(s,)) for s in syncings]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == [] and not any(t.is_alive() for t in threads)


def test_without_aio_every_fsync_goes_to_the_pool(
    files: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aio, "enabled", False)
    syncing = durable.Syncing(files)
    assert syncing._kernel is None and len(syncing._pending) == len(files)
    syncing.wait()
    durable.sync_fds(files)


def _aio_rings() -> int:
    """The AIO contexts this process holds (each maps a ring named ``[aio]``)."""
    with open("/proc/self/maps") as fh:
        return sum(1 for line in fh if "[aio]" in line)


@needs_aio
def test_a_thread_that_ends_gives_its_context_back(files: list[int]) -> None:
    before = _aio_rings()
    held: list[int] = []

    def sync() -> None:
        durable.Syncing(files).wait()
        held.append(_aio_rings())  # (this thread's own context among them)

    for _ in range(20):
        t = threading.Thread(target=sync)
        t.start()
        t.join(timeout=30)
    assert len(held) == 20 and min(held) >= 1
    # kept, the twenty would all still be there (others' threads may hold one or two)
    assert _aio_rings() <= before + 2


@needs_aio
def test_a_failed_wait_for_the_kernel_still_waits_for_the_pool_and_closes_what_it_opened(
    tmp_path: Path, files: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: aio._Context, ids: list[int]) -> list[int]:
        raise OSError(errno.EFAULT, "io_getevents failed")

    monkeypatch.setattr(aio._Context, "wait", broken)
    read_end, write_end = os.pipe()  # (refused by the kernel: synced, and failing, on the pool)
    try:
        syncing = durable.start_paths([tmp_path], [files[0], read_end])
        on_pool = list(syncing._pending)
        assert len(on_pool) == 2  # the pipe and the folder opened after it
        with pytest.raises(OSError) as caught:
            syncing.wait()
        assert caught.value.errno == errno.EFAULT
        assert all(f.done() for f in on_pool) and syncing._owned == []
    finally:
        os.close(read_end)
        os.close(write_end)
