"""Idempotency: same key and request replays, another request conflicts, also after restart
and after the sidecar is rebuilt from history (the key and request hash are trailers)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from mnoted.errors import IdempotencyConflict, NotFound
from mnoted.store import CommandMeta, Workspace, Write
from tests.store.conftest import git


def meta(key: str, request: str) -> CommandMeta:
    return CommandMeta("page.body.save", actor="hermes", idempotency_key=key, request_hash=request)


def count(root: Path) -> int:
    return int(git(root, "rev-list", "--count", "HEAD"))


def test_same_key_same_request_replays(ws: Workspace) -> None:
    first = ws.apply(meta("k1", "h1"), [Write("a.md", b"a")])
    n = count(ws.root)
    again = ws.apply(meta("k1", "h1"), [Write("a.md", b"a")])
    assert again.replayed and again.commit == first.commit and again.paths == ("a.md",)
    assert count(ws.root) == n


def test_same_key_other_request_conflicts(ws: Workspace) -> None:
    ws.apply(meta("k1", "h1"), [Write("a.md", b"a")])
    with pytest.raises(IdempotencyConflict) as info:
        ws.apply(meta("k1", "h2"), [Write("a.md", b"b")])
    assert info.value.code == "mnote_tool_idempotency_conflict"
    assert ws.read_head("a.md") == b"a"


def test_results_survive_restart_and_rebuild(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    with Workspace.init(root) as ws:
        first = ws.apply(meta("k1", "h1"), [Write("a.md", b"a")])
        ws.idempotency.record("k1", "h1", json.dumps({"revision": first.commit}), "hermes")
        with pytest.raises(NotFound):
            ws.idempotency.record("never-used", "h", "{}", "hermes")
    with Workspace.open(root) as ws:
        rec = ws.idempotency.check("k1", "h1", "hermes")
        assert rec is not None and rec.result_json == json.dumps({"revision": first.commit})
        ws.rebuild()  # keeps stored results whose commit is still in history
        rec = ws.idempotency.lookup("k1", "hermes")
        assert rec is not None and rec.result_json is not None
    (root / ".git/mnote/state/state.sqlite3").unlink()
    with Workspace.open(root) as ws:  # rebuilt from trailers alone
        rec = ws.idempotency.lookup("k1", "hermes")
        assert rec is not None and rec.commit == first.commit and rec.request_hash == "h1"
        assert rec.result_json is None
        assert ws.apply(meta("k1", "h1"), [Write("a.md", b"a")]).replayed
        with pytest.raises(IdempotencyConflict):
            ws.apply(meta("k1", "other"), [Write("a.md", b"a")])


def test_keys_belong_to_their_actor(ws: Workspace) -> None:
    first = ws.apply(meta("k1", "h1"), [Write("a.md", b"a")])
    other = CommandMeta("page.body.save", actor="scribe", idempotency_key="k1", request_hash="h2")
    second = ws.apply(other, [Write("b.md", b"b")])  # another actor's key of the same name
    assert not second.replayed and second.commit != first.commit
    assert ws.idempotency.lookup("k1", "hermes").commit == first.commit  # type: ignore[union-attr]
    assert ws.idempotency.lookup("k1", "scribe").commit == second.commit  # type: ignore[union-attr]
    assert ws.idempotency.lookup("k1", "owner") is None


def test_records_kept_before_keys_were_scoped_are_given_their_actor(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    with Workspace.init(root) as ws:
        first = ws.apply(meta("k1", "h1"), [Write("a.md", b"a")])
    db = sqlite3.connect(root / ".git/mnote/state/state.sqlite3")
    db.execute("UPDATE idempotency SET key = 'k1'")  # as a sidecar of before kept it
    db.execute("DELETE FROM meta WHERE key = 'idempotency_keys'")
    db.commit()
    db.close()
    with Workspace.open(root) as ws:
        rec = ws.idempotency.lookup("k1", "hermes")
        assert rec is not None and rec.commit == first.commit
        assert ws.apply(meta("k1", "h1"), [Write("a.md", b"a")]).replayed
