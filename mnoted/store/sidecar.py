"""The sidecar: the derived tables of the workspace database that record Git history, and
the answers and rows it keeps in memory around them.

Its tables (the group :data:`SIDECAR`) are the path → (blob, revision, documentId) registry
``files``, the per-document change log ``changes``, the ``commands`` found by their
trailers, the ``idempotency`` records and the paths whose Git index entry still has to be
refreshed (``index_pending``); its values in ``meta`` are the indexed head and branch. All
can be computed again from Git (``indexer.rebuild``): a version change drops and remakes
them, keeping only the stored results of idempotency records. A :class:`Sidecar` uses the
connection of a :class:`~mnoted.store.database.Database`; its transactions nest (the outer
one a ``BEGIN``, inner ones savepoints), and inside one it keeps appended rows until a
commit or a query needs them (:class:`_Later`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from mnoted.store.database import Database, Tables
from mnoted.store.model import CommandRecord, HistoryEntry, IdempotencyRecord

SCHEMA_VERSION = "1"
"""Version of this module's tables (meta ``schema``)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, blob TEXT NOT NULL, revision TEXT NOT NULL, doc_id TEXT);
CREATE INDEX IF NOT EXISTS files_doc ON files (doc_id);
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, commit_id TEXT NOT NULL, doc_id TEXT,
    path TEXT NOT NULL, old_path TEXT, status TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS changes_doc ON changes (doc_id, seq);
CREATE INDEX IF NOT EXISTS changes_path ON changes (path, seq);
CREATE TABLE IF NOT EXISTS commands (
    commit_id TEXT PRIMARY KEY, command_id TEXT NOT NULL, subject TEXT NOT NULL,
    actor TEXT, trace_id TEXT, idem_key TEXT, time INTEGER NOT NULL, trailers TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS commands_id ON commands (command_id);
CREATE INDEX IF NOT EXISTS commands_trace ON commands (trace_id);
CREATE INDEX IF NOT EXISTS commands_idem ON commands (idem_key);
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY, request_hash TEXT, commit_id TEXT NOT NULL,
    command_id TEXT NOT NULL, result_json TEXT);
CREATE TABLE IF NOT EXISTS index_pending (path TEXT PRIMARY KEY);
"""
_KEYS_SCOPED = "idempotency_keys"
"""Meta key: ``actor`` once idempotency records are keyed by actor and key."""
_ROWS_KEPT = 50_000
_MISSING = object()
_ROWS_LATER = 500
_UNKNOWN = ("", "", None)  # a row not kept (identity compared)

_ADD_CHANGES = "INSERT INTO changes (commit_id, doc_id, path, old_path, status) VALUES (?,?,?,?,?)"
_ADD_COMMANDS = (
    "INSERT OR REPLACE INTO commands (commit_id, command_id, subject, actor, trace_id,"
    " idem_key, time, trailers) VALUES (?,?,?,?,?,?,?,?)"
)
_ADD_INDEX_PENDING = "INSERT OR IGNORE INTO index_pending (path) VALUES (?)"
_ADD_IDEMPOTENCY = (
    "INSERT INTO idempotency (key, request_hash, commit_id, command_id, result_json)"
    " VALUES (?,?,?,?,?) ON CONFLICT (key) DO NOTHING"
)

_IdempotencyRow = tuple[str, str | None, str, str, str | None]


@contextmanager
def _keep_results(db: Database, version: str | None) -> Iterator[None]:
    """The group's ``on_make``: a remade sidecar has no ``indexed_head`` (the first catch-up
    rebuilds it) and keeps the idempotency records with a stored result, if the old table
    can be read as this version reads it (as a rebuild does: the catch-up re-attaches
    those whose commit is still in history)."""
    results: list[tuple[object, ...]] = []
    if version is not None and db.meta(_KEYS_SCOPED) == "actor":
        with suppress(sqlite3.OperationalError):  # (another version's table: none kept)
            results = db.conn.execute(
                "SELECT key, request_hash, commit_id, command_id, result_json FROM idempotency"
                " WHERE result_json IS NOT NULL"
            ).fetchall()
    db.put_meta("indexed_head", None)
    db.put_meta(_KEYS_SCOPED, "actor")
    yield
    if results:
        db.conn.executemany(
            "INSERT OR IGNORE INTO idempotency (key, request_hash, commit_id, command_id,"
            " result_json) VALUES (?,?,?,?,?)",
            results,
        )


def _scope_keys(db: Database) -> None:
    """The group's ``on_open``: give records kept before keys were scoped to their actor
    (``store.model.scoped_key``) the actor that sent them: who accepted the session, else
    the commit's actor."""
    if db.meta(_KEYS_SCOPED) == "actor":
        return
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        db.conn.execute(
            "UPDATE idempotency SET key = coalesce((SELECT coalesce("
            "json_extract(c.trailers, '$.\"Mnote-Accepted-By\"'), c.actor, '')"
            " FROM commands c WHERE c.commit_id = idempotency.commit_id), '')"
            " || char(31) || key WHERE instr(key, char(31)) = 0"
        )
        db.put_meta(_KEYS_SCOPED, "actor")
    except BaseException:
        db.conn.execute("ROLLBACK")
        raise
    db.conn.execute("COMMIT")


SIDECAR = Tables(
    "sidecar",
    SCHEMA_VERSION,
    _SCHEMA,
    ("files", "changes", "commands", "idempotency", "index_pending"),
    kept=False,
    meta_key="schema",
    on_make=_keep_results,
    on_open=_scope_keys,
)
"""This module's tables. Derived, except that a version change keeps the stored results
of idempotency records (:func:`_keep_results`)."""
_DERIVED_TABLES = SIDECAR.tables


@dataclass
class _Later:
    """Rows written inside a transaction, kept until it commits: a group of commands then
    writes each table in one statement, not one per command (a statement's fixed cost,
    paid per row, would dominate a group's bookkeeping).

    The change log, commands and index marks are only appended to and read by queries that
    write them out first; meta values and new idempotency records are read from here. They
    may be written at any time: a savepoint's mark holds what was kept when it opened, and
    rolling it back puts that back (what was written since, SQLite undoes).
    """

    changes: list[tuple[str, str | None, str, str | None, str]] = field(default_factory=list)
    commands: list[tuple[object, ...]] = field(default_factory=list)
    index: list[str] = field(default_factory=list)
    meta: dict[str, str | None] = field(default_factory=dict)
    idempotency: dict[str, _IdempotencyRow] = field(default_factory=dict)

    def rows(self) -> int:
        return len(self.changes) + len(self.commands) + len(self.index)

    def mark(self) -> _Later:
        """What to go back to if the savepoint opened now is rolled back."""
        return _Later(
            list(self.changes),
            list(self.commands),
            list(self.index),
            dict(self.meta),
            dict(self.idempotency),
        )


class Sidecar:
    """The sidecar's tables on the workspace database's connection; owned by the workspace's
    thread."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.conn = db.conn
        self._depth = 0  # open transactions: the outer one a BEGIN, inner ones savepoints
        # Rows read or written through this connection (the only writer): a write looks up
        # its page's row five times, and the branch and indexed head twice. Emptied on a
        # rollback, whose rows may differ.
        self._files: dict[str, tuple[str, str, str | None] | None] = {}
        self._meta: dict[str, str | None] = {}
        # Answers that change only with a file's row or an idempotency record, both written
        # here: every write resolves its document (a path, first tried as an id) and looks
        # its idempotency key up twice (the service, then the store), each a query.
        self._doc_paths: dict[str, str | None] = {}
        self._absent_keys: set[str] = set()
        self._later = _Later()
        self._marks: list[_Later] = []  # one per open transaction or savepoint

    @classmethod
    def open(cls, path: Path, groups: Iterable[Tables] = ()) -> Sidecar:
        """Open the workspace database with this module's tables and ``groups``
        (:meth:`Database.open`). An empty or reset sidecar group has no ``indexed_head``, so
        the first catch-up rebuilds it."""
        return cls(Database.open(path, (SIDECAR, *groups)))

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open on the connection (writes now join it)."""
        return self._depth > 0

    def close(self) -> None:
        self.db.close()

    def begin(self) -> None:
        """Open a transaction, or a savepoint inside the one already open (they nest)."""
        self.conn.execute(f"SAVEPOINT s{self._depth}" if self._depth else "BEGIN IMMEDIATE")
        self._marks.append(self._later.mark())
        self._depth += 1

    def commit(self) -> None:
        self._depth -= 1
        self._marks.pop()
        try:
            if self._depth:
                self.conn.execute(f"RELEASE s{self._depth}")
                return
            self.write_kept()
            self.conn.execute("COMMIT")
        except BaseException:  # SQLite may have rolled the transaction back
            self._forget()
            if not self._depth:
                self._later = _Later()
                if self.conn.in_transaction:  # (the kept rows failed: nothing was committed)
                    self.conn.execute("ROLLBACK")
            raise

    def rollback(self) -> None:
        """Undo the innermost open transaction (nothing if none is open)."""
        if not self._depth:
            return
        self._depth -= 1
        self._later = self._marks.pop()
        self._forget()
        if self._depth:
            self.conn.execute(f"ROLLBACK TO s{self._depth}")
            self.conn.execute(f"RELEASE s{self._depth}")
        else:
            self.conn.execute("ROLLBACK")

    def _write_rows(self) -> None:
        """Write the kept change log, commands and index marks (before a query reads them)."""
        later = self._later
        if later.changes:
            self.conn.executemany(_ADD_CHANGES, later.changes)
            later.changes = []
        if later.commands:
            self.conn.executemany(_ADD_COMMANDS, later.commands)
            later.commands = []
        if later.index:
            self.conn.executemany(_ADD_INDEX_PENDING, [(p,) for p in later.index])
            later.index = []

    def _bound(self) -> None:
        """Write the kept rows out once there are many (a rebuild's, the first commit of a
        large workspace): memory stays small, and so does each savepoint's copy."""
        if self._later.rows() >= _ROWS_LATER:
            self._write_rows()

    def write_kept(self) -> None:
        """Write everything kept into the open transaction: when it is about to commit, or
        earlier (a group's rows, while its landing waits for the disk)."""
        self._write_rows()
        later = self._later
        if later.idempotency:
            self.conn.executemany(_ADD_IDEMPOTENCY, list(later.idempotency.values()))
            later.idempotency = {}
        for key, value in later.meta.items():
            self._write_meta(key, value)
        later.meta = {}

    def _forget(self) -> None:
        """Drop the rows kept from reads and writes (a transaction was undone)."""
        self._files.clear()
        self._meta.clear()
        self._doc_paths.clear()
        self._absent_keys.clear()

    # meta -----------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        if key in self._later.meta:
            return self._later.meta[key]
        if key in self._meta:
            return self._meta[key]
        value = self._meta[key] = self.db.meta(key)
        return value

    def set_meta(self, key: str, value: str | None) -> None:
        if self._later.meta.get(key, self._meta.get(key, _MISSING)) == value:
            return
        if self._depth:
            self._later.meta[key] = value
        else:
            self._write_meta(key, value)

    def _write_meta(self, key: str, value: str | None) -> None:
        self._meta[key] = value
        self.db.put_meta(key, value)

    def clear_derived(self) -> dict[str, tuple[str, str]]:
        """Empty the history-derived tables; return kept results ``key -> (commit, json)``."""
        self.write_kept()
        kept = {
            str(k): (str(c), str(r))
            for k, c, r in self.conn.execute(
                "SELECT key, commit_id, result_json FROM idempotency WHERE result_json IS NOT NULL"
            )
        }
        for table in _DERIVED_TABLES:
            self.conn.execute(f"DELETE FROM {table}")  # fixed table names, no user input
        self._files.clear()
        self._doc_paths.clear()
        return kept

    # files ----------------------------------------------------------------------------------
    def file(self, path: str) -> tuple[str, str, str | None] | None:
        """``(blob, revision, doc_id)`` of a tracked path."""
        if path in self._files:
            return self._files[path]
        row = self.conn.execute(
            "SELECT blob, revision, doc_id FROM files WHERE path = ?", (path,)
        ).fetchone()
        found = None if row is None else (row[0], row[1], row[2])
        if len(self._files) >= _ROWS_KEPT:
            self._files.clear()
        self._files[path] = found
        return found

    def path_of_doc(self, doc_id: str) -> str | None:
        if doc_id in self._doc_paths:
            return self._doc_paths[doc_id]
        row = self.conn.execute(
            "SELECT path FROM files WHERE doc_id = ? ORDER BY path LIMIT 1", (doc_id,)
        ).fetchone()
        path = None if row is None else str(row[0])
        if len(self._doc_paths) >= _ROWS_KEPT:
            self._doc_paths.clear()
        self._doc_paths[doc_id] = path
        return path

    def _moving(self, path: str, doc_id: str | None) -> None:
        """Forget the documents' paths a write of ``path``'s row may change: its new
        document's and its old one's (all of them when the old row is not known)."""
        old = self._files.get(path, _UNKNOWN)
        if old is _UNKNOWN:
            self._doc_paths.clear()
            return
        if old is not None and old[2] is not None:
            self._doc_paths.pop(old[2], None)
        if doc_id is not None:
            self._doc_paths.pop(doc_id, None)

    def put_file(self, path: str, blob: str, revision: str, doc_id: str | None) -> None:
        self._moving(path, doc_id)
        self.conn.execute(
            "INSERT INTO files (path, blob, revision, doc_id) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (path) DO UPDATE SET blob = excluded.blob, "
            "revision = excluded.revision, doc_id = excluded.doc_id",
            (path, blob, revision, doc_id),
        )
        self._files[path] = (blob, revision, doc_id)

    def drop_file(self, path: str) -> None:
        self._moving(path, None)
        self.conn.execute("DELETE FROM files WHERE path = ?", (path,))
        self._files[path] = None

    def documents(self, under: str = "") -> list[tuple[str, str, str, str]]:
        """``(doc_id, path, blob, revision)`` of every tracked document whose path starts
        with ``under``, by path."""
        # A range on the primary key: a folder of a 100,000-page workspace costs its own size.
        upper = under[:-1] + chr(ord(under[-1]) + 1) if under else "\U0010ffff"
        return [
            (str(d), str(p), str(b), str(r))
            for p, d, b, r in self.conn.execute(
                "SELECT path, doc_id, blob, revision FROM files WHERE path >= ? AND path < ? "
                "AND doc_id IS NOT NULL ORDER BY path",
                (under, upper),
            )
        ]

    # history --------------------------------------------------------------------------------
    def add_change(
        self, commit: str, doc_id: str | None, path: str, old_path: str | None, status: str
    ) -> None:
        row = (commit, doc_id, path, old_path, status)
        if self._depth:
            self._later.changes.append(row)
            self._bound()
        else:
            self.conn.execute(_ADD_CHANGES, row)

    def doc_before(self, path: str, skip: set[str]) -> str | None:
        """The document id of ``path``'s latest change by a commit not in ``skip`` (what
        :func:`indexer.advance_merge` asks for the id a merge base gave a path)."""
        self._write_rows()
        for commit, doc, status in self.conn.execute(
            "SELECT commit_id, doc_id, status FROM changes WHERE path = ? ORDER BY seq DESC",
            (path,),
        ):
            if commit not in skip:
                return None if status == "D" else (str(doc) if doc else None)
        return None

    def paths_since(self, commits: set[str]) -> set[str]:
        """Paths (new and old) of the latest change rows, as long as their commit is in
        ``commits``: the rows of the commits indexed since a merge base, which are the last
        ones written (the rows before them are of the base's ancestors)."""
        self._write_rows()
        out: set[str] = set()
        for commit, path, old in self.conn.execute(
            "SELECT commit_id, path, old_path FROM changes ORDER BY seq DESC"
        ):
            if commit not in commits:
                break
            out.add(str(path))
            if old:
                out.add(str(old))
        return out

    def history(self, doc_id: str | None, path: str, limit: int) -> list[HistoryEntry]:
        self._write_rows()
        where, arg = ("c.doc_id = ?", doc_id) if doc_id else ("c.path = ?", path)
        rows = self.conn.execute(
            "SELECT c.commit_id, c.path, c.old_path, c.status, m.command_id, m.actor, m.subject,"
            f" m.time FROM changes c LEFT JOIN commands m ON m.commit_id = c.commit_id"
            f" WHERE {where} ORDER BY c.seq DESC LIMIT ?",
            (arg, limit),
        )
        return [
            HistoryEntry(
                commit=r[0],
                path=r[1],
                old_path=r[2],
                status=r[3],
                command_id=r[4],
                actor=r[5],
                subject=r[6] or "",
                time=int(r[7] or 0),
            )
            for r in rows
        ]

    def paths_of_commit(self, commit: str) -> list[str]:
        self._write_rows()
        return [
            str(r[0])
            for r in self.conn.execute(
                "SELECT path FROM changes WHERE commit_id = ? ORDER BY seq", (commit,)
            )
        ]

    def add_command(self, rec: CommandRecord) -> None:
        row = (
            rec.commit,
            rec.command_id,
            rec.subject,
            rec.actor,
            rec.trace_id,
            rec.idempotency_key,
            rec.time,
            json.dumps(rec.trailers, sort_keys=True),
        )
        if self._depth:
            self._later.commands.append(row)
            self._bound()
        else:
            self.conn.execute(_ADD_COMMANDS, row)

    def find_commands(self, column: str, value: str) -> list[CommandRecord]:
        assert column in ("command_id", "trace_id", "idem_key", "commit_id")
        self._write_rows()
        rows = self.conn.execute(
            "SELECT commit_id, command_id, subject, actor, trace_id, idem_key, time, trailers"
            f" FROM commands WHERE {column} = ? ORDER BY time, rowid",
            (value,),
        )
        return [
            CommandRecord(
                commit=r[0],
                command_id=r[1],
                subject=r[2],
                actor=r[3],
                trace_id=r[4],
                idempotency_key=r[5],
                time=int(r[6]),
                trailers=json.loads(r[7]),
            )
            for r in rows
        ]

    # idempotency ----------------------------------------------------------------------------
    def idempotency(self, key: str) -> IdempotencyRecord | None:
        if key in self._later.idempotency:
            return IdempotencyRecord(*self._later.idempotency[key])
        if key in self._absent_keys:
            return None
        row = self.conn.execute(
            "SELECT key, request_hash, commit_id, command_id, result_json FROM idempotency"
            " WHERE key = ?",
            (key,),
        ).fetchone()
        if row is None:
            if len(self._absent_keys) >= _ROWS_KEPT:
                self._absent_keys.clear()
            self._absent_keys.add(key)
            return None
        return IdempotencyRecord(*row)

    def put_idempotency(
        self,
        key: str,
        request_hash: str | None,
        commit: str,
        command_id: str,
        result_json: str | None,
    ) -> None:
        if key in self._later.idempotency:
            return  # the first record of a key stays
        row = (key, request_hash, commit, command_id, result_json)
        if self._depth and key in self._absent_keys:  # (else one may be in the table)
            self._later.idempotency[key] = row
        else:
            self.conn.execute(_ADD_IDEMPOTENCY, row)
        self._absent_keys.discard(key)

    def forget_results(self, before: int) -> int:
        """Drop the stored answers of commands committed before ``before`` (Unix time); their
        keys, fingerprints and commits stay, so a late retry is still answered from its
        commit (each answer is a few KB: kept for ever they outgrew the notes' history)."""
        if self._depth:
            raise RuntimeError("forget_results inside a transaction")
        self._write_rows()
        cur = self.conn.execute(
            "UPDATE idempotency SET result_json = NULL WHERE result_json IS NOT NULL"
            " AND commit_id IN (SELECT commit_id FROM commands WHERE time < ?)",
            (before,),
        )
        return cur.rowcount

    def forget_keys_of(self, commit: str) -> None:
        """Drop the idempotency records naming ``commit``: a command whose change the file
        did not keep (refused after it landed) is run anew by a retry with its key."""
        self._later.idempotency = {
            k: row for k, row in self._later.idempotency.items() if row[2] != commit
        }
        self.conn.execute("DELETE FROM idempotency WHERE commit_id = ?", (commit,))

    def set_result(self, key: str, request_hash: str | None, result_json: str) -> bool:
        """Keep the result of ``key``'s command; False if no record has that key and hash."""
        kept = self._later.idempotency.get(key)
        if kept is not None:
            if kept[1] != request_hash:
                return False
            self._later.idempotency[key] = (*kept[:4], result_json)
            return True
        cur = self.conn.execute(
            "UPDATE idempotency SET result_json = ? WHERE key = ? AND request_hash IS ?",
            (result_json, key, request_hash),
        )
        return cur.rowcount > 0

    # index ----------------------------------------------------------------------------------
    def mark_index_pending(self, paths: Iterable[str]) -> None:
        if self._depth:
            self._later.index.extend(paths)
            self._bound()
        else:
            self.conn.executemany(_ADD_INDEX_PENDING, [(p,) for p in paths])

    def index_pending(self) -> list[str]:
        self._write_rows()
        return [str(r[0]) for r in self.conn.execute("SELECT path FROM index_pending")]

    def clear_index_pending(self, paths: Iterable[str]) -> None:
        self._write_rows()
        self.conn.executemany("DELETE FROM index_pending WHERE path = ?", [(p,) for p in paths])
