"""Review sessions and frozen contexts (seed 003 §5.1, §5.5), end to end through the executor."""

from __future__ import annotations

import pytest

from tests.service.conftest import PLAN, Harness

pytestmark = pytest.mark.twin


def set_mode(h: Harness, mode: str) -> None:
    config = h.root / ".mnote" / "config.toml"
    text = config.read_text()
    config.write_text(text.replace('approvalMode = "review"', f'approvalMode = "{mode}"'))
    h.ws.commit_external([".mnote/config.toml"])
    h.reopen()
    assert h.ws.config.approval_mode == mode


def propose_save(h: Harness, agent, text: str = "Proposed.") -> dict:
    resp = h.write(
        "mnote.page.save", agent, documentId=h.doc("notes/plan.md"), content=[text], mode="append"
    )
    assert resp["ok"], resp["error"]
    return resp


@pytest.mark.git  # (commit trailers and count, read with git)
def test_agent_write_needing_approval_waits_for_a_person(h: Harness) -> None:
    agent = h.agent("hermes")
    head = h.head()
    events: list[dict] = []
    h.service.events.subscribe(events.append)
    resp = propose_save(h, agent)
    session = resp["result"]
    assert session["schema"] == "mnote.page_ai_review_session.v1"
    assert session["state"] == "awaiting_user" and resp["audit"]["effect"] == "none"
    assert h.head() == head and (h.root / "notes/plan.md").read_text() == PLAN
    assert session["base"]["revision"] == h.ws.revision_of("notes/plan.md")
    assert session["preview"]["changedBlocks"][0]["after"] == "Proposed."
    assert "+Proposed." in session["preview"]["unifiedDiff"]
    assert session["actions"]["accept"]["allowed"] is True
    assert [e["state"] for e in events if e["type"] == "review"] == [
        "planning",
        "previewing",
        "awaiting_user",
    ]

    accepted = h.write(
        "mnote.review.accept", idempotencyKey="accept_1", args={"sessionId": session["sessionId"]}
    )
    assert accepted["ok"], accepted["error"]
    assert accepted["result"]["state"] == "applied" and accepted["audit"]["effect"] == "write"
    assert (h.root / "notes/plan.md").read_text().endswith("Proposed.\n")
    trailers = h.git(
        "log",
        "-1",
        "--format=%an|%(trailers:key=Mnote-Review-Session,valueonly,separator=)|"
        "%(trailers:key=Mnote-Accepted-By,valueonly,separator=)|%(trailers:key=Mnote-Tool-Call-Id,valueonly,separator=)|"
        "%(trailers:key=Mnote-Tool,valueonly,separator=)",
    ).strip()
    assert (
        trailers == f"hermes|{session['sessionId']}|owner|{session['toolCallId']}|mnote.page.save"
    )
    assert h.git("rev-list", "--count", f"{head}..HEAD").strip() == "1"
    again = h.write(
        "mnote.review.accept", idempotencyKey="accept_1", args={"sessionId": session["sessionId"]}
    )
    assert again["ok"] and again["audit"]["replayed"] is True
    assert h.git("rev-list", "--count", f"{head}..HEAD").strip() == "1"
    other = h.write("mnote.review.accept", args={"sessionId": session["sessionId"]})
    assert other["error"]["code"] == "mnote_review_invalid_transition"


def test_accept_after_the_page_changed_goes_stale_then_retry(h: Harness) -> None:
    agent = h.agent("hermes")
    session = propose_save(h, agent)["result"]
    h.write_file("notes/plan.md", PLAN.replace("Budget risk is high.", "Budget risk is low."))
    head = h.head()
    resp = h.write("mnote.review.accept", args={"sessionId": session["sessionId"]})
    assert resp["error"]["code"] == "mnote_review_stale" and resp["audit"]["effect"] == "none"
    assert h.head() == head
    kept = h.call("mnote.review.get", args={"sessionId": session["sessionId"]})
    assert kept["result"]["state"] == "stale"
    same_call = h.write(
        "mnote.review.retry",
        agent,
        toolCallId=session["toolCallId"],
        args={"sessionId": session["sessionId"]},
    )
    assert same_call["error"]["code"] == "mnote_tool_invalid_arguments"
    retried = h.write("mnote.review.retry", agent, args={"sessionId": session["sessionId"]})
    assert retried["result"]["state"] == "awaiting_user"
    assert retried["result"]["base"]["revision"] == head
    done = h.write("mnote.review.accept", args={"sessionId": session["sessionId"]})
    assert done["result"]["state"] == "applied"
    text = (h.root / "notes/plan.md").read_text()
    assert "Budget risk is low." in text and text.endswith("Proposed.\n")


def test_reject_and_abort_never_write_and_transitions_are_checked(h: Harness) -> None:
    agent = h.agent("hermes")
    head = h.head()
    first = propose_save(h, agent)["result"]
    dry = h.write("mnote.review.reject", dryRun=True, args={"sessionId": first["sessionId"]})
    assert dry["result"]["nextState"] == "rejected"
    assert (
        h.call("mnote.review.get", args={"sessionId": first["sessionId"]})["result"]["state"]
        == "awaiting_user"
    )
    rejected = h.write(
        "mnote.review.reject", args={"sessionId": first["sessionId"], "reason": "not now"}
    )
    assert rejected["result"]["state"] == "rejected"
    second = propose_save(h, agent, "Another.")["result"]
    by_agent = h.write("mnote.review.accept", agent, args={"sessionId": second["sessionId"]})
    assert by_agent["error"]["code"] == "mnote_tool_permission_denied"
    aborted = h.write("mnote.review.abort", agent, args={"sessionId": second["sessionId"]})
    assert aborted["result"]["state"] == "aborted"
    for sid in (first["sessionId"], second["sessionId"]):
        late = h.write("mnote.review.accept", args={"sessionId": sid})
        assert late["error"]["code"] == "mnote_review_invalid_transition"
        assert late["error"]["details"]["allowed"] == []
    assert h.head() == head and (h.root / "notes/plan.md").read_text() == PLAN


def test_sessions_survive_a_restart_and_are_never_applied_by_it(h: Harness) -> None:
    agent = h.agent("hermes")
    session = propose_save(h, agent)["result"]
    head = h.head()
    h.reopen()
    got = h.call("mnote.review.get", args={"sessionId": session["sessionId"]})["result"]
    assert got["state"] == "awaiting_user" and h.head() == head
    listed = h.call("mnote.review.list", args={"states": ["awaiting_user"]})["result"]["sessions"]
    assert [s["sessionId"] for s in listed] == [session["sessionId"]]


def test_plan_update_blocked_outside_the_selection(h: Harness) -> None:
    agent = h.agent("hermes")
    doc = h.doc("notes/plan.md")
    blocks = h.call("mnote.page.get", documentId=doc)["result"]["blocks"]
    para = next(b["id"] for b in blocks if b["text"].startswith("Ship"))
    resp = h.write(
        "mnote.doc.plan_update",
        agent,
        documentId=doc,
        args={
            "operations": [{"search": "high", "replace": "low"}],
            "allowedTargetBlockIds": [para],
        },
    )
    session = resp["result"]
    assert (
        session["preview"]["blocked"] is True and session["actions"]["accept"]["allowed"] is False
    )
    refused = h.write("mnote.review.accept", args={"sessionId": session["sessionId"]})
    assert refused["error"]["code"] == "mnote_block_target_out_of_scope"
    ok = h.write(
        "mnote.doc.plan_update",
        agent,
        documentId=doc,
        args={
            "operations": [{"search": "Monday", "replace": "Friday"}],
            "allowedTargetBlockIds": [para],
        },
    )
    assert ok["result"]["preview"]["blocked"] is False
    assert ok["result"]["proposal"]["operations"] == [
        {"op": "replace", "search": "Monday", "replace": "Friday"}
    ]
    accepted = h.write("mnote.review.accept", args={"sessionId": ok["result"]["sessionId"]})
    assert accepted["result"]["state"] == "applied"
    assert "Friday" in (h.root / "notes/plan.md").read_text()


def test_a_proposal_that_cannot_be_planned_names_its_page(h: Harness) -> None:
    """A proposal whose search matched nothing was kept as failed with no page: `mnote
    review show` said it was made "on None", and a listing by page left it out."""
    doc = h.doc("notes/plan.md")
    resp = h.write(
        "mnote.doc.plan_update",
        h.agent("hermes"),
        documentId=doc,
        args={"operations": [{"search": "not in the page", "replace": "x"}]},
    )
    session = resp["result"]
    assert session["state"] == "failed", session
    assert session["documentId"] == doc and session["path"] == "notes/plan.md", session
    listed = h.call("mnote.review.list", documentId=doc)["result"]["sessions"]
    assert session["sessionId"] in [s["sessionId"] for s in listed]


def test_plan_update_full_content_and_block_ops(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    full = h.write(
        "mnote.doc.plan_update", documentId=doc, args={"fullContent": "# New\n\nAll new.\n"}
    )
    assert full["result"]["source"]["toolName"] == "mnote.page.save"
    assert full["result"]["preview"]["risk"] == "high"
    ops = h.write(
        "mnote.doc.plan_update",
        documentId=doc,
        args={"blockOps": [{"command": "insert_block_after", "block": "First."}]},
    )
    assert ops["result"]["source"]["toolName"] == "mnote.doc.apply_block_ops"
    both = h.write(
        "mnote.doc.plan_update",
        documentId=doc,
        args={"fullContent": "x", "operations": [{"search": "Monday", "replace": "x"}]},
    )
    assert both["error"]["code"] == "mnote_tool_invalid_arguments"


@pytest.mark.git  # (the commit message, read with git log)
def test_a_direct_write_answers_with_its_preview_and_leaves_no_session(h: Harness) -> None:
    """Seed 003 §5.5: yolo skips the wait, not the review-compatible data: the answer
    carries the preview's fields, and the commit's trailers are its record."""
    set_mode(h, "yolo")
    agent = h.agent("hermes")
    resp = propose_save(h, agent)
    assert resp["audit"]["effect"] == "write"
    result = resp["result"]
    assert (result["risk"], result["blocked"], result["warnings"]) == ("low", False, [])
    [block] = result["changedBlocks"]  # (as previewed: on the page's revision before it)
    assert block["revisionRef"].endswith(f":{block['blockId']}")
    assert {k: v for k, v in block.items() if k != "revisionRef"} == result["diff"][0]
    assert h.call("mnote.review.list", args={})["result"]["sessions"] == []
    body = h.git("log", "-1", "--format=%B")
    assert f"Mnote-Tool-Call-Id: {resp['toolCallId']}" in body
    assert "Mnote-Review-Session" not in body


def test_a_page_created_is_answered_with_its_path_and_id(h: Harness) -> None:
    # (neither the answer's audit nor its event had the new page's id)
    events: list[dict] = []
    h.service.events.subscribe(events.append)
    resp = h.write("mnote.page.create", args={"path": "notes/new.md", "content": "Body."})
    assert resp["ok"], resp["error"]
    doc = resp["result"]["documentId"]
    assert resp["audit"]["documentId"] == doc
    assert [(e["documentId"], e["path"]) for e in events if e["type"] == "commit"] == [
        (doc, "notes/new.md")
    ]


def test_risk_is_what_the_proposal_does_not_the_tool_alone(h: Harness) -> None:
    agent = h.agent("hermes")
    doc = h.doc("notes/plan.md")
    appended = propose_save(h, agent)["result"]
    assert appended["preview"]["risk"] == "low"
    replaced = h.write(
        "mnote.page.save", agent, documentId=doc, content=["All new."], mode="replace"
    )["result"]
    assert any(c["op"] == "delete" for c in replaced["preview"]["changedBlocks"])
    assert replaced["preview"]["risk"] == "high"
    deleted = h.write("mnote.page.delete", agent, documentId=doc)["result"]
    assert deleted["preview"]["risk"] == "high"


def test_required_mode_holds_every_agent_write_but_not_the_owners(h: Harness) -> None:
    set_mode(h, "required")
    agent = h.agent("hermes")
    doc = h.doc("notes/plan.md")
    resp = h.write(
        "mnote.doc.markdown_edit",
        agent,
        documentId=doc,
        args={"operations": [{"search": "Monday", "replace": "Friday"}]},
    )
    assert resp["result"]["state"] == "awaiting_user"
    owner = h.write(
        "mnote.doc.markdown_edit",
        documentId=doc,
        args={"operations": [{"search": "Monday", "replace": "Sunday"}]},
    )
    assert owner["audit"]["effect"] == "write"


def test_context_is_frozen_for_its_run(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    blocks = h.call("mnote.page.get", documentId=doc)["result"]["blocks"]
    first, second = blocks[1]["id"], blocks[-1]["id"]
    ctx = h.call(
        "mnote.page_ai.context",
        documentId=doc,
        runId="run_ctx",
        args={"scope": "selection", "blockIds": [first]},
    )["result"]
    assert ctx["schema"] == "mnote.page_ai_context.v1"
    assert ctx["allowedTargetBlockIds"] == [first] and ctx["selectedBlockIds"] == [first]
    assert ctx["pageXml"].startswith("<page ") and ctx["pageText"]
    assert ctx["blocks"][0]["revisionRef"] == f"body:{ctx['revision']}:{first}"
    later = h.call(
        "mnote.page_ai.context",
        documentId=doc,
        runId="run_ctx",
        args={"scope": "selection", "blockIds": [second]},
    )["result"]
    assert later["allowedTargetBlockIds"] == [first] and later["frozen"] is True
    other_run = h.call(
        "mnote.page_ai.context",
        documentId=doc,
        runId="run_other",
        args={"scope": "selection", "blockIds": [second]},
    )["result"]
    assert other_run["allowedTargetBlockIds"] == [second]


def test_a_session_caught_mid_apply_is_settled_by_git_at_restart(h: Harness) -> None:
    from mnoted.service.review_sessions import store_of

    agent = h.agent("hermes")
    landed = propose_save(h, agent, "Landed.")["result"]
    lost = propose_save(h, agent, "Lost.")["result"]
    accepted = h.write("mnote.review.accept", args={"sessionId": landed["sessionId"]})["result"]
    store = store_of(h.service, h.ws)
    # As if the daemon died after committing (first) or before committing (second).
    stuck_landed = {**accepted, "state": "applying"}
    stuck_lost = {
        **store.get(lost["sessionId"]),
        "state": "applying",
        "pendingCommandId": "never_committed",
    }
    store.put(stuck_landed, 0.0)
    store.put(stuck_lost, 0.0)
    head = h.head()
    h.reopen()
    assert (
        h.call("mnote.review.get", args={"sessionId": landed["sessionId"]})["result"]["state"]
        == "applied"
    )
    failed = h.call("mnote.review.get", args={"sessionId": lost["sessionId"]})["result"]
    assert failed["state"] == "failed" and failed["error"]["code"] == "mnote_review_interrupted"
    assert h.head() == head and "Lost." not in (h.root / "notes/plan.md").read_text()


@pytest.mark.git  # (the writer's groups)
def test_sessions_are_settled_outside_a_group_so_no_rollback_undoes_it(h: Harness) -> None:
    """Settling interrupted sessions is no call's effect: asked for first inside a group's
    transaction (a grouped write reading its run's frozen context), the store waits for
    the next time it is asked outside one, and no rollback of the group undoes it."""
    from mnoted.service.review_sessions import store_of

    agent = h.agent("hermes")
    lost = propose_save(h, agent, "Lost.")["result"]
    store = store_of(h.service, h.ws)
    store.put({**store.get(lost["sessionId"]), "state": "applying"}, 0.0)
    h.reopen()
    with pytest.raises(RuntimeError), h.ws.group():
        assert store_of(h.service, h.ws).get(lost["sessionId"])["state"] == "applying"
        raise RuntimeError("the group does not land")
    assert not h.service.reviews_recovered
    assert store_of(h.service, h.ws).get(lost["sessionId"])["state"] == "failed"
    h.reopen()
    assert store_of(h.service, h.ws).get(lost["sessionId"])["state"] == "failed"


@pytest.mark.git  # (an ignore file)
def test_a_proposal_or_dry_run_the_write_would_refuse_is_refused_at_once(h: Harness) -> None:
    """A page an agent would create in an ignored folder is refused when proposed (it used to
    wait for a person, whose accept then failed) and in a dry run (which answered a diff)."""
    set_mode(h, "required")
    h.write_file(".gitignore", (h.root / ".gitignore").read_text() + "drafts/\n")
    head = h.head()
    agent = h.agent("hermes")
    args = {"path": "drafts/diary.md", "content": "Dear diary."}
    proposed = h.write("mnote.page.create", agent, args=args)
    assert proposed["error"]["code"] == "mnote_path_rejected", proposed
    listed = h.call("mnote.review.list", args={})
    assert listed["ok"] and listed["result"]["sessions"] == [], listed
    dry = h.write("mnote.page.create", args=args, dryRun=True)
    assert dry["error"]["code"] == "mnote_path_rejected", dry
    assert h.head() == head and not (h.root / "drafts").exists()
