"""Paths whose index entry differs from HEAD (``git add`` by the user), without a full diff.

libgit2's ``index.diff_to_tree`` compares every entry (with its own parse of the index),
a cost in proportion to the workspace. The index's cache-tree extension names, for each folder whose
entries did not change since, the tree those entries amount to; a folder whose id there is
HEAD's holds nothing staged and is skipped whole, as Git does. Only the folders on the
paths written since (mnoted's index refreshes invalidate just those) are compared entry
by entry. An index without the extension is left to libgit2.
"""

from __future__ import annotations

import pygit2

from mnoted.store.indexstat import IndexStat, children

_TREE = pygit2.enums.ObjectType.TREE


def staged(repo: pygit2.Repository, head: pygit2.Tree | None, index: IndexStat) -> set[str]:
    """Every path where the index and ``head`` disagree (blob or mode, added or removed)."""
    if head is None:
        return set(index.entries)
    if not index.trees:
        git_index = repo.index
        git_index.read(False)
        out: set[str] = set()
        for delta in git_index.diff_to_tree(head).deltas:
            out.update((delta.old_file.path, delta.new_file.path))
        return out
    out = set()
    _compare(repo, index, "", head, out)
    return out


def _compare(
    repo: pygit2.Repository, index: IndexStat, folder: str, tree: pygit2.Tree, out: set[str]
) -> None:
    if index.trees.get(folder) == tree.id.raw:
        return
    files, folders = children(index, folder)
    prefix = f"{folder}/" if folder else ""
    head_folders: dict[str, pygit2.Tree] = {}
    for item in tree:
        name = item.name
        assert name is not None
        if item.type == _TREE:
            sub = repo[item.id]
            assert isinstance(sub, pygit2.Tree)
            head_folders[name] = sub
            continue
        entry = files.pop(name, None)
        if entry is None or entry[5] != item.id.raw or entry[0] != item.filemode:
            out.add(prefix + name)
    out.update(prefix + name for name in files)  # in the index only
    for name, sub in head_folders.items():
        if name in folders:
            _compare(repo, index, prefix + name, sub, out)
        else:
            out.update(prefix + name + "/" + p for p in _blobs(repo, sub))
    for name in folders - head_folders.keys():
        out.update(index.under(prefix + name))


def _blobs(repo: pygit2.Repository, tree: pygit2.Tree) -> list[str]:
    out: list[str] = []
    for item in tree:
        if item.type == _TREE:
            sub = repo[item.id]
            assert isinstance(sub, pygit2.Tree)
            out.extend(f"{item.name}/{p}" for p in _blobs(repo, sub))
        else:
            out.append(str(item.name))
    return out
