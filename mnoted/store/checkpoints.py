"""Checkpoints of the state databases' write-ahead logs, on a thread of their own.

SQLite in WAL mode copies the log back into the database once it holds 1,000 pages, in the
``COMMIT`` that crosses that line, and syncs both files there: that write's ``COMMIT`` pays for
a checkpoint and two syncs, and the write's latency with it. The daemon's writers leave it to
this thread, which checkpoints each database whose log changed, every half second, from a
connection of its own (``PASSIVE``: it never waits for the writer, nor the writer for it). The
writers keep SQLite's own checkpoint, at :data:`BACKSTOP_PAGES`, for a log this thread does not
keep up with: under writes that never pause, a log is only started over after a checkpoint that
caught up with every write.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

BACKSTOP_PAGES = 4000
"""``wal_autocheckpoint`` of the writers' connections (16 MB of log)."""
INTERVAL = 0.5


class Checkpointer:
    """Checkpoints the databases at ``paths`` whose log changed, every ``interval`` seconds."""

    def __init__(self, paths: Iterable[Path], interval: float = INTERVAL) -> None:
        self._paths = list(paths)
        self._interval = interval
        self._seen: dict[Path, tuple[int, int]] = {}
        self._conns: dict[Path, sqlite3.Connection] = {}
        # One cursor per connection: each `Connection.execute` makes a cursor, and the
        # connection keeps a reference to each until it has made 200 more.
        self._cursors: dict[Path, sqlite3.Cursor] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mnote-checkpoints", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._interval):
                for path in self._paths:
                    self._checkpoint(path)
        finally:
            for conn in self._conns.values():
                conn.close()

    def _checkpoint(self, path: Path) -> None:
        try:
            st = os.stat(f"{path}-wal")
        except OSError:
            return  # no log (yet): nothing to copy
        mark = (st.st_mtime_ns, st.st_size)
        if self._seen.get(path) == mark:
            return
        self._seen[path] = mark  # (one that fails is tried again when its log changes)
        try:
            conn = self._conns.get(path)
            if conn is None:  # (never creating a database: its log could outlive it)
                uri = Path(os.path.abspath(path)).as_uri() + "?mode=rw"
                conn = self._conns[path] = sqlite3.connect(uri, uri=True, isolation_level=None)
                self._cursors[path] = conn.cursor()
            self._cursors[path].execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:  # the writers' backstop still copies the log
            log.warning("checkpoint of %s failed (tried again later): %s", path.name, exc)
            self._cursors.pop(path, None)
            failed = self._conns.pop(path, None)
            if failed is not None:
                failed.close()
