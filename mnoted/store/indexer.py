"""Replay commits into the sidecar: document ids, revisions, history, commands, idempotency.

The registry is a pure function of the branch's first-parent history: each commit is
diffed against its first parent with rename detection (:mod:`mnoted.store.treediff`), a
document keeps its id across a rename, a frontmatter ``id`` pins one, and a new document's
id is derived from the commit and path that created it. The same code runs after every
commit the store makes, when HEAD was moved by someone else, and in a full rebuild, so a
rebuilt sidecar equals the incremental one; for its own commits the store hands it the
changes it staged (:func:`record_own`) instead of the trees to diff.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import pygit2

from mnoted.core.frontmatter import document_id
from mnoted.errors import WorkspaceInvalid
from mnoted.store import message, treediff
from mnoted.store.model import CommandRecord, scoped_key
from mnoted.store.sidecar import Sidecar

COMMITTER_EMAIL = "mnoted@mnote.local"
DOCUMENT_SUFFIXES = (".md", ".markdown")


def is_document(path: str) -> bool:
    """Whether ``path`` names a Markdown document (which gets a documentId)."""
    return path.lower().endswith(DOCUMENT_SUFFIXES)


def generated_id(commit: str, path: str) -> str:
    """The id of a document first seen at ``path`` in ``commit`` that pins none itself."""
    return "doc_" + hashlib.sha256(f"{commit}\0{path}".encode()).hexdigest()[:20]


DOCUMENT_ID_TRAILER = "Mnote-Document-Id"


def named_ids(text: str) -> dict[str, str]:
    """``path -> documentId`` from a message's ``Mnote-Document-Id: <id> <path>`` trailers."""
    if DOCUMENT_ID_TRAILER not in text:
        return {}
    out: dict[str, str] = {}
    for line in text.strip().rsplit("\n\n", 1)[-1].splitlines():
        key, _, value = line.partition(": ")
        if key == DOCUMENT_ID_TRAILER:
            doc, _, path = value.strip().partition(" ")
            if doc and path:
                out[path] = doc
    return out


def pinned_id(data: bytes) -> str | None:
    """The frontmatter ``id`` of a document's bytes, if it pins one."""
    if not data.startswith(b"---"):
        return None
    try:
        return document_id(data)
    except Exception:  # a malformed page must never break indexing
        return None


def replay(
    repo: pygit2.Repository,
    side: Sidecar,
    commit: pygit2.Commit,
    kept_results: dict[str, tuple[str, str]] | None = None,
    *,
    mark_pending: bool = False,
    fresh: Mapping[str, bytes] | None = None,
    paths: Sequence[str] | None = None,
) -> list[str]:
    """Record one commit (diffed against its first parent); return the paths it changed.

    ``fresh`` holds the bytes of blobs just written (no need to read them back); ``paths``
    the only paths the commit may change, when the caller made it (``treediff.diff``).
    """
    cid = str(commit.id)
    parent = commit.parents[0].tree if commit.parents else None
    deltas = treediff.diff(repo, parent, commit.tree, paths)
    changed = _record_deltas(repo, side, cid, deltas, fresh, named_ids(commit.message))
    _record_command(side, cid, commit.message, commit.commit_time, kept_results or {})
    if mark_pending and commit.committer.email == COMMITTER_EMAIL:
        side.mark_index_pending(changed)
    return changed


def record_own(
    repo: pygit2.Repository,
    side: Sidecar,
    commit: str,
    parent: str | None,
    branch: str,
    deltas: Sequence[treediff.Delta],
    message: str,
    time: int,
    fresh: Mapping[str, bytes] | None = None,
) -> bool:
    """What :func:`advance` records for a commit the store just made on the indexed head,
    from what the store knows of it (``treediff.own_deltas``, its message and time) instead
    of reading it back and diffing its trees; False (nothing done) if the sidecar is not
    at its parent."""
    if side.get_meta("indexed_head") != (parent or "") or side.get_meta("branch") != branch:
        return False
    side.begin()
    try:
        changed = _record_deltas(repo, side, commit, deltas, fresh)
        _record_command(side, commit, message, time, {})
        side.mark_index_pending(changed)
        side.set_meta("indexed_head", commit)
        side.commit()
    except BaseException:
        side.rollback()
        raise
    return True


def _record_deltas(
    repo: pygit2.Repository,
    side: Sidecar,
    cid: str,
    deltas: Sequence[treediff.Delta],
    fresh: Mapping[str, bytes] | None,
    named: Mapping[str, str] | None = None,
) -> list[str]:
    """Files, document ids and change log of one commit's deltas; the paths they changed.

    ``named`` (a merge's ``Mnote-Document-Id`` trailers) gives a document the merged side
    added the id that side's history gave it, so every device has one id for it."""
    changed: list[str] = []
    for delta in deltas:
        if delta.status == "D":
            assert delta.old_path is not None
            row = side.file(delta.old_path)
            side.drop_file(delta.old_path)
            side.add_change(cid, row[2] if row else None, delta.old_path, None, "D")
            changed.append(delta.old_path)
            continue
        assert delta.new_path is not None and delta.new_id is not None
        if delta.status == "R":
            assert delta.old_path is not None
            row = side.file(delta.old_path)
            side.drop_file(delta.old_path)
            changed.append(delta.old_path)
        else:
            row = side.file(delta.new_path)
        carried = row[2] if row else None
        doc: str | None = None
        if is_document(delta.new_path):
            data = fresh.get(str(delta.new_id)) if fresh else None
            if data is None:
                data = _blob_data(repo, delta.new_id, delta.new_path, cid)
            doc = (
                pinned_id(data)
                or carried
                or (named or {}).get(delta.new_path)
                or generated_id(cid, delta.new_path)
            )
        side.put_file(delta.new_path, delta.new_id, cid, doc)
        old_path = delta.old_path if delta.status == "R" else None
        side.add_change(cid, doc, delta.new_path, old_path, delta.status)
        changed.append(delta.new_path)
    return changed


def _blob_data(repo: pygit2.Repository, oid: str | pygit2.Oid, path: str, cid: str) -> bytes:
    try:
        blob = repo[oid]
    except KeyError:
        raise WorkspaceInvalid(
            f"the repository is missing {path} as commit {cid[:10]} has it (blob {oid})",
            hint="Run `git fsck` to see what else is missing, and fetch it again from a "
            "clone or remote that has it (`git fetch`).",
        ) from None
    assert isinstance(blob, pygit2.Blob)
    return blob.data


def _record_command(
    side: Sidecar, cid: str, text: str, time: int, kept: dict[str, tuple[str, str]]
) -> None:
    trailers = message.parse_trailers(text)
    command_id = trailers.get(message.COMMAND_ID)
    if not command_id:
        return
    key = trailers.get(message.IDEMPOTENCY_KEY)
    side.add_command(
        CommandRecord(
            commit=cid,
            command_id=command_id,
            subject=text.split("\n", 1)[0],
            actor=trailers.get(message.ACTOR),
            trace_id=trailers.get(message.TRACE_ID),
            idempotency_key=key,
            time=time,
            trailers=trailers,
        )
    )
    if key:
        scoped = scoped_key(message.key_owner(trailers), key)
        result = kept.get(scoped)
        side.put_idempotency(
            scoped,
            trailers.get(message.REQUEST_HASH),
            cid,
            command_id,
            result[1] if result is not None and result[0] == cid else None,
        )


def advance(
    repo: pygit2.Repository,
    side: Sidecar,
    head: str | None,
    branch: str,
    fresh: Mapping[str, bytes] | None = None,
    written: Mapping[str, Sequence[str]] | None = None,
) -> bool:
    """Bring the sidecar from its indexed commit to ``head``; return True if it rebuilt.

    ``written`` maps commits the caller made to the paths each wrote (a shortcut for the diff).

    When the indexed commit is a first-parent ancestor of ``head`` only the new commits are
    replayed (and our own commits' paths are marked for the Git index refresh); otherwise
    (history rewritten, another branch checked out, fresh sidecar) everything is rebuilt.
    """
    old = side.get_meta("indexed_head")  # "" = indexed an unborn branch; None = nothing
    if old == (head or "") and side.get_meta("branch") == branch:
        return False
    chain: list[pygit2.Oid] = []
    found = old == ""
    if head is not None:
        current: pygit2.Commit | None = repo[head]  # type: ignore[assignment]
        while current is not None:
            if str(current.id) == old:
                found = True
                break
            chain.append(current.id)
            current = current.parents[0] if current.parents else None
    side.begin()
    try:
        kept: dict[str, tuple[str, str]] = {}
        if not found:
            kept = side.clear_derived()
        for oid in reversed(chain):
            commit = repo[oid]
            assert isinstance(commit, pygit2.Commit)
            paths = written.get(str(oid)) if written and found else None
            replay(repo, side, commit, kept, mark_pending=found, fresh=fresh, paths=paths)
        side.set_meta("indexed_head", head or "")
        side.set_meta("branch", branch)
        side.commit()
    except BaseException:
        side.rollback()
        raise
    return not found


def rebuild(repo: pygit2.Repository, side: Sidecar, head: str | None, branch: str) -> None:
    """Recompute every history-derived table from the branch's first-parent history."""
    side.set_meta("indexed_head", None)
    advance(repo, side, head, branch)
