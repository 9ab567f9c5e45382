"""Git's index file kept in memory as the store last wrote it, and patched at each landing.

A commit that does not update the index leaves it holding the previous blob of each path it
wrote: ``git status`` shows ``MM`` and a person's ``git commit`` commits the reversion. So
every landing sets its paths' entries before it is answered. libgit2 parses and rewrites the
whole index for that, a cost in proportion to the workspace; here the file's entries are kept as the
bytes Git reads, one per path in Git's order, and a landing replaces just its entries, drops
the cache-tree ids of the folders on their paths (as Git does), and writes the file again.
The entries are kept in blocks of :data:`BLOCK`, joined, with the SHA-1 state after each: a
page saved again changes one block, which alone is joined again, and the checksum is taken
on from the state before it (a page created or removed shifts the blocks after it, and
changes the count the checksum starts with). Entries written here carry no stat data (as
libgit2's from a tree), so ``git status`` hashes those files once.

Kept: the ``TREE`` (cache-tree) and ``REUC`` (resolve-undo) extensions; an index of version 4
(``feature.manyFiles``) is written back as version 3 (or 2), which Git reads as well and
writes as 4 again the next time it writes the index.
Other optional extensions (an end-of-entries offset table, fsmonitor and untracked caches)
describe positions or states this patch would make stale, so they are dropped; Git rebuilds
them when it wants them. A split or sparse index is :class:`Unsupported`:
the caller falls back to libgit2's refresh.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mnoted.store.dirfd import allocate
from mnoted.store.indexstat import Unsupported, read_varint

_HEADER = struct.Struct(">4sII")
_ENTRY = struct.Struct(">10I20sH")  # ctime s ns, mtime s ns, dev, ino, mode, uid, gid, size
_FIXED = 62
_NAME_MASK = 0x0FFF
_EXTENDED = 0x4000
_KEPT = (b"TREE", b"REUC")
BLOCK = 512
_IOV = 1000  # buffers per writev (the system's limit is 1024)

Entry = tuple[str, int] | None
"""(blob id, Git mode) a path is set to, or None: its entry is removed."""


def _key(name: bytes, stage: int = 0) -> bytes:
    """Git's order: by name, then by stage (a NUL sorts before every name byte)."""
    return name + b"\0" + bytes((stage,))


@dataclass
class _Tree:
    """One folder of the cache-tree extension, in its depth-first order."""

    path: bytes
    name: bytes
    count: int  # entries below it; -1: invalid
    subtrees: int
    oid: bytes | None
    raw: bytes = b""  # its bytes in the extension

    def __post_init__(self) -> None:
        self.raw = self.name + b"\0" + b"%d %d\n" % (self.count, self.subtrees) + (self.oid or b"")

    def invalidate(self) -> None:
        """Git's mark of a folder whose entries changed: its tree id is to be computed again."""
        self.count, self.oid = -1, None
        self.__post_init__()


class IndexFile:
    """The entries and extensions of one index file, patched and written again."""

    def __init__(
        self, version: int, keys: list[bytes], chunks: list[bytes], tree: list[_Tree], kept: bytes
    ) -> None:
        self.version = version
        self._keys = keys
        self._chunks = chunks
        self._tree = tree
        self._kept = kept  # other extensions kept, as they were
        self._joined: list[bytes] = []  # the entries of each block, joined (the first ones)
        self._stale: set[int] = set()  # blocks of those whose join is out of date
        self._states: list[Any] = []  # SHA-1 after the header, then after each block
        self._hashed = 0  # blocks the states still hold good for
        self._unmerged = sum(1 for key in keys if key[-1] != 0)  # entries at stage 1-3

    @classmethod
    def parse(cls, data: bytes) -> IndexFile:
        """Read an index file's bytes; :class:`Unsupported` for what is not patched here."""
        if len(data) < 32:
            raise Unsupported("no index")
        signature, version, count = _HEADER.unpack_from(data, 0)
        if signature != b"DIRC" or version not in (2, 3, 4):
            raise Unsupported(f"index version {version}")
        keys: list[bytes] = []
        chunks: list[bytes] = []
        off = 12
        previous = b""
        extended_seen = False
        for _ in range(count):
            (flags,) = struct.unpack_from(">H", data, off + 60)
            pos = off + _FIXED + (2 if flags & _EXTENDED else 0)
            extended_seen = extended_seen or bool(flags & _EXTENDED)
            if version == 4:  # (names shortened by the one before: written out in full)
                strip, start = read_varint(data, pos)
                end = data.index(b"\0", start)
                name = previous[: len(previous) - strip] + data[start:end]
                previous = name
                chunks.append((data[off:pos] + name).ljust((pos - off + len(name) + 8) & ~7, b"\0"))
                off = end + 1
            else:
                length = flags & _NAME_MASK
                end = pos + length if length < _NAME_MASK else data.index(b"\0", pos)
                name = data[pos:end]
                size = (end - off + 8) & ~7
                chunks.append(data[off : off + size])
                off += size
            keys.append(_key(name, (flags >> 12) & 3))
        if version == 4:  # written back as version 3 (or 2): Git reads every version
            version = 3 if extended_seen else 2
        tree: list[_Tree] = []
        kept = bytearray()
        end = len(data) - 20
        while off + 8 <= end:
            signature = data[off : off + 4]
            (size,) = struct.unpack_from(">I", data, off + 4)
            body = data[off + 8 : off + 8 + size]
            if not b"A" <= signature[:1] <= b"Z":
                raise Unsupported(f"index extension {signature!r}")
            if signature == b"TREE":
                tree = _parse_tree(body)
            elif signature in _KEPT:
                kept += data[off : off + 8 + size]
            off += 8 + size
        return cls(version, keys, chunks, tree, bytes(kept))

    @property
    def conflicted(self) -> bool:
        """Whether an entry is unmerged (stage 1-3): a merge, a cherry-pick or a stash pop
        left conflicts that the person resolves, and the index is theirs until then."""
        return self._unmerged > 0

    def set(self, entries: Mapping[str, Entry]) -> None:
        """Set each path's entry to (blob id, mode) at stage 0, or remove it; entries below a
        path that is now a file, and a file where a folder now is, go too."""
        for path, entry in entries.items():
            name = path.encode("utf-8", "surrogateescape")
            key = _key(name)
            at = bisect.bisect_left(self._keys, key)
            alone = (
                entry is not None
                and at < len(self._keys)
                and self._keys[at] == key
                and (at + 1 == len(self._keys) or not self._keys[at + 1].startswith(name + b"\0"))
                and not self._holds(name + b"/")
                and not any(self._holds(a + b"\0") for a in _ancestors(name))
            )
            if alone:  # (a page saved again: the same place, the same size)
                assert entry is not None
                self._chunks[at] = _entry(name, entry)
                self._stale.add(at // BLOCK)
                self._hashed = min(self._hashed, at // BLOCK)
            else:
                self._drop_prefix(name + b"\0")  # every stage of it
                self._drop_prefix(name + b"/")  # a folder that became a file
                for folder in _ancestors(name):  # a file that became a folder
                    self._drop_prefix(folder + b"\0")
                if entry is not None:
                    at = bisect.bisect_left(self._keys, key)
                    self._keys.insert(at, key)
                    self._chunks.insert(at, _entry(name, entry))
                    self._shifted(at)
            self._invalidate(name)

    def _holds(self, prefix: bytes) -> bool:
        at = bisect.bisect_left(self._keys, prefix)
        return at < len(self._keys) and self._keys[at].startswith(prefix)

    def _shifted(self, at: int) -> None:
        """Entries were added or removed at ``at``: the blocks from there on are joined
        again, and the checksum is taken again from the header (its count changed)."""
        del self._joined[at // BLOCK :]
        self._hashed = -1

    def _drop_prefix(self, prefix: bytes) -> None:
        at = bisect.bisect_left(self._keys, prefix)
        end = at
        while end < len(self._keys) and self._keys[end].startswith(prefix):
            end += 1
        if end > at:
            self._unmerged -= sum(1 for key in self._keys[at:end] if key[-1] != 0)
            del self._keys[at:end]
            del self._chunks[at:end]
            self._shifted(at)

    def _invalidate(self, name: bytes) -> None:
        folders = {b"", *_ancestors(name)}
        for node in self._tree:
            if node.path in folders and node.count >= 0:
                node.invalidate()

    def parts(self) -> list[bytes]:
        """The file's bytes but its checksum, as a list of buffers (blocks changed since the
        last call are joined again)."""
        header = _HEADER.pack(b"DIRC", self.version, len(self._keys))
        blocks = (len(self._chunks) + BLOCK - 1) // BLOCK
        for j in range(blocks):
            if j >= len(self._joined):
                self._joined.append(b"".join(self._chunks[j * BLOCK : (j + 1) * BLOCK]))
            elif j in self._stale:
                self._joined[j] = b"".join(self._chunks[j * BLOCK : (j + 1) * BLOCK])
        del self._joined[blocks:]
        self._stale.clear()
        return [header, *self._joined, self._extensions()]

    def checksum(self, parts: list[bytes]) -> bytes:
        """The SHA-1 trailer of :meth:`parts`' bytes, taken on from the state before the first
        block changed since the last call (safe beside a write of ``parts``: it reads them and
        keeps its own states)."""
        blocks = len(parts) - 2
        if self._hashed < 0 or not self._states:
            self._states = [hashlib.sha1(parts[0], usedforsecurity=False)]
            self._hashed = 0
        del self._states[self._hashed + 1 :]
        digest = self._states[-1].copy()
        for j in range(self._hashed, blocks):
            digest.update(parts[1 + j])
            self._states.append(digest.copy())
        self._hashed = blocks
        digest.update(parts[-1])
        return bytes(digest.digest())

    def serialize(self) -> bytes:
        """The file's bytes, its SHA-1 trailer included."""
        parts = self.parts()
        return b"".join([*parts, self.checksum(parts)])

    def write(self, fd: int) -> None:
        """Write the file's bytes to ``fd`` (a new, empty file)."""
        parts = self.parts()
        write_parts(fd, [*parts, self.checksum(parts)])

    def _extensions(self) -> bytes:
        tree = b""
        if self._tree:
            body = b"".join([n.raw for n in self._tree])
            tree = b"TREE" + struct.pack(">I", len(body)) + body
        return tree + self._kept


def write_parts(fd: int, parts: list[bytes], old: list[bytes] | None = None) -> None:
    """Write ``parts`` from the start of ``fd``'s file, which holds ``old`` (the parts written
    into it before; None: unknown or empty): a part that is the same object at the same
    offset there is left as it is, so only what changed since is written. The blocks are
    reserved first: ext4 writes out at once the unallocated blocks of a file renamed over
    another (``auto_da_alloc``), and the landing's next syncs would wait for megabytes."""
    allocate(fd, sum(len(b) for b in parts))
    there: dict[int, bytes] = {}
    offset = 0
    for part in old or ():
        there[offset] = part
        offset += len(part)
    run: list[bytes] = []
    offset = start = 0
    for part in [*parts, b""]:  # (the empty part ends the last run)
        if part and there.get(offset) is not part:
            if not run:
                start = offset
            run.append(part)
        elif run:
            _write_run(fd, run, start)
            run = []
        offset += len(part)


def _write_run(fd: int, parts: list[bytes], offset: int) -> None:
    for first in range(0, len(parts), _IOV):
        some = parts[first : first + _IOV]
        done = os.pwritev(fd, some, offset)
        size = sum(len(b) for b in some)
        if done < size:  # (a regular file takes all, or fails)
            os.pwrite(fd, b"".join(some)[done:], offset + done)
        offset += size


def _ancestors(name: bytes) -> list[bytes]:
    parts = name.split(b"/")
    return [b"/".join(parts[:depth]) for depth in range(1, len(parts))]


def _entry(name: bytes, entry: tuple[str, int]) -> bytes:
    flags = min(len(name), _NAME_MASK)
    fixed = _ENTRY.pack(0, 0, 0, 0, 0, 0, entry[1], 0, 0, 0, bytes.fromhex(entry[0]), flags)
    size = (_FIXED + len(name) + 8) & ~7
    return (fixed + name).ljust(size, b"\0")


def _parse_tree(body: bytes) -> list[_Tree]:
    """The cache-tree's folders in order, each with its path."""
    out: list[_Tree] = []
    stack: list[list[object]] = []  # [path, subtrees still to come]
    pos = 0
    while pos < len(body):
        nul = body.index(b"\0", pos)
        name = body[pos:nul]
        newline = body.index(b"\n", nul)
        count, subtrees = (int(x) for x in body[nul + 1 : newline].split(b" "))
        pos = newline + 1
        if stack:
            parent = stack[-1]
            path = parent[0] + b"/" + name if parent[0] else name  # type: ignore[operator]
            parent[1] -= 1  # type: ignore[operator]
        else:
            path = b""
        oid = None
        if count >= 0:
            oid = body[pos : pos + 20]
            pos += 20
        out.append(_Tree(path, name, count, subtrees, oid))
        if subtrees:
            stack.append([path, subtrees])
        while stack and stack[-1][1] == 0:
            stack.pop()
    return out
