"""Durability barriers: many written files made durable with about one wait.

The store writes objects and files without syncing each one, then makes a whole set durable
at once before the next step that depends on it (the journal, the branch, the answer).
``fsync`` calls issued together from several threads let the file system serve them with
one journal commit (ext4 and xfs group concurrent fsyncs), so a group of commands pays for
about one flush instead of one per object, file and folder. libgit2's own fsync is off for
the same reason: it would sync each object, and its parent folder, one after the other.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_WORKERS = 8
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="mnoted-fsync")
        return _pool


def sync_fds(fds: Sequence[int]) -> None:
    """fsync every fd, concurrently when there are several; raise the first error."""
    if len(fds) <= 2:
        for fd in fds:
            os.fsync(fd)
        return
    for done in [_executor().submit(os.fsync, fd) for fd in fds]:
        done.result()


CHUNK = 256
"""Files open at once while syncing: a commit of 75,000 new files must not hit the
process's file limit (1,024 under systemd by default)."""


def sync_paths(paths: Iterable[Path]) -> None:
    """fsync files and folders by path (a path that no longer exists is skipped)."""
    unique = list(dict.fromkeys(paths))
    for start in range(0, len(unique), CHUNK):
        fds: list[int] = []
        try:
            for path in unique[start : start + CHUNK]:
                try:
                    fds.append(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC))
                except FileNotFoundError:
                    continue
            sync_fds(fds)
        finally:
            for fd in fds:
                os.close(fd)


def object_paths(gitdir: Path, oids: Iterable[str]) -> list[Path]:
    """The loose files of ``oids``, their fan-out folders and ``objects/`` itself.

    An object that was already in the database (a pack or an earlier loose file) is durable
    already; its path, if absent, is skipped by :func:`sync_paths`.
    """
    objects = gitdir / "objects"
    files = [objects / oid[:2] / oid[2:] for oid in dict.fromkeys(oids)]
    folders = dict.fromkeys(f.parent for f in files)
    return [*files, *folders, objects] if files else []
