"""The stat cache keeps a file's hash only when no same-tick change could hide behind it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from mnoted.store import statcache
from mnoted.store.statcache import StatCache


def _stat(path: Path) -> os.stat_result:
    return os.stat(path, follow_symlinks=False)


def test_a_quiet_file_is_known_until_its_stat_data_changes(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_bytes(b"one\n")
    time.sleep(statcache.TICK_NS / 1e9 + 0.01)
    cache = StatCache()
    cache.remember("a.md", _stat(path), "blob1", time.time_ns())
    assert cache.blob("a.md", _stat(path)) == "blob1"
    with path.open("r+b") as fh:  # in place, same size
        fh.write(b"two\n")
    assert cache.blob("a.md", _stat(path)) is None


def test_a_file_changed_within_a_tick_of_the_read_is_not_kept(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_bytes(b"one\n")
    cache = StatCache()
    cache.remember("a.md", _stat(path), "blob1", time.time_ns())  # read at once: racy
    assert cache.blob("a.md", _stat(path)) is None
    assert cache.known("a.md") is None


def test_whole_second_timestamps_need_two_quiet_seconds(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_bytes(b"one\n")
    second = (time.time_ns() // 1_000_000_000 - 1) * 1_000_000_000
    os.utime(path, ns=(second, second))  # as a file system with one-second times has it
    st = _stat(path)
    changed = max(st.st_mtime_ns, st.st_ctime_ns)
    assert not statcache.quiet_since(st, changed + 500_000_000)
    assert statcache.quiet_since(st, changed + statcache.COARSE_FS_TICK_NS + 1)


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_bytes(b"one\n")
    time.sleep(statcache.TICK_NS / 1e9 + 0.01)
    cache = StatCache(limit=3)
    for n in range(5):
        cache.remember(f"f{n}.md", _stat(path), f"b{n}", time.time_ns())
    assert [cache.known(f"f{n}.md") is not None for n in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]


def test_a_large_file_read_again_at_once_is_compared_not_trusted(tmp_path: Path) -> None:
    """Back-to-back checks of a big page written a moment ago: the bytes last seen give the
    blob id only when the file holds exactly those bytes (a same-size, same-tick rewrite
    is hashed again)."""
    from mnoted.core.blob import blob_id
    from mnoted.store.worktree import disk_file

    big = b"# Big\n" + b"x" * (statcache.RECENT_FROM + 10) + b"\n"
    path = tmp_path / "big.md"
    path.write_bytes(big)
    cache = StatCache()
    first = disk_file(tmp_path, "big.md", cache)
    assert first is not None and first.blob == blob_id(big)
    assert cache.known("big.md") is None  # racy: not trusted by its stat data
    assert cache.recent("big.md", big) == first.blob
    changed = big.replace(b"x", b"y", 1)
    with path.open("r+b") as fh:  # in place, same size, within the tick
        fh.write(changed)
    second = disk_file(tmp_path, "big.md", cache)
    assert second is not None and second.blob == blob_id(changed)
    assert cache.recent("big.md", big) is None and cache.recent("other.md", changed) is None
    small = b"# Small\n"
    cache.saw("big.md", small, blob_id(small))  # small files are simply hashed
    assert cache.recent("big.md", small) is None
