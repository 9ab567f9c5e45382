"""Reading work-tree files safely and writing a journaled command's files.

Every read and write walks from the workspace root to the file's folder without following
a symlink and then works relative to that folder's fd (:mod:`mnoted.store.dirfd`): a folder
swapped for a symlink after the path was checked cannot redirect the I/O out of the
workspace.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pygit2

from mnoted.errors import PathRejected
from mnoted.store import dirfd, faults, trees
from mnoted.store.journal import Entry, FileStep
from mnoted.store.paths import normalize


def _git_mode(st_mode: int) -> int:
    return trees.EXECUTABLE if st_mode & 0o100 else trees.FILE


def _read(anchor: Path, parts: Sequence[str]) -> tuple[bytes, int] | None:
    *folders, name = parts
    with dirfd.folder(anchor, folders) as fd:
        state = None if fd is None else dirfd.read_at(fd, name)
    return None if state is None else (state[0], _git_mode(state[1]))


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


def materialize(repo: pygit2.Repository, root: Path, entry: Entry) -> list[str]:
    """Write the command's files where the disk still has the old content.

    Returns the paths left alone because someone changed them meanwhile (their edit
    wins and is committed next, as ``external``) — also when a folder on the way is now a
    symlink: nothing is written through it.
    """
    diverged: list[str] = []
    for step in entry.files:
        try:
            written = _materialize_one(repo, root, step)
        except PathRejected:
            written = False
        if written is False:
            diverged.append(step.path)
        elif written:
            faults.point("file-written")
    return diverged


def _materialize_one(repo: pygit2.Repository, root: Path, step: FileStep) -> bool | None:
    """Bring one path to the command's content: True if written or removed, None if it
    already was, False if the disk holds a third version."""
    *folders, name = normalize(step.path, config_ok=True).split("/")
    fd = dirfd.open_folder(root, folders)
    try:
        state = None if fd is None else dirfd.read_at(fd, name)
        on_disk = str(pygit2.hash(state[0])) if state is not None else None
        if on_disk == step.new:
            return None
        if on_disk != step.old:
            return False
        if step.new is None:
            if fd is not None:
                dirfd.remove(root, folders, name)
            return True
        if fd is None:
            fd = dirfd.open_folder(root, folders, create=True)
            assert fd is not None
        blob = repo[step.new]
        assert isinstance(blob, pygit2.Blob)
        mode = 0o755 if step.mode == trees.EXECUTABLE else 0o644
        dirfd.write_at(fd, name, bytes(blob.data), mode)
        return True
    finally:
        if fd is not None:
            os.close(fd)
