"""Block ids travel with the commits, as Git notes, so a block has one id on every device.

Block ids are not in the files: each device derives a version's ids from the version it
read before (``docs/core.md``). Two devices that saw different versions in between (one
skipped some, or made the merge) could derive different ids for the same version. So the
device that pushes a version publishes the ids it gave it: a note on the page's blob under
``refs/notes/mnote-blockids`` (one line per id, in document order), pushed atomically with
the branch. A device that lands fetched commits takes, for each page they change, the ids the
note gives, unless it already has ids for that exact content (its own, kept: an agent may
hold them). The notes of both sides are united in every notes commit (two parents), so the
notes ref only ever moves forward; where both sides noted one blob, ours stays.

All of this runs on the workspace's writer thread (it reads and writes the sidecar).
"""

from __future__ import annotations

from typing import Protocol

import pygit2

from mnoted.core.page import Page, parse_page
from mnoted.errors import MnoteError
from mnoted.store import DocRef, Workspace, indexer

NOTES_REF = "refs/notes/mnote-blockids"
MAX_NOTED = 500
"""Pages noted per call of :func:`publish` (one writer job): a first push of a large
workspace parses every page, so the sync calls it again until it notes nothing more, and
the writer serves other calls between the jobs. Every page version pushed is noted."""


class PageCache(Protocol):
    """The service's parsed pages and their ids (:class:`mnoted.service.pages.PageCache`),
    as the sync uses them: the service is a layer above, so it is passed in."""

    def at_blob(self, ws: Workspace, doc: DocRef, blob: str) -> Page | None: ...

    def remember_ids(self, ws: Workspace, doc: DocRef, blob: str, page: Page) -> None: ...


def remote_notes_ref(remote: str) -> str:
    """Where a remote's notes are fetched to (``git.fetch`` names the same)."""
    return f"refs/mnote/remote-notes/{remote}/mnote-blockids"


def _tree_of(repo: pygit2.Repository, ref: str) -> tuple[pygit2.Oid | None, pygit2.Tree | None]:
    found = repo.references.get(ref)
    if found is None:
        return None, None
    commit = repo[found.target]
    assert isinstance(commit, pygit2.Commit)
    return commit.id, commit.tree


def _changed_pages(repo: pygit2.Repository, old: str | None, new: str) -> list[tuple[str, str]]:
    """``(path, blob)`` of the pages ``new`` has that differ from ``old`` (None: all)."""
    new_c = repo[new]
    assert isinstance(new_c, pygit2.Commit)
    if old is None:
        diff = new_c.tree.diff_to_tree(swap=True)
    else:
        old_c = repo[old]
        assert isinstance(old_c, pygit2.Commit)
        diff = old_c.tree.diff_to_tree(new_c.tree)
    out = []
    for d in diff.deltas:
        path = d.new_file.path
        if d.status != pygit2.GIT_DELTA_DELETED and indexer.is_document(path):
            out.append((path, str(d.new_file.id)))
    return out


def adopt(
    ws: Workspace, pages: PageCache, repo: pygit2.Repository, old: str | None, remote: str
) -> int:
    """After landing fetched commits (HEAD moved from ``old``): give each changed page the ids
    the other side noted for its content, where this device knows none. Returns how many."""
    head = ws.head
    _, notes = _tree_of(repo, remote_notes_ref(remote))
    if head is None or notes is None:
        return 0
    adopted = 0
    for path, blob in _changed_pages(repo, old, head):
        if ws.block_ids.entry(blob) is not None or blob not in notes:
            continue
        note = repo[notes[blob].id]
        if not isinstance(note, pygit2.Blob):
            continue
        ids = note.data.decode("utf-8", "replace").split("\n") if note.data else []
        data = ws.read_blob(blob)
        if data is None:
            continue
        page = parse_page(data, path, ids=ids)
        if page.block_ids() != ids:
            continue  # (a note that does not fit the page: ids derived here instead)
        try:
            doc = ws.resolve(path)
        except MnoteError:
            continue
        pages.remember_ids(ws, doc, blob, page)
        adopted += 1
    return adopted


def publish(
    ws: Workspace, pages: PageCache, repo: pygit2.Repository, since: str | None, remote: str
) -> str | None:
    """Note the ids of the pages HEAD changed since ``since`` (the remote's head), united with
    the remote's notes; returns the notes commit to push (None: no notes at all)."""
    head = ws.head
    if head is None:
        return None
    local_id, local = _tree_of(repo, NOTES_REF)
    theirs_id, theirs = _tree_of(repo, remote_notes_ref(remote))
    entries: dict[str, tuple[pygit2.Oid, int]] = {}
    for tree in (theirs, local):  # (ours last: ours stays where both noted a blob)
        if tree is not None:
            entries.update({e.name: (e.id, e.filemode) for e in tree if e.name})
    added = 0
    base = since if since is not None and _has(repo, since) else None
    for path, blob in _changed_pages(repo, base, head):
        if blob in entries:
            continue
        if added >= MAX_NOTED:
            break  # (the rest: the next call, a writer job of its own)
        try:
            doc = ws.resolve(path)
        except MnoteError:
            continue
        page = pages.at_blob(ws, doc, blob)
        if page is None:
            continue
        note = repo.create_blob("\n".join(page.block_ids()).encode())
        entries[blob] = (note, pygit2.GIT_FILEMODE_BLOB)
        added += 1
    if not added:
        if theirs_id is None or _descends(repo, local_id, theirs_id):
            return str(local_id) if local_id is not None else None  # ours holds theirs
        if local_id is None or _descends(repo, theirs_id, local_id):  # theirs holds ours
            repo.references.create(NOTES_REF, theirs_id, force=True)
            return str(theirs_id)
    builder = repo.TreeBuilder()
    for name, (oid, mode) in sorted(entries.items()):
        builder.insert(name, oid, mode)
    parents = [p for p in (local_id, theirs_id) if p is not None]
    if local_id is not None and theirs_id is not None:
        if _descends(repo, local_id, theirs_id):
            parents = [local_id]
        elif _descends(repo, theirs_id, local_id):
            parents = [theirs_id]
    sig = pygit2.Signature("mnoted", indexer.COMMITTER_EMAIL)  # (made now: it takes the time)
    commit = repo.create_commit(None, sig, sig, "mnote block ids\n", builder.write(), parents)
    repo.references.create(NOTES_REF, commit, force=True)
    return str(commit)


def _has(repo: pygit2.Repository, commit: str) -> bool:
    try:
        return isinstance(repo[commit], pygit2.Commit)
    except (KeyError, ValueError):
        return False


def _descends(repo: pygit2.Repository, commit: pygit2.Oid | None, ancestor: pygit2.Oid) -> bool:
    return commit is not None and (commit == ancestor or repo.descendant_of(commit, ancestor))
