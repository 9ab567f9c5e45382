"""A landing's objects written as one pack file instead of one loose file per object.

libgit2 writes every object as a loose file: deflated, written to a temporary file and renamed,
four files for the blob, trees and commit of one command, and each such file then needs its own
fsync. Instead the store's repository writes new objects into :class:`Staging`, an in-memory
object database backend that libgit2 also reads (the next staged commit of a group builds its
trees on the pending one). When the commands land, :func:`write_pack` puts everything staged
into one pack and its index (Git's formats, version 2), made durable with one wait for both
files and one for the folder, and :func:`merge_packs` later folds those small packs together by
copying their entries, so the number of packs a lookup searches stays small while the daemon
writes without pause.

A pack becomes visible to Git only with its index: both are written under temporary names,
fsynced, then the pack and last the index are renamed into place and the folder synced. A
crash leaves temporary files (removed, or completed when both are known durable, by
:func:`recover`) and never a pack index whose bytes are not on disk.

Packs made by libgit2's pack builder (background maintenance) follow the same order through
:func:`publish`: libgit2 puts a pack's index in place *before* the pack, so a process killed
between the two left an index without its pack, which ``git fsck`` reports as a broken
pack. They are written in a staging folder and moved in pack first.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import os
import re
import shutil
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pygit2

from mnoted.store import dirfd, durable, faults
from mnoted.store.atomic import fsync_dir, in_folder, make_git_folders

STORED_FROM = 64 * 1024
"""Objects at least this large are stored in the pack undeflated (zlib level 0): deflating a
large page costs more than the rest of its edit. The maintenance thread recompresses them when
it repacks."""

TMP_PACK = "tmp_pack_mnote_"
TMP_IDX = "tmp_idx_mnote_"
_PACK_NAME = re.compile(r"^pack-([0-9a-f]{40})\.pack$")
_IDX_MAGIC = b"\xfftOc"
_LARGE = 0x80000000

Raw = tuple[bytes, int, bytes]
"""An object as (20-byte id, type number, uncompressed content)."""


class Staging(pygit2.OdbBackend):
    """Objects written by libgit2 and not yet in a pack: kept in memory, readable by libgit2.

    Added to the repository's object database at the pack backend's priority, after it (so
    reads of packed objects never reach Python) and before the loose backend (so every write
    lands here). libgit2 calls these methods with the GIL held only from pygit2's C-level
    API: the store's repository must not be used through pygit2's revision walker or its
    cffi-based parts (``Repository.index``, merges, checkouts), which release the GIL.
    """

    def __init__(self, carried: Staging | None) -> None:
        """An empty staging, or one holding what ``carried`` holds, from then on (a new
        object database needs a new backend; :class:`WriteThrough` shares them too)."""
        super().__init__()
        self._objects: dict[pygit2.Oid, tuple[int, bytes]] = (
            carried._objects if carried is not None else {}
        )
        # The last landing's head commit and its tree, packed by now, still readable here.
        self._landed: dict[pygit2.Oid, tuple[int, bytes]] = (
            carried._landed if carried is not None else {}
        )

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, oid: object) -> bool:
        return oid in self._objects

    def objects(self) -> list[Raw]:
        """Every staged object, in the order written."""
        return [(oid.raw, kind, data) for oid, (kind, data) in self._objects.items()]

    def clear(self, *, keep: pygit2.Oid | None = None) -> None:
        """Forget the staged objects (a pack has them now), but keep commit ``keep`` and its
        tree readable here.

        The next command's base is that tree, and its commit names that commit as its
        parent (which libgit2 reads, to check it): looked up in the repository, they would
        be searched for in every pack, missed in the new one, and found after a rescan of
        the pack folder, once a write.
        """
        if keep is not None and (commit := self._objects.get(keep)) is not None:
            tree = pygit2.Oid(hex=commit[1][5:45].decode("ascii"))  # (b"tree <id>\n...")
            self._landed.clear()
            self._landed[keep] = commit
            if tree in self._objects:
                self._landed[tree] = self._objects[tree]
        self._objects.clear()

    def _held(self, oid: pygit2.Oid) -> tuple[int, bytes] | None:
        return self._objects.get(oid) or self._landed.get(oid)

    def add(self, oid: pygit2.Oid, kind: int, data: bytes) -> None:
        """Stage an object the store made itself (not through libgit2)."""
        self._objects.setdefault(oid, (kind, data))

    # the callbacks libgit2 makes (names fixed by pygit2)
    def write_cb(self, oid: pygit2.Oid, data: bytes, kind: int) -> None:
        self._objects[oid] = (kind, data)

    def read_cb(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        found = self._held(oid)
        if found is None:
            raise KeyError(oid)
        return found

    def read_header_cb(self, oid: pygit2.Oid) -> tuple[int, int]:
        kind, data = self.read_cb(oid)
        return kind, len(data)

    def read_prefix_cb(self, prefix: str) -> tuple[int, bytes, pygit2.Oid]:
        oid = self.exists_prefix_cb(prefix)
        kind, data = self._objects[oid]
        return kind, data, oid

    def exists_cb(self, oid: pygit2.Oid) -> bool:
        return oid in self._objects or oid in self._landed

    def exists_prefix_cb(self, prefix: str) -> pygit2.Oid:
        if len(prefix) == 40:
            oid = pygit2.Oid(hex=prefix)
            if oid not in self._objects:
                raise KeyError(prefix)
            return oid
        found = [oid for oid in self._objects if str(oid).startswith(prefix)]
        if not found:
            raise KeyError(prefix)
        if len(found) > 1:
            raise ValueError(f"ambiguous object id prefix {prefix}")
        return found[0]

    def refresh_cb(self) -> None:
        return None


class WriteThrough(Staging):
    """The only backend of the store's object writer (:func:`object_writer`): what libgit2
    writes there (a commit's trees, the commit) is staged at once; what it reads there is
    staged, or read from ``reader``'s object database.

    Written through the repository's own object database, each new object would cost a search of
    every pack, and then, not found, a reading of the pack folder again (libgit2's
    ``git_odb_refresh``): a cost per pack, four objects a command (``bench/objects.py``). Here
    an object not staged is written, even one some pack holds already; merging packs keeps one
    copy.
    """

    def __init__(self, staging: Staging, reader: pygit2.Repository) -> None:
        super().__init__(staging)
        self._reader = reader

    def read_cb(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        found = self._held(oid)
        if found is not None:
            return found
        kind, data = self._reader.odb.read(oid)
        return kind, data

    def read_header_cb(self, oid: pygit2.Oid) -> tuple[int, int]:
        found = self._held(oid)
        if found is not None:
            return found[0], len(found[1])
        kind, size = self._reader.odb.read_header(oid)
        return kind, size


def object_writer(staging: Staging, reader: pygit2.Repository) -> pygit2.Repository:
    """A repository with no folder whose objects are ``staging``'s, over ``reader``'s: the
    store builds trees and commits there (:class:`WriteThrough` says why)."""
    writer = pygit2.Repository()
    odb = pygit2.Odb()
    odb.add_backend(WriteThrough(staging, reader), 1)
    writer.set_odb(odb)
    return writer


def _entry_header(kind: int, size: int) -> bytes:
    """A pack entry's type and size: 3 bits of type, the size in 4 + 7n bits."""
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


@dataclass(frozen=True)
class _Entry:
    oid: bytes
    crc: int
    body: bytes  # the entry as stored in the pack: header and zlib stream


def _encode(kind: int, data: bytes) -> bytes:
    level = 0 if len(data) >= STORED_FROM else 1
    return _entry_header(kind, len(data)) + zlib.compress(data, level)


def _assemble(entries: Sequence[_Entry]) -> tuple[bytes, bytes, str]:
    """The pack, its index and its name (the pack's checksum) for ``entries``."""
    sha = hashlib.sha1(usedforsecurity=False)
    head = b"PACK" + (2).to_bytes(4, "big") + len(entries).to_bytes(4, "big")
    chunks = [head]
    sha.update(head)
    offsets: dict[bytes, tuple[int, int]] = {}
    at = len(head)
    for e in entries:
        offsets[e.oid] = (at, e.crc)
        chunks.append(e.body)
        sha.update(e.body)
        at += len(e.body)
    checksum = sha.digest()
    chunks.append(checksum)
    pack = b"".join(chunks)

    ids = sorted(offsets)
    fanout = [0] * 256
    for oid in ids:
        fanout[oid[0]] += 1
    fan = struct.pack(">256I", *itertools.accumulate(fanout))
    small = bytearray()
    large = bytearray()
    for oid in ids:
        offset = offsets[oid][0]
        if offset < _LARGE:
            small += offset.to_bytes(4, "big")
        else:
            small += (_LARGE | len(large) // 8).to_bytes(4, "big")
            large += offset.to_bytes(8, "big")
    body = b"".join(
        [
            _IDX_MAGIC,
            (2).to_bytes(4, "big"),
            fan,
            *ids,
            b"".join(offsets[oid][1].to_bytes(4, "big") for oid in ids),
            bytes(small),
            bytes(large),
            checksum,
        ]
    )
    idx = body + hashlib.sha1(body, usedforsecurity=False).digest()
    return pack, idx, checksum.hex()


def entries_of(objects: Iterable[Raw]) -> list[_Entry]:
    out: dict[bytes, _Entry] = {}
    for oid, kind, data in objects:
        if oid not in out:
            body = _encode(kind, data)
            out[oid] = _Entry(oid, zlib.crc32(body), body)
    return list(out.values())


def write_pack(
    pack_dir: Path,
    objects: Sequence[Raw],
    *,
    sync_folder: bool = True,
) -> str:
    """Write ``objects`` as one durable pack in ``pack_dir``; the pack's name (its checksum).

    With ``sync_folder`` False the pack's files are durable but their names are not until
    the caller syncs ``pack_dir`` (together with other files, in one wait).
    """
    return PackWrite(pack_dir, entries_of(objects)).install(sync_folder=sync_folder)


class PackWrite:
    """A pack and its index written and being synced on the fsync pool (the caller goes on
    with other work meanwhile); :meth:`install` waits and puts them in place, :meth:`drop`
    removes them. A write cut short leaves nothing, a temporary index alone, or a pack and
    its temporary index (:func:`recover`)."""

    def __init__(self, pack_dir: Path, entries: Sequence[_Entry]) -> None:
        pack, idx, self.name = _assemble(entries)
        self._folder = folder = os.fspath(pack_dir)  # strings: a pack is made on every write
        self._tmp_idx = f"{folder}/{TMP_IDX}{self.name}"
        self._made: list[tuple[str, int]] = []  # temporary name, fd
        self._sync = durable.Syncing(())
        try:
            for path, data in ((f"{folder}/{TMP_PACK}{self.name}", pack), (self._tmp_idx, idx)):
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
                fd = in_folder(folder, functools.partial(os.open, path, flags, 0o444))
                self._made.append((path, fd))
                dirfd.write_all(fd, data)
        except BaseException:
            self.drop()
            raise
        self._sync = durable.Syncing([fd for _, fd in self._made])

    def install(self, *, sync_folder: bool = True) -> str:
        """Wait for both files, then put the index under its temporary name, the pack in
        place, and the index in place; the pack's name. On an error nothing is installed."""
        try:
            self._sync.wait()
            (tmp_pack, _), _ = self._made
        except BaseException:
            self.drop()
            raise
        self._close()
        final_pack = f"{self._folder}/pack-{self.name}.pack"
        os.rename(tmp_pack, final_pack)
        faults.point("pack-renamed")
        os.rename(self._tmp_idx, f"{self._folder}/pack-{self.name}.idx")
        if sync_folder:
            fsync_dir(self._folder)
        return self.name

    def drop(self) -> None:
        """Remove the files (once their syncs are over: their fds are closed here)."""
        with contextlib.suppress(OSError):  # the caller has the error that brought us here
            self._sync.wait()
        for path, _ in self._made:
            with contextlib.suppress(OSError):
                os.unlink(path)
        with contextlib.suppress(OSError):
            os.unlink(self._tmp_idx)
        self._close()

    def _close(self) -> None:
        for _, fd in self._made:
            os.close(fd)
        self._made = []


@dataclass(frozen=True)
class IndexEntry:
    """One object listed in a pack index."""

    oid: bytes
    crc: int
    offset: int


def read_index(idx: bytes) -> list[IndexEntry]:
    """The objects a version-2 pack index lists, in id order."""
    if idx[:4] != _IDX_MAGIC or int.from_bytes(idx[4:8], "big") != 2:
        raise ValueError("not a version 2 pack index")
    count = int.from_bytes(idx[8 + 255 * 4 : 8 + 256 * 4], "big")
    ids_at = 8 + 256 * 4
    crcs_at = ids_at + 20 * count
    small_at = crcs_at + 4 * count
    large_at = small_at + 4 * count
    out = []
    for i in range(count):
        offset = int.from_bytes(idx[small_at + 4 * i : small_at + 4 * i + 4], "big")
        if offset & _LARGE:
            at = large_at + 8 * (offset & ~_LARGE)
            offset = int.from_bytes(idx[at : at + 8], "big")
        crc = int.from_bytes(idx[crcs_at + 4 * i : crcs_at + 4 * i + 4], "big")
        out.append(IndexEntry(idx[ids_at + 20 * i : ids_at + 20 * i + 20], crc, offset))
    return out


def _pack_entries(pack_dir: Path, name: str) -> list[_Entry] | None:
    """The entries of pack ``name`` as stored, or None if it is gone (merged by another)."""
    try:
        idx = (pack_dir / f"pack-{name}.idx").read_bytes()
        pack = (pack_dir / f"pack-{name}.pack").read_bytes()
    except FileNotFoundError:
        return None
    listed = sorted(read_index(idx), key=lambda e: e.offset)
    ends = [e.offset for e in listed[1:]] + [len(pack) - 20]
    out = []
    for e, end in zip(listed, ends, strict=True):
        body = pack[e.offset : end]
        if zlib.crc32(body) != e.crc:
            raise ValueError(f"pack-{name}: entry {e.oid.hex()} does not match its checksum")
        out.append(_Entry(e.oid, e.crc, body))
    return out


def merge_packs(pack_dir: Path, names: Sequence[str]) -> tuple[str, int] | None:
    """Copy the entries of packs ``names`` (full objects, as :func:`write_pack` makes) into
    one new durable pack, then :func:`retire` them; its name and object count (None: nothing
    left).

    Entries are copied as they are (nothing is inflated or deflated again). A pack another
    program removed meanwhile is skipped: its objects are in the pack that replaced it.
    """
    entries: dict[bytes, _Entry] = {}
    found = []
    for name in names:
        listed = _pack_entries(pack_dir, name)
        if listed is None:
            continue
        found.append(name)
        for e in listed:
            entries.setdefault(e.oid, e)
    if not entries:
        return None
    merged = PackWrite(pack_dir, list(entries.values())).install()
    retire(pack_dir, [name for name in found if name != merged])
    return merged, len(entries)


def retired_dir(pack_dir: Path) -> Path:
    """Where packs merged away wait to be deleted (``.git/mnote/retired``: in the git
    directory, so on the pack folder's file system)."""
    return pack_dir.parent.parent / "mnote" / "retired"


def retire(pack_dir: Path, names: Iterable[str]) -> None:
    """Take packs ``names`` out of ``pack_dir`` (each index first: Git sees no pack without
    one) into :func:`retired_dir`, then sync ``pack_dir``.

    They are not deleted yet: the writer's repository still has them open, and ext4 frees a
    deleted file when its last reference goes. For merged packs that was the writer's own
    object database, dropped when it takes the merge in: freeing them there would stall one
    command in every 16 landings. Files still linked here are only closed then;
    :func:`drop_retired` frees them after, on the merge thread.
    """
    retired = retired_dir(pack_dir)
    make_git_folders(retired)
    for name in names:
        for suffix in (".idx", ".rev", ".pack"):
            with contextlib.suppress(FileNotFoundError):  # (no .rev; removed meanwhile)
                os.rename(pack_dir / f"pack-{name}{suffix}", retired / f"pack-{name}{suffix}")
    fsync_dir(pack_dir)


def drop_retired(pack_dir: Path) -> None:
    """Delete the retired packs (once no repository of this process has them open)."""
    retired = retired_dir(pack_dir)
    try:
        names = os.listdir(retired)
    except FileNotFoundError:
        return
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(retired / name)


def staging_dir(pack_dir: Path) -> Path:
    """Where packs written by libgit2 wait until :func:`publish` moves them in (``.git/mnote/
    packing``: in the git directory, so on the pack folder's file system)."""
    return pack_dir.parent.parent / "mnote" / "packing"


def publish(staging: Path, pack_dir: Path) -> list[str]:
    """Move the packs libgit2 wrote in ``staging`` into ``pack_dir`` in Git's order: every
    file synced, then each pack before its index; the folder synced; ``staging`` removed.
    Returns the packs' names."""
    names = sorted(e[5:-5] for e in os.listdir(staging) if _PACK_NAME.match(e))
    files = [staging / f"pack-{n}{suffix}" for n in names for suffix in (".pack", ".idx")]
    fds = [os.open(path, os.O_RDONLY | os.O_CLOEXEC) for path in files]
    try:
        durable.sync_fds(fds)
    finally:
        for fd in fds:
            os.close(fd)
    for name in names:
        for suffix in (".pack", ".rev", ".idx"):  # the index last: Git sees no pack without it
            with contextlib.suppress(FileNotFoundError):
                os.rename(staging / f"pack-{name}{suffix}", pack_dir / f"pack-{name}{suffix}")
            if suffix == ".pack":
                faults.point("pack-published")
    fsync_dir(pack_dir)
    shutil.rmtree(staging, ignore_errors=True)
    return names


def recover(pack_dir: Path) -> None:
    """Finish or remove what an interrupted :func:`write_pack` or :func:`publish` left.

    A temporary index whose pack was already renamed into place was synced before that
    rename, so it is put into place too (from the staging folder as well); every other
    temporary file is deleted.
    """
    drop_retired(pack_dir)
    staging = staging_dir(pack_dir)
    if staging.is_dir():
        for entry in os.listdir(staging):
            pack = pack_dir / f"{entry.removesuffix('.idx')}.pack"
            if entry.endswith(".idx") and pack.exists() and not (pack_dir / entry).exists():
                os.rename(staging / entry, pack_dir / entry)
        shutil.rmtree(staging, ignore_errors=True)
        fsync_dir(pack_dir)
    try:
        names = os.listdir(pack_dir)
    except FileNotFoundError:
        return
    changed = False
    for entry in names:
        path = pack_dir / entry
        if entry.startswith(TMP_IDX):
            name = entry[len(TMP_IDX) :]
            if f"pack-{name}.pack" in names and f"pack-{name}.idx" not in names:
                os.rename(path, pack_dir / f"pack-{name}.idx")
            else:
                os.unlink(path)
            changed = True
        elif entry.startswith(TMP_PACK):
            os.unlink(path)
            changed = True
    if changed:
        fsync_dir(pack_dir)


def pack_names(pack_dir: Path) -> list[str]:
    """Names (checksums) of the packs in ``pack_dir`` that have an index."""
    try:
        listed = set(os.listdir(pack_dir))
    except FileNotFoundError:
        return []
    out = []
    for entry in listed:
        match = _PACK_NAME.match(entry)
        if match and f"pack-{match.group(1)}.idx" in listed:
            out.append(match.group(1))
    return sorted(out)
