"""The workspace database: one file, table groups owned by their writers, derived groups made
again on a version change, kept ones (review sessions, grants) never lost; older layouts
(``reviews.sqlite3``, the ``kv`` table) taken in; a damaged file moved aside;
a group's hooks into its making and every open."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mnoted.errors import StorageError
from mnoted.store import Workspace
from mnoted.store.database import Database, Tables, move_aside
from mnoted.store.facades import BLOCK_IDS, GRANTS, BlockIds, Grants, IdEntries
from mnoted.store.reviews import LEGACY_FILE, REVIEWS, ReviewStore, adopt_legacy
from mnoted.store.sidecar import SCHEMA_VERSION, Sidecar

GROUPS = (REVIEWS, BLOCK_IDS, GRANTS)

# reviews.sqlite3 as mnoted wrote it before the workspace database held its tables.
OLD_REVIEWS_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, document_id TEXT, state TEXT NOT NULL, created REAL NOT NULL,
    updated REAL NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_by_doc ON sessions (document_id, updated);
CREATE INDEX IF NOT EXISTS sessions_by_state ON sessions (state, updated);
CREATE TABLE IF NOT EXISTS contexts (run_id TEXT PRIMARY KEY, created REAL NOT NULL,
    body TEXT NOT NULL);
"""
# The sidecar's kv table before typed tables replaced it.
OLD_KV = """
CREATE TABLE kv (namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (namespace, key));
"""


def session(sid: str, state: str = "awaiting_user") -> dict[str, object]:
    return {"sessionId": sid, "documentId": "doc_1", "state": state, "preview": {"n": sid}}


def old_reviews_file(state: Path, sessions: list[dict[str, object]]) -> None:
    """Write ``reviews.sqlite3`` as an earlier daemon left it when killed: its last rows
    only in the write-ahead log (copied while its connection is still open)."""
    scratch = state / "scratch"
    scratch.mkdir()
    db = sqlite3.connect(scratch / LEGACY_FILE, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(OLD_REVIEWS_SCHEMA)
    db.execute("PRAGMA wal_autocheckpoint=0")
    for s in sessions:
        db.execute(
            "INSERT INTO sessions VALUES (?, ?, ?, 1.0, 2.0, ?)",
            (s["sessionId"], s["documentId"], s["state"], json.dumps(s)),
        )
    db.execute("INSERT INTO contexts VALUES ('run_1:doc_1', 1.0, '{\"scope\": \"full\"}')")
    for suffix in ("", "-wal", "-shm"):
        shutil.copy(scratch / (LEGACY_FILE + suffix), state / (LEGACY_FILE + suffix))
    db.close()
    shutil.rmtree(scratch)
    assert (state / (LEGACY_FILE + "-wal")).stat().st_size > 0


def open_side(state: Path) -> tuple[Sidecar, ReviewStore]:
    side = Sidecar.open(state / "state.sqlite3", GROUPS)
    return side, ReviewStore(side, lambda: None)


def test_an_old_reviews_file_is_taken_in_and_deleted(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "ws")
    state = ws.state_dir
    ws.close()
    old_reviews_file(state, [session("review_a"), session("review_b", "applied")])
    ws = Workspace.open(tmp_path / "ws")
    try:
        assert ws.reviews.get("review_a") == session("review_a")
        assert [s["sessionId"] for s in ws.reviews.list(states=("applied",))] == ["review_b"]
        assert ws.reviews.frozen_context("run_1:doc_1") == {"scope": "full"}
        assert ws.state_warnings == []
    finally:
        ws.close()
    assert not any(state.glob(LEGACY_FILE + "*")) and (state / "state.sqlite3").is_file()


def test_a_copy_repeated_after_a_crash_changes_nothing(tmp_path: Path) -> None:
    """A crash after the copy's commit and before the old file's deletion: the next open
    copies again, and a session changed meanwhile keeps its newer state."""
    old_reviews_file(tmp_path, [session("review_a"), session("review_b")])
    saved = {s: (tmp_path / (LEGACY_FILE + s)).read_bytes() for s in ("", "-wal", "-shm")}
    side, store = open_side(tmp_path)
    assert adopt_legacy(side.db, tmp_path) == []
    store.put(session("review_a", "rejected"), 5.0)
    for suffix, data in saved.items():  # (as if the deletion never happened)
        (tmp_path / (LEGACY_FILE + suffix)).write_bytes(data)
    assert adopt_legacy(side.db, tmp_path) == []
    assert store.get("review_a")["state"] == "rejected"
    assert len(store.list()) == 2
    assert not (tmp_path / LEGACY_FILE).exists()
    side.close()


def test_a_damaged_old_reviews_file_is_moved_aside(tmp_path: Path) -> None:
    (tmp_path / LEGACY_FILE).write_bytes(b"not a database, but somebody's sessions" * 200)
    (tmp_path / (LEGACY_FILE + "-wal")).write_bytes(b"its log")
    side, _ = open_side(tmp_path)
    warnings = adopt_legacy(side.db, tmp_path)
    side.close()
    assert len(warnings) == 1 and "moved" in warnings[0]
    aside = sorted(tmp_path.glob(LEGACY_FILE + ".damaged-*"))
    assert len(aside) == 2 and aside[0].read_bytes().startswith(b"not a database")
    assert aside[1].name.endswith("-wal") and aside[1].read_bytes() == b"its log"


def test_kv_rows_go_to_typed_tables(tmp_path: Path) -> None:
    """A sidecar of the kv layout: block ids and grants keep their rows; kv goes."""
    path = tmp_path / "state.sqlite3"
    Sidecar.open(path).close()  # (the sidecar's own tables, version 1, as before)
    db = sqlite3.connect(path)
    db.executescript(OLD_KV)
    db.executemany(
        "INSERT INTO kv VALUES (?, ?, ?)",
        [
            ("blockids", "blob1", "h_1\np_2"),
            ("lastblob", "doc_1", "blob1"),
            ("idlist", "k1", "F 1\np_1"),
            ("grants", "grant_1", '{"grantId": "grant_1"}'),
            ("grant_by_path", "a.md", "grant_1"),
        ],
    )
    db.commit()
    db.close()
    side = Sidecar.open(path, GROUPS)
    ids, grants = BlockIds(side, lambda: None), Grants(side, lambda: None)
    assert ids.entry("blob1") == "h_1\np_2" and ids.last_blob("doc_1") == "blob1"
    assert ids.record("k1") == "F 1\np_1"
    assert grants.get("grant_1") == '{"grantId": "grant_1"}'
    assert grants.by_path("a.md") == "grant_1"
    assert not side.db.has_table("kv")
    side.close()


def test_a_derived_version_change_keeps_sessions_grants_and_stored_results(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.sqlite3"
    side, store = open_side(tmp_path)
    store.put(session("review_a"), 1.0)
    Grants(side, lambda: None).put("grant_1", "{}")
    BlockIds(side, lambda: None).keep(IdEntries("doc_1", "blob1", "p_1"))
    side.put_file("a.md", "blob1", "c1", "doc_1")
    side.put_idempotency("owner\x1fk", "hash", "c1", "cmd_1", '{"ok": true}')
    side.set_meta("indexed_head", "c1")
    side.set_meta("schema", "0")  # (written by an mnoted whose derived tables differed)
    side.close()

    side, store = open_side(tmp_path)
    assert side.get_meta("schema") == SCHEMA_VERSION
    assert side.get_meta("indexed_head") is None  # the first catch-up rebuilds
    assert side.file("a.md") is None
    assert side.idempotency("owner\x1fk").result_json == '{"ok": true}'
    assert store.get("review_a") == session("review_a")
    assert Grants(side, lambda: None).get("grant_1") == "{}"
    assert BlockIds(side, lambda: None).entry("blob1") == "p_1"  # (not this group's change)
    side.set_meta("schema.block_ids", "0")
    side.close()

    side, store = open_side(tmp_path)
    assert BlockIds(side, lambda: None).entry("blob1") is None  # its own change drops it
    assert store.get("review_a") == session("review_a")
    side.close()
    assert path.exists() and not list(tmp_path.glob("*.damaged-*"))


def test_a_kept_group_is_migrated_never_dropped(tmp_path: Path) -> None:
    v1 = Tables("notes", "1", "CREATE TABLE IF NOT EXISTS notes (k TEXT)", ("notes",), True)
    db = Database.open(tmp_path / "state.sqlite3", (v1,))
    db.conn.execute("INSERT INTO notes VALUES ('kept')")
    db.close()

    def add_column(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE notes ADD COLUMN v TEXT DEFAULT 'new'")

    v2 = Tables(
        "notes",
        "2",
        "CREATE TABLE IF NOT EXISTS notes (k TEXT, v TEXT DEFAULT 'new')",
        ("notes",),
        True,
        {"1": add_column},
    )
    db = Database.open(tmp_path / "state.sqlite3", (v2,))
    assert db.conn.execute("SELECT k, v FROM notes").fetchall() == [("kept", "new")]
    db.close()
    # Opened by the older mnoted again: it does not know version 2, and drops nothing.
    with pytest.raises(StorageError, match="version 2"):
        Database.open(tmp_path / "state.sqlite3", (v1,))
    db = Database.open(tmp_path / "state.sqlite3", (v2,))
    assert db.conn.execute("SELECT k FROM notes").fetchall() == [("kept",)]
    db.close()


def test_a_group_hooks_into_its_making_and_every_open(tmp_path: Path) -> None:
    """``on_make`` is entered before a group's tables are dropped and made and left after,
    in the same transaction; ``on_open`` runs at each open, the group made or not."""
    seen: list[str] = []

    @contextmanager
    def keep_rows(db: Database, version: str | None) -> Iterator[None]:
        rows = db.conn.execute("SELECT k FROM notes").fetchall() if version else []
        seen.append(f"make {version}")
        yield
        db.conn.executemany("INSERT INTO notes VALUES (?)", rows)

    def group(version: str) -> Tables:
        return Tables(
            "notes",
            version,
            "CREATE TABLE IF NOT EXISTS notes (k TEXT)",
            ("notes",),
            kept=False,
            on_make=keep_rows,
            on_open=lambda db: seen.append(f"open {db.meta('schema.notes')}"),
        )

    db = Database.open(tmp_path / "state.sqlite3", (group("1"),))
    db.conn.execute("INSERT INTO notes VALUES ('kept')")
    db.close()
    Database.open(tmp_path / "state.sqlite3", (group("1"),)).close()
    db = Database.open(tmp_path / "state.sqlite3", (group("2"),))
    assert db.conn.execute("SELECT k FROM notes").fetchall() == [("kept",)]
    db.close()
    assert seen == ["make None", "open 1", "open 1", "make 1", "open 2"]


def test_a_damaged_database_is_moved_aside_and_the_workspace_opens(tmp_path: Path) -> None:
    ws = Workspace.init(tmp_path / "ws")
    state = ws.state_dir
    ws.close()
    garbage = b"\x00garbage where the database was" * 500
    (state / "state.sqlite3").write_bytes(garbage)
    (state / "state.sqlite3-wal").write_bytes(b"wal")
    ws = Workspace.open(tmp_path / "ws")
    try:
        assert len(ws.state_warnings) == 1 and "moved" in ws.state_warnings[0]
        assert ws.resolve("Welcome.md").path == "Welcome.md"  # rebuilt from Git
    finally:
        ws.close()
    aside = sorted(p.name for p in state.glob("state.sqlite3.damaged-*"))
    assert len(aside) == 2 and aside[1].endswith("-wal")
    assert (state / aside[0]).read_bytes() == garbage


def test_a_review_write_inside_a_sidecar_transaction_shares_its_fate(tmp_path: Path) -> None:
    """One connection: a review write while a sidecar transaction is open joins it (a
    second connection would wait for the write lock its own thread holds)."""
    side, store = open_side(tmp_path)
    side.begin()
    side.put_file("a.md", "blob1", "c1", "doc_1")
    store.put(session("review_undone"), 1.0)
    side.rollback()
    assert store.get("review_undone") is None and side.file("a.md") is None
    side.begin()
    store.put(session("review_kept"), 1.0)
    assert store.in_transaction()
    side.commit()
    assert not store.in_transaction()
    side.close()
    side, store = open_side(tmp_path)
    assert store.get("review_kept") == session("review_kept")
    side.close()


def test_a_database_with_a_damaged_first_page_is_moved_aside(tmp_path: Path) -> None:
    side, store = open_side(tmp_path)
    store.put(session("review_a"), 1.0)
    side.close()
    path = tmp_path / "state.sqlite3"
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * 3996  # (the header stays: SQLite reads a corrupt schema)
    path.write_bytes(bytes(data))
    side, store = open_side(tmp_path)
    assert len(side.db.warnings) == 1 and store.get("review_a") is None
    side.close()
    aside = list(tmp_path.glob("state.sqlite3.damaged-*"))
    assert [p.read_bytes() for p in aside if not p.name.endswith(("-wal", "-shm"))] == [bytes(data)]


def test_a_second_connection_of_the_same_thread_could_not_write_during_a_transaction(
    tmp_path: Path,
) -> None:
    """Why the review store shares the database's one connection: a connection of its own, on the
    workspace's thread, would wait for the write lock that thread's open transaction holds
    (until busy_timeout; here none), and fail."""
    side, _ = open_side(tmp_path)
    other = sqlite3.connect(tmp_path / "state.sqlite3", isolation_level=None, timeout=0)
    side.begin()
    side.put_file("a.md", "blob1", "c1", "doc_1")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        other.execute("INSERT INTO contexts VALUES ('run', 1.0, '{}')")
    side.rollback()
    other.close()
    side.close()


def test_files_moved_aside_in_the_same_second_are_all_kept(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    for n in range(3):
        path.write_bytes(f"damaged {n}".encode())
        move_aside(path, now=0.0)
    kept = sorted(p.read_bytes() for p in tmp_path.glob("state.sqlite3.damaged-*"))
    assert kept == [b"damaged 0", b"damaged 1", b"damaged 2"]
