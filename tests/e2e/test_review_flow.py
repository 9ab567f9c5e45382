"""Seed 003 §8 phase F, end to end over the daemon's socket, with an agent and a person."""

from __future__ import annotations

from tests.e2e.conftest import DaemonProcess


def call(client, tool: str, **fields) -> dict:
    body = client.envelope(
        tool, fields.pop("documentId", None), fields.pop("args", {}), fields.pop("dryRun", False)
    )
    body.update(fields)
    _, resp = client.request("POST", "/v1/tools/call", body)
    return resp


def test_phase_f_acceptance(daemon: DaemonProcess) -> None:
    token = daemon.agent_token("hermes", "page.write")
    agent = daemon.client(token=token)
    owner = daemon.client()

    # A low-ambiguity replace: routed, applied and visible with its audit in one round trip.
    route = call(
        agent,
        "mnote.page_ai.route",
        documentId="plan.md",
        args={"instruction": "把「Monday」替换为「Friday」"},
    )["result"]
    assert route["requiresHermesRun"] is False and route["requiresReview"] is False
    rec = route["recommendedToolCall"]
    done = call(agent, rec["toolName"], documentId=rec["documentId"], args=rec["args"])
    assert done["ok"] and done["audit"]["effect"] == "write"
    assert "Ship on Friday." in (daemon.workspace / "plan.md").read_text()

    # A complex rewrite is handed to a Hermes run.
    complex_ = call(
        agent,
        "mnote.page_ai.route",
        documentId="plan.md",
        args={"instruction": "Rewrite this page so it sounds more confident"},
    )["result"]
    assert complex_["requiresHermesRun"] is True and complex_["recommendedToolCall"] is None

    # A write outside the selection is blocked in the preview and refused on accept.
    page = call(owner, "mnote.page.get", documentId="plan.md")["result"]
    first = next(b["id"] for b in page["blocks"] if b["type"] == "paragraph")
    blocked = call(
        agent,
        "mnote.doc.plan_update",
        documentId="plan.md",
        args={
            "operations": [{"search": "- two", "replace": "- 2"}],
            "allowedTargetBlockIds": [first],
        },
    )["result"]
    assert blocked["preview"]["blocked"] is True
    refused = call(owner, "mnote.review.accept", args={"sessionId": blocked["sessionId"]})
    assert refused["error"]["code"] == "mnote_block_target_out_of_scope"

    # An accept after the page changed ends in stale, with no write.
    proposal = call(
        agent,
        "mnote.doc.plan_update",
        documentId="plan.md",
        args={"operations": [{"search": "- one", "replace": "- first"}]},
    )["result"]
    (daemon.workspace / "plan.md").write_text(
        "# Plan\n\nShip on Friday.\n\n- one\n- two\n- three\n"
    )
    owner.request(
        "POST", "/v1/tools/call", owner.envelope("mnote.page.get", "plan.md")
    )  # commits the edit
    head = daemon.git("rev-parse", "HEAD").strip()
    stale = call(owner, "mnote.review.accept", args={"sessionId": proposal["sessionId"]})
    assert stale["error"]["code"] == "mnote_review_stale"
    assert daemon.git("rev-parse", "HEAD").strip() == head
    accepted = daemon.cli("review", "accept", proposal["sessionId"])
    assert accepted.returncode == 1 and "mnote_review_stale" in accepted.stdout + accepted.stderr

    # Abort leaves no half-written body.
    pending = call(
        agent, "mnote.page.save", documentId="plan.md", content=["Held."], mode="append"
    )["result"]
    assert pending["state"] == "awaiting_user"
    aborted = call(agent, "mnote.review.abort", args={"sessionId": pending["sessionId"]})["result"]
    assert aborted["state"] == "aborted"
    assert "Held." not in (daemon.workspace / "plan.md").read_text()

    # A restart leaves pending sessions pending.
    waiting = call(
        agent, "mnote.page.save", documentId="plan.md", content=["Later."], mode="append"
    )["result"]
    daemon.stop()
    daemon.start()
    owner = daemon.client()
    again = call(owner, "mnote.review.get", args={"sessionId": waiting["sessionId"]})["result"]
    assert again["state"] == "awaiting_user"
    assert "Later." not in (daemon.workspace / "plan.md").read_text()
    shown = daemon.cli("review", "show", waiting["sessionId"])
    assert shown.returncode == 0 and "+Later." in shown.stdout and "awaiting_user" in shown.stdout
    accepted = daemon.cli("review", "accept", waiting["sessionId"])
    assert accepted.returncode == 0, accepted.stdout
    assert (daemon.workspace / "plan.md").read_text().endswith("Later.\n")
    listed = daemon.cli("review", "list")
    assert waiting["sessionId"] in listed.stdout and "applied" in listed.stdout


def test_disabled_tool_is_neither_recommended_nor_executable(daemon: DaemonProcess) -> None:
    config = daemon.workspace / ".mnote" / "config.toml"
    config.write_text(
        config.read_text().replace(
            "disabledTools = []", 'disabledTools = ["mnote.doc.markdown_edit"]'
        )
    )
    daemon.stop()
    daemon.start()
    owner = daemon.client()
    route = call(
        owner,
        "mnote.page_ai.route",
        documentId="plan.md",
        args={"instruction": 'replace "Monday" with "Friday"'},
    )["result"]
    assert route["requiresHermesRun"] is True and "disabled" in route["reason"]
    refused = call(
        owner,
        "mnote.doc.markdown_edit",
        documentId="plan.md",
        args={"operations": [{"search": "Monday", "replace": "Friday"}]},
    )
    assert refused["error"]["code"] == "mnote_tool_disabled"
    _, manifest = owner.request("GET", "/v1/tools")
    entry = next(t for t in manifest["tools"] if t["name"] == "mnote.doc.markdown_edit")
    assert entry["availability"]["enabled"] is False
