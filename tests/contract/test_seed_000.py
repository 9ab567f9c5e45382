"""Seed 000 (mnote Hermes plugin tool contract v1), section by section, through the socket.

One daemon serves the whole module; each test works on pages of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.contract.conftest import (
    ANSWER_KEYS,
    PLAN,
    call,
    raw_http,
    started,
    trailers,
    write,
)
from tests.e2e.conftest import DaemonProcess, wait_for

FILES = {
    "plan.md": PLAN,
    "actor.md": PLAN,
    "save.md": PLAN,
    "options.md": '---\ntitle: Options\nshowToc: "yes"\nsmallText: 1\n---\n# Options\n\nbody\n',
    "bad-yaml.md": "---\ntitle: [unclosed\n: : :\n---\n# Still a page\n\nbody\n",
    "plain.md": PLAN,
    "plan-update.md": PLAN,
    "grant.md": PLAN,
}


@pytest.fixture(scope="module")
def d() -> Iterator[DaemonProcess]:
    yield from started(FILES)


@pytest.fixture(scope="module")
def workspace_id(d: DaemonProcess) -> str:
    _, body = d.client().request("GET", "/v1/workspaces")
    return str(body["workspaces"][0]["workspaceId"])


# -- §2 统一入参 (the envelope) ------------------------------------------------------------


def test_s2_actor_id_of_another_actor_is_refused_for_an_agent(d: DaemonProcess) -> None:
    agent = d.client(d.agent_token("hermes", "page.write"))
    resp = write(
        agent,
        "mnote.page.save",
        documentId="actor.md",
        actorId="someone_else",
        content=[{"type": "paragraph", "text": "Impersonated."}],
        mode="append",
    )
    assert resp["error"]["code"] == "mnote_tool_permission_denied"
    assert "Impersonated." not in (d.workspace / "actor.md").read_text()


def test_s2_actor_id_named_by_the_owner_is_recorded_beside_the_owner(d: DaemonProcess) -> None:
    """Seed 000 §2's example sends ``actorId: "user_1"`` with the owner's token: the call runs
    as the owner, and the named actor is kept with it (audit and commit trailer)."""
    resp = write(
        d.client(),
        "mnote.page.save",
        documentId="actor.md",
        actorId="user_1",
        content=[{"type": "paragraph", "text": "Relayed."}],
        mode="append",
    )
    assert resp["ok"], resp["error"]
    assert resp["audit"]["actorId"] == "owner" and resp["audit"]["onBehalfOf"] == "user_1"
    kept = trailers(d, resp["result"]["revision"])
    assert kept["Mnote-Actor"] == ["owner"] and kept["Mnote-On-Behalf-Of"] == ["user_1"]


# -- §3 统一出参 (the answer) --------------------------------------------------------------


def test_s3_an_answer_without_a_token_has_the_full_shape(d: DaemonProcess) -> None:
    status, body = d.client(token="not-a-token").request(
        "POST", "/v1/tools/call", {"toolName": "mnote.page.get", "documentId": "plan.md"}
    )
    assert status == 401
    assert set(body) == ANSWER_KEYS
    assert body["ok"] is False and body["result"] is None
    assert body["audit"]["effect"] == "none"
    assert body["error"]["code"] == "mnote_tool_permission_denied"


def test_s3_an_answer_to_a_body_that_is_not_json_has_the_full_shape(d: DaemonProcess) -> None:
    token = d.owner_token()
    status, raw = raw_http(
        d.socket,
        b"POST /v1/tools/call HTTP/1.1\r\nHost: mnoted\r\nAuthorization: Bearer "
        + token.encode()
        + b"\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\nnot json",
    )
    body = json.loads(raw)
    assert status == 400
    assert set(body) == ANSWER_KEYS
    assert body["error"]["code"] == "mnote_tool_invalid_arguments"


def test_s3_failure_audit_names_the_workspace(d: DaemonProcess, workspace_id: str) -> None:
    """Seed 000 §3's failure example: ``audit: {effect: "none", workspaceId: "ws_1", ...}``."""
    agent = d.client(d.agent_token("reader", "page.read"))
    resp = write(
        agent,
        "mnote.page.save",
        documentId="plan.md",
        content=[{"type": "paragraph", "text": "x"}],
    )
    assert resp["error"]["code"] == "mnote_tool_permission_denied"
    assert set(resp) == ANSWER_KEYS
    assert resp["audit"]["effect"] == "none"
    assert resp["audit"]["workspaceId"] == workspace_id
    missing = call(d.client(), "mnote.page.get", documentId="no-such-page.md")
    assert missing["ok"] is False and missing["audit"]["workspaceId"] == workspace_id


# -- §4 第一批工具 schema (the first tools) -----------------------------------------------


def test_s4_page_save_dry_run_returns_the_seed_summary(d: DaemonProcess) -> None:
    """The seed's dryRun example: ``result: {dryRun: true, diff: [{op: "append", blocks:
    1}]}``, ``audit: {effect: "dry_run", commandId: null}``. The summary is
    ``diffSummary``; ``diff`` stays the per-block array (docs/protocol.md)."""
    head = d.git("rev-parse", "HEAD")
    resp = write(
        d.client(),
        "mnote.page.save",
        documentId="save.md",
        dryRun=True,
        content=[{"type": "paragraph", "text": "One more."}],
        mode="append",
    )
    assert resp["ok"], resp["error"]
    result = resp["result"]
    assert result["dryRun"] is True
    assert result["diffSummary"] == [{"op": "append", "blocks": 1}]
    assert [(e["op"], e["after"]) for e in result["diff"]] == [("insert", "One more.")]
    assert "+One more." in result["unifiedDiff"]
    assert resp["audit"]["effect"] == "dry_run" and resp["audit"]["commandId"] is None
    assert d.git("rev-parse", "HEAD") == head
    assert (d.workspace / "save.md").read_text() == PLAN


def test_s4_page_update_options_refuses_values_that_are_not_booleans(d: DaemonProcess) -> None:
    for value in ("yes", 1, "false", None, [True]):
        resp = write(
            d.client(),
            "mnote.page.update_options",
            documentId="plain.md",
            options={"showToc": value},
        )
        assert resp["error"]["code"] == "mnote_tool_invalid_arguments", value
    assert (d.workspace / "plain.md").read_text() == PLAN
    ok = write(
        d.client(), "mnote.page.update_options", documentId="plain.md", options={"showToc": True}
    )
    assert ok["ok"] and ok["result"]["pageOptions"]["showToc"] is True


def test_s4_page_options_that_are_not_booleans_are_reported(d: DaemonProcess) -> None:
    resp = call(d.client(), "mnote.page.get", documentId="options.md")
    assert resp["ok"], resp["error"]
    warnings = resp["result"]["warnings"]
    assert any("showToc" in w and "'yes'" in w for w in warnings), warnings
    assert any("smallText" in w and "1" in w for w in warnings), warnings
    assert resp["result"]["pageOptions"]["showToc"] is False


def test_s4_page_options_write_on_unreadable_frontmatter_is_refused(d: DaemonProcess) -> None:
    page = call(d.client(), "mnote.page.get", documentId="bad-yaml.md")
    assert any("frontmatter ignored" in w for w in page["result"]["warnings"])
    before = (d.workspace / "bad-yaml.md").read_bytes()
    for value in (True, False):  # (false would change nothing: still not answered ok)
        resp = write(
            d.client(),
            "mnote.page.update_options",
            documentId="bad-yaml.md",
            options={"wideLayout": value},
        )
        assert resp["error"]["code"] == "mnote_page_invalid_frontmatter"
        assert "warnings" in resp["error"]["hint"]
    assert (d.workspace / "bad-yaml.md").read_bytes() == before


# -- §5 权限、幂等与 dryRun ------------------------------------------------------------------


def test_s5_dry_runs_of_plan_update_and_review_answer_effect_dry_run(d: DaemonProcess) -> None:
    client = d.client()
    proposed = write(
        client,
        "mnote.doc.plan_update",
        documentId="plan-update.md",
        dryRun=True,
        operations=[{"search": "Monday", "replace": "Tuesday"}],
    )
    assert proposed["ok"], proposed["error"]
    assert proposed["audit"]["effect"] == "dry_run" and proposed["audit"]["commandId"] is None
    kept = write(
        client,
        "mnote.doc.plan_update",
        documentId="plan-update.md",
        operations=[{"search": "Monday", "replace": "Tuesday"}],
    )
    session_id = kept["result"]["sessionId"]
    for tool in ("mnote.review.reject", "mnote.review.abort", "mnote.review.accept"):
        resp = write(client, tool, dryRun=True, args={"sessionId": session_id})
        assert resp["ok"], (tool, resp["error"])
        assert resp["audit"]["effect"] == "dry_run", tool
    assert (d.workspace / "plan-update.md").read_text() == PLAN


def test_s5_file_release_names_the_command_it_committed(d: DaemonProcess) -> None:
    """``audit.commandId`` of a release traces the commit it made. The agent edits a
    private copy, so the watcher commits only the person's edits to the page meanwhile, as
    theirs; the agent's edits arrive in the release's own commit."""
    agent = d.client(d.agent_token("filer", "page.write"))
    grant = write(agent, "mnote.file.grant", documentId="grant.md")
    assert grant["ok"], grant["error"]
    path = grant["result"]["absolutePath"]
    with open(path, "a") as f:
        f.write("\nEdited by the agent.\n")
    page = d.workspace / "grant.md"
    page.write_text("Typed by the person.\n\n" + page.read_text())

    def person_committed() -> str | None:
        line = d.git("log", "-1", "--format=%H %an", "--", "grant.md").split()
        return (
            line[0]
            if line and line[1] != "filer" and line[0] != grant["result"]["revision"]
            else None
        )

    wait_for(person_committed)
    released = write(
        agent, "mnote.file.release", documentId="grant.md", grantId=grant["result"]["grantId"]
    )
    assert released["ok"], released["error"]
    head = d.git("rev-parse", "HEAD").strip()
    assert released["result"]["revision"] == head
    assert released["audit"]["commandId"] == trailers(d, head)["Mnote-Command-Id"][0]
    assert released["audit"]["effect"] == "write"
    assert d.git("log", "-1", "--format=%an", head).strip() == "filer"
    text = page.read_text()
    assert "Typed by the person." in text and "Edited by the agent." in text
