"""Files made ahead of need (store.spares): what a write puts in place from a spare is what a
file created in place would have been, and a spare never outlives its workspace."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mnoted.store import CommandMeta, Delete, Workspace, Write, dirfd, durable, worktree
from mnoted.store.journal import Entry, FileStep
from mnoted.store.spares import FIRST_STOCK, PREFIX, STOCK, Spares
from mnoted.store.statedir import STATE_DIR
from mnoted.store.workspace import SPARES_DIR
from tests.store.conftest import assert_clean, git


def stocked(ws: Workspace, stock: int = FIRST_STOCK) -> Spares:
    """The workspace's spares, once their thread has made ``stock`` of them."""
    spares: Spares = ws._spares
    spares.refill()
    deadline = time.monotonic() + 10
    while spares.stocked < stock:
        assert time.monotonic() < deadline, "the spares' thread made no stock"
        time.sleep(0.01)
    return spares


def folder(ws: Workspace) -> Path:
    return ws.root / STATE_DIR / SPARES_DIR


def spare_names(ws: Workspace) -> set[str]:
    return {n for n in os.listdir(folder(ws)) if n.startswith(PREFIX)}


def locks_emptied(ws: Workspace) -> None:
    """Wait for the lock tokens' folder to be empty (the spares' thread frees old refs)."""
    locks = ws.gitdir / "mnote" / "locks"
    deadline = time.monotonic() + 10
    while os.listdir(locks):
        assert time.monotonic() < deadline, os.listdir(locks)
        time.sleep(0.01)


def apply(ws: Workspace, *changes: Write | Delete, key: str = "k") -> str:
    return ws.apply(
        CommandMeta("test.write", actor="agent", idempotency_key=key), list(changes)
    ).commit


def test_writes_from_spares_land_like_files_made_in_place(ws: Workspace) -> None:
    spares = stocked(ws)
    before = spare_names(ws)
    apply(ws, Write("notes/a.md", b"# A\n"), Write("b.md", b"# B\n"), key="1")
    used = before - spare_names(ws)
    # the page files, the pack and its index, the branch's lock token
    assert len(used) >= 4, "the write made its files in place instead of using spares"
    assert (ws.root / "notes" / "a.md").read_bytes() == b"# A\n"
    assert (ws.root / "b.md").read_bytes() == b"# B\n"
    assert stat.S_IMODE((ws.root / "b.md").stat().st_mode) == 0o644
    for pack in (ws.gitdir / "objects" / "pack").glob("pack-*"):
        assert stat.S_IMODE(pack.stat().st_mode) == 0o444, pack
    assert not any(n.startswith("tmp_") for n in os.listdir(ws.gitdir / "objects" / "pack"))
    locks_emptied(ws)
    ws.idle()
    assert_clean(ws.root)
    assert spares.stocked <= STOCK


def test_the_stock_doubles_each_time_it_runs_out(tmp_path: Path) -> None:
    """A one-off write makes a few spares; a group that takes them all makes the stock
    grow, up to STOCK."""
    spares = Spares(tmp_path / "spares")
    try:
        expected = FIRST_STOCK
        while True:
            expected = min(2 * expected, STOCK)
            taken = []
            for _ in range(10_000):  # take until none is left (that take doubles the stock)
                spare = spares.take(spares.dev)
                if spare is None:
                    break
                taken.append(spare)
            else:
                pytest.fail("the stock never ran out")
            for spare in taken:
                os.close(spare.fd)
                spare.remove()
            deadline = time.monotonic() + 10
            while spares.stocked < expected:
                assert time.monotonic() < deadline, f"no stock of {expected} made"
                time.sleep(0.005)
            time.sleep(0.05)
            assert spares.stocked == expected
            if expected == STOCK:
                break
    finally:
        spares.close()
    assert os.listdir(tmp_path / "spares") == []


def test_a_spare_takes_the_mode_of_the_file_it_replaces_whatever_the_umask(
    ws: Workspace,
) -> None:
    script = ws.root / "run.md"
    script.write_bytes(b"# run\n")
    script.chmod(0o755)
    ws.commit_external(["run.md"])
    old = os.umask(0o077)  # spares are made under it
    try:
        stocked(ws)
        apply(ws, Write("run.md", b"# run, edited\n"), Write("new.md", b"# new\n"), key="2")
    finally:
        os.umask(old)
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert stat.S_IMODE((ws.root / "new.md").stat().st_mode) == 0o644
    ws.idle()
    assert_clean(ws.root)


def test_a_landing_that_empties_a_folder_and_fills_it_again(ws: Workspace) -> None:
    """A removal drops the folders it empties; a new file bound for that folder (which no
    temporary file of its own keeps there when it is a spare) goes in first."""
    apply(ws, Write("d/old.md", b"# old\n"), key="3")
    stocked(ws)
    with ws.group():
        apply(ws, Delete("d/old.md"), key="4")
        apply(ws, Write("d/new.md", b"# new\n"), key="5")
    assert sorted(os.listdir(ws.root / "d")) == ["new.md"]
    assert git(ws.root, "ls-tree", "-r", "--name-only", "HEAD", "d").split() == ["d/new.md"]
    ws.idle()
    assert_clean(ws.root)


def test_without_spares_files_are_made_in_place(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another file system (or an empty stock) is not an error: the write makes its files."""
    stocked(ws)
    before = spare_names(ws)
    monkeypatch.setattr(ws._spares, "dev", -1)
    apply(ws, Write("c.md", b"# C\n"), key="6")
    assert (ws.root / "c.md").read_bytes() == b"# C\n"
    assert before <= spare_names(ws)  # none taken (its thread may still be making some)
    ws.idle()
    assert_clean(ws.root)


def test_the_branchs_old_file_is_freed_on_the_spares_thread(ws: Workspace) -> None:
    """Moving the branch renames its lock over its file; the old file then has a second
    name, so the rename frees no blocks (a wait for the disk on ext4 with ``discard``), and
    the spares' thread removes it."""
    spares = stocked(ws)
    head = apply(ws, Write("a.md", b"# A\n"), key="1")
    handed: list[tuple[str, bytes, int]] = []
    free_later = spares.free_later

    def seen(path: str) -> None:
        handed.append((path, Path(path).read_bytes(), os.stat(path).st_nlink))
        free_later(path)

    spares.free_later = seen  # type: ignore[method-assign]
    new = apply(ws, Write("a.md", b"# A, again\n"), key="2")
    branch = ws.gitdir / "refs" / "heads" / "main"
    assert branch.read_text() == new + "\n"
    assert git(ws.root, "rev-parse", "HEAD").strip() == new
    # (the Git index replaced by the same landing is freed the same way)
    [(path, data, links)] = [h for h in handed if not Path(h[0]).name.startswith("index.")]
    assert Path(path).parent == ws.gitdir / "mnote" / "locks"
    assert (data, links) == ((head + "\n").encode(), 1)  # the old file, named only there
    locks_emptied(ws)
    ws.close()
    assert_clean(ws.root)


def test_spares_do_not_outlive_their_workspace(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "notes")
    stocked(ws)
    assert spare_names(ws)
    ws.close()
    assert spare_names(ws) == set()
    # what a killed process left is removed when the workspace is opened again
    left = folder(ws) / f"{PREFIX}999999-1"
    left.write_bytes(b"")
    Workspace.open(tmp_path / "notes").close()
    assert not left.exists()


def test_spares_removed_under_the_store_are_not_used(ws: Workspace) -> None:
    """``git clean -fdx`` removes the state folder, spares included: writes go on."""
    stocked(ws)
    for name in spare_names(ws):
        (folder(ws) / name).unlink()
    apply(ws, Write("e.md", b"# E\n"), key="7")  # made in place; the stock is made again
    assert (ws.root / "e.md").read_bytes() == b"# E\n"
    stocked(ws)
    while folder(ws).exists():  # its thread may be making spares meanwhile
        shutil.rmtree(folder(ws), ignore_errors=True)
    apply(ws, Write("e.md", b"# E again\n"), key="8")
    apply(ws, Write("f.md", b"# F\n"), key="9")
    assert (ws.root / "e.md").read_bytes() == b"# E again\n"
    assert git(ws.root, "show", "HEAD:f.md") == "# F\n"


@pytest.mark.parametrize("kind", ["file", "symlink"])
def test_a_state_folder_that_cannot_hold_spares_does_not_stop_the_workspace(
    tmp_path: Path, kind: str
) -> None:
    ws = Workspace.init(tmp_path / "notes")
    ws.close()
    where = folder(ws)
    shutil.rmtree(where)
    outside = tmp_path / "outside"
    outside.mkdir()
    if kind == "file":
        where.write_bytes(b"not a folder\n")
    else:
        where.symlink_to(outside)
    ws = Workspace.open(tmp_path / "notes")
    try:
        apply(ws, Write("h.md", b"# H\n"), key="10")
        assert (ws.root / "h.md").read_bytes() == b"# H\n"
        time.sleep(0.2)  # time enough for spares to be made, were they made
        assert os.listdir(outside) == []
    finally:
        ws.close()


def held(path: Path) -> int:
    """An ``O_PATH`` fd on ``path``'s file: it keeps the inode (and its number) without
    opening the file for reading, so it does not stop the file being taken back."""
    return os.open(path, os.O_PATH)


def test_a_replaced_page_file_is_taken_back_and_written_over(ws: Workspace) -> None:
    """The second write exchanges its spare with the first write's file; once that landing
    is durable, a third write writes over it (shorter bytes: nothing of the old left)."""
    stocked(ws)
    page = ws.root / "a.md"
    apply(ws, Write("a.md", b"# A\n\n" + b"first version, long. " * 200), key="1")
    first = held(page)
    try:
        apply(ws, Write("a.md", b"# A\n\nsecond\n"), key="2")
        assert os.stat(page).st_ino != os.fstat(first).st_ino
        assert os.fstat(first).st_nlink == 1  # kept, at a spare's name
        apply(ws, Write("a.md", b"# A\n\nthird\n"), key="3")
        assert os.stat(page).st_ino == os.fstat(first).st_ino
    finally:
        os.close(first)
    assert page.read_bytes() == b"# A\n\nthird\n"
    assert stat.S_IMODE(page.stat().st_mode) == 0o644
    assert git(ws.root, "show", "HEAD:a.md") == "# A\n\nthird\n"
    ws.idle()
    assert_clean(ws.root)


def test_a_page_file_someone_has_open_is_never_written_over(ws: Workspace) -> None:
    """A reader holding the old file keeps reading the old bytes, whatever is written next."""
    stocked(ws)
    page = ws.root / "a.md"
    old = b"# A\n\n" + b"what the reader opened. " * 100
    apply(ws, Write("a.md", old), key="1")
    with page.open("rb") as reader:
        for i in range(2, 8):
            apply(ws, Write("a.md", f"# A\n\nversion {i}\n".encode()), key=str(i))
            apply(ws, Write(f"other{i}.md", f"# Other {i}\n".encode()), key=f"o{i}")
        ws.idle()
        assert reader.read() == old
        assert os.fstat(reader.fileno()).st_nlink == 0  # removed, not taken back
    assert page.read_bytes() == b"# A\n\nversion 7\n"
    assert_clean(ws.root)


def test_a_replaced_file_with_another_link_is_not_written_over(
    ws: Workspace, tmp_path: Path
) -> None:
    """A backup made with hard links (``cp -al``) of the state folder keeps its bytes."""
    stocked(ws)
    apply(ws, Write("a.md", b"# A\n\nfirst\n"), key="1")
    apply(ws, Write("a.md", b"# A\n\nsecond\n"), key="2")  # the first's file, a spare now
    backup = tmp_path / "backup"
    backup.mkdir()
    linked = {}
    for name in spare_names(ws):
        os.link(folder(ws) / name, backup / name)
        linked[name] = (backup / name).read_bytes()
    assert b"# A\n\nfirst\n" in linked.values()
    for i in range(3, 6):
        apply(ws, Write("a.md", f"# A\n\nversion {i}\n".encode()), key=str(i))
    ws.idle()
    assert {name: (backup / name).read_bytes() for name in linked} == linked
    assert (ws.root / "a.md").read_bytes() == b"# A\n\nversion 5\n"
    assert_clean(ws.root)


@pytest.mark.parametrize("change", ["chmod", "xattr", "edited"])
def test_a_page_file_changed_since_mnoted_wrote_it_is_not_taken_back(
    ws: Workspace, change: str
) -> None:
    """Only a file exactly as mnoted left it is reused: after a mode change, an attribute
    set by someone, or an editor's save in place, the old file is freed as before."""
    stocked(ws)
    page = ws.root / "a.md"
    apply(ws, Write("a.md", b"# A\n"), key="1")
    if change == "chmod":
        page.chmod(0o600)
    elif change == "xattr":
        try:
            os.setxattr(page, "user.tag", b"mine")
        except OSError:
            pytest.skip("no user extended attributes on this file system")
    else:
        with page.open("r+b") as fh:  # written in place: same inode, new bytes
            fh.write(b"# B\n")
        ws.commit_external(["a.md"])
    first = held(page)
    try:
        apply(ws, Write("a.md", b"# A, again\n"), key="2")
        apply(ws, Write("a.md", b"# A, third\n"), key="3")
        apply(ws, Write("b.md", b"# B\n"), key="4")
        ws.idle()
        assert os.fstat(first).st_nlink == 0
    finally:
        os.close(first)
    assert page.read_bytes() == b"# A, third\n"
    assert_clean(ws.root)


def test_a_file_saved_between_the_check_and_the_exchange_is_put_back(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editor's save that lands after the write checked the page and before its spare
    is exchanged with the page: the exchange shows it (the file moved out is not the one
    checked), is undone, and the save wins as an edit of its own (nothing overwritten)."""
    stocked(ws)
    page = ws.root / "a.md"
    apply(ws, Write("a.md", b"# A\n"), key="1")
    real = dirfd.renameat2
    saved: list[bool] = []

    def save_first(src_fd: int, src: str, dst_fd: int, dst: str, flags: int) -> None:
        if src == "a.md" and not saved:
            saved.append(True)
            tmp = ws.root / ".a.md.swp"
            tmp.write_bytes(b"# A\n\nsaved in an editor\n")
            os.replace(tmp, page)
        real(src_fd, src, dst_fd, dst, flags)

    monkeypatch.setattr(dirfd, "renameat2", save_first)
    commit = apply(ws, Write("a.md", b"# A\n\nby the agent\n"), key="2")
    assert saved
    assert page.read_bytes() == b"# A\n\nsaved in an editor\n"
    assert git(ws.root, "show", f"{commit}:a.md") == "# A\n\nby the agent\n"
    assert git(ws.root, "show", "HEAD:a.md") == "# A\n\nsaved in an editor\n"
    monkeypatch.undo()
    ws.idle()
    assert_clean(ws.root)
    assert all(
        (folder(ws) / n).read_bytes() != b"# A\n\nsaved in an editor\n" for n in spare_names(ws)
    )


def test_a_file_system_that_cannot_exchange_gets_renames(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object) -> None:
        raise OSError(errno.EINVAL, "exchange not supported")

    stocked(ws)
    apply(ws, Write("a.md", b"# A\n"), key="1")
    monkeypatch.setattr(dirfd, "renameat2", refuse)
    apply(ws, Write("a.md", b"# A, again\n"), key="2")
    apply(ws, Write("a.md", b"# A, third\n"), key="3")
    assert (ws.root / "a.md").read_bytes() == b"# A, third\n"
    assert git(ws.root, "show", "HEAD:a.md") == "# A, third\n"
    ws.idle()
    assert_clean(ws.root)


def test_files_written_without_spares_have_their_folders_synced(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery writes a journaled command's files with no spares: its folders are synced
    all the same before it returns (the journal is dropped after)."""
    blob = str(ws._repo.create_blob(b"# R\n"))
    entry = Entry("c1", "main", None, "0" * 40, (FileStep("r/new.md", None, blob, 0o100644),))
    started: list[durable.Syncing] = []
    real = durable.start_paths

    def start_paths(*args: Any, **kwargs: Any) -> durable.Syncing:
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(durable, "start_paths", start_paths)
    assert worktree.materialize(ws._repo, ws.root, entry) == []
    assert started and all(not s._pending for s in started), "the folders were not synced"
    assert (ws.root / "r" / "new.md").read_bytes() == b"# R\n"


_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200


def moves_seen(folder: Path, action: Callable[[], object]) -> list[tuple[str, str]]:
    """The creations, removals and moves an inotify watch on ``folder`` reports during
    ``action``, in order, as (kind, name)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0
    try:
        mask = _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
        assert libc.inotify_add_watch(fd, os.fsencode(folder), mask) >= 0
        action()
        data = b""
        while True:
            try:
                data += os.read(fd, 1 << 16)
            except BlockingIOError:
                break
    finally:
        os.close(fd)
    kinds = {_IN_MOVED_FROM: "moved_from", _IN_MOVED_TO: "moved_to"}
    kinds |= {_IN_CREATE: "created", _IN_DELETE: "removed"}
    out, at = [], 0
    while at < len(data):
        _, event, _, length = struct.unpack_from("iIII", data, at)
        name = data[at + 16 : at + 16 + length].rstrip(b"\0").decode()
        out.append((kinds.get(event & 0x3C0, hex(event)), name))
        at += 16 + length
    return out


def test_watchers_see_a_replaced_page_removed_then_created(ws: Workspace) -> None:
    """The exchange reports the page's name moved out, then moved in: a replacement, as
    watchers read it. Moved in and then out, @parcel/watcher (VS Code's) would drop the
    path from its batch as created and removed at once, and an editor miss the write."""
    stocked(ws)
    created = moves_seen(ws.root, lambda: apply(ws, Write("a.md", b"# A\n"), key="1"))
    assert [kind for kind, name in created if name == "a.md"] == ["moved_to"]
    replaced = moves_seen(ws.root, lambda: apply(ws, Write("a.md", b"# A, again\n"), key="2"))
    assert [kind for kind, name in replaced if name == "a.md"] == ["moved_from", "moved_to"]
