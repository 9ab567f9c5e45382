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
from mnoted.store import message, treediff, trees
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
    record_command(side, cid, commit.message, commit.commit_time, kept_results or {})
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
        record_command(side, commit, message, time, {})
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


def record_command(
    side: Sidecar, cid: str, text: str, time: int, kept: dict[str, tuple[str, str]]
) -> None:
    """Record the command a commit's trailers name, with its idempotency key (its stored
    result from ``kept`` where the key's record there names this commit)."""
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
    replayed (and our own commits' paths are marked for the Git index refresh); when it is
    the second parent of ``head`` (a merge this device made of the remote's head into its
    own) :func:`advance_merge` indexes it in one step; otherwise (history rewritten, another
    branch checked out, fresh sidecar) everything is rebuilt.
    """
    old = side.get_meta("indexed_head")  # "" = indexed an unborn branch; None = nothing
    if old == (head or "") and side.get_meta("branch") == branch:
        return False
    if old and head is not None:  # the device's own merge, its head the second parent
        top = repo[head]
        if (
            isinstance(top, pygit2.Commit)
            and [str(p) for p in top.parent_ids[1:]] == [old]
            and advance_merge(repo, side, top, branch) is not None
        ):
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


MERGE_WALK = 10_000
"""Commits walked on each side of a merge to its base before :func:`advance_merge` gives
up (the caller rebuilds instead)."""


def advance_merge(
    repo: pygit2.Repository, side: Sidecar, merge: pygit2.Commit, branch: str
) -> list[str] | None:
    """Index ``merge`` on the device that made it, whose indexed head is the merge's second
    parent (its own commits) while the first parent is the remote's head (the mainline
    every device replays), in one step: the sidecar ends as a replay of the mainline would
    leave it, for the price of the commits on either side since the merge base.

    The documents whose id a mainline replay could give otherwise than this sidecar are those
    changed since the base on either side or by the merge: their ids are replayed along the
    incoming commits and the merge from the ids the base gave them, and the sidecar's rows
    set to them. The base's ids are the sidecar's rows before the commits made here since
    the base; where this device's newest merge on its first-parent line is not pushed yet
    (the remote moved on meanwhile), that merge's first parent is the base and its rows the
    mainline's at it, the base's for every page it has that the merge kept without a new
    pin. Returns the paths changed, or None (nothing done: the caller rebuilds) when a side
    does not reach the base along first parents within :data:`MERGE_WALK` commits, or that
    merge deleted a page the base has or pinned it anew.
    """
    if len(merge.parents) != 2:
        return None
    theirs, ours = merge.parents
    if side.get_meta("indexed_head") != str(ours.id) or side.get_meta("branch") != branch:
        return None
    base = repo.merge_base(theirs.id, ours.id)
    if base is None:
        return None
    incoming: list[pygit2.Commit] = []
    current: pygit2.Commit | None = theirs
    while current is not None and current.id != base:
        if len(incoming) >= MERGE_WALK:
            return None
        incoming.append(current)
        current = current.parents[0] if current.parents else None
    if current is None:
        return None  # (the base is not on the remote's first-parent history)
    above: set[str] = set()  # this device's commits on its line since the base or its merge
    top: pygit2.Commit | None = None
    current = ours
    while current is not None and current.id != base:
        if len(current.parents) == 2:
            top = current
            break
        if len(above) >= MERGE_WALK:
            return None
        above.add(str(current.id))
        current = current.parents[0] if current.parents else None
    if (top is None and current is None) or (top is not None and top.parent_ids[0] != base):
        return None
    walker = repo.walk(ours.id)
    walker.hide(base)
    local: set[str] = set()  # every commit indexed here since the base (their rows are last)
    for commit in walker:
        if len(local) >= MERGE_WALK:
            return None
        local.add(str(commit.id))
    base_tree = repo[base].peel(pygit2.Tree)
    at_base: dict[str, str | None] = {}

    renamed: dict[str, str] | None = None  # base path -> its path at that merge

    def base_id(path: str) -> str | None:
        nonlocal renamed
        if path not in at_base:
            doc = None
            was = trees.blob_object_at(base_tree, path)
            if was is not None:
                now = path
                if top is not None:  # (the merge's rows hold the ids it left)
                    if trees.object_at(top.tree, path) is None:
                        if renamed is None:
                            deltas = treediff.diff(repo, base_tree, top.tree)
                            renamed = {
                                d.old_path: d.new_path
                                for d in deltas
                                if d.status == "R" and d.old_path and d.new_path
                            }
                        now = renamed.get(path, "")
                    kept = trees.blob_object_at(top.tree, now) if now else None
                    if kept is None:
                        raise _GiveUp(path)
                    if kept.id != was.id:
                        pin = pinned_id(kept.data)
                        if pin is not None and pin != pinned_id(was.data):
                            raise _GiveUp(path)
                doc = side.doc_before(now, above)
            at_base[path] = doc
        return at_base[path]

    ids: dict[str, str | None] = {}  # path -> id as the mainline replay gives it

    def replayed(cid: str, deltas: Sequence[treediff.Delta], named: Mapping[str, str]) -> None:
        for d in deltas:
            if d.status == "D":
                assert d.old_path is not None
                ids[d.old_path] = None
                continue
            assert d.new_path is not None and d.new_id is not None
            source = d.old_path if d.status == "R" and d.old_path else d.new_path
            carried = ids[source] if source in ids else base_id(source)
            if d.status == "R":
                ids[source] = None
            doc = None
            if is_document(d.new_path):
                data = _blob_data(repo, d.new_id, d.new_path, cid)
                doc = pinned_id(data) or carried or named.get(d.new_path)
                doc = doc or generated_id(cid, d.new_path)
            ids[d.new_path] = doc

    mid = str(merge.id)
    mine = treediff.diff(repo, ours.tree, merge.tree)
    try:
        for commit in reversed(incoming):
            parent = commit.parents[0].tree if commit.parents else None
            deltas = treediff.diff(repo, parent, commit.tree)
            replayed(str(commit.id), deltas, named_ids(commit.message))
        replayed(mid, treediff.diff(repo, theirs.tree, merge.tree), named_ids(merge.message))
        candidates = set(ids) | side.paths_since(local)  # (changed on either side, or by it)
        candidates |= {d.new_path for d in mine if d.new_path and d.status != "D"}
        target = {
            path: ids[path] if path in ids else base_id(path)
            for path in candidates
            if is_document(path) and trees.object_at(merge.tree, path) is not None
        }
    except _GiveUp:
        return None
    side.begin()
    try:
        changed: list[str] = []
        written: set[str] = set()
        for d in mine:
            if d.status in ("D", "R"):
                assert d.old_path is not None
                row = side.file(d.old_path)
                side.drop_file(d.old_path)
                changed.append(d.old_path)
                if d.status == "D":
                    side.add_change(mid, row[2] if row else None, d.old_path, None, "D")
                    continue
            assert d.new_path is not None and d.new_id is not None
            doc = target.get(d.new_path)
            side.put_file(d.new_path, d.new_id, mid, doc)
            side.add_change(mid, doc, d.new_path, d.old_path if d.status == "R" else None, d.status)
            changed.append(d.new_path)
            written.add(d.new_path)
        for path in sorted(set(target) - written):
            row = side.file(path)
            doc = target[path]
            if row is not None and doc is not None and doc != row[2]:  # (its id differed here)
                side.put_file(path, row[0], row[1], doc)
                side.add_change(mid, doc, path, None, "M")
        record_command(side, mid, merge.message, merge.commit_time, {})
        if merge.committer.email == COMMITTER_EMAIL:  # (as a replay marks its own commits)
            side.mark_index_pending(changed)
        side.set_meta("indexed_head", mid)
        side.commit()
    except BaseException:
        side.rollback()
        raise
    return changed


class _GiveUp(Exception):
    """:func:`advance_merge` cannot vouch for an id: the caller rebuilds."""
