"""Only settled files are committed or written over (``store.settle``)."""

from __future__ import annotations

import os
import time

import pytest

from mnoted.errors import Conflict
from mnoted.store import CommandMeta, Workspace, Write
from mnoted.store import settle as settle_mod
from mnoted.store.settle import Settling, held_for_writing, no_new_writer


def _held(path: str) -> bool | None:
    fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        return held_for_writing(fd, os.path.basename(path), os.stat(path))
    finally:
        os.close(fd)


def test_a_file_open_for_writing_is_seen_as_such(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "a.md")
    with open(path, "w") as f:
        f.write("x")
        f.flush()
        assert _held(path) is True
    assert _held(path) is False
    with open(path):  # a reader is no writer
        assert _held(path) is False


def test_a_file_may_be_replaced_only_while_nobody_writes_it(tmp_path: os.PathLike[str]) -> None:
    """``no_new_writer`` shares its lease with ``held_for_writing``: refused for a file open
    for writing, held (and then released) for one that is not, absent for no file."""
    path = os.path.join(tmp_path, "a.md")
    with open(path, "w") as f:
        f.write("x")
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with open(path, "a"), no_new_writer(folder, "a.md") as may_replace:
            assert may_replace() is False
        with no_new_writer(folder, "a.md") as may_replace:
            assert may_replace() is True
        assert _held(path) is False  # (the lease was released)
        with no_new_writer(folder, "gone.md") as may_replace:
            assert may_replace() is True  # nothing to protect: the stat check decides
    finally:
        os.close(folder)


def test_a_file_changed_a_moment_ago_waits_for_the_quiet_time(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "a.md")
    with open(path, "w") as f:
        f.write("x")
    now = [time.time_ns()]
    settling = Settling(clock=lambda: now[0])
    fd = os.open(str(tmp_path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert settling.check(fd, "a.md", "a.md") > 0
        now[0] += settle_mod.QUIET_NS + 10_000_000
        assert settling.check(fd, "a.md", "a.md") == 0
        now[0] -= settle_mod.QUIET_NS  # found settled once: its stat data says so since
        assert settling.check(fd, "a.md", "a.md") == 0
    finally:
        os.close(fd)


def test_a_half_written_file_is_neither_committed_nor_written_over(ws: Workspace) -> None:
    page = ws.root / "p.md"
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"one\n")])
    head = ws.head
    fd = os.open(page, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, b"one\nhalf")
        assert ws.commit_external(["p.md"], wait=0.05) is None
        assert ws.unsettled == {"p.md"}
        with pytest.raises(Conflict, match="being written by another program"):
            ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("p.md", b"agent\n")])
        assert ws.head == head
        os.write(fd, b" and the rest\n")
    finally:
        os.close(fd)
    assert page.read_bytes() == b"one\nhalf and the rest\n"
    made = ws.commit_external(["p.md"])  # (waits for the quiet time)
    assert made is not None
    assert ws.read_head("p.md") == b"one\nhalf and the rest\n"


def test_the_stores_own_writes_are_not_waited_for(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each check of a file the store itself just wrote finds it settled: no wait at all
    (checked by what the checks answer, not by the clock)."""
    waits: list[float] = []
    check = Settling.check

    def checked(self: Settling, folder: int, name: str, rel: str) -> float:
        wait = check(self, folder, name, rel)
        waits.append(wait)
        return wait

    monkeypatch.setattr(Settling, "check", checked)
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"v0\n")])
    for i in range(10):
        ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("p.md", b"v%d\n" % i)])
    assert waits and not any(waits), waits
