"""The workspace's state (grants, review sessions, sidecar, journal) in the Git directory,
out of reach of what cleans a work tree; and a state folder an earlier mnoted left in the
work tree moved there."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from mnoted.client.client import Client
from mnoted.store.statedir import LEGACY_STATE_DIR, STATE_DIR
from tests.e2e.conftest import DaemonProcess


def call(client: Client, tool: str, doc: str | None = None, **args: Any) -> dict[str, Any]:
    _, resp = client.request("POST", "/v1/tools/call", client.envelope(tool, doc, args))
    return resp


def append_held_for_review(agent: Client) -> str:
    held = call(agent, "mnote.page.save", "plan.md", content=["Later."], mode="append")
    assert held.get("ok"), held
    assert held["result"]["state"] == "awaiting_user"
    return str(held["result"]["sessionId"])


def test_git_clean_and_stash_all_keep_grants_and_review_sessions(daemon: DaemonProcess) -> None:
    """`git clean -fdx` and `git stash --all` remove ignored files: with the state in the
    work tree (.mnote/state) they took every agent's grant and every unanswered review
    session with them, the next start knowing neither."""
    token = daemon.agent_token("hermes", "page.write")
    agent = daemon.client(token=token)
    assert call(agent, "mnote.page.get", "plan.md")["ok"]
    session = append_held_for_review(agent)
    (daemon.workspace / "scratch.tmp~").write_text("an editor's backup, ignored by Git\n")

    for clean in (["clean", "-fdxq"], ["stash", "--all", "-q"]):
        subprocess.run(["git", *clean], cwd=daemon.workspace, check=True)
        daemon.stop()
        daemon.start()
        agent = daemon.client(token=token)
        assert call(agent, "mnote.page.get", "plan.md")["ok"], clean
        again = call(agent, "mnote.review.get", sessionId=session)
        assert again["result"]["state"] == "awaiting_user", clean
    assert not (daemon.workspace / "scratch.tmp~").exists()  # the stash took it, as it does
    accepted = call(daemon.client(), "mnote.review.accept", sessionId=session)
    assert accepted["result"]["state"] == "applied", accepted
    assert (daemon.workspace / "plan.md").read_text().endswith("Later.\n")
    daemon.wait_idle_clean()


def test_a_state_folder_left_in_the_work_tree_is_moved_whole(daemon: DaemonProcess) -> None:
    """A workspace served by an earlier mnoted: its grants and sessions, and the sidecar
    with its write-ahead log, come along to .git/mnote/state, and the work tree keeps only
    the committed .mnote/config.toml."""
    root = daemon.workspace
    token = daemon.agent_token("hermes", "page.write")
    session = append_held_for_review(daemon.client(token=token))
    daemon.stop()
    # The layout an earlier mnoted left: the whole folder in the work tree, ignored by its
    # own .gitignore, with what the last run wrote still in the sidecar's log.
    state = root / STATE_DIR
    assert (state / "tokens.json").is_file() and (state / "state.sqlite3").is_file()
    assert not (state / "reviews.sqlite3").exists()  # (sessions are in state.sqlite3)
    (state / ".gitignore").write_text("*\n")
    shutil.move(state, root / LEGACY_STATE_DIR)

    # `mnote grant list` (no daemon running) moves it, and sees the grant.
    listed = daemon.cli("--json", "grant", "list", "--workspace", str(root))
    assert listed.returncode == 0, listed.stderr
    assert [g["actorId"] for g in json.loads(listed.stdout)] == ["hermes"]
    assert not (root / LEGACY_STATE_DIR).exists() and not (state / ".gitignore").exists()

    # Moved back once more: the daemon moves it at start, and serves what it held.
    shutil.move(state, root / LEGACY_STATE_DIR)
    daemon.start()
    assert not (root / LEGACY_STATE_DIR).exists()
    got = call(daemon.client(token=token), "mnote.review.get", sessionId=session)
    assert got["result"]["state"] == "awaiting_user", got
    daemon.wait_idle_clean()
    assert sorted(p.name for p in (root / ".mnote").iterdir()) == ["config.toml"]


def test_a_damaged_database_is_moved_aside_and_the_status_says_so(daemon: DaemonProcess) -> None:
    """The daemon still serves the workspace (rebuilt from Git); the file with the sessions
    it held is kept beside it, and the owner's status names it (an agent's does not)."""
    token = daemon.agent_token("hermes", "page.write")
    append_held_for_review(daemon.client(token=token))
    daemon.stop()
    state = daemon.workspace / STATE_DIR
    damaged = b"\x00not a database any more" * 400
    (state / "state.sqlite3").write_bytes(damaged)
    daemon.start()
    assert call(daemon.client(token=token), "mnote.page.get", "plan.md")["ok"]
    [ws] = daemon.client().request("GET", "/v1/workspaces")[1]["workspaces"]
    assert len(ws["stateWarnings"]) == 1 and "damaged-" in ws["stateWarnings"][0]
    [seen] = daemon.client(token=token).request("GET", "/v1/workspaces")[1]["workspaces"]
    assert seen["stateWarnings"] == []
    [aside] = [
        p for p in state.glob("state.sqlite3.damaged-*") if p.name[-4:] not in ("-wal", "-shm")
    ]
    assert aside.read_bytes() == damaged
    printed = daemon.cli("status")
    assert "warning: the workspace database could not be read" in printed.stdout, printed
