"""The in-memory twin answers as the store does, on the same scenario (``tests/service/memory.py``).

Each test runs on a real :class:`Workspace` and on a :class:`MemoryWorkspace`; what the
service relies on (ids across moves, history, base checks, idempotent replays, external
edits committed first) must agree, or service tests on the twin would prove nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mnoted.errors import BaseChanged, Conflict, NotFound
from mnoted.store import CommandMeta, Delete, Move, Workspace, WorkspaceApi, Write
from tests.service.memory import MemoryWorkspace


@pytest.fixture(params=["store", "twin"])
def ws(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorkspaceApi]:
    if request.param == "store":
        real = Workspace.init(tmp_path / "ws")
        real.settle_quiet = 0.0
        yield real
        real.close()
    else:
        twin = MemoryWorkspace(tmp_path / "ws", tmp_path / "state")
        yield twin
        twin.close()


def meta(command: str = "page.save", key: str | None = None) -> CommandMeta:
    return CommandMeta(command, actor="hermes", idempotency_key=key, request_hash="h1")


def test_a_document_keeps_its_id_across_a_move_and_history_follows_it(ws: WorkspaceApi) -> None:
    made = ws.apply(meta("page.create"), [Write("a/p.md", b"# P\n\nText.\n")])
    doc = ws.resolve("a/p.md")
    moved = ws.apply(meta("page.move"), [Move("a/p.md", "b/q.md")])
    assert ws.resolve(doc.document_id).path == "b/q.md"
    assert ws.revision_of("b/q.md") == moved.commit == ws.head
    history = ws.history(doc.document_id)
    assert [(e.commit, e.path, e.old_path, e.status) for e in history] == [
        (moved.commit, "b/q.md", "a/p.md", "R"),
        (made.commit, "a/p.md", None, "A"),
    ]
    assert ws.paths_of_commit(moved.commit) == ["b/q.md"]  # (the rename, by its new path)
    assert doc.document_id in [d.document_id for d in ws.documents("b/")]
    assert ws.blob_at(made.commit, "a/p.md") == (
        ws.blob_id("b/q.md"),
        b"# P\n\nText.\n",
    )


def test_a_stale_base_a_missing_file_and_a_taken_name_are_refused(ws: WorkspaceApi) -> None:
    ws.apply(meta(), [Write("p.md", b"one\n"), Write("q.md", b"q\n")])
    base = ws.blob_id("p.md")
    ws.apply(meta(), [Write("p.md", b"two\n", base_blob=base)])
    head = ws.head
    with pytest.raises(BaseChanged):
        ws.apply(meta(), [Write("p.md", b"three\n", base_blob=base)])
    with pytest.raises(NotFound):
        ws.apply(meta(), [Delete("gone.md")])
    with pytest.raises(Conflict):
        ws.apply(meta(), [Move("p.md", "q.md")])
    assert ws.head == head and ws.read_head("p.md") == b"two\n"


def test_an_idempotent_command_is_replayed_not_made_again(ws: WorkspaceApi) -> None:
    first = ws.apply(meta(key="k1"), [Write("p.md", b"one\n")])
    again = ws.apply(meta(key="k1"), [Write("p.md", b"one\n")])
    assert again.replayed and again.commit == first.commit and ws.head == first.commit
    [record] = ws.find_command(idempotency_key="k1")
    assert record.commit == first.commit and record.actor == "hermes"


def test_an_edit_on_disk_is_committed_before_a_write(ws: WorkspaceApi) -> None:
    ws.apply(meta(), [Write("p.md", b"one\n")])
    (ws.root / "p.md").write_bytes(b"edited\n")
    assert ws.read_disk("p.md") == b"edited\n" and ws.read_head("p.md") == b"one\n"
    done = ws.apply(meta(), [Write("q.md", b"q\n"), Write("p.md", b"two\n")])
    assert done.external_commit is not None
    found = ws.blob_at(done.external_commit, "p.md")
    assert found is not None and found[1] == b"edited\n"
    assert [e.commit for e in ws.history("p.md")][:2] == [done.commit, done.external_commit]
    assert ws.commit_external(["p.md", "q.md"]) is None  # nothing differs now
