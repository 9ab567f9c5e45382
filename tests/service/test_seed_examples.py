"""Every JSON example of seed 000, sent as shown, answered in the shape shown."""

from __future__ import annotations

import pytest

from tests.service.conftest import PLAN, Harness

pytestmark = pytest.mark.twin


def assert_envelope(resp: dict, ok: bool, tool: str) -> None:
    assert set(resp) == {"ok", "toolName", "toolCallId", "traceId", "result", "audit", "error"}
    assert resp["ok"] is ok
    assert resp["toolName"] == tool
    assert resp["toolCallId"].startswith("call_") and resp["traceId"].startswith("trace_")
    if ok:
        assert resp["error"] is None
    else:
        assert resp["result"] is None
        assert set(resp["error"]) >= {"code", "message", "hint"}
        assert resp["audit"]["effect"] == "none"


def test_page_get_success(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    resp = h.call(
        "mnote.page.get",
        documentId=doc,
        actorId="user_1",
        idempotencyKey="idem_123",
        dryRun=False,
        capabilityScope=["page.read"],
        args={},
    )
    assert_envelope(resp, True, "mnote.page.get")
    result = resp["result"]
    assert result["documentId"] == doc and result["workspaceId"] == h.ws.workspace_id
    assert result["title"] == "Project plan"
    assert result["bodySummary"] == "Ship the beta on Monday."
    assert result["pageOptions"] == {
        "wideLayout": False,
        "smallText": False,
        "showToc": False,
        "protectEditing": False,
    }
    first = result["blocks"][0]
    assert first["type"] == "heading" and first["text"] == "Goals" and first["id"]
    assert resp["audit"]["effect"] == "read" and resp["audit"]["commandId"] is None


def test_page_get_permission_failure(h: Harness) -> None:
    agent = h.agent(grants=("notes/**",))
    resp = h.call("mnote.page.get", agent, documentId=h.doc("private/secret.md"))
    assert_envelope(resp, False, "mnote.page.get")
    assert resp["error"]["code"] == "mnote_tool_permission_denied"


@pytest.mark.git  # (commit trailers and count, read with git)
def test_page_save_success_is_one_commit_with_its_command_id(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    before = h.head()
    resp = h.write(
        "mnote.page.save",
        documentId=doc,
        content=[{"type": "paragraph", "text": "Done."}],
        mode="append",
    )
    assert_envelope(resp, True, "mnote.page.save")
    assert resp["result"]["commandName"] == "page.body.save"
    assert resp["result"]["revision"] == h.head() != before
    assert resp["audit"]["effect"] == "write"
    trailer = h.git("log", "-1", "--format=%(trailers:key=Mnote-Command-Id,valueonly)").strip()
    assert resp["audit"]["commandId"] == trailer
    assert h.git("rev-list", "--count", f"{before}..HEAD").strip() == "1"
    assert (
        (h.root / "notes/plan.md")
        .read_text()
        .endswith("## Risks\n\nBudget risk is high.\n\nDone.\n")
    )


def test_page_save_dry_run(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    before = h.head()
    resp = h.write(
        "mnote.page.save",
        documentId=doc,
        dryRun=True,
        content=[{"type": "paragraph", "text": "x"}],
        mode="append",
    )
    assert_envelope(resp, True, "mnote.page.save")
    assert resp["result"]["dryRun"] is True
    assert resp["result"]["diff"] == [
        {
            "op": "insert",
            "blockId": resp["result"]["changedBlockIds"][0],
            "after": "x",
            "type": "paragraph",
        }
    ]
    assert resp["audit"] == {**resp["audit"], "effect": "dry_run", "commandId": None}
    assert h.head() == before
    assert (h.root / "notes/plan.md").read_text() == PLAN


def test_page_save_permission_failure(h: Harness) -> None:
    reader = h.agent(scopes=("page.read",))
    resp = h.write("mnote.page.save", reader, documentId=h.doc("notes/plan.md"), content=["x"])
    assert_envelope(resp, False, "mnote.page.save")
    assert resp["error"]["code"] == "mnote_tool_permission_denied"


def test_page_save_business_failure_is_a_conflict(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    base = h.call("mnote.page.get", documentId=doc)["result"]["revision"]
    h.write_file("notes/plan.md", PLAN.replace("Budget risk is high.", "Budget risk is low."))
    resp = h.write(
        "mnote.page.save", documentId=doc, baseRevision=base, content=["All new."], mode="replace"
    )
    assert_envelope(resp, False, "mnote.page.save")
    assert resp["error"]["code"] == "mnote_tool_conflict"
    assert "Budget risk is low." in (h.root / "notes/plan.md").read_text()


def test_update_title_and_options(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    resp = h.write("mnote.page.update_title", documentId=doc, title="Launch plan")
    assert_envelope(resp, True, "mnote.page.update_title")
    assert resp["result"]["commandName"] == "page.head.updateTitle"
    resp = h.write("mnote.page.update_options", documentId=doc, options={"wideLayout": True})
    assert resp["result"]["commandName"] == "page.layout.updateOptions"
    text = (h.root / "notes/plan.md").read_text()
    assert text.startswith("---\ntitle: Launch plan\ntags: [work]\nwideLayout: true\n---\n")
    bad = h.write("mnote.page.update_options", documentId=doc, options={"darkMode": True})
    assert bad["error"]["code"] == "mnote_tool_unsupported_option"


def test_create_summary_idempotency_conflict(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    first = h.write(
        "mnote.artifact.create_summary", documentId=doc, idempotencyKey="idem_s", summary="Short."
    )
    assert first["ok"] and first["result"]["created"] is True
    again = h.write(
        "mnote.artifact.create_summary", documentId=doc, idempotencyKey="idem_s", summary="Short."
    )
    assert again["ok"] and again["audit"]["replayed"] is True
    other = h.write(
        "mnote.artifact.create_summary",
        documentId=doc,
        idempotencyKey="idem_s",
        summary="Different.",
    )
    assert_envelope(other, False, "mnote.artifact.create_summary")
    assert other["error"]["code"] == "mnote_tool_idempotency_conflict"
    updated = h.write("mnote.artifact.create_summary", documentId=doc, summary="Longer summary.")
    assert updated["ok"] and updated["result"]["created"] is False
    listed = h.call("mnote.page.get", documentId=doc)["result"]["artifacts"]
    assert [a["kind"] for a in listed] == ["summary"]
    assert listed[0]["edge"] == {"type": "reference", "from": listed[0]["documentId"], "to": doc}


def test_create_ai_note_makes_a_new_note_every_time(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    paths = {
        h.write("mnote.artifact.create_ai_note", documentId=doc, content="Idea.")["result"][
            "artifactPath"
        ]
        for _ in range(2)
    }
    assert len(paths) == 2
    for path in paths:
        text = (h.root / path).read_text()
        assert "mnoteArtifact: ai_note" in text and "[[notes/plan]]" in text
    kinds = [a["kind"] for a in h.call("mnote.page.get", documentId=doc)["result"]["artifacts"]]
    assert kinds == ["ai_note", "ai_note"]
