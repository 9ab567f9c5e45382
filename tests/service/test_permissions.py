"""Who may do what: the permission matrix, checked end to end through the executor."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

from mnoted.contract.manifest import manifest
from mnoted.contract.tools import TOOLS
from mnoted.errors import InvalidArguments
from mnoted.service import Actor
from mnoted.store.tokens import TokenStore
from tests.service.conftest import SECRET, Harness

pytestmark = pytest.mark.twin

READ_TOOLS = sorted(n for n, s in TOOLS.items() if not s.writes)
WRITE_TOOLS = sorted(n for n, s in TOOLS.items() if s.writes)


def args_for(h: Harness, tool: str, doc: str) -> dict:
    """Valid arguments for each tool on ``doc``."""
    return {
        "mnote.page.get": {},
        "mnote.page.save": {"content": ["x"], "mode": "append"},
        "mnote.page.update_title": {"title": "T"},
        "mnote.page.update_options": {"options": {"wideLayout": True}},
        "mnote.artifact.create_summary": {"summary": "s"},
        "mnote.artifact.create_ai_note": {"content": "c"},
        "mnote.doc.fetch": {},
        "mnote.block.fetch": {"blockId": "h_0"},
        "mnote.doc.markdown_edit": {"operations": [{"search": "123456", "replace": "0"}]},
        "mnote.doc.apply_block_ops": {"operations": [{"command": "delete_block", "block_id": "x"}]},
        "mnote.page.create": {"path": "private/new.md", "content": "n"},
        "mnote.page.delete": {},
        "mnote.page.move": {"newPath": "private/moved.md"},
        "mnote.workspace.list": {"folder": "private"},
        "mnote.doc.history": {},
        "mnote.file.grant": {},
        "mnote.file.release": {"grantId": "grant_x"},
        "mnote.page_ai.context": {"scope": "outline"},
        "mnote.page_ai.route": {"instruction": "replace 「123456」 with 「0」"},
        "mnote.doc.plan_update": {"operations": [{"search": "123456", "replace": "0"}]},
        "mnote.review.get": {"sessionId": "review_x"},
        "mnote.review.list": {},
        "mnote.review.accept": {"sessionId": "review_x"},
        "mnote.review.reject": {"sessionId": "review_x"},
        "mnote.review.retry": {"sessionId": "review_x"},
        "mnote.review.abort": {"sessionId": "review_x"},
        "mnote.workspace.search": {"query": "123456", "paths": ["private/**"]},
        "mnote.page.links": {},
    }[tool]


def call(h: Harness, tool: str, actor, doc: str) -> dict:
    fields = {"documentId": doc, "args": args_for(h, tool, doc)}
    if TOOLS[tool].writes:
        return h.write(tool, actor, dryRun=True, **fields)
    return h.call(tool, actor, **fields)


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_hidden_page_reveals_nothing(h: Harness, tool: str) -> None:
    """An agent granted notes/** learns nothing of private/secret.md from any tool."""
    agent = h.agent(grants=("notes/**",))
    secret_doc = h.doc("private/secret.md")
    resp = call(h, tool, agent, secret_doc)
    text = json.dumps(resp)
    assert "Salary" not in text and "123456" not in text
    if tool == "mnote.workspace.list":
        assert resp["ok"] and resp["result"]["pages"] == []
        return
    if tool == "mnote.workspace.search":
        assert resp["ok"] and resp["result"]["hits"] == [] and resp["result"]["total"] == 0
        return
    if tool == "mnote.file.release" or tool.startswith("mnote.review."):
        # These name a grant or a session, not the page: unknown ids, nothing about the page.
        assert resp["ok"] is False or tool == "mnote.review.list"
        return
    assert resp["ok"] is False
    assert resp["error"]["code"] == "mnote_tool_permission_denied"
    # A hidden page and a missing page answer the same.
    missing = call(h, tool, agent, "doc_does_not_exist")
    assert missing["error"]["code"] == resp["error"]["code"]
    assert missing["error"]["message"].replace("doc_does_not_exist", "X") == resp["error"][
        "message"
    ].replace(secret_doc, "X")
    assert SECRET in (h.root / "private/secret.md").read_text()


@pytest.mark.parametrize(
    "scopes,tool,allowed",
    [
        (("page.read",), "mnote.page.get", True),
        (("page.read",), "mnote.doc.fetch", True),
        (("page.read",), "mnote.page.save", False),
        (("page.write",), "mnote.page.get", True),  # a write scope covers its read scope
        (("page.write",), "mnote.page.save", True),
        (("page.write",), "mnote.artifact.create_summary", False),
        (("artifact.write",), "mnote.artifact.create_summary", True),
        (("artifact.write",), "mnote.page.get", False),
        ((), "mnote.page.get", False),
    ],
)
def test_token_scopes(h: Harness, scopes, tool: str, allowed: bool) -> None:
    agent = h.agent(scopes=scopes)
    resp = call(h, tool, agent, h.doc("notes/plan.md"))
    if allowed:
        assert resp["ok"], resp["error"]
    else:
        assert resp["error"]["code"] == "mnote_tool_permission_denied"
    entry = next(t for t in manifest(scopes=scopes)["tools"] if t["name"] == tool)
    assert entry["availability"]["enabled"] is allowed


@pytest.mark.parametrize(
    "declared,ok",
    [
        (None, True),
        (["page.read"], True),
        (["page.write"], True),
        (["artifact.write"], False),
        ([], False),
    ],
)
def test_declared_capability_scope(h: Harness, declared, ok: bool) -> None:
    fields = {"documentId": h.doc("notes/plan.md")}
    if declared is not None:
        fields["capabilityScope"] = declared
    resp = h.call("mnote.page.get", **fields)
    assert resp["ok"] is ok
    if not ok:
        assert resp["error"]["code"] == "mnote_tool_permission_denied"


def test_actor_id_must_match_the_token(h: Harness) -> None:
    agent = h.agent("hermes")
    resp = h.call(
        "mnote.page.get", agent, documentId=h.doc("notes/plan.md"), actorId="someone_else"
    )
    assert resp["error"]["code"] == "mnote_tool_permission_denied"
    resp = h.call("mnote.page.get", agent, documentId=h.doc("notes/plan.md"), actorId="hermes")
    assert resp["ok"]


def test_expired_token_is_refused(h: Harness) -> None:
    agent = h.agent(expires_at=1.0)
    resp = h.call("mnote.page.get", agent, documentId=h.doc("notes/plan.md"))
    assert resp["error"]["code"] == "mnote_tool_permission_denied"
    assert resp["error"]["message"] == "the token expired at 1970-01-01T00:00:01Z"


def test_unknown_workspace_is_denied(h: Harness) -> None:
    resp = h.call("mnote.page.get", documentId=h.doc("notes/plan.md"), workspaceId="ws_other")
    assert resp["error"]["code"] == "mnote_tool_permission_denied"


def test_protect_editing_blocks_agents_not_the_owner(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    assert h.write("mnote.page.update_options", documentId=doc, options={"protectEditing": True})[
        "ok"
    ]
    agent = h.agent()
    for tool, args in [
        ("mnote.page.save", {"content": ["x"], "mode": "append"}),
        ("mnote.doc.markdown_edit", {"operations": [{"search": "Monday", "replace": "Friday"}]}),
        ("mnote.page.update_options", {"options": {"protectEditing": False}}),
        ("mnote.page.delete", {}),
    ]:
        resp = h.write(tool, agent, documentId=doc, args=args)
        assert resp["error"]["code"] == "mnote_tool_permission_denied", tool
        assert "protect" in resp["error"]["message"]
    assert h.call("mnote.page.get", agent, documentId=doc)["ok"]
    owner = h.write(
        "mnote.doc.markdown_edit",
        documentId=doc,
        args={"operations": [{"search": "Monday", "replace": "Friday"}]},
    )
    assert owner["ok"]


def test_disabled_tool_is_refused_as_the_manifest_says(h: Harness, tmp_path) -> None:
    config = h.root / ".mnote" / "config.toml"
    text = config.read_text()
    config.write_text(text.replace("disabledTools = []", 'disabledTools = ["mnote.block.fetch"]'))
    h.ws.commit_external([".mnote/config.toml"])
    h.reopen()
    assert "mnote.block.fetch" in h.ws.config.disabled_tools
    entry = next(
        t for t in manifest(h.ws.config.disabled_tools)["tools"] if t["name"] == "mnote.block.fetch"
    )
    resp = h.call("mnote.block.fetch", documentId=h.doc("notes/plan.md"), blockId="x")
    assert entry["availability"]["enabled"] is False
    assert resp["error"]["code"] == "mnote_tool_disabled"
    assert entry["availability"]["unsupportedReason"] in resp["error"]["message"]


def test_commit_events_name_the_page_so_the_stream_can_hide_it(h: Harness) -> None:
    events: list[dict] = []
    h.service.events.subscribe(events.append)
    h.write(
        "mnote.doc.markdown_edit",
        documentId=h.doc("private/secret.md"),
        args={"operations": [{"search": "123456", "replace": "654321"}]},
    )
    h.write("mnote.page.create", args={"path": "private/other.md", "content": "x"})
    commits = [e for e in events if e["type"] == "commit"]
    assert [e["path"] for e in commits] == ["private/secret.md", "private/other.md"]


@pytest.mark.parametrize(
    "actor_id", ["", "owner", "evil\nMnote-Command-Id: forged", "a b", "x" * 65]
)
def test_an_agent_actor_id_that_commits_could_not_carry_is_refused(
    h: Harness, actor_id: str
) -> None:
    with pytest.raises(InvalidArguments, match="cannot be an agent's actor id"):
        h.agent(actor_id)


@pytest.mark.git  # (git log and git fsck)
def test_a_token_made_with_any_actor_id_still_commits_what_fsck_accepts(h: Harness) -> None:
    # A token made before actor ids were checked: its writes made a commit without an
    # author's email ("evil\nx" as the name), which `git fsck --strict` refuses.
    record = TokenStore(h.ws.state_dir).create("hermes", ("page.write",), ("**",), None, 0.0)[1]
    agent = Actor.from_token(dataclasses.replace(record, actor_id="evil\n<x>"))
    resp = h.write("mnote.page.create", agent, args={"path": "notes/e.md", "content": "x"})
    assert resp["ok"], resp["error"]
    assert h.git("log", "-1", "--format=%an <%ae>") == "evil x <evilx@mnote.local>\n"
    fsck = subprocess.run(["git", "fsck", "--strict"], cwd=h.root, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
