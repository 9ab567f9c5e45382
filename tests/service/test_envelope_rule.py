"""Envelope fields and tool arguments never collide, and types are strict (docs/protocol.md)."""

from __future__ import annotations

import pytest

from tests.service.conftest import Harness

pytestmark = pytest.mark.twin


def test_flat_page_create_takes_path_as_its_argument(h: Harness) -> None:
    made = h.write("mnote.page.create", path="agent/ideas.md", content="Idea.\n")
    assert made["ok"], made
    assert (h.root / "agent" / "ideas.md").read_text().endswith("Idea.\n")


def test_flat_review_tools_take_session_id_as_the_review(h: Harness) -> None:
    agent = h.agent()
    proposed = h.write(
        "mnote.doc.plan_update",
        agent,
        documentId="notes/plan.md",
        operations=[{"search": "Budget risk is high.", "replace": "Budget risk is low."}],
        reason="lower the risk",
    )
    assert proposed["ok"], proposed
    review = proposed["result"]["reviewSessionId"]
    assert proposed["result"]["proposal"]["reason"] == "lower the risk"
    # flat: sessionId is the review's id; the call's own session goes by its alias
    got = h.call("mnote.review.get", sessionId=review)
    assert got["ok"] and got["result"]["sessionId"] == review
    envelope = h.envelope("mnote.review.get", sessionId=review)
    envelope.pop("sessionId")
    envelope["session_id"] = "chat_1"
    got = h.service.call({**envelope, "sessionId": review}, h.owner)
    assert got["ok"] and got["result"]["sessionId"] == review
    # nested: the top level is the envelope's, args the tool's
    nested = h.call("mnote.review.get", args={"sessionId": review})
    assert nested["ok"] and nested["result"]["sessionId"] == review
    aborted = h.write("mnote.review.abort", agent, sessionId=review)
    assert aborted["ok"] and aborted["result"]["state"] == "aborted"


@pytest.mark.parametrize("value", ["no", 0, "false", 1, None])
def test_dry_run_must_be_a_json_boolean(h: Harness, value: object) -> None:
    head = h.head()
    resp = h.write("mnote.page.update_title", documentId="notes/plan.md", title="New", dryRun=value)
    if value is None:  # (absent: a write must say dryRun)
        assert resp["error"]["code"] == "mnote_tool_invalid_arguments"
    else:
        assert resp["error"]["code"] == "mnote_tool_invalid_arguments"
        assert resp["error"]["message"].startswith("dryRun:")
    assert h.head() == head


@pytest.mark.parametrize("value", ["yes", 1, "true"])
def test_option_values_must_be_json_booleans(h: Harness, value: object) -> None:
    head = h.head()
    resp = h.write(
        "mnote.page.update_options", documentId="notes/plan.md", options={"showToc": value}
    )
    assert resp["error"]["code"] == "mnote_tool_invalid_arguments"
    assert resp["error"]["message"].startswith("options.showToc:")
    assert h.head() == head


def test_numbers_are_not_read_from_strings(h: Harness) -> None:
    resp = h.call("mnote.workspace.list", limit="5")
    assert resp["error"]["code"] == "mnote_tool_invalid_arguments"
    assert resp["error"]["message"].startswith("limit:")


def test_every_argument_a_model_or_client_sees_is_described() -> None:
    from mnoted.contract.manifest import input_schema
    from mnoted.contract.tools import TOOLS
    from mnoted.integrations.tooling import agent_schema

    for spec in TOOLS.values():
        for schema in (agent_schema(spec), input_schema(spec)):
            props = dict(schema["properties"])
            for name, model in schema.get("$defs", {}).items():
                props.update({f"{name}.{k}": v for k, v in model.get("properties", {}).items()})
            for name, prop in props.items():
                assert prop.get("description"), f"{spec.name}: {name} has no description"
                assert "seed" not in prop["description"].lower(), (spec.name, name)


def test_the_cli_shortcuts_default_as_the_tools_do() -> None:
    from mnoted.cli.parser import parser
    from mnoted.contract.tools import DocFetchArgs, PageSaveArgs

    save = parser().parse_args(["page", "save", "x.md", "--markdown", "text"])
    assert save.mode == PageSaveArgs.model_fields["mode"].default == "replace"
    fetch = parser().parse_args(["page", "fetch", "x.md"])
    fields = DocFetchArgs.model_fields
    assert (fetch.scope, fetch.format) == (fields["scope"].default, fields["format"].default)
