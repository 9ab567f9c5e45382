"""Turn a stream of filesystem events into settled changes, one per logical save.

Editors save in many steps (temp file + rename, rename aside + write new,
truncate + write, ...). :class:`Debouncer` folds the events of each path until
the path has been quiet for ``quiet_period`` (or ``max_delay`` has passed since
its first event), then hands out one :class:`SettledChange` per path whose
kind says what happened to it across the whole window.

It is sans-io: no threads, no clock, no filesystem. Callers pass ``now`` (any
monotonic seconds) and an ignore predicate; the watcher drives it from a
thread, the tests from a fake clock.

How a path's window is folded
-----------------------------
Each pending path has an entry with:

* ``origin``: where the content now at the path came from at the start of the
  window (the path itself; another tracked path it was renamed from; or None
  for new content).
* ``was_present``: whether the path had a file at the start of the window
  (True / False / None = the events do not say).
* ``exists``: whether it has a file now.

A rename onto or off an ignored name (``x.md`` -> ``x.md~``, ``x.tmp`` ->
``x.md``) is a delete / a write of the tracked side only. A rename between
two tracked names moves the entry and leaves a "vacated" entry behind. At
settle time: content whose origin is another path is a rename, unless a new
file has since appeared at the origin ("rename aside and write a new file",
vim's pattern), which makes it a modify of the origin instead.
Linked entries (a rename's source and target) settle together.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "ChangeKind",
    "DebounceConfig",
    "Debouncer",
    "EventKind",
    "FsEvent",
    "SettledBatch",
    "SettledChange",
]


class EventKind(StrEnum):
    """Normalized filesystem events, independent of watchdog."""

    CREATED = "created"
    MODIFIED = "modified"  # data written (inotify IN_MODIFY)
    CLOSED = "closed"  # a file opened for writing was closed (IN_CLOSE_WRITE)
    ATTRIB = "attrib"  # metadata changed (mode, mtime)
    DELETED = "deleted"
    MOVED = "moved"


class ChangeKind(StrEnum):
    """What a settled path went through, seen from the start of its window."""

    CREATED = "created"
    MODIFIED = "modified"
    DELETED = "deleted"
    RENAMED = "renamed"


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
class SettledChange:
    """One path's net change over its window; ``old_path`` is set for RENAMED.

    MODIFIED also covers "replaced by a rename from a temp file" when the events
    do not show whether the path existed before; the store decides by content
    against the index whether that is an addition.
    """

    kind: ChangeKind
    path: str
    old_path: str | None = None


@dataclass(frozen=True, slots=True)
class SettledBatch:
    """Changes that became due together, plus folders to re-read whole.

    Apply ``changes`` in order (renames first), then compare each folder of
    ``rescan_dirs`` with the index by content: inotify cannot list what a folder
    held when it was moved out or deleted, nor files written into a new folder
    before its watch existed.
    """

    changes: tuple[SettledChange, ...]
    rescan_dirs: tuple[str, ...] = ()
    first_event_at: float = 0.0
    last_event_at: float = 0.0
    settled_at: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.changes or self.rescan_dirs)


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
class _Entry:
    path: str
    origin: str | None
    was_present: bool | None
    exists: bool
    first_at: float
    last_at: float
    seq: int
    writing: bool = False
    stamp: int = 0


@dataclass(slots=True)
class _DirEntry:
    first_at: float
    last_at: float
    seq: int


# Order inside a batch: renames first (they free and take paths), then deletes, then writes.
_RANK = {
    ChangeKind.RENAMED: 0,
    ChangeKind.DELETED: 1,
    ChangeKind.MODIFIED: 2,
    ChangeKind.CREATED: 2,
}


@dataclass(slots=True)
class Debouncer:
    """Per-path quiet-period / max-delay aggregator with injected time.

    Feed :meth:`add`; ask :meth:`due` for what has settled at ``now``;
    :meth:`next_deadline` says when to ask next.
    """

    config: DebounceConfig = field(default_factory=DebounceConfig)
    ignore: IgnoreFn = _never_ignored
    _entries: dict[str, _Entry] = field(default_factory=dict, init=False)
    _carriers: dict[str, str] = field(default_factory=dict, init=False)  # origin -> carrier path
    _dirs: dict[str, _DirEntry] = field(default_factory=dict, init=False)
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
            src_ignored = self.ignore(event.path, False)
            dst_ignored = self.ignore(event.dest, False)
            if src_ignored and dst_ignored:
                return False
            if src_ignored:
                self._replace(event.dest, now)
            elif dst_ignored:
                self._delete(event.path, now)
            else:
                self._move(event.path, event.dest, now)
            self._note_gitignore(event.path, now)
            self._note_gitignore(event.dest, now)
            return True
        if self.ignore(event.path, False):
            return False
        if event.kind is EventKind.CREATED:
            self._create(event.path, now)
        elif event.kind is EventKind.DELETED:
            self._delete(event.path, now)
        else:
            self._write(event.path, event.kind, now)
        self._note_gitignore(event.path, now)
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
            entry = self._entries.get(path)
            if entry is not None and entry.stamp == stamp:
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
        settled: dict[str, _Entry] = {}
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, path, stamp = heapq.heappop(heap)
            entry = self._entries.get(path)
            if entry is None or entry.stamp != stamp or path in settled:
                continue
            group = self._group(path)
            ready_at = self._group_deadline(group)
            if ready_at <= now:
                for member in group:
                    settled[member.path] = member
            else:
                heapq.heappush(heap, (ready_at, entry.seq, path, entry.stamp))
        return self._settle(settled, self._due_dirs(now, settled), now)

    def flush(self, now: float) -> SettledBatch | None:
        """Settle everything pending regardless of timing (shutdown, explicit sync)."""
        settled = dict(self._entries)
        dirs = sorted(self._dirs, key=lambda d: self._dirs[d].seq)
        return self._settle(settled, dirs, now)

    def take(self, paths: Iterable[str], now: float) -> SettledBatch | None:
        """Settle the pending changes touching ``paths`` now (before a tool writes them)."""
        settled: dict[str, _Entry] = {}
        for path in paths:
            if path in self._entries and path not in settled:
                for member in self._group(path):
                    settled[member.path] = member
        return self._settle(settled, [], now)

    def is_pending(self, path: str) -> bool:
        """Whether ``path`` has events waiting for their quiet period."""
        return path in self._entries

    @property
    def pending_count(self) -> int:
        """Paths and folders waiting to settle."""
        return len(self._entries) + len(self._dirs)

    # -- folding -------------------------------------------------------------

    def _touch(self, path: str, now: float, origin: str | None, was_present: bool) -> _Entry:
        """Get ``path``'s entry (new ones start with ``origin`` / ``was_present``)."""
        entry = self._entries.get(path)
        if entry is None:
            entry = _Entry(path, origin, was_present, True, now, now, next(self._seq))
            self._entries[path] = entry
            self._link(entry)
        else:
            entry.last_at = max(entry.last_at, now)
        return entry

    def _create(self, path: str, now: float) -> None:
        entry = self._touch(path, now, None, False)
        entry.exists = True
        self._schedule(entry)

    def _write(self, path: str, kind: EventKind, now: float) -> None:
        entry = self._touch(path, now, path, True)
        entry.exists = True
        if kind is EventKind.MODIFIED:
            entry.writing = True
        elif kind is EventKind.CLOSED:
            entry.writing = False
        self._schedule(entry)

    def _replace(self, path: str, now: float) -> None:
        """A rename from an ignored temp name onto ``path``: an editor's safe save."""
        entry = self._touch(path, now, path, True)
        entry.exists = True
        entry.writing = False
        self._schedule(entry)

    def _delete(self, path: str, now: float) -> None:
        entry = self._touch(path, now, path, True)
        entry.exists = False
        entry.writing = False
        self._schedule(entry)

    def _move(self, src: str, dst: str, now: float) -> None:
        if src == dst:
            return
        moved = self._entries.get(src)
        if moved is not None:
            self._unlink(moved)
            del self._entries[src]
            lineage, src_was_present, first_at = moved.origin, moved.was_present, moved.first_at
        else:
            lineage, src_was_present, first_at = src, True, now
        # What stays behind at src: a vacated path whose content went to dst.
        vacated = _Entry(src, None, src_was_present, False, first_at, now, next(self._seq))
        self._entries[src] = vacated
        self._schedule(vacated)

        replaced = self._entries.pop(dst, None)
        if replaced is not None:
            # Whatever dst carried is overwritten; if it came from elsewhere, that origin
            # now has no carrier and settles as deleted (see _settle).
            self._unlink(replaced)
            dst_was_present = replaced.was_present
            first_at = min(first_at, replaced.first_at)
        else:
            dst_was_present = None
        carrier = _Entry(dst, lineage, dst_was_present, True, first_at, now, next(self._seq))
        self._entries[dst] = carrier
        self._link(carrier)
        self._schedule(carrier)

    def _link(self, entry: _Entry) -> None:
        if entry.origin is not None and entry.origin != entry.path:
            self._carriers[entry.origin] = entry.path

    def _unlink(self, entry: _Entry) -> None:
        if entry.origin is not None and self._carriers.get(entry.origin) == entry.path:
            del self._carriers[entry.origin]

    def _add_dir(self, event: FsEvent, now: float) -> bool:
        paths = [event.path]
        if event.kind is EventKind.MOVED and event.dest is not None:
            paths.append(event.dest)
        kept = False
        for path in paths:
            if not path or self.ignore(path, True):
                continue
            kept = True
            d = self._dirs.get(path)
            if d is None:
                self._dirs[path] = _DirEntry(now, now, next(self._seq))
            else:
                d.last_at = max(d.last_at, now)
        return kept

    def _note_gitignore(self, path: str, now: float) -> None:
        """A changed .gitignore may un-ignore files nobody reported: re-read its folder."""
        if path == ".gitignore" or path.endswith("/.gitignore"):
            parent = path.rpartition("/")[0]
            d = self._dirs.get(parent)
            if d is None:
                self._dirs[parent] = _DirEntry(now, now, next(self._seq))
            else:
                d.last_at = max(d.last_at, now)

    # -- timing --------------------------------------------------------------

    def _deadline(self, entry: _Entry) -> float:
        cfg = self.config
        wait = max(cfg.quiet_period, cfg.close_timeout) if entry.writing else cfg.quiet_period
        return min(entry.last_at + wait, entry.first_at + cfg.max_delay)

    def _schedule(self, entry: _Entry) -> None:
        entry.stamp = next(self._stamps)
        heapq.heappush(self._heap, (self._deadline(entry), entry.seq, entry.path, entry.stamp))

    def _group(self, path: str) -> list[_Entry]:
        """The entry and every entry linked to it by a rename (source <-> target)."""
        seen: dict[str, _Entry] = {}
        todo = [path]
        while todo:
            p = todo.pop()
            if p in seen:
                continue
            entry = self._entries.get(p)
            if entry is None:
                continue
            seen[p] = entry
            if entry.origin is not None and entry.origin != p:
                todo.append(entry.origin)
            carrier = self._carriers.get(p)
            if carrier is not None:
                todo.append(carrier)
        return list(seen.values())

    def _group_deadline(self, group: list[_Entry]) -> float:
        latest = max(self._deadline(e) for e in group)
        cap = min(e.first_at for e in group) + self.config.max_delay
        return min(latest, cap)

    def _due_dirs(self, now: float, settling: dict[str, _Entry]) -> list[str]:
        """Folders quiet for the quiet period with no unsettled entry below them."""
        quiet = self.config.quiet_period
        ready = [p for p, d in self._dirs.items() if d.last_at + quiet <= now]
        if not ready:
            return []
        out: list[str] = []
        for dir_path in ready:
            prefix = dir_path + "/" if dir_path else ""
            blockers = [
                e
                for p, e in self._entries.items()
                if p not in settling
                and (p.startswith(prefix) or (e.origin is not None and e.origin.startswith(prefix)))
            ]
            if blockers:
                d = self._dirs[dir_path]
                d.last_at = max(self._deadline(e) for e in blockers) - quiet
            else:
                out.append(dir_path)
        out.sort(key=lambda p: self._dirs[p].seq)
        return out

    # -- settling ------------------------------------------------------------

    def _settle(
        self, settled: dict[str, _Entry], dirs: list[str], now: float
    ) -> SettledBatch | None:
        if not settled and not dirs:
            return None
        times: list[float] = []
        changes: list[tuple[int, int, SettledChange]] = []

        def holds_file(path: str) -> bool:
            entry = self._entries.get(path)
            return entry is not None and entry.exists

        def rewritten(path: str) -> bool:
            """A new file (not renamed from elsewhere) now sits at ``path``."""
            entry = self._entries.get(path)
            return entry is not None and entry.exists and entry.origin is None

        def content_lives_on(path: str) -> bool:
            """The content ``path`` had at the window's start sits at some path now."""
            carrier = self._carriers.get(path)
            return carrier is not None and holds_file(carrier)

        def was_present(path: str) -> bool | None:
            entry = self._entries.get(path)
            return entry.was_present if entry is not None else True

        candidates: dict[str, int] = {}
        for entry in settled.values():
            times.extend((entry.first_at, entry.last_at))
            path, origin = entry.path, entry.origin
            candidates.setdefault(path, entry.seq)
            if origin is not None:
                candidates.setdefault(origin, entry.seq)
            if not entry.exists:
                continue
            if origin is not None and origin != path and not rewritten(origin):
                change = SettledChange(ChangeKind.RENAMED, path, origin)
            elif origin == path or entry.was_present:
                change = SettledChange(ChangeKind.MODIFIED, path)
            else:
                change = SettledChange(ChangeKind.CREATED, path)
            changes.append((_RANK[change.kind], entry.seq, change))
        # A path is deleted when it has no file now, its starting content lives nowhere,
        # and it may have had a file at the start: "unknown" counts, since losing a
        # delete is worse than reporting one for a path the store never tracked.
        for path, seq in candidates.items():
            if holds_file(path) or content_lives_on(path) or was_present(path) is False:
                continue
            change = SettledChange(ChangeKind.DELETED, path)
            changes.append((_RANK[ChangeKind.DELETED], seq, change))
        for path in settled:
            entry = self._entries.pop(path)
            self._unlink(entry)
        for dir_path in dirs:
            d = self._dirs.pop(dir_path)
            times.extend((d.first_at, d.last_at))
        if not changes and not dirs:
            return None
        changes.sort(key=lambda item: (item[0], item[1]))
        return SettledBatch(
            changes=tuple(c for _, _, c in changes),
            rescan_dirs=tuple(dirs),
            first_event_at=min(times),
            last_event_at=max(times),
            settled_at=now,
        )
