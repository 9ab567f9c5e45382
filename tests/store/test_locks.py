"""Lock policy: our own stale locks are recovered, other programs' locks are waited for
(bounded) and reported with their path, and never deleted."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from mnoted.errors import InternalError, LockBusy
from mnoted.store import CommandMeta, Workspace, Write, gitlock
from tests.store.conftest import assert_clean

M = CommandMeta("x", actor="hermes")


def test_foreign_ref_lock_is_reported_and_kept(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    lock = root / ".git/refs/heads/main.lock"
    lock.write_text("held by git\n")
    with Workspace.open(root, lock_wait=0.05) as ws:
        head = ws.head
        with pytest.raises(LockBusy) as info:
            ws.apply(M, [Write("a.md", b"a")])
        assert info.value.details["path"] == str(lock)
        assert "remove" in info.value.hint
        assert lock.read_text() == "held by git\n"  # never deleted
        assert ws.head == head and not (root / "a.md").exists()
        lock.unlink()  # git finished
        ws.apply(M, [Write("a.md", b"a")])
        ws.idle()
    assert_clean(root)


def test_foreign_lock_released_within_the_wait_is_fine(ws: Workspace) -> None:
    lock = ws.gitdir / "index.lock"
    lock.write_text("")
    timer = threading.Timer(0.1, lock.unlink)
    timer.start()
    ws.apply(M, [Write("a.md", b"a")])
    ws.idle()  # waits for the index lock, then writes
    timer.join()
    assert_clean(ws.root)


def test_our_stale_locks_are_recovered(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    gitdir = root / ".git"
    # what a crash leaves: a token and the lock linked to it
    held = gitlock.acquire(gitdir, gitdir / "refs/heads/main", b"0" * 40 + b"\n")
    held2 = gitlock.acquire(gitdir, gitdir / "index")
    assert os.path.exists(held.lock) and os.path.exists(held2.lock)
    foreign = gitdir / "packed-refs.lock"
    foreign.write_text("")
    with Workspace.open(root) as ws:
        assert not os.path.exists(held.lock) and not os.path.exists(held2.lock)
        assert foreign.exists()
        ws.apply(M, [Write("a.md", b"a")])
    foreign.unlink()
    assert_clean(root)


def test_a_lock_left_by_a_moved_folder_is_taken_back(tmp_path: Path) -> None:
    """The folder moved away while a lock was held: the release (by path) found nothing and
    the lock came back with the folder; the live daemon then refused every write with "index
    .lock is held by another program" (its own). Ours and held by no one: removed at once."""
    root = tmp_path / "ws"
    Workspace.init(root).close()
    gitdir, moved = root / ".git", tmp_path / "elsewhere"
    held = gitlock.acquire(gitdir, gitdir / "index")
    root.rename(moved)
    held.release()  # finds nothing at the old path
    moved.rename(root)
    assert os.path.exists(held.lock)
    again = gitlock.acquire(gitdir, gitdir / "index", wait=0)
    again.release()
    assert not os.path.exists(held.lock)
    # a lock of ours still held, and anyone else's, are never taken
    live = gitlock.acquire(gitdir, gitdir / "index")
    with pytest.raises(LockBusy):
        gitlock.acquire(gitdir, gitdir / "index", wait=0)
    live.release()
    (gitdir / "index.lock").write_text("git's\n")
    with pytest.raises(LockBusy):
        gitlock.acquire(gitdir, gitdir / "index", wait=0)
    assert (gitdir / "index.lock").read_text() == "git's\n"


def test_workspace_belongs_to_its_thread(ws: Workspace) -> None:
    errors: list[BaseException] = []

    def other() -> None:
        try:
            ws.apply(M, [Write("a.md", b"a")])
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1 and isinstance(errors[0], InternalError)
    assert ws.maintenance().packed >= 0  # maintenance is allowed from any thread


def test_process_lock_is_released_by_a_dead_process(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    pid = os.fork()
    if pid == 0:  # the child takes the workspace and dies without closing
        Workspace.open(root)
        os._exit(0)
    os.waitpid(pid, 0)
    Workspace.open(root).close()


def test_folders_removed_under_the_store_are_made_again(ws: Workspace) -> None:
    """The tokens' folder, the reflogs and the branch's loose ref folder are made only when
    found missing: a write after someone removed them (``git pack-refs --all``, a cleanup
    of ``.git/mnote``) makes them again."""
    import shutil
    import subprocess

    gitdir = ws.root / ".git"
    ws.apply(M, [Write("a.md", b"one\n")])
    shutil.rmtree(gitdir / "mnote" / "locks")
    shutil.rmtree(gitdir / "logs")
    subprocess.run(["git", "pack-refs", "--all"], cwd=ws.root, check=True)
    shutil.rmtree(gitdir / "refs" / "heads")
    ws.apply(M, [Write("a.md", b"two\n")])
    assert ws.read_head("a.md") == b"two\n"
    assert (gitdir / "refs" / "heads" / "main").is_file()
    for log in (gitdir / "logs" / "HEAD", gitdir / "logs" / "refs" / "heads" / "main"):
        assert len(log.read_text().splitlines()) == 1  # the reflogs are back, with this write
    assert list((gitdir / "mnote" / "locks").iterdir()) == []
    ws.idle()
    assert_clean(ws.root)
