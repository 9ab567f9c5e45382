"""Two workspaces on clones of one bare remote, synced in-process (no daemon): fetch, merge
through the store's write path, push; ids, held versions, conflict copies, rewritten remotes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pygit2
import pytest

from mnoted.core.merge import Held
from mnoted.core.page import parse_page
from mnoted.remote import blockids, git
from mnoted.remote.sync import RemoteSync, SyncConfig
from mnoted.service.pages import PageCache
from mnoted.store import CommandMeta, Delete, Move, Workspace, Write


def run_git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


class Device:
    def __init__(self, root: Path, host: str) -> None:
        self.ws = Workspace.open(root) if (root / ".git").exists() else Workspace.init(root)
        self.root = root
        self.held: list[tuple[str, Held]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        ws = self.ws

        def head() -> tuple[str | None, str]:
            ws.refresh()
            return ws.head, ws.branch

        self.pages = PageCache()
        repo = lambda: pygit2.Repository(str(root))  # noqa: E731

        self.sync = RemoteSync(
            root,
            ws.state_dir,
            lambda fn: fn(),
            hold=lambda path, held, commit: self.held.append((path, held)) or None,
            land=lambda c, e, cid: ws.land_commit(c, expect=e, command_id=cid),
            head=head,
            publish=lambda kind, **f: self.events.append((kind, f)),
            ids_in=lambda old, remote: blockids.adopt(ws, self.pages, repo(), old, remote),
            ids_out=lambda since, remote: blockids.publish(ws, self.pages, repo(), since, remote),
            config=SyncConfig(host=host),
        )

    def write(self, path: str, data: str) -> None:
        self.ws.apply(CommandMeta("test.write", actor="owner"), [Write(path, data.encode())])

    def read(self, path: str) -> str:
        return (self.root / path).read_text()

    def tree(self) -> dict[str, str]:
        return {
            p.relative_to(self.root).as_posix(): p.read_text(errors="replace")
            for p in sorted(self.root.rglob("*"))
            if p.is_file() and ".git" not in p.parts
        }

    def doc_ids(self) -> dict[str, str]:
        return {d.path: d.document_id for d in self.ws.documents()}


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Device, Device, Path]]:
    bare = tmp_path / "remote.git"
    run_git(tmp_path, "init", "--bare", "-b", "main", str(bare))
    a = Device(tmp_path / "a", "laptop")
    a.write("plan.md", "# Plan\n\nShip on Monday.\n\n- one\n- two\n")
    run_git(a.root, "remote", "add", "origin", bare.as_uri())
    assert a.sync.cycle()
    run_git(tmp_path, "clone", "-q", bare.as_uri(), str(tmp_path / "b"))
    b = Device(tmp_path / "b", "desktop")
    try:
        yield a, b, bare
    finally:
        a.ws.close()
        b.ws.close()


def settle(a: Device, b: Device) -> None:
    for _ in range(3):
        assert a.sync.cycle() and b.sync.cycle()
    assert a.sync.cycle()


def test_writes_travel_and_disjoint_edits_merge(pair: tuple[Device, Device, Path]) -> None:
    a, b, _ = pair
    assert b.read("plan.md").startswith("# Plan")
    a.write("plan.md", "# Plan\n\nShip on Tuesday.\n\n- one\n- two\n")
    b.write("plan.md", "# Plan\n\nShip on Monday.\n\n- one\n- two\n- three\n")
    b.write("b-only.md", "# From b\n")
    settle(a, b)
    want = "# Plan\n\nShip on Tuesday.\n\n- one\n- two\n- three\n"
    assert a.read("plan.md") == want == b.read("plan.md")
    assert a.tree() == b.tree()
    assert a.ws.head == b.ws.head
    assert a.doc_ids() == b.doc_ids()
    a.ws.idle()
    assert run_git(a.root, "status", "--porcelain") == ""
    merge = run_git(b.root, "log", "-1", "--merges", "--format=%P%n%B")
    assert len(merge.split("\n")[0].split()) == 2
    assert "Mnote-Merged: origin" in merge and "Mnote-Merged-Page: plan.md" in merge


def test_same_block_keeps_both_versions(pair: tuple[Device, Device, Path]) -> None:
    a, b, _ = pair
    a.write("plan.md", "# Plan\n\nShip on Tuesday (laptop).\n\n- one\n- two\n")
    b.write("plan.md", "# Plan\n\nShip on Friday (desktop).\n\n- one\n- two\n")
    settle(a, b)
    assert a.tree() == b.tree()
    text = a.read("plan.md")
    assert "<<<<" not in text
    held = a.held + b.held
    assert len(held) == 1
    _path, h = held[0]
    versions = text + h.theirs
    assert "(laptop)" in versions and "(desktop)" in versions
    status = (a if a.held else b).sync.status()
    assert status["held"][0]["path"] == "plan.md"
    assert "Mnote-Held: plan.md" in run_git(a.root, "log", "--merges", "--format=%B")


def test_edit_against_delete_and_rename_against_edit(pair: tuple[Device, Device, Path]) -> None:
    a, b, _ = pair
    a.write("gone.md", "# Gone\n\nkeep me\n")
    a.write("moved.md", "# Moved\n\nfirst\n\nsecond\n\nthird\n")
    settle(a, b)
    ids = b.doc_ids()
    a.ws.apply(CommandMeta("test.delete", actor="owner"), [Delete("gone.md")])
    b.write("gone.md", "# Gone\n\nkeep me, edited\n")
    a.ws.apply(CommandMeta("test.move", actor="owner"), [Move("moved.md", "renamed.md")])
    b.write("moved.md", "# Moved\n\nfirst\n\nsecond, edited\n\nthird\n")
    settle(a, b)
    assert a.tree() == b.tree()
    assert "edited" in a.read("gone.md")
    assert "second, edited" in a.read("renamed.md") and not (a.root / "moved.md").exists()
    assert a.doc_ids()["renamed.md"] == ids["moved.md"] == b.doc_ids()["renamed.md"]


def test_other_files_kept_side_by_side(pair: tuple[Device, Device, Path]) -> None:
    a, b, _ = pair
    a.write("data.json", '{"v": 0}\n')
    settle(a, b)
    a.write("data.json", '{"v": "laptop"}\n')
    b.write("data.json", '{"v": "desktop"}\n')
    settle(a, b)
    assert a.tree() == b.tree()
    copies = [p for p in a.tree() if "conflict from" in p]
    assert len(copies) == 1
    assert {a.read("data.json"), a.read(copies[0])} == {'{"v": "laptop"}\n', '{"v": "desktop"}\n'}


def test_new_pages_get_the_same_ids_on_both(pair: tuple[Device, Device, Path]) -> None:
    a, b, _ = pair
    a.write("a1.md", "# A1\n")
    b.write("b1.md", "# B1\n")
    settle(a, b)
    b.write("b2.md", "# B2\n")
    a.write("a2.md", "# A2\n")
    settle(a, b)
    assert a.doc_ids() == b.doc_ids()
    for d in (a, b):  # a rebuild from history gives them again
        before = d.doc_ids()
        d.ws.rebuild()
        assert d.doc_ids() == before


def test_external_edit_is_never_overwritten(pair: tuple[Device, Device, Path]) -> None:
    a, b, _ = pair
    a.write("plan.md", "# Plan\n\nShip on Tuesday.\n\n- one\n- two\n")
    a.sync.cycle()
    (b.root / "plan.md").write_text("# Plan\n\nShip on Monday.\n\n- one\n- two\n- typed\n")
    b.sync.cycle()
    assert b.read("plan.md") == "# Plan\n\nShip on Tuesday.\n\n- one\n- two\n- typed\n"
    b.ws.idle()
    assert run_git(b.root, "status", "--porcelain") == ""


def test_rewritten_remote_stops_sync(pair: tuple[Device, Device, Path], tmp_path: Path) -> None:
    a, b, bare = pair
    b.write("b.md", "# B\n")
    assert b.sync.cycle()
    assert a.sync.cycle()
    # someone force-pushes an unrelated history
    other = tmp_path / "other"
    run_git(tmp_path, "init", "-q", "-b", "main", str(other))
    (other / "x.md").write_text("x\n")
    run_git(other, "add", "x.md")
    run_git(other, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "x")
    run_git(other, "push", "-qf", bare.as_uri(), "main")
    a.write("local.md", "# Local\n")
    head = a.ws.head
    assert not a.sync.cycle()
    status = a.sync.status()["remotes"][0]
    assert "rewritten" in status["stopped"]
    assert a.ws.head == head and (a.root / "local.md").exists()
    assert "x.md" not in a.tree()
    status = a.sync.sync_now(resume=True, timeout=0.01)  # (the loop is not running here)
    assert a.sync.cycle()  # resumed: the new history is merged, nothing lost
    assert {"x.md", "local.md", "b.md"} <= set(a.tree())


def test_unreachable_remote_is_an_error_not_a_crash(pair: tuple[Device, Device, Path]) -> None:
    a, _, bare = pair
    bare.rename(bare.with_name("away.git"))
    a.write("plan.md", "# Plan\n\nlater\n")
    assert not a.sync.cycle()
    assert "fetch failed" in a.sync.status()["remotes"][0]["lastError"]
    bare.with_name("away.git").rename(bare)
    assert a.sync.cycle()
    assert a.sync.status()["remotes"][0]["ahead"] == 0


def test_secrets_in_urls_are_redacted() -> None:
    assert git.redact("fatal: https://me:tok3n@host/x.git") == "fatal: https://***@host/x.git"


def block_ids(d: Device, path: str) -> list[str]:
    return d.pages.load(d.ws, path).page.block_ids()


def test_block_ids_travel_with_the_commits(pair: tuple[Device, Device, Path]) -> None:
    a, b, _ = pair
    a.write("ids.md", "# T\n\npara one\n\npara two\n\npara three\n")
    settle(a, b)
    assert block_ids(a, "ids.md") == block_ids(b, "ids.md")
    # ids this device's commands decided (a block turned into another type keeps its id, an
    # edit the carry-over elsewhere would not pair): the other device takes them as given
    a.write("ids.md", "# T\n\n## para one\n\npara two\n\npara three\n")
    doc, blob = a.ws.resolve("ids.md"), a.ws.blob_id("ids.md")
    assert blob is not None
    data = a.ws.read_blob(blob)
    assert data is not None
    decided = ["h_decided", "p_was_para", "p_two", "p_three"]
    a.pages.remember_ids(a.ws, doc, blob, parse_page(data, "ids.md", ids=decided))
    settle(a, b)
    assert block_ids(b, "ids.md") == decided
    # a merge made on one device: the other takes the merged version's ids from its notes
    b.write("ids.md", b.read("ids.md").replace("para two", "para two (desktop)"))
    a.write("ids.md", a.read("ids.md").replace("para three", "para three (laptop)"))
    settle(a, b)
    assert "(desktop)" in a.read("ids.md") and "(laptop)" in a.read("ids.md")
    assert block_ids(a, "ids.md") == block_ids(b, "ids.md")
    assert block_ids(a, "ids.md")[:2] == decided[:2]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_over_a_network_transport(tmp_path: Path) -> None:
    """The same sync over git:// (``git daemon`` on localhost): transport is git's own."""
    import time

    served = tmp_path / "served"
    served.mkdir()
    run_git(served, "init", "-q", "--bare", "-b", "main", "notes.git")
    port = free_port()
    proc = subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--enable=receive-pack",
            f"--base-path={served}",
            "--listen=127.0.0.1",
            f"--port={port}",
            str(served),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"git://127.0.0.1:{port}/notes.git"
    a = b = None
    try:
        deadline = time.monotonic() + 20
        while subprocess.run(["git", "ls-remote", url], capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, "git daemon did not answer"
            time.sleep(0.05)
        a = Device(tmp_path / "a", "laptop")
        a.write("plan.md", "# Plan\n\none\n\ntwo\n")
        run_git(a.root, "remote", "add", "origin", url)
        assert a.sync.cycle(), a.sync.status()
        run_git(tmp_path, "clone", "-q", url, str(tmp_path / "b"))
        b = Device(tmp_path / "b", "desktop")
        a.write("plan.md", "# Plan\n\nONE\n\ntwo\n")
        b.write("plan.md", "# Plan\n\none\n\nTWO\n")
        settle(a, b)
        assert a.read("plan.md") == b.read("plan.md") == "# Plan\n\nONE\n\nTWO\n"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for d in (a, b):
            if d is not None:
                d.ws.close()


def test_three_devices_random_edits_lose_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three devices edit pages at random (the same blocks too) and sync in random orders:
    they end on one tree, every edit is in a page or a held version, and no sidecar was
    rebuilt on the way (merges and fast-forwards over them indexed in one step)."""
    import os
    import random

    from mnoted.store.sidecar import Sidecar

    rebuilds: list[int] = []
    clear = Sidecar.clear_derived
    monkeypatch.setattr(Sidecar, "clear_derived", lambda self: rebuilds.append(1) or clear(self))
    rng = random.Random(int(os.environ.get("MNOTE_SYNC_SEED", "7")))
    rounds = int(os.environ.get("MNOTE_SYNC_ROUNDS", "3"))
    bare = tmp_path / "remote.git"
    run_git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    first = Device(tmp_path / "d0", "d0")
    first.write("log.md", "# Log\n\nstart\n")
    run_git(first.root, "remote", "add", "origin", bare.as_uri())
    assert first.sync.cycle()
    devices = [first]
    for n in (1, 2):
        run_git(tmp_path, "clone", "-q", bare.as_uri(), str(tmp_path / f"d{n}"))
        devices.append(Device(tmp_path / f"d{n}", f"d{n}"))
    rebuilds.clear()  # (a new clone's first index is one)
    written: list[str] = []
    try:
        for r in range(rounds):
            for n, d in enumerate(devices):
                for k in range(rng.randint(0, 2)):
                    token = f"t{r}x{n}x{k}"
                    written.append(token)
                    page = rng.choice(["log.md", "shared.md", f"own{n}.md"])
                    path = d.root / page
                    blocks = path.read_text().split("\n\n") if path.exists() else [f"# {page}"]
                    if len(blocks) > 1 and rng.random() < 0.5:
                        i = rng.randrange(1, len(blocks))
                        blocks[i] = blocks[i].rstrip("\n") + f" {token}"
                    else:
                        blocks.append(token)
                    text = "\n\n".join(b.rstrip("\n") for b in blocks) + "\n"
                    if rng.random() < 0.5:
                        d.write(page, text)
                    else:
                        path.write_text(text)  # left for the sync to commit as external
            for d in rng.sample(devices, k=len(devices)):
                d.ws.commit_external(d.ws.scan_changes())  # (the daemon's watcher does this)
                d.sync.cycle()
        for _ in range(3):
            for d in devices:
                d.ws.commit_external(d.ws.scan_changes())
                assert d.sync.cycle()
        trees = [d.tree() for d in devices]
        assert trees[0] == trees[1] == trees[2]
        held = "".join(h.theirs for d in devices for _, h in d.held)
        held += "".join(e["theirs"] for d in devices for e in d.sync._state["held"])
        text = "".join(trees[0].values())
        assert [t for t in written if t not in text and t not in held] == []
        assert rebuilds == []
        ids = [d.doc_ids() for d in devices]
        assert ids[0] == ids[1] == ids[2]
        for path in ids[0]:
            blocks = [block_ids(d, path) for d in devices]
            assert blocks[0] == blocks[1] == blocks[2], path
        for d in devices:  # the one-step fast-forwards gave what a rebuild gives
            d.ws.rebuild()
            assert d.doc_ids() == ids[0]
    finally:
        for d in devices:
            d.ws.close()


def test_merges_are_indexed_in_one_step_with_the_ids_a_rebuild_gives(
    pair: tuple[Device, Device, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The remote's head is a merge's first parent: the device that fast-forwards over it
    replays only the merge, the device that made it indexes it in one step (its own commits
    on the second parent), and neither rebuilds; both end with the ids a rebuild gives,
    across renames, deletes, pins, a page both created, and a merge made on an unpushed one."""
    from mnoted.store.sidecar import Sidecar

    a, b, _ = pair
    rebuilds: list[int] = []
    clear = Sidecar.clear_derived
    monkeypatch.setattr(Sidecar, "clear_derived", lambda self: rebuilds.append(1) or clear(self))
    a.write("moved.md", "# Moved\n\nbody\n")
    a.write("gone.md", "# Gone\n\nbody\n")
    settle(a, b)
    a.ws.apply(CommandMeta("test.move", actor="owner"), [Move("moved.md", "renamed.md")])
    b.write("moved.md", "# Moved\n\nbody, edited on b\n")
    b.ws.apply(CommandMeta("test.delete", actor="owner"), [Delete("gone.md")])
    a.write("gone.md", "# Gone\n\nbody, edited on a\n")
    a.write("inbox.md", "# Inbox\n\nfrom a\n")
    b.write("inbox.md", "# Inbox\n\nfrom b\n")
    b.write("pinned.md", "---\nid: doc_pinned_by_b\n---\n# Pinned\n")
    a.write("a-only.md", "# A\n")
    assert b.sync.cycle()
    theirs, ran = git.fetch(a.root, "origin", "main")  # a merges but does not push yet
    assert ran.ok and theirs is not None
    a.sync._merge("origin", theirs)
    a.write("after.md", "# After\n")
    b.write("b-next.md", "# Next\n")
    assert b.sync.cycle()
    theirs, ran = git.fetch(a.root, "origin", "main")  # again: a merge over an unpushed one
    assert ran.ok and theirs is not None
    a.sync._merge("origin", theirs)
    b.write("b-more.md", "# More\n")
    b.ws.apply(CommandMeta("test.move", actor="owner"), [Move("b-more.md", "b-moved.md")])
    assert b.sync.cycle()
    settle(a, b)
    assert a.tree() == b.tree()
    assert rebuilds == []
    ids = a.doc_ids()
    assert ids == b.doc_ids()
    assert ids["pinned.md"] == "doc_pinned_by_b"
    first = pygit2.Repository(str(a.root))[a.ws.head]
    merges = [c for c in pygit2.Repository(str(a.root)).walk(first.id) if len(c.parents) == 2]
    assert merges  # (the scenario merged)
    for d in (a, b):
        d.ws.rebuild()
        assert d.doc_ids() == ids


def test_a_remote_named_in_the_workspace_config(
    pair: tuple[Device, Device, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[remote]`` of ``.mnote/config.toml`` names a remote the sync adds (and keeps at that
    URL) and its timing; a reload that does not read keeps the last good settings."""
    from mnoted.errors import WorkspaceInvalid
    from mnoted.host.remote import configured_from
    from mnoted.store.config import CONFIG_PATH

    monkeypatch.delenv("MNOTE_SYNC_INTERVAL", raising=False)
    monkeypatch.delenv("MNOTE_SYNC_PUSH_DELAY", raising=False)
    a, b, bare = pair
    run_git(b.root, "remote", "remove", "origin")
    config = b.root / CONFIG_PATH
    good = config.read_text() + f'\n[remote]\nname = "nas"\nurl = "{bare.as_uri()}"\n'
    config.write_text(good + "interval = 5\npushDelay = 0.5\n")
    b.ws.reload_config()
    b.sync._configured = lambda: configured_from(b.ws.config)
    assert b.sync._settings().interval == 5.0 and b.sync._settings().push_delay == 0.5
    b.write("from-b.md", "# From B\n")
    assert b.sync.cycle()
    assert run_git(b.root, "remote", "get-url", "nas").strip() == bare.as_uri()
    assert a.sync.cycle() and a.read("from-b.md") == "# From B\n"
    config.write_text(good + "interval = -1\n")
    with pytest.raises(WorkspaceInvalid, match=r"\[remote\] interval = -1"):
        b.ws.reload_config()
    assert b.sync._settings().interval == 5.0  # (the last good)
    run_git(b.root, "remote", "set-url", "nas", "file:///nowhere.git")
    assert b.sync.cycle()  # (the config is the truth for its remote's URL)
    assert run_git(b.root, "remote", "get-url", "nas").strip() == bare.as_uri()


def test_every_page_pushed_is_noted_in_bounded_jobs(
    pair: tuple[Device, Device, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """More pages than one writer job notes (``MAX_NOTED``): the sync notes them in several
    jobs before the push, so the other device takes every page's ids as this one has them."""
    a, b, _ = pair
    monkeypatch.setattr(blockids, "MAX_NOTED", 2)
    calls: list[int] = []
    out = a.sync._ids_out
    assert out is not None
    a.sync._ids_out = lambda since, remote: calls.append(1) or out(since, remote)
    decided: dict[str, list[str]] = {}
    for n in range(7):
        path = f"many{n}.md"
        a.write(path, f"# T{n}\n\none {n}\n\ntwo {n}\n")
        doc, blob = a.ws.resolve(path), a.ws.blob_id(path)
        assert blob is not None
        data = a.ws.read_blob(blob)
        assert data is not None
        decided[path] = [f"h_{n}", f"p_one_{n}", f"p_two_{n}"]  # (no derivation gives these)
        a.pages.remember_ids(a.ws, doc, blob, parse_page(data, path, ids=decided[path]))
    assert a.sync.cycle()
    assert len(calls) >= 4  # (7 pages, 2 a job, and one that noted nothing)
    assert b.sync.cycle()
    assert {path: block_ids(b, path) for path in decided} == decided


def test_the_loop_runs_only_while_there_is_a_remote(tmp_path: Path) -> None:
    """No remote: no thread (a thread per workspace would idle for nothing). A remote added
    with `git remote add` is noticed at the next poke (the writer's idle tick); removed
    again, the loop ends after its next cycle. (The cycles themselves are the other tests'
    business: here they run off the workspace's thread and only record an error.)"""
    bare = tmp_path / "remote.git"
    run_git(tmp_path, "init", "--bare", "-b", "main", str(bare))
    a = Device(tmp_path / "a", "laptop")
    try:
        a.write("plan.md", "# Plan\n")
        a.sync.start()
        a.sync.poke()
        assert a.sync._thread is None
        run_git(a.root, "remote", "add", "origin", bare.as_uri())
        a.sync.poke()
        thread = a.sync._thread
        assert thread is not None and thread.is_alive()
        a.sync.sync_now()
        assert thread.is_alive()
        run_git(a.root, "remote", "remove", "origin")
        a.sync.sync_now()
        thread.join(timeout=30)
        assert not thread.is_alive() and a.sync._thread is None
    finally:
        a.sync.stop()
        a.ws.close()


def test_commits_look_for_a_remote_at_most_once_a_second(tmp_path: Path) -> None:
    """A busy writer does not read Git's config at every commit, yet a remote added while
    it commits is found by the first commit a second after the last look."""
    bare = tmp_path / "remote.git"
    run_git(tmp_path, "init", "--bare", "-b", "main", str(bare))
    root = tmp_path / "ws"
    Workspace.init(root).close()
    now = [100.0]
    sync = RemoteSync(root, tmp_path / "state", lambda fn: fn(), clock=lambda: now[0])
    looks: list[float] = []
    has_remote = sync._has_remote

    def counted() -> bool:
        looks.append(now[0])
        return has_remote()

    sync._has_remote = counted  # type: ignore[method-assign]
    try:
        sync.start()
        for _ in range(3):
            now[0] += 0.25
            sync.committed()
        assert looks == [100.0] and sync._thread is None
        run_git(root, "remote", "add", "origin", bare.as_uri())
        now[0] += 0.125  # 0.875 s since the look
        sync.committed()
        assert sync._thread is None
        now[0] += 0.125
        sync.committed()
        assert looks[:2] == [100.0, 101.0] and sync._thread is not None  # (then the loop looks)
    finally:
        sync.stop()
