"""Build a commit's tree from its parent's by rewriting only the trees on changed paths.

Going through the index rewrites the whole index on every commit, a cost in proportion to the
workspace; a TreeBuilder per changed folder costs the same at any workspace size (DESIGN 10).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Mapping

import pygit2

from mnoted.errors import PathRejected

FILE = pygit2.GIT_FILEMODE_BLOB
EXECUTABLE = pygit2.GIT_FILEMODE_BLOB_EXECUTABLE
LINK = pygit2.GIT_FILEMODE_LINK
TREE = pygit2.GIT_FILEMODE_TREE

Entry = tuple[pygit2.Oid, int] | None
"""A new blob and file mode for a path, or None to remove the path."""


def pinned(text: str) -> str:
    """``text`` as the one string object pygit2 is given for it.

    pygit2 (1.21 and earlier) keeps a reference to every string it takes as a path or a
    name (``tree[path]``, ``path in tree``, ``TreeBuilder.get`` and ``remove``,
    ``Odb(path)``: its ``pgit_borrow_fsdefault`` never releases what ``PyOS_FSPath``
    returned), so each new string object handed to it lived for ever: some 60 bytes a
    lookup, a few a command, a daemon's heap growing by ~1 MB every thousand writes.
    Interned, the references it keeps all go to one object per distinct text.
    """
    return sys.intern(text)


def object_at(tree: pygit2.Tree | None, path: str) -> pygit2.Object | None:
    """The entry (file, folder or submodule) at ``path`` in ``tree``, or None if none is."""
    if tree is None:
        return None
    try:
        return tree[pinned(path)]
    except KeyError:
        return None


def blob_object_at(tree: pygit2.Tree | None, path: str) -> pygit2.Blob | None:
    """The file at ``path`` in ``tree`` as a blob, or None if no file is there."""
    obj = object_at(tree, path)
    return obj if isinstance(obj, pygit2.Blob) else None


def entry_at(tree: pygit2.Tree | None, path: str) -> tuple[str, int] | None:
    """The (blob id, mode) at ``path`` in ``tree``, or None if no file is there."""
    obj = object_at(tree, path)
    if obj is None or obj.type != pygit2.GIT_OBJECT_BLOB:
        return None
    return str(obj.id), obj.filemode


class Builders:
    """Tree builders kept once written, by the id of the tree each now holds, at most
    ``limit`` of them (the least recently used go first).

    The next commit that changes a folder starts from the builder that wrote the folder's
    tree instead of reading the tree back (inside a group it is a pending object, read
    through Python) and copying it into a new builder: a third of a command's tree work.
    A builder holds exactly the tree its id names (a tree is its content), so one kept
    from a commit that never landed is still right for any tree with that id. Kept for one
    repository only: a builder writes to the repository that made it.
    """

    def __init__(self, limit: int = 64) -> None:
        self._limit = limit
        self._kept: OrderedDict[pygit2.Oid, pygit2.TreeBuilder] = OrderedDict()

    def take(self, tree_id: pygit2.Oid) -> pygit2.TreeBuilder | None:
        """The builder holding ``tree_id``, no longer kept (the caller changes it)."""
        return self._kept.pop(tree_id, None)

    def keep(self, tree_id: pygit2.Oid, builder: pygit2.TreeBuilder) -> None:
        self._kept[tree_id] = builder
        if len(self._kept) > self._limit:
            self._kept.popitem(last=False)


def build(
    repo: pygit2.Repository,
    base: pygit2.Oid | None,
    changes: Mapping[str, Entry],
    builders: Builders | None = None,
) -> pygit2.Oid:
    """The id of tree ``base`` with ``changes`` applied (paths are normalised, '/'-separated),
    its new trees written to ``repo`` (starting from ``builders``' when they hold them)."""
    return _build(repo, base, changes, builders or Builders(0))[0]


def _build(
    repo: pygit2.Repository,
    base: pygit2.Oid | None,
    changes: Mapping[str, Entry],
    builders: Builders,
) -> tuple[pygit2.Oid, int]:
    """The new tree's id and its number of entries (an empty folder is dropped by its
    parent, without reading the tree just written back)."""
    split: dict[str, dict[str, Entry]] = {}
    for path, entry in changes.items():
        head, _, rest = path.partition("/")
        split.setdefault(head, {})[rest] = entry
    builder = builders.take(base) if base is not None else None
    if builder is None:
        builder = repo.TreeBuilder(base) if base is not None else repo.TreeBuilder()
    for name, sub in split.items():
        name = pinned(name)
        existing = builder.get(name)  # as in ``base``: only this name's entry changes below
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
        new_id, size = _build(repo, existing.id if existing is not None else None, sub, builders)
        if size == 0:
            if existing is not None:
                builder.remove(name)
        else:
            builder.insert(name, new_id, TREE)
    tree_id = builder.write()
    builders.keep(tree_id, builder)
    return tree_id, len(builder)
