"""The workspace: a folder of notes that is a Git repository, and its one writer.

Threading rule: a :class:`Workspace` (its pygit2 Repository and its SQLite connection) belongs
to the thread that opened it; every method but two must be called from that thread (the
daemon's writer thread), and a call from another thread raises :class:`InternalError`.
:meth:`Workspace.maintenance` opens its own Repository and may run on any thread, and so
may :meth:`Workspace.still_as_read`, which only stats files. Only one process serves a
workspace at a time (an ``flock`` on ``.git/mnote/daemon.lock``).

A command goes: commit pending external edits of its paths → write blobs, trees (only along
the changed paths) and the commit object, kept in memory → land them as one pack → journal →
compare-and-swap the branch → write the files atomically → record it in the sidecar → drop
the journal. Inside :meth:`Workspace.group` commands are built one on another and land
together (one pack of their objects, one journal entry, one compare-and-swap, their files
synced together). The Git
index is refreshed for those paths when the daemon is idle (:meth:`Workspace.idle`).

The workspace composes collaborators that own their state and never import this module:
:class:`~mnoted.store.heads.Heads` (the branch and its commit), :class:`~mnoted.store.reads.Reads`,
:class:`~mnoted.store.external.External` (edits made outside mnoted) and
:class:`~mnoted.store.upkeep.Upkeep` (packs); it keeps the landing, groups, recovery and the
Git index's refresh (``docs/store.md``, *Inside a workspace*).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from types import TracebackType

import pygit2

from mnoted.errors import (
    Conflict,
    InternalError,
    InvalidArguments,
    LockBusy,
    MnoteError,
    StorageError,
    WorkspaceInvalid,
)
from mnoted.store import (
    faults,
    gitlock,
    indexer,
    message,
    packs,
    reapply,
    refs,
    trees,
)
from mnoted.store.atomic import fsync_dir, remove_temp_files
from mnoted.store.authors import Authors
from mnoted.store.bootstrap import (
    EXTERNAL_ACTOR,
    adopt,
    check_repository,
    take_process_lock,
    unfinished_operation,
)
from mnoted.store.commits import CommitBuilder
from mnoted.store.config import (
    CONFIG_PATH,
    WorkspaceConfig,
)
from mnoted.store.external import External
from mnoted.store.facades import Idempotency, KeyValue
from mnoted.store.filters import Clean, Filters
from mnoted.store.heads import Heads
from mnoted.store.indexkeeper import IndexKeeper
from mnoted.store.journal import Entry, FileStep, Journal
from mnoted.store.landing import COMMITTER, Landing, PendingCommit
from mnoted.store.maintenance import PackReport
from mnoted.store.model import (
    Change,
    CommandMeta,
    CommandRecord,
    CommitResult,
    DocRef,
    HistoryEntry,
    IdempotencyRecord,
    Identity,
)
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
from mnoted.store.settle import Settling
from mnoted.store.sidecar import Sidecar
from mnoted.store.statcache import Key, StatCache
from mnoted.store.statedir import PRIVATE_DIR, STATE_DIR, state_dir
from mnoted.store.upkeep import Upkeep
from mnoted.store.worktree import FileWrites, materialize

SIDECAR_NAME = "state.sqlite3"
PROCESS_LOCK = "daemon.lock"
_CAS_ATTEMPTS = 5
SETTLE_WAIT = 0.5
"""How long a check of the disk waits for a file being written by someone else to settle
(``store.settle``) before it leaves the file as it is: not committed, not written over."""
TREE_CACHE_LIMIT = 16 << 20
OBJECT_CACHE_BYTES = 16 << 20
"""What libgit2's object cache may hold in all, counted in object bytes (its default, 256 MB,
is reached by a daemon that writes: every write makes new trees, each cached when read, and
a cached tree takes about three times its size in memory). HEAD's trees of a large
workspace fit in it."""
PACKS_PER_LEVEL = 16
"""The store's own packs are merged by sixteen: sixteen landings' packs into one, sixteen of
those into one, ... so a daemon that never idles keeps a few dozen packs, not thousands."""
log = logging.getLogger("mnoted.store")


class Workspace:
    """An open workspace. Create with :meth:`init` or :meth:`open`; :meth:`close` when done."""

    def __init__(
        self,
        root: Path,
        repo: pygit2.Repository,
        config: WorkspaceConfig,
        side: Sidecar,
        lock_fd: int,
        external_identity: Identity | None,
        lock_wait: float,
    ) -> None:
        self.root = root
        self.gitdir = root / ".git"
        self.state_dir = root / STATE_DIR  # made by `open` (statedir.state_dir)
        self.config = config
        self.idempotency = Idempotency(side, self._settled)
        self.sidecar = KeyValue(side, self._check_thread)
        self.last_write = time.monotonic()
        self._repo = repo
        self._side = side
        self._lock_fd = lock_fd
        self._lock_wait = lock_wait
        self._owner = threading.get_ident()
        self.authors = Authors(repo, external_identity)
        self.heads = Heads(
            self.gitdir, repo, side, COMMITTER.email, lambda: self._group is not None
        )
        self._closed = False
        self._group: _Group | None = None
        self.on_write: Callable[[str, str | None], object] | None = None
        """Told each path and blob id (None: removed) just before the store writes it, so a
        watcher can recognise the store's own writes (``sync.OwnWrites``)."""
        # Bytes of the blobs built and not yet landed: read back without inflating them.
        self._fresh: dict[str, bytes] = {}
        # Blob ids of work-tree files hashed since they last changed (checks and scans
        # skip re-reading them).
        self._stats = StatCache()
        self._writers = Settling()  # which files are settled (store.settle)
        self._filters = Filters(repo, str(self.gitdir))
        self.reads = Reads(
            root,
            repo,
            side,
            self.heads,
            self._stats,
            self._filters,
            self._fresh,
            self._check_thread,
            lambda: self._group is not None and bool(self._group.pending),
        )
        self.external = External(
            root,
            repo,
            side,
            self.heads,
            self._stats,
            self._filters,
            self._writers,
            config=lambda: self.config,
            head_tree=lambda: self.commits.head_tree(),
            flush_index=self.flush_index,
            check=self._check_thread,
        )
        self.git_index = IndexKeeper(
            root,
            repo,
            side,
            self.external,
            self._stats,
            head_tree=lambda: self.commits.head_tree(),
            check=self._check_thread,
            lock_wait=lock_wait,
        )
        # New objects stay in memory until they land as one pack (store.packs).
        self._pack_dir = self.gitdir / "objects" / "pack"
        if not self._pack_dir.is_dir():  # libgit2 watches only a pack folder it saw at open
            self._pack_dir.mkdir()
            fsync_dir(self._pack_dir.parent)
        self.pack_upkeep = Upkeep(self.gitdir, repo)  # (its staging: objects not landed)
        self.commits = CommitBuilder(
            repo, side, self.heads, self.pack_upkeep, self._filters, self.authors, self._fresh
        )
        self.pack_upkeep.reopen_objects(retired=False)  # (opening drops them: `_recover`)
        self.landing = Landing(
            root,
            repo,
            self.heads,
            self.pack_upkeep,
            self.git_index,
            Journal(self.state_dir),
            self._stats,
            self._filters,
            self._writers,
            self._fresh,
            lock_wait=lock_wait,
        )

    # opening ------------------------------------------------------------------------------
    @classmethod
    def init(
        cls,
        path: str | os.PathLike[str],
        *,
        external_identity: Identity | None = None,
        lock_wait: float = gitlock.WAIT_SECONDS,
    ) -> Workspace:
        """Make ``path`` a workspace from the template, adopting an existing repository.

        A new repository (branch ``main``), or one without commits, gets everything already
        in the folder committed with the template; an existing one keeps its history and
        only gains the template files it lacks (its ``.gitignore`` gets mnoted's lines
        appended). Idempotent.
        """
        root, unborn, written = adopt(path)
        ws = cls.open(root, external_identity=external_identity, lock_wait=lock_wait)
        try:
            # a repository without commits starts with everything in the folder
            paths = ws.scan_changes() if unborn else [*written, CONFIG_PATH, ".gitignore"]
            # (the folder's notes are the person's: authored as them where Git knows them)
            meta = CommandMeta("workspace.init", actor="mnoted", author=ws.user_identity())
            ws.commit_external(paths, meta=meta)
            ws.idle()
        except BaseException:
            ws.close()
            raise
        return ws

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        external_identity: Identity | None = None,
        lock_wait: float = gitlock.WAIT_SECONDS,
    ) -> Workspace:
        """Open a workspace: take the process lock, recover from a crash, catch up with HEAD."""
        root = Path(path).expanduser().resolve()
        repo = check_repository(root)
        config = WorkspaceConfig.load(root)
        # In the Git directory, as the state is (store.statedir): a lock in the work tree
        # went with `git clean -x`, and a second daemon started after it served the folder too.
        private = root / PRIVATE_DIR
        private.mkdir(exist_ok=True)
        lock_fd = take_process_lock(private / PROCESS_LOCK)
        try:
            state = state_dir(root)
            # The store syncs what it writes itself, many objects at once (store.durable).
            pygit2.settings.enable_fsync_gitdir(False)
            # libgit2 caches no tree over 4 KB by default: every path looked up in a large
            # folder would parse that folder's tree again.
            pygit2.settings.cache_object_limit(pygit2.enums.ObjectType.TREE, TREE_CACHE_LIMIT)
            pygit2.settings.cache_max_size(OBJECT_CACHE_BYTES)
            gitlock.recover(root / ".git")
            side = Sidecar.open(state / SIDECAR_NAME)
            ws = cls(root, repo, config, side, lock_fd, external_identity, lock_wait)
        except BaseException:
            os.close(lock_fd)
            raise
        try:
            ws._recover()
            ws.refresh()
            ws.flush_index()
        except BaseException:
            ws.close()
            raise
        return ws

    def close(self) -> None:
        """Refresh the index, close the database and release the process lock."""
        if self._closed:
            return
        try:
            if threading.get_ident() == self._owner:
                try:
                    self.landing.settle()
                except MnoteError as exc:  # the journal stays: the next open completes it
                    log.warning("closing with a landing unsettled: %s", exc.message)
                with contextlib.suppress(LockBusy):
                    self.flush_index()
        finally:
            if self.landing.settling is not None:
                self.landing.settling[0].close()
            self.git_index.close()
            self.pack_upkeep.close()
            self._closed = True
            self.landing.journal.close()
            self._side.close()
            self.commits.close()
            self._repo.free()
            packs.drop_retired(self._pack_dir)  # no repository of ours has them open now
            os.close(self._lock_fd)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # state --------------------------------------------------------------------------------
    @property
    def workspace_id(self) -> str:
        return self.config.workspace_id

    def reload_config(self) -> WorkspaceConfig:
        """Read ``.mnote/config.toml`` again (the user edited it) and use it from now on.

        :class:`WorkspaceInvalid` if it does not read, or names another workspace id (the
        id names this workspace to its clients: it changes only with a restart); the
        settings in use then stay as they were.
        """
        self._check_thread()
        config = WorkspaceConfig.load(self.root)
        if config.workspace_id != self.config.workspace_id:
            raise WorkspaceInvalid(
                f"{CONFIG_PATH} now names workspace {config.workspace_id!r}, not "
                f"{self.config.workspace_id!r}",
                hint="Put the id back, or restart the daemon to serve the workspace under it.",
            )
        self.config = config
        return config

    @property
    def head(self) -> str | None:
        """The workspace revision: the commit the branch names (None before the first)."""
        return self.heads.head

    @property
    def branch(self) -> str:
        return self.heads.branch

    @property
    def _head(self) -> str | None:
        return self.heads.head

    @_head.setter
    def _head(self, head: str | None) -> None:
        self.heads.head = head

    @property
    def _branch(self) -> str:
        return self.heads.branch

    @_branch.setter
    def _branch(self, branch: str) -> None:
        self.heads.branch = branch

    @property
    def _needs_recovery(self) -> bool:
        """An interrupted landing must be completed before the next write (the landing's)."""
        return self.landing.needs_recovery

    @_needs_recovery.setter
    def _needs_recovery(self, value: bool) -> None:
        self.landing.needs_recovery = value

    def _settled(self) -> None:
        """Finish a command an error interrupted (its record must describe it), catch up."""
        if self._needs_recovery:
            self._ready_to_write()
        else:
            self.refresh()

    def operation(self) -> tuple[str, str] | None:
        """The Git operation the person left under way (a merge, rebase, cherry-pick, revert,
        bisect or patch application) and how to end it, or None.

        While one is, reads go on (HEAD's version is served; a file's state on disk is not
        committed) and commands are refused with that hint: a commit then would be moved
        back over by the operation's abort, or built on an index the operation owns. Edits
        saved meanwhile are committed once it has ended.
        """
        self._check_thread()
        return unfinished_operation(self._repo) or self.git_index.conflicts()

    def refresh(self) -> bool:
        """Notice a HEAD moved by someone else (``git commit/pull/checkout``); re-index.

        Returns True if HEAD had moved since the store last looked.
        """
        self._check_thread()
        return self.heads.refresh()

    # reading (store.reads) ----------------------------------------------------------------
    def resolve(self, ref: str) -> DocRef:
        return self.reads.resolve(ref)

    def documents(self, under: str = "") -> list[DocRef]:
        return self.reads.documents(under)

    def listing(self, under: str = "") -> list[tuple[DocRef, str, str]]:
        return self.reads.listing(under)

    def blob_id(self, path: str) -> str | None:
        return self.reads.blob_id(path)

    def read_basis(self, path: str) -> tuple[object, Key] | None:
        return self.reads.read_basis(path)

    def still_as_read(self, basis: tuple[object, Key], path: str) -> bool:
        return self.reads.still_as_read(basis, path)

    def filter_of(self, path: str) -> str | None:
        return self.reads.filter_of(path)

    def refuse_filtered(self, path: str) -> None:
        self.reads.refuse_filtered(path)

    def read_head(self, path: str) -> bytes | None:
        return self.reads.read_head(path)

    def read_disk(self, path: str) -> bytes | None:
        return self.reads.read_disk(path)

    def differs_on_disk(self, path: str) -> bool:
        return self.reads.differs_on_disk(path)

    def read_blob(self, blob_id: str) -> bytes | None:
        return self.reads.read_blob(blob_id)

    def blob_at(self, revision: str, path: str) -> tuple[str, bytes] | None:
        return self.reads.blob_at(revision, path)

    def revision_of(self, path: str) -> str:
        return self.reads.revision_of(path)

    def history(self, ref: str, limit: int = 50) -> list[HistoryEntry]:
        return self.reads.history(ref, limit)

    def find_command(
        self,
        *,
        command_id: str | None = None,
        trace_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[CommandRecord]:
        return self.reads.find_command(
            command_id=command_id, trace_id=trace_id, idempotency_key=idempotency_key
        )

    def paths_of_commit(self, commit: str) -> list[str]:
        return self.reads.paths_of_commit(commit)

    @property
    def settle_quiet(self) -> float:
        """Seconds a file must have been left alone before it is committed or written over
        (``store.settle.QUIET_NS``); a file open for writing is waited for whatever this is.
        Set by whoever opens the workspace: a test harness that writes whole files itself
        sets 0."""
        return self._writers.quiet_ns / 1e9

    @settle_quiet.setter
    def settle_quiet(self, seconds: float) -> None:
        self._writers.quiet_ns = int(seconds * 1e9)

    @property
    def clean_filter(self) -> Clean | None:
        """What runs Git's clean filters for this workspace (``store.filters``): set by the
        process that opens it; without it, a filtered file is not committed from the disk."""
        return self._filters.run

    @clean_filter.setter
    def clean_filter(self, run: Clean | None) -> None:
        self._filters.run = run

    # external edits (store.external) ------------------------------------------------------
    def scan_changes(
        self,
        paths: Iterable[str] | None = None,
        *,
        shallow: Iterable[str] = (),
        whole_tree: Callable[[Path], set[str] | None] | None = None,
    ) -> list[str]:
        return self.external.scan_changes(paths, shallow=shallow, whole_tree=whole_tree)

    def moved_from(self, paths: Iterable[str]) -> list[str]:
        return self.external.moved_from(paths)

    @property
    def left_alone(self) -> Callable[[str], bool] | None:
        """Untracked files scans pass over as ignored ones (:attr:`External.left_alone`)."""
        return self.external.left_alone

    @left_alone.setter
    def left_alone(self, test: Callable[[str], bool] | None) -> None:
        self.external.left_alone = test

    @property
    def unsettled(self) -> set[str]:
        """The paths the last :meth:`commit_external` left alone: being written by someone
        else (open for writing, or changed a moment ago) for longer than it waited."""
        return self.external.unsettled

    # writing ------------------------------------------------------------------------------
    def apply(self, meta: CommandMeta, changes: Sequence[Change]) -> CommitResult:
        """Apply one command as exactly one commit and return its revision.

        Pending external edits of the touched paths are committed first (as ``external``).
        An idempotency key already used with the same ``request_hash`` returns the first
        result (``replayed``) without a commit; with another request it raises
        :class:`IdempotencyConflict`.
        """
        self._check_thread()
        meta = meta.with_command_id()
        if meta.idempotency_key:
            owner = message.meta_key_owner(meta)
            rec = self.idempotency.check(meta.idempotency_key, meta.request_hash, owner)
            if rec is not None:
                return self._replayed(rec)
        if not changes:
            raise InvalidArguments("a command needs at least one change")
        touched = validate(self.root, self.config, changes)
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
        self._check_thread()
        validate(self.root, self.config, changes)
        self.refresh()
        self._refuse_unwritable(changes)

    def _refuse_unwritable(self, changes: Sequence[Change]) -> None:
        """Refuse bytes written at a path Git filters, a file added where Git ignores or
        inside another repository, or a read-only file replaced, deleted or moved."""
        refuse_filtered(self._filters, changes)
        refuse_read_only(self.root, changes)
        refuse_left_out(self._repo, self.root, self.config, self.commits.head_tree(), changes)

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
            targets = plan(self._repo, self.commits.head_tree(), changes)
            result = self._commit(meta, targets, [subject_path(c) for c in changes])
            if result is not None:
                if external is not None:
                    result = CommitResult(
                        result.commit,
                        result.command_id,
                        result.parent,
                        result.paths,
                        external_commit=external.commit,
                    )
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
        if self.unsettled:
            busy = sorted(self.unsettled)
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
        self._check_thread()
        meta = meta or CommandMeta("external.edit", actor=EXTERNAL_ACTOR)
        group = self._group
        if group is not None:
            # The disk still has these files as they were before the group; the group
            # checks them for edits made meanwhile when it writes them.
            paths = [p for p in paths if p not in group.written]
        paths = list(paths)
        self.external.settled(paths, wait)
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
            tree = self.commits.head_tree()
            group.checked_paths.update(
                p for p in paths if include_ignored or trees.entry_at(tree, p) is not None
            )
        return result

    def _commit_external(
        self, paths: list[str], meta: CommandMeta, include_ignored: bool
    ) -> CommitResult | None:
        self._ready_to_write()
        for _ in range(_CAS_ATTEMPTS):
            targets = self.external.targets(paths, include_ignored=include_ignored)
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

    def idle(self, *, background: bool = False) -> None:
        """Called by the writer thread when it has nothing queued: refresh the Git index
        (with ``background``, on a thread of its own: :meth:`refresh_index_soon`)."""
        self.landing.settle()
        if background:
            self.refresh_index_soon()
        else:
            self.flush_index()
        self.upkeep(wait=not background)
        if self.pack_upkeep.odb_stale:
            self.pack_upkeep.reopen_objects()

    def upkeep(self, *, wait: bool = False) -> None:
        """Merge the store's packs once :data:`PACKS_PER_LEVEL` of a level piled up.

        The merge runs on a thread of its own (a merge waits for the disk twice, and the
        writer went on with the next command meanwhile); with ``wait``, here, until no level
        is full. The daemon's writer calls it after answering a group; a landing merges by
        itself, waiting, only at twice that (callers that never call this, or :meth:`idle`,
        still keep a bounded number of packs).
        """
        self._check_thread()
        self.pack_upkeep.collect_merge(block=False)
        self.pack_upkeep.merge_packs(PACKS_PER_LEVEL, wait=wait)

    def maintenance(self, *, min_objects: int = 1) -> PackReport:
        return self.pack_upkeep.maintenance(min_objects=min_objects)

    @property
    def _staging(self) -> packs.Staging:
        return self.pack_upkeep.staging

    @property
    def _levels(self) -> list[list[str]]:
        return self.pack_upkeep.levels

    def _merge_packs(self, at: int, *, wait: bool) -> None:
        self.pack_upkeep.merge_packs(at, wait=wait)

    def flush_index(self) -> None:
        """Make the Git index agree with HEAD for every path mnoted committed
        (:meth:`IndexKeeper.flush`)."""
        self.git_index.flush()

    def refresh_index_soon(self) -> None:
        """:meth:`flush_index` on a thread of its own (:meth:`IndexKeeper.refresh_soon`)."""
        self.git_index.refresh_soon()

    def rebuild(self) -> None:
        """Recompute the sidecar (ids, revisions, history, idempotency) from Git history."""
        self.refresh()
        indexer.rebuild(self._repo, self._side, self._head, self._branch)

    def user_identity(self) -> Identity | None:
        return self.authors.user_identity()

    # internals ----------------------------------------------------------------------------
    def _check_thread(self) -> None:
        if self._closed:
            raise InternalError("the workspace is closed")
        if threading.get_ident() != self._owner:
            raise InternalError(
                "a Workspace must be used only by the thread that opened it",
                hint="Send the call to the workspace's writer thread.",
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
                self._recover()
            except BaseException as exc:
                self._needs_recovery = True  # tried again by the next command
                if isinstance(exc, OSError):
                    raise StorageError(
                        f"completing an interrupted command failed: {exc.strerror or exc}",
                        errno=exc.errno,
                    ) from exc
                raise
        self.refresh()

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
        pending = self.commits.build(meta, targets, subject_paths, on_disk)
        group = self._group
        if group is not None:
            self.commits.record(pending)
            group.add(pending)
            self._head = pending.result.commit
            return pending.result
        landed = self.landing.land([pending])
        if landed is None:
            self._fresh.clear()
            self.refresh()
            return None
        raced = self._finish(*landed, lambda: self.commits.record(pending))
        if raced:
            again = self._reapply(raced, pending.result.commit)
            if again is not None:
                return replace(again, planned=pending.result.commit)
        return pending.result

    def _finish(
        self, entry: Entry, writes: FileWrites | None, record: Callable[[], object]
    ) -> list[FileStep]:
        """After the branch moved: put the files in place (``writes``: already written under
        temporary names and synced) and ``record`` in the sidecar; the steps of the files a
        person saved over meanwhile (their save committed next): :meth:`_reapply` puts the
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
                self.landing.journal.clear()
                faults.point("journal-cleared")
            else:
                self.landing.settling, writes = (writes, entry), None
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
        self._merge_packs(2 * PACKS_PER_LEVEL, wait=True)
        if diverged:
            self.commit_external(diverged)
        return raced

    def _reapply(
        self, raced: list[FileStep], origin: str, *, answered: bool = False
    ) -> CommitResult | None:
        """Put commit ``origin``'s change back on the files of ``raced`` a person saved over
        as it landed (:mod:`~mnoted.store.reapply`), as a commit with ``origin``'s author and
        trailers (one command, two commits: the answer names the last). None if the files
        hold the change already. :class:`Conflict` naming the person's commit if the change
        does not apply on their save, or they are still writing it: nothing is written then,
        the person's save stays, and the command's version stays in ``origin``, whose
        idempotency key is forgotten (a retry runs the command anew) unless its caller was
        ``answered`` already."""
        commit = self._repo[origin]
        assert isinstance(commit, pygit2.Commit)
        author = Identity(
            commit.author.raw_name.decode("utf-8", "replace"),
            commit.author.raw_email.decode("utf-8", "replace"),
        )
        meta = message.meta_of(commit.raw_message.decode("utf-8", "replace"), author)
        # (the trailers say which commit of the command this one carries on)
        meta = replace(meta, extra=(*meta.extra, (message.REAPPLIES, origin)))
        pending = {step.path: step for step in raced}
        result: CommitResult | None = None
        for _ in range(_CAS_ATTEMPTS):
            self.commit_external(list(pending), include_ignored=True)
            theirs = self._head
            if self.unsettled:
                busy = sorted(self.unsettled)
                self._forget_keys(origin, answered)
                raise Conflict(
                    f"{', '.join(busy)} was saved by someone else as {meta.command} wrote it, "
                    "and is still being written; their save stays",
                    hint=f"Your version is in commit {origin} (git show {origin}:{busy[0]}); "
                    "read the page again once it is saved and redo the edit.",
                    path=busy[0],
                    commit=origin,
                )
            tree = self.commits.head_tree()
            targets: list[Target] = []
            for path, step in pending.items():
                found = trees.object_at(tree, path)
                now = str(found.id) if found is not None else None
                if now == step.new:
                    continue
                clean, data = reapply.merged(
                    path,
                    self._blob_bytes(step.old),
                    self._blob_bytes(step.new),
                    self._blob_bytes(now),
                )
                if not clean:
                    self._forget_keys(origin, answered)
                    raise Conflict(
                        f"{path} was saved by someone else (commit {theirs}) as "
                        f"{meta.command} wrote it, and the change does not apply on their "
                        "save; their save stays",
                        hint=f"Your version is in commit {origin} (git show {origin}:{path}); "
                        f"read the page again (commit {theirs}) and redo the edit on it.",
                        path=path,
                        commit=origin,
                        external_commit=theirs,
                    )
                targets.append(Target(path, data, step.mode))
            if not targets:
                return result
            pending = self.commits.build(meta, targets, [t.path for t in targets], False)
            landed = self.landing.land([pending])
            if landed is None:  # saved once more meanwhile: merged again on that save
                self._fresh.clear()
                self.refresh()
                continue
            again = self._finish(*landed, partial(self.commits.record, pending))
            result = pending.result
            if not again:
                return result
            pending = {step.path: step for step in again}
        self._forget_keys(origin, answered)
        raise Conflict(
            f"{', '.join(sorted(pending))} kept being saved by someone else while "
            f"{meta.command} wrote it; their saves stay",
            hint=f"Your version is in commit {origin}; read the page again and redo the edit.",
            path=sorted(pending)[0],
            commit=origin,
        )

    def _forget_keys(self, origin: str, answered: bool) -> None:
        if not answered:
            self._side.forget_keys_of(origin)

    def _reapply_landed(self, raced: list[FileStep], origins: dict[str, str]) -> None:
        """:meth:`_reapply` for commits whose callers were answered before it could run (a
        group's, a fetched commit's): each path's change by the last commit that made it; a
        change that does not apply is logged, and stays in that commit."""
        by_origin: dict[str, list[FileStep]] = {}
        for step in raced:
            by_origin.setdefault(origins[step.path], []).append(step)
        for origin, steps in by_origin.items():
            try:
                self._reapply(steps, origin, answered=True)
            except MnoteError as exc:  # (what landed stays landed: nothing is raised)
                log.warning("%s (%s)", exc.message, exc.hint)
            except OSError as exc:  # the journal tells the next write what to finish
                self._needs_recovery = True
                log.warning("putting %s back on a saved file failed: %s", origin, exc)

    def _blob_bytes(self, blob: str | None) -> bytes | None:
        return None if blob is None else self.read_blob(blob)

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
        self._check_thread()
        if self._group is not None:
            raise InternalError("groups of commands do not nest")
        self._settled()
        group = _Group(self._head)
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
            landed = self.landing.land(group.pending, self._side.write_kept)
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
            self._reapply_landed(raced, last)
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
        self._staging.clear()
        self._side.rollback()
        self._head = group.base
        self.refresh()

    def _recover(self) -> None:
        """Complete or drop a command a crash interrupted (see ``docs/store.md``)."""
        settling, self.landing.settling = self.landing.settling, None
        if settling is not None:  # (its entry is the journal's, completed here)
            settling[0].close()
        packs.recover(self._pack_dir)
        entry = self.landing.journal.read()
        self._needs_recovery = False
        if entry is None:
            self.landing.journal.clear()
            return
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
        self._branch = branch
        self._head = refs.read_ref(self.gitdir, branch)
        diverged = (
            materialize(self._repo, self.root, entry, filters=self._filters) if landed else []
        )
        for step in entry.files:
            remove_temp_files(self.root.joinpath(*step.path.split("/")).parent)
        if landed:  # the new names of files put in place before the crash, and the branch's
            self.landing.sync_folders(entry)
        indexer.advance(self._repo, self._side, self._head, self._branch)
        self.landing.journal.clear()
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
        self._check_thread()
        assert self._group is None, "land_commit runs outside a group of commands"
        self._ready_to_write()
        self.refresh()
        target = self._repo[commit]
        assert isinstance(target, pygit2.Commit)
        old_tree = self.commits.head_tree()
        steps: list[FileStep] = []
        diff = (
            old_tree.diff_to_tree(target.tree)
            if old_tree is not None
            else target.tree.diff_to_tree(swap=True)
        )
        for delta in diff.deltas:
            old_f, new_f = delta.old_file, delta.new_file
            if pygit2.GIT_FILEMODE_COMMIT in (old_f.mode, new_f.mode):
                continue  # a submodule's commit is its own repository's business
            if old_f.path != new_f.path:
                steps.append(FileStep(old_f.path, str(old_f.id), None, old_f.mode))
            gone = delta.status == pygit2.GIT_DELTA_DELETED
            steps.append(
                FileStep(
                    new_f.path,
                    None if delta.status == pygit2.GIT_DELTA_ADDED else str(old_f.id),
                    None if gone else str(new_f.id),
                    old_f.mode if gone else new_f.mode,
                )
            )
        paths = tuple(dict.fromkeys(step.path for step in steps))
        if paths and self.commit_external(paths, include_ignored=True) is not None:
            return None
        if self._head != expect:
            return None
        pending = PendingCommit(
            CommitResult(commit, command_id, expect, paths),
            target.message,
            tuple(steps),
            paths,
            None,
            target.commit_time,
        )
        landed = self.landing.land([pending])
        if landed is None:
            self._fresh.clear()
            self.refresh()
            return None
        parent = str(target.parents[0].id) if target.parents else None
        written = {commit: paths} if parent == expect else None

        def record() -> None:
            indexer.advance(self._repo, self._side, commit, self._branch, self._fresh, written)
            self._side.begin()
            self._side.mark_index_pending(list(paths))  # (whoever committed it)
            self._side.commit()

        raced = self._finish(*landed, record)
        if raced:
            self._reapply_landed(raced, {step.path: commit for step in raced})
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
