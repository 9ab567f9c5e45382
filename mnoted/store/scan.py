"""The work tree compared with Git's index by stat data, walked through folder fds.

libgit2's status walk opens every folder and file by path: a folder swapped for a symlink
during the walk sends it outside the workspace. This walk starts from the root's fd and
opens each subfolder with ``O_DIRECTORY | O_NOFOLLOW`` relative to its parent's fd, lists
it with ``os.scandir(fd)`` (whose ``stat`` is an ``fstatat`` on that fd) and opens a file
to hash it with ``O_NOFOLLOW`` from the same fd, so nothing outside is ever listed or read.

Like ``git status`` it decides "changed?" from the stat data the index keeps (size, mtime,
ctime, inode, mode) and hashes only a file whose stat differs, whose entry has no stat
data (libgit2 writes none for entries set from a tree) or whose mtime is not older than
the index file (racy Git: a write in the same clock tick leaves the stat unchanged). A file
hashed and found unchanged is remembered with its stat in the store's
:class:`~mnoted.store.statcache.StatCache` (under the same racy rule), so neither a scan nor
a write's check hashes it again while its stat stays the same.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from mnoted.core.blob import blob_id
from mnoted.errors import PathRejected
from mnoted.store import dirfd
from mnoted.store.indexstat import GITLINK, Entry, IndexStat
from mnoted.store.statcache import StatCache
from mnoted.store.worktree import OtherRepositories

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LOW32 = 0xFFFFFFFF
_KIND_AND_EXEC = 0o170100  # file type bits and the owner's executable bit: what Git keeps

Ignored = Callable[[str], bool]
"""Git's ignore rules for an untracked path (a folder ends with ``/``)."""


def git_mode(st_mode: int) -> int | None:
    """The mode Git would record for a file of this ``st_mode`` (None: Git skips it)."""
    if stat.S_ISREG(st_mode):
        return 0o100755 if st_mode & 0o100 else 0o100644
    if stat.S_ISLNK(st_mode):
        return 0o120000
    return None


class Walk:
    """One comparison of (part of) the work tree with one version of the index."""

    def __init__(
        self,
        root: Path,
        index: IndexStat,
        cache: StatCache,
        ignored: Ignored,
        *,
        stored_mode: Callable[[int, int], int] = lambda disk, _: disk,
    ) -> None:
        self.root = root
        self.stored_mode = stored_mode  # (disk, index) -> what Git records: core.fileMode
        self.index = index
        self.cache = cache
        self.ignored = ignored
        self.changed: set[str] = set(index.unmerged)
        self.seen: set[str] = set()

    # scopes ---------------------------------------------------------------------------------
    def tree(self, folder: str) -> None:
        """Everything at and below ``folder`` ("" for the whole work tree)."""
        fd = self._open(folder)
        if fd is not None:
            try:
                if not folder or self.index.holds(folder) or not dirfd.holds_repository(fd):
                    self._folder(fd, f"{folder}/" if folder else "", recursive=True)
            finally:
                os.close(fd)
        if folder or len(self.seen) < len(self.index.entries):
            self._deleted(self.index.under(folder))

    def folder(self, folder: str) -> None:
        """The entries of ``folder`` itself, not its subfolders."""
        fd = self._open(folder)
        if fd is not None:
            try:
                self._folder(fd, f"{folder}/" if folder else "", recursive=False)
            finally:
                os.close(fd)
        start = len(folder) + 1 if folder else 0
        self._deleted(p for p in self.index.under(folder) if "/" not in p[start:])

    def paths(self, paths: Iterable[str]) -> None:
        """Single paths (a folder among them stands for everything below it)."""
        others = OtherRepositories(self.root, self.index.holds)
        for path in paths:
            if others.holding(path) is not None:
                continue  # another repository inside the workspace is not ours to commit
            parent, _, name = path.rpartition("/")
            fd = self._open(parent)
            if fd is None:
                self._deleted(self._tracked_at(path))
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                self._deleted(self._tracked_at(path))
                continue
            except OSError:
                self.changed.add(path)
                continue
            finally:
                os.close(fd)
            entry = self.index.entries.get(path)
            if not stat.S_ISDIR(st.st_mode):
                self._file_at(parent, name, path, st)
            elif entry is not None and entry[0] == GITLINK:
                self.seen.add(path)  # a submodule: its contents are its own repository's
            else:
                if entry is not None:  # a tracked file replaced by a folder
                    self.seen.add(path)
                    self.changed.add(path)
                self.tree(path)

    def _tracked_at(self, path: str) -> list[str]:
        """The tracked file at ``path``, or those below it if it names a folder."""
        return [path] if path in self.index.entries else list(self.index.under(path))

    def result(self) -> set[str]:
        return self.changed

    # the walk -------------------------------------------------------------------------------
    def _open(self, folder: str) -> int | None:
        try:
            return dirfd.open_folder(self.root, folder.split("/") if folder else [])
        except (PathRejected, NotADirectoryError):
            return None

    def _folder(self, fd: int, prefix: str, *, recursive: bool) -> None:
        lookup = self.index.entries.get
        racy = self.index.mtime_ns
        seen = self.seen.add
        subfolders: list[str] = []
        untracked: list[os.DirEntry[str]] = []
        with os.scandir(fd) as listing:
            for item in listing:
                if item.is_dir(follow_symlinks=False):
                    subfolders.append(item.name)
                    continue
                path = prefix + item.name
                entry = lookup(path)
                if entry is None:
                    untracked.append(item)
                    continue
                seen(path)
                st = item.stat(follow_symlinks=False)
                mtime = st.st_mtime_ns
                if (
                    entry[2] == mtime
                    and mtime < racy
                    and entry[3] == st.st_ctime_ns
                    and entry[1] == st.st_size & _LOW32
                    and entry[4] == st.st_ino & _LOW32
                    and entry[0] & _KIND_AND_EXEC == st.st_mode & _KIND_AND_EXEC
                ):
                    continue
                self._compare(fd, item.name, path, entry, st)
        for item in untracked:
            kind_known = item.is_file(follow_symlinks=False) or item.is_symlink()
            if kind_known and not self.ignored(prefix + item.name):
                self.changed.add(prefix + item.name)
        for name in subfolders:
            self._subfolder(fd, prefix, name, recursive=recursive)

    def _subfolder(self, fd: int, prefix: str, name: str, *, recursive: bool) -> None:
        if name == ".git":
            return
        path = prefix + name
        entry = self.index.entries.get(path)
        if entry is not None:
            self.seen.add(path)
            if entry[0] == GITLINK:
                return  # a submodule: its contents are its own repository's
            self.changed.add(path)  # a tracked file replaced by a folder
        if not recursive:
            return
        tracked = self.index.holds(path)
        if not tracked and self.ignored(path + "/"):
            return
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.EACCES:  # unreadable: nothing known about what is inside
                self.seen.update(self.index.under(path))
                return
            if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                raise
            return  # gone, or swapped for a symlink since it was listed: never followed
        try:
            if not tracked and dirfd.holds_repository(child):
                return  # another repository inside the workspace is not ours to commit
            self._folder(child, path + "/", recursive=True)
        finally:
            os.close(child)

    def _file_at(self, parent: str, name: str, path: str, st: os.stat_result) -> None:
        entry = self.index.entries.get(path)
        if entry is None:
            if git_mode(st.st_mode) is not None and not self.ignored(path):
                self.changed.add(path)
            return
        self.seen.add(path)
        fd = self._open(parent)
        if fd is None:
            self.changed.add(path)
            return
        try:
            self._compare(fd, name, path, entry, st)
        finally:
            os.close(fd)

    def _compare(self, fd: int, name: str, path: str, entry: Entry, st: os.stat_result) -> None:
        """A tracked file whose stat does not prove it unchanged: decide by content."""
        if path in self.index.skipped:
            return
        mode = git_mode(st.st_mode)
        if mode is not None:
            mode = self.stored_mode(mode, entry[0])
        # A size of 0 proves nothing: entries without stat data, and those Git "smudged"
        # because they were racily clean when it wrote the index, must be read.
        if mode != entry[0] or (entry[1] != 0 and entry[1] != st.st_size & _LOW32):
            self.changed.add(path)
            return
        oid = entry[5].hex()
        if self.cache.blob(path, st) == oid:
            return
        began = time.time_ns()
        try:
            found = _hash_at(fd, name, st)
        except OSError:
            found = None
        if found is None or found[0] != oid:
            self.changed.add(path)
            return
        self.cache.remember(path, found[1], oid, began)

    def _deleted(self, tracked: Iterable[str]) -> None:
        seen, skipped = self.seen, self.index.skipped
        self.changed.update(p for p in tracked if p not in seen and p not in skipped)


def exists(root: Path, rel: str) -> bool:
    """Whether anything is at workspace path ``rel``, looked up without following symlinks."""
    parent, _, name = rel.rpartition("/")
    try:
        fd = dirfd.open_folder(root, parent.split("/") if parent else [])
    except (PathRejected, NotADirectoryError):
        return False
    if fd is None:
        return False
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)
    return True


def _hash_at(fd: int, name: str, st: os.stat_result) -> tuple[str, os.stat_result] | None:
    """Git's object id of ``name`` in folder ``fd`` and the stat of what was read."""
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(os.fsencode(name), dir_fd=fd)
        return blob_id(target), st
    file_fd = os.open(name, _READ_FLAGS, dir_fd=fd)
    try:
        opened = os.fstat(file_fd)
        if not stat.S_ISREG(opened.st_mode):
            return None
        data = dirfd.read_all(file_fd, opened.st_size)
    finally:
        os.close(file_fd)
    return blob_id(data), opened
