"""The review store's batch: one transaction for a group's records, never an error for them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mnoted.store.reviews import REVIEWS_FILE, ReviewStore


def _session(n: int) -> dict[str, object]:
    return {"sessionId": f"review_{n}", "state": "applied", "documentId": "doc_1"}


def _ids_seen_by_another_connection(state: Path) -> list[str]:
    db = sqlite3.connect(state / REVIEWS_FILE)
    try:
        return [row[0] for row in db.execute("SELECT id FROM sessions ORDER BY id")]
    finally:
        db.close()


def test_sessions_put_in_a_batch_are_written_together(tmp_path: Path) -> None:
    store = ReviewStore(tmp_path)
    with store.batch():
        store.put(_session(1), 1.0)
        with store.batch():  # a batch inside a batch joins it
            store.put(_session(2), 2.0)
        assert _ids_seen_by_another_connection(tmp_path) == []  # not before the end
    assert _ids_seen_by_another_connection(tmp_path) == ["review_1", "review_2"]
    store.close()


def test_a_failure_inside_a_batch_drops_what_was_put(tmp_path: Path) -> None:
    store = ReviewStore(tmp_path)
    store.put(_session(0), 0.0)
    with pytest.raises(RuntimeError), store.batch():
        store.put(_session(1), 1.0)
        assert store.get("review_1") == _session(1)  # (written into the transaction)
        store.put(_session(2), 2.0)
        raise RuntimeError("the group did not land")  # its calls put their records again
    assert _ids_seen_by_another_connection(tmp_path) == ["review_0"]
    assert store.get("review_1") is None
    with store.batch():  # and the next batch starts afresh
        store.put(_session(3), 3.0)
    assert _ids_seen_by_another_connection(tmp_path) == ["review_0", "review_3"]
    store.close()


def test_reads_inside_a_batch_see_what_was_put(tmp_path: Path) -> None:
    store = ReviewStore(tmp_path)
    store.put(_session(1), 1.0)
    with store.batch():
        store.put({**_session(1), "state": "rejected"}, 5.0)
        store.put({**_session(2), "state": "pending"}, 6.0)
        store.put({**_session(2), "state": "applied"}, 7.0)  # the same session twice
        assert store.get("review_2") == _session(2)
        assert [s["sessionId"] for s in store.list(states=("applied",))] == ["review_2"]
        store.put(_session(3), 8.0)
    assert store.get("review_1") == {**_session(1), "state": "rejected"}
    rows = sqlite3.connect(tmp_path / REVIEWS_FILE).execute(
        "SELECT id, created, updated FROM sessions ORDER BY id"
    )
    # a session keeps the time it was first put; the last put's time is its update
    assert list(rows) == [("review_1", 1.0, 5.0), ("review_2", 6.0, 7.0), ("review_3", 8.0, 8.0)]
    store.close()
