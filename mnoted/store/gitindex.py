"""Keep Git's index in step with HEAD for the paths the store committed.

Rewriting the whole index costs in proportion to the workspace, so it is kept off the
acknowledged path: commits record their paths as *pending*, and :meth:`GitIndex.refresh` (when
the daemon is idle or once a second under load, on a thread of its own; on close and on
recovery) sets exactly those entries to HEAD's blobs. The index lock is taken with an ownership
token (:mod:`mnoted.store.gitlock`); the new index is written by libgit2 to a private file first
and renamed over ``.git/index`` while the lock is held. Entries written here carry no stat data,
so ``git status`` re-hashes just those files once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

import pygit2

from mnoted.store import gitlock, indexstat, trees
from mnoted.store.atomic import fsync_dir, make_git_folders

PRIVATE_INDEX = "mnote/index.next"

Entry = tuple[str, int] | None
"""A path's (blob id, Git file mode) at HEAD, or None: not there (its entry is removed)."""


class GitIndex:
    """Refreshes index entries; keeps the last index it wrote parsed in memory.

    Parsing a large index is costly; as long as ``.git/index`` is still the file
    this object wrote (the same ``indexstat.stamp``), the parsed copy is reused.
    """

    def __init__(self, gitdir: Path) -> None:
        self.gitdir = gitdir
        self._cached: pygit2.Index | None = None
        self._stamp: tuple[int, int, int, int] | None = None
        self.last_write: tuple[object, object] | None = None
        """``indexstat.stamp`` of ``.git/index`` before and after the last refresh: the
        file it started from and the one it wrote (only the refreshed entries differ)."""

    def refresh(self, entries: Mapping[str, Entry], *, wait: float = gitlock.WAIT_SECONDS) -> None:
        """Set the index entries of these paths to HEAD's (blob id, mode), or remove them.

        Touches no repository (the entries are looked up by the caller), so it may run on a
        thread of its own: libgit2 writes the index without holding the GIL.
        """
        todo = sorted(entries)
        if not todo:
            return
        index_path = self.gitdir / "index"
        private = self.gitdir / PRIVATE_INDEX
        held = gitlock.acquire(self.gitdir, index_path, wait=wait)
        try:
            before = indexstat.stamp(index_path)
            index = self._load(index_path, private)
            self._cached = None
            for path in todo:
                _set_entry(index, entries[path], path)
            index.write()
            fd = os.open(private, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(private, index_path)
            fsync_dir(self.gitdir)
            self._cached, self._stamp = index, indexstat.stamp(index_path)
            self.last_write = (before, indexstat.stamp(index_path))
        finally:
            held.release()

    def _load(self, index_path: Path, private: Path) -> pygit2.Index:
        if self._cached is not None and self._stamp == indexstat.stamp(index_path):
            return self._cached
        make_git_folders(private.parent)
        # leftovers of a crash (ours alone: the workspace's process lock is held)
        for stale in (private, private.with_name(private.name + ".lock")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stale)
        if index_path.exists():
            shutil.copyfile(index_path, private)
        return pygit2.Index(str(private))


def entries_at(tree: pygit2.Tree | None, paths: Iterable[str]) -> dict[str, Entry]:
    """What :meth:`GitIndex.refresh` sets ``paths`` to: their (blob id, mode) in ``tree``."""
    return {path: trees.entry_at(tree, path) for path in paths}


def _set_entry(index: pygit2.Index, entry: Entry, path: str) -> None:
    # a folder that became a file (or the reverse) leaves entries below it
    with contextlib.suppress(KeyError, OSError):
        index.remove_directory(path)
    if entry is None:
        with contextlib.suppress(KeyError, OSError):
            index.remove(path)
    else:
        index.add(
            pygit2.IndexEntry(path, pygit2.Oid(hex=entry[0]), pygit2.enums.FileMode(entry[1]))
        )
