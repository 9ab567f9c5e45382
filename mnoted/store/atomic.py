"""Crash-safe file writes: temp file in the same folder, fsync, rename, fsync the folder.

libgit2 never fsyncs work-tree files, so the store does it itself. The temporary name starts
with :data:`~mnoted.store.paths.TEMP_PREFIX` so a watcher (and ``.gitignore``) skips it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from mnoted.store.paths import TEMP_PREFIX


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (created, renamed or removed names) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(root: Path, folder: Path) -> None:
    """Create ``folder`` (inside ``root``) and its missing parents, each made durable."""
    missing: list[Path] = []
    current = folder
    while current != root and not current.exists():
        missing.append(current)
        current = current.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d)
        fsync_dir(d.parent)


def write_atomic(path: Path, data: bytes, mode: int = 0o644, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically: readers see the old or the new bytes."""
    folder = path.parent
    tmp = folder / f"{TEMP_PREFIX}{path.name[:64]}-{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync:
        fsync_dir(folder)


def remove_durably(root: Path, path: Path) -> None:
    """Unlink ``path`` if present, then drop folders it leaves empty (as Git does)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fsync_dir(path.parent)
    folder = path.parent
    while folder != root:
        try:
            os.rmdir(folder)
        except OSError:
            break
        fsync_dir(folder.parent)
        folder = folder.parent


def remove_temp_files(folder: Path) -> list[Path]:
    """Delete this store's leftover temporary files in ``folder`` (after a crash)."""
    removed: list[Path] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if name.startswith(TEMP_PREFIX):
            with contextlib.suppress(OSError):
                os.unlink(folder / name)
                removed.append(folder / name)
    return removed
