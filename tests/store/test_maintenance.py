"""Background packing of loose objects."""

from __future__ import annotations

import threading

from mnoted.store import CommandMeta, Maintainer, Workspace, Write
from mnoted.store.maintenance import MAX_PACKS, loose_objects, pack_object_ids
from tests.store.conftest import assert_clean, git


def test_packing_removes_loose_objects_and_keeps_history(ws: Workspace) -> None:
    for i in range(20):
        ws.apply(CommandMeta("x", actor="hermes"), [Write(f"p{i % 3}.md", b"v%d" % i)])
    assert len(loose_objects(ws.gitdir)) > 40
    report = ws.maintenance()
    assert report.packed > 40 and report.removed_loose == report.packed
    assert loose_objects(ws.gitdir) == []
    ws.apply(CommandMeta("x", actor="hermes"), [Write("p0.md", b"after")])
    ws.idle()
    assert_clean(ws.root)
    assert git(ws.root, "count-objects", "-v").count("\n") > 0


def test_many_packs_are_merged(ws: Workspace) -> None:
    for i in range(MAX_PACKS + 2):
        ws.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"v%d" % i)])
        ws.maintenance()
    packs = list((ws.gitdir / "objects/pack").glob("*.pack"))
    assert len(packs) <= MAX_PACKS
    listed = {h for p in packs for h in pack_object_ids(p.with_suffix(".idx"))}
    assert git(ws.root, "rev-parse", "HEAD").strip() in listed
    ws.idle()
    assert_clean(ws.root)


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


def test_packing_while_writing(ws: Workspace) -> None:
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
    assert sum(r.packed for r in reports) > 0
    ws.idle()
    assert_clean(ws.root)
