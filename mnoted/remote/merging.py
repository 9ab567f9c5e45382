"""The merge of a fetched head into HEAD, as one commit with two parents (no file touched).

The tree is merged by libgit2 (``merge_trees``: renames found, each path three-way); then
every Markdown page changed on both sides is merged again on its blocks and frontmatter keys
by :func:`mnoted.core.merge.merge_page`, so a page never holds conflict markers and a block
changed on both sides keeps ours in the file and theirs as a held version. Other files that
conflict are kept side by side: ours at the path, theirs as ``name (conflict from HOST).ext``.
An edit against a delete keeps the edit; a rename on one side and an edit on the other
gives the edited content at the new path.

The commit's trailers say what was merged and what was held back, and give each document
the merged side added the id that side's own history gave it (``Mnote-Document-Id``), so
both devices index the merge to the same ids (``docs/remote.md``).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field

import pygit2

from mnoted.core.merge import Held, merge_page
from mnoted.store import indexer, treediff, trees
from mnoted.store.indexer import is_document
from mnoted.store.message import format_message
from mnoted.store.model import CommandMeta

MERGE_COMMAND = "remote.merge"
MERGE_ACTOR = "sync"
COMMITTER = pygit2.Signature("mnoted", indexer.COMMITTER_EMAIL)


@dataclass
class Plan:
    """What to land: ``fast-forward`` to the fetched commit, or a ``merge`` commit."""

    kind: str  # "up-to-date" | "fast-forward" | "merge"
    commit: str | None
    merged: list[str] = field(default_factory=list)  # pages merged on their blocks
    held: list[tuple[str, Held]] = field(default_factory=list)  # (path, held version)
    copies: list[str] = field(default_factory=list)  # side-by-side copies of other files


def conflict_name(path: str, host: str, taken: set[str]) -> str:
    """``notes/a (conflict from HOST).png``, numbered if that name is taken."""
    folder, name = posixpath.split(path)
    stem, ext = os.path.splitext(name)
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in host) or "remote"
    for n in range(1, 1000):
        suffix = "" if n == 1 else f" {n}"
        candidate = posixpath.join(folder, f"{stem} (conflict from {safe}{suffix}){ext}")
        if candidate not in taken:
            return candidate
    raise RuntimeError("no free name for a conflict copy")


def plan_merge(
    repo: pygit2.Repository, ours: str | None, theirs: str, *, host: str, source: str
) -> Plan:
    """How ``theirs`` comes into ``ours`` (HEAD): nothing, a fast-forward, or a merge commit
    written to the repository (objects only; no ref moves)."""
    t = pygit2.Oid(hex=theirs)
    if ours is None:
        return Plan("fast-forward", theirs)
    o = pygit2.Oid(hex=ours)
    if o == t or repo.descendant_of(o, t):
        return Plan("up-to-date", None)
    if repo.descendant_of(t, o):
        return Plan("fast-forward", theirs)
    ours_c, theirs_c = repo[o], repo[t]
    assert isinstance(ours_c, pygit2.Commit) and isinstance(theirs_c, pygit2.Commit)
    base_id = repo.merge_base(o, t)
    base_tree = repo[base_id].peel(pygit2.Tree) if base_id is not None else _empty_tree(repo)
    index = repo.merge_trees(base_tree, ours_c.tree, theirs_c.tree)
    plan = Plan("merge", None)
    their_host = _host_of(theirs_c, base_id) or source
    taken = {e.path for e in index}
    conflicts = list(index.conflicts) if index.conflicts is not None else []
    for anc, mine, other in conflicts:
        _resolve(repo, index, anc, mine, other, plan, their_host, taken)
    _remerge_pages(repo, index, base_tree, ours_c.tree, theirs_c.tree, plan)
    tree = index.write_tree(repo)
    names = _carried_ids(repo, theirs_c.tree, repo[tree].peel(pygit2.Tree), ours_c)
    extra: list[tuple[str, str]] = [("Mnote-Merged", f"{source} {theirs}")]
    extra += [("Mnote-Merged-Page", p) for p in plan.merged]
    extra += [
        ("Mnote-Held", f"{p} ({h.where}{':' + h.key if h.key else ''})") for p, h in plan.held
    ]
    extra += [("Mnote-Conflict-Copy", p) for p in plan.copies]
    extra += [("Mnote-Host", host)]
    extra += [(indexer.DOCUMENT_ID_TRAILER, f"{doc} {path}") for path, doc in sorted(names.items())]
    meta = CommandMeta(MERGE_COMMAND, actor=MERGE_ACTOR, extra=tuple(extra)).with_command_id()
    text = format_message(meta, [f"{source}"])
    sig = pygit2.Signature(COMMITTER.name, COMMITTER.email)
    commit = repo.create_commit(None, sig, sig, text, tree, [t, o])
    plan.commit = str(commit)
    return plan


def _host_of(head: pygit2.Commit, stop: pygit2.Oid | None, limit: int = 200) -> str | None:
    """The device that made ``head``'s side: the ``Mnote-Host`` of its latest merge since the
    merge base, if it made one (None: the caller names the remote instead)."""
    commit: pygit2.Commit | None = head
    for _ in range(limit):
        if commit is None or commit.id == stop:
            return None
        for line in commit.message.splitlines():
            if line.startswith("Mnote-Host: "):
                return line.partition(": ")[2].strip() or None
        commit = commit.parents[0] if commit.parents else None
    return None


def _empty_tree(repo: pygit2.Repository) -> pygit2.Tree:
    tree = repo[repo.TreeBuilder().write()]
    assert isinstance(tree, pygit2.Tree)
    return tree


def _data(repo: pygit2.Repository, entry: pygit2.IndexEntry | None) -> bytes | None:
    if entry is None:
        return None
    blob = repo[entry.id]
    assert isinstance(blob, pygit2.Blob)
    return blob.data


def _resolve(
    repo: pygit2.Repository,
    index: pygit2.Index,
    anc: pygit2.IndexEntry | None,
    mine: pygit2.IndexEntry | None,
    other: pygit2.IndexEntry | None,
    plan: Plan,
    host: str,
    taken: set[str],
) -> None:
    """One path libgit2 could not merge: resolved so that no side's version is lost."""
    path = str(next(e.path for e in (mine, other, anc) if e is not None))
    del index.conflicts[path]
    for e in (anc, mine, other):  # (a rename leaves the conflict under each of its paths)
        if e is not None and e.path != path and index.conflicts is not None:
            with contextlib.suppress(KeyError):
                del index.conflicts[e.path]
    if mine is None or other is None:  # deleted on one side, edited on the other: the edit
        kept = mine or other
        assert kept is not None
        index.add(pygit2.IndexEntry(kept.path, kept.id, kept.mode))
        return
    if mine.path != other.path:  # renamed on one side: the content goes to the new name
        renamed = mine if anc is not None and mine.path != anc.path else other
        target = str(renamed.path)
    else:
        target = str(mine.path)
    if is_document(target) and is_document(str(mine.path)) and is_document(str(other.path)):
        base = _data(repo, anc)
        result = merge_page(base, _data(repo, mine) or b"", _data(repo, other) or b"")
        blob = repo.create_blob(result.data)
        index.add(pygit2.IndexEntry(target, blob, mine.mode))
        plan.merged.append(target)
        plan.held.extend((target, h) for h in result.held)
        for e in (mine, other):
            if e.path != target:
                with contextlib.suppress(OSError, KeyError):
                    index.remove(e.path)
        return
    index.add(pygit2.IndexEntry(target, mine.id, mine.mode))
    if other.id != mine.id:
        copy = conflict_name(target, host, taken)
        taken.add(copy)
        index.add(pygit2.IndexEntry(copy, other.id, other.mode))
        plan.copies.append(copy)


def _remerge_pages(
    repo: pygit2.Repository,
    index: pygit2.Index,
    base: pygit2.Tree,
    ours: pygit2.Tree,
    theirs: pygit2.Tree,
    plan: Plan,
) -> None:
    """Pages libgit2 merged line by line are merged again on their blocks: two edits to one
    paragraph keep ours and hold theirs, where a line merge would have mixed them."""
    ours_from = _renamed_from(repo, base, ours)
    theirs_from = _renamed_from(repo, base, theirs)
    done = set(plan.merged)
    for entry in list(index):
        path = entry.path
        if path in done or not is_document(path):
            continue
        base_path = ours_from.get(path) or theirs_from.get(path) or path
        o = trees.blob_object_at(ours, _path_in(ours_from, base_path, path))
        t = trees.blob_object_at(theirs, _path_in(theirs_from, base_path, path))
        if o is None or t is None or str(entry.id) in (str(o.id), str(t.id)):
            continue
        b = trees.blob_object_at(base, base_path)
        result = merge_page(b.data if b is not None else None, o.data, t.data)
        blob = repo.create_blob(result.data)
        index.add(pygit2.IndexEntry(path, blob, entry.mode))
        plan.merged.append(path)
        plan.held.extend((path, h) for h in result.held)


def _renamed_from(repo: pygit2.Repository, base: pygit2.Tree, tree: pygit2.Tree) -> dict[str, str]:
    """New path -> base path of the renames between ``base`` and ``tree``."""
    return {
        d.new_path: d.old_path
        for d in treediff.diff(repo, base, tree)
        if d.status == "R" and d.new_path and d.old_path
    }


def _path_in(renamed_from: dict[str, str], base_path: str, path: str) -> str:
    for new, old in renamed_from.items():
        if old == base_path:
            return new
    return path if path not in renamed_from or renamed_from[path] == base_path else base_path


def _carried_ids(
    repo: pygit2.Repository, first: pygit2.Tree, merged: pygit2.Tree, second: pygit2.Commit
) -> dict[str, str]:
    """For each page the merge adds to its first parent (the remote's head), the id the
    second's (this device's) first-parent history gives it, which this device has for it:
    a replay of the mainline keeps them."""
    added = [
        d.new_path
        for d in treediff.diff(repo, first, merged)
        if d.status == "A" and d.new_path and is_document(d.new_path)
    ]
    return history_ids(repo, second, added) if added else {}


def history_ids(
    repo: pygit2.Repository,
    head: pygit2.Commit,
    paths: Sequence[str],
    limit: int = 1_000_000,
) -> dict[str, str]:
    """The ids ``head``'s first-parent history gives the documents at ``paths`` (as a replay
    of that history would): a merge's trailer naming one, else the commit that added it,
    following renames back. One walk for all of them; a frontmatter ``id`` is the caller's."""
    wanted = {p: p for p in paths}  # the path looked for now -> the path asked for
    out: dict[str, str] = {}
    commit: pygit2.Commit | None = head
    for _ in range(limit):
        if commit is None or not wanted:
            break
        named = indexer.named_ids(commit.message)
        parent = commit.parents[0] if commit.parents else None
        for now, asked in list(wanted.items()):
            if now in named:
                out[asked] = named[now]
                del wanted[now]
                continue
            if parent is not None and trees.object_at(parent.tree, now) is not None:
                continue
            del wanted[now]
            renamed = [
                d.old_path
                for d in treediff.diff(repo, parent.tree if parent else None, commit.tree)
                if d.status == "R" and d.new_path == now and d.old_path
            ]
            if renamed and renamed[0] not in wanted:
                wanted[renamed[0]] = asked
            else:
                out[asked] = indexer.generated_id(str(commit.id), now)
        commit = parent
    return out
