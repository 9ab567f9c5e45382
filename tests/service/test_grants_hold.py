"""Issue 41: grants hold everywhere. One test per reproduction that failed before its fix."""

from __future__ import annotations

from typing import Any

from tests.service.conftest import Harness


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
    return h.ws.sidecar.get("grant_by_path", path)


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
    assert _grant_state(h, "notes/plan.md") == fresh["result"]["grantId"]
