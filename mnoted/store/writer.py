"""The write side of a workspace: commands and edits made outside mnoted, as commits.

A command goes: commit pending external edits of its paths (``store.external``) → plan its
targets (``store.planning``) → build its commit (``store.commits``) → land it
(``store.landing``) → put its files in place and record it in the sidecar. Inside
:meth:`Writer.group` commands are built one on another and land together. A save a person
makes as a command lands is kept, and the command's change is put back on it
(``store.reapply``). After a crash, :meth:`Writer.recover` completes or drops what the
journal names. ``docs/store.md``, *The landing*.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pygit2

from mnoted.errors import (
    Conflict,
    InternalError,
    InvalidArguments,
    StorageError,
    WorkspaceInvalid,
)
from mnoted.store import faults, indexer, message, trees, upkeep
from mnoted.store.bootstrap import EXTERNAL_ACTOR, unfinished_operation
from mnoted.store.commits import CommitBuilder
from mnoted.store.config import WorkspaceConfig
from mnoted.store.external import External
from mnoted.store.facades import Idempotency
from mnoted.store.filters import Filters
from mnoted.store.heads import Heads
from mnoted.store.indexkeeper import IndexKeeper
from mnoted.store.journal import Entry, FileStep, file_steps
from mnoted.store.landing import Landing, PendingCommit
from mnoted.store.model import Change, CommandMeta, CommitResult, IdempotencyRecord
from mnoted.store.planning import (
    Target,
    plan,
    refuse_filtered,
    refuse_left_out,
    refuse_read_only,
    subject_path,
    validate,
)
from mnoted.store.reads import Reads
from mnoted.store.reapply import PutBack
from mnoted.store.settle import Settling
from mnoted.store.sidecar import Sidecar
from mnoted.store.statcache import StatCache
from mnoted.store.worktree import FileWrites, materialize

_CAS_ATTEMPTS = 5
SETTLE_WAIT = 0.5
"""How long a check of the disk waits for a file being written by someone else to settle
(``store.settle``) before it leaves the file as it is: not committed, not written over."""
log = logging.getLogger("mnoted.store")


class Writer:
    """Turns commands and external edits into commits for one workspace, on its writer
    thread; owns the group being built and whether the last landing must be completed."""

    def __init__(
        self,
        root: Path,
        repo: pygit2.Repository,
        side: Sidecar,
        heads: Heads,
        reads: Reads,
        external: External,
        commits: CommitBuilder,
        landing: Landing,
        pack_upkeep: upkeep.Upkeep,
        git_index: IndexKeeper,
        filters: Filters,
        stats: StatCache,
        writers: Settling,
        fresh: dict[str, bytes],
        *,
        config: Callable[[], WorkspaceConfig],
        check: Callable[[], None],
        lock_wait: float,
    ) -> None:
        self.root = root
        self._gitdir = root / ".git"
        self._repo = repo
        self._side = side
        self._heads = heads
        self._reads = reads
        self._external = external
        self._commits = commits
        self._landing = landing
        self._upkeep = pack_upkeep
        self._git_index = git_index
        self._filters = filters
        self._stats = stats
        self._writers = writers
        self._fresh = fresh
        self._config = config
        self._check = check
        self._lock_wait = lock_wait
        self.idempotency = Idempotency(side, self.settled)
        self._group: _Group | None = None
        self.last_write = time.monotonic()  # when the last landing's files were put in place
        self.on_write: Callable[[str, str | None], object] | None = None
        """Told each path and blob id (None: removed) just before the store writes it, so a
        watcher can recognise the store's own writes (``sync.OwnWrites``)."""
        self._put_back = PutBack(
            repo,
            side,
            heads,
            reads,
            external,
            commits,
            landing,
            fresh,
            commit_external=self.commit_external,
            finish=self._finish,
            refresh=self._refresh,
        )

    @property
    def in_group(self) -> bool:
        return self._group is not None

    @property
    def group_pending(self) -> bool:
        """Commits of a group are built and not landed yet (reads look at them first)."""
        return self._group is not None and bool(self._group.pending)

    @property
    def _needs_recovery(self) -> bool:
        return self._landing.needs_recovery

    @_needs_recovery.setter
    def _needs_recovery(self, value: bool) -> None:
        self._landing.needs_recovery = value

    def _refresh(self) -> bool:
        self._check()
        return self._heads.refresh()

    def settled(self) -> None:
        """Finish a command an error interrupted (its record must describe it), catch up."""
        if self._needs_recovery:
            self._ready_to_write()
        else:
            self._refresh()

    def operation(self) -> tuple[str, str] | None:
        """The Git operation the person left under way (a merge, rebase, cherry-pick, revert,
        bisect or patch application) and how to end it, or None.

        While one is, reads go on (HEAD's version is served; a file's state on disk is not
        committed) and commands are refused with that hint: a commit then would be moved
        back over by the operation's abort, or built on an index the operation owns. Edits
        saved meanwhile are committed once it has ended.
        """
        self._check()
        return unfinished_operation(self._repo) or self._git_index.conflicts()

    def apply(self, meta: CommandMeta, changes: Sequence[Change]) -> CommitResult:
        """Apply one command as exactly one commit and return its revision.

        Pending external edits of the touched paths are committed first (as ``external``).
        An idempotency key already used with the same ``request_hash`` returns the first
        result (``replayed``) without a commit; with another request it raises
        :class:`IdempotencyConflict`.
        """
        self._check()
        meta = meta.with_command_id()
        if meta.idempotency_key:
            owner = message.meta_key_owner(meta)
            rec = self.idempotency.check(meta.idempotency_key, meta.request_hash, owner)
            if rec is not None:
                return self._replayed(rec)
        if not changes:
            raise InvalidArguments("a command needs at least one change")
        touched = validate(self.root, self._config(), changes)
        try:
            return self._apply(meta, changes, touched)
        except OSError as exc:
            # Whatever step failed, the journal tells the next write what to finish or drop
            # (in a group only objects were written: nothing to recover).
            self._needs_recovery = self._group is None
            raise StorageError(
                f"{meta.command} could not be written: {exc.strerror or exc}", errno=exc.errno
            ) from exc

    def check_writable(self, changes: Sequence[Change]) -> None:
        """Raise what :meth:`apply` would raise about the paths of ``changes`` (unsafe, too
        large, Git-filtered, ignored) without writing anything: a dry run, or a write that
        waits for review, is refused as the write itself would be."""
        self._check()
        validate(self.root, self._config(), changes)
        self._refresh()
        self._refuse_unwritable(changes)

    def _refuse_unwritable(self, changes: Sequence[Change]) -> None:
        """Refuse bytes written at a path Git filters, a file added where Git ignores or
        inside another repository, or a read-only file replaced, deleted or moved."""
        refuse_filtered(self._filters, changes)
        refuse_read_only(self.root, changes)
        refuse_left_out(self._repo, self.root, self._config(), self._commits.head_tree(), changes)

    def _apply(
        self, meta: CommandMeta, changes: Sequence[Change], touched: list[str]
    ) -> CommitResult:
        self._ready_to_write()
        self._refuse_unwritable(changes)
        group = self._group
        unchecked = [p for p in touched if group is None or p not in group.checked_paths]
        external = None
        if unchecked:
            external = self.commit_external(unchecked, include_ignored=True)
            self._refuse_unsettled()
        for _ in range(_CAS_ATTEMPTS):
            targets = plan(self._repo, self._commits.head_tree(), changes)
            result = self._commit(meta, targets, [subject_path(c) for c in changes])
            if result is not None:
                if external is not None:
                    result = replace(result, external_commit=external.commit)
                return result
            moved_external = self.commit_external(touched, include_ignored=True)
            self._refuse_unsettled()
            external = moved_external or external
        raise Conflict(
            "the branch kept moving while mnoted tried to commit",
            hint="Another program is committing in this workspace; try again when it is done.",
        )

    def _refuse_unsettled(self) -> None:
        """Refuse a command whose file someone is writing (:attr:`unsettled`): its bytes
        would land on a torn version, or be replaced under the writer."""
        if self._external.unsettled:
            busy = sorted(self._external.unsettled)
            raise Conflict(
                f"{', '.join(busy)} is being written by another program (open for writing, "
                "or changed a moment ago); nothing was written",
                hint="Try again once it is saved: the write then applies on what was saved.",
                path=busy[0],
            )

    def commit_external(
        self,
        paths: Iterable[str],
        *,
        meta: CommandMeta | None = None,
        include_ignored: bool = False,
        wait: float = SETTLE_WAIT,
    ) -> CommitResult | None:
        """Commit what is on disk now at ``paths`` where it differs from HEAD; None if nothing.

        Used before every write (so no external edit is overwritten) and by the watcher.
        Unsafe paths and mnoted's own files are skipped, and so are untracked files that are
        ignored or too large unless ``include_ignored`` (what :meth:`apply` uses). Only
        settled files are committed (``store.settle``): one being written by someone else is
        waited for up to ``wait`` seconds, then left out and named in :attr:`unsettled`.
        """
        self._check()
        meta = meta or CommandMeta("external.edit", actor=EXTERNAL_ACTOR)
        group = self._group
        if group is not None:
            # The disk still has these files as they were before the group; the group
            # checks them for edits made meanwhile when it writes them.
            paths = [p for p in paths if p not in group.written]
        paths = list(paths)
        self._external.settled(paths, wait)
        try:
            result = self._commit_external(paths, meta, include_ignored)
        except OSError as exc:
            self._needs_recovery = self._group is None
            raise StorageError(
                f"committing edits made outside mnoted failed: {exc.strerror or exc}",
                errno=exc.errno,
            ) from exc
        if group is not None:
            # A command's own check before it writes need not look at these again: an
            # edit made since is caught when the group writes the file (it is diverged).
            tree = self._commits.head_tree()
            group.checked_paths.update(
                p for p in paths if include_ignored or trees.entry_at(tree, p) is not None
            )
        return result

    def _commit_external(
        self, paths: list[str], meta: CommandMeta, include_ignored: bool
    ) -> CommitResult | None:
        self._ready_to_write()
        for _ in range(_CAS_ATTEMPTS):
            targets = self._external.targets(paths, include_ignored=include_ignored)
            if not targets:
                return None
            meta = meta.with_command_id()  # (made only now: most checks find nothing)
            result = self._commit(meta, targets, [t.path for t in targets], on_disk=True)
            faults.point("external-committed")
            if result is not None:
                return result
        raise Conflict(
            "the branch kept moving while mnoted tried to commit external edits",
            hint="Another program is committing in this workspace; try again when it is done.",
        )

    def _ready_to_write(self) -> None:
        # Once a group: nine stats each time, and a command checks three times.
        if self._group is None or not self._group.checked:
            problem = self.operation()
            if problem is not None:
                raise WorkspaceInvalid(
                    f"{self.root} is in the middle of {problem[0]}; mnoted will not commit now",
                    hint=f"Then try again: {problem[1]}.",
                )
            if self._group is not None:
                self._group.checked = True
        if self._needs_recovery:
            try:
                self.recover()
            except BaseException as exc:
                self._needs_recovery = True  # tried again by the next command
                if isinstance(exc, OSError):
                    raise StorageError(
                        f"completing an interrupted command failed: {exc.strerror or exc}",
                        errno=exc.errno,
                    ) from exc
                raise
        self._refresh()

    def _commit(
        self,
        meta: CommandMeta,
        targets: list[Target],
        subject_paths: list[str],
        *,
        on_disk: bool = False,
    ) -> CommitResult | None:
        """Make one commit of ``targets`` on HEAD; None if HEAD moved under us (retry).

        Inside :meth:`group` the commit is only built: it lands with the group.
        """
        pending = self._commits.build(meta, targets, subject_paths, on_disk)
        group = self._group
        if group is not None:
            self._commits.record(pending)
            group.add(pending)
            self._heads.head = pending.result.commit
            return pending.result
        landed = self._landing.land([pending])
        if landed is None:
            self._fresh.clear()
            self._refresh()
            return None
        raced = self._finish(*landed, lambda: self._commits.record(pending))
        if raced:
            again = self._put_back.one(raced, pending.result.commit)
            if again is not None:
                return replace(again, planned=pending.result.commit)
        return pending.result

    def _finish(
        self, entry: Entry, writes: FileWrites | None, record: Callable[[], object]
    ) -> list[FileStep]:
        """After the branch moved: put the files in place (``writes``: already written under
        temporary names and synced) and ``record`` in the sidecar; the steps of the files a
        person saved over meanwhile (their save committed next): :meth:`PutBack.one` puts the
        change back on them.

        The command is durable once its journal is: were the new names lost, recovery would
        put the files in place again. So the syncs of the files' folders (and the branch's)
        end, and the journal is dropped, in :meth:`Landing.settle`, before the next landing writes
        the journal: neither the answer nor the next commands wait for them meanwhile.
        """
        try:
            if self.on_write is not None:
                shown = writes.worktree_ids() if writes is not None else {}
                for step in entry.files:
                    self.on_write(step.path, shown.get(step.path, step.new))
            raced: list[FileStep] = []
            if writes is not None:  # the folders are synced while the sidecar records
                diverged = writes.finish(wait=False)
                raced = writes.raced
            else:
                diverged = materialize(
                    self._repo,
                    self.root,
                    entry,
                    self._fresh.get,
                    self._stats,
                    self._filters,
                    self._writers,
                    raced=raced,
                )
            faults.point("files-written")
            record()
            faults.point("sidecar-updated")
            if writes is None:
                self._landing.journal.clear()
                faults.point("journal-cleared")
            else:
                self._landing.settling, writes = (writes, entry), None
        except OSError as exc:
            self._needs_recovery = True
            raise StorageError(
                f"writing {entry.command_id} failed: {exc.strerror or exc}", errno=exc.errno
            ) from exc
        except BaseException:
            self._needs_recovery = True
            raise
        finally:
            if writes is not None:
                writes.close()
            self._fresh.clear()
        self.last_write = time.monotonic()
        self._upkeep.merge_packs(2 * upkeep.PACKS_PER_LEVEL, wait=True)
        if diverged:
            self.commit_external(diverged)
        return raced

    @contextlib.contextmanager
    def group(self) -> Iterator[None]:
        """Land the commands applied inside together: each its own commit, one durability wait.

        Inside, each command is built on the one before (reads see the pending commits,
        and HEAD is read once, when the group begins) and nothing is durable or on the
        branch yet; at the end the objects of all of them are synced at once, one journal
        entry and one compare-and-swap move the branch to the last commit, and the files
        are written. If that fails (the branch moved, an I/O error) the group's sidecar
        changes are rolled back, the error is raised, and the caller runs the commands
        again one at a time (a group that reached the branch is completed from the journal
        first, and its idempotency keys replay).
        """
        self._check()
        if self._group is not None:
            raise InternalError("groups of commands do not nest")
        self.settled()
        group = _Group(self._heads.head)
        self._group = group
        self._side.begin()
        try:
            yield
        except BaseException:
            self._abandon(group)
            raise
        self._group = None
        if not group.pending:
            self._side.commit()
            _run_all(group.callbacks)
            return
        try:
            # (the sidecar's rows written while the landing waits for the disk: rolled back
            # with its transaction if the landing fails)
            landed = self._landing.land(group.pending, self._side.write_kept)
            if landed is None:
                raise Conflict(
                    "the branch moved while a group of commands was landing",
                    hint="Another program committed in this workspace; the commands run again.",
                )
        except BaseException as exc:
            self._abandon(group)
            if not isinstance(exc, OSError):
                raise
            self._needs_recovery = True
            raise StorageError(
                f"a group of {len(group.pending)} commands could not be written: "
                f"{exc.strerror or exc}",
                errno=exc.errno,
            ) from exc
        try:
            raced = self._finish(*landed, self._side.commit)
        except BaseException:
            self._side.rollback()
            raise
        if raced:
            last = {step.path: item.result.commit for item in group.pending for step in item.steps}
            self._put_back.landed(raced, last)
        _run_all(group.callbacks)

    def after_landing(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once what was applied so far is durable (now, outside a group)."""
        if self._group is None:
            callback()
        else:
            self._group.callbacks.append(callback)

    def _abandon(self, group: _Group) -> None:
        """Forget a group that did not land: sidecar rolled back, HEAD read again."""
        self._group = None
        self._fresh.clear()
        self._upkeep.staging.clear()
        self._side.rollback()
        self._heads.head = group.base
        self._refresh()

    def recover(self) -> None:
        """Complete or drop a command a crash interrupted (:meth:`Landing.recover`); a file
        edited since is committed as an external edit."""
        diverged = self._landing.recover(self._side)
        if diverged:
            self.commit_external(diverged)

    def _replayed(self, rec: IdempotencyRecord) -> CommitResult:
        commit = self._repo[rec.commit]
        assert isinstance(commit, pygit2.Commit)
        parent = str(commit.parents[0].id) if commit.parents else None
        paths = self._side.paths_of_commit(rec.commit)
        return CommitResult(rec.commit, rec.command_id, parent, tuple(paths), replayed=True)

    def land_commit(
        self, commit: str, *, expect: str | None, command_id: str
    ) -> CommitResult | None:
        """Move the branch from ``expect`` to ``commit``, a commit already in the repository
        (a fetched one, or a merge built from it), writing the files it changes through the
        journal like any command: the working tree, the index and HEAD agree after it, and a
        crash at any point lands all of it or none.

        Edits on disk at the paths it would write are committed first; if that (or anyone)
        moved HEAD from ``expect``, nothing lands and None is returned: merge again.
        """
        self._check()
        assert self._group is None, "land_commit runs outside a group of commands"
        self._ready_to_write()
        self._refresh()
        target = self._repo[commit]
        assert isinstance(target, pygit2.Commit)
        steps = file_steps(self._commits.head_tree(), target.tree)
        paths = tuple(dict.fromkeys(step.path for step in steps))
        if paths and self.commit_external(paths, include_ignored=True) is not None:
            return None
        if self._heads.head != expect:
            return None
        pending = PendingCommit(
            CommitResult(commit, command_id, expect, paths),
            target.message,
            tuple(steps),
            paths,
            None,
            target.commit_time,
        )
        landed = self._landing.land([pending])
        if landed is None:
            self._fresh.clear()
            self._refresh()
            return None
        parent = str(target.parents[0].id) if target.parents else None
        written = {commit: paths} if parent == expect else None

        def record() -> None:
            indexer.advance(
                self._repo, self._side, commit, self._heads.branch, self._fresh, written
            )
            self._side.begin()
            self._side.mark_index_pending(list(paths))  # (whoever committed it)
            self._side.commit()

        raced = self._finish(*landed, record)
        if raced:
            self._put_back.landed(raced, {step.path: commit for step in raced})
        return pending.result


@dataclass
class _Group:
    """The commands of one :meth:`Workspace.group`, built one on another."""

    base: str | None  # the branch's commit when the group began
    pending: list[PendingCommit] = field(default_factory=list)
    written: set[str] = field(default_factory=set)  # paths the group will write
    callbacks: list[Callable[[], object]] = field(default_factory=list)  # once landed
    checked: bool = False  # no merge, rebase or bisect was in progress when it began
    checked_paths: set[str] = field(default_factory=set)  # checked against the disk

    def add(self, pending: PendingCommit) -> None:
        self.pending.append(pending)
        self.written.update(step.path for step in pending.steps)


def _run_all(callbacks: list[Callable[[], object]]) -> None:
    """Run a group's callbacks: a listener's bug must not undo or fail its writes."""
    for callback in callbacks:
        try:
            callback()
        except Exception:
            log.exception("a callback of a group of commands failed")
