"""The workspace: a folder of notes that is a Git repository, and its one writer.

Threading rule: a :class:`Workspace` (its pygit2 Repository and its SQLite connection) belongs
to the thread that opened it; every method but three must be called from that thread (the
daemon's writer thread), and a call from another thread raises :class:`InternalError`.
:meth:`Workspace.maintenance` and :meth:`Workspace.commit_reader` open their own Repository
and may run on any thread, and so may :meth:`Workspace.still_as_read`, which only stats
files. Only one process serves a workspace at a time (an ``flock`` on
``.git/mnote/daemon.lock``).

A command goes: commit pending external edits of its paths → build its commit in memory →
land it (one pack, journal, compare-and-swap of the branch, the Git index) → put its files
in place → record it in the sidecar (:class:`~mnoted.store.writer.Writer`).

The workspace composes collaborators that own their state and never import this module:
:class:`~mnoted.store.heads.Heads` (the branch and its commit),
:class:`~mnoted.store.reads.Reads`, :class:`~mnoted.store.external.External` (edits made
outside mnoted), :class:`~mnoted.store.indexkeeper.IndexKeeper` (the Git index),
:class:`~mnoted.store.commits.CommitBuilder`, :class:`~mnoted.store.landing.Landing`,
:class:`~mnoted.store.upkeep.Upkeep` (packs) and :class:`~mnoted.store.writer.Writer`; it
opens and closes them (``docs/store.md``, *Inside a workspace*).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType

import pygit2

from mnoted.errors import (
    InternalError,
    LockBusy,
    MnoteError,
    WorkspaceInvalid,
)
from mnoted.store import (
    gitlock,
    indexer,
    packs,
    upkeep,
)
from mnoted.store.atomic import fsync_dir
from mnoted.store.authors import Authors
from mnoted.store.bootstrap import (
    adopt,
    check_repository,
    take_process_lock,
)
from mnoted.store.commits import CommitBuilder
from mnoted.store.config import (
    CONFIG_PATH,
    WorkspaceConfig,
)
from mnoted.store.external import External
from mnoted.store.facades import BLOCK_IDS, GRANTS, BlockIds, Grants
from mnoted.store.filters import Clean, Filters
from mnoted.store.heads import Heads
from mnoted.store.indexkeeper import IndexKeeper
from mnoted.store.journal import Journal
from mnoted.store.landing import COMMITTER, Landing
from mnoted.store.maintenance import PackReport
from mnoted.store.model import (
    Change,
    CommandMeta,
    CommandRecord,
    CommitResult,
    DocRef,
    HistoryEntry,
    Identity,
)
from mnoted.store.reads import Reads
from mnoted.store.reviews import REVIEWS, ReviewStore, adopt_legacy
from mnoted.store.settle import Settling
from mnoted.store.sidecar import Sidecar
from mnoted.store.statcache import Key, StatCache
from mnoted.store.statedir import PRIVATE_DIR, STATE_DIR, state_dir
from mnoted.store.treediff import CommitReader
from mnoted.store.upkeep import Upkeep
from mnoted.store.writer import SETTLE_WAIT, Writer

SIDECAR_NAME = "state.sqlite3"
PROCESS_LOCK = "daemon.lock"
TREE_CACHE_LIMIT = 16 << 20
OBJECT_CACHE_BYTES = 16 << 20
"""What libgit2's object cache may hold in all, counted in object bytes (its default, 256 MB,
is reached by a daemon that writes: every write makes new trees, each cached when read, and
a cached tree takes about three times its size in memory). HEAD's trees of a large
workspace fit in it."""
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
        self.block_ids = BlockIds(side, self._check_thread)
        self.grants = Grants(side, self._check_thread)
        self.reviews = ReviewStore(side, self._check_thread)
        self._repo = repo
        self._side = side
        self._lock_fd = lock_fd
        self._lock_wait = lock_wait
        self._owner = threading.get_ident()
        self.authors = Authors(repo, external_identity)
        self.heads = Heads(self.gitdir, repo, side, COMMITTER.email, lambda: self.writer.in_group)
        self._closed = False
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
            lambda: self.writer.group_pending,
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
        self.writer = Writer(
            root,
            repo,
            side,
            self.heads,
            self.reads,
            self.external,
            self.commits,
            self.landing,
            self.pack_upkeep,
            self.git_index,
            self._filters,
            self._stats,
            self._writers,
            self._fresh,
            config=lambda: self.config,
            check=self._check_thread,
            lock_wait=lock_wait,
        )
        self.idempotency = self.writer.idempotency

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
            side = Sidecar.open(state / SIDECAR_NAME, (REVIEWS, BLOCK_IDS, GRANTS))
            side.db.warnings += adopt_legacy(side.db, state)
            ws = cls(root, repo, config, side, lock_fd, external_identity, lock_wait)
        except BaseException:
            os.close(lock_fd)
            raise
        try:
            ws.writer.recover()
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

    def operation(self) -> tuple[str, str] | None:
        """The Git operation the person left under way and how to end it, or None
        (:meth:`Writer.operation`)."""
        return self.writer.operation()

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

    def files_changed(self, old: str | None, new: str) -> list[tuple[str, str | None]]:
        return self.reads.files_changed(old, new)

    def commit_reader(self) -> CommitReader:
        """Commits read through a Repository of its own, for the calling thread."""
        return CommitReader(pygit2.Repository(str(self.root)), owned=True)

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

    # writing (store.writer) ---------------------------------------------------------------
    @property
    def on_write(self) -> Callable[[str, str | None], object] | None:
        """Told each path and blob id (None: removed) just before the store writes it
        (:attr:`Writer.on_write`)."""
        return self.writer.on_write

    @on_write.setter
    def on_write(self, callback: Callable[[str, str | None], object] | None) -> None:
        self.writer.on_write = callback

    @property
    def last_write(self) -> float:
        """When the last landing's files were put in place (monotonic)."""
        return self.writer.last_write

    def apply(self, meta: CommandMeta, changes: Sequence[Change]) -> CommitResult:
        """Apply one command as exactly one commit and return its revision
        (:meth:`Writer.apply`)."""
        return self.writer.apply(meta, changes)

    def check_writable(self, changes: Sequence[Change]) -> None:
        """Raise what :meth:`apply` would raise about ``changes``, writing nothing."""
        self.writer.check_writable(changes)

    def commit_external(
        self,
        paths: Iterable[str],
        *,
        meta: CommandMeta | None = None,
        include_ignored: bool = False,
        wait: float = SETTLE_WAIT,
    ) -> CommitResult | None:
        """Commit what is on disk now at ``paths`` where it differs from HEAD; None if
        nothing (:meth:`Writer.commit_external`)."""
        return self.writer.commit_external(
            paths, meta=meta, include_ignored=include_ignored, wait=wait
        )

    def group(self) -> contextlib.AbstractContextManager[None]:
        """Land the commands applied inside together (:meth:`Writer.group`)."""
        return self.writer.group()

    def after_landing(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once what was applied so far is durable (now, outside a group)."""
        self.writer.after_landing(callback)

    def land_commit(
        self, commit: str, *, expect: str | None, command_id: str
    ) -> CommitResult | None:
        """Move the branch from ``expect`` to ``commit``, a commit already in the repository,
        writing the files it changes (:meth:`Writer.land_commit`)."""
        return self.writer.land_commit(commit, expect=expect, command_id=command_id)

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
        self.pack_upkeep.merge_packs(upkeep.PACKS_PER_LEVEL, wait=wait)

    def maintenance(self, *, min_objects: int = 1) -> PackReport:
        return self.pack_upkeep.maintenance(min_objects=min_objects)

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
        indexer.rebuild(self._repo, self._side, self.heads.head, self.heads.branch)

    @property
    def state_warnings(self) -> list[str]:
        """What opening the workspace database found wrong (a damaged file moved aside)."""
        return list(self._side.db.warnings)

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
