"""Tree-to-tree diff that skips identical subtrees, with rename detection.

libgit2's ``diff_to_tree`` walks every entry of both trees, so replaying one commit would cost
as much as the workspace is big. Here subtrees with the same id are skipped, making a commit's
diff as cheap as its change. Renames are found like Git finds them: first exact (same blob),
then by content similarity of at least 50% ("bytes of lines the new file shares with the old"
over the larger size), pairing the best scores first; ties are broken by path so the result is
deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pygit2

from mnoted.store import trees

RENAME_THRESHOLD = 0.5
RENAME_LIMIT = 1000
"""Inexact detection is skipped when deleted × added pairs exceed this squared (as Git)."""

_TREE = pygit2.GIT_OBJECT_TREE
_REGULAR = (trees.FILE, trees.EXECUTABLE)


@dataclass(frozen=True)
class Delta:
    """One changed path: status ``A``, ``D``, ``M``, ``R`` or ``T`` (file type changed)."""

    status: str
    old_path: str | None
    new_path: str | None
    old_id: str | None
    new_id: str | None
    new_mode: int | None


def diff(
    repo: pygit2.Repository,
    old: pygit2.Tree | None,
    new: pygit2.Tree,
    paths: Iterable[str] | None = None,
) -> list[Delta]:
    """The changes from ``old`` (None = empty) to ``new``, renames paired.

    ``paths``, when known (the store's own commits), are the only file paths that may
    differ: they are looked up instead of walking the folders on the way (the root folder
    of 100,000 notes has hundreds of entries, compared one by one in Python).
    """
    walked = _at_paths(old, new, paths) if paths is not None else None
    if walked is None:
        walked = list(_walk(repo, old, new, ""))
    added: list[tuple[str, str, int]] = []
    deleted: list[tuple[str, str]] = []
    out: list[Delta] = []
    for status, path, old_entry, new_entry in walked:
        if status == "A":
            assert new_entry is not None
            added.append((path, str(new_entry.id), new_entry.filemode))
        elif status == "D":
            assert old_entry is not None
            deleted.append((path, str(old_entry.id)))
        else:
            assert old_entry is not None and new_entry is not None
            out.append(
                Delta(status, path, path, str(old_entry.id), str(new_entry.id), new_entry.filemode)
            )
    renames = _pair_renames(repo, deleted, added)
    paired_old = {o for o, _ in renames}
    paired_new = {n for _, n in renames}
    added_by_path = {p: (i, m) for p, i, m in added}
    deleted_by_path = dict(deleted)
    for old_path, new_path in renames:
        new_id, mode = added_by_path[new_path]
        out.append(Delta("R", old_path, new_path, deleted_by_path[old_path], new_id, mode))
    out.extend(Delta("D", p, None, i, None, None) for p, i in deleted if p not in paired_old)
    out.extend(Delta("A", None, p, None, i, m) for p, i, m in added if p not in paired_new)
    return sorted(out, key=lambda d: (d.new_path or d.old_path or "", d.status))


def changed_files(
    repo: pygit2.Repository, old: pygit2.Tree | None, new: pygit2.Tree
) -> list[tuple[str, str | None]]:
    """Every path whose regular file differs from ``old`` (None = empty) to ``new``, with
    its blob id in ``new`` (None: no regular file there now; a symbolic link is none).

    Renames are not paired (a move is its old path gone and its new one added), so no
    blob is read: the cost is the walk of the folders that differ (from the empty tree,
    a plain walk of ``new``, half the cost of comparing each folder with nothing).
    """
    if old is None:
        return list(_files(repo, new, ""))
    out: list[tuple[str, str | None]] = []
    for _status, path, a, b in _walk(repo, old, new, ""):
        before, after = _regular(a), _regular(b)
        if before != after:
            out.append((path, after))
    return out


def _files(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str) -> Iterator[tuple[str, str]]:
    for entry in tree:
        path = prefix + str(entry.name)
        if entry.type == _TREE:
            yield from _files(repo, repo[entry.id].peel(pygit2.Tree), path + "/")
        elif entry.filemode in _REGULAR:
            yield path, str(entry.id)


def _regular(entry: pygit2.Object | None) -> str | None:
    return None if entry is None or entry.filemode not in _REGULAR else str(entry.id)


class CommitReader:
    """:class:`~mnoted.store.api.CommitReader` on a pygit2 repository: for the one thread
    that uses it (``owned``: it frees the repository when closed)."""

    def __init__(self, repo: pygit2.Repository, *, owned: bool = False) -> None:
        self._repo = repo
        self._owned = owned

    def files_changed(self, old: str | None, new: str) -> list[tuple[str, str | None]]:
        """:func:`changed_files` between two commits; KeyError if the repository lacks
        one of them or an object on the way."""
        try:
            before = None if old is None else self._repo[old].peel(pygit2.Tree)
            return changed_files(self._repo, before, self._repo[new].peel(pygit2.Tree))
        except (ValueError, pygit2.GitError) as exc:
            raise KeyError(f"{old}..{new}: {exc}") from exc

    def read_blob(self, blob_id: str) -> bytes | None:
        """The bytes of a blob, or None if the repository holds none by that id."""
        try:
            obj = self._repo[blob_id]
        except (KeyError, ValueError):
            return None
        return bytes(obj.data) if isinstance(obj, pygit2.Blob) else None

    def close(self) -> None:
        if self._owned:
            self._repo.free()


def own_deltas(
    changes: Iterable[tuple[str, tuple[str, int] | None, tuple[str, int] | None]],
) -> list[Delta] | None:
    """What :func:`diff` finds for a commit that changed only ``changes`` (path, old and new
    ``(blob id, mode)`` of a file, None where none is), without reading the trees; None when
    it adds and removes files, whose renames only :func:`diff` pairs.

    The store knows these for the commits it makes: its sidecar records them from here.
    """
    out: list[Delta] = []
    for path, old, new in sorted(changes):
        status = _status(old, new)
        if status == "A":
            assert new is not None
            out.append(Delta("A", None, path, None, new[0], new[1]))
        elif status == "D":
            assert old is not None
            out.append(Delta("D", path, None, old[0], None, None))
        elif status is not None:
            assert old is not None and new is not None
            out.append(Delta(status, path, path, old[0], new[0], new[1]))
    statuses = {d.status for d in out}
    return None if "A" in statuses and "D" in statuses else out


def _status(old: tuple[object, int] | None, new: tuple[object, int] | None) -> str | None:
    """A file's status from its old and new (id, mode); None if it did not change."""
    if old is None:
        return None if new is None else "A"
    if new is None:
        return "D"
    if old == new:
        return None
    return "T" if _is_link(old[1]) != _is_link(new[1]) else "M"


def _at_paths(
    old: pygit2.Tree | None, new: pygit2.Tree, paths: Iterable[str]
) -> list[tuple[str, str, pygit2.Object | None, pygit2.Object | None]] | None:
    """What :func:`_walk` yields for ``paths``; None if one is not a file on either side."""
    out: list[tuple[str, str, pygit2.Object | None, pygit2.Object | None]] = []
    try:
        for path in sorted(set(paths)):
            a, b = _file_at(old, path), _file_at(new, path)
            status = _status(
                None if a is None else (a.id, a.filemode), None if b is None else (b.id, b.filemode)
            )
            if status is not None:
                out.append((status, path, a, b))
    except _NotAFile:
        return None
    return out


class _NotAFile(Exception):
    """A folder or a submodule where a path of the commit points: walk instead."""


def _file_at(tree: pygit2.Tree | None, path: str) -> pygit2.Object | None:
    """The file entry at ``path``, or None if nothing is there."""
    try:
        entry = trees.object_at(tree, path)
    except ValueError:
        raise _NotAFile(path) from None
    if entry is None:
        return None
    if entry.type == _TREE or entry.filemode == pygit2.GIT_FILEMODE_COMMIT:
        raise _NotAFile(path)
    return entry


def _walk(
    repo: pygit2.Repository, old: pygit2.Tree | None, new: pygit2.Tree | None, prefix: str
) -> Iterator[tuple[str, str, pygit2.Object | None, pygit2.Object | None]]:
    old_entries = {str(e.name): e for e in old} if old is not None else {}
    new_entries = {str(e.name): e for e in new} if new is not None else {}
    for name in sorted(old_entries.keys() | new_entries.keys()):
        a, b = old_entries.get(name), new_entries.get(name)
        if a is not None and b is not None and a.id == b.id and a.filemode == b.filemode:
            continue
        if pygit2.GIT_FILEMODE_COMMIT in (getattr(a, "filemode", 0), getattr(b, "filemode", 0)):
            continue  # submodules are not part of the notes
        path = prefix + name
        a_tree = a is not None and a.type == _TREE
        b_tree = b is not None and b.type == _TREE
        if a_tree or b_tree:
            sub_a = repo[a.id] if a_tree and a is not None else None
            sub_b = repo[b.id] if b_tree and b is not None else None
            yield from _walk(repo, sub_a, sub_b, path + "/")  # type: ignore[arg-type]
            if a is not None and not a_tree:
                yield "D", path, a, None
            if b is not None and not b_tree:
                yield "A", path, None, b
            continue
        if a is None:
            yield "A", path, None, b
        elif b is None:
            yield "D", path, a, None
        elif _is_link(a.filemode) != _is_link(b.filemode):
            yield "T", path, a, b
        else:
            yield "M", path, a, b


def _is_link(mode: int) -> bool:
    return mode == pygit2.GIT_FILEMODE_LINK


def _pair_renames(
    repo: pygit2.Repository, deleted: list[tuple[str, str]], added: list[tuple[str, str, int]]
) -> list[tuple[str, str]]:
    """``(old_path, new_path)`` pairs: exact matches first, then the most similar."""
    if not deleted or not added:
        return []
    pairs: list[tuple[str, str]] = []
    free_new = sorted(added)
    by_blob: dict[str, list[str]] = {}
    for path, blob, _mode in free_new:
        by_blob.setdefault(blob, []).append(path)
    left_old: list[tuple[str, str]] = []
    for path, blob in sorted(deleted):
        candidates = by_blob.get(blob)
        if candidates:
            pairs.append((path, candidates.pop(0)))
        else:
            left_old.append((path, blob))
    taken = {n for _, n in pairs}
    left_new = [(p, b) for p, b, _m in free_new if p not in taken]
    if not left_old or not left_new or len(left_old) * len(left_new) > RENAME_LIMIT**2:
        return pairs
    scored: list[tuple[float, str, str]] = []
    for old_path, old_blob in left_old:
        old_data = _blob(repo, old_blob)
        for new_path, new_blob in left_new:
            score = similarity(old_data, _blob(repo, new_blob))
            if score >= RENAME_THRESHOLD:
                scored.append((-score, old_path, new_path))
    used_old: set[str] = set()
    used_new: set[str] = set()
    for _score, old_path, new_path in sorted(scored):
        if old_path not in used_old and new_path not in used_new:
            pairs.append((old_path, new_path))
            used_old.add(old_path)
            used_new.add(new_path)
    return pairs


def _blob(repo: pygit2.Repository, blob_id: str) -> bytes:
    obj = repo[blob_id]
    return bytes(obj.data) if isinstance(obj, pygit2.Blob) else b""


def similarity(old: bytes, new: bytes) -> float:
    """Share of content kept: bytes of common lines over the larger file's size."""
    if old == new:
        return 1.0
    largest = max(len(old), len(new))
    if largest == 0:
        return 1.0
    common = Counter(old.splitlines(keepends=True)) & Counter(new.splitlines(keepends=True))
    return sum(len(line) * n for line, n in common.items()) / largest
