"""Crash-safe file writes: temp file in the same folder, fsync, rename, fsync the folder.

libgit2 never fsyncs work-tree files, so the store does it itself. The temporary name starts
with :data:`~mnoted.store.paths.TEMP_PREFIX` so a watcher (and ``.gitignore``) skips it.
Every operation is done relative to the fd of its folder, reached without following a
symlink (:mod:`mnoted.store.dirfd`), so a folder swapped for a symlink between the check and
the write cannot redirect it out of the workspace.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from mnoted.errors import PathRejected
from mnoted.store import dirfd


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a folder's entries (created, renamed or removed names) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_T = TypeVar("_T")


def in_folder(folder: str, action: Callable[[], _T]) -> _T:
    """``action`` (a system call on a name in ``folder``), again once ``folder`` and its
    parents are made if it failed for want of them: folders the store's own writes need
    (lock tokens, reflogs, packs) are made on first use or when removed, not checked with a
    ``mkdir`` before every write."""
    try:
        return action()
    except FileNotFoundError:
        make_git_folders(folder)
        return action()


def make_git_folders(folder: str | os.PathLike[str]) -> None:
    """Make ``folder`` and its missing parents inside a Git directory that exists, never the
    Git directory itself nor what holds it: a workspace moved away while the daemon ran was
    made again at its old path (an empty ``.git`` with an index and a lock folder), and the
    folder could not be put back. :class:`FileNotFoundError` then."""
    path = os.path.abspath(folder)
    while not os.path.isdir(path):
        if os.path.basename(path) == ".git" or os.path.dirname(path) == path:
            raise FileNotFoundError(errno.ENOENT, "the Git directory is gone", str(folder))
        path = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)


def make_dirs(root: Path, folder: Path) -> None:
    """Create ``folder`` (inside ``root``) and its missing parents, each made durable."""
    with dirfd.folder(root, folder.relative_to(root).parts, create=True):
        pass


def write_atomic(path: Path, data: bytes, mode: int = 0o644, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically: readers see the old or the new bytes.

    ``path`` must be a real path (its folders are walked from ``/`` without following a
    symlink). Work-tree writes walk from the workspace root instead (``worktree``).
    """
    anchor, (*parts, name) = dirfd.anchored(path)
    with dirfd.folder(anchor, parts) as fd:
        if fd is None:
            raise FileNotFoundError(2, "No such file or directory", str(path.parent))
        dirfd.write_at(fd, name, data, mode, sync=sync)


def remove_durably(root: Path, path: Path) -> None:
    """Unlink ``path`` if present, then drop folders it leaves empty (as Git does)."""
    *parts, name = path.relative_to(root).parts
    dirfd.remove(root, parts, name)


def remove_temp_files(folder: Path) -> list[Path]:
    """Delete this store's leftover temporary files in ``folder`` (after a crash).

    ``folder`` must be a real path; a folder that is missing or reached through a symlink
    is left alone.
    """
    try:
        with dirfd.folder(*dirfd.anchored(folder)) as fd:
            return [] if fd is None else [folder / n for n in dirfd.remove_temps(fd)]
    except (OSError, PathRejected):
        return []
