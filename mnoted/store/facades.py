"""Narrow handles the service layer uses for the workspace database: idempotency records,
the block-id cache and open file grants (each typed table group declared beside its handle)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from mnoted.errors import IdempotencyConflict, NotFound
from mnoted.store.database import Tables
from mnoted.store.model import IdempotencyRecord, scoped_key
from mnoted.store.sidecar import Sidecar


class Idempotency:
    """Idempotency records: (actor, key) → request fingerprint, commit and (when stored) result.

    A key belongs to the actor that sent it: another actor's records are never found, so
    nothing in an answer reveals them and two agents picking the same key do not collide.
    """

    def __init__(self, side: Sidecar, before: Callable[[], object]) -> None:
        self._side = side
        self._before = before  # checks the calling thread and catches up with HEAD

    def lookup(self, key: str, actor: str) -> IdempotencyRecord | None:
        self._before()
        rec = self._side.idempotency(scoped_key(actor, key))
        return None if rec is None else replace(rec, key=key)

    def check(self, key: str, request_hash: str | None, actor: str) -> IdempotencyRecord | None:
        """``actor``'s record for the same request, None if new; a different request raises."""
        rec = self.lookup(key, actor)
        if rec is not None and rec.request_hash != request_hash:
            raise IdempotencyConflict(
                f"idempotency key {key!r} was already used for a different request",
                key=key,
                commit=rec.commit,
            )
        return rec

    def forget_results(self, before: float) -> int:
        """Drop the stored answers of commands committed before ``before`` (Unix time)."""
        self._before()
        return self._side.forget_results(int(before))

    def record(self, key: str, request_hash: str | None, result_json: str, actor: str) -> None:
        """Store the result to replay for ``actor``'s ``key`` (its command is committed)."""
        self._before()
        if self._side.set_result(scoped_key(actor, key), request_hash, result_json):
            return
        if self.check(key, request_hash, actor) is None:  # (a different request raises)
            raise NotFound(f"no committed command has idempotency key {key!r}", key=key)


BLOCK_IDS = Tables(
    "block_ids",
    "1",
    """
CREATE TABLE IF NOT EXISTS block_ids (blob TEXT PRIMARY KEY, ids TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS last_blob (doc_id TEXT PRIMARY KEY, blob TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS id_records (key TEXT PRIMARY KEY, body TEXT NOT NULL);
""",
    ("block_ids", "last_blob", "id_records"),
    kept=False,
    from_kv="""
INSERT OR IGNORE INTO block_ids SELECT key, value FROM kv WHERE namespace = 'blockids';
INSERT OR IGNORE INTO last_blob SELECT key, value FROM kv WHERE namespace = 'lastblob';
INSERT OR IGNORE INTO id_records SELECT key, value FROM kv WHERE namespace = 'idlist';
""",
)
"""The block-id cache of :mod:`mnoted.service.idlists`: derived (ids are carried over from
the history again), yet kept by a rebuild, and copied from the legacy ``kv`` table so the ids
handed out before stay the same."""

GRANTS = Tables(
    "grants",
    "1",
    """
CREATE TABLE IF NOT EXISTS grants (grant_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS grant_by_path (path TEXT PRIMARY KEY, grant_id TEXT NOT NULL);
""",
    ("grants", "grant_by_path"),
    kept=True,
    from_kv="""
INSERT OR IGNORE INTO grants SELECT key, value FROM kv WHERE namespace = 'grants';
INSERT OR IGNORE INTO grant_by_path SELECT key, value FROM kv WHERE namespace = 'grant_by_path';
""",
)
"""Open file grants of :mod:`mnoted.service.file_tools` (not in Git: kept)."""


@dataclass(frozen=True)
class IdEntries:
    """What keeps ``blob``'s ids as the document's newest: the blob's entry ``stored`` (the
    list, or ``@<record key>``; None leaves it as it is) and a new ``record`` (key, body)."""

    document_id: str
    blob: str
    stored: str | None
    record: tuple[str, str] | None = None


class BlockIds:
    """The block-id cache: a blob's id entry, a document's newest blob, id-list records."""

    def __init__(self, side: Sidecar, before: Callable[[], object]) -> None:
        self._side = side
        self._before = before  # checks the calling thread

    def _one(self, sql: str, key: str) -> str | None:
        self._before()
        row = self._side.conn.execute(sql, (key,)).fetchone()
        return None if row is None else str(row[0])

    def entry(self, blob: str) -> str | None:
        return self._one("SELECT ids FROM block_ids WHERE blob = ?", blob)

    def last_blob(self, document_id: str) -> str | None:
        return self._one("SELECT blob FROM last_blob WHERE doc_id = ?", document_id)

    def record(self, key: str) -> str | None:
        return self._one("SELECT body FROM id_records WHERE key = ?", key)

    def keep(self, entries: IdEntries) -> None:
        self._before()
        conn = self._side.conn
        if entries.record is not None:
            conn.execute(
                "INSERT INTO id_records (key, body) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET body = excluded.body",
                entries.record,
            )
        if entries.stored is not None:
            conn.execute(
                "INSERT INTO block_ids (blob, ids) VALUES (?, ?)"
                " ON CONFLICT (blob) DO UPDATE SET ids = excluded.ids",
                (entries.blob, entries.stored),
            )
        conn.execute(
            "INSERT INTO last_blob (doc_id, blob) VALUES (?, ?)"
            " ON CONFLICT (doc_id) DO UPDATE SET blob = excluded.blob",
            (entries.document_id, entries.blob),
        )


class Grants:
    """Open file grants by id (JSON bodies), and the legacy path → grant id marks."""

    def __init__(self, side: Sidecar, before: Callable[[], object]) -> None:
        self._side = side
        self._before = before  # checks the calling thread

    def get(self, grant_id: str) -> str | None:
        self._before()
        row = self._side.conn.execute(
            "SELECT body FROM grants WHERE grant_id = ?", (grant_id,)
        ).fetchone()
        return None if row is None else str(row[0])

    def put(self, grant_id: str, body: str) -> None:
        self._before()
        self._side.conn.execute(
            "INSERT INTO grants (grant_id, body) VALUES (?, ?)"
            " ON CONFLICT (grant_id) DO UPDATE SET body = excluded.body",
            (grant_id, body),
        )

    def delete(self, grant_id: str) -> None:
        self._before()
        self._side.conn.execute("DELETE FROM grants WHERE grant_id = ?", (grant_id,))

    def by_path(self, path: str) -> str | None:
        """The grant a grant made before private copies left open on ``path``."""
        self._before()
        row = self._side.conn.execute(
            "SELECT grant_id FROM grant_by_path WHERE path = ?", (path,)
        ).fetchone()
        return None if row is None else str(row[0])

    def drop_path(self, path: str) -> None:
        self._before()
        self._side.conn.execute("DELETE FROM grant_by_path WHERE path = ?", (path,))
