"""Build a commit's tree from its parent's by rewriting only the trees on changed paths.

Going through the index rewrites the whole index on every commit (5 ms at 10k files, 54 ms at
100k); a TreeBuilder per changed folder costs the same at any workspace size (DESIGN 10).
"""

from __future__ import annotations

from collections.abc import Mapping

import pygit2

from mnoted.errors import PathRejected

FILE = pygit2.GIT_FILEMODE_BLOB
EXECUTABLE = pygit2.GIT_FILEMODE_BLOB_EXECUTABLE
TREE = pygit2.GIT_FILEMODE_TREE

Entry = tuple[pygit2.Oid, int] | None
"""A new blob and file mode for a path, or None to remove the path."""


def object_at(tree: pygit2.Tree | None, path: str) -> pygit2.Object | None:
    """The entry (file, folder or submodule) at ``path`` in ``tree``, or None if none is."""
    if tree is None:
        return None
    try:
        return tree[path]
    except KeyError:
        return None


def entry_at(tree: pygit2.Tree | None, path: str) -> tuple[str, int] | None:
    """The (blob id, mode) at ``path`` in ``tree``, or None if no file is there."""
    obj = object_at(tree, path)
    if obj is None or obj.type != pygit2.GIT_OBJECT_BLOB:
        return None
    return str(obj.id), obj.filemode


def build(
    repo: pygit2.Repository,
    base: pygit2.Oid | None,
    changes: Mapping[str, Entry],
) -> pygit2.Oid:
    """The id of tree ``base`` with ``changes`` applied (paths are normalised, '/'-separated),
    its new trees written to ``repo``."""
    tree = repo[base] if base is not None else None
    assert tree is None or isinstance(tree, pygit2.Tree)
    return _build(repo, tree, changes)[0]


def _build(
    repo: pygit2.Repository, base: pygit2.Tree | None, changes: Mapping[str, Entry]
) -> tuple[pygit2.Oid, int]:
    """The new tree's id and its number of entries (an empty folder is dropped by its
    parent, without reading the tree just written back)."""
    split: dict[str, dict[str, Entry]] = {}
    for path, entry in changes.items():
        head, _, rest = path.partition("/")
        split.setdefault(head, {})[rest] = entry
    builder = repo.TreeBuilder(base) if base is not None else repo.TreeBuilder()
    for name, sub in split.items():
        existing = base[name] if base is not None and name in base else None
        if "" in sub:
            if len(sub) > 1:
                raise PathRejected(f"{name!r} is written both as a file and as a folder", path=name)
            entry = sub[""]
            if existing is not None and existing.type == pygit2.GIT_OBJECT_TREE:
                raise PathRejected(f"{name!r} is a folder, not a file", path=name)
            if entry is None:
                if existing is not None:
                    builder.remove(name)
            else:
                builder.insert(name, entry[0], entry[1])
            continue
        if existing is not None and existing.type != pygit2.GIT_OBJECT_TREE:
            raise PathRejected(f"{name!r} is a file, not a folder", path=name)
        subtree = repo[existing.id] if existing is not None else None
        assert subtree is None or isinstance(subtree, pygit2.Tree)
        new_id, size = _build(repo, subtree, sub)
        if size == 0:
            if existing is not None:
                builder.remove(name)
        else:
            builder.insert(name, new_id, TREE)
    return builder.write(), len(builder)
