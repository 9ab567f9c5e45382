"""The watcher under stress, through the runner: lost events, floods, loops, idle time."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnoted.host.runner import RunnerConfig, WorkspaceRunner
from mnoted.service import Service
from mnoted.store import Workspace
from mnoted.sync import ReconcileReason

FLOOD = int(os.environ.get("MNOTE_FLOOD_FILES", "2000"))


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout


def commits(root: Path) -> int:
    return int(git(root, "rev-list", "--count", "HEAD"))


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[WorkspaceRunner]:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    r = WorkspaceRunner(root, Service(), RunnerConfig(quiet_seconds=0.05, max_delay_seconds=1.0))
    r.start()
    r.reconcile("settle").result()
    yield r
    r.stop()


def settle(runner: WorkspaceRunner, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runner.submit(lambda: runner.ws.idle()).result()
        if git(runner.root, "status", "--porcelain") == "":
            return
        time.sleep(0.2)
    raise AssertionError(git(runner.root, "status", "--porcelain")[:500])


def test_a_flood_of_creates_ends_with_head_matching_the_disk(runner: WorkspaceRunner) -> None:
    root = runner.root
    for i in range(FLOOD):
        folder = root / f"flood/{i // 100}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"n{i}.md").write_text(f"# {i}\n")
    # Whatever the kernel queue kept, an overflow signal makes the runner compare by content.
    assert runner.watcher is not None
    runner.watcher._sink.on_reconcile_needed(ReconcileReason.QUEUE_OVERFLOW, "test")  # type: ignore[attr-defined]
    settle(runner)
    assert len([p for p in git(root, "ls-files").split() if p.startswith("flood/")]) == FLOOD


def test_symlink_loops_and_links_out_do_not_hang_or_leak(
    runner: WorkspaceRunner, tmp_path: Path
) -> None:
    root = runner.root
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Outside\n")
    (root / "loop").mkdir()
    os.symlink(root / "loop", root / "loop" / "self")
    os.symlink(outside, root / "out")
    (root / "real.md").write_text("# Real\n")
    deadline = time.monotonic() + 30
    while "real.md" not in git(root, "ls-files").split() and time.monotonic() < deadline:
        time.sleep(0.1)
    runner.reconcile("check").result()
    # Symlinks are never committed (nor followed); they stay untracked, nothing else does.
    assert sorted(git(root, "status", "--porcelain").split("\n")[:-1]) == ["?? loop/", "?? out"]
    files = git(root, "ls-files").split()
    assert "real.md" in files
    assert not any(f.startswith("out/") or "secret" in f for f in files)
    assert runner.watcher is not None and runner.watcher.health().running


def test_moves_in_and_out_of_the_workspace(runner: WorkspaceRunner, tmp_path: Path) -> None:
    root = runner.root
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "incoming.md").write_text("# Incoming\n")
    os.rename(outside / "incoming.md", root / "incoming.md")
    settle(runner)
    assert "incoming.md" in git(root, "ls-files").split()
    os.rename(root / "incoming.md", outside / "gone.md")
    settle(runner)
    assert "incoming.md" not in git(root, "ls-files").split()


def test_an_idle_hour_makes_no_commits(runner: WorkspaceRunner) -> None:
    root = runner.root
    before = commits(root)
    for _ in range(12):  # an hour of five-minute reconciliation passes, and idle upkeep
        assert runner.reconcile("periodic").result() == 0
        runner.submit(lambda: runner.ws.idle()).result()
    time.sleep(0.5)
    assert commits(root) == before
    assert runner.watcher is not None
    health = runner.watcher.health()
    assert health.pending == 0 and not health.needs_reconcile
