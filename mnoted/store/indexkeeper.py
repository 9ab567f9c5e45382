"""Git's index kept in step with HEAD for the paths mnoted commits.

A commit that leaves ``.git/index`` alone shows as a staged reversion in ``git status``, and
a person's ``git commit`` then would commit it. Each landing therefore sets its paths'
entries (:meth:`IndexKeeper.prepare` while the landing waits for the disk,
:meth:`IndexKeeper.install` once the branch has moved, ``store.indexfile``); where it cannot
(someone's ``index.lock``, an index the patch does not handle) the paths stay *pending* in
the sidecar and a refresh through libgit2 sets them in idle time (:meth:`IndexKeeper.flush`,
or :meth:`IndexKeeper.refresh_soon` on a thread of its own). ``docs/store.md``, *The Git
index*.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pygit2

from mnoted.errors import LockBusy, MnoteError, PathRejected, StorageError
from mnoted.store import (
    dirfd,
    durable,
    faults,
    gitindex,
    gitlock,
    indexfile,
    indexstat,
    treediff,
)
from mnoted.store.external import External
from mnoted.store.sidecar import Sidecar
from mnoted.store.statcache import StatCache
from mnoted.store.worktree import disk_file

log = logging.getLogger("mnoted.store")

SPARE = "mnote/index.spare"
"""The Git index the one in place replaced, kept to be written again (``IndexKeeper._token``)."""

INDEX_SHARE = 0.05
"""The most of the time background refreshes of the Git index may take while commands keep
coming: after one that took ``t`` seconds, the next starts no sooner than ``t / INDEX_SHARE``
seconds after it began. Git's index is rewritten whole, and the writer starts a refresh
whenever it has waited a moment for a command: without this bound, an agent writing just
slower than that would have the whole index rewritten after each of its writes, in a large
workspace most of the time (``docs/store.md``, *The Git index*)."""


@dataclass(slots=True)
class IndexWrite:
    """A Git index being written during a landing into a lock's ownership token (not yet
    the lock: a person's ``git`` goes on meanwhile), to be put in place: its bytes and their
    checksum, each on the fsync pool (both mostly without the GIL)."""

    token: str
    fd: int  # the token's, open for writing (and leased, if it is the spare)
    before: object  # the stamp of the index it is patched from
    index: indexfile.IndexFile  # patched (the pool's until installed or abandoned)
    entries: dict[str, gitindex.Entry]
    parts: list[bytes]  # the bytes before the checksum
    written: Future[None]
    checksum: Future[bytes]
    settled: bool = False  # installed or abandoned

    def finish(self) -> None:
        """Wait for both, write the checksum after the bytes and cut the file there (a
        spare may have been longer)."""
        try:
            self.written.result()
            digest = self.checksum.result()
            size = sum(len(b) for b in self.parts)
            if os.pwrite(self.fd, digest, size) != len(digest):
                raise OSError(errno.ENOSPC, "the Git index's checksum was not written")
            os.ftruncate(self.fd, size + len(digest))
        finally:
            os.close(self.fd)


class IndexKeeper:
    """The Git index of one workspace as the store keeps it: patched at landings, refreshed
    for what stays pending. Used by the workspace's writer thread only (a refresh started
    with :meth:`refresh_soon` runs on its own and is taken in by the next call)."""

    def __init__(
        self,
        root: Path,
        repo: pygit2.Repository,
        side: Sidecar,
        external: External,
        stats: StatCache,
        *,
        head_tree: Callable[[], pygit2.Tree | None],
        check: Callable[[], None],
        lock_wait: float,
    ) -> None:
        self.root = root
        self.gitdir = root / ".git"
        self._repo = repo
        self._side = side
        self._external = external
        self._stats = stats
        self._head_tree = head_tree
        self._check = check
        self._lock_wait = lock_wait
        self._git = gitindex.GitIndex(self.gitdir)
        # A refresh running on a thread of its own, and what it sets.
        self._job: tuple[Future[float], dict[str, gitindex.Entry]] | None = None
        self.next_refresh = 0.0  # (monotonic) no background refresh before (INDEX_SHARE)
        # .git/index as the store last wrote or read it (its stamp), patched at each landing
        self._file: tuple[object, indexfile.IndexFile] | None = None
        # The index before the one in place, kept to be written again (see _token): what it
        # holds, if known; and the stamp and bytes of the index the store put in place last.
        self._spare_path = str(self.gitdir / SPARE)
        self._spare: list[bytes] | None = None
        self._installed: tuple[object, list[bytes]] | None = None
        self._synced: dict[str, gitindex.Entry] = {}  # entries set at landings, still pending
        # ((ORIG_HEAD's tree, HEAD's tree), HEAD's entries of the paths between the two)
        self._raced: tuple[tuple[pygit2.Oid, pygit2.Oid], dict[str, gitindex.Entry]] | None = None

    def close(self) -> None:
        """Wait for a refresh still running on its thread; remove the spare."""
        if self._job is not None:
            with contextlib.suppress(Exception):  # (its errors were logged by the thread)
                self._job[0].result()
        _drop(self._spare_path)

    def conflicts(self) -> tuple[str, str] | None:
        """Unmerged entries in Git's index, as an operation under way: Git writes a merge's
        conflicts into the index and the files before it records ``MERGE_HEAD``, and a
        stash pop or a ``git apply --3way`` leaves them with no state file at all. Git's own
        ``commit`` refuses then; so does mnoted. The index is parsed again only when someone
        else wrote it (its stamp differs from the one this store wrote last)."""
        index_path = self.gitdir / "index"
        stamp = indexstat.stamp(index_path)
        if stamp is None:
            return None
        kept = self._file
        if kept is None or kept[0] != stamp:
            try:
                index = indexfile.IndexFile.parse(index_path.read_bytes())
            except (indexstat.Unsupported, OSError, ValueError, struct.error):
                return None  # (the landing falls back to libgit2's refresh for such an index)
            self._file = kept = (stamp, index)
        if not kept[1].conflicted:
            return None
        return (
            "resolving merge conflicts (unmerged entries in the Git index)",
            "resolve them and commit, or abort: git merge --abort (or git reset --merge)",
        )

    def _refreshed(self, entries: dict[str, gitindex.Entry]) -> None:
        """Carry the parsed index over a refresh of these entries instead of parsing it again (a
        cost in proportion to the workspace), if the refresh started from the file it was parsed
        from."""
        written = self._git.last_write
        if written is not None:
            self._carry(written[0], written[1], entries)

    def _carry(self, before: object, after: object, entries: dict[str, gitindex.Entry]) -> None:
        """:meth:`_refreshed` of a write of the index from ``before`` to ``after``."""
        if self._external.index_cache is None or self._external.index_cache[0] != before:
            return
        changes: dict[str, tuple[int, bytes] | None] = {}
        for path, entry in entries.items():
            changes[path] = None if entry is None else (entry[1], bytes.fromhex(entry[0]))
        index = self._external.index_cache[1]
        index.update(changes)
        self._external.index_cache = (after, index)

    def flush(self) -> None:
        """Make the Git index agree with HEAD for every path mnoted committed (waiting the
        store's lock wait for an ``index.lock`` held by someone else, then :class:`LockBusy`).
        """
        self._check()
        self.collect(block=True)
        entries = self._pending_entries()
        if not entries:
            return
        try:
            self._git.refresh(entries, wait=self._lock_wait)
        except OSError as exc:
            raise StorageError(
                f"the Git index could not be written: {exc.strerror or exc}", errno=exc.errno
            ) from exc
        self._written(entries)

    def refresh_soon(self) -> None:
        """Start :meth:`flush` on a thread of its own and return at once.

        The daemon's writer uses it: rewriting the index costs in proportion to the workspace
        (libgit2 writes it without holding the GIL), and on the writer's thread a write arriving
        meanwhile would wait for it. A ``index.lock`` held by someone else is not waited for.
        What it did is taken into account by the next call of either (the paths it set stay
        pending until then, and those committed again since stay pending after). Called again
        too soon after the last one (:data:`INDEX_SHARE`), it does nothing: the writer's idle
        loop calls it again a second later.
        """
        self._check()
        self.collect(block=False)
        if self._job is not None or time.monotonic() < self.next_refresh:
            return
        entries = self._pending_entries()
        if not entries:
            return
        job: Future[float] = Future()
        job.set_running_or_notify_cancel()

        def run() -> None:  # (a thread of its own while it runs: refreshes are rare)
            try:
                job.set_result(self._refresh_timed(entries))
            except BaseException as exc:
                job.set_exception(exc)

        threading.Thread(target=run, name="mnoted-index", daemon=True).start()
        self._job = (job, entries)

    def _refresh_timed(self, entries: dict[str, gitindex.Entry]) -> float:
        """:meth:`GitIndex.refresh` on the index's thread; when the next may begin."""
        began = time.monotonic()
        self._git.refresh(entries, wait=0.0)
        return began + (time.monotonic() - began) / INDEX_SHARE

    def _pending_entries(self) -> dict[str, gitindex.Entry]:
        """HEAD's entries for the paths whose Git index entry is still to be refreshed
        (those a landing set already are no longer pending); while a Git operation is under
        way, only those it leaves to mnoted (:meth:`_stale_beside_operation`)."""
        entries = gitindex.entries_at(self._head_tree(), self._side.index_pending())
        synced, self._synced = self._synced, {}
        kept = self._file
        if kept is not None and kept[0] == indexstat.stamp(self.gitdir / "index"):
            done = [p for p, e in entries.items() if p in synced and synced[p] == e]
        elif entries:
            # Someone wrote the index since (a `git status`; or a `git merge` that writes back
            # what it read before the landing set these): those it holds as HEAD has them
            # are set, the others are set again (rewriting it for nothing would hold
            # index.lock against the person's next `git` command).
            index = self._external.index_stat()
            done = [p for p, e in entries.items() if index.agrees(p, e)]
        else:
            done = []
        if done:
            self._side.clear_index_pending(done)
            for path in done:
                del entries[path]
        state = self._repo.state()
        if state == pygit2.enums.RepositoryState.MERGE:
            entries = {**self._raced_merge(), **entries}
        if state != pygit2.enums.RepositoryState.NONE:
            entries = self._stale_beside_operation(entries)
        return entries

    def _raced_merge(self) -> dict[str, gitindex.Entry]:
        """HEAD's entries for the paths that changed between ``ORIG_HEAD`` (the HEAD a merge
        read as it began) and HEAD, where the index does not hold them. A landing between the
        merge's reading of the index and its writing it back was set and is pending no more;
        the merge then wrote the older entry back (the diff is empty unless a landing raced
        it: mnoted refuses to commit while a merge is under way)."""
        try:
            orig = self._repo.revparse_single("ORIG_HEAD").peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError):
            return {}
        head = self._head_tree()
        if head is None:
            return {}
        key = (orig.tree_id, head.id)
        if self._raced is None or self._raced[0] != key:  # (files only: the rest is refused
            # on disk by _stale_beside_operation; folders both trees share are not walked)
            paths = [path for path, _ in treediff.changed_files(self._repo, orig.tree, head)]
            self._raced = (key, gitindex.entries_at(head, paths))
        index = self._external.index_stat()
        return {p: e for p, e in self._raced[1].items() if not index.agrees(p, e)}

    def _stale_beside_operation(
        self, entries: dict[str, gitindex.Entry]
    ) -> dict[str, gitindex.Entry]:
        """Of the pending entries, while a merge (or the like) owns the index, those only
        the index holds back: no conflict there, and the disk holding HEAD's version, or
        no file where HEAD has none (a landing that raced the merge's start; its abort
        refuses while the entry is stale, and its commit would revert the landing).
        A path the merge resolved or left in conflict is the merge's."""
        index = self._external.index_stat()
        out: dict[str, gitindex.Entry] = {}
        for path, entry in entries.items():
            if path in index.unmerged:
                continue
            try:
                found = disk_file(self.root, path, self._stats)
            except PathRejected:
                continue
            if entry is None:
                at_head = found is None
            else:
                at_head = found is not None and found.blob == entry[0]
            if at_head:
                out[path] = entry
        return out

    def prepare(self, commit: str, paths: Iterable[str]) -> IndexWrite | None:
        """Start writing the Git index with the entries of the paths a landing writes set to
        ``commit``'s, on the fsync pool while the landing goes on (the checksum and the
        write, most of its cost, run without the GIL). It is written into the ownership
        token of an ``index.lock`` not yet taken: the lock is taken, and the file put in
        place, by :meth:`install` once the branch has moved (:meth:`abandon` drops it). A
        person's ``git status`` then never shows a staged reversion of the landing, nor does
        their ``git commit`` commit one (``store.indexfile``); their ``git`` finds the index
        locked only for that moment. None while a refresh of the index runs."""
        tree = self._repo[commit].peel(pygit2.Tree)
        entries = gitindex.entries_at(tree, dict.fromkeys(paths))
        if not entries:
            return None
        self.collect(block=False)
        if self._job is not None:  # (it holds index.lock; its paths are set after it)
            return None
        index_path = self.gitdir / "index"
        before = indexstat.stamp(index_path)
        kept, self._file = self._file, None  # (the landing's until installed or abandoned)
        try:
            if kept is not None and kept[0] == before:
                index = kept[1]
            else:
                index = indexfile.IndexFile.parse(index_path.read_bytes())
            if index.conflicted:  # (the person's conflicts: theirs to resolve, left alone)
                raise indexstat.Unsupported("the Git index holds unmerged entries")
            index.set(entries)
            parts = index.parts()
            token, fd, old = self._token(index_path)
        except (indexstat.Unsupported, OSError, ValueError, struct.error) as exc:
            log.info("the Git index is refreshed later: %s", exc)
            return None
        return IndexWrite(
            token,
            fd,
            before,
            index,
            entries,
            parts,
            durable.run(indexfile.write_parts, fd, parts, old),
            durable.run(index.checksum, parts),
        )

    def _token(self, index_path: Path) -> tuple[str, int, list[bytes] | None]:
        """The ownership token a landing writes the index into, its fd and what it holds.

        The spare (the index the one in place replaced, kept under ``.git/mnote/``) is taken
        where no one has it open or mapped (a ``git status`` begun before it was replaced
        may still read it): it is leased until written, and only the blocks changed since it
        was in place are written again. Else a new file: then the whole index is written
        (megabytes in a large workspace) and the replaced one's pages are freed, which on a
        small machine cost a write more than the rest of the index's upkeep."""
        old, self._spare = self._spare, None
        try:
            token, fd = gitlock.make_token(self.gitdir, index_path, reuse=self._spare_path)
        except FileNotFoundError:
            return (*gitlock.make_token(self.gitdir, index_path), None)
        if os.fstat(fd).st_nlink == 1 and dirfd.alone(fd):  # (2 links: it is .git/index too)
            return token, fd, old
        _drop(token)
        durable.close_later(fd)
        return (*gitlock.make_token(self.gitdir, index_path), None)

    def install(self, prepared: IndexWrite) -> None:
        """Put a prepared index in place, unless someone wrote the index since it was read
        or holds its lock (the paths stay pending for a refresh). The replaced file becomes
        the spare; where it cannot, it is closed on the fsync pool: its last name gone,
        freeing its pages (megabytes in a large workspace) would otherwise be paid before
        the answer."""
        prepared.settled = True
        index_path = self.gitdir / "index"
        try:
            prepared.finish()
            held = gitlock.take(self.gitdir, index_path, prepared.token, wait=0.0)
        except Exception as exc:  # (the branch has moved: the index is refreshed later)
            _drop(prepared.token)
            expected = (LockBusy, StorageError, indexstat.Unsupported, OSError, ValueError)
            known = isinstance(exc, (*expected, struct.error))
            log.log(
                logging.INFO if known else logging.WARNING,
                "the Git index is refreshed later: %s",
                exc,
                exc_info=not known,
            )
            return
        if indexstat.stamp(index_path) != prepared.before:  # (a `git add` meanwhile)
            held.release()
            return
        replaced = None
        try:
            os.link(index_path, self._spare_path)
            last = self._installed
            self._spare = last[1] if last is not None and last[0] == prepared.before else None
        except OSError:  # (then its pages are freed on the pool)
            with contextlib.suppress(OSError):
                replaced = os.open(index_path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            held.commit(sync=False)
        except OSError as exc:
            held.release()
            if replaced is None:  # (the spare is .git/index: never to be written into)
                self._spare = None
                _drop(self._spare_path)
            log.info("the Git index is refreshed later: %s", exc)
            return
        finally:
            if replaced is not None:
                durable.close_later(replaced)
        after = indexstat.stamp(index_path)
        self._installed = (after, prepared.parts)
        self._file = (after, prepared.index)
        self._synced.update(prepared.entries)
        self._carry(prepared.before, after, prepared.entries)

    @staticmethod
    def abandon(prepared: IndexWrite) -> None:
        """Drop a prepared index not installed (the branch did not move): the index stays
        as it was."""
        if prepared.settled:
            return
        prepared.settled = True
        with contextlib.suppress(Exception):  # (whatever it was, nothing is put in place)
            prepared.finish()
        _drop(prepared.token)

    def collect(self, *, block: bool) -> None:
        """Take in a background refresh that ended (or wait for it with ``block``)."""
        if self._job is None or not (block or self._job[0].done()):
            return
        job, entries = self._job
        self._job = None
        try:
            self.next_refresh = job.result()
        except (MnoteError, OSError) as exc:  # someone's index.lock, a full disk: later
            log.info("the Git index was not refreshed in the background: %s", exc)
            return
        self._written(entries)

    def _written(self, entries: dict[str, gitindex.Entry]) -> None:
        """After a refresh: the parsed index carried over, and the paths still at the
        entries set are no longer pending."""
        self._refreshed(entries)
        faults.point("index-written")
        now = gitindex.entries_at(self._head_tree(), entries)
        self._side.clear_index_pending(
            [path for path, entry in entries.items() if now[path] == entry]
        )


def _drop(token: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(token)
