"""Background packing of loose objects and merging of packs."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mnoted.store import CommandMeta, Maintainer, Workspace, Write, maintenance, workspace
from mnoted.store.maintenance import MAX_PACKS, loose_objects, pack_object_ids
from tests.store.conftest import assert_clean, git


def packs_of(root: Path) -> list[Path]:
    return sorted((root / ".git" / "objects" / "pack").glob("pack-*.pack"))


def test_packing_removes_loose_objects_and_keeps_history(ws: Workspace) -> None:
    for i in range(20):  # commits made with git leave loose objects (mnoted writes packs)
        (ws.root / f"p{i % 3}.md").write_bytes(b"v%d" % i)
        git(ws.root, "add", f"p{i % 3}.md")
        git(ws.root, "commit", "-q", "-m", f"git {i}")
    ws.refresh()
    assert len(loose_objects(ws.gitdir)) > 40
    report = ws.maintenance()
    assert report.packed > 40 and report.removed_loose == report.packed
    assert loose_objects(ws.gitdir) == []
    ws.apply(CommandMeta("x", actor="hermes"), [Write("p0.md", b"after")])
    ws.idle()
    assert_clean(ws.root)
    assert git(ws.root, "count-objects", "-v").count("\n") > 0


def test_many_packs_are_merged(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    Workspace.init(root).close()
    for i in range(MAX_PACKS + 2):  # each open starts its own count: the writer merges none
        with Workspace.open(root) as ws:
            ws.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"v%d" % i)])
    assert len(packs_of(root)) > MAX_PACKS
    with Workspace.open(root) as ws:
        report = ws.maintenance()
        assert report.merged_packs > 0
        packs = packs_of(root)
        assert len(packs) <= MAX_PACKS
        listed = {h for p in packs for h in pack_object_ids(p.with_suffix(".idx"))}
        assert git(root, "rev-parse", "HEAD").strip() in listed
        ws.idle()  # drops the merged packs from the writer's object database
        ws.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"after")])
        assert ws.read_head("p.md") == b"after"
    git(root, "fsck", "--strict")
    assert_clean(root)


def test_maintainer_runs_only_when_idle(ws: Workspace) -> None:
    now = [100.0]
    last = [100.0]
    ran = threading.Event()
    calls: list[float] = []

    def run() -> None:
        calls.append(now[0])
        ran.set()

    m = Maintainer(run, lambda: last[0], idle_seconds=5, poll_seconds=0.01, clock=lambda: now[0])
    m.start()
    try:
        assert not ran.wait(0.1)  # writes are recent
        now[0] = 106.0
        assert ran.wait(2)
        ran.clear()
        assert not ran.wait(0.1)  # nothing written since: no second run
        last[0] = 106.0
        now[0] = 112.0
        assert ran.wait(2)
    finally:
        m.stop()
    assert calls == [106.0, 112.0]


def test_packing_while_writing(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    # Merges by maintenance and by the writer race each other and the writer's reads.
    monkeypatch.setattr(maintenance, "MAX_PACKS", 2)
    monkeypatch.setattr(workspace, "PACKS_PER_LEVEL", 3)
    stop = threading.Event()
    reports = []

    def pack_loop() -> None:
        while not stop.is_set():
            reports.append(ws.maintenance())

    packer = threading.Thread(target=pack_loop)
    packer.start()
    try:
        for i in range(120):
            ws.apply(CommandMeta("x", actor="hermes"), [Write(f"d{i % 7}/p{i % 5}.md", b"v%d" % i)])
            assert ws.read_head(f"d{i % 7}/p{i % 5}.md") == b"v%d" % i
    finally:
        stop.set()
        packer.join()
    assert sum(r.merged_packs for r in reports) > 0
    ws.idle()
    assert_clean(ws.root)
    git(ws.root, "fsck", "--strict")
    assert len(git(ws.root, "log", "--format=%H").split()) > 120
