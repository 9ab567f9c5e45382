"""The store's upkeep of its objects: its packs merged by levels, loose objects packed.

Each landing writes one pack (:mod:`mnoted.store.packs`); :class:`Upkeep` keeps the packs
the store wrote by merge level and merges a full level into one pack of the next on a
thread of its own, so a daemon that never idles keeps a few dozen packs, not thousands.
:meth:`Upkeep.maintenance` (any thread, its own Repository) packs loose objects; the two
take turns on a lock and the writer never waits for maintenance (it skips a merge). It
owns the staging of objects not yet landed, which a fresh object database takes over.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pygit2

from mnoted.store import packs, refs, trees
from mnoted.store.maintenance import PackReport, pack_loose_objects

_Merged = tuple[str, int] | bool | None  # a merge's pack and size; None: nothing; False: skipped
_STAGING_PRIORITY = 2
"""libgit2's pack backend has priority 2 and its loose backend 1; backends of equal priority
keep the order they were added in, so reads try the packs first, then the staged objects
(Python), then loose files, and writes go to the first backend that writes: the staging."""
PACKS_PER_LEVEL = 16
"""The store's own packs are merged by sixteen: sixteen landings' packs into one, sixteen of
those into one, ... so a daemon that never idles keeps a few dozen packs, not thousands."""
log = logging.getLogger("mnoted.store")


class Upkeep:
    """The writer's packs by level, their merges, and the repository's object database."""

    def __init__(self, gitdir: Path, repo: pygit2.Repository) -> None:
        self._gitdir = gitdir
        self._repo = repo
        self.pack_dir = gitdir / "objects" / "pack"
        self.staging = packs.Staging(None)  # new objects, in memory until they land
        self.levels: list[list[str]] = [[]]  # the packs this store wrote, by merge level
        self.odb_stale = False  # maintenance() removed packs the repository still lists
        self.merge_thread: ThreadPoolExecutor | None = None  # merges packs (`upkeep`)
        self._merge_job: tuple[Future[_Merged], int, list[str]] | None = None
        self._pack_lock = threading.Lock()  # maintenance() and the writer's merges

    def close(self) -> None:
        """Wait for a merge under way (its files are not left half made)."""
        if self.merge_thread is not None:
            self.merge_thread.shutdown(wait=True)

    def maintenance(self, *, min_objects: int = 1) -> PackReport:
        """Pack loose objects, merge packs (any thread; uses its own Repository).
        :class:`WorkspaceInvalid` if the Git directory is gone (its folder moved away)."""
        if not self._gitdir.is_dir():
            raise refs.gone(self._gitdir)
        with self._pack_lock:
            report = pack_loose_objects(self._gitdir, min_objects=min_objects)
            if report.merged_packs:
                self.odb_stale = True
            return report

    def merge_packs(self, at: int, *, wait: bool) -> None:
        """Merge a level of the store's packs that holds ``at`` packs or more into one pack
        of the next level, on the merge thread; with ``wait``, every such level, waiting.

        Skipped while :meth:`maintenance` runs (it merges packs itself); a failure only leaves
        more packs, so it is logged, never raised to the commands that already landed.
        A merge that ended is taken in by :meth:`upkeep` (the repository's objects are
        opened again then, after the answers), or here when a level is full.
        """
        while True:
            level = next((i for i, names in enumerate(self.levels) if len(names) >= at), None)
            if level is None:
                return
            if self._merge_job is None:
                names, self.levels[level] = self.levels[level], []
                self._merge_job = (self.merger().submit(self._merge, names), level, names)
            if not wait or not self.collect_merge(block=True):
                return

    def _merge(self, names: list[str]) -> _Merged:
        """On the merge thread: :func:`packs.merge_packs`; False if maintenance is running."""
        if not self._pack_lock.acquire(blocking=False):
            return False
        try:
            return packs.merge_packs(self.pack_dir, names)
        finally:
            self._pack_lock.release()

    def collect_merge(self, *, block: bool) -> bool:
        """Take in a merge that ended (or wait for it with ``block``): the merged pack joins
        the next level and the repository forgets the packs merged away. False if it failed
        or was skipped (its packs go back to their level) or none had ended."""
        if self._merge_job is None or not (block or self._merge_job[0].done()):
            return False
        job, level, names = self._merge_job
        self._merge_job = None
        try:
            done = job.result()
        except (OSError, ValueError) as exc:
            log.warning("merging packs failed (they stay as they are): %s", exc)
            done = False
        if done is False:
            self.levels[level][:0] = names
            return False
        if isinstance(done, tuple):
            if level + 1 == len(self.levels):
                self.levels.append([])
            self.levels[level + 1].append(done[0])
        self.reopen_objects()
        return True

    def reopen_objects(self, *, retired: bool = True) -> None:
        """Give the repository a fresh object database: libgit2 keeps listing (and holding
        open) packs that were merged away, and would search them on every miss. With
        ``retired``, those packs are deleted next, on the merge thread (:func:`packs.retire`
        says why not before)."""
        self.odb_stale = False
        self.staging = packs.Staging(self.staging)  # a backend belongs to one database
        odb = pygit2.Odb(trees.pinned(str(self._gitdir / "objects")))
        odb.add_backend(self.staging, _STAGING_PRIORITY)
        self._repo.set_odb(odb)
        if retired:
            self.merger().submit(packs.drop_retired, self.pack_dir)

    def merger(self) -> ThreadPoolExecutor:
        """The merge thread (started the first time)."""
        if self.merge_thread is None:
            self.merge_thread = ThreadPoolExecutor(1, thread_name_prefix="mnoted-packs")
        return self.merge_thread
