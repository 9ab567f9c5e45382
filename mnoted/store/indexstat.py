"""The stat data Git keeps per path in ``.git/index``, parsed once per version of the file.

pygit2 exposes an index entry's path, object id and mode but not the stat data (size,
mtime, ctime, inode) that lets ``git status`` skip reading unchanged files. The work-tree
scan (:mod:`mnoted.store.scan`) needs exactly that, so this module reads the index file
itself (versions 2 to 4). A file it cannot read this way (a split index, an unknown
version, a torn file) falls back to libgit2's parse without stat data: every file is then
hashed, slower but never wrong.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2

from mnoted.store.statcache import stamp as stamp  # (the index file's version)

# ctime s, ns, mtime s, ns, (dev), ino, mode, (uid, gid), size, object id, flags
_FIXED = struct.Struct(">IIII4xII8xI20sH")
_FIXED_SIZE = 62
_ASSUME_UNCHANGED = 0x8000  # "assume valid": git status does not look at the file
_EXTENDED = 0x4000
_SKIP_WORKTREE = 0x4000  # in the extended flags
_STAGE_MASK = 0x3000
_NAME_MASK = 0x0FFF
GITLINK = 0o160000

Entry = tuple[int, int, int, int, int, bytes]
"""mode, size, mtime_ns, ctime_ns, inode (size and inode as Git keeps them: low 32 bits),
object id (raw). A stat of all zeros means "unknown" (entries libgit2 wrote from a tree)."""


class Unsupported(Exception):
    """The index file uses something this reader does not parse."""


@dataclass
class IndexStat:
    """One version of ``.git/index``: its entries by path and when it was written."""

    entries: dict[str, Entry]
    mtime_ns: int
    """Files whose mtime is not older than this may have changed within the same clock
    tick as the index was written (racy Git): they are always hashed."""
    unmerged: frozenset[str] = frozenset()
    skipped: frozenset[str] = frozenset()
    """Entries marked skip-worktree or assume-unchanged: their files are not compared."""
    trees: dict[str, bytes] = field(default_factory=dict)
    """The cache-tree extension: the tree id each folder's entries amount to, for the
    folders whose entries did not change since it was computed ("" is the root). A folder
    whose id is HEAD's there holds nothing staged, without a comparison."""
    _sorted: list[str] | None = field(default=None, repr=False)

    def holds(self, folder: str) -> bool:
        """Whether any tracked path lies below ``folder`` (a bisection of the sorted paths)."""
        keys = self.sorted_paths
        prefix = folder + "/"
        i = bisect.bisect_left(keys, prefix)
        return i < len(keys) and keys[i].startswith(prefix)

    def agrees(self, path: str, entry: tuple[str, int] | None) -> bool:
        """Whether the index holds ``path`` as ``entry`` says ((blob id, mode), or absent),
        unmerged entries and entries below ``path`` counting against it: what a refresh of
        ``path`` would leave."""
        if path in self.unmerged or self.holds(path):
            return False
        found = self.entries.get(path)
        if entry is None:
            return found is None
        return found is not None and (found[5].hex(), found[0]) == entry

    def update(self, changes: dict[str, tuple[int, bytes] | None]) -> None:
        """Apply what a refresh of these paths wrote: each one's (mode, object id) with no
        stat data, or nothing; entries below a path go (a folder became a file or went).

        The index file's mtime stays the one parsed: entries carried over keep their stat
        data, and one that was racy against the old file must stay racy.
        """
        keys = self.sorted_paths  # kept in step: sorting every path again costs a large workspace
        for path, entry in changes.items():
            below = list(self.under(path))  # (a run of the sorted paths, taken out whole)
            if below:
                for gone in below:
                    del self.entries[gone]
                first = bisect.bisect_left(keys, min(below))
                del keys[first : first + len(below)]
            had = path in self.entries
            if entry is None:
                self.entries.pop(path, None)
            else:
                self.entries[path] = (entry[0], 0, 0, 0, 0, entry[1])
            if had != (entry is not None):
                if had:
                    del keys[bisect.bisect_left(keys, path)]
                else:
                    bisect.insort(keys, path)
            self.unmerged = self.unmerged - {path}
            self.skipped = self.skipped - {path}  # an entry written anew has no flags
            folder = path
            while folder:
                folder = folder.rpartition("/")[0]
                self.trees.pop(folder, None)  # as libgit2 invalidates the cache tree

    @property
    def sorted_paths(self) -> list[str]:
        if self._sorted is None:
            self._sorted = sorted(self.entries)
        return self._sorted

    def under(self, folder: str) -> Iterator[str]:
        """Tracked paths below ``folder`` ("" for all), in sorted order."""
        if not folder:
            yield from self.entries
            return
        prefix = folder + "/"
        keys = self.sorted_paths
        for i in range(bisect.bisect_left(keys, prefix), len(keys)):
            if not keys[i].startswith(prefix):
                break
            yield keys[i]


def load(index_path: Path) -> IndexStat:
    """Parse ``index_path``; libgit2's parse without stat data if this reader cannot."""
    try:
        with open(index_path, "rb") as fh:
            mtime_ns = os.fstat(fh.fileno()).st_mtime_ns
            data = fh.read()
    except FileNotFoundError:
        return IndexStat({}, 0)
    try:
        return parse(data, mtime_ns)
    except (Unsupported, struct.error, IndexError, ValueError):
        return _from_libgit2(index_path)


def parse(data: bytes, mtime_ns: int) -> IndexStat:
    """The entries of an index file's bytes (versions 2, 3 and 4)."""
    if len(data) < 12 or data[:4] != b"DIRC":
        raise Unsupported("not an index file")
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3, 4):
        raise Unsupported(f"index version {version}")
    entries: dict[str, Entry] = {}
    unmerged: set[str] = set()
    skipped: set[str] = set()
    unpack = _FIXED.unpack_from
    off = 12
    previous = b""
    v4 = version == 4
    for _ in range(count):
        cs, cn, ms, mn, ino, mode, size, oid, flags = unpack(data, off)
        pos = off + _FIXED_SIZE
        extended = 0
        if flags & _EXTENDED:
            if version < 3:
                raise Unsupported("extended flags in a version 2 index")
            (extended,) = struct.unpack_from(">H", data, pos)
            pos += 2
        if v4:
            strip, pos = read_varint(data, pos)
            end = data.index(b"\0", pos)
            name = previous[: len(previous) - strip] + data[pos:end]
            previous = name
            off = end + 1
        else:
            length = flags & _NAME_MASK
            end = pos + length if length < _NAME_MASK else data.index(b"\0", pos)
            name = data[pos:end]
            off = off + ((end - off + 8) & ~7)
        path = name.decode("utf-8", "surrogateescape")
        if flags & _STAGE_MASK:
            unmerged.add(path)
            continue
        if extended & _SKIP_WORKTREE or flags & _ASSUME_UNCHANGED:
            skipped.add(path)  # still an entry: HEAD is compared with it
        entries[path] = (mode, size, ms * 1_000_000_000 + mn, cs * 1_000_000_000 + cn, ino, oid)
    return IndexStat(
        entries, mtime_ns, frozenset(unmerged), frozenset(skipped), _cache_tree(data, off)
    )


def _cache_tree(data: bytes, off: int) -> dict[str, bytes]:
    """The valid folders of the cache-tree extension (``TREE``), by path."""
    end = len(data) - 20  # the checksum
    while off + 8 <= end:
        signature = data[off : off + 4]
        (size,) = struct.unpack_from(">I", data, off + 4)
        if signature == b"link":
            raise Unsupported("split index")
        if signature == b"TREE":
            return _tree_entries(data, off + 8, off + 8 + size)
        off += 8 + size
    return {}


def _tree_entries(data: bytes, pos: int, end: int) -> dict[str, bytes]:
    """Entries come depth first: name, entry count (-1: invalid), subtree count, id."""
    valid: dict[str, bytes] = {}
    open_folders: list[list[Any]] = []  # [path, subtrees still to come]
    while pos < end:
        nul = data.index(b"\0", pos)
        name = data[pos:nul].decode("utf-8", "surrogateescape")
        newline = data.index(b"\n", nul)
        count, subtrees = (int(x) for x in data[nul + 1 : newline].split(b" "))
        pos = newline + 1
        if open_folders:
            parent = open_folders[-1]
            path = f"{parent[0]}/{name}" if parent[0] else name
            parent[1] -= 1
        else:
            path = ""
        if count >= 0:
            valid[path] = data[pos : pos + 20]
            pos += 20
        if subtrees:
            open_folders.append([path, subtrees])
        while open_folders and open_folders[-1][1] == 0:
            open_folders.pop()
    return valid


def children(index: IndexStat, folder: str) -> tuple[dict[str, Entry], set[str]]:
    """The files directly in ``folder`` (by name) and the names of its subfolders."""
    keys = index.sorted_paths
    prefix = f"{folder}/" if folder else ""
    files: dict[str, Entry] = {}
    folders: set[str] = set()
    i = bisect.bisect_left(keys, prefix)
    while i < len(keys) and keys[i].startswith(prefix):
        rest = keys[i][len(prefix) :]
        slash = rest.find("/")
        if slash < 0:
            files[rest] = index.entries[keys[i]]
            i += 1
        else:
            folders.add(rest[:slash])
            # past every path in that subfolder: "/" sorts just before "0"
            i = bisect.bisect_left(keys, f"{prefix}{rest[:slash]}0", i)
    return files, folders


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Git's offset varint (index v4 path compression)."""
    byte = data[pos]
    pos += 1
    value = byte & 0x7F
    while byte & 0x80:
        byte = data[pos]
        pos += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, pos


def _from_libgit2(index_path: Path) -> IndexStat:
    index = pygit2.Index(str(index_path))
    entries: dict[str, Entry] = {}
    unmerged: set[str] = set()
    if index.conflicts is not None:
        for conflict in index.conflicts:
            unmerged.update(e.path for e in conflict if e is not None)
    for entry in index:
        entries[entry.path] = (int(entry.mode), 0, 0, 0, 0, entry.id.raw)
    return IndexStat(entries, 0, frozenset(unmerged))
