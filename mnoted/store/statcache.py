"""Files known unchanged since they were last hashed: stat data, under Git's racy rule.

A write checks its page on disk against HEAD more than once (when the page is loaded,
before the commit, and before the file is replaced), and each check read and hashed the
whole file: three reads and hashes of a 1 MB page per edit. A file whose stat data (inode,
device, size, mode, mtime, ctime) equals that of a read whose blob id was kept holds the
same bytes, unless it was changed again within the same timestamp tick as the change
before that read (Git's "racily clean" entries). So a read is remembered only if it began
more than one tick after the file's last change; a file changed a moment ago is read again
until it has been quiet for a tick.

A large file read again before it was quiet (an agent editing the same 1 MB page back to
back: each write checks a file the previous one wrote a moment ago) is compared with the
bytes last seen at its path instead of being hashed again: the comparison is exact and
far cheaper than SHA-1.

The tick is the resolution of the kernel's coarse clock, which file timestamps are taken
from (1/HZ), counted twice; 20 ms where that clock is unknown. A file whose
times have no sub-second part lives on a file system with one- or two-second timestamps
and gets two seconds.
"""

from __future__ import annotations

import os
import sys
import time

# Python does not name CLOCK_REALTIME_COARSE; it is clock 5 on Linux.
_COARSE = getattr(time, "CLOCK_REALTIME_COARSE", 5 if sys.platform.startswith("linux") else None)
TICK_NS = 2 * int((time.clock_getres(_COARSE) if _COARSE is not None else 0.01) * 1e9)
COARSE_FS_TICK_NS = 2_000_000_000
LIMIT = 500_000
RECENT_FROM = 64 * 1024  # a file this large is compared with the bytes last seen, not rehashed

Key = tuple[int, int, int, int, int, int]
Stamp = tuple[int, int, int, int]


def stamp_of(st: os.stat_result) -> Stamp:
    """What tells one version of a file from another: inode, size, mtime and ctime. A file
    replaced by a rename has a new inode; one rewritten in place, a new ctime."""
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def stamp(path: str | os.PathLike[str]) -> Stamp | None:
    """:func:`stamp_of` the file at ``path``; None if there is none."""
    try:
        return stamp_of(os.stat(path))
    except FileNotFoundError:
        return None


def key_of(st: os.stat_result) -> Key:
    return (st.st_ino, st.st_dev, st.st_size, st.st_mode, st.st_mtime_ns, st.st_ctime_ns)


def quiet_since(st: os.stat_result, began_ns: int) -> bool:
    """Whether a read that began at ``began_ns`` came more than a tick after the last change."""
    changed = max(st.st_mtime_ns, st.st_ctime_ns)
    tick = COARSE_FS_TICK_NS if st.st_mtime_ns % 1_000_000_000 == 0 else TICK_NS
    return began_ns - changed > tick


class StatCache:
    """Path → (stat key, blob id) of files hashed when they had been quiet for a tick."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._known: dict[str, tuple[Key, str]] = {}
        self._limit = limit
        self._recent: tuple[str, bytes, str] | None = None  # path, bytes, their blob id

    def blob(self, rel: str, st: os.stat_result) -> str | None:
        """The blob id of ``rel`` if its stat data is what it was when last hashed."""
        known = self._known.get(rel)
        return known[1] if known is not None and known[0] == key_of(st) else None

    def known(self, rel: str) -> tuple[Key, str] | None:
        """The stat key and blob id ``rel`` had when last hashed, if remembered."""
        return self._known.get(rel)

    def recent(self, rel: str, data: bytes) -> str | None:
        """The blob id of ``data`` if it is, byte for byte, the large content last seen at
        ``rel`` (read there, or written there by the store)."""
        seen = self._recent
        return seen[2] if seen is not None and seen[0] == rel and seen[1] == data else None

    def saw(self, rel: str, data: bytes, blob: str) -> None:
        """``data`` (blob ``blob``) is at ``rel``, or is about to be: kept if it is large."""
        if len(data) >= RECENT_FROM:
            self._recent = (rel, data, blob)

    def stored_as(self, rel: str, key: Key, blob: str) -> None:
        """``rel``, remembered as read with stat data ``key``, is stored by Git as ``blob``
        (a clean filter's output, ``store.filters``): its checks compare that with HEAD."""
        known = self._known.get(rel)
        if known is not None and known[0] == key:
            self._known[rel] = (key, blob)

    def remember(self, rel: str, st: os.stat_result, blob: str, began_ns: int) -> None:
        """Keep ``blob`` for ``rel`` as read (with ``st`` of the fd read) from ``began_ns``."""
        if not quiet_since(st, began_ns):
            self._known.pop(rel, None)
            return
        if len(self._known) >= self._limit and rel not in self._known:
            del self._known[next(iter(self._known))]  # the oldest entry
        self._known[rel] = (key_of(st), blob)
