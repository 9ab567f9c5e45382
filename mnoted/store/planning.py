"""Turning a command's changes, or the disk's state, into the paths and bytes of one commit."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pygit2

from mnoted.core.blob import blob_id
from mnoted.errors import BaseChanged, Conflict, InvalidArguments, NotFound, PathRejected, TooLarge
from mnoted.store import dirfd, trees
from mnoted.store.config import WorkspaceConfig
from mnoted.store.filters import Filters
from mnoted.store.model import Change, Delete, Move, Write
from mnoted.store.paths import normalize, resolve, resolve_folder
from mnoted.store.statcache import StatCache
from mnoted.store.worktree import OtherRepositories, disk_file


@dataclass(frozen=True)
class Target:
    """One path of a planned commit: new bytes (None = delete) and Git file mode."""

    path: str
    data: bytes | None
    mode: int


def validate(root: Path, config: WorkspaceConfig, changes: Sequence[Change]) -> list[str]:
    """The normalised paths a command touches; refuses unsafe, duplicate or too large."""
    touched: list[str] = []
    for change in changes:
        if (
            isinstance(change, Write | Move)
            and change.data is not None
            and (len(change.data) > config.max_file_bytes)
        ):
            raise TooLarge(
                f"{len(change.data)} bytes is over this workspace's limit of "
                f"{config.max_file_bytes} bytes per file",
            )
        paths = [change.old, change.new] if isinstance(change, Move) else [change.path]
        for raw in paths:
            rel = normalize(raw)
            resolve(root, rel)
            if rel in touched:
                raise InvalidArguments(f"{rel} appears twice in one command", path=rel)
            touched.append(rel)
    return touched


def refuse_filtered(filters: Filters, changes: Sequence[Change]) -> None:
    """Refuse a command that writes bytes at a path Git filters (a delete writes none)."""
    for change in changes:
        if isinstance(change, Write):
            filters.refuse(normalize(change.path))
        elif isinstance(change, Move):
            filters.refuse(normalize(change.old))
            filters.refuse(normalize(change.new))


def refuse_read_only(root: Path, changes: Sequence[Change]) -> None:
    """Refuse a command that would replace, delete or move a file its owner may not write:
    ``chmod a-w`` is how a person keeps a note from being edited, and a write replaced the
    file with a writable one."""
    for change in changes:
        rel = normalize(change.old if isinstance(change, Move) else change.path)
        *parts, name = rel.split("/")
        try:
            with dirfd.folder(root, parts) as fd:
                st = None if fd is None else dirfd.lstat_at(fd, name)
        except PathRejected:  # a folder swapped for a symlink: the write itself refuses it
            continue
        if st is not None and stat.S_ISREG(st.st_mode) and not st.st_mode & stat.S_IWUSR:
            raise PathRejected(
                f"{rel} is read-only on disk (mode {stat.S_IMODE(st.st_mode):04o}): mnoted does "
                "not write over a file its owner may not write",
                hint=f"Make it writable (chmod u+w '{rel}') for it to be edited.",
                path=rel,
            )


def _tracked_folder(tree: pygit2.Tree | None) -> Callable[[str], bool]:
    """Whether HEAD has files under a folder: Git adds new files there, ``.git`` or not."""

    def tracked(folder: str) -> bool:
        found = trees.object_at(tree, folder)
        return found is not None and found.type == pygit2.GIT_OBJECT_TREE

    return tracked


def refuse_left_out(
    repo: pygit2.Repository,
    root: Path,
    config: WorkspaceConfig,
    tree: pygit2.Tree | None,
    changes: Sequence[Change],
) -> None:
    """Refuse a command that would add a file ``git add`` leaves out: one Git ignores, or one
    inside another repository. Every write is a commit, so it would put into history what
    ``.gitignore`` keeps out, or another repository's files (a file Git tracks is written)."""
    others = OtherRepositories(root, _tracked_folder(tree))
    for change in changes:
        if isinstance(change, Write | Move):
            rel = normalize(change.new if isinstance(change, Move) else change.path)
            if trees.entry_at(tree, rel) is not None:
                continue
            other = others.holding(rel)
            if other is not None:
                submodule = trees.object_at(tree, other) is not None  # (a gitlink)
                raise PathRejected(
                    f"{rel} is inside another Git repository ({other}/.git): its files are that "
                    "repository's, and Git does not add them to this one",
                    hint=f"Choose a path outside {other}/"
                    + (
                        f" ({other} is a submodule: its own repository keeps its files)."
                        if submodule
                        else " (or make it a submodule with `git submodule add`, and write in "
                        "its own workspace)."
                    ),
                    path=rel,
                )
            where = (
                ".gitignore"
                if repo.path_is_ignored(rel)
                else ".mnote/config.toml [ignore]"
                if config.is_ignored(rel)
                else None
            )
            if where is not None:
                raise PathRejected(
                    f"{rel} is ignored ({where}): mnoted commits every write, and would add "
                    "it to the history",
                    hint=f"Choose a path that is not ignored, or take its pattern out of {where} "
                    "first.",
                    path=rel,
                )


def plan(
    repo: pygit2.Repository, tree: pygit2.Tree | None, changes: Sequence[Change]
) -> list[Target]:
    """The paths and bytes of a command on ``tree`` (HEAD), checking each ``base_blob``."""
    out: list[Target] = []
    for change in changes:
        if isinstance(change, Write):
            rel = normalize(change.path)
            entry = trees.entry_at(tree, rel)
            check_base(rel, entry, change.base_blob)
            mode = entry[1] if entry is not None else trees.FILE
            out.append(Target(rel, change.data, mode))
        elif isinstance(change, Delete):
            rel = normalize(change.path)
            entry = trees.entry_at(tree, rel)
            if entry is None:
                raise NotFound(f"{rel} is not in the workspace", path=rel)
            check_base(rel, entry, change.base_blob)
            out.append(Target(rel, None, entry[1]))
        else:
            old, new = normalize(change.old), normalize(change.new)
            entry = trees.entry_at(tree, old)
            if entry is None:
                raise NotFound(f"{old} is not in the workspace", path=old)
            check_base(old, entry, change.base_blob)
            if trees.entry_at(tree, new) is not None:
                raise Conflict(
                    f"cannot move {old} to {new}: {new} exists",
                    path=new,
                    hint="Choose another name or delete the existing page.",
                )
            data = change.data
            if data is None:
                blob = repo[entry[0]]
                assert isinstance(blob, pygit2.Blob)
                data = bytes(blob.data)
            out.append(Target(old, None, entry[1]))
            out.append(Target(new, data, entry[1]))
    return out


def disk_changes(
    repo: pygit2.Repository,
    root: Path,
    config: WorkspaceConfig,
    tree: pygit2.Tree | None,
    paths: Iterable[str],
    *,
    include_ignored: bool = False,
    stats: StatCache | None = None,
    filters: Filters | None = None,
    skip: set[str] | frozenset[str] = frozenset(),
) -> list[Target]:
    """What is on disk at ``paths`` where it differs from ``tree``; unsafe paths, and those
    in ``skip`` (files being written by someone else), skipped.

    Untracked files that are ignored (or over the size limit) are skipped unless
    ``include_ignored``: a command about to write such a path commits it first all the same.
    Untracked files in another repository's folder (``worktree.OtherRepositories``) are always
    skipped.
    ``stats`` spares reading a file known unchanged since it was last hashed. A file that
    differs is compared, and committed, as what Git's clean filters make of it (``filters``:
    line endings, LFS, git-crypt), with the mode Git would store (``core.fileMode``).
    """
    out: list[Target] = []
    seen: set[str] = set()
    looked = False
    others = OtherRepositories(root, _tracked_folder(tree))
    if stats is not None:  # (the check before each command: its page, most often unchanged)
        paths = [raw for raw in paths if not _known_unchanged(root, tree, raw, stats)]
    for raw in _expand_folders(repo, root, tree, paths):
        try:
            rel = normalize(raw, config_ok=True)
        except PathRejected:
            continue
        if rel in seen or rel in skip:
            continue
        seen.add(rel)
        entry = trees.entry_at(tree, rel)
        if entry is None and others.holding(rel) is not None:
            continue  # another repository's file
        skip_untracked = not include_ignored and entry is None
        if skip_untracked and (config.is_ignored(rel) or repo.path_is_ignored(rel)):
            continue
        try:
            found = disk_file(root, rel, stats)  # relative to folder fds: no symlink followed
            if (
                found is not None
                and found.data is None
                and entry != (found.blob, _stored_mode(filters, found.mode, entry))
            ):
                found = disk_file(root, rel, None)  # known, but not what HEAD has: read it
        except PathRejected:
            if entry is not None and _beyond_folder(root, rel):
                # A folder on its way is a symlink or a file now: as for Git, the file is
                # gone from the work tree (a stale entry kept `git status` dirty for good).
                out.append(Target(rel, None, entry[1]))
            continue
        if found is None:
            if entry is not None:
                out.append(Target(rel, None, entry[1]))
            continue
        data, size, mode = found.data, found.size, _stored_mode(filters, found.mode, entry)
        if entry == (found.blob, mode):
            continue
        if found.mode != pygit2.GIT_FILEMODE_LINK and filters is not None:  # (no symlink)
            assert data is not None
            cleaned = filters.clean(rel, data, fresh=not looked)
            looked = True  # (Git's config is looked at once a call, not once a file)
            if cleaned != data:  # what `git add` stores is not the file's bytes
                data, size, blob = cleaned, len(cleaned), blob_id(cleaned)
                if stats is not None:
                    stats.stored_as(rel, found.key, blob)
                if entry == (blob, mode):
                    continue
        if skip_untracked and size > config.max_file_bytes:
            continue
        assert data is not None
        out.append(Target(rel, data, mode))
    return out


def _stored_mode(filters: Filters | None, disk: int, entry: tuple[str, int] | None) -> int:
    """The mode to commit for a file of Git mode ``disk`` that HEAD has as ``entry``."""
    return disk if filters is None else filters.stored_mode(disk, entry[1] if entry else None)


def _known_unchanged(root: Path, tree: pygit2.Tree | None, raw: str, stats: StatCache) -> bool:
    """Whether ``raw`` is a file that ``tree`` has and that the disk holds unchanged, by its
    stat data alone: a regular file, so there is no folder to expand. Nothing is read (a
    file the stat cache does not know is read once, by the full check)."""
    try:
        rel = normalize(raw, config_ok=True)
        entry = trees.entry_at(tree, rel)
        if entry is None:
            return False
        found = disk_file(root, rel, stats, read=False)
    except PathRejected:
        return False
    return found is not None and (found.blob, found.mode) == entry


def _expand_folders(
    repo: pygit2.Repository, root: Path, tree: pygit2.Tree | None, paths: Iterable[str]
) -> list[str]:
    """``paths`` with each folder (on disk or in ``tree``) replaced by the files under it.

    A watcher may report only a folder when one is moved or deleted; its files are what
    gets committed.
    """
    out: list[str] = []
    for raw in paths:
        try:
            rel = normalize(raw)
            folder = resolve_folder(root, rel)
        except PathRejected:
            # a symlink on its way (or at it): what HEAD has below it is gone from disk
            subtree = _subtree(tree, raw) if _normal(raw) else None
            if subtree is not None:
                out.extend(f"{raw}/{p}" for p in _blobs_under(repo, subtree, ""))
            out.append(raw)
            continue
        files: list[str] = []
        subtree = _subtree(tree, rel)
        if subtree is not None:
            files.extend(f"{rel}/{p}" for p in _blobs_under(repo, subtree, ""))
        if folder is not None:
            try:
                with dirfd.folder(root, rel.split("/")) as fd:
                    files.extend(dirfd.files_under(fd, rel) if fd is not None else [])
            except PathRejected:  # swapped for a symlink since resolve_folder looked
                out.append(raw)
                continue
        out.extend(files if files or folder is not None or subtree is not None else [rel])
    return out


def _normal(raw: str) -> bool:
    try:
        return normalize(raw) == raw
    except PathRejected:
        return False


def _beyond_folder(root: Path, rel: str) -> bool:
    """Whether a folder on the way to ``rel`` is a symlink or no folder (the path cannot
    hold a file of the work tree), as against the file itself being refused."""
    current = str(root)
    for part in rel.split("/")[:-1]:
        current = f"{current}/{part}"
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return False
        except OSError:
            return True
        if not stat.S_ISDIR(st.st_mode):  # (a symlink's lstat is no folder either)
            return True
    return False


def _subtree(tree: pygit2.Tree | None, rel: str) -> pygit2.Tree | None:
    obj = trees.object_at(tree, rel)
    return obj if isinstance(obj, pygit2.Tree) else None


def _blobs_under(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str) -> list[str]:
    out: list[str] = []
    for entry in tree:
        name = f"{prefix}{entry.name}"
        if entry.type == pygit2.GIT_OBJECT_TREE:
            sub = repo[entry.id]
            assert isinstance(sub, pygit2.Tree)
            out.extend(_blobs_under(repo, sub, name + "/"))
        elif entry.filemode != pygit2.GIT_FILEMODE_COMMIT:
            out.append(name)
    return out


def subject_path(change: Change) -> str:
    if isinstance(change, Move):
        return f"{normalize(change.old)} -> {normalize(change.new)}"
    return normalize(change.path)


def check_base(path: str, entry: tuple[str, int] | None, base_blob: str | None) -> None:
    if base_blob is None:
        return
    current = entry[0] if entry is not None else None
    if current != base_blob:
        raise BaseChanged(
            f"{path} changed since it was read (base {base_blob[:12]}, now "
            f"{current[:12] if current else 'absent'})",
            path=path,
            current=current,
        )
