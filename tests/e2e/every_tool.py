"""Every tool an agent runtime lists, called the way a model calls it: with only the fields
its schema shows. Shared by the MCP and the Hermes tests (standard library only: it also
runs inside Hermes's own environment).

``drive(call, schemas)`` calls each tool on pages it creates itself, the review tools on
review sessions it proposed itself, and returns each tool's answer (the daemon's response
envelope) by its model-safe name.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

Call = Callable[[str, dict[str, Any]], dict[str, Any]]


def _checked(schemas: dict[str, dict[str, Any]], name: str, arguments: dict[str, Any]) -> None:
    """A model sees the schema only: every field it sends is there, every required one sent."""
    schema = schemas[name]
    unknown = set(arguments) - set(schema.get("properties", {}))
    assert not unknown, f"{name}: {sorted(unknown)} not in its schema"
    missing = set(schema.get("required", [])) - set(arguments)
    assert not missing, f"{name}: required {sorted(missing)} not sent"


def drive(call: Call, schemas: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}

    def run(name: str, **arguments: Any) -> dict[str, Any]:
        if name not in schemas:  # not offered to this token: nothing to call
            return {}
        _checked(schemas, name, arguments)
        answer = call(name, arguments)
        assert isinstance(answer, dict), (name, answer)
        out.setdefault(name, answer)
        if not answer.get("ok"):
            out[name] = answer  # the first failure of a tool is the one reported
        return answer

    tag = uuid.uuid4().hex[:8]  # (a page of its own: the driver may run twice on a workspace)
    page, ideas, kept = f"agent/plan-{tag}.md", f"agent/ideas-{tag}.md", f"agent/kept-{tag}.md"
    run("mnote_page_create", path=page, content="# Plan\n\nShip on Monday.\n\n- one\n- two\n")
    run("mnote_workspace_list")
    got = run("mnote_page_get", documentId=page)
    block = got["result"]["blocks"][0]["id"]
    run("mnote_doc_fetch", documentId=page, scope="outline")
    run("mnote_block_fetch", documentId=page, blockId=block)
    run("mnote_page_ai_context", documentId=page)
    run("mnote_page_ai_route", documentId=page, instruction="Fix the typo in the title")
    run("mnote_doc_history", documentId=page)
    run("mnote_page_create", path=ideas, content="# Ideas\n\nA first idea.\n")
    run("mnote_page_save", documentId=ideas, content=["A second idea."], mode="append")
    run("mnote_page_update_title", documentId=ideas, title="Ideas worth keeping")
    run("mnote_page_update_options", documentId=ideas, options={"showToc": True})
    run("mnote_artifact_create_summary", documentId=page, summary="Ships on Monday.")
    run("mnote_artifact_create_ai_note", documentId=page, content="Consider Tuesday.")
    run(
        "mnote_doc_markdown_edit",
        documentId=page,
        operations=[{"search": "Monday", "replace": "Sunday"}],
    )
    run(
        "mnote_doc_apply_block_ops",
        documentId=page,
        operations=[{"command": "insert_block_after", "after_block_id": block, "block": "Added."}],
    )
    grant = run("mnote_file_grant", documentId=ideas)
    granted = Path(grant["result"]["absolutePath"])
    granted.write_text(granted.read_text(encoding="utf-8") + "\nA third idea.\n", "utf-8")
    run("mnote_file_release", documentId=ideas, grantId=grant["result"]["grantId"])
    run("mnote_page_move", documentId=ideas, newPath=kept)
    found = run("mnote_workspace_search", query="Sunday")
    assert page in [hit["path"] for hit in found["result"]["hits"]], found
    run("mnote_page_links", documentId=page)

    def propose(search: str, replace: str) -> str:
        made = run(
            "mnote_doc_plan_update",
            documentId=page,
            operations=[{"search": search, "replace": replace}],
            reason="clearer wording",
        )
        return str(made["result"]["reviewSessionId"])

    first = propose("- one", "- first")
    listed = run("mnote_review_list", documentId=page)
    sessions = listed["result"]["sessions"]
    assert first in [s["sessionId"] for s in sessions], listed
    assert {s["path"] for s in sessions} == {page}, listed
    review = run("mnote_review_get", sessionId=first)
    assert review["result"]["proposal"]["reason"] == "clearer wording", review
    run("mnote_review_retry", sessionId=first)
    if "mnote_review_accept" in schemas:
        run("mnote_review_accept", sessionId=first)
    else:
        run("mnote_review_abort", sessionId=first)
    second = propose("- two", "- second")
    if "mnote_review_reject" in schemas:
        run("mnote_review_reject", sessionId=second, reason="not now")
    else:
        run("mnote_review_abort", sessionId=second)
    third = propose("- two", "- 2")
    run("mnote_review_abort", sessionId=third)
    run("mnote_page_delete", documentId=kept)
    return out


def report(results: dict[str, dict[str, Any]], offered: list[str]) -> str:
    """``N/N usable``, and each tool that was not, with its error."""
    usable = [name for name in offered if results.get(name, {}).get("ok")]
    lines = [f"{len(usable)}/{len(offered)} usable"]
    for name in offered:
        if name not in usable:
            answer = results.get(name)
            lines.append(f"  {name}: {json.dumps(answer['error']) if answer else 'not called'}")
    return "\n".join(lines)
