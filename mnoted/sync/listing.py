"""Listing folders below the watched root through folder fds, never by path.

watchdog lists a new or moved-in folder with ``os.walk(path)`` (to watch its subfolders and
to report the files in it). If a folder on that path is swapped for a symlink meanwhile,
``os.walk`` lists the link's target, outside the workspace. :func:`walk` reaches the folder
from the root one component at a time with ``O_DIRECTORY | O_NOFOLLOW`` and lists it and
its subfolders relative to those fds: a symlink at any step ends the walk there.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Sequence

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Step = tuple[bytes, list[bytes], list[bytes]]


def walk(
    root: bytes, top: bytes, prune: frozenset[bytes] = frozenset(), *, files: bool = True
) -> Iterator[Step]:
    """``os.walk(top)`` (top-down, links not followed) for a folder at or below ``root``.

    Yields ``(folder, subfolders, files)`` with absolute byte paths for ``folder``; the
    caller may remove names from ``subfolders`` to skip them. Subfolders named in
    ``prune`` are never entered. Nothing is yielded if ``top`` is not a folder reached
    without a symlink. With ``files=False`` the file lists are left empty (cheaper).
    """
    rel = os.path.relpath(top, root)
    if rel == b".":
        parts: list[str] = []
    elif rel == b".." or rel.startswith(b"../"):
        return
    else:
        parts = [os.fsdecode(p) for p in rel.split(b"/")]
    try:
        fd = open_folder(root, parts)
    except OSError:
        return
    if fd is None:
        return
    yield from _walk(fd, top, prune, files)


def open_folder(root: bytes | str, parts: Sequence[str]) -> int | None:
    """An fd of folder ``root/parts...``, each component opened with ``O_NOFOLLOW``
    relative to the previous one; None if one is missing, a symlink or not a folder."""
    fd = os.open(root, _DIR_FLAGS)
    for name in parts:
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                return None
            raise
        os.close(fd)
        fd = child
    return fd


def _walk(fd: int, path: bytes, prune: frozenset[bytes], with_files: bool) -> Iterator[Step]:
    """Walk the folder open as ``fd`` (closed when done)."""
    try:
        folders: list[bytes] = []
        files: list[bytes] = []
        try:
            with os.scandir(fd) as listing:
                for item in listing:
                    if item.is_dir(follow_symlinks=False):
                        name = os.fsencode(item.name)
                        if name not in prune:
                            folders.append(name)
                    elif with_files:
                        files.append(os.fsencode(item.name))
        except OSError:
            return
        yield path, folders, files
        for name in folders:
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # gone, or swapped for a symlink since it was listed
            yield from _walk(child, os.path.join(path, name), prune, with_files)
    finally:
        os.close(fd)
