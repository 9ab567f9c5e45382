"""Reading work-tree files safely and writing a journaled command's files."""

from __future__ import annotations

import os
from pathlib import Path

import pygit2

from mnoted.errors import PathRejected
from mnoted.store import faults, trees
from mnoted.store.atomic import make_dirs, remove_durably, write_atomic
from mnoted.store.journal import Entry
from mnoted.store.paths import resolve


def read_file(location: Path) -> tuple[bytes, int] | None:
    """Bytes and Git mode of a regular file, never following a symlink; None if absent."""
    try:
        fd = os.open(location, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PathRejected(f"cannot read {location.name}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    mode = trees.EXECUTABLE if st.st_mode & 0o100 else trees.FILE
    return b"".join(chunks), mode


def materialize(repo: pygit2.Repository, root: Path, entry: Entry) -> list[str]:
    """Write the command's files where the disk still has the old content.

    Returns the paths left alone because someone changed them meanwhile (their edit
    wins and is committed next, as ``external``).
    """
    diverged: list[str] = []
    for step in entry.files:
        try:
            location = resolve(root, step.path, config_ok=True)
        except PathRejected:
            diverged.append(step.path)
            continue
        state = read_file(location)
        on_disk = str(pygit2.hash(state[0])) if state is not None else None
        if on_disk == step.new:
            continue
        if on_disk != step.old:
            diverged.append(step.path)
            continue
        if step.new is None:
            remove_durably(root, location)
        else:
            blob = repo[step.new]
            assert isinstance(blob, pygit2.Blob)
            make_dirs(root, location.parent)
            write_atomic(
                location,
                bytes(blob.data),
                0o755 if step.mode == trees.EXECUTABLE else 0o644,
            )
        faults.point("file-written")
    return diverged
