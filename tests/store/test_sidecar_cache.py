"""The sidecar answers some lookups from memory: those answers must equal its tables'.

Every write resolves its document (first as an id) and looks its idempotency key up twice;
the sidecar keeps those answers, and forgets them when a row they rest on is written, a
transaction or savepoint is undone, or the derived tables are cleared. Random sequences of
those operations check each kept answer against a query of the database itself.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mnoted.store.sidecar import Sidecar

PATHS = ["a.md", "b.md", "c/d.md", "e.txt"]
DOCS = ["doc_1", "doc_2", "a.md", "c/d.md"]  # ids may look like paths (a pinned id)
KEYS = ["k1", "k2"]

operation = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(PATHS), st.sampled_from([*DOCS, None])),
    st.tuples(st.just("drop"), st.sampled_from(PATHS)),
    st.tuples(st.just("idem"), st.sampled_from(KEYS)),
    st.tuples(st.just("begin")),
    st.tuples(st.just("commit")),
    st.tuples(st.just("rollback")),
    st.tuples(st.just("clear")),
    st.tuples(st.just("look"), st.sampled_from(DOCS), st.sampled_from(KEYS)),
)


def _truth_path(side: Sidecar, doc: str) -> str | None:
    row = side.conn.execute(
        "SELECT path FROM files WHERE doc_id = ? ORDER BY path LIMIT 1", (doc,)
    ).fetchone()
    return None if row is None else str(row[0])


def _truth_key(side: Sidecar, key: str) -> bool:
    query = "SELECT 1 FROM idempotency WHERE key = ?"
    return side.conn.execute(query, (key,)).fetchone() is not None


@settings(max_examples=150, deadline=None)
@given(st.lists(operation, max_size=40))
def test_kept_answers_equal_the_tables(tmp_path_factory: object, ops: list[tuple]) -> None:
    folder: Path = tmp_path_factory.mktemp("side")  # type: ignore[attr-defined]
    side = Sidecar.open(folder / "side.sqlite3")
    try:
        for n, op in enumerate(ops):
            kind = op[0]
            if kind == "put":
                side.put_file(op[1], f"{n:040x}", f"{n:040x}", op[2])
            elif kind == "drop":
                side.drop_file(op[1])
            elif kind == "idem":
                side.put_idempotency(op[1], "hash", f"{n:040x}", f"cmd{n}", None)
            elif kind == "begin":
                side.begin()
            elif kind == "commit" and side._depth:
                side.commit()
            elif kind == "rollback":
                side.rollback()
            elif kind == "clear":
                side.clear_derived()
            elif kind == "look":
                assert side.path_of_doc(op[1]) == _truth_path(side, op[1])
                assert (side.idempotency(op[2]) is not None) == _truth_key(side, op[2])
        for doc in DOCS:
            assert side.path_of_doc(doc) == _truth_path(side, doc)
        for key in KEYS:
            assert (side.idempotency(key) is not None) == _truth_key(side, key)
    finally:
        side.close()


def test_a_renamed_document_is_found_at_its_new_path(tmp_path: Path) -> None:
    side = Sidecar.open(tmp_path / "side.sqlite3")
    side.put_file("old.md", "b1", "r1", "doc_x")
    assert side.path_of_doc("doc_x") == "old.md"
    assert side.path_of_doc("new.md") is None  # a path tried as an id first
    side.begin()
    side.drop_file("old.md")
    side.put_file("new.md", "b1", "r2", "doc_x")
    assert side.path_of_doc("doc_x") == "new.md"
    side.rollback()
    assert side.path_of_doc("doc_x") == "old.md"
    side.close()


def test_a_key_cleared_then_restored_by_a_rollback_is_found_again(tmp_path: Path) -> None:
    side = Sidecar.open(tmp_path / "side.sqlite3")
    side.put_idempotency("k", "hash", "c1", "cmd1", None)
    side.begin()
    side.clear_derived()  # a rebuild that will fail
    assert side.idempotency("k") is None
    side.rollback()
    record = side.idempotency("k")
    assert record is not None and record.commit == "c1"
    side.close()
