"""The inotify reader on records made by hand: parsing, move pairing, own writes, overflow."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from mnoted.sync import inotify
from mnoted.sync.debounce import EventKind
from mnoted.sync.inotify import (
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_ISDIR,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    MOVE_HOLD,
    Change,
    InotifyReader,
    parse_events,
)


def record(wd: int, mask: int, name: bytes = b"", cookie: int = 0) -> bytes:
    padded = name + b"\0" * (16 - len(name) % 16) if name else b""
    return struct.pack("iIII", wd, mask, cookie, len(padded)) + padded


class FakeInotify:
    """The kernel side: watches by path, records queued by the test."""

    fd = -1

    def __init__(self) -> None:
        self.wds: dict[bytes, int] = {}
        self.removed: list[int] = []
        self.queued = b""

    def add_watch(self, path: bytes, mask: int) -> int:
        return self.wds.setdefault(path, len(self.wds) + 1)

    def rm_watch(self, wd: int) -> None:
        self.removed.append(wd)

    def read(self) -> bytes:
        data, self.queued = self.queued, b""
        return data

    def close(self) -> None:
        pass


def reader_on(root: Path, own: set[bytes] | None = None) -> tuple[InotifyReader, FakeInotify]:
    fake = FakeInotify()
    owned = own if own is not None else set()
    reader = InotifyReader(
        fake,  # type: ignore[arg-type]
        os.fsencode(root),
        is_own=lambda path: path in owned,
        on_watch_failure=lambda path, exc: None,
    )
    reader.watch_root()
    return reader, fake


def test_records_are_parsed_with_their_padding_removed() -> None:
    buf = (
        record(3, IN_CREATE, b"a.md") + record(-1, IN_Q_OVERFLOW) + record(4, IN_MOVED_TO, b"b", 9)
    )
    assert parse_events(buf) == [
        inotify.RawEvent(3, IN_CREATE, 0, b"a.md"),
        inotify.RawEvent(-1, IN_Q_OVERFLOW, 0, b""),
        inotify.RawEvent(4, IN_MOVED_TO, 9, b"b"),
    ]


def test_a_rename_is_paired_and_a_move_out_is_a_delete_in_order(tmp_path: Path) -> None:
    reader, fake = reader_on(tmp_path)
    root = os.fsencode(tmp_path)
    fake.queued = record(1, IN_MOVED_FROM, b"a.md", 7) + record(1, IN_MOVED_TO, b"b.md", 7)
    assert reader.read(0.0) == [Change(EventKind.MOVED, root + b"/a.md", root + b"/b.md", False)]
    # moved out, then a new file under the same name: the delete comes first
    fake.queued = record(1, IN_MOVED_FROM, b"b.md", 8) + record(1, IN_CREATE, b"b.md")
    assert reader.read(0.0) == [
        Change(EventKind.DELETED, root + b"/b.md", None, False),
        Change(EventKind.CREATED, root + b"/b.md", None, False),
    ]


def test_a_move_read_last_waits_for_its_pair_then_is_a_delete(tmp_path: Path) -> None:
    reader, fake = reader_on(tmp_path)
    root = os.fsencode(tmp_path)
    fake.queued = record(1, IN_MOVED_FROM, b"a.md", 7)
    assert reader.read(10.0) == []
    assert reader.next_deadline() == 10.0 + MOVE_HOLD
    fake.queued = record(1, IN_MOVED_TO, b"c.md", 7)  # its pair, in the next read
    assert reader.read(10.1) == [Change(EventKind.MOVED, root + b"/a.md", root + b"/c.md", False)]
    fake.queued = record(1, IN_MOVED_FROM, b"c.md", 9)
    assert reader.read(20.0) == []
    assert reader.expire(20.0 + MOVE_HOLD / 2) == []
    assert reader.expire(20.0 + MOVE_HOLD) == [
        Change(EventKind.DELETED, root + b"/c.md", None, False)
    ]
    assert reader.next_deadline() is None


def test_the_stores_temporary_files_and_own_renames_are_dropped(tmp_path: Path) -> None:
    root = os.fsencode(tmp_path)
    page = root + b"/p.md"
    reader, fake = reader_on(tmp_path, own={page})
    tmp = b".mnote-tmp-1"
    fake.queued = (
        record(1, IN_CREATE, tmp)
        + record(1, IN_CLOSE_WRITE, tmp)
        + record(1, IN_MOVED_FROM, tmp, 5)
        + record(1, IN_MOVED_TO, b"p.md", 5)
    )
    assert reader.read(0.0) == []
    # the same rename onto a page that does not hold the store's bytes: an editor's save
    fake.queued = record(1, IN_MOVED_FROM, tmp, 6) + record(1, IN_MOVED_TO, b"q.md", 6)
    assert reader.read(0.0) == [Change(EventKind.MOVED, root + b"/" + tmp, root + b"/q.md", False)]


def test_folders_get_watches_as_they_come_and_lose_them_when_moved_out(tmp_path: Path) -> None:
    reader, fake = reader_on(tmp_path)
    root = os.fsencode(tmp_path)
    (tmp_path / "new" / "sub").mkdir(parents=True)
    (tmp_path / "new" / "sub" / "early.md").write_text("x")
    (tmp_path / "new" / ".git").mkdir()
    fake.queued = record(1, IN_CREATE | IN_ISDIR, b"new")
    assert reader.read(0.0) == [
        Change(EventKind.CREATED, root + b"/new", None, True),
        Change(EventKind.CREATED, root + b"/new/sub/early.md", None, False),
    ]
    assert reader.watch_count == 3  # the root, new/, new/sub/; never .git/
    # renamed: the watches follow; moved out: they are removed
    fake.queued = record(1, IN_MOVED_FROM | IN_ISDIR, b"new", 4)
    fake.queued += record(1, IN_MOVED_TO | IN_ISDIR, b"old", 4)
    changes = reader.read(0.0)
    assert changes[0] == Change(EventKind.MOVED, root + b"/new", root + b"/old", True)
    fake.queued = record(fake.wds[root + b"/new/sub"], IN_CREATE, b"later.md")
    assert reader.read(0.0) == [Change(EventKind.CREATED, root + b"/old/sub/later.md", None, False)]
    fake.queued = record(1, IN_MOVED_FROM | IN_ISDIR, b"old", 5) + record(1, IN_CREATE, b"x")
    assert reader.read(0.0)[0] == Change(EventKind.DELETED, root + b"/old", None, True)
    assert reader.watch_count == 1 and len(fake.removed) == 2


def test_an_overflow_is_counted_after_the_watches_are_rebuilt(tmp_path: Path) -> None:
    (tmp_path / "gone-meanwhile").mkdir()
    reader, fake = reader_on(tmp_path)
    assert reader.watch_count == 2
    (tmp_path / "made-meanwhile").mkdir()
    (tmp_path / "gone-meanwhile").rmdir()  # and its IN_IGNORED lost with the rest
    fake.queued = record(-1, IN_Q_OVERFLOW)
    assert reader.read(0.0) == []
    assert reader.overflowed == 1 and reader.watch_count == 2
    assert fake.removed == [fake.wds[os.fsencode(tmp_path / "gone-meanwhile")]]
