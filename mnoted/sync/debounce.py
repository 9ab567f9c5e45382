"""Aggregate filesystem events into dirty paths and folders, settled by timing.

Editors save in many steps (temp file + rename, rename aside + write new, truncate +
write, ...). :class:`Debouncer` does not work out what happened: it keeps which paths and
folders were touched, and hands them out once quiet for ``quiet_period`` (or
``max_delay`` after their first event). The store then decides what happened by content,
comparing each path on disk with the index.

What it does keep:

* ignored names (temp, swap and backup files, ``.git/``) never become dirty: a rename from
  one onto a path (``x.tmp`` -> ``x.md``) dirties the path only, a rename onto one
  (``x.md`` -> ``x.md~``) dirties the source only;
* a rename between two synced names dirties both and links them, so that they settle in
  the same batch (the store sees the delete and the add together: a rename);
* a path written (``IN_MODIFY``) and not yet closed waits ``close_timeout`` instead of
  the quiet period, so a slow writer is not committed half-way;
* folders made, deleted or moved, and folders whose ``.gitignore`` changed, are re-read
  whole (``rescan_dirs``) once no dirty path below them is still waiting.

It is sans-io: no threads, no clock, no filesystem. Callers pass ``now`` (any monotonic
seconds) and an ignore predicate; the watcher drives it from its thread, the tests from a
fake clock.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["DebounceConfig", "Debouncer", "EventKind", "FsEvent", "SettledBatch"]


class EventKind(StrEnum):
    """Normalized filesystem events, independent of their source."""

    CREATED = "created"
    MODIFIED = "modified"  # data written (inotify IN_MODIFY)
    CLOSED = "closed"  # a file opened for writing was closed (IN_CLOSE_WRITE)
    ATTRIB = "attrib"  # metadata changed (mode, mtime)
    DELETED = "deleted"
    MOVED = "moved"


@dataclass(frozen=True, slots=True)
class FsEvent:
    """One filesystem event on a workspace-relative POSIX path.

    ``dest`` is set for MOVED only. A move from or to outside the workspace
    arrives as CREATED / DELETED (that is how inotify reports it).
    """

    kind: EventKind
    path: str
    dest: str | None = None
    is_dir: bool = False


@dataclass(frozen=True, slots=True)
class SettledBatch:
    """Paths that became due together, plus folders to re-read whole.

    Compare each of ``paths`` (in the order of their first event; a rename's two paths
    together) with the index by content, then each folder of ``rescan_dirs``: inotify
    cannot list what a folder held when it was moved out or deleted, nor files written
    into a new folder before its watch existed.
    """

    paths: tuple[str, ...]
    rescan_dirs: tuple[str, ...] = ()
    first_event_at: float = 0.0
    last_event_at: float = 0.0
    settled_at: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.paths or self.rescan_dirs)


@dataclass(frozen=True, slots=True)
class DebounceConfig:
    """Timing of the aggregator, in seconds.

    ``quiet_period``: a path settles after this long without events.
    ``max_delay``: a path settles at the latest this long after its first event,
    even if events keep coming (a log being appended to).
    ``close_timeout``: after data was written (IN_MODIFY) and the file not yet
    closed, wait this long instead of ``quiet_period`` for the writer's close
    (bounded by ``max_delay``), so a slow writer is not committed half-way.
    ``coalesce``: once a path is due, wait this much longer so paths that fall
    due just after it settle in the same batch (a burst of 1,000 files becomes a
    handful of batches instead of hundreds). Adds at most this to every latency.
    """

    quiet_period: float = 0.25
    max_delay: float = 3.0
    close_timeout: float = 1.0
    coalesce: float = 0.05

    def __post_init__(self) -> None:
        if self.quiet_period <= 0 or self.max_delay <= 0 or self.close_timeout <= 0:
            raise ValueError("debounce periods must be positive")
        if self.coalesce < 0:
            raise ValueError("coalesce must not be negative")
        if self.max_delay < self.quiet_period:
            raise ValueError("max_delay must be at least quiet_period")


IgnoreFn = Callable[[str, bool], bool]


def _never_ignored(path: str, is_dir: bool) -> bool:
    return False


@dataclass(slots=True)
class _Dirty:
    first_at: float
    last_at: float
    seq: int
    writing: bool = False
    stamp: int = 0


@dataclass(slots=True)
class Debouncer:
    """Per-path quiet-period / max-delay aggregator with injected time.

    Feed :meth:`add`; ask :meth:`due` for what has settled at ``now``;
    :meth:`next_deadline` says when to ask next.
    """

    config: DebounceConfig = field(default_factory=DebounceConfig)
    ignore: IgnoreFn = _never_ignored
    _paths: dict[str, _Dirty] = field(default_factory=dict, init=False)
    _links: dict[str, set[str]] = field(default_factory=dict, init=False)  # rename partners
    _dirs: dict[str, _Dirty] = field(default_factory=dict, init=False)
    _heap: list[tuple[float, int, str, int]] = field(default_factory=list, init=False)
    _seq: itertools.count[int] = field(default_factory=itertools.count, init=False)
    _stamps: itertools.count[int] = field(default_factory=itertools.count, init=False)

    # -- input ---------------------------------------------------------------

    def add(self, event: FsEvent, now: float) -> bool:
        """Fold one event in; returns False when it was ignored."""
        if event.is_dir:
            return self._add_dir(event, now)
        if event.kind is EventKind.MOVED:
            if event.dest is None:
                raise ValueError("a MOVED event needs dest")
            kept = [p for p in (event.path, event.dest) if not self.ignore(p, False)]
            if not kept:
                return False
            for path in kept:
                self._touch(path, now, writing=False)
            if len(kept) == 2 and kept[0] != kept[1]:
                self._links.setdefault(kept[0], set()).add(kept[1])
                self._links.setdefault(kept[1], set()).add(kept[0])
            return True
        if self.ignore(event.path, False):
            return False
        writing: bool | None = None  # (unchanged)
        if event.kind is EventKind.MODIFIED:
            writing = True
        elif event.kind in (EventKind.CLOSED, EventKind.DELETED):
            writing = False
        self._touch(event.path, now, writing=writing)
        return True

    def add_all(self, events: Iterable[FsEvent], now: float) -> int:
        """Fold several events arriving at the same time; returns how many were kept."""
        return sum(self.add(event, now) for event in events)

    # -- output --------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When to call :meth:`due` next (the first deadline plus ``coalesce``), or None if idle."""
        heap = self._heap
        while heap:
            _, _, path, stamp = heap[0]
            dirty = self._paths.get(path)
            if dirty is not None and dirty.stamp == stamp:
                break
            heapq.heappop(heap)
        best = heap[0][0] if heap else None
        for d in self._dirs.values():
            dir_deadline = d.last_at + self.config.quiet_period
            if best is None or dir_deadline < best:
                best = dir_deadline
        return None if best is None else best + self.config.coalesce

    def due(self, now: float) -> SettledBatch | None:
        """Pop everything settled at ``now`` as one batch, or None."""
        settled: set[str] = set()
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, path, stamp = heapq.heappop(heap)
            dirty = self._paths.get(path)
            if dirty is None or dirty.stamp != stamp or path in settled:
                continue
            group = self._group(path)
            ready_at = self._group_deadline(group)
            if ready_at <= now:
                settled.update(group)
            else:
                heapq.heappush(heap, (ready_at, dirty.seq, path, dirty.stamp))
        return self._settle(settled, self._due_dirs(now, settled), now)

    def flush(self, now: float) -> SettledBatch | None:
        """Settle everything pending regardless of timing (shutdown, explicit sync)."""
        dirs = sorted(self._dirs, key=lambda d: self._dirs[d].seq)
        return self._settle(set(self._paths), dirs, now)

    def take(self, paths: Iterable[str], now: float) -> SettledBatch | None:
        """Settle the pending paths among ``paths`` now, with their rename partners
        (before a tool writes them)."""
        settled: set[str] = set()
        for path in paths:
            if path in self._paths and path not in settled:
                settled.update(self._group(path))
        return self._settle(settled, [], now)

    def is_pending(self, path: str) -> bool:
        """Whether ``path`` has events waiting for their quiet period."""
        return path in self._paths

    @property
    def pending_count(self) -> int:
        """Paths and folders waiting to settle."""
        return len(self._paths) + len(self._dirs)

    # -- folding -------------------------------------------------------------

    def _touch(self, path: str, now: float, *, writing: bool | None) -> None:
        dirty = self._paths.get(path)
        if dirty is None:
            dirty = _Dirty(now, now, next(self._seq))
            self._paths[path] = dirty
        else:
            dirty.last_at = max(dirty.last_at, now)
        if writing is not None:
            dirty.writing = writing
        dirty.stamp = next(self._stamps)
        heapq.heappush(self._heap, (self._deadline(dirty), dirty.seq, path, dirty.stamp))
        if path == ".gitignore" or path.endswith("/.gitignore"):
            # a changed .gitignore may un-ignore files nobody reported: re-read its folder
            self._dir(path.rpartition("/")[0], now)

    def _add_dir(self, event: FsEvent, now: float) -> bool:
        paths = [event.path]
        if event.kind is EventKind.MOVED and event.dest is not None:
            paths.append(event.dest)
        kept = False
        for path in paths:
            if path and not self.ignore(path, True):
                kept = True
                self._dir(path, now)
        return kept

    def _dir(self, path: str, now: float) -> None:
        d = self._dirs.get(path)
        if d is None:
            self._dirs[path] = _Dirty(now, now, next(self._seq))
        else:
            d.last_at = max(d.last_at, now)

    # -- timing --------------------------------------------------------------

    def _deadline(self, dirty: _Dirty) -> float:
        cfg = self.config
        wait = max(cfg.quiet_period, cfg.close_timeout) if dirty.writing else cfg.quiet_period
        return min(dirty.last_at + wait, dirty.first_at + cfg.max_delay)

    def _group(self, path: str) -> set[str]:
        """The path and every path linked to it by renames."""
        seen: set[str] = set()
        todo = [path]
        while todo:
            p = todo.pop()
            if p not in seen and p in self._paths:
                seen.add(p)
                todo.extend(self._links.get(p, ()))
        return seen

    def _group_deadline(self, group: set[str]) -> float:
        members = [self._paths[p] for p in group]
        latest = max(self._deadline(d) for d in members)
        return min(latest, min(d.first_at for d in members) + self.config.max_delay)

    def _due_dirs(self, now: float, settling: set[str]) -> list[str]:
        """Folders quiet for the quiet period with no unsettled path below them."""
        quiet = self.config.quiet_period
        ready = [p for p, d in self._dirs.items() if d.last_at + quiet <= now]
        out: list[str] = []
        for dir_path in ready:
            prefix = dir_path + "/" if dir_path else ""
            blockers = [
                d for p, d in self._paths.items() if p not in settling and p.startswith(prefix)
            ]
            if blockers:
                self._dirs[dir_path].last_at = max(self._deadline(d) for d in blockers) - quiet
            else:
                out.append(dir_path)
        out.sort(key=lambda p: self._dirs[p].seq)
        return out

    # -- settling ------------------------------------------------------------

    def _settle(self, settled: set[str], dirs: list[str], now: float) -> SettledBatch | None:
        if not settled and not dirs:
            return None
        dirty = [(self._paths.pop(p), p) for p in settled]
        for path in settled:
            for partner in self._links.pop(path, ()):
                partners = self._links.get(partner)
                if partners is not None:
                    partners.discard(path)
                    if not partners:
                        del self._links[partner]
        dirty += [(self._dirs.pop(d), d) for d in dirs]
        times = [t for d, _ in dirty for t in (d.first_at, d.last_at)]
        return SettledBatch(
            paths=tuple(p for _, p in sorted(dirty[: len(settled)], key=lambda x: x[0].seq)),
            rescan_dirs=tuple(dirs),
            first_event_at=min(times),
            last_event_at=max(times),
            settled_at=now,
        )
