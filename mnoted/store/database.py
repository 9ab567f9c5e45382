"""The workspace database ``.git/mnote/state/state.sqlite3``: one file, one connection, typed
tables in groups.

Each group of tables (:class:`Tables`) is declared next to the layer that writes it and has
its own schema version in the ``meta`` table, which belongs to the database. Two kinds:
*derived* groups hold what can be computed again, and a version change drops and recreates
them; *kept* groups are not in Git, so a version change migrates them and nothing drops
them. :class:`Database` opens the file and sets the groups up; it knows no group's tables
but through their declarations. A file SQLite cannot read is moved aside, never deleted
(``docs/store.md``, *The workspace database*).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from mnoted.errors import StorageError

log = logging.getLogger("mnoted.store")

META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
"""The database's key-value table: each group's version, and values its groups keep."""
_SET_META = (
    "INSERT INTO meta (key, value) VALUES (?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
_LEGACY_KV = "kv"
"""The namespaced key-value table of earlier layouts: its rows go to typed tables
(:attr:`Tables.from_kv`), then it is dropped."""
_CORRUPT = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}


@dataclass(frozen=True)
class Tables:
    """A group of tables in the workspace database, declared by the layer that writes it.

    ``kept`` groups are migrated from each older version by ``migrations[old]`` (which must
    leave the group at :attr:`version`) and never dropped; a kept group of an unknown
    version (written by a newer mnoted) stops the open. A derived group is dropped and
    made again whenever its version differs. ``from_kv``: statements that take this group's
    rows from the legacy ``kv`` table, run when the group is first made. ``meta_key``: the
    ``meta`` key of its version (``schema.<name>`` unless given).

    Hooks, for what a group keeps beyond its tables: ``on_make(database, version)`` is
    entered, in the group's transaction, before its tables are made (``version``: the one
    found, None in a new file) and left once they are; ``on_open(database)`` runs at every
    open, once every group is set up.
    """

    name: str
    version: str
    schema: str
    tables: tuple[str, ...]
    kept: bool
    migrations: Mapping[str, Callable[[sqlite3.Connection], None]] = field(default_factory=dict)
    from_kv: str = ""
    meta_key: str = ""
    on_make: Callable[[Database, str | None], AbstractContextManager[object]] | None = None
    on_open: Callable[[Database], None] | None = None

    def __post_init__(self) -> None:
        if not self.meta_key:
            object.__setattr__(self, "meta_key", f"schema.{self.name}")


def statements(schema: str) -> list[str]:
    """The statements of ``schema`` (run one by one: ``executescript`` would commit)."""
    return [s.strip() for s in schema.split(";") if s.strip()]


def move_aside(path: Path, now: float | None = None) -> Path:
    """Rename a damaged database and its ``-wal``/``-shm`` to ``<name>.damaged-<UTC time>``
    (whatever it held stays there for a person to look at); the new name of the file."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while any(os.path.lexists(str(aside) + s) for s in ("", "-wal", "-shm")):
        n += 1  # (one moved aside in the same second stays too)
        aside = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    for suffix in ("", "-wal", "-shm"):
        src = Path(str(path) + suffix)
        if os.path.lexists(src):
            os.replace(src, Path(str(aside) + suffix))
    return aside


def _prepare(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(META)


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=True)
    try:
        _prepare(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def foreign(path: Path) -> bool:
    """Whether ``path`` holds something other than a SQLite database (an empty file is
    one SQLite fills)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except (FileNotFoundError, IsADirectoryError):
        return False
    return bool(head) and head != b"SQLite format 3\x00"


def _aside(path: Path) -> str:
    """Move a damaged database aside; the warning that says so."""
    aside = move_aside(path)
    warning = (
        f"the workspace database could not be read ({path.name}); it was moved to "
        f"{aside.name}, with the review sessions and grants it held, and a new one made"
    )
    log.warning("%s", warning)
    return warning


def damaged(exc: sqlite3.DatabaseError) -> bool:
    """Whether ``exc`` says the file is not a database SQLite can read (not, say, locked)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _CORRUPT  # (the primary code of an extended one)


class Database:
    """The one connection to the workspace database; owned by the workspace's thread."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn
        self.warnings: list[str] = []  # what the open found wrong (a file moved aside)

    @classmethod
    def open(cls, path: Path, groups: Iterable[Tables]) -> Database:
        """Open the database with ``groups`` set up (:meth:`setup`).

        A file SQLite cannot read is moved aside (:func:`move_aside`), before its connection
        closes (a closing connection deletes the log it finds beside it), and a new one
        made, with a warning in :attr:`warnings`.
        """
        wanted = tuple(groups)
        warnings = [_aside(path)] if foreign(path) else []
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=True)
        try:
            _prepare(conn)
            db = cls(path, conn)
            db.setup(wanted)
        except sqlite3.DatabaseError as exc:
            if damaged(exc):
                warnings.append(_aside(path))
            conn.close()
            if not damaged(exc):
                raise StorageError(
                    f"the workspace database {path} cannot be opened: {exc}"
                ) from exc
            db = cls(path, _connect(path))
            db.setup(wanted)
        except BaseException:
            conn.close()
            raise
        db.warnings = warnings
        return db

    def close(self) -> None:
        self.conn.close()

    def meta(self, key: str) -> str | None:
        """The value ``meta`` holds for ``key``, read from the table."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put_meta(self, key: str, value: str | None) -> None:
        """Write ``key``'s value (None deletes it)."""
        if value is None:
            self.conn.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            self.conn.execute(_SET_META, (key, value))

    def has_table(self, name: str, schema: str = "main") -> bool:
        row = self.conn.execute(
            f"SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        return row is not None

    def setup(self, groups: Iterable[Tables]) -> None:
        """Make or bring up to date each group of tables, each in one transaction; then
        take the legacy ``kv`` table's rows into the groups that want them and drop it; then
        run the groups' ``on_open``."""
        wanted = tuple(groups)
        legacy = self.has_table(_LEGACY_KV)
        for group in wanted:
            self._setup(group, legacy)
        if legacy:
            self.conn.execute(f"DROP TABLE {_LEGACY_KV}")
        for group in wanted:
            if group.on_open is not None:
                group.on_open(self)

    def _setup(self, group: Tables, legacy: bool) -> None:
        version = self.meta(group.meta_key)
        if version == group.version:
            for statement in statements(group.schema):  # (a table dropped by hand)
                self.conn.execute(statement)
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            if version is None or not group.kept:
                self._make(group, version, legacy)
            else:
                migrate = group.migrations.get(version)
                if migrate is None:
                    raise StorageError(
                        f"the workspace database {self.path} holds {group.name} of version "
                        f"{version}, which this mnoted does not know (a newer one wrote it)",
                        hint="Run the mnoted that wrote it, or move the file aside.",
                    )
                log.info("migrating %s from version %s to %s", group.name, version, group.version)
                migrate(self.conn)
            self.put_meta(group.meta_key, group.version)
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    def _make(self, group: Tables, version: str | None, legacy: bool) -> None:
        """Make ``group``'s tables; a derived group's are dropped first (another version's)."""
        hook = nullcontext() if group.on_make is None else group.on_make(self, version)
        with hook:
            if version is not None:
                log.warning(
                    "the %s tables are of version %s, not %s: made again",
                    group.name,
                    version,
                    group.version,
                )
            for table in () if group.kept else group.tables:
                self.conn.execute(f"DROP TABLE IF EXISTS {table}")  # declared names only
            for statement in statements(group.schema):
                self.conn.execute(statement)
            if legacy and version is None:
                for statement in statements(group.from_kv):
                    self.conn.execute(statement)
