"""The landing: pending commits made durable and put on the branch and in the work tree.

Objects first (one pack for all, ``store.packs``), then the journal naming the files to
write, then the compare-and-swap of the branch, then the files (``store.worktree``) and the
Git index (``store.indexkeeper``). The journal is what recovery completes after a crash; a
landing's folders are synced, and its journal entry dropped, by the next landing or when the
writer idles (:meth:`Landing.settle`). ``docs/store.md``, *The landing*.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pygit2

from mnoted.errors import StorageError
from mnoted.store import durable, faults, indexer, packs, refs, treediff
from mnoted.store.atomic import remove_temp_files
from mnoted.store.filters import Filters
from mnoted.store.heads import Heads
from mnoted.store.indexkeeper import IndexKeeper, IndexWrite
from mnoted.store.journal import Entry, FileStep, Journal
from mnoted.store.model import CommitResult, Identity
from mnoted.store.settle import Settling
from mnoted.store.sidecar import Sidecar
from mnoted.store.statcache import StatCache
from mnoted.store.upkeep import Upkeep
from mnoted.store.worktree import FileWrites, materialize

log = logging.getLogger("mnoted.store")

COMMITTER = Identity("mnoted", indexer.COMMITTER_EMAIL)
"""Who commits (an agent or the person is the author); the branch's reflog names it too."""


class Unsettled(Exception):
    """A landing's file changed, or is being written, since its command checked it."""


@dataclass(frozen=True)
class PendingCommit:
    """A commit whose objects are written but which is not yet durable nor on the branch."""

    result: CommitResult
    message: str
    steps: tuple[FileStep, ...]  # files to write (none for edits already on disk)
    paths: tuple[str, ...]  # every path the commit writes or removes
    deltas: tuple[treediff.Delta, ...] | None  # what it changed (None: diff its trees)
    time: int  # its committer's time


class Landing:
    """Lands pending commits for one workspace (its writer thread's), and owns the journal,
    the last landing still settling, and whether an interrupted landing must be completed
    before the next write (:attr:`needs_recovery`)."""

    def __init__(
        self,
        root: Path,
        repo: pygit2.Repository,
        heads: Heads,
        upkeep: Upkeep,
        git_index: IndexKeeper,
        journal: Journal,
        stats: StatCache,
        filters: Filters,
        writers: Settling,
        fresh: dict[str, bytes],
        *,
        lock_wait: float,
    ) -> None:
        self.root = root
        self.gitdir = root / ".git"
        self._repo = repo
        self._heads = heads
        self._upkeep = upkeep
        self._git_index = git_index
        self.journal = journal
        self._stats = stats
        self._filters = filters
        self._writers = writers
        self._fresh = fresh
        self._lock_wait = lock_wait
        self.needs_recovery = False
        # The last landing, its files in place, their folders' syncs under way (`settle`).
        self.settling: tuple[FileWrites, Entry] | None = None
        self.pack_dir = self.gitdir / "objects" / "pack"

    def land(
        self, pending: list[PendingCommit], meanwhile: Callable[[], object] | None = None
    ) -> tuple[Entry, FileWrites | None] | None:
        """Make pending commits durable and move the branch to the last; None if it moved.

        Objects first (one pack for all, :mod:`~mnoted.store.packs`), then the journal naming
        the files to write, then the compare-and-swap of the branch from the first commit's
        parent. Three waits: the pack's files (their fsyncs run while the branch is locked,
        the journal written and the new files written under their temporary names); then,
        in one, the pack folder (the pack's names), the journal, the branch's lock file and
        those files (a command of up to ``durable.CHUNK`` files; ``Workspace._finish`` puts
        them in place); then the branch's folder. The journal may become durable before the pack's
        names do: recovery drops a journaled commit whose objects are missing, and the
        branch moves only after all of them. ``meanwhile`` runs during the second wait (see
        :meth:`_sync_landing`). The Git index is written beside its lock on the fsync pool
        all along (:meth:`IndexKeeper.prepare`) and put in place once the branch has moved.
        """
        # The Git index is written on the pool from now until the branch has moved.
        commit = pending[-1].result.commit
        prepared = self._git_index.prepare(commit, [p for s in pending for p in s.paths])
        try:
            return self._land(pending, prepared, meanwhile)
        finally:
            if prepared is not None:  # (unless installed: the branch did not move)
                self._git_index.abandon(prepared)

    def _land(
        self,
        pending: list[PendingCommit],
        prepared: IndexWrite | None,
        meanwhile: Callable[[], object] | None,
    ) -> tuple[Entry, FileWrites | None] | None:
        """:meth:`land` beside the Git index being written."""
        self.settle()  # (the one journal is the last landing's until its folders are synced)
        parent, last = pending[0].result.parent, pending[-1]
        wrote_pack = len(self._upkeep.staging) > 0
        pack = (  # synced on the fsync pool while the branch is locked and the files written
            packs.PackWrite(self.pack_dir, packs.entries_of(self._upkeep.staging.objects()))
            if wrote_pack
            else None
        )
        # libgit2 finds them in the new pack (it rescans on a miss); the head stays at hand
        self._upkeep.staging.clear(keep=pygit2.Oid(hex=last.result.commit))
        entry = Entry(
            last.result.command_id,
            self._heads.branch,
            parent,
            last.result.commit,
            merged_steps(pending),
        )
        try:
            held = refs.lock_branch(
                self.gitdir,
                self._heads.branch,
                parent,
                last.result.commit,
                wait=self._lock_wait,
                sync=False,
            )
        except BaseException as exc:
            self._put_pack(pack, quietly=True)  # its objects stay, as a commit that failed
            if isinstance(exc, refs.HeadMoved):
                return None
            raise
        writes: FileWrites | None = None
        try:
            try:
                self.journal.write(entry, sync=False)
                if len(entry.files) <= durable.CHUNK:
                    writes = FileWrites(
                        self._repo,
                        self.root,
                        entry.files,
                        self._fresh.get,
                        self._stats,
                        self._filters,
                        self._writers,
                    )
                    if writes.changed or writes.unsettled():
                        # Someone saved (or is saving) a file since it was checked: land
                        # nothing; the command is planned again on their settled save.
                        raise Unsettled
                ready, pack = pack, None  # once tried, never tried again below
                self._put_pack(ready)
                files = writes.fds() if writes else []
                self._sync_landing(held.token, wrote_pack, files, meanwhile)
                faults.point("landing-synced")
                if writes is not None and writes.moved():
                    # The same check once more, after the syncs and just before the branch
                    # moves: a save begun meanwhile stops the landing here, not after it.
                    raise Unsettled
                faults.point("objects-written")
            except BaseException:
                self._put_pack(pack, quietly=True)
                held.release()
                self.journal.clear()
                raise
            try:
                faults.point("journal-written")
            except BaseException:
                held.release()  # the journal stays: the next write completes the command
                raise
            try:
                refs.commit_branch(
                    self.gitdir,
                    held,
                    self._heads.branch,
                    parent,
                    last.result.commit,
                    ident=f"{COMMITTER.name} <{COMMITTER.email}>",
                    message=last.message if len(pending) == 1 else f"{len(pending)} commands",
                    # The branch's new name is synced with the files' folders, in one wait
                    # (`FileWrites.finish`): the journal, durable by now, completes either.
                    sync=writes is None,
                )
            except BaseException:
                self.journal.clear()
                raise
            if writes is not None:
                writes.sync_folder_with(os.path.dirname(held.target))
            if prepared is not None:
                self._git_index.install(prepared)
            faults.point("ref-updated")
        except BaseException as exc:
            if writes is not None:  # the temporary files go; recovery writes the files
                writes.close()
            if isinstance(exc, Unsettled):
                return None
            raise
        self._heads.head = last.result.commit
        return entry, writes

    def _put_pack(self, pack: packs.PackWrite | None, *, quietly: bool = False) -> None:
        """Wait for a landing's pack and put it in place (its folder is synced with the
        landing's next wait); ``quietly``: on the way out of a landing that failed, an error
        here is logged and the landing's own error raised."""
        if pack is None:
            return
        try:
            self._upkeep.levels[0].append(pack.install(sync_folder=False))
        except Exception as exc:
            if not quietly:
                raise
            log.warning("a pack of a landing that failed was not kept: %s", exc)

    def _sync_landing(
        self,
        token: str,
        pack_folder: bool,
        files: list[int],
        meanwhile: Callable[[], object] | None,
    ) -> None:
        """One wait for the journal, the branch's lock file, the pack folder's new names and
        the new files under their temporary names; ``meanwhile`` runs while the disk
        flushes (its error, like a failed sync, fails the landing once the syncs are done).
        """
        paths = [token, os.fspath(self.pack_dir)] if pack_folder else [token]
        syncing = durable.start_paths(paths, [self.journal.fd, *files])
        error: BaseException | None = None
        if meanwhile is not None:
            try:
                meanwhile()
            except BaseException as exc:
                error = exc
        syncing.wait(error)

    def recover(self, side: Sidecar) -> list[str]:
        """Complete or drop the command the journal names, that a crash interrupted
        (``docs/store.md``), and bring the sidecar up to HEAD; the paths of files edited
        since, left as they are (the caller commits them as external edits)."""
        settling, self.settling = self.settling, None
        if settling is not None:  # (its entry is the journal's, completed here)
            settling[0].close()
        packs.recover(self.pack_dir)
        entry = self.journal.read()
        self.needs_recovery = False
        if entry is None:
            self.journal.clear()
            return []
        branch = refs.current_branch(self.gitdir)
        head = refs.read_ref(self.gitdir, branch)
        landed = False
        if entry.branch == branch and self._repo.odb.exists(entry.commit):
            if head == entry.commit:
                landed = True
            elif head == entry.parent:
                try:
                    refs.update_branch(
                        self.gitdir,
                        branch,
                        entry.parent,
                        entry.commit,
                        ident=f"{COMMITTER.name} <{COMMITTER.email}>",
                        message=f"recover {entry.command_id}",
                        wait=self._lock_wait,
                    )
                    landed = True
                except refs.HeadMoved:
                    landed = False
        self._heads.branch = branch
        self._heads.head = refs.read_ref(self.gitdir, branch)
        diverged = (
            materialize(self._repo, self.root, entry, filters=self._filters) if landed else []
        )
        for step in entry.files:
            remove_temp_files(self.root.joinpath(*step.path.split("/")).parent)
        if landed:  # the new names of files put in place before the crash, and the branch's
            self.sync_folders(entry)
        indexer.advance(self._repo, side, self._heads.head, self._heads.branch)
        self.journal.clear()
        return diverged

    def settle(self) -> None:
        """Finish the last landing: once its files' folders are durable, drop its journal
        entry. A sync that fails is made again; if that fails too, the journal stays (the
        next write's recovery syncs them) and :class:`StorageError` is raised."""
        settling, self.settling = self.settling, None
        if settling is None:
            return
        writes, entry = settling
        try:
            try:
                writes.wait()
            except OSError as exc:
                log.warning("syncing the folders of %s failed (%s); again", entry.command_id, exc)
                self.sync_folders(entry)
        except OSError as exc:
            self.needs_recovery = True
            raise StorageError(
                f"the folders of {entry.command_id} could not be synced: {exc.strerror or exc}",
                errno=exc.errno,
            ) from exc
        finally:
            writes.close()
        try:
            self.journal.clear()
            faults.point("journal-cleared")
        except OSError as exc:  # harmless: the next landing writes over it, and recovering
            # a command that landed syncs its folders again, nothing more
            log.warning("clearing the journal of %s failed: %s", entry.command_id, exc)

    def sync_folders(self, entry: Entry) -> None:
        """Sync the folders a landed command renamed files into, and its branch's folder."""
        folders = {self.root.joinpath(*step.path.split("/")).parent for step in entry.files}
        folders.add((self.gitdir / entry.branch).parent)
        durable.sync_paths(sorted(f for f in folders if f.is_dir()))


def merged_steps(pending: list[PendingCommit]) -> tuple[FileStep, ...]:
    """One step per path for a run of commits: the first ``old``, the last ``new``."""
    steps: dict[str, FileStep] = {}
    for item in pending:
        for step in item.steps:
            first = steps.get(step.path)
            steps[step.path] = step if first is None else replace(step, old=first.old)
    return tuple(steps.values())
