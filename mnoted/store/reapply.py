"""A landed change put back on a file a person saved over in the instant before its rename.

A landing checks its files once more just before the branch moves (``Landing.land``), so
a save begun during its disk syncs lands nothing and the command is planned again on it. A
save that begins between that check and the rename (microseconds) still leaves the person's
file in place: it is committed as ``external``, and the command's change to it is applied
on top, three-way: base the blob before the command, ours the command's blob, theirs the
person's settled bytes. Markdown pages merge on blocks (:func:`mnoted.core.merge.merge_page`);
another file only where one side left it as it was. Nothing is written when the change does
not apply cleanly (the person's save stays, the command's version stays in its commit).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import pygit2

from mnoted.core.merge import merge_page
from mnoted.errors import Conflict, MnoteError
from mnoted.store import message, trees
from mnoted.store.commits import CommitBuilder
from mnoted.store.external import External
from mnoted.store.heads import Heads
from mnoted.store.indexer import is_document
from mnoted.store.journal import Entry, FileStep
from mnoted.store.landing import Landing
from mnoted.store.model import CommitResult, Identity
from mnoted.store.planning import Target
from mnoted.store.reads import Reads
from mnoted.store.sidecar import Sidecar
from mnoted.store.worktree import FileWrites

ATTEMPTS = 5
"""Saves that race the put-back itself are merged on again, this many times at most."""
log = logging.getLogger("mnoted.store")


def merged(
    path: str, base: bytes | None, ours: bytes | None, theirs: bytes | None
) -> tuple[bool, bytes | None]:
    """Whether the command's change (``base`` -> ``ours``) applies cleanly on ``theirs``,
    and the file it gives (None: no file). A removal on either side applies only where the
    other side left the file as it was (an edit is never dropped for a removal)."""
    if ours == theirs or theirs == base:
        return True, ours
    if ours == base:
        return True, theirs
    if ours is None or theirs is None or not is_document(path):
        return False, None
    result = merge_page(base, ours, theirs)
    return result.clean, result.data


class PutBack:
    """Puts a landed command's change back on the files a person saved over as it landed
    (:func:`merged`), for one workspace's writer: the person's save is committed first, then
    the change, as a second commit of the command."""

    def __init__(
        self,
        repo: pygit2.Repository,
        side: Sidecar,
        heads: Heads,
        reads: Reads,
        external: External,
        commits: CommitBuilder,
        landing: Landing,
        fresh: dict[str, bytes],
        *,
        commit_external: Callable[..., CommitResult | None],
        finish: Callable[[Entry, FileWrites | None, Callable[[], object]], list[FileStep]],
        refresh: Callable[[], object],
    ) -> None:
        self._repo = repo
        self._side = side
        self._heads = heads
        self._reads = reads
        self._external = external
        self._commits = commits
        self._landing = landing
        self._fresh = fresh
        self._commit_external = commit_external
        self._finish = finish
        self._refresh = refresh

    def one(
        self, raced: list[FileStep], origin: str, *, answered: bool = False
    ) -> CommitResult | None:
        """Put commit ``origin``'s change back on the files of ``raced`` a person saved over
        as it landed (:func:`merged`), as a commit with ``origin``'s author and
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
        for _ in range(ATTEMPTS):
            self._commit_external(list(pending), include_ignored=True)
            theirs = self._heads.head
            if self._external.unsettled:
                busy = sorted(self._external.unsettled)
                self._forget_keys(origin, answered)
                raise Conflict(
                    f"{', '.join(busy)} was saved by someone else as {meta.command} wrote it, "
                    "and is still being written; their save stays",
                    hint=f"Your version is in commit {origin} (git show {origin}:{busy[0]}); "
                    "read the page again once it is saved and redo the edit.",
                    path=busy[0],
                    commit=origin,
                )
            tree = self._commits.head_tree()
            targets: list[Target] = []
            for path, step in pending.items():
                found = trees.object_at(tree, path)
                now = str(found.id) if found is not None else None
                if now == step.new:
                    continue
                clean, data = merged(
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
            built = self._commits.build(meta, targets, [t.path for t in targets], False)
            landed = self._landing.land([built])
            if landed is None:  # saved once more meanwhile: merged again on that save
                self._fresh.clear()
                self._refresh()
                continue
            again = self._finish(*landed, partial(self._commits.record, built))
            result = built.result
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

    def landed(self, raced: list[FileStep], origins: dict[str, str]) -> None:
        """:meth:`one` for commits whose callers were answered before it could run (a
        group's, a fetched commit's): each path's change by the last commit that made it; a
        change that does not apply is logged, and stays in that commit."""
        by_origin: dict[str, list[FileStep]] = {}
        for step in raced:
            by_origin.setdefault(origins[step.path], []).append(step)
        for origin, steps in by_origin.items():
            try:
                self.one(steps, origin, answered=True)
            except MnoteError as exc:  # (what landed stays landed: nothing is raised)
                log.warning("%s (%s)", exc.message, exc.hint)
            except OSError as exc:  # the journal tells the next write what to finish
                self._landing.needs_recovery = True
                log.warning("putting %s back on a saved file failed: %s", origin, exc)

    def _blob_bytes(self, blob: str | None) -> bytes | None:
        return None if blob is None else self._reads.read_blob(blob)
