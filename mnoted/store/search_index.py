"""The search and link index: derived state in its own SQLite file, rebuilt from Git.

One row per page (``docs``), one per ranked piece of it (``chunks``: its title, each
heading line, each paragraph) with an FTS5 row of the same id, its tags and its links.
Nothing in it is a source of truth: the file may be deleted or damaged at any time and is
then rebuilt from the tree of HEAD. It records the commit it reflects (``meta.commit``);
a page is stored or removed in one transaction with that commit, so a SIGKILL at any
point leaves a state a later pass finishes: the full pass (:func:`sync_tree`) skips pages
whose blob it already holds, and :func:`catch_up` indexes only what a tree diff names.

It reads commits only through the workspace's protocol (``store.api``): ``files_changed``
and ``read_blob`` on the workspace's thread, a ``commit_reader`` on the full pass's own
thread; the in-memory twin of the service tests serves it the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mnoted.core.search_text import extract, index_text
from mnoted.store import faults
from mnoted.store.api import CommitFiles, WorkspaceApi
from mnoted.store.indexer import is_document
from mnoted.store.search_queries import page_count

log = logging.getLogger("mnoted.search")

INDEX_FILE = "search.sqlite3"
SCHEMA_VERSION = "3"
BATCH = 200
"""Pages per transaction of a full pass (its progress survives a kill in steps of this)."""
SCOPES_DIR = "search-scopes"
"""Where the indexes of agents' grant scopes live, one file a distinct set of grants."""
MAX_SCOPES = 8
"""Scope indexes kept (open, and on disk); the least recently searched one goes first."""
SCOPE_WAIT = 2.0
"""Seconds a scope's first search waits for its pass before answering from what is built."""
RETRY_FIRST, RETRY_MAX = 1.0, 300.0
"""Back-off (seconds) before a failed pass is tried again: doubled at each failure."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS docs(
    id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, blob TEXT NOT NULL,
    title TEXT NOT NULL, meta TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks(
    id INTEGER PRIMARY KEY, doc INTEGER NOT NULL, line INTEGER NOT NULL,
    kind TEXT NOT NULL, headings TEXT NOT NULL, text TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc);
CREATE TABLE IF NOT EXISTS tags(doc INTEGER NOT NULL, tag TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS tags_doc ON tags(doc);
CREATE INDEX IF NOT EXISTS tags_tag ON tags(tag);
CREATE TABLE IF NOT EXISTS links(
    doc INTEGER NOT NULL, key TEXT NOT NULL, line INTEGER NOT NULL, raw TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS links_doc ON links(doc);
CREATE INDEX IF NOT EXISTS links_key ON links(key);
CREATE VIRTUAL TABLE IF NOT EXISTS pages_fts USING fts5(
    title, headings, body, content = '', tokenize = 'unicode61 remove_diacritics 2');
"""


class IndexDamaged(Exception):
    """The index file cannot be used; it is deleted and rebuilt."""


def connect(path: Path, scope: str = "") -> sqlite3.Connection:
    """Open (or create) the index at ``path`` of the pages of ``scope`` (a grant scope's
    label; "" for the whole workspace); raise :class:`IndexDamaged` if unusable or made
    for another scope."""
    try:
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")
        version = None
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
            row = conn.execute("SELECT value FROM meta WHERE key='version'").fetchone()
            version = row[0] if row else None
            if version != SCHEMA_VERSION:
                conn.close()
                raise IndexDamaged(f"schema version {version!r}")
            row = conn.execute("SELECT value FROM meta WHERE key='scope'").fetchone()
            if (row[0] if row else "") != scope:
                conn.close()
                raise IndexDamaged("the file indexes another scope")
        else:
            conn.executescript("BEGIN;" + _SCHEMA + "COMMIT;")
            conn.execute("INSERT OR REPLACE INTO meta VALUES('version', ?)", (SCHEMA_VERSION,))
            if scope:
                conn.execute("INSERT OR REPLACE INTO meta VALUES('scope', ?)", (scope,))
        return conn
    except sqlite3.DatabaseError as exc:
        raise IndexDamaged(str(exc)) from exc


def remove(path: Path) -> None:
    """Delete the index file and its WAL companions."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def indexed_commit(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key='commit'").fetchone()
    return row[0] if row else None


def _set_commit(conn: sqlite3.Connection, commit: str | None) -> None:
    if commit is None:
        conn.execute("DELETE FROM meta WHERE key='commit'")
    else:
        conn.execute("INSERT OR REPLACE INTO meta VALUES('commit', ?)", (commit,))


def _drop(conn: sqlite3.Connection, path: str) -> None:
    row = conn.execute("SELECT id FROM docs WHERE path=?", (path,)).fetchone()
    if row is None:
        return
    doc = row[0]
    pieces = conn.execute("SELECT kind, text FROM chunks WHERE doc=? ORDER BY id", (doc,))
    # (a contentless FTS5 table forgets a row given the values it was made of)
    conn.execute(
        "INSERT INTO pages_fts(pages_fts, rowid, title, headings, body)"
        " VALUES('delete', ?, ?, ?, ?)",
        (doc, *_columns(pieces.fetchall())),
    )
    conn.execute("DELETE FROM chunks WHERE doc=?", (doc,))
    conn.execute("DELETE FROM tags WHERE doc=?", (doc,))
    conn.execute("DELETE FROM links WHERE doc=?", (doc,))
    conn.execute("DELETE FROM docs WHERE id=?", (doc,))


_COLUMN = {"title": 0, "heading": 1}  # (the FTS column of each kind of chunk; else body)


def _columns(pieces: Sequence[tuple[str, str]]) -> tuple[str, str, str]:
    """A page's title, headings and body as the FTS table is given them."""
    columns: tuple[list[str], list[str], list[str]] = ([], [], [])
    for kind, text in pieces:
        columns[_COLUMN.get(kind, 2)].append(text)
    title, headings, body = (index_text("\n\n".join(col)) for col in columns)
    return title, headings, body


def _store(conn: sqlite3.Connection, path: str, blob: str, data: bytes) -> None:
    _drop(conn, path)
    text = data.decode("utf-8", errors="replace")
    page = extract(text, path)
    cur = conn.execute(
        "INSERT INTO docs(path, blob, title, meta) VALUES(?, ?, ?, ?)",
        (path, blob, page.title, json.dumps(page.meta, ensure_ascii=False)),
    )
    doc = cur.lastrowid
    pieces: list[tuple[int, str, list[str], str]] = [(-1, "title", [], page.title)]
    pieces.extend((c.line, c.kind, list(c.headings), c.text) for c in page.chunks)
    conn.executemany(
        "INSERT INTO chunks(doc, line, kind, headings, text) VALUES(?, ?, ?, ?, ?)",
        [(doc, ln, kind, json.dumps(hs, ensure_ascii=False), t) for ln, kind, hs, t in pieces],
    )
    conn.execute(
        "INSERT INTO pages_fts(rowid, title, headings, body) VALUES(?, ?, ?, ?)",
        (doc, *_columns([(kind, text) for _, kind, _, text in pieces])),
    )
    conn.executemany("INSERT INTO tags VALUES(?, ?)", [(doc, t) for t in page.tags])
    conn.executemany(
        "INSERT INTO links VALUES(?, ?, ?, ?)",
        [(doc, link.key, link.line, link.raw) for link in page.links],
    )


def _blob(source: CommitFiles, blob_id: str) -> bytes:
    data = source.read_blob(blob_id)
    if data is None:
        raise KeyError(f"blob {blob_id} is not in the repository")
    return data


def sync_tree(
    conn: sqlite3.Connection,
    source: CommitFiles,
    commit: str,
    progress: Callable[[int, int], None] = lambda done, total: None,
    stop: threading.Event | None = None,
    *,
    batch: int = BATCH,
    include: Callable[[str], bool] | None = None,
) -> bool:
    """Make the index hold exactly the pages of ``commit`` (those ``include`` accepts,
    when given), read from ``source``; False if stopped."""
    pages = {
        p: b
        for p, b in source.files_changed(None, commit)
        if b is not None and is_document(p) and (include is None or include(p))
    }
    held = dict(conn.execute("SELECT path, blob FROM docs").fetchall())
    todo = [(p, b) for p, b in pages.items() if held.get(p) != b]
    gone = [p for p in held if p not in pages]
    total = len(pages)
    done = total - len(todo)
    progress(done, total)
    conn.execute("BEGIN")
    _set_commit(conn, None)  # (incomplete until the pass ends)
    for path in gone:
        _drop(conn, path)
    conn.execute("COMMIT")
    for at in range(0, len(todo), batch):
        if stop is not None and stop.is_set():
            return False
        conn.execute("BEGIN")
        for path, blob in todo[at : at + batch]:
            _store(conn, path, blob, _blob(source, blob))
        conn.execute("COMMIT")
        faults.point("search-batch")
        done += len(todo[at : at + batch])
        progress(done, total)
    conn.execute("BEGIN")
    _set_commit(conn, commit)
    conn.execute("COMMIT")
    return True


def catch_up(
    conn: sqlite3.Connection,
    source: CommitFiles,
    old: str,
    new: str,
    include: Callable[[str], bool] | None = None,
) -> int:
    """Index the pages that changed from commit ``old`` to ``new`` (those ``include``
    accepts, when given: one moved out of it is dropped); return how many paths.
    KeyError if ``source`` lacks a commit or a blob (the index is then left as it was)."""
    changes = source.files_changed(old, new)
    changed = 0
    conn.execute("BEGIN")
    try:
        for path, blob in changes:
            if not is_document(path):
                continue
            if blob is None or (include is not None and not include(path)):
                _drop(conn, path)
            else:
                _store(conn, path, blob, _blob(source, blob))
            changed += 1
        _set_commit(conn, new)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return changed


# -- one workspace's index ------------------------------------------------------------------


class SearchIndex:
    """A workspace's index: its first full pass runs on a thread of its own; queries (on
    the workspace's thread) catch it up with HEAD first, so they see every landed write.

    The whole workspace's index has no ``include``; a grant scope's index (:func:`scoped`)
    holds only the pages its ``include`` accepts, in a file of its own, so the cost and
    the BM25 statistics of a search in it never depend on the pages outside it."""

    def __init__(
        self,
        ws: WorkspaceApi,
        *,
        batch: int = BATCH,
        path: Path | None = None,
        scope: str = "",
        include: Callable[[str], bool] | None = None,
        wait: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ws = ws
        self.path = path if path is not None else Path(ws.state_dir) / INDEX_FILE
        self.scope = scope
        self.include = include
        self.wait = wait  # (seconds a search waits for a running pass before answering)
        self.clock = clock
        self.batch = batch
        self._conn: sqlite3.Connection | None = None
        self._inode: int | None = None  # the file `_conn` has open
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.done = 0
        self.total = 0
        self.target: str | None = None  # the commit the running (or last) full pass indexes
        self.failed: str | None = None
        self.failures = 0  # consecutive failed passes
        self.retry_at = 0.0  # (on `clock`) no pass starts before, after a failure
        self.stopped = False  # the last pass was stopped before it ended
        self.ready = False  # a pass ended, or a search found the index complete

    @property
    def building(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> bool:
        """Bring the index up to HEAD in the background (a full pass if it needs one);
        False if no pass was started (one runs, no HEAD, or a failure's back-off)."""
        if self.building or self.ws.head is None:
            return False
        if self.failed is not None and self.clock() < self.retry_at:
            return False
        self._stop.clear()
        head = self.ws.head
        self.target = head
        self._thread = threading.Thread(
            target=self._build, args=(head,), name="mnoted-search-index", daemon=True
        )
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._close()

    def _progress(self, done: int, total: int) -> None:
        self.done, self.total = done, total

    def _build(self, head: str) -> None:
        conn: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                conn = connect(self.path, self.scope)
                if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                    raise IndexDamaged("quick_check failed")
            except (IndexDamaged, sqlite3.DatabaseError) as exc:
                log.warning("search index %s is unusable (%s); rebuilding it", self.path, exc)
                if conn is not None:
                    conn.close()
                remove(self.path)
                conn = connect(self.path, self.scope)
            ended = True
            if indexed_commit(conn) is None:
                self.ready = False
                reader = self.ws.commit_reader()
                try:
                    ended = sync_tree(
                        conn, reader, head, self._progress, self._stop,
                        batch=self.batch, include=self.include,
                    )  # fmt: skip
                finally:
                    reader.close()
            else:
                self.done = self.total = page_count(conn)
            self.stopped = not ended
            self.ready = ended
            self.failed, self.failures = None, 0
        except Exception as exc:  # the index is derived: its failure never stops the daemon
            log.exception("search index pass failed")
            self.failed = f"{type(exc).__name__}: {exc}"
            self.failures += 1
            self.retry_at = self.clock() + min(RETRY_MAX, RETRY_FIRST * 2 ** (self.failures - 1))
            self.ready = False
        finally:
            if conn is not None:
                conn.close()

    def status(self) -> dict[str, Any]:
        """What ``mnote status`` shows: building, ready, failed (and when it is tried
        again), stopped before it ended, or pending (no pass has run yet)."""
        if self.building:
            state = "building"
        elif self.failed:
            state = "failed"
        elif self.stopped:
            state = "stopped"
        else:
            state = "ready" if self.ready else "pending"
        out: dict[str, Any] = {"state": state, "pagesIndexed": self.done, "pagesTotal": self.total}
        if self.failed:
            out["error"] = self.failed
            out["retryInSeconds"] = round(max(0.0, self.retry_at - self.clock()), 1)
        return out

    def _await(self) -> None:
        if self.wait and self._thread is not None:
            self._thread.join(timeout=self.wait)

    def current(self) -> tuple[sqlite3.Connection | None, bool]:
        """On the workspace's thread: the index brought up to HEAD, and whether it is
        complete (False while a full pass runs: it then answers from what is built)."""
        ws = self.ws
        ws.refresh()
        head = ws.head
        if not self.path.exists() and self.building:
            self._stop.set()  # (deleted under the pass: it builds a file no one reads)
            assert self._thread is not None
            self._thread.join(timeout=10)
        if self.building:
            self._await()
        for first in (True, False):
            if self._inode is not None and _inode(self.path) != self._inode:
                self._close()  # (deleted, or replaced by a rebuild: the file open is not it)
            if not self.path.exists():
                self._close()
                if not self.building:
                    self.done = self.total = 0
            if self.building:
                return self._open(), False
            conn = self._open()
            try:
                commit = None if conn is None else indexed_commit(conn)
                if conn is None or commit is None:
                    if first and self.start():
                        self._await()
                        continue
                    return conn, False
                if commit != head and head is not None:
                    try:
                        catch_up(conn, ws, commit, head, self.include)
                    except KeyError:
                        _set_commit(conn, None)
                        if first and self.start():
                            self._await()
                            continue
                        return conn, False
                self.total = self.done = page_count(conn)
                self.ready, self.stopped = True, False
                return conn, True
            except sqlite3.DatabaseError as exc:
                log.warning("search index %s failed (%s); rebuilding it", self.path, exc)
                self._close()
                remove(self.path)
                self.done = self.total = 0
                if first and self.start():
                    self._await()
                    continue
                return None, False
        return None, False  # (not reached: the second round always returns)

    def _open(self) -> sqlite3.Connection | None:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._conn = connect(self.path, self.scope)
            except IndexDamaged:
                if self.building:
                    return None
                remove(self.path)
                try:
                    self._conn = connect(self.path, self.scope)
                except IndexDamaged:
                    return None
            self._inode = _inode(self.path)
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._inode = None


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


_ATTRIBUTE = "_search_index"  # (kept on the workspace object: its index lives and goes with it)
_SCOPES_ATTRIBUTE = "_search_scopes"
_INDEXES_LOCK = threading.Lock()


def of(
    ws: WorkspaceApi, *, batch: int = BATCH, clock: Callable[[], float] = time.monotonic
) -> SearchIndex:
    """The whole-workspace search index of an open workspace (one per workspace object;
    ``batch`` and ``clock`` are taken when it is made)."""
    with _INDEXES_LOCK:
        index: SearchIndex | None = getattr(ws, _ATTRIBUTE, None)
        if index is None:
            index = SearchIndex(ws, batch=batch, clock=clock)
            setattr(ws, _ATTRIBUTE, index)
        return index


def scope_label(grants: Sequence[str]) -> str:
    """What names a grant scope: its distinct globs, sorted (the same pages whatever order
    or repetition the grants came in)."""
    return json.dumps(sorted(set(grants)), ensure_ascii=False)


def _scope_key(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()[:24]


def _prune(folder: Path, keep: int) -> None:
    """Leave at most ``keep`` scope files in ``folder``, the most recently used."""
    try:
        files = [p for p in folder.iterdir() if p.suffix == ".sqlite3"]
    except FileNotFoundError:
        return
    files.sort(key=lambda p: p.stat().st_mtime if p.exists() else 0.0, reverse=True)
    for stale in files[keep:]:
        remove(stale)


def scoped(
    ws: WorkspaceApi, grants: Sequence[str], include: Callable[[str], bool], *, batch: int = BATCH
) -> SearchIndex:
    """The index of the pages a set of grants covers (``include`` tests a path against
    them), made on its first search and kept current as the whole index is; at most
    :data:`MAX_SCOPES` are kept, the least recently searched one deleted first."""
    label = scope_label(grants)
    key = _scope_key(label)
    folder = Path(ws.state_dir) / SCOPES_DIR
    evicted: list[SearchIndex] = []
    with _INDEXES_LOCK:
        scopes: OrderedDict[str, SearchIndex] | None = getattr(ws, _SCOPES_ATTRIBUTE, None)
        if scopes is None:
            scopes = OrderedDict()
            setattr(ws, _SCOPES_ATTRIBUTE, scopes)
            _prune(folder, MAX_SCOPES)  # (files a past run left)
        index = scopes.get(key)
        if index is None:
            index = SearchIndex(
                ws, batch=batch, path=folder / f"{key}.sqlite3", scope=label,
                include=include, wait=SCOPE_WAIT,
            )  # fmt: skip
            scopes[key] = index
        scopes.move_to_end(key)
        while len(scopes) > MAX_SCOPES:
            evicted.append(scopes.popitem(last=False)[1])
    for old in evicted:
        old.stop()
        remove(old.path)
    with contextlib.suppress(OSError):
        os.utime(index.path)  # (its use, for the pruning of a later run)
    return index


def status_for(ws: WorkspaceApi, grants: Sequence[str] | None) -> dict[str, Any]:
    """The index status a caller may see: the whole index's for ``grants`` None (the owner,
    or a grant of everything), else its scope's (``pending`` until its first search), so
    an agent never learns how many pages lie outside its grants."""
    if grants is None:
        return of(ws).status()
    key = _scope_key(scope_label(grants))
    with _INDEXES_LOCK:
        scopes: OrderedDict[str, SearchIndex] | None = getattr(ws, _SCOPES_ATTRIBUTE, None)
        index = scopes.get(key) if scopes else None
    if index is None:
        return {"state": "pending", "pagesIndexed": 0, "pagesTotal": 0}
    return index.status()


def scopes_of(ws: WorkspaceApi) -> list[SearchIndex]:
    """The grant scope indexes a workspace keeps, least recently searched first."""
    with _INDEXES_LOCK:
        scopes: OrderedDict[str, SearchIndex] | None = getattr(ws, _SCOPES_ATTRIBUTE, None)
        return list(scopes.values()) if scopes else []


def forget(ws: WorkspaceApi) -> None:
    """Stop and drop the indexes of a workspace being closed (their files are kept)."""
    with _INDEXES_LOCK:
        index: SearchIndex | None = getattr(ws, _ATTRIBUTE, None)
        if index is not None:
            setattr(ws, _ATTRIBUTE, None)
        scopes: OrderedDict[str, SearchIndex] | None = getattr(ws, _SCOPES_ATTRIBUTE, None)
        setattr(ws, _SCOPES_ATTRIBUTE, None)
    for each in [*([index] if index is not None else []), *(scopes or {}).values()]:
        each.stop()
