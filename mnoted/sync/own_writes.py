"""Recognise the daemon's own writes so they are not committed a second time.

The store tells :class:`OwnWrites` "I am writing path P with blob id H" before
it writes (and "P now holds H" after every commit of P, its own or an external
one). When a settled path's file has exactly that content, the watcher drops
it before it reaches the sink. Content ids are Git blob ids (SHA-1 of
``blob <size>\\0<data>``), so the store can pass ``str(oid)`` from pygit2.

This is only an early filter; the store still compares with the last
committed blob before committing. It is built to fail towards committing: a
settled content that differs from the registered one clears the entry, so a
later return to the registered content is a real change and is not hidden.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from mnoted.core.blob import blob_id
from mnoted.sync.debounce import SettledBatch
from mnoted.sync.listing import open_folder

__all__ = ["ABSENT", "OwnWrites", "blob_id", "read_blob_id", "read_blob_id_at"]


@dataclass(frozen=True, slots=True)
class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()
"""Registered content of a path mnoted deleted or renamed away."""

Content = str | _Absent

_CHUNK = 1 << 20
_MAX_SEEN = 1024

Reader = Callable[[str], "Content | None"]
"""Reads a workspace-relative path's content now (:func:`read_blob_id_at` of the root)."""


def read_blob_id(path: str) -> Content | None:
    """Blob id of the regular file at ``path``; ABSENT if missing; None if unreadable.

    Never follows a symlink (``O_NOFOLLOW``): a link could point out of the
    workspace, and Git stores the link itself, not its target.
    """
    return read_blob_id_at(None, path)


def read_blob_id_at(root: str | None, rel: str) -> Content | None:
    """:func:`read_blob_id` of ``rel`` below ``root``, reached through folder fds.

    Each folder on the way is opened with ``O_NOFOLLOW`` relative to its parent, so a
    folder swapped for a symlink never sends the read outside ``root``.
    """
    parent, _, name = rel.rpartition("/")
    if root is None:
        folder_fd = None
    else:
        try:
            folder_fd = open_folder(root, parent.split("/") if parent else [])
        except OSError:
            return None
        if folder_fd is None:
            return ABSENT  # missing, or a link where a folder was: no file of ours is there
    try:
        return _digest(name if folder_fd is not None else rel, folder_fd)
    finally:
        if folder_fd is not None:
            os.close(folder_fd)


def _digest(name: str, folder_fd: int | None) -> Content | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder_fd)
    except FileNotFoundError:
        return ABSENT
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR,):
            return ABSENT
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        digest = hashlib.sha1(b"blob %d\0" % st.st_size, usedforsecurity=False)
        size = 0
        while chunk := os.read(fd, min(_CHUNK, st.st_size + 1)):  # (no 1 MiB buffer for 10 KB)
            digest.update(chunk)
            size += len(chunk)
        if size != st.st_size:  # changed under us: let the next event decide
            return None
        return digest.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


class OwnWrites:
    """Thread-safe map of path -> content mnoted last wrote or committed there."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[str, Content] = {}
        # path → (stat data, registered content) of the last file found to be mnoted's own
        # when renamed into place (the watcher's thread only)
        self._seen: dict[str, tuple[object, ...]] = {}
        self.dropped = 0

    def expect(self, path: str, content: Content) -> None:
        """Register that mnoted is writing ``content`` (a blob id, or ABSENT) at ``path``."""
        with self._lock:
            self._known[path] = content

    def committed(self, path: str, content: Content) -> None:
        """Register the content of ``path`` in the commit just made (any actor)."""
        self.expect(path, content)

    def forget(self, path: str) -> None:
        """Stop recognising ``path`` (e.g. after a failed write the store rolled back)."""
        with self._lock:
            self._known.pop(path, None)

    def knows(self, path: str) -> bool:
        """Whether mnoted registered content for ``path``."""
        with self._lock:
            return path in self._known

    def registered(self, path: str) -> Content | None:
        """What mnoted registered for ``path`` (None: nothing)."""
        with self._lock:
            return self._known.get(path)

    def __len__(self) -> int:
        with self._lock:
            return len(self._known)

    def is_own(self, path: str, actual: Content | None) -> bool:
        """Whether ``path``, holding ``actual`` now (see :func:`read_blob_id`), holds what
        mnoted registered for it. A mismatch forgets the registration."""
        with self._lock:
            return self._matches(path, actual)

    def _matches(self, path: str, actual: Content | None) -> bool:
        known = self._known.get(path)
        if known is None or actual is None:
            return False
        if known == actual:
            return True
        del self._known[path]
        return False

    def renamed_in(self, rel: str, path: bytes, read: Reader) -> bool:
        """Whether the file just renamed to ``rel`` (at ``path``) holds what mnoted registered
        for it; counted in :attr:`dropped` when it does.

        An exchange reports the page's name twice: the second check finds the stat data the
        first one read the file under, for the same registered content, and reads nothing.
        A write in place since would carry events of its own (``IN_MODIFY``), never dropped.
        """
        expected = self.registered(rel)
        if expected is None:
            return False
        try:
            st = os.lstat(path)  # (before the read: a change after it shows in the next one)
            seen: tuple[object, ...] | None = (
                (st.st_ino, st.st_dev, st.st_size, st.st_mode, st.st_mtime_ns, st.st_ctime_ns),
                expected,
            )
        except OSError:
            seen = None
        if seen is None or self._seen.get(rel) != seen:
            if not self.is_own(rel, read(rel)):
                return False
            if seen is not None:
                if len(self._seen) >= _MAX_SEEN:
                    self._seen.clear()
                self._seen[rel] = seen
        self.dropped += 1
        return True

    def drop_from(self, batch: SettledBatch, read: Reader) -> tuple[SettledBatch | None, int]:
        """``batch`` without the paths that hold what mnoted wrote there (None when nothing
        is left), and how many were dropped."""
        if not len(self):
            return batch, 0
        kept = tuple(p for p in batch.paths if not (self.knows(p) and self.is_own(p, read(p))))
        dropped = len(batch.paths) - len(kept)
        self.dropped += dropped
        if not dropped:
            return batch, 0
        result = replace(batch, paths=kept)
        return (result if result else None), dropped
