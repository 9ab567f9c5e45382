"""The in-memory twin answers as the store does, on the same scenario (``tests/service/memory.py``).

Each test runs on a real :class:`Workspace` and on a :class:`MemoryWorkspace`; what the
service relies on (ids across moves, history, base checks, idempotent replays, external
edits committed first) must agree, or service tests on the twin would prove nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnoted.core.blob import blob_id
from mnoted.core.search_text import parse_query
from mnoted.errors import BaseChanged, Conflict, NotFound
from mnoted.store import (
    CommandMeta,
    Delete,
    Move,
    Workspace,
    WorkspaceApi,
    Write,
    search_index,
    search_queries,
    template_files,
)
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


def test_the_files_of_commits_read_alike_on_any_thread(ws: WorkspaceApi) -> None:
    """What the search index reads: the files two commits differ in, with their new blobs,
    on the workspace's thread and through a reader made on a thread of its own."""
    first = ws.apply(meta(), [Write("a/p.md", b"# P\n"), Write("q.md", b"q\n")]).commit
    second = ws.apply(
        meta(), [Move("a/p.md", "b/p.md"), Write("q.md", b"q2\n"), Write("r.md", b"r\n")]
    ).commit
    third = ws.apply(meta(), [Delete("r.md")]).commit
    p, q2, r = blob_id(b"# P\n"), blob_id(b"q2\n"), blob_id(b"r\n")
    assert sorted(ws.files_changed(first, second)) == [
        ("a/p.md", None),
        ("b/p.md", p),
        ("q.md", q2),
        ("r.md", r),
    ]
    assert ws.files_changed(second, third) == [("r.md", None)]
    whole = dict(ws.files_changed(None, third))
    assert sorted(whole) == sorted([*template_files(), "b/p.md", "q.md"]) and whole["q.md"] == q2
    assert ws.read_blob(q2) == b"q2\n"
    with pytest.raises(KeyError):
        ws.files_changed(first, "0" * 40)
    seen: list[object] = []

    def elsewhere() -> None:
        reader = ws.commit_reader()
        try:
            seen.extend([reader.files_changed(second, third), reader.read_blob(p)])
        finally:
            reader.close()

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert seen == [[("r.md", None)], b"# P\n"]


def test_the_search_index_is_built_and_caught_up_alike(ws: WorkspaceApi, tmp_path: Path) -> None:
    """The store's search index on the workspace: a full pass on its own thread, then a
    catch-up after a write (a move, an edit and a removal), the same pages found."""
    ws.apply(meta(), [Write("notes/a.md", b"# Alpha\n\nunicorn\n"), Write("b.md", b"# B\n")])
    index = search_index.SearchIndex(ws, path=tmp_path / "index.sqlite3", wait=60.0)
    try:
        conn, complete = index.current()  # (the full pass: waited for, up to a minute)
        assert conn is not None and complete
        assert search_queries.page_count(conn) == 3  # (and Welcome.md)
        ws.apply(
            meta(),
            [Move("notes/a.md", "c.md"), Write("b.md", b"# B\n\nunicorn\n"), Delete("Welcome.md")],
        )
        conn, complete = index.current()
        assert conn is not None and complete and search_index.indexed_commit(conn) == ws.head
        query = parse_query("unicorn")
        assert query is not None
        total, hits = search_queries.search(conn, query, search_queries.Filters(), 10, 0)
        assert total == 2 and sorted(hit.path for hit in hits) == ["b.md", "c.md"]
    finally:
        index.stop()
