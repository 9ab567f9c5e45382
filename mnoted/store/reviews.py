"""Review sessions and frozen contexts of a workspace, kept across restarts.

``.git/mnote/state/reviews.sqlite3`` (never committed). A session is a proposed write and its
preview; it is not derivable from Git until it is applied (then its commit names it in a
``Mnote-Review-Session`` trailer). Like the rest of the store, a ``ReviewStore`` belongs to
the thread that opened it.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

REVIEWS_FILE = "reviews.sqlite3"

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
_PUT = (
    "INSERT INTO sessions (id, document_id, state, created, updated, body) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
    "state = excluded.state, updated = excluded.updated, body = excluded.body"
)


class ReviewStore:
    """Sessions by id (JSON bodies) and frozen contexts by run id."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / REVIEWS_FILE
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: safe; sessions are not notes
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

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
