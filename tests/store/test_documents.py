"""Document ids that survive renames, revisions, history queries, and rebuilding the sidecar."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnoted.store import CommandMeta, Delete, Move, Workspace, Write, indexer
from tests.store.conftest import git

M = CommandMeta("test.cmd", actor="hermes")


def test_id_survives_renames_by_any_tool(ws: Workspace) -> None:
    ws.apply(M, [Write("a.md", b"# A\n\nsome text that stays the same\n")])
    doc = ws.resolve("a.md")
    ws.apply(M, [Move("a.md", "dir/b.md")])
    assert ws.resolve(doc.document_id).path == "dir/b.md"
    (ws.root / "dir/b.md").rename(ws.root / "c.md")  # `mv` behind mnoted's back
    ws.commit_external(["dir/b.md", "c.md"])
    assert ws.resolve("c.md").document_id == doc.document_id
    ws.idle()
    git(ws.root, "mv", "c.md", "d.md")  # `git mv` + commit by the user
    git(ws.root, "commit", "-qm", "user rename")
    assert ws.resolve(doc.document_id) == type(doc)(doc.document_id, "d.md")
    history = ws.history(doc.document_id)
    assert [h.path for h in history] == ["d.md", "c.md", "dir/b.md", "a.md"]
    assert history[-1].status == "A" and history[0].old_path == "c.md"


def test_frontmatter_id_pins_the_document(ws: Workspace) -> None:
    ws.apply(M, [Write("p.md", b"---\nid: my-page\ntitle: P\n---\n# P\n")])
    assert ws.resolve("my-page").path == "p.md"
    assert ws.resolve("p.md").document_id == "my-page"
    ws.apply(M, [Move("p.md", "q.md", b"---\nid: my-page\n---\ntotally new body\n")])
    assert ws.resolve("my-page").path == "q.md"


def test_revision_is_the_commit_that_last_changed_the_file(ws: Workspace) -> None:
    first = ws.apply(M, [Write("a.md", b"a"), Write("b.md", b"b")])
    second = ws.apply(M, [Write("b.md", b"b2")])
    assert ws.revision_of("a.md") == first.commit
    assert ws.revision_of("b.md") == second.commit
    assert ws.read_head("b.md") == b"b2"
    assert ws.read_disk("b.md") == b"b2"


def test_find_command_by_id_trace_and_key(ws: Workspace) -> None:
    meta = CommandMeta("x", actor="hermes", command_id="cmd_1", trace_id="tr", idempotency_key="k")
    result = ws.apply(meta, [Write("a.md", b"a")])
    ws.apply(CommandMeta("x", actor="hermes", trace_id="tr"), [Write("a.md", b"b")])
    assert [r.commit for r in ws.find_command(command_id="cmd_1")] == [result.commit]
    assert len(ws.find_command(trace_id="tr")) == 2
    (rec,) = ws.find_command(idempotency_key="k")
    assert rec.command_id == "cmd_1" and rec.trailers["Mnote-Trace-Id"] == "tr"


def _snapshot(ws: Workspace) -> tuple[object, ...]:
    docs = ws.documents()
    return (
        docs,
        [(d.path, ws.revision_of(d.path)) for d in docs],
        [ws.history(d.document_id) for d in docs],
        [ws.find_command(idempotency_key=f"k{i}") for i in range(12)],
    )


OPS = st.lists(
    st.tuples(
        st.sampled_from(["write", "move", "delete", "ext-move", "ext-write"]),
        st.integers(0, 5),
        st.integers(0, 5),
    ),
    min_size=1,
    max_size=12,
)


def _run_op(ws: Workspace, root: Path, i: int, op: str, a: int, b: int) -> None:
    src, dst = f"n{a}.md", f"d/n{b}.md" if b % 2 else f"n{b}.md"
    exists = ws.blob_id(src) is not None
    meta = CommandMeta("test.op", actor="hermes", idempotency_key=f"k{i}")
    body = f"# page {a}\n\n" + "stable line\n" * 20 + f"edit {i}\n"
    if op == "write" or not exists:
        ws.apply(meta, [Write(src, body.encode())])
    elif op == "delete":
        ws.apply(meta, [Delete(src)])
    elif op in ("move", "ext-move") and ws.blob_id(dst) is None and src != dst:
        if op == "move":
            ws.apply(meta, [Move(src, dst)])
        else:
            (root / dst).parent.mkdir(exist_ok=True)
            (root / src).rename(root / dst)
            ws.commit_external([src, dst])
    else:
        (root / src).write_text(body + "external\n")
        ws.commit_external([src])


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, grouped=st.booleans())
def test_rebuilt_sidecar_equals_the_incremental_one(
    tmp_path: Path, ops: list[tuple[str, int, int]], grouped: bool
) -> None:
    root = tmp_path / "ws"
    shutil.rmtree(root, ignore_errors=True)
    with Workspace.init(root) as ws:
        for i, (op, a, b) in enumerate(ops):
            with ws.group() if grouped and i % 3 == 0 else contextlib.nullcontext():
                _run_op(ws, root, i, op, a, b)
        incremental = _snapshot(ws)
        ws.rebuild()
        assert _snapshot(ws) == incremental
    (root / ".git/mnote/state/state.sqlite3").unlink()
    with Workspace.open(root) as ws:
        assert _snapshot(ws) == incremental


def test_a_corrupt_sidecar_is_rebuilt(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    with Workspace.init(root) as ws:
        ws.apply(M, [Write("a.md", b"a")])
        before = _snapshot(ws)
    (root / ".git/mnote/state/state.sqlite3").write_bytes(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        (root / f".git/mnote/state/state.sqlite3{suffix}").unlink(missing_ok=True)
    with Workspace.open(root) as ws:
        assert _snapshot(ws) == before


def test_old_versions_by_blob_and_by_revision(ws: Workspace) -> None:
    first = ws.apply(M, [Write("a.md", b"one\n")])
    old_blob = ws.blob_id("a.md")
    ws.apply(M, [Write("a.md", b"two\n")])
    assert old_blob is not None and ws.read_blob(old_blob) == b"one\n"
    assert ws.read_blob("0" * 40) is None and ws.read_blob("not-an-id") is None
    assert ws.blob_at(first.commit, "a.md") == (old_blob, b"one\n")
    assert ws.blob_at(first.commit, "missing.md") is None
    assert ws.blob_at("no-such-revision", "a.md") is None
    assert ws.blob_at(first.commit, "../escape.md") is None


def test_a_folder_reported_by_the_watcher_commits_the_files_under_it(ws: Workspace) -> None:
    body = b"# page\n\n" + b"text that stays\n" * 10
    ws.apply(M, [Write("notes/a.md", body), Write("notes/sub/b.md", body + b"b\n")])
    ids = {d.path: d.document_id for d in ws.documents()}
    (ws.root / "notes").rename(ws.root / "archive")  # `mv notes archive`
    result = ws.commit_external(["notes", "archive"])
    assert result is not None
    assert set(result.paths) == {"notes/a.md", "notes/sub/b.md", "archive/a.md", "archive/sub/b.md"}
    assert ws.resolve("archive/a.md").document_id == ids["notes/a.md"]
    assert ws.resolve("archive/sub/b.md").document_id == ids["notes/sub/b.md"]
    shutil.rmtree(ws.root / "archive")  # `rm -r archive`
    result = ws.commit_external(["archive"])
    assert result is not None and set(result.paths) == {"archive/a.md", "archive/sub/b.md"}
    assert [d.path for d in ws.documents()] == ["Welcome.md"]
    ws.idle()
    assert git(ws.root, "status", "--porcelain") == ""


def test_a_pull_with_a_merge_commit_is_indexed_like_a_rebuild(ws: Workspace) -> None:
    root = ws.root
    ws.apply(M, [Write("shared.md", b"base\n")])
    ws.idle()
    git(root, "checkout", "-q", "-b", "remote")
    (root / "from-remote.md").write_text("# From the remote\n")
    git(root, "add", "from-remote.md")
    git(root, "commit", "-qm", "remote work")
    git(root, "checkout", "-q", "main")
    ws.apply(M, [Write("local.md", b"# Local\n")])
    ws.idle()
    git(root, "merge", "-q", "--no-edit", "remote")  # what `git pull` does
    merge = git(root, "rev-parse", "HEAD").strip()
    assert ws.refresh()
    assert {d.path for d in ws.documents()} == {
        "Welcome.md",
        "shared.md",
        "local.md",
        "from-remote.md",
    }
    assert ws.revision_of("from-remote.md") == merge  # first-parent view
    incremental = _snapshot(ws)
    ws.rebuild()
    assert _snapshot(ws) == incremental
    ws.apply(M, [Write("from-remote.md", b"# Edited after the pull\n")])
    ws.idle()
    assert git(root, "status", "--porcelain") == ""


def test_documents_of_one_folder(ws: Workspace) -> None:
    ws.apply(
        CommandMeta("page.create", actor="hermes"),
        [
            Write("ai/notes/a.md", b"a\n"),
            Write("ai/b.md", b"b\n"),
            Write("aim.md", b"c\n"),
            Write("ai.md", b"d\n"),
            Write("notes/ai/e.md", b"e\n"),
        ],
    )
    assert [d.path for d in ws.documents(under="ai/")] == ["ai/b.md", "ai/notes/a.md"]
    assert {"aim.md", "ai.md", "notes/ai/e.md"} <= {d.path for d in ws.documents()}


def test_the_store_records_its_own_commits_without_reading_them_back(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes, creations and removals are recorded from what was staged, alone and in a
    group; a command that adds and removes files (a move: renames to pair) is replayed.
    Either way the sidecar equals a rebuilt one."""
    ws.apply(M, [Write("a.md", b"a"), Write("b.md", b"b")])
    replayed: list[str] = []
    replay = indexer.replay

    def counted(repo: Any, side: Any, commit: Any, *args: Any, **kwargs: Any) -> list[str]:
        replayed.append(str(commit.id))
        return replay(repo, side, commit, *args, **kwargs)

    monkeypatch.setattr(indexer, "replay", counted)
    ws.apply(M, [Write("a.md", b"a2"), Write("c.md", b"c")])
    with ws.group():
        ws.apply(M, [Delete("b.md")])
        ws.apply(M, [Write("a.md", b"a3")])
    assert replayed == []
    moved = ws.apply(M, [Move("a.md", "d/a.md")])
    assert replayed == [moved.commit]
    incremental = _snapshot(ws)
    ws.rebuild()
    assert _snapshot(ws) == incremental
