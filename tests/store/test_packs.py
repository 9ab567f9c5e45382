"""Objects written as packs: the formats (checked by git), recovery, the writer's merges."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mnoted.store import CommandMeta, Workspace, Write, packs, upkeep
from mnoted.store.maintenance import loose_objects
from tests.conftest import deleted_packs_held, needs_proc
from tests.store.conftest import assert_clean, git


def raw(kind: str, data: bytes) -> packs.Raw:
    """An object as packs.write_pack takes it, with its id computed as Git does."""
    number = {"commit": 1, "tree": 2, "blob": 3}[kind]
    oid = hashlib.sha1(b"%s %d\0" % (kind.encode(), len(data)) + data).digest()
    return oid, number, data


def cat(repo: Path, oid: bytes) -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-p", oid.hex()], capture_output=True, check=True
    ).stdout


def verify(repo: Path, name: str) -> str:
    return git(repo, "verify-pack", "-v", str(repo / ".git/objects/pack" / f"pack-{name}.idx"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "r"
    git(tmp_path, "init", "-q", str(root))
    return root


def test_a_written_pack_is_what_git_reads(repo: Path) -> None:
    big = os.urandom(100_000)  # stored undeflated, as its size says
    objects = [raw("blob", b"hello\n"), raw("blob", big), raw("blob", b"")]
    objects += [raw("blob", b"x%d\n" % i) for i in range(300)]  # every fan-out bucket
    pack_dir = repo / ".git/objects/pack"
    name = packs.write_pack(pack_dir, [*objects, objects[0]])  # a duplicate is written once
    listing = verify(repo, name)
    assert f"non delta: {len(objects)} objects" in listing
    assert cat(repo, objects[0][0]) == b"hello\n"
    assert cat(repo, objects[1][0]) == big
    assert cat(repo, objects[2][0]) == b""
    stored = next(line for line in listing.splitlines() if line.startswith(objects[1][0].hex()))
    assert int(stored.split()[3]) > len(big)
    assert sorted(os.listdir(pack_dir)) == [f"pack-{name}.idx", f"pack-{name}.pack"]
    assert [e.oid for e in packs.read_index((pack_dir / f"pack-{name}.idx").read_bytes())] == (
        sorted(o[0] for o in objects)
    )
    git(repo, "fsck", "--strict")


def test_merging_copies_every_object_and_removes_the_sources(repo: Path) -> None:
    pack_dir = repo / ".git/objects/pack"
    groups = [[raw("blob", b"g%d o%d\n" % (g, o)) for o in range(5)] for g in range(4)]
    groups[3].append(groups[0][0])  # an object in two packs is kept once
    names = [packs.write_pack(pack_dir, g) for g in groups]
    merged = packs.merge_packs(pack_dir, [*names, "0" * 40])  # a vanished pack is skipped
    assert merged is not None
    name, count = merged
    assert count == 20
    assert packs.pack_names(pack_dir) == [name]
    assert "non delta: 20 objects" in verify(repo, name)
    for g in groups:
        for oid, _, data in g:
            assert cat(repo, oid) == data
    git(repo, "fsck", "--strict")


def test_recovery_completes_a_pack_whose_index_was_synced_and_drops_the_rest(
    repo: Path,
) -> None:
    pack_dir = repo / ".git/objects/pack"
    done = [raw("blob", b"landed\n")]
    name = packs.write_pack(pack_dir, done)
    # as if killed between the two renames: the pack in place, its index still temporary
    os.rename(pack_dir / f"pack-{name}.idx", pack_dir / f"{packs.TMP_IDX}{name}")
    # and an earlier write killed before any rename
    (pack_dir / f"{packs.TMP_PACK}{'1' * 40}").write_bytes(b"PACK partial")
    (pack_dir / f"{packs.TMP_IDX}{'1' * 40}").write_bytes(b"partial")
    packs.recover(pack_dir)
    assert sorted(os.listdir(pack_dir)) == [f"pack-{name}.idx", f"pack-{name}.pack"]
    assert cat(repo, done[0][0]) == b"landed\n"
    git(repo, "fsck", "--strict")


def test_commands_leave_no_loose_object_and_a_group_lands_as_one_pack(ws: Workspace) -> None:
    pack_dir = ws.gitdir / "objects" / "pack"
    before = set(packs.pack_names(pack_dir))
    ws.apply(CommandMeta("x", actor="hermes"), [Write("a/one.md", b"one\n")])
    single = set(packs.pack_names(pack_dir)) - before
    assert len(single) == 1
    with ws.group():
        for i in range(5):
            ws.apply(CommandMeta("x", actor="hermes"), [Write(f"b/p{i}.md", b"%d\n" % i)])
            # the next command builds on this one's objects before any of them is on disk
            assert ws.read_head(f"b/p{i}.md") == b"%d\n" % i
    grouped = set(packs.pack_names(pack_dir)) - before - single
    assert len(grouped) == 1
    listed = verify(ws.root, grouped.pop())
    assert "non delta: 20 objects" in listing_count_line(listed)  # 5 x (blob, 2 trees, commit)
    assert loose_objects(ws.gitdir) == []
    ws.idle()
    git(ws.root, "fsck", "--strict")
    assert_clean(ws.root)


def listing_count_line(listing: str) -> str:
    return next(line for line in listing.splitlines() if line.startswith("non delta"))


def digit_sum(n: int, base: int) -> int:
    total = 0
    while n:
        n, digit = divmod(n, base)
        total += digit
    return total


def test_the_writer_merges_its_packs_by_levels(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "PACKS_PER_LEVEL", 3)
    pack_dir = ws.gitdir / "objects" / "pack"
    assert len(packs.pack_names(pack_dir)) == 1  # the first commit's
    for i in range(2, 40):
        ws.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"v%d\n" % i)])
        ws.upkeep(wait=True)
        # merged by threes, level by level: as many packs as n has base-3 digits' worth
        assert len(packs.pack_names(pack_dir)) == digit_sum(i, 3)
        assert ws.read_head("p.md") == b"v%d\n" % i
    assert len(git(ws.root, "log", "--format=%H").split()) == 39
    for name in packs.pack_names(pack_dir):
        verify(ws.root, name)
    ws.idle()
    git(ws.root, "fsck", "--strict")
    assert_clean(ws.root)


def test_merges_run_beside_the_writer_and_idle_takes_them_in(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "PACKS_PER_LEVEL", 3)
    pack_dir = ws.gitdir / "objects" / "pack"
    started = threading.Event()
    release = threading.Event()
    real = packs.merge_packs

    def slow_merge(folder: Path, names: list[str]) -> tuple[str, int] | None:
        started.set()
        release.wait(10)
        return real(folder, names)

    monkeypatch.setattr(packs, "merge_packs", slow_merge)
    for i in range(3):
        ws.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"v%d\n" % i)])
    ws.upkeep()  # starts a merge and returns: the writer is not held up by it
    assert started.wait(10)
    for i in range(3, 8):  # writes land while the merge waits
        ws.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"v%d\n" % i)])
        ws.upkeep()
        assert ws.read_head("p.md") == b"v%d\n" % i
    assert len(packs.pack_names(pack_dir)) == 9  # the first commit's, and one per write
    release.set()
    ws.idle()  # waits for the merge, takes it in, and merges what filled up meanwhile
    assert len(packs.pack_names(pack_dir)) <= 3
    assert [ws.read_head("p.md")] == [b"v7\n"]
    git(ws.root, "fsck", "--strict")
    assert_clean(ws.root)


@needs_proc
def test_packs_merged_away_are_freed_after_the_writer_lets_go(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A deleted file is freed when its last reference goes: had the merge deleted its packs,
    # the writer would pay for freeing them when it drops its object database (6-7 ms for
    # 16 packs on ext4). The packs it drops must still have their names then.
    monkeypatch.setattr(upkeep, "PACKS_PER_LEVEL", 3)
    pack_dir = ws.gitdir / "objects" / "pack"
    held_when_dropped: list[list[str]] = []
    set_odb = ws._repo.set_odb

    def recording(odb: object) -> None:
        held_when_dropped.append(deleted_packs_held(pack_dir))
        set_odb(odb)

    monkeypatch.setattr(ws._repo, "set_odb", recording)
    for i in range(12):
        ws.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"v%d\n" % i)])
        ws.upkeep(wait=True)
    assert len(held_when_dropped) >= 4
    assert held_when_dropped == [[]] * len(held_when_dropped)
    assert ws.pack_upkeep.merge_thread is not None
    ws.pack_upkeep.merge_thread.submit(lambda: None).result()  # after the deletes queued before it
    assert list(packs.retired_dir(pack_dir).iterdir()) == []
    assert deleted_packs_held(pack_dir) == []
    assert len(git(ws.root, "log", "--format=%H").split()) == 13
    ws.idle()
    assert_clean(ws.root)


def test_retired_packs_are_deleted_on_close_and_after_a_crash(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    pack_dir = ws.gitdir / "objects" / "pack"
    retired = packs.retired_dir(pack_dir)

    def merge_all() -> None:
        names = packs.pack_names(pack_dir)
        assert packs.merge_packs(pack_dir, names) is not None  # not taken in by the writer
        assert len(list(retired.iterdir())) == 2 * len(names)

    for i in range(2):
        ws.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"v%d\n" % i)])
    merge_all()
    with monkeypatch.context() as m:
        m.setattr(packs, "drop_retired", lambda folder: None)  # as if killed
        ws.close()
    assert list(retired.iterdir()) != []
    with Workspace.open(ws.root) as again:
        assert list(retired.iterdir()) == []
        again.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"v2\n")])
        merge_all()
    assert list(retired.iterdir()) == []
    git(ws.root, "fsck", "--strict")
    assert git(ws.root, "show", "HEAD:p.md") == "v2\n"


def test_a_merge_that_fails_leaves_its_packs_to_the_next(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(upkeep, "PACKS_PER_LEVEL", 3)
    pack_dir = ws.gitdir / "objects" / "pack"
    real = packs.merge_packs
    failures = [OSError(errno.ENOSPC, "No space left on device")]

    def failing(folder: Path, names: list[str]) -> tuple[str, int] | None:
        if failures:
            raise failures.pop()
        return real(folder, names)

    monkeypatch.setattr(packs, "merge_packs", failing)
    for i in range(3):
        ws.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"v%d\n" % i)])
    ws.upkeep(wait=True)
    assert "merging packs failed" in caplog.text
    assert len(packs.pack_names(pack_dir)) == 4  # nothing merged, nothing lost
    ws.upkeep(wait=True)  # the packs went back to their level: merged now, all four
    assert len(packs.pack_names(pack_dir)) == 1
    assert ws.read_head("p.md") == b"v2\n"
    git(ws.root, "fsck", "--strict")


def test_without_upkeep_a_landing_merges_at_twice_the_level(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "PACKS_PER_LEVEL", 3)
    pack_dir = ws.gitdir / "objects" / "pack"
    counts = []
    for i in range(40):
        ws.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"v%d\n" % i)])
        counts.append(len(packs.pack_names(pack_dir)))
    assert max(counts) <= 2 * 3 * 3  # fewer than six at each of (at most) three levels
    assert counts[:6] == [2, 3, 4, 5, 1, 2]  # with the first commit's: six packs, merged
    git(ws.root, "fsck", "--strict")


def test_a_repository_without_a_pack_folder_gets_one(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    git(tmp_path, "init", "-q", "-b", "main", str(root))
    (root / ".git/objects/pack").rmdir()  # libgit2 would never look for packs there
    with Workspace.init(root) as ws:
        ws.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"one\n")])
        ws.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"two\n")])
        assert ws.read_head("p.md") == b"two\n"
        assert len(packs.pack_names(root / ".git/objects/pack")) == 3
    git(root, "fsck", "--strict")
    assert git(root, "show", "HEAD:p.md") == "two\n"


@contextlib.contextmanager
def folder_opens(folder: Path) -> Iterator[Callable[[], int]]:
    """How many times ``folder`` is opened (inotify's IN_OPEN), counted when asked."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    try:
        # IN_OPEN and IN_CLOSE_NOWRITE: an open is never the same event as the one before,
        # which inotify would fold into it
        assert libc.inotify_add_watch(fd, os.fsencode(folder), 0x20 | 0x10) >= 0
        seen = [0]

        def count() -> int:
            while True:
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    return seen[0]
                offset = 0
                while offset < len(data):  # struct inotify_event: wd, mask, cookie, len, name
                    _wd, mask, _cookie, size = struct.unpack_from("iIII", data, offset)
                    seen[0] += bool(mask & 0x20)
                    offset += 16 + size

        yield count
    finally:
        os.close(fd)


def test_the_objects_of_a_command_are_staged_without_reading_the_pack_folder(
    ws: Workspace,
) -> None:
    """Written through the repository, libgit2 looked for each new object in every pack and
    then read the pack folder again (packs.WriteThrough): 0.17 ms an object with 64 packs."""
    pack_dir = ws.gitdir / "objects" / "pack"
    for i in range(3):  # the base trees are in packs, and there are several packs to read
        ws.apply(CommandMeta("x", actor="hermes"), [Write(f"b/p{i}.md", b"first %d\n" % i)])
    with folder_opens(pack_dir) as opens, ws.group():
        for i in range(10):
            ws.apply(CommandMeta("x", actor="hermes"), [Write(f"b/p{i}.md", b"%d\n" % i)])
            assert ws.read_head(f"b/p{i}.md") == b"%d\n" % i
            if i == 0:  # (reading what the last landing packed finds its pack: one rescan)
                landed = opens()
        assert opens() == landed  # (it was 4 more a command)
    # the blob of an earlier version, written again, is packed again; a merge keeps one
    ws.apply(CommandMeta("x", actor="hermes"), [Write("b/p0.md", b"first 0\n")])
    assert ws.read_head("b/p0.md") == b"first 0\n"
    git(ws.root, "fsck", "--strict")
    blob = git(ws.root, "rev-parse", "HEAD:b/p0.md").strip()
    names = packs.pack_names(pack_dir)
    assert sum(blob in verify(ws.root, name) for name in names) == 2
    ws.close()
    merged = packs.merge_packs(pack_dir, names)
    assert merged is not None
    assert verify(ws.root, merged[0]).count(blob) == 1
    git(ws.root, "fsck", "--strict")


def test_the_command_after_a_landing_does_not_read_the_pack_folder_again(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A landing packs the commit; the next command read it (its parent) and its tree (its
    base) from the repository, which searched every pack, missed the new one and read the
    pack folder again (libgit2 refreshes every backend then, the staging's too): 0.15-0.2 ms
    a write of one agent writing back to back."""
    rescans = [0]

    def refresh_cb(self: packs.Staging) -> None:
        # (the object writer's own backend is refreshed on every object written: it holds
        # no pack)
        rescans[0] += not isinstance(self, packs.WriteThrough)

    for i in range(3):
        ws.apply(CommandMeta("x", actor="hermes"), [Write("a.md", b"first %d\n" % i)])
    monkeypatch.setattr(packs.Staging, "refresh_cb", refresh_cb)
    for i in range(5):
        ws.apply(CommandMeta("x", actor="hermes"), [Write("a.md", b"%d\n" % i)])
    assert rescans[0] == 0
    assert ws.read_head("a.md") == b"4\n"
    ws.flush_index()
    assert_clean(ws.root)
