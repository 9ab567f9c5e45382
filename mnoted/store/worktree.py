"""Reading work-tree files safely and writing a journaled command's files.

Every read and write walks from the workspace root to the file's folder without following
a symlink and then works relative to that folder's fd (:mod:`mnoted.store.dirfd`): a folder
swapped for a symlink after the path was checked cannot redirect the I/O out of the
workspace.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pygit2

from mnoted.core.blob import blob_id
from mnoted.errors import PathRejected
from mnoted.store import dirfd, durable, faults, trees
from mnoted.store.filters import Filters
from mnoted.store.journal import Entry, FileStep
from mnoted.store.paths import normalize
from mnoted.store.settle import Settling, no_new_writer
from mnoted.store.statcache import Key, StatCache, key_of

_RENAME_NOREPLACE = 1


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
    key: Key  # its stat data (statcache.key_of), to notice a change made after the check


def _disk_file(
    fd: int, name: str, rel: str, stats: StatCache | None, read: bool = True
) -> DiskFile | None:
    if stats is not None:
        st = dirfd.stat_at(fd, name)
        if st is None:
            return None
        known = stats.blob(rel, st)
        if known is not None:
            return DiskFile(known, _git_mode(st.st_mode), st.st_size, None, key_of(st))
    if not read:
        return None
    began = time.time_ns()
    state = dirfd.read_at(fd, name)
    if state is None:
        return None
    data, st = state
    blob = stats.recent(rel, data) if stats is not None else None
    if blob is None:
        blob = blob_id(data)
    if stats is not None:
        stats.remember(rel, st, blob, began)
        stats.saw(rel, data, blob)
    return DiskFile(blob, _git_mode(st.st_mode), st.st_size, data, key_of(st))


def disk_file(
    root: Path, rel: str, stats: StatCache | None, *, read: bool = True
) -> DiskFile | None:
    """Blob id, mode and size of normalised path ``rel`` on disk (refused as :func:`read_path`
    refuses); its bytes too unless ``stats`` knew the file unchanged since it was hashed.
    Without ``read``, only what ``stats`` knows: None too for a file it would have to read."""
    *folders, name = rel.split("/")
    with dirfd.folder(root, folders) as fd:
        return None if fd is None else _disk_file(fd, name, rel, stats, read)


class OtherRepositories:
    """Folders of the work tree that hold another Git repository (a clone, a submodule not
    yet added) and hold nothing ``tracked``: ``git add`` adds none of the files below them,
    and neither does mnoted. Each folder is looked at once per instance: the new files of
    one pass share their folders."""

    def __init__(self, root: Path, tracked: Callable[[str], bool]) -> None:
        self._root = root
        self._tracked = tracked
        self._seen: dict[str, bool] = {}

    def holding(self, rel: str) -> str | None:
        """The outermost such folder above path ``rel``, or None."""
        parts = rel.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/".join(parts[:depth])
            found = self._seen.get(folder)
            if found is None:
                found = not self._tracked(folder) and self._holds_repository(parts[:depth])
                self._seen[folder] = found
            if found:
                return folder
        return None

    def _holds_repository(self, parts: list[str]) -> bool:
        try:
            with dirfd.folder(self._root, parts) as fd:
                return fd is not None and dirfd.holds_repository(fd)
        except PathRejected:  # a symlink on the way: nothing below it is committed anyway
            return False


@dataclass
class _Pending:
    """One path checked against the command's old content, waiting to be put in place: a
    new file under its temporary name (``tmp``), or a removal (``tmp`` empty)."""

    path: str
    parts: list[str]
    name: str
    folder: int | None
    seen: Key | None  # the stat data of what the check found (None: nothing there)
    tmp: str = ""
    fd: int | None = None
    shown: str = ""  # the blob id of its bytes, where a smudge filter made them differ

    def put_in_place(self, replaceable: Callable[[], bool]) -> bool:
        """Put the new file at the path if the file there is still the one checked; False
        (the path as it was, the new file under its temporary name) if not.

        The two files are exchanged in one step (``renameat2``), then the one taken out is
        looked at: a save renamed over the path since the check, an edit, or a writer that
        began to open it (``replaceable``, the read lease held on it) puts it back at once,
        so no save is replaced and no writer is left writing to a file no longer at the
        path. A new path is taken only if it is still free. Where ``renameat2`` is not
        available, a plain rename (the check before it is then all there is).
        """
        assert self.folder is not None
        faults.point("file-renaming")
        folder, tmp, name = self.folder, self.tmp, self.name
        try:
            if self.seen is None:
                dirfd.renameat2(folder, tmp, folder, name, _RENAME_NOREPLACE)
            else:
                dirfd.exchange(folder, tmp, folder, name)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOENT):  # made, or removed, since the check
                return False
            if exc.errno not in (errno.ENOSYS, errno.EINVAL):
                raise
            os.rename(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
            self.tmp = ""
            return True
        if self.seen is not None:
            st = os.stat(tmp, dir_fd=folder, follow_symlinks=False)
            if key_of(st)[:5] != self.seen[:5] or not replaceable():  # (a rename moves ctime)
                try:
                    dirfd.exchange(folder, tmp, folder, name)
                except OSError:  # theirs back at the path whatever it costs (ours is in Git)
                    os.rename(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
                    self.tmp = ""
                return False
            os.unlink(tmp, dir_fd=folder)
        self.tmp = ""
        return True

    def drop_temp(self) -> None:
        if self.folder is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp, dir_fd=self.folder)
        self.tmp = ""


def materialize(
    repo: pygit2.Repository,
    root: Path,
    entry: Entry,
    data_of: Callable[[str], bytes | None] | None = None,
    stats: StatCache | None = None,
    filters: Filters | None = None,
    settling: Settling | None = None,
    raced: list[FileStep] | None = None,
) -> list[str]:
    """Write the command's files where the disk still has the old content.

    Returns the paths left alone because someone changed them meanwhile (their edit
    wins and is committed next, as ``external``) — also when a folder on the way is now a
    symlink: nothing is written through it. The files of a group of commands are written
    in two passes that each wait once: every file under its temporary name, all synced
    together; then every rename, and the folders synced together. ``data_of`` gives the
    bytes of a blob the caller still holds (None: read it from the repository); ``stats``
    spares reading a file known unchanged; ``filters`` (the workspace's) gives the bytes a
    checkout writes for a blob and the blob Git stores for the bytes found. The landing of
    a small command uses :class:`FileWrites` itself, to sync the temporary files in a wait
    it makes anyway. ``raced`` (of a command whose branch moved before its files were
    checked) gets the steps of the paths left alone because someone changed them since
    the command was planned: their edit is committed next, and the change put back on it.
    """
    diverged: list[str] = []
    for start in range(0, len(entry.files), durable.CHUNK):  # bounded open files
        chunk = entry.files[start : start + durable.CHUNK]
        writes = FileWrites(repo, root, chunk, data_of, stats, filters, settling)
        try:
            durable.sync_fds(writes.fds())
            diverged += writes.finish()
            if raced is not None:
                steps = {step.path: step for step in chunk}
                raced += [steps[path] for path in writes.changed] + writes.raced
        finally:
            writes.close()
    return diverged


class FileWrites:
    """A command's files checked and written under temporary names, to be put in place.

    Each path is compared with the content the command started from (someone else's edit
    is left alone: the path is *diverged*), and its new bytes go to a temporary file beside
    it. The caller syncs :meth:`fds` (alone, or in a wait it makes for other files), asks
    :meth:`moved` once more just before the branch moves, then :meth:`finish` renames each
    file over its path, or removes it, unless the path's stat data moved since the check
    (those paths are :attr:`raced`), and syncs the folders. :meth:`close` drops what is left.
    """

    def __init__(
        self,
        repo: pygit2.Repository,
        root: Path,
        steps: Sequence[FileStep],
        data_of: Callable[[str], bytes | None] | None,
        stats: StatCache | None,
        filters: Filters | None = None,
        settling: Settling | None = None,
    ) -> None:
        self.diverged: list[str] = []
        self.changed: list[str] = []  # diverged: holding a third version when checked
        self.raced: list[FileStep] = []  # diverged: changed between the check and the rename
        self._settling = settling
        self._pending: list[_Pending] = []
        self._steps = {step.path: step for step in steps}
        self._folders = _Folders(root)
        self._also: list[str] = []  # folders synced with the files' (the branch's)
        self._syncing: durable.Syncing | None = None
        try:
            for step in steps:
                try:
                    pending = _prepare(repo, step, self._folders, data_of, stats, filters)
                except PathRejected:
                    pending = None
                    self.diverged.append(step.path)
                if pending is False:
                    self.changed.append(step.path)
                    self.diverged.append(step.path)
                elif isinstance(pending, _Pending):
                    self._pending.append(pending)
        except BaseException:
            self.close()
            raise

    def unsettled(self) -> list[str]:
        """The paths whose file is not settled now (``store.settle``): open for writing
        elsewhere, or changed a moment ago by someone else."""
        if self._settling is None:
            return []
        return [
            p.path
            for p in self._pending
            if p.seen is not None
            and p.folder is not None
            and self._settling.check(p.folder, p.name, p.path) > 0
        ]

    def moved(self) -> list[str]:
        """The paths changed since the check or not settled now (:meth:`unsettled`): asked
        again after the disk syncs, so a save that began during them stops the landing
        before the branch moves, not after (when the file would be left to the person)."""
        return [p.path for p in self._pending if not _unchanged(p)] + self.unsettled()

    def fds(self) -> list[int]:
        """The temporary files to sync before :meth:`finish`."""
        return [p.fd for p in self._pending if p.fd is not None]

    def worktree_ids(self) -> dict[str, str]:
        """The blob ids of the bytes put on disk where they are not the blob's (a checkout's
        CRLF): what the watcher will find there."""
        return {p.path: p.shown for p in self._pending if p.shown}

    def sync_folder_with(self, folder: str) -> None:
        """Sync ``folder`` in :meth:`finish`'s wait for the files' folders."""
        self._also.append(folder)

    def finish(self, *, wait: bool = True) -> list[str]:
        """Put every file in place (its temporary file synced); the paths left alone.

        New files go first: a removal drops the folders it leaves empty, and a temporary
        file in a folder keeps it (the new file then has a folder to go to). With
        ``wait`` False the folders' syncs are only started: :meth:`wait` ends them.
        """
        synced: set[int] = set()
        for p in sorted(self._pending, key=lambda p: not p.tmp):
            if p.fd is not None:
                os.close(p.fd)
                p.fd = None
            new = bool(p.tmp)
            faults.point("file-replacing")
            with self._guard(p) as replaceable:
                done = _unchanged(p) and replaceable()
                if done and new:
                    done = p.put_in_place(replaceable)
                    if done:
                        self._placed(p)
                elif done:
                    try:
                        dirfd.remove(self._folders.root, p.parts, p.name)
                    except PathRejected:  # a folder on the way is a symlink now: leave it
                        done = False
                    finally:
                        self._folders.forget()
            if not done:
                self.diverged.append(p.path)
                self.raced.append(self._steps[p.path])
                if p.tmp:
                    p.drop_temp()
                continue
            if new:
                assert p.folder is not None
                synced.add(p.folder)
            faults.point("file-written")
        self._syncing = durable.start_paths(self._also, list(synced))
        self._also = []
        self._pending = []
        if wait:
            self.wait()
        return self.diverged

    @staticmethod
    def _guard(p: _Pending) -> contextlib.AbstractContextManager[Callable[[], bool]]:
        """No writer may open ``p``'s file while it is replaced or removed."""
        if p.seen is None or p.folder is None:
            return contextlib.nullcontext(lambda: True)
        return no_new_writer(p.folder, p.name)

    def _placed(self, p: _Pending) -> None:
        """Record the file just put at ``p``'s path as settled: the store's own write is not
        waited for by the next check."""
        if self._settling is None:
            return
        assert p.folder is not None
        with contextlib.suppress(OSError):
            st = os.stat(p.name, dir_fd=p.folder, follow_symlinks=False)
            self._settling.settled(p.path, st)

    def wait(self) -> None:
        """Return once the folders :meth:`finish` changed are durable (raise if not)."""
        syncing, self._syncing = self._syncing, None
        if syncing is not None:
            syncing.wait()

    def close(self) -> None:
        """Drop the temporary files not put in place, and the folders' fds."""
        with contextlib.suppress(OSError):
            self.wait()  # the folders' fds are in use until then
        for p in self._pending:
            if p.fd is not None:
                os.close(p.fd)
            if p.tmp:
                p.drop_temp()
        self._pending = []
        self._folders.close()


def _unchanged(p: _Pending) -> bool:
    """Whether ``p``'s path still has the stat data the check saw (nothing changed since)."""
    if p.folder is None:  # its folder was missing: the new file's folder was made since
        return p.seen is None
    try:
        st = dirfd.stat_at(p.folder, p.name)
    except PathRejected:
        return False
    return (None if st is None else key_of(st)) == p.seen


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


def file_mode(git_mode: int, replaced: int | None) -> int:
    """The permission bits of a file written at a path: those of the file it replaces
    (``replaced``: its ``st_mode``; a note kept private with 0600 stays private), with the
    execute bits Git's mode gives; for a new file 0644, or 0755 if executable."""
    if replaced is None:
        return 0o755 if git_mode == trees.EXECUTABLE else 0o644
    bits = stat.S_IMODE(replaced) & 0o777  # (never a setuid, setgid or sticky bit)
    if git_mode == trees.EXECUTABLE:
        return bits | 0o100 | (bits & 0o444) >> 2  # executable wherever readable
    return bits & ~0o111


def _prepare(
    repo: pygit2.Repository,
    step: FileStep,
    folders: _Folders,
    data_of: Callable[[str], bytes | None] | None,
    stats: StatCache | None,
    filters: Filters | None = None,
) -> _Pending | bool | None:
    """Check one path and start its write: a :class:`_Pending` file or removal, None if the
    disk already has the content, False if it holds a third version."""
    rel = normalize(step.path, config_ok=True)
    *parts, name = rel.split("/")
    fd = folders.get(parts)
    found = None if fd is None else _disk_file(fd, name, rel, stats)
    on_disk = found.blob if found is not None else None
    if found is not None and filters is not None and on_disk not in (step.new, step.old):
        assert fd is not None
        on_disk = _as_stored(fd, name, rel, found, filters, stats)
    if on_disk == step.new:
        return None
    if on_disk != step.old:
        return False
    seen = found.key if found is not None else None
    if step.new is None:
        return _Pending(step.path, parts, name, fd, seen)
    if fd is None:
        fd = folders.get(parts, create=True)
        assert fd is not None
    data = data_of(step.new) if data_of is not None else None
    if data is None:
        blob = repo[step.new]
        assert isinstance(blob, pygit2.Blob)
        data = bytes(blob.data)
    shown = ""
    if filters is not None:
        smudged = filters.smudge(rel, data)
        if smudged != data:
            data, shown = smudged, blob_id(smudged)
    mode = file_mode(step.mode, seen[3] if seen is not None else None)
    if stats is not None:
        stats.saw(rel, data, step.new)
    tmp, file_fd = dirfd.write_temp(fd, name, data, mode)
    return _Pending(step.path, parts, name, fd, seen, tmp, file_fd, shown=shown)


def _as_stored(
    fd: int, name: str, rel: str, found: DiskFile, filters: Filters, stats: StatCache | None
) -> str:
    """The blob Git stores for ``found`` (its bytes through the clean filters): a file
    written with CRLF by a checkout under ``eol=crlf`` is the LF blob it came from."""
    data = found.data
    if data is None:  # (its id came from the stat cache)
        state = dirfd.read_at(fd, name)
        if state is None:
            return found.blob
        data = state[0]
    cleaned = filters.clean(rel, data, fresh=False)
    if cleaned == data:
        return found.blob
    blob = blob_id(cleaned)
    if stats is not None:
        stats.stored_as(rel, found.key, blob)
    return blob
