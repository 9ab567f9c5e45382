"""Review sessions and frozen contexts of a workspace, kept across restarts.

Their tables are in the workspace database (:mod:`mnoted.store.database`), a *kept* group:
a session is a proposed write and its preview, not derivable from Git until it is applied
(then its commit names it in a ``Mnote-Review-Session`` trailer), so a version change
migrates the tables and nothing drops them. A ``ReviewStore`` uses the database's one
connection through the sidecar, on the workspace's thread: a write while a sidecar
transaction is open joins it, and is undone with it (``docs/store.md``, *The workspace
database*).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mnoted.store.database import Database, Tables, damaged, foreign, move_aside
from mnoted.store.sidecar import Sidecar

log = logging.getLogger(__name__)

LEGACY_FILE = "reviews.sqlite3"
"""The file of their own the tables had before: taken in by :func:`adopt_legacy`."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    document_id TEXT,
    state TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_doc ON sessions (document_id, updated);
CREATE INDEX IF NOT EXISTS sessions_by_state ON sessions (state, updated);
CREATE TABLE IF NOT EXISTS contexts (
    run_id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    body TEXT NOT NULL
);
"""
REVIEWS = Tables("reviews", "1", _SCHEMA, ("sessions", "contexts"), kept=True)
_PUT = (
    "INSERT INTO sessions (id, document_id, state, created, updated, body) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
    "state = excluded.state, updated = excluded.updated, body = excluded.body"
)
_COPIES = {
    "sessions": "id, document_id, state, created, updated, body",
    "contexts": "run_id, created, body",
}


def adopt_legacy(db: Database, state_dir: Path) -> list[str]:
    """Copy the sessions and contexts of a ``reviews.sqlite3`` of an earlier mnoted into
    the database, in one transaction, then delete that file (with its -wal, -shm).

    The copy is ``INSERT OR IGNORE``: a crash between the copy and the deletion copies the
    same rows again at the next open. A file SQLite cannot read is moved aside, not
    deleted; the warnings returned say so.
    """
    old = state_dir / LEGACY_FILE
    if not old.exists():
        return []
    if foreign(old):
        return [_moved(old)]
    conn = db.conn
    try:
        conn.execute("ATTACH DATABASE ? AS legacy", (str(old),))
        conn.execute("BEGIN IMMEDIATE")
        try:
            copied = 0
            for table, columns in _COPIES.items():
                if db.has_table(table, "legacy"):
                    copied += conn.execute(
                        f"INSERT OR IGNORE INTO main.{table} ({columns})"
                        f" SELECT {columns} FROM legacy.{table}"
                    ).rowcount
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.DatabaseError as exc:
        warning = _moved(old) if damaged(exc) else None  # (before a detach deletes its log)
        with contextlib.suppress(sqlite3.Error):
            conn.execute("DETACH DATABASE legacy")
        if warning is None:
            raise
        return [warning]
    conn.execute("DETACH DATABASE legacy")
    # (a checkpoint syncs the log and the database: the copy is on disk before the original
    # goes, whatever synchronous=NORMAL leaves unsynced at a commit)
    conn.execute("PRAGMA wal_checkpoint(FULL)")
    for suffix in ("", "-wal", "-shm"):
        Path(str(old) + suffix).unlink(missing_ok=True)
    log.info("took %d review records from %s into the workspace database", copied, old)
    return []


def _moved(old: Path) -> str:
    aside = move_aside(old)
    warning = (
        f"the review sessions of an earlier mnoted ({LEGACY_FILE}) could not be read; "
        f"the file was moved to {aside.name}"
    )
    log.warning("%s", warning)
    return warning


class ReviewStore:
    """Sessions by id (JSON bodies) and frozen contexts by run id."""

    def __init__(self, side: Sidecar, before: Callable[[], object]) -> None:
        self._side = side
        self._before = before  # checks the calling thread

    @property
    def _db(self) -> sqlite3.Connection:
        self._before()
        return self._side.conn

    def in_transaction(self) -> bool:
        """Whether a write now would join an open sidecar transaction (and its fate)."""
        return self._side.in_transaction

    def put(self, session: dict[str, Any], now: float) -> None:
        sid = session["sessionId"]
        row = (sid, session.get("documentId"), session["state"], now, now, json.dumps(session))
        self._db.execute(_PUT, row)

    def get(self, session_id: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT body FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def list(
        self, *, document_id: str | None = None, states: tuple[str, ...] = (), limit: int = 100
    ) -> list[dict[str, Any]]:
        query = "SELECT body FROM sessions"
        where: list[str] = []
        params: list[Any] = []
        if document_id is not None:
            where.append("document_id = ?")
            params.append(document_id)
        if states:
            where.append(f"state IN ({', '.join('?' for _ in states)})")
            params.extend(states)
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY updated DESC LIMIT ?"
        params.append(limit)
        return [dict(json.loads(r[0])) for r in self._db.execute(query, params)]

    def forget(self, states: tuple[str, ...], before: float, contexts_before: float) -> int:
        """Delete sessions in ``states`` last updated before ``before``, and contexts frozen
        before ``contexts_before``; how many rows went."""
        marks = ", ".join("?" for _ in states)
        gone = self._db.execute(
            f"DELETE FROM sessions WHERE state IN ({marks}) AND updated < ?", (*states, before)
        ).rowcount
        return (
            gone
            + self._db.execute(
                "DELETE FROM contexts WHERE created < ?", (contexts_before,)
            ).rowcount
        )

    def frozen_context(self, run_id: str) -> dict[str, Any] | None:
        """The context frozen for ``run_id``, if one was."""
        row = self._db.execute("SELECT body FROM contexts WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def freeze_context(self, run_id: str, context: dict[str, Any], now: float) -> dict[str, Any]:
        """The context frozen for ``run_id``: the first one given wins, for the whole run."""
        self._db.execute(
            "INSERT OR IGNORE INTO contexts (run_id, created, body) VALUES (?, ?, ?)",
            (run_id, now, json.dumps(context)),
        )
        row = self._db.execute("SELECT body FROM contexts WHERE run_id = ?", (run_id,)).fetchone()
        return dict(json.loads(row[0]))
