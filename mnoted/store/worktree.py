"""Reading work-tree files safely and writing a journaled command's files.

Every read and write walks from the workspace root to the file's folder without following
a symlink and then works relative to that folder's fd (:mod:`mnoted.store.dirfd`): a folder
swapped for a symlink after the path was checked cannot redirect the I/O out of the
workspace.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pygit2

from mnoted.core.blob import blob_id
from mnoted.errors import PathRejected
from mnoted.store import dirfd, durable, faults, trees
from mnoted.store.journal import Entry, FileStep
from mnoted.store.paths import normalize
from mnoted.store.statcache import StatCache


def _git_mode(st_mode: int) -> int:
    return trees.EXECUTABLE if st_mode & 0o100 else trees.FILE


def _read(anchor: Path, parts: Sequence[str]) -> tuple[bytes, int] | None:
    *folders, name = parts
    with dirfd.folder(anchor, folders) as fd:
        state = None if fd is None else dirfd.read_at(fd, name)
    return None if state is None else (state[0], _git_mode(state[1].st_mode))


def read_file(location: Path) -> tuple[bytes, int] | None:
    """Bytes and Git mode of a regular file, never following a symlink; None if absent.

    ``location`` is a real path (walked from ``/``); :func:`read_path` reads a workspace
    path from the workspace root.
    """
    return _read(*dirfd.anchored(location))


def read_path(root: Path, rel: str) -> tuple[bytes, int] | None:
    """Bytes and Git mode of normalised workspace path ``rel`` under ``root``; None if absent.

    :class:`PathRejected` for a symlink on the way, a folder where a file is expected, a
    non-regular file or one with several hard links.
    """
    return _read(root, rel.split("/"))


@dataclass(frozen=True)
class DiskFile:
    """A work-tree file as a check against HEAD needs it."""

    blob: str
    mode: int  # Git file mode
    size: int
    data: bytes | None  # None: the blob id came from the stat cache, nothing was read


def _disk_file(fd: int, name: str, rel: str, stats: StatCache | None) -> DiskFile | None:
    if stats is not None:
        st = dirfd.stat_at(fd, name)
        if st is None:
            return None
        known = stats.blob(rel, st)
        if known is not None:
            return DiskFile(known, _git_mode(st.st_mode), st.st_size, None)
    began = time.time_ns()
    state = dirfd.read_at(fd, name)
    if state is None:
        return None
    data, st = state
    blob = blob_id(data)
    if stats is not None:
        stats.remember(rel, st, blob, began)
    return DiskFile(blob, _git_mode(st.st_mode), st.st_size, data)


def disk_file(root: Path, rel: str, stats: StatCache | None) -> DiskFile | None:
    """Blob id, mode and size of normalised path ``rel`` on disk (refused as :func:`read_path`
    refuses); its bytes too unless ``stats`` knew the file unchanged since it was hashed."""
    *folders, name = rel.split("/")
    with dirfd.folder(root, folders) as fd:
        return None if fd is None else _disk_file(fd, name, rel, stats)


@dataclass
class _Staged:
    """A file written under its temporary name, waiting to be synced and renamed."""

    folder: int
    tmp: str
    name: str
    fd: int | None


def materialize(
    repo: pygit2.Repository,
    root: Path,
    entry: Entry,
    data_of: Callable[[str], bytes | None] | None = None,
    stats: StatCache | None = None,
) -> list[str]:
    """Write the command's files where the disk still has the old content.

    Returns the paths left alone because someone changed them meanwhile (their edit
    wins and is committed next, as ``external``) — also when a folder on the way is now a
    symlink: nothing is written through it. The files of a group of commands are written
    in two passes that each wait once: every file under its temporary name, all synced
    together; then every rename, and the folders synced together. ``data_of`` gives the
    bytes of a blob the caller still holds (None: read it from the repository); ``stats``
    spares reading a file known unchanged.
    """
    diverged: list[str] = []
    for start in range(0, len(entry.files), durable.CHUNK):  # bounded open files
        chunk = entry.files[start : start + durable.CHUNK]
        diverged += _write_files(repo, root, chunk, data_of, stats)
    return diverged


def _write_files(
    repo: pygit2.Repository,
    root: Path,
    steps: Sequence[FileStep],
    data_of: Callable[[str], bytes | None] | None,
    stats: StatCache | None,
) -> list[str]:
    diverged: list[str] = []
    staged: list[_Staged] = []
    folders = _Folders(root)
    try:
        for step in steps:
            try:
                outcome = _prepare(repo, step, folders, data_of, stats)
            except PathRejected:
                outcome = False
            if outcome is False:
                diverged.append(step.path)
            elif isinstance(outcome, _Staged):
                staged.append(outcome)
            elif outcome:
                faults.point("file-written")
        durable.sync_fds([s.fd for s in staged if s.fd is not None])
        for s in staged:
            assert s.fd is not None
            os.close(s.fd)
            s.fd = None
            os.rename(s.tmp, s.name, src_dir_fd=s.folder, dst_dir_fd=s.folder)
            s.tmp = ""
            faults.point("file-written")
        durable.sync_fds(list({s.folder for s in staged}))
    finally:
        for s in staged:
            if s.fd is not None:
                os.close(s.fd)
            if s.tmp:
                with contextlib.suppress(OSError):
                    os.unlink(s.tmp, dir_fd=s.folder)
        folders.close()
    return diverged


class _Folders:
    """Folder fds opened while writing one entry, each folder opened once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._by_path: dict[tuple[str, ...], int] = {}
        self._opened: list[int] = []

    def get(self, parts: Sequence[str], *, create: bool = False) -> int | None:
        key = tuple(parts)
        fd = self._by_path.get(key)
        if fd is None:
            fd = dirfd.open_folder(self.root, parts, create=create)
            if fd is not None:
                self._by_path[key] = fd
                self._opened.append(fd)
        return fd

    def forget(self) -> None:
        """After a removal (which may drop empty folders): open folders afresh."""
        self._by_path.clear()

    def close(self) -> None:
        for fd in self._opened:
            os.close(fd)


def _prepare(
    repo: pygit2.Repository,
    step: FileStep,
    folders: _Folders,
    data_of: Callable[[str], bytes | None] | None,
    stats: StatCache | None,
) -> _Staged | bool | None:
    """Check one path and start its write: a :class:`_Staged` file, True if removed, None if
    it already has the content, False if the disk holds a third version."""
    rel = normalize(step.path, config_ok=True)
    *parts, name = rel.split("/")
    fd = folders.get(parts)
    found = None if fd is None else _disk_file(fd, name, rel, stats)
    on_disk = found.blob if found is not None else None
    if on_disk == step.new:
        return None
    if on_disk != step.old:
        return False
    if step.new is None:
        if fd is not None:
            dirfd.remove(folders.root, parts, name)
            folders.forget()
        return True
    if fd is None:
        fd = folders.get(parts, create=True)
        assert fd is not None
    data = data_of(step.new) if data_of is not None else None
    if data is None:
        blob = repo[step.new]
        assert isinstance(blob, pygit2.Blob)
        data = bytes(blob.data)
    mode = 0o755 if step.mode == trees.EXECUTABLE else 0o644
    tmp, file_fd = dirfd.write_temp(fd, name, data, mode)
    return _Staged(fd, tmp, name, file_fd)
