"""The state databases' logs are copied back by a thread of their own, not by a writer."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from mnoted.store import Workspace
from mnoted.store.checkpoints import Checkpointer
from mnoted.store.sidecar import Sidecar


def rows_in_file_alone(db: Path, tmp: Path) -> int:
    """The kv rows of the database file without its log (a copy, opened with no ``-wal``)."""
    copy = tmp / "alone.sqlite3"
    shutil.copyfile(db, copy)
    conn = sqlite3.connect(copy)
    try:
        return int(conn.execute("SELECT count(*) FROM kv").fetchone()[0])
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # not even the tables yet
            return 0
        raise
    except sqlite3.DatabaseError:  # copied in the middle of a checkpoint: look again
        return -1
    finally:
        conn.close()
        copy.unlink()


def write(side: Sidecar, n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        side.begin()
        side.kv_put("test", f"key{i}", "x" * 500)
        side.commit()


def wait_for(check: object, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_the_log_is_copied_back_by_the_checkpointer_not_by_the_writer(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite3"
    side = Sidecar.open(db)
    try:
        write(side, 200)  # ~200 pages: under the writer's backstop
        assert rows_in_file_alone(db, tmp_path) == 0  # all in the log
        checkpoints = Checkpointer([db, tmp_path / "absent.sqlite3"], interval=0.02)
        try:
            assert wait_for(lambda: rows_in_file_alone(db, tmp_path) == 200)
            write(side, 50, first=200)  # the writer goes on; its new rows follow
            assert wait_for(lambda: rows_in_file_alone(db, tmp_path) == 250)
        finally:
            checkpoints.close()
        assert not (tmp_path / "absent.sqlite3").exists()  # never created
    finally:
        side.close()


def test_a_database_that_cannot_be_checkpointed_is_logged_and_the_others_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = tmp_path / "bad.sqlite3"
    bad.write_bytes(b"not a database" * 100)
    Path(f"{bad}-wal").write_bytes(b"not a log either")
    db = tmp_path / "state.sqlite3"
    side = Sidecar.open(db)
    try:
        with caplog.at_level(logging.WARNING, logger="mnoted.store.checkpoints"):
            checkpoints = Checkpointer([bad, db], interval=0.02)
            try:
                write(side, 20)
                assert wait_for(lambda: rows_in_file_alone(db, tmp_path) == 20)
                assert wait_for(lambda: len(caplog.records) == 1)
                time.sleep(0.2)
                assert len(caplog.records) == 1  # not again while its log stays as it is
                Path(f"{bad}-wal").write_bytes(b"still not a log")
                assert wait_for(lambda: len(caplog.records) == 2)
            finally:
                checkpoints.close()
        assert "checkpoint of bad.sqlite3 failed" in caplog.records[0].getMessage()
    finally:
        side.close()


def test_a_workspace_runs_its_checkpointer_until_it_is_closed(tmp_path: Path) -> None:
    def running() -> int:
        return sum(t.name == "mnote-checkpoints" for t in threading.enumerate())

    before = running()
    ws = Workspace.init(tmp_path / "ws")
    assert running() == before + 1
    ws.close()
    assert running() == before
