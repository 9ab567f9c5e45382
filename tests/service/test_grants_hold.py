"""Issue 41: grants hold everywhere. One test per reproduction that failed before its fix."""

from __future__ import annotations

from typing import Any

import pytest

from tests.service.conftest import Harness

pytestmark = pytest.mark.twin


def _save(h: Harness, agent: Any, doc: str, key: str, text: str = "x") -> dict[str, Any]:
    """A write that commits at once for agents too (no review in the default mode)."""
    return h.write(
        "mnote.page.update_title", agent, documentId=doc, idempotencyKey=key, args={"title": text}
    )


def test_a_replay_of_another_actors_key_gets_nothing_of_theirs(h: Harness) -> None:
    owner_answer = _save(h, h.owner, "private/secret.md", "k_shared", "owner's words")
    assert owner_answer["ok"], owner_answer["error"]
    agent = h.agent(grants=("notes/**",))
    replay = _save(h, agent, "private/secret.md", "k_shared", "owner's words")
    missing = _save(h, agent, "private/nothing.md", "k_other", "owner's words")
    assert not replay["ok"] and replay["error"]["code"] == "mnote_tool_permission_denied"
    assert replay["error"]["message"].replace("secret", "nothing") == missing["error"]["message"]
    assert "owner's words" not in str(replay) and owner_answer["audit"]["commandId"] not in str(
        replay
    )


def test_two_agents_with_the_same_key_do_not_block_each_other(h: Harness) -> None:
    a, b = h.agent("alpha"), h.agent("beta")
    first = _save(h, a, "notes/plan.md", "k1", "alpha")
    second = _save(h, b, "notes/plan.md", "k1", "beta")  # another request, same key
    assert first["ok"] and second["ok"], second["error"]
    assert not second["audit"].get("replayed")
    assert first["audit"]["commandId"] not in str(second)
    again = _save(h, a, "notes/plan.md", "k1", "alpha")  # each actor's own replay holds
    assert again["audit"]["replayed"] and again["audit"]["commandId"] == first["audit"]["commandId"]
    other = _save(h, b, "notes/plan.md", "k1", "gamma")
    assert other["error"]["code"] == "mnote_tool_idempotency_conflict"
    assert first["audit"]["revision"] not in str(other)


def test_a_replay_checks_the_grant_again(h: Harness) -> None:
    wide = h.agent("hermes", grants=("**",))
    first = _save(h, wide, "private/secret.md", "k_mine")
    assert first["ok"], first["error"]
    narrow = h.agent("hermes", grants=("notes/**",))  # the same actor, its grant narrowed
    replay = _save(h, narrow, "private/secret.md", "k_mine")
    assert replay["error"]["code"] == "mnote_tool_permission_denied"
    assert "123456" not in str(replay)


def test_a_hidden_pages_pending_edit_is_not_committed_by_an_agents_read(h: Harness) -> None:
    (h.root / "private/secret.md").write_text("# Salary negotiation\n\nNow 999999.\n")
    head = h.head()
    agent = h.agent(grants=("notes/**",))
    hidden = h.call("mnote.page.get", agent, documentId="private/secret.md")
    missing = h.call("mnote.page.get", agent, documentId="private/absent.md")
    assert hidden["error"]["message"].replace("secret", "absent") == missing["error"]["message"]
    assert h.head() == head  # nothing was committed (nor parsed) before the grant said no
    doc = h.doc("private/secret.md")
    by_id = h.call("mnote.page.get", agent, documentId=doc)
    assert by_id["error"]["code"] == "mnote_tool_permission_denied" and h.head() == head
    assert h.call("mnote.page.get", h.owner, documentId=doc)["ok"]
    assert h.head() != head  # (the owner's read commits it, as every read does)


def _grant_state(h: Harness, path: str) -> str | None:
    return h.ws.grants.by_path(path)


@pytest.mark.git  # (the commit's author, read with git log)
def test_a_refused_file_grant_leaves_no_grant_behind(h: Harness) -> None:
    h.write_file("notes/locked.md", "---\nprotectEditing: true\n---\n# Locked\n\nMine.\n")
    agent = h.agent()
    refused = h.write("mnote.file.grant", agent, documentId="notes/locked.md")
    assert refused["error"]["code"] == "mnote_tool_permission_denied"
    assert _grant_state(h, "notes/locked.md") is None
    # the owner's own edit stays the owner's
    (h.root / "notes/locked.md").write_text("---\nprotectEditing: true\n---\n# Locked\n\nMine 2.\n")
    h.ws.commit_external(["notes/locked.md"])
    assert h.git("log", "-1", "--format=%an", "--", "notes/locked.md").strip() != "hermes"


def test_a_file_grant_on_a_stale_base_is_refused(h: Harness) -> None:
    agent = h.agent()
    base = h.call("mnote.page.get", agent, documentId="notes/plan.md")["result"]["revision"]
    assert h.write("mnote.page.update_title", h.owner, documentId="notes/plan.md", title="New")[
        "ok"
    ]
    stale = h.write("mnote.file.grant", agent, documentId="notes/plan.md", baseRevision=base)
    assert stale["error"]["code"] == "mnote_tool_conflict"
    assert _grant_state(h, "notes/plan.md") is None
    current = h.call("mnote.page.get", agent, documentId="notes/plan.md")["result"]["revision"]
    fresh = h.write("mnote.file.grant", agent, documentId="notes/plan.md", baseRevision=current)
    assert fresh["ok"], fresh["error"]
    assert h.ws.grants.get(fresh["result"]["grantId"]) is not None


def _required(h: Harness) -> None:
    from tests.service.test_review import set_mode

    set_mode(h, "required")


@pytest.mark.git  # (the commit's author, read with git log)
def test_required_approval_holds_for_every_write_kind(h: Harness) -> None:
    _required(h)
    agent = h.agent()
    head = h.head()
    created = h.write("mnote.page.create", agent, args={"path": "notes/new.md", "content": "Hi"})
    summary = h.write(
        "mnote.artifact.create_summary", agent, documentId="notes/plan.md", summary="Short."
    )
    note = h.write(
        "mnote.artifact.create_ai_note", agent, documentId="notes/plan.md", content="A note."
    )
    grant = h.write("mnote.file.grant", agent, documentId="notes/plan.md")["result"]
    copy = h.root / ".mnote/grants" / grant["grantId"] / "plan.md"
    copy.write_text(copy.read_text().replace("Monday", "Friday"))
    release = h.write(
        "mnote.file.release", agent, documentId="notes/plan.md", grantId=grant["grantId"]
    )
    assert h.head() == head and not (h.root / "notes/new.md").exists()
    assert "Monday" in (h.root / "notes/plan.md").read_text()
    for resp in (created, summary, note, release):
        assert resp["ok"], resp["error"]
        assert resp["result"]["state"] == "awaiting_user" and resp["audit"]["effect"] == "none"
    accepted = h.write("mnote.review.accept", args={"sessionId": created["result"]["sessionId"]})
    assert accepted["result"]["state"] == "applied", accepted
    assert (h.root / "notes/new.md").read_text().startswith("Hi")
    assert h.git("log", "-1", "--format=%an").strip() == "hermes"
    accepted = h.write("mnote.review.accept", args={"sessionId": summary["result"]["sessionId"]})
    assert accepted["result"]["state"] == "applied", accepted
    assert (h.root / "ai/summaries" / f"{h.doc('notes/plan.md')}.md").exists()
    accepted = h.write("mnote.review.accept", args={"sessionId": release["result"]["sessionId"]})
    assert accepted["result"]["state"] == "applied", accepted
    assert "Friday" in (h.root / "notes/plan.md").read_text() and not copy.exists()


def test_an_ai_grant_does_not_read_summaries_of_hidden_pages(h: Harness) -> None:
    made = h.write(
        "mnote.artifact.create_summary", documentId="private/secret.md", summary="Asks 123456."
    )
    assert made["ok"], made["error"]
    path = made["result"]["artifactPath"]
    agent = h.agent(grants=("notes/**", "ai/**"))
    got = h.call("mnote.page.get", agent, documentId=path)
    missing = h.call("mnote.page.get", agent, documentId="ai/summaries/doc_0000.md")
    assert got["error"]["code"] == "mnote_tool_permission_denied"
    assert got["error"]["message"].replace(path, "X") == missing["error"]["message"].replace(
        "ai/summaries/doc_0000.md", "X"
    )
    listed = h.call("mnote.workspace.list", agent)
    assert "123456" not in str(listed) and "secret" not in str(listed).lower()
    assert path not in str(listed)


def test_history_does_not_name_hidden_files_of_the_same_commit(h: Harness) -> None:
    from mnoted.store import CommandMeta, Write

    plan = (h.root / "notes/plan.md").read_bytes() + b"\nMore.\n"
    secret = (h.root / "private/secret.md").read_bytes() + b"\nAnd 777.\n"
    h.ws.apply(
        CommandMeta("page.body.save", actor="owner", command_id="cmd_both"),
        [Write("notes/plan.md", plan), Write("private/secret.md", secret)],
    )
    agent = h.agent(grants=("notes/**",))
    history = h.call("mnote.doc.history", agent, documentId="notes/plan.md")
    assert history["ok"], history["error"]
    assert "secret" not in str(history) and "private" not in str(history)
    assert history["result"]["commits"][0]["subject"] == "page.body.save: notes/plan.md"
    owner = h.call("mnote.doc.history", documentId="notes/plan.md")
    assert "private/secret.md" in owner["result"]["commits"][0]["subject"]


def test_review_sessions_need_a_grant_on_every_path_they_touch(h: Harness) -> None:
    _required(h)
    wide = h.agent("wide", grants=("**",))
    proposed = h.write(
        "mnote.artifact.create_summary", wide, documentId="private/secret.md", summary="123456"
    )
    assert proposed["ok"] and proposed["result"]["state"] == "awaiting_user", proposed
    session_id = proposed["result"]["sessionId"]
    ai_only = h.agent("ai", grants=("ai/**", "notes/**"))
    listed = h.call("mnote.review.list", ai_only)
    assert session_id not in str(listed) and "123456" not in str(listed)
    got = h.call("mnote.review.get", ai_only, args={"sessionId": session_id})
    absent = h.call("mnote.review.get", ai_only, args={"sessionId": "review_0000000000000000"})
    assert got["error"] == {**absent["error"], "message": got["error"]["message"]}
    assert "123456" not in str(got)
    assert h.call("mnote.review.get", wide, args={"sessionId": session_id})["ok"]
    # a session about a page the agent sees, writing a file it does not (the summary)
    of_plan = h.write(
        "mnote.artifact.create_summary", wide, documentId="notes/plan.md", summary="SUMMARY41"
    )
    notes_only = h.agent("notes", grants=("notes/**",))
    assert h.call("mnote.page.get", notes_only, documentId=of_plan["result"]["path"])["ok"]
    listed = h.call("mnote.review.list", notes_only)
    got = h.call("mnote.review.get", notes_only, args={"sessionId": of_plan["result"]["sessionId"]})
    assert "SUMMARY41" not in str(listed) + str(got)
    assert got["error"]["code"] == absent["error"]["code"]
