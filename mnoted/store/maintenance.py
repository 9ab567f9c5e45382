"""Packing of loose objects, run in the background when the daemon is idle.

Commits made by Git or libgit2 outside the store leave every object as a loose file, and
many of them would leave hundreds of thousands. :func:`pack_loose_objects` puts the current
loose objects into one pack (fsynced, and moved into place pack first by
``packs.publish``), then deletes exactly those loose files. It opens its own Repository (a
pygit2 Repository must not cross threads) and never takes a lock the writer needs, so
writes go on while it runs. When more than :data:`MAX_PACKS` packs pile up, all but the
largest are merged into one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pygit2

from mnoted.errors import MnoteError
from mnoted.store import packs
from mnoted.store.atomic import fsync_dir, make_git_folders

log = logging.getLogger(__name__)
_FANOUT = re.compile(r"^[0-9a-f]{2}$")
_REST = re.compile(r"^[0-9a-f]{38}$")
MAX_PACKS = 16


@dataclass(frozen=True)
class PackReport:
    """What one maintenance run did."""

    packed: int
    removed_loose: int
    merged_packs: int


def loose_objects(gitdir: Path) -> list[str]:
    """Ids of the loose objects in ``gitdir``."""
    objects = gitdir / "objects"
    out: list[str] = []
    for fan in os.listdir(objects):
        if not _FANOUT.match(fan):
            continue
        with contextlib.suppress(OSError):
            out.extend(fan + rest for rest in os.listdir(objects / fan) if _REST.match(rest))
    return out


def _packs(gitdir: Path) -> list[Path]:
    """The packs that may be merged: not kept, and with their index (a landing puts a pack
    in place before its index, on the writer's thread, while maintenance runs)."""
    pack_dir = gitdir / "objects" / "pack"
    listed = [pack_dir / f"pack-{name}.pack" for name in packs.pack_names(pack_dir)]
    return sorted(p for p in listed if not p.with_suffix(".keep").exists())


def pack_object_ids(idx: Path) -> list[str]:
    """The object ids listed in a pack index (format version 1 or 2)."""
    data = idx.read_bytes()
    if data[:4] == b"\xfftOc":
        count = int.from_bytes(data[8 + 255 * 4 : 8 + 256 * 4], "big")
        start = 8 + 256 * 4
        return [data[start + 20 * i : start + 20 * (i + 1)].hex() for i in range(count)]
    count = int.from_bytes(data[255 * 4 : 256 * 4], "big")
    start = 256 * 4
    return [data[start + 24 * i + 4 : start + 24 * (i + 1)].hex() for i in range(count)]


def _merge_small_packs(gitdir: Path, found: list[Path]) -> int:
    """Merge every pack but the largest into one; return how many were merged.

    Rewriting only the smaller packs keeps the cost of a merge proportional to recent
    history, not to the whole repository (the largest pack is left as it is).
    """
    largest = max(found, key=lambda p: p.stat().st_size)
    small = [p for p in found if p != largest]
    oids = sorted({h for p in small for h in pack_object_ids(p.with_suffix(".idx"))})
    if _write_pack(gitdir, [pygit2.Oid(hex=h) for h in oids]) != len(oids):
        return 0
    packs.retire(gitdir / "objects" / "pack", [p.stem.removeprefix("pack-") for p in small])
    return len(small)


def _write_pack(gitdir: Path, oids: list[pygit2.Oid]) -> int:
    """One durable pack of ``oids`` made by libgit2's pack builder (deltas included), put in
    the pack folder by ``packs.publish``; how many objects it holds."""
    pack_dir = gitdir / "objects" / "pack"
    staging = packs.staging_dir(pack_dir)
    shutil.rmtree(staging, ignore_errors=True)  # a run killed before it published
    make_git_folders(staging)
    repo = pygit2.Repository(str(gitdir))

    def delegate(builder: pygit2.PackBuilder) -> None:
        for oid in oids:
            builder.add(oid)

    try:
        written = repo.pack(str(staging), pack_delegate=delegate)
    finally:
        # Now, not when the cycle collector frees it (a pygit2 Repository is part of a cycle,
        # and the daemon runs the collector seldom): it maps the packs it read, and those
        # merged away kept their disk space after they were deleted.
        repo.free()
    pack_dir.mkdir(exist_ok=True)
    packs.publish(staging, pack_dir)
    return written


def pack_loose_objects(gitdir: Path, *, min_objects: int = 1) -> PackReport:
    """Pack loose objects if there are at least ``min_objects``; merge packs if too many."""
    loose = loose_objects(gitdir)
    packed = removed = merged = 0
    if loose and len(loose) >= min_objects:
        oids = [pygit2.Oid(hex=h) for h in loose]
        packed = _write_pack(gitdir, oids)
        if packed == len(oids):  # every listed object is now in a durable pack
            touched: set[Path] = set()
            for h in loose:
                path = gitdir / "objects" / h[:2] / h[2:]
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                    removed += 1
                    touched.add(path.parent)
            for folder in touched:
                fsync_dir(folder)
    packs = _packs(gitdir)
    if len(packs) > MAX_PACKS:
        merged = _merge_small_packs(gitdir, packs)
    return PackReport(packed=packed, removed_loose=removed, merged_packs=merged)


class Maintainer:
    """A daemon thread that runs ``run`` once the workspace has been idle for a while.

    ``last_activity`` returns the monotonic time of the last write; the maintainer never
    runs while writes are recent, so it does not compete with them for the disk.
    """

    def __init__(
        self,
        run: Callable[[], object],
        last_activity: Callable[[], float],
        *,
        idle_seconds: float = 5.0,
        poll_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run = run
        self._last_activity = last_activity
        self._idle = idle_seconds
        self._poll = poll_seconds
        self._clock = clock
        self._stop = threading.Event()
        self._done_after = -1.0
        self._thread = threading.Thread(target=self._loop, name="mnoted-maintenance", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self._poll):
            last = self._last_activity()
            if last <= self._done_after or self._clock() - last < self._idle:
                continue
            try:
                self._run()
            except MnoteError as exc:  # the folder moved away, say: the runner says so too
                log.warning("background packing skipped: %s", exc.message)
            except Exception:  # a full disk, say: tried again after the next write
                log.exception("background packing failed; it runs again after the next write")
            self._done_after = last
