"""Reading the committed workspace and its files: documents, blobs, revisions, history.

:class:`Reads` answers from the sidecar (documents by id and path, blob ids, revisions,
history, commands) and the repository (blobs, trees), after catching up with HEAD
(:class:`~mnoted.store.heads.Heads`); files on disk are read through folder fds
(``store.dirfd``). It writes nothing but the caches it reads through. Every method but
:meth:`Reads.still_as_read` runs on the workspace's writer thread (``check``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pygit2

from mnoted.errors import InvalidArguments, NotFound, PathRejected
from mnoted.store import dirfd, refs, trees
from mnoted.store.filters import Filters
from mnoted.store.heads import Heads
from mnoted.store.model import CommandRecord, DocRef, HistoryEntry
from mnoted.store.paths import normalize, resolve
from mnoted.store.sidecar import Sidecar
from mnoted.store.statcache import Key, StatCache, key_of
from mnoted.store.treediff import CommitReader
from mnoted.store.worktree import read_file


class Reads:
    """What is committed, and what is on disk, as the writer's thread reads it."""

    def __init__(
        self,
        root: Path,
        repo: pygit2.Repository,
        side: Sidecar,
        heads: Heads,
        stats: StatCache,
        filters: Filters,
        fresh: dict[str, bytes],
        check: Callable[[], None],
        pending: Callable[[], bool],
    ) -> None:
        """``fresh``: bytes of blobs staged and not yet landed (the landing's, read back
        without inflating them); ``check`` raises off the writer's thread; ``pending`` tells
        when commits of a group wait to land (a read then has no basis on disk)."""
        self.root = root
        self.gitdir = root / ".git"
        self._repo = repo
        self._side = side
        self._heads = heads
        self._stats = stats
        self._filters = filters
        self._fresh = fresh
        self._check = check
        self._pending = pending

    def _refresh(self) -> bool:
        self._check()
        return self._heads.refresh()

    def resolve(self, ref: str) -> DocRef:
        """A document by its documentId or by its path (at HEAD)."""
        self._refresh()
        return doc_ref(self._side, ref)

    def documents(self, under: str = "") -> list[DocRef]:
        """Every document at HEAD (in folder ``under``, given as ``"name/"``), by path."""
        return [doc for doc, _, _ in self.listing(under)]

    def listing(self, under: str = "") -> list[tuple[DocRef, str, str]]:
        """Every document at HEAD (in folder ``under``) with its blob id and revision."""
        self._refresh()
        return [(DocRef(d, p), b, r) for d, p, b, r in self._side.documents(under)]

    def blob_id(self, path: str) -> str | None:
        """The committed blob id at ``path``, or None."""
        self._refresh()
        row = self._side.file(normalize(path))
        return None if row is None else row[0]

    def read_basis(self, path: str) -> tuple[object, Key] | None:
        """What shows later that the branch and ``path`` are still as a read just saw them.

        The refs stamp and the file's stat key, if the file was hashed once quiet for a
        timestamp tick (``store.statcache``) and found equal to HEAD, and no commit of a
        group is waiting to land; else None. See :meth:`still_as_read`.
        """
        self._check()
        if self._pending():
            return None
        known = self._stats.known(path)
        row = self._side.file(path)
        if known is None or row is None or row[0] != known[1]:
            return None
        return self._heads.ref_stamp, known[0]

    def still_as_read(self, basis: tuple[object, Key], path: str) -> bool:
        """Whether the branch and ``path`` are still as :meth:`read_basis` found them.

        Any thread may ask (the daemon's event loop does, to answer a repeated read): it
        only stats the refs and the file, the file through folder fds like every read.
        """
        stamp, key = basis
        if refs.stamp(self.gitdir, self._heads.branch) != stamp:
            return False
        *folders, name = path.split("/")
        try:
            with dirfd.folder(self.root, folders) as fd:
                st = None if fd is None else dirfd.stat_at(fd, name)
        except (PathRejected, OSError):
            return False
        return st is not None and key_of(st) == key

    def filter_of(self, path: str) -> str | None:
        """The filter driver Git stores ``path`` through (LFS, git-crypt), or None: such a
        file's blob is not its text, and mnoted neither serves nor writes it. For reads:
        a change to Git's config may take a second to be seen (writes see it at once)."""
        return self._filters.of(normalize(path), fresh=False)

    def refuse_filtered(self, path: str) -> None:
        """Raise :class:`PathRejected` where :meth:`filter_of` names a filter."""
        self._filters.refuse(normalize(path), fresh=False)

    def read_head(self, path: str) -> bytes | None:
        """The committed bytes at ``path`` (HEAD), or None."""
        blob_id = self.blob_id(path)
        if blob_id is None:
            return None
        blob = self._repo[blob_id]
        assert isinstance(blob, pygit2.Blob)
        return bytes(blob.data)

    def read_disk(self, path: str) -> bytes | None:
        """The bytes on disk at ``path`` now (maybe an uncommitted external edit), or None."""
        self._check()
        state = read_file(resolve(self.root, path))
        return None if state is None else state[0]

    def differs_on_disk(self, path: str) -> bool:
        """Whether the regular file at ``path`` holds other bytes than HEAD, read even if it
        has several hard links (``read_disk`` refuses those): only to tell a person why an
        edit is not committed, never to serve it."""
        self._check()
        *parts, name = normalize(path).split("/")
        try:
            with dirfd.folder(self.root, parts) as fd:
                found = None if fd is None else dirfd.read_at(fd, name, links_ok=True)
        except (OSError, PathRejected):
            return False
        return found is not None and found[0] != self.read_head(path)

    def read_blob(self, blob_id: str) -> bytes | None:
        """The bytes of a blob by id (any version the repository holds), or None."""
        self._check()
        fresh = self._fresh.get(blob_id)
        if fresh is not None:
            return fresh
        try:
            obj = self._repo[blob_id]
        except (KeyError, ValueError):
            return None
        return bytes(obj.data) if isinstance(obj, pygit2.Blob) else None

    def blob_at(self, revision: str, path: str) -> tuple[str, bytes] | None:
        """The blob id and bytes of ``path`` in commit ``revision``, or None."""
        self._check()
        try:
            commit = self._repo.revparse_single(revision)
            entry = trees.object_at(commit.peel(pygit2.Commit).tree, normalize(path))
        except (KeyError, ValueError, pygit2.GitError, PathRejected):
            return None
        if entry is None:
            return None
        blob = self._repo[entry.id]
        if not isinstance(blob, pygit2.Blob):
            return None
        return str(entry.id), bytes(blob.data)

    def files_changed(self, old: str | None, new: str) -> list[tuple[str, str | None]]:
        """The regular files that differ between two commits (:meth:`CommitReader.files_changed`),
        read through the workspace's repository (its trees cached)."""
        self._check()
        return CommitReader(self._repo).files_changed(old, new)

    def revision_of(self, path: str) -> str:
        """The commit that last changed ``path`` (from the sidecar index, not a history walk)."""
        self._refresh()
        rel = normalize(path)
        row = self._side.file(rel)
        if row is None:
            raise NotFound(f"{rel} is not in the workspace", path=rel)
        return row[1]

    def history(self, ref: str, limit: int = 50) -> list[HistoryEntry]:
        """The commits that changed a document (following renames), newest first."""
        self._refresh()
        doc_id: str | None
        try:
            doc = self.resolve(ref)
            doc_id, path = doc.document_id, doc.path
        except NotFound:
            doc_id, path = None, normalize(ref)
        return [self._with_commit(e) for e in self._side.history(doc_id, path, limit)]

    def _with_commit(self, entry: HistoryEntry) -> HistoryEntry:
        """``entry`` with its commit's author, and its subject and time when the sidecar has
        no command for it (a commit made with ``git`` itself, or before mnoted came)."""
        try:
            commit = self._repo[entry.commit]
        except (KeyError, ValueError):
            return entry  # (gone since: a history rewritten under the sidecar)
        if not isinstance(commit, pygit2.Commit):
            return entry
        author = commit.author.raw_name.decode("utf-8", "replace")
        if entry.command_id is not None:
            return replace(entry, author=author)
        subject = commit.raw_message.decode("utf-8", "replace").split("\n", 1)[0].strip()
        return replace(entry, subject=subject, time=commit.commit_time, author=author)

    def find_command(
        self,
        *,
        command_id: str | None = None,
        trace_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[CommandRecord]:
        """Commits made by mnoted for a command id, a trace id or an idempotency key."""
        self._refresh()
        return commands_of(
            self._side, command_id=command_id, trace_id=trace_id, idempotency_key=idempotency_key
        )

    def paths_of_commit(self, commit: str) -> list[str]:
        """The paths a commit of this branch changed (as the sidecar indexed them)."""
        self._refresh()
        return self._side.paths_of_commit(commit)


def doc_ref(side: Sidecar, ref: str) -> DocRef:
    """The document ``ref`` names in the sidecar: a documentId, else a path at HEAD."""
    path = side.path_of_doc(ref)
    if path is not None:
        return DocRef(ref, path)
    try:
        rel = normalize(ref)
    except PathRejected:
        raise NotFound(f"no document {ref!r}", ref=ref) from None
    row = side.file(rel)
    if row is None or row[2] is None:
        raise NotFound(f"no document {ref!r}", ref=ref)
    return DocRef(row[2], rel)


def commands_of(
    side: Sidecar,
    *,
    command_id: str | None = None,
    trace_id: str | None = None,
    idempotency_key: str | None = None,
) -> list[CommandRecord]:
    """The sidecar's commands for exactly one of a command id, a trace id or a key."""
    given = [
        (c, v)
        for c, v in (
            ("command_id", command_id),
            ("trace_id", trace_id),
            ("idem_key", idempotency_key),
        )
        if v is not None
    ]
    if len(given) != 1:
        raise InvalidArguments("give exactly one of command_id, trace_id, idempotency_key")
    return side.find_commands(*given[0])
