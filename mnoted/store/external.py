"""Edits made outside mnoted: what differs on disk from HEAD, and what a commit of it takes.

:class:`External` finds what a person (or an editor, or ``git``) changed in the work tree
as ``git status`` would, through folder fds and the Git index's stat data
(:mod:`mnoted.store.scan`), and reads what is on disk at given paths as a commit's targets
once the files are settled (:mod:`mnoted.store.settle`). It owns the parsed Git index and
the paths the last check left alone; committing the targets is the landing's (the
workspace's :meth:`~mnoted.store.workspace.Workspace.commit_external`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

import pygit2

from mnoted.errors import PathRejected
from mnoted.store import indexstat, scan, trees
from mnoted.store.config import WorkspaceConfig
from mnoted.store.filters import Filters
from mnoted.store.heads import Heads
from mnoted.store.paths import is_internal, normalize, not_utf8
from mnoted.store.planning import Target, disk_changes
from mnoted.store.settle import Settling
from mnoted.store.sidecar import Sidecar
from mnoted.store.staged import staged as staged_paths
from mnoted.store.statcache import StatCache
from mnoted.store.worktree import disk_file

log = logging.getLogger("mnoted.store")


class External:
    """The work tree's differences from HEAD, found and read for a commit."""

    def __init__(
        self,
        root: Path,
        repo: pygit2.Repository,
        side: Sidecar,
        heads: Heads,
        stats: StatCache,
        filters: Filters,
        writers: Settling,
        *,
        config: Callable[[], WorkspaceConfig],
        head_tree: Callable[[], pygit2.Tree | None],
        flush_index: Callable[[], None],
        check: Callable[[], None],
    ) -> None:
        """``head_tree``: HEAD's tree (maybe a pending commit's); ``flush_index``: bring the
        Git index in step with mnoted's commits before it is compared; ``check`` raises off
        the writer's thread."""
        self.root = root
        self._gitdir = root / ".git"
        self._repo = repo
        self._side = side
        self._heads = heads
        self._stats = stats
        self._filters = filters
        self._writers = writers
        self._config = config
        self._head_tree = head_tree
        self._flush_index = flush_index
        self._check = check
        self.left_alone: Callable[[str], bool] | None = None
        """Untracked files the scan passes over as it does ignored ones, set by the process
        that opens the workspace: the daemon's are editors' temp and swap files, which its
        watcher never commits either (``sync.ignore.is_temp``)."""
        self.unsettled: set[str] = set()
        """The paths the last :meth:`settled` left alone: being written by someone else
        (open for writing, or changed a moment ago) for longer than it waited."""
        self.index_cache: tuple[object, indexstat.IndexStat] | None = None
        self._staged_cache: tuple[object, set[str]] | None = None

    def settled(self, paths: list[str], wait: float) -> None:
        """Wait up to ``wait`` seconds for files at ``paths`` being written by someone else
        to settle; those still unsettled then are :attr:`unsettled`."""
        self.unsettled = self._writers.wait_for(self.root, paths, wait) if paths else set()

    def targets(self, paths: list[str], *, include_ignored: bool) -> list[Target]:
        """What is on disk at ``paths`` where it differs from HEAD, :attr:`unsettled` files
        left out (``planning.disk_changes``)."""
        return disk_changes(
            self._repo,
            self.root,
            self._config(),
            self._head_tree(),
            paths,
            include_ignored=include_ignored,
            stats=self._stats,
            filters=self._filters,
            skip=self.unsettled,
        )

    def scan_changes(
        self,
        paths: Iterable[str] | None = None,
        *,
        shallow: Iterable[str] = (),
        whole_tree: Callable[[Path], set[str] | None] | None = None,
    ) -> list[str]:
        """Paths whose disk content differs from HEAD (edits made while nobody watched).

        The whole work tree, or only ``paths`` (a folder stands for everything below it)
        and the folders of ``shallow`` (their own entries). As ``git status``: tracked files
        changed or deleted, untracked files not ignored, and paths whose index entry differs
        from HEAD. The walk goes through folder fds and hashes only files whose stat differs
        from the index (:mod:`mnoted.store.scan`). ``whole_tree`` is another way to find
        them in the whole tree, asked once the index is in step with HEAD; where it returns
        None, the tree is walked (the daemon's start-up pass asks the ``git`` command,
        ``mnoted.sync.gitstatus``).
        """
        self._check()
        self._heads.refresh()
        self._flush_index()
        shallow = list(shallow)
        paths = None if paths is None else list(paths)
        if paths == [] and not shallow:
            return []  # nothing to look at: the index is not even parsed
        whole = paths is None and not shallow
        found = whole_tree(self.root) if whole and whole_tree is not None else None
        if found is None:
            index = self.index_stat()
            self._filters.trusts_mode()  # (Git's config looked at once a scan, not once a file)
            walk = scan.Walk(
                self.root,
                index,
                self._stats,
                self._passed_over,
                stored_mode=partial(self._filters.stored_mode, fresh=False),
            )
            if whole:
                walk.tree("")
                found = walk.result() | self._staged(index)
            else:
                walk.paths(p for p in dict.fromkeys(paths or ()) if p and not is_internal(p))
                for folder in dict.fromkeys(shallow):
                    if not folder or not is_internal(folder):
                        walk.folder(folder)
                found = walk.result() | self._staged_at(index, walk.seen)
        out = []
        for path in found:
            shown = not_utf8(path)  # (listed by `git status`; the walk passes them over)
            if shown is not None:
                log.warning("not committing %s: its name is not valid UTF-8; rename it", shown)
                continue
            if is_internal(path):
                continue
            passed_over = self._config().is_ignored(path) or (
                self.left_alone and self.left_alone(path)
            )
            if passed_over and self._side.file(path) is None:
                continue
            out.append(path)
        return sorted(out)

    def moved_from(self, paths: Iterable[str]) -> list[str]:
        """Committed paths now gone from disk that held exactly what ``paths`` hold now.

        A file moved into a folder not yet watched shows up there while its old path is
        reported apart (or not at all); naming the old path lets both be committed as one
        rename, without walking the work tree to find it.
        """
        self._check()
        self._flush_index()
        by_blob: dict[str, list[str]] = {}
        for rel, entry in self.index_stat().entries.items():
            by_blob.setdefault(entry[5].hex(), []).append(rel)
        out: list[str] = []
        for path in paths:
            try:
                found = disk_file(self.root, normalize(path), self._stats)
            except PathRejected:
                continue
            if found is None:
                continue
            for old in by_blob.get(found.blob, ()):
                if old != path and not scan.exists(self.root, old):
                    out.append(old)
        return sorted(set(out))

    def _passed_over(self, path: str) -> bool:
        """Whether the scan passes over untracked ``path`` (a folder's ends with ``/``)."""
        return self._git_ignored(path) or bool(self.left_alone and self.left_alone(path))

    def _git_ignored(self, path: str) -> bool:
        try:
            return bool(self._repo.path_is_ignored(path))
        except UnicodeEncodeError:  # a name that is not UTF-8: no Git path can hold it
            return True

    def index_stat(self) -> indexstat.IndexStat:
        """The index's entries with their stat data, parsed again only when the file changed."""
        stamp = indexstat.stamp(self._gitdir / "index")
        if self.index_cache is None or self.index_cache[0] != stamp:
            self.index_cache = (stamp, indexstat.load(self._gitdir / "index"))
            self._staged_cache = None
        return self.index_cache[1]

    def _staged(self, index: indexstat.IndexStat) -> set[str]:
        """Paths whose index entry differs from HEAD (``git add`` by the user), cached."""
        key = (self.index_cache[0] if self.index_cache else None, self._heads.head)
        if self._staged_cache is not None and self._staged_cache[0] == key:
            return self._staged_cache[1]
        staged = staged_paths(self._repo, self._head_tree(), index)
        self._staged_cache = (key, staged)
        return staged

    def _staged_at(self, index: indexstat.IndexStat, paths: Iterable[str]) -> set[str]:
        """:meth:`_staged` for a few tracked paths, looked up in HEAD one by one."""
        tree = self._head_tree()
        out = set()
        for path in paths:
            entry = index.entries[path]
            if entry[0] == indexstat.GITLINK:
                continue  # a submodule's commit is its own repository's business
            if trees.entry_at(tree, path) != (entry[5].hex(), entry[0]):
                out.add(path)
        return out
