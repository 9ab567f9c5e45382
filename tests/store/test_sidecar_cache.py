"""The sidecar answers from memory what its tables would: kept answers and kept rows.

Every write resolves its document (first as an id) and looks its idempotency key up twice;
the sidecar keeps those answers, and forgets them when a row they rest on is written, a
transaction or savepoint is undone, or the derived tables are cleared. Inside a
transaction it keeps the rows it appends (change log, commands, index marks, new
idempotency records, meta) and writes them when it commits or a query needs them. Random
sequences of those operations check each answer against the database itself, with the
kept rows written out first (as they may be at any time), and what a rolled-back
savepoint leaves against a sidecar that never wrote anything inside it.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnoted.store.database import META
from mnoted.store.model import CommandRecord
from mnoted.store.sidecar import _SCHEMA, Sidecar

PATHS = ["a.md", "b.md", "c/d.md", "e.txt"]
DOCS = ["doc_1", "doc_2", "a.md", "c/d.md"]  # ids may look like paths (a pinned id)
KEYS = ["k1", "k2"]
COMMITS = ["c1", "c2", "c3"]
EXAMPLES = int(os.environ.get("MNOTE_SIDECAR_EXAMPLES", "60"))
"""Sequences of writes tried per property (each opens two databases); 1000 digs deeper."""

operation = st.one_of(
    st.tuples(
        st.just("put"),
        st.sampled_from(PATHS),
        st.sampled_from([*DOCS, None]),
        st.sampled_from(COMMITS),
    ),
    st.tuples(st.just("drop"), st.sampled_from(PATHS)),
    st.tuples(st.just("idem"), st.sampled_from(KEYS), st.just("hash"), st.sampled_from(COMMITS)),
    st.tuples(st.just("begin")),
    st.tuples(st.just("commit")),
    st.tuples(st.just("rollback")),
    st.tuples(st.just("clear")),
    st.tuples(st.just("look"), st.sampled_from(DOCS), st.sampled_from(KEYS)),
)


def _apply(side: Sidecar, op: tuple) -> None:
    kind = op[0]
    if kind == "begin":
        side.begin()
    elif kind == "commit":
        side.commit()
    elif kind == "rollback":
        side.rollback()
    elif kind == "put":
        side.put_file(op[1], op[3], op[3], op[2])
    elif kind == "drop":
        side.drop_file(op[1])
    elif kind == "change":
        side.add_change(op[1], op[2], op[2], None, "M")
    elif kind == "command":
        side.add_command(CommandRecord(op[1], f"cmd-{op[1]}", "s", None, None, op[2], 0, {}))
    elif kind == "index":
        side.mark_index_pending([op[1]])
    elif kind == "unindex":
        side.clear_index_pending([op[1]])
    elif kind == "idem":
        side.put_idempotency(op[1], op[2], op[3], f"cmd-{op[3]}", None)
    elif kind == "result":
        side.set_result(op[1], op[2], op[3])
    elif kind == "meta":
        side.set_meta("indexed_head", op[1])
    elif kind == "clear":
        side.clear_derived()


def _truth_path(side: Sidecar, doc: str) -> str | None:
    side.write_kept()
    row = side.conn.execute(
        "SELECT path FROM files WHERE doc_id = ? ORDER BY path LIMIT 1", (doc,)
    ).fetchone()
    return None if row is None else str(row[0])


def _truth_key(side: Sidecar, key: str) -> bool:
    side.write_kept()
    query = "SELECT 1 FROM idempotency WHERE key = ?"
    return side.conn.execute(query, (key,)).fetchone() is not None


@settings(max_examples=150, deadline=None)
@given(st.lists(operation, max_size=40))
def test_kept_answers_equal_the_tables(tmp_path_factory: object, ops: list[tuple]) -> None:
    folder: Path = tmp_path_factory.mktemp("side")  # type: ignore[attr-defined]
    side = Sidecar.open(folder / "side.sqlite3")
    try:
        for op in ops:
            if op[0] == "look":
                assert side.path_of_doc(op[1]) == _truth_path(side, op[1])
                assert (side.idempotency(op[2]) is not None) == _truth_key(side, op[2])
            elif op[0] not in ("commit", "rollback") or side._depth:
                _apply(side, op)
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
    side.put_file("old.md", "b2", "r3", "doc_y")  # the path now holds another document
    assert side.path_of_doc("doc_x") is None
    assert side.path_of_doc("doc_y") == "old.md"
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


class _Reference:
    """The same tables written one statement per call, as a sidecar without kept rows."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.executescript(f"{META};{_SCHEMA}")
        self.depth = 0

    def run(self, op: tuple) -> None:
        kind, sql = op[0], self.conn.execute
        if kind == "begin":
            sql(f"SAVEPOINT s{self.depth}" if self.depth else "BEGIN IMMEDIATE")
            self.depth += 1
        elif kind == "commit":
            self.depth -= 1
            sql(f"RELEASE s{self.depth}" if self.depth else "COMMIT")
        elif kind == "rollback":
            self.depth -= 1
            if self.depth:
                sql(f"ROLLBACK TO s{self.depth}")
                sql(f"RELEASE s{self.depth}")
            else:
                sql("ROLLBACK")
        elif kind == "change":
            sql(
                "INSERT INTO changes (commit_id, doc_id, path, old_path, status) "
                "VALUES (?,?,?,NULL,'M')",
                (op[1], op[2], op[2]),
            )
        elif kind == "command":
            sql(
                "INSERT OR REPLACE INTO commands VALUES (?,?,'s',NULL,NULL,?,0,'{}')",
                (op[1], f"cmd-{op[1]}", op[2]),
            )
        elif kind == "index":
            sql("INSERT OR IGNORE INTO index_pending (path) VALUES (?)", (op[1],))
        elif kind == "unindex":
            sql("DELETE FROM index_pending WHERE path = ?", (op[1],))
        elif kind == "idem":
            sql(
                "INSERT INTO idempotency VALUES (?,?,?,?,NULL) ON CONFLICT (key) DO NOTHING",
                (op[1], op[2], op[3], f"cmd-{op[3]}"),
            )
        elif kind == "result":
            sql(
                "UPDATE idempotency SET result_json = ? WHERE key = ? AND request_hash IS ?",
                (op[3], op[1], op[2]),
            )
        elif kind == "meta":
            sql(
                "INSERT INTO meta (key, value) VALUES ('indexed_head', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (op[1],),
            )
        elif kind == "clear":
            for table in ("files", "changes", "commands", "idempotency", "index_pending"):
                sql(f"DELETE FROM {table}")


def _dump(conn: sqlite3.Connection) -> dict[str, list[tuple]]:
    return {
        "changes": list(conn.execute("SELECT * FROM changes ORDER BY seq")),
        "commands": list(conn.execute("SELECT * FROM commands ORDER BY commit_id")),
        "index": list(conn.execute("SELECT * FROM index_pending ORDER BY path")),
        "idempotency": list(conn.execute("SELECT * FROM idempotency ORDER BY key")),
        "meta": list(conn.execute("SELECT * FROM meta WHERE key = 'indexed_head'")),
    }


written = st.one_of(
    st.tuples(st.just("begin")),
    st.tuples(st.just("commit")),
    st.tuples(st.just("rollback")),
    st.tuples(st.just("clear")),
    st.tuples(st.just("change"), st.sampled_from(COMMITS), st.sampled_from(PATHS)),
    st.tuples(st.just("command"), st.sampled_from(COMMITS), st.sampled_from([*KEYS, None])),
    st.tuples(st.just("index"), st.sampled_from(PATHS)),
    st.tuples(st.just("unindex"), st.sampled_from(PATHS)),
    st.tuples(
        st.just("idem"),
        st.sampled_from(KEYS),
        st.sampled_from(["h1", "h2"]),
        st.sampled_from(COMMITS),
    ),
    st.tuples(
        st.just("result"),
        st.sampled_from(KEYS),
        st.sampled_from(["h1", "h2"]),
        st.sampled_from(["r1", "r2"]),
    ),
    st.tuples(st.just("meta"), st.sampled_from(COMMITS)),
    st.tuples(st.just("read")),
)


def _check_reads(side: Sidecar, ref: _Reference) -> None:
    for key in KEYS:
        found = side.idempotency(key)
        truth = ref.conn.execute("SELECT * FROM idempotency WHERE key = ?", (key,)).fetchone()
        assert (None if found is None else tuple(found.__dict__.values())) == truth
    meta = ref.conn.execute("SELECT value FROM meta WHERE key = 'indexed_head'").fetchone()
    assert side.get_meta("indexed_head") == (meta[0] if meta else None)
    for path in PATHS:
        truth_history = ref.conn.execute(
            "SELECT commit_id FROM changes WHERE path = ? ORDER BY seq DESC", (path,)
        )
        assert [h.commit for h in side.history(None, path, 50)] == [r[0] for r in truth_history]
    for commit in COMMITS:
        truth_commands = ref.conn.execute(
            "SELECT idem_key FROM commands WHERE commit_id = ?", (commit,)
        )
        found_commands = side.find_commands("commit_id", commit)
        assert [c.idempotency_key for c in found_commands] == [r[0] for r in truth_commands]
    truth_index = ref.conn.execute("SELECT path FROM index_pending")
    assert sorted(side.index_pending()) == sorted(r[0] for r in truth_index)


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(written, min_size=10, max_size=60))
def test_kept_rows_land_as_written_one_by_one(tmp_path_factory: object, ops: list[tuple]) -> None:
    folder: Path = tmp_path_factory.mktemp("side")  # type: ignore[attr-defined]
    side, ref = Sidecar.open(folder / "side.sqlite3"), _Reference(folder / "ref.sqlite3")
    try:
        for op in ops:
            if op[0] in ("commit", "rollback") and not side._depth:
                continue
            if op[0] == "read":  # what the service reads mid-transaction
                _check_reads(side, ref)
                continue
            _apply(side, op)
            ref.run(op)
        while side._depth:
            side.commit()
            ref.run(("commit",))
        assert _dump(side.conn) == _dump(ref.conn)
    finally:
        side.close()
        ref.conn.close()


def test_the_first_record_of_a_key_stays_inside_a_transaction(tmp_path: Path) -> None:
    side = Sidecar.open(tmp_path / "side.sqlite3")
    side.begin()
    assert side.idempotency("k") is None  # known absent: the next record is kept in memory
    side.put_idempotency("k", "h1", "c1", "cmd1", None)
    side.put_idempotency("k", "h2", "c2", "cmd2", None)  # a second commit with that key
    assert not side.set_result("k", "h2", "r2")  # not the record's request
    assert side.set_result("k", "h1", "r1")
    side.commit()
    row = side.conn.execute("SELECT * FROM idempotency").fetchall()
    assert row == [("k", "h1", "c1", "cmd1", "r1")]
    side.close()
