"""Seed 003 (page AI tool routing and review surface), section by section, through the
socket. The module's workspace has ``approvalMode = "required"``: an agent's page writes
wait for a person, the owner's land at once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from mnoted.client.client import Client
from tests.contract.conftest import PLAN, call, started, write
from tests.e2e.conftest import DaemonProcess

PAGES = ("selection", "manifest", "direct", "readback", "draft", "held", "failed")
FILES = {f"{name}.md": PLAN for name in PAGES}
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def _required(text: str) -> str:
    return text.replace('approvalMode = "review"', 'approvalMode = "required"')


@pytest.fixture(scope="module")
def d() -> Iterator[DaemonProcess]:
    yield from started(FILES, config=_required)


@pytest.fixture(scope="module")
def agent(d: DaemonProcess) -> Client:
    return d.client(d.agent_token("hermes", "page.write"))


def blocks(client: Client, page: str) -> dict[str, str]:
    """Text -> block id of the page's top-level blocks."""
    got = call(client, "mnote.page.get", documentId=page)
    assert got["ok"], got["error"]
    return {b.get("text", ""): b["id"] for b in got["result"]["blocks"]}


# -- §3.3 all writes through mnote tools: diff/warnings/risk/blocked/changedBlocks/audit ---


def test_s3_3_direct_writes_return_risk_blocked_and_changed_blocks(d: DaemonProcess) -> None:
    resp = write(
        d.client(),
        "mnote.doc.markdown_edit",
        documentId="direct.md",
        operations=[{"search": "Monday", "replace": "Tuesday"}],
    )
    assert resp["ok"], resp["error"]
    result = resp["result"]
    assert result["risk"] == "low" and result["blocked"] is False
    [change] = result["changedBlocks"]
    assert (change["before"], change["after"]) == ("Ship on Monday.", "Ship on Tuesday.")
    assert change["revisionRef"].startswith("body:")
    assert result["diff"][0]["op"] == "update" and isinstance(result["warnings"], list)
    assert resp["audit"]["effect"] == "write" and resp["audit"]["commandId"]


def test_s3_3_a_write_is_applied_after_its_commit_is_read_back(d: DaemonProcess) -> None:
    """The answer comes once the commit was read back holding the planned bytes: HEAD and
    the file are what the result describes. (A mismatch, which a daemon cannot be led into
    through its socket, is the unit test below.)"""
    resp = write(
        d.client(),
        "mnote.page.save",
        documentId="readback.md",
        content=[{"type": "paragraph", "text": "Read back."}],
        mode="append",
    )
    assert resp["ok"], resp["error"]
    revision = resp["result"]["revision"]
    assert "Read back." in d.git("show", f"{revision}:readback.md")
    assert (d.workspace / "readback.md").read_text().endswith("Read back.\n")


def test_s3_3_read_back_mismatch_is_an_error_not_a_success(tmp_path: Any) -> None:
    from mnoted.errors import StorageError
    from mnoted.service.calls import WritePlan
    from mnoted.service.writes import read_back
    from mnoted.store import CommandMeta, Workspace, Write

    ws = Workspace.init(tmp_path / "w")
    try:
        commit = ws.apply(CommandMeta("x", actor="a"), [Write("a.md", b"landed\n")])
        ws.apply(CommandMeta("y", actor="a"), [Write("b.md", b"other\n")])
        read_back(ws, WritePlan("x", [Write("a.md", b"landed\n")], {}), commit)
        with pytest.raises(StorageError, match="read-back failed"):
            read_back(ws, WritePlan("x", [Write("a.md", b"planned\n")], {}), commit)
    finally:
        ws.close()


# -- §5.1 / §5.4 / §6.3 frozen context: the run's selection holds for its writes ------------


def test_s5_1_frozen_selection_applies_to_the_runs_writes(d: DaemonProcess) -> None:
    owner = d.client()
    ids = blocks(owner, "selection.md")
    first, second = ids["Ship on Monday."], ids["Test on Friday."]
    context = call(
        owner,
        "mnote.page_ai.context",
        documentId="selection.md",
        runId="run_sel",
        args={"scope": "selection", "blockIds": [first]},
    )
    assert context["ok"], context["error"]
    assert context["result"]["allowedTargetBlockIds"] == [first]
    outside = write(
        owner,
        "mnote.doc.markdown_edit",
        documentId="selection.md",
        runId="run_sel",
        dryRun=True,
        operations=[{"search": "Friday", "replace": "Sunday"}],
    )
    assert outside["error"]["code"] == "mnote_block_target_out_of_scope"
    wider = write(
        owner,
        "mnote.doc.apply_block_ops",
        documentId="selection.md",
        runId="run_sel",
        dryRun=True,
        operations=[{"command": "replace_block", "block_id": second, "block": "Changed."}],
        allowedTargetBlockIds=[first, second],  # (a list wider than the frozen one)
    )
    assert wider["error"]["code"] == "mnote_block_target_out_of_scope"
    inside = write(
        owner,
        "mnote.doc.markdown_edit",
        documentId="selection.md",
        runId="run_sel",
        operations=[{"search": "Monday", "replace": "Tuesday"}],
    )
    assert inside["ok"], inside["error"]
    other_run = write(
        owner,
        "mnote.doc.markdown_edit",
        documentId="selection.md",
        dryRun=True,
        operations=[{"search": "Friday", "replace": "Sunday"}],
    )
    assert other_run["ok"], other_run["error"]


# -- §5.2 manifest: approval semantics, permissions, schemas --------------------------------


def _tools(client: Client) -> dict[str, Any]:
    _, body = client.request("GET", "/v1/tools")
    return body


def test_s5_2_manifest_shows_the_effective_approval_for_the_caller(
    d: DaemonProcess, agent: Client
) -> None:
    as_agent = _tools(agent)
    tools = {t["name"]: t for t in as_agent["tools"]}
    assert as_agent["approvalMode"] == "required"
    for name in ("mnote.doc.markdown_edit", "mnote.page.save", "mnote.doc.apply_block_ops"):
        annotations = tools[name]["annotations"]
        assert annotations["approvalMode"] == "required" and annotations["requiresApproval"]
    assert tools["mnote.page.get"]["annotations"]["requiresApproval"] is False
    assert as_agent["permissions"]["actorId"] == "hermes"
    assert as_agent["permissions"]["scopes"] == ["page.write"]
    assert tools["mnote.artifact.create_summary"]["availability"]["enabled"] is False
    as_owner = {t["name"]: t for t in _tools(d.client())["tools"]}
    owner_edit = as_owner["mnote.doc.markdown_edit"]["annotations"]
    assert owner_edit["requiresApproval"] is False and owner_edit["approvalMode"] == "none"
    # ... and the calls do what the manifest says
    held = write(
        agent,
        "mnote.doc.markdown_edit",
        documentId="manifest.md",
        operations=[{"search": "Monday", "replace": "Tuesday"}],
    )
    assert held["ok"] and held["result"]["state"] == "awaiting_user"
    assert (d.workspace / "manifest.md").read_text() == PLAN


def test_s5_2_output_schema_matches_what_results_return(d: DaemonProcess) -> None:
    tools = {t["name"]: t for t in _tools(d.client())["tools"]}
    schema = tools["mnote.page.save"]["outputSchema"]
    assert schema["properties"]["diff"]["type"] == "array"
    for dry_run in (True, False):
        resp = write(
            d.client(),
            "mnote.page.save",
            documentId="manifest.md",
            dryRun=dry_run,
            content=[{"type": "paragraph", "text": f"Schema {dry_run}."}],
            mode="append",
        )
        assert resp["ok"], resp["error"]
        jsonschema.validate(resp["result"], schema)
    edit = write(
        d.client(),
        "mnote.doc.markdown_edit",
        documentId="manifest.md",
        dryRun=True,
        operations=[{"search": "Friday", "replace": "Sunday"}],
    )
    jsonschema.validate(edit["result"], tools["mnote.doc.markdown_edit"]["outputSchema"])


# -- §5.5 PageAIReviewSession, §8 Phase D ----------------------------------------------------


def _assert_session_shape(session: dict[str, Any]) -> None:
    assert session["schema"] == "mnote.page_ai_review_session.v1"
    assert ISO.match(session["audit"]["createdAt"]), session["audit"]
    proposal = session["proposal"]
    assert {"format", "operations", "fullContent"} <= set(proposal)
    preview = session["preview"]
    assert isinstance(preview["diff"], list) and isinstance(preview["changedBlocks"], list)
    assert {"warnings", "risk", "blocked"} <= set(preview)
    assert {"accept", "reject", "retry", "abort"} <= set(session["actions"])


def test_s5_5_review_session_of_a_held_write_as_the_seed_shapes_it(
    d: DaemonProcess, agent: Client
) -> None:
    held = write(
        agent,
        "mnote.doc.markdown_edit",
        documentId="held.md",
        operations=[{"search": "Monday", "replace": "Tuesday"}],
    )
    session = held["result"]
    _assert_session_shape(session)
    assert session["state"] == "awaiting_user"
    assert session["proposal"]["format"] == "markdown"
    assert session["proposal"]["operations"] == [
        {"op": "replace", "search": "Monday", "replace": "Tuesday"}
    ]
    assert session["preview"]["diff"][0]["after"] == "Ship on Tuesday."
    assert [h["state"] for h in session["history"]][:2] == ["draft", "planning"]
    saved = write(
        agent,
        "mnote.page.save",
        documentId="held.md",
        content=[{"type": "paragraph", "text": "Whole page."}],
    )
    full = saved["result"]["proposal"]
    assert full["fullContent"] is not None and "Whole page." in full["fullContent"]
    # accepted, it is applied with the proposer's seed-004 header in the commit
    accepted = write(d.client(), "mnote.review.accept", args={"sessionId": session["sessionId"]})
    assert accepted["ok"] and accepted["result"]["state"] == "applied", accepted
    fetched = call(d.client(), "mnote.review.get", args={"sessionId": session["sessionId"]})
    _assert_session_shape(fetched["result"])


def test_s8_phase_d_apply_block_ops_dry_run_returns_a_review_compatible_draft(
    d: DaemonProcess,
) -> None:
    ids = blocks(d.client(), "draft.md")
    resp = write(
        d.client(),
        "mnote.doc.apply_block_ops",
        documentId="draft.md",
        dryRun=True,
        operations=[
            {"command": "replace_block", "block_id": ids["Test on Friday."], "block": "Later."}
        ],
    )
    assert resp["ok"], resp["error"]
    assert resp["audit"]["effect"] == "dry_run"
    session = resp["result"]["reviewSession"]
    _assert_session_shape(session)
    assert session["proposal"]["format"] == "block_ops"
    assert session["preview"]["changedBlocks"][0]["after"] == "Later."
    assert session["base"]["revision"] == resp["result"]["revision"]
    kept = call(d.client(), "mnote.review.list", args={})
    assert session["sessionId"] not in {s["sessionId"] for s in kept["result"]["sessions"]}
    assert (d.workspace / "draft.md").read_text() == PLAN


def test_s5_5_accept_of_a_failed_session_is_an_invalid_transition(d: DaemonProcess) -> None:
    proposed = write(
        d.client(),
        "mnote.doc.plan_update",
        documentId="failed.md",
        operations=[{"search": "not on the page", "replace": "x"}],
    )
    assert proposed["ok"] and proposed["result"]["state"] == "failed", proposed
    accepted = write(
        d.client(), "mnote.review.accept", args={"sessionId": proposed["result"]["sessionId"]}
    )
    assert accepted["error"]["code"] == "mnote_review_invalid_transition"
    assert (d.workspace / "failed.md").read_text() == PLAN
