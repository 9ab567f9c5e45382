"""Records past their time go (`mnoted.host.retention`); what is still open stays, and a
late retry of a write is still recognized.

On the real store: the commits a late retry did not make are counted with ``git``, and the
daemon's workspace thread runs on a Workspace it opens."""

from __future__ import annotations

import time
from pathlib import Path

from mnoted.host.retention import DAY, SESSION_DAYS, forget_old
from mnoted.host.runner import RunnerConfig, WorkspaceRunner
from mnoted.service import Actor, Service
from mnoted.store import Workspace
from tests.service.conftest import Harness
from tests.service.test_review import propose_save

EDIT = {"operations": [{"search": "Ship the beta", "replace": "Ship the release"}]}


def test_old_answers_finished_sessions_and_contexts_go_open_proposals_stay(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    first = h.write("mnote.doc.markdown_edit", idempotencyKey="edit_1", documentId=doc, args=EDIT)
    assert first["ok"], first["error"]
    proposal = propose_save(h, h.agent("hermes"))["result"]
    refused = propose_save(h, h.agent("hermes"), "Refused.")["result"]
    rejected = h.write("mnote.review.reject", args={"sessionId": refused["sessionId"]})
    assert rejected["ok"] and rejected["result"]["state"] == "rejected", rejected
    context = h.call("mnote.page_ai.context", documentId=doc, runId="run_ctx", args={})
    assert context["ok"], context["error"]
    assert forget_old(h.service, h.ws) == 0  # nothing is old yet
    kept = h.write("mnote.doc.markdown_edit", idempotencyKey="edit_1", documentId=doc, args=EDIT)
    assert kept["audit"]["replayed"] and kept["result"] == first["result"]

    month = time.time() + (SESSION_DAYS + 1) * DAY
    h.service.clock = lambda: month
    assert forget_old(h.service, h.ws) == 3  # the answer, the rejected session, the context
    commits = h.git("rev-list", "--count", "HEAD")
    late = h.write("mnote.doc.markdown_edit", idempotencyKey="edit_1", documentId=doc, args=EDIT)
    assert late["ok"] and late["audit"]["replayed"]
    assert late["result"]["revision"] == first["result"]["revision"]
    assert late["audit"]["commandId"] == first["audit"]["commandId"]
    assert "applied before" in late["result"]["warnings"][0]
    assert h.git("rev-list", "--count", "HEAD") == commits  # nothing written again
    listed = h.call("mnote.review.list", args={})["result"]["sessions"]
    assert [(s["sessionId"], s["state"]) for s in listed] == [
        (proposal["sessionId"], "awaiting_user")
    ]
    accepted = h.write("mnote.review.accept", args={"sessionId": proposal["sessionId"]})
    assert accepted["ok"], accepted["error"]  # an open proposal is as good as new


def test_the_daemons_workspace_thread_forgets_in_idle_time(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    (root / "plan.md").write_text("# Plan\n\nShip the beta on Monday.\n")
    service = Service()
    r = WorkspaceRunner(root, service, RunnerConfig(watch=False, forget_every=0.0))
    r.start()
    try:
        edit = {
            "toolName": "mnote.doc.markdown_edit",
            "documentId": "plan.md",
            "sessionId": "s",
            "runId": "r",
            "toolCallId": "c",
            "traceId": "t",
            "idempotencyKey": "edit_1",
            "dryRun": False,
            "args": EDIT,
        }
        first = r.call(edit, Actor.owner())
        assert first["ok"], first["error"]
        assert "diff" in r.call(edit, Actor.owner())["result"]  # the kept answer
        later = time.time() + (SESSION_DAYS + 1) * DAY
        service.clock = lambda: later
        deadline = time.monotonic() + 10
        while "diff" in r.call(edit, Actor.owner())["result"]:
            assert time.monotonic() < deadline, "the old answer was never dropped"
            # idle for longer than `idle_after` (0.05 s): a call every 0.05 s could come
            # before the runner's wait for the next one ran out, every time, on a busy machine
            time.sleep(0.25)
    finally:
        r.stop()
