"""The objects of the store's own commits, built on HEAD (or on a pending commit) in memory.

A command's blobs, the trees along its paths and its commit object are written into the
staging of objects not yet landed (``store.packs``); :class:`PendingCommit` is such a commit,
which the landing (``store.landing``) makes durable and puts on the branch, and
:meth:`CommitBuilder.record` writes into the sidecar.
"""

from __future__ import annotations

import pygit2

from mnoted.core.blob import blob_id
from mnoted.store import indexer, message, packs, treediff, trees
from mnoted.store.authors import Authors
from mnoted.store.filters import Filters
from mnoted.store.heads import Heads
from mnoted.store.journal import FileStep
from mnoted.store.landing import COMMITTER, PendingCommit
from mnoted.store.model import CommandMeta, CommitResult
from mnoted.store.planning import Target
from mnoted.store.sidecar import Sidecar
from mnoted.store.upkeep import Upkeep


class CommitBuilder:
    """Builds the store's commits for one workspace (its writer thread's), and keeps HEAD's
    tree at hand for the commands that ask for it."""

    def __init__(
        self,
        repo: pygit2.Repository,
        side: Sidecar,
        heads: Heads,
        upkeep: Upkeep,
        filters: Filters,
        authors: Authors,
        fresh: dict[str, bytes],
    ) -> None:
        self._repo = repo
        self._side = side
        self._heads = heads
        self._upkeep = upkeep
        self._filters = filters
        self._authors = authors
        self._fresh = fresh  # bytes of the blobs built and not yet landed, by blob id
        self._kept_tree: tuple[str, pygit2.Tree] | None = None  # `head_tree`
        self._writer = packs.object_writer(upkeep.staging, repo)  # new trees and commits
        self._builders = trees.Builders()  # the writer's, by the tree each holds

    def close(self) -> None:
        self._kept_tree = None  # (before the repository it belongs to is freed)
        self._writer.free()

    def head_tree(self) -> pygit2.Tree | None:
        """HEAD's tree (maybe a pending commit's), kept for the next call: a command asks
        for it four times, each a lookup of the commit and of its tree. A pending commit is
        looked up where it was written: the repository would first search every pack."""
        head = self._heads.head
        if head is None:
            return None
        kept = self._kept_tree
        if kept is not None and kept[0] == head:
            return kept[1]
        pending = pygit2.Oid(hex=head) in self._upkeep.staging
        commit = (self._writer if pending else self._repo)[head]
        assert isinstance(commit, pygit2.Commit)
        tree = commit.tree
        self._kept_tree = (head, tree)
        return tree

    def record(self, pending: PendingCommit) -> None:
        """Record a commit the store made in the sidecar: from what it built when the
        sidecar is at the commit's parent (the common case), else by replaying it."""
        commit = pending.result.commit
        if pending.deltas is not None and indexer.record_own(
            self._repo,
            self._side,
            commit,
            pending.result.parent,
            self._heads.branch,
            pending.deltas,
            pending.message,
            pending.time,
            self._fresh,
        ):
            return
        indexer.advance(
            self._repo, self._side, commit, self._heads.branch, self._fresh, {commit: pending.paths}
        )

    def build(
        self, meta: CommandMeta, targets: list[Target], subject_paths: list[str], on_disk: bool
    ) -> PendingCommit:
        """Write the objects of one commit on the current (maybe pending) head; not durable."""
        parent = self._heads.head
        base = self.head_tree()
        entries: dict[str, trees.Entry] = {}
        steps: list[FileStep] = []
        files: list[tuple[str, tuple[str, int] | None, tuple[str, int] | None]] | None = []
        for t in targets:
            found = trees.object_at(base, t.path)
            old = None
            if found is not None and found.type == pygit2.GIT_OBJECT_BLOB:
                old = (str(found.id), found.filemode)
            elif found is not None:
                files = None  # a folder or a submodule there: the sidecar diffs the trees
            if t.data is None:
                entries[t.path] = None
                new = None
            else:
                # What `git add` would store: the disk's bytes were cleaned already; a
                # command's are cleaned here (an agent's CRLF under `text`), and a checkout's
                # bytes are what goes to disk (`worktree.FileWrites`).
                data = t.data if on_disk else self._filters.stored(t.path, t.data)
                blob = self.write_blob(data)
                self._fresh[str(blob)] = data
                entries[t.path] = (blob, t.mode)
                new = (str(blob), t.mode)
            steps.append(FileStep(t.path, old[0] if old else None, new[0] if new else None, t.mode))
            if files is not None:
                files.append((t.path, old, new))
        tree_id = trees.build(
            self._writer, base.id if base is not None else None, entries, self._builders
        )
        author = self._authors.signature(meta)
        committer = pygit2.Signature(COMMITTER.name, COMMITTER.email)
        text = message.format_message(meta, subject_paths)
        parents = [pygit2.Oid(hex=parent)] if parent else []
        commit_id = self._writer.create_commit(None, author, committer, text, tree_id, parents)
        result = CommitResult(
            str(commit_id), meta.command_id, parent, tuple(t.path for t in targets)
        )
        deltas = treediff.own_deltas(files) if files is not None else None
        return PendingCommit(
            result,
            text,
            () if on_disk else tuple(steps),
            tuple(entries),
            None if deltas is None else tuple(deltas),
            committer.time,
        )

    def write_blob(self, data: bytes) -> pygit2.Oid:
        """Stage a blob, hashed by OpenSSL's SHA-1 (cheaper than libgit2's collision-detecting
        one), even if a pack has it (``packs.WriteThrough``)."""
        oid = pygit2.Oid(hex=blob_id(data))
        self._upkeep.staging.add(oid, pygit2.GIT_OBJECT_BLOB, data)
        return oid
