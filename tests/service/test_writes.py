"""Writes end to end: dry runs, idempotency across restarts, conflicts, rebases, scopes."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnoted.contract.tools import TOOLS
from tests.service.conftest import PLAN, Harness

pytestmark = pytest.mark.twin

WRITE_ARGS = {
    "mnote.page.save": {"content": ["x"], "mode": "replace"},
    "mnote.page.update_title": {"title": "T"},
    "mnote.page.update_options": {"options": {"wideLayout": True}},
    "mnote.artifact.create_summary": {"summary": "s"},
    "mnote.artifact.create_ai_note": {"content": "c"},
    "mnote.doc.markdown_edit": {"operations": [{"search": "Monday", "replace": "Friday"}]},
    "mnote.doc.apply_block_ops": {
        "operations": [{"command": "insert_block_after", "block": "New."}]
    },
    "mnote.page.create": {"path": "notes/new.md", "content": "n"},
    "mnote.page.delete": {},
    "mnote.page.move": {"newPath": "notes/moved.md"},
    "mnote.file.grant": {},
    "mnote.doc.plan_update": {"operations": [{"search": "Monday", "replace": "Friday"}]},
}
# Review decisions need a session first; tests/service/test_review.py dry-runs them.
REVIEW_DECISIONS = {
    "mnote.review.accept",
    "mnote.review.reject",
    "mnote.review.retry",
    "mnote.review.abort",
}


def sidecar_dump(h: Harness) -> list[str]:
    con = sqlite3.connect(h.ws.state_dir / "state.sqlite3")
    try:
        return list(con.iterdump())
    finally:
        con.close()


@pytest.mark.git  # (the database file, the Git index and git status)
@pytest.mark.parametrize("tool", sorted(WRITE_ARGS))
def test_dry_run_writes_nothing(h: Harness, tool: str) -> None:
    doc = h.doc("notes/plan.md")
    h.call("mnote.page.get", documentId=doc)
    head, files, state = h.head(), sorted(p.name for p in h.root.rglob("*.md")), sidecar_dump(h)
    resp = h.write(tool, documentId=doc, dryRun=True, args=WRITE_ARGS[tool])
    assert resp["ok"], resp["error"]
    if tool != "mnote.doc.plan_update":  # a proposal's dry run shows the session it would make
        assert resp["result"]["dryRun"] is True
        assert resp["audit"]["effect"] == "dry_run"
    assert resp["audit"]["commandId"] is None
    assert h.head() == head
    assert (h.root / "notes/plan.md").read_text() == PLAN
    assert sorted(p.name for p in h.root.rglob("*.md")) == files
    assert sidecar_dump(h) == state
    h.ws.idle()  # the daemon brings the Git index in step whenever it is idle
    assert h.git("status", "--porcelain") == ""


def test_every_write_tool_has_a_dry_run_case() -> None:
    covered = set(WRITE_ARGS) | {"mnote.file.release"} | REVIEW_DECISIONS
    assert covered == {n for n, s in TOOLS.items() if s.writes}


@pytest.mark.git  # (commit trailers, read with git log)
def test_idempotent_replay_survives_a_restart(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    first = h.write(
        "mnote.page.save",
        documentId=doc,
        idempotencyKey="idem_restart",
        content=["Again?"],
        mode="append",
    )
    assert first["ok"]
    h.reopen()
    again = h.write(
        "mnote.page.save",
        documentId=doc,
        idempotencyKey="idem_restart",
        content=["Again?"],
        mode="append",
    )
    assert again["ok"] and again["audit"]["replayed"] is True
    assert again["result"] == first["result"]
    assert again["audit"]["commandId"] == first["audit"]["commandId"]
    assert (h.root / "notes/plan.md").read_text().count("Again?") == 1
    key_commits = h.git("log", "--format=%(trailers:key=Mnote-Idempotency-Key,valueonly)").split()
    assert key_commits.count("idem_restart") == 1
    other = h.write(
        "mnote.page.save",
        documentId=doc,
        idempotencyKey="idem_restart",
        content=["No"],
        mode="append",
    )
    assert other["error"]["code"] == "mnote_tool_idempotency_conflict"


def test_stale_base_on_other_blocks_is_rebased(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    base = h.call("mnote.page.get", documentId=doc)["result"]["revision"]
    h.write_file("notes/plan.md", PLAN.replace("Budget risk is high.", "Budget risk is low."))
    resp = h.write(
        "mnote.doc.markdown_edit",
        documentId=doc,
        baseRevision=base,
        args={"operations": [{"search": "Monday", "replace": "Friday"}]},
    )
    assert resp["ok"], resp["error"]
    assert resp["result"]["rebased"] is True and resp["audit"]["rebased"] is True
    text = (h.root / "notes/plan.md").read_text()
    assert "Friday" in text and "Budget risk is low." in text


def test_stale_base_on_the_same_block_is_a_conflict(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    base = h.call("mnote.page.get", documentId=doc)["result"]["revision"]
    h.write_file(
        "notes/plan.md", PLAN.replace("Ship the beta on Monday.", "Ship the beta on Monday, maybe.")
    )
    head = h.head()
    resp = h.write(
        "mnote.doc.markdown_edit",
        documentId=doc,
        baseRevision=base,
        args={"operations": [{"search": "Monday", "replace": "Friday"}]},
    )
    assert resp["error"]["code"] == "mnote_tool_conflict"
    assert resp["error"]["details"]["currentRevision"] == head
    assert "maybe" in (h.root / "notes/plan.md").read_text()


def test_a_refused_stale_write_leaves_the_ids_carried_from_the_newest(h: Harness) -> None:
    """A write whose base revision nobody read reads that version's page to compare (its
    ids carried from the newest, which would make it the newest if kept); refused, it
    leaves nothing: the next version's ids still come from the newest one, so a block
    keeps the id agents were given."""
    first = "# T\n\nalpha beta gamma delta\n\nOther words here.\n"
    h.write_file("notes/ids.md", first)
    doc = h.doc("notes/ids.md")

    def block_ids() -> dict[str, str]:
        page = h.call("mnote.page.get", documentId=doc)["result"]
        return {b["text"]: b["id"] for b in page["blocks"]}

    kept = block_ids()["alpha beta gamma delta"]
    h.write_file("notes/ids.md", first.replace("alpha beta gamma delta", "zzz qqq www"))
    unread = h.head()  # a version nobody read
    h.write_file("notes/ids.md", first.replace("delta", "delta epsilon"))
    assert block_ids()["alpha beta gamma delta epsilon"] == kept  # carried from the first
    stale = h.write(  # its base is the unread version, and it changes that block: a conflict
        "mnote.doc.markdown_edit",
        documentId=doc,
        baseRevision=unread,
        args={"operations": [{"search": "epsilon", "replace": "eta"}]},
    )
    assert stale["error"]["code"] == "mnote_tool_conflict", stale
    h.write_file("notes/ids.md", first.replace("delta", "delta epsilon") + "\nA new line.\n")
    assert block_ids()["alpha beta gamma delta epsilon"] == kept


def test_a_long_pages_ids_at_every_revision_survive_a_restart(h: Harness) -> None:
    """A long page's id lists are kept as changes from one version to the next: each
    revision's ids read back the same after a restart, a stale write is rebased on them,
    and the sidecar grows by a change per write, not by the page's whole list."""
    text = "# Long\n\n" + "".join(f"Paragraph number {n} of the page.\n\n" for n in range(400))
    h.write_file("notes/long.md", text)
    doc = h.doc("notes/long.md")
    seen: dict[str, list[str]] = {}
    for n in range(0, 400, 10):
        page = h.call("mnote.page.get", documentId=doc)["result"]
        seen[page["revision"]] = [b["id"] for b in page["blocks"]]
        resp = h.write(
            "mnote.doc.markdown_edit",
            documentId=doc,
            baseRevision=page["revision"],
            args={"operations": [{"search": f"number {n} of", "replace": f"number {n} in"}]},
        )
        assert resp["ok"], resp["error"]
    stored = h.ws.block_ids.entry(h.ws.blob_id("notes/long.md"))
    assert stored.startswith("@")
    rows = h.ws._side.conn.execute("SELECT body FROM id_records")
    kept = [str(v) for (v,) in rows]
    assert sum(r.startswith("F ") for r in kept) == 2  # the first version's, the 32nd change
    whole = len("\n".join(next(iter(seen.values()))))
    assert sum(len(r) for r in kept) < 2 * whole + 38 * 100  # whole, it took 40 * whole
    h.reopen()
    ref = h.ws.resolve(doc)
    for revision, ids in seen.items():
        assert h.service.pages.at_revision(h.ws, ref, revision).block_ids() == ids
    old = list(seen)[3]  # paragraph 3 changed since; 399 did not
    resp = h.write(
        "mnote.doc.markdown_edit",
        documentId=doc,
        baseRevision=old,
        args={"operations": [{"search": "number 399 of", "replace": "number 399 in"}]},
    )
    assert resp["ok"] and resp["result"]["rebased"], resp


@pytest.mark.git  # (commit trailers, read with git log)
def test_external_edit_is_committed_before_a_write_never_overwritten(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    (h.root / "notes/plan.md").write_text(PLAN + "\nTyped in vim, not yet committed.\n")
    resp = h.write("mnote.page.save", documentId=doc, content=["Agent line."], mode="append")
    assert resp["ok"]
    text = (h.root / "notes/plan.md").read_text()
    assert "Typed in vim" in text and text.endswith("Agent line.\n")
    actors = h.git("log", "-2", "--format=%(trailers:key=Mnote-Actor,valueonly)").split()
    assert actors == ["owner", "external"]


@pytest.mark.git  # (the commit count, read with git)
def test_block_ops_outside_allowed_targets_write_nothing(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    page = h.call("mnote.page.get", documentId=doc)["result"]
    by_text = {b["text"]: b["id"] for b in page["blocks"]}
    allowed = [by_text["Ship the beta on Monday."]]
    head = h.head()
    resp = h.write(
        "mnote.doc.apply_block_ops",
        documentId=doc,
        args={
            "allowedTargetBlockIds": allowed,
            "operations": [
                {
                    "command": "replace_block",
                    "block_id": allowed[0],
                    "block": {"type": "paragraph", "text": "OK"},
                },
                {"command": "delete_block", "block_id": by_text["Budget risk is high."]},
            ],
        },
    )
    assert resp["error"]["code"] == "mnote_block_target_out_of_scope"
    assert h.head() == head and (h.root / "notes/plan.md").read_text() == PLAN
    ok = h.write(
        "mnote.doc.apply_block_ops",
        documentId=doc,
        args={
            "allowedTargetBlockIds": allowed,
            "operations": [
                {
                    "command": "replace_block",
                    "block_id": allowed[0],
                    "block": {"type": "paragraph", "text": "OK"},
                },
                {"command": "insert_block_after", "after_block_id": allowed[0], "block": "Next."},
            ],
        },
    )
    assert ok["ok"], ok["error"]
    assert h.git("rev-list", "--count", f"{head}..HEAD").strip() == "1"
    after = {
        b["text"]: b["id"] for b in h.call("mnote.page.get", documentId=doc)["result"]["blocks"]
    }
    assert after["OK"] == allowed[0]
    assert after["Budget risk is high."] == by_text["Budget risk is high."]


def test_markdown_edit_out_of_scope(h: Harness) -> None:
    doc = h.doc("notes/plan.md")
    blocks = h.call("mnote.page.get", documentId=doc)["result"]["blocks"]
    para = next(b["id"] for b in blocks if b["text"].startswith("Ship"))
    resp = h.write(
        "mnote.doc.markdown_edit",
        documentId=doc,
        args={
            "allowedTargetBlockIds": [para],
            "operations": [{"search": "high", "replace": "low"}],
        },
    )
    assert resp["error"]["code"] == "mnote_block_target_out_of_scope"


@pytest.mark.git  # (git log --follow finds the rename)
def test_page_lifecycle_keeps_the_document_id(h: Harness) -> None:
    created = h.write(
        "mnote.page.create", args={"path": "notes/new.md", "content": "Body.", "title": "New page"}
    )
    assert created["ok"], created["error"]
    doc = created["result"]["documentId"]
    assert (h.root / "notes/new.md").read_text() == "# New page\n\nBody.\n"
    dup = h.write("mnote.page.create", args={"path": "notes/new.md", "content": "again"})
    assert dup["error"]["code"] == "mnote_tool_invalid_arguments"
    moved = h.write("mnote.page.move", documentId=doc, newPath="archive/new.md")
    assert moved["ok"], moved["error"]
    assert h.call("mnote.page.get", documentId=doc)["result"]["path"] == "archive/new.md"
    assert "archive/new.md" in h.git(
        "log", "--follow", "--name-only", "--format=", "--", "archive/new.md"
    )
    assert "notes/new.md" in h.git(
        "log", "--follow", "--name-only", "--format=", "--", "archive/new.md"
    )
    history = h.call("mnote.doc.history", documentId=doc)["result"]["commits"]
    assert [c["subject"].split(":")[0] for c in history] == ["page.move", "page.create"]
    assert history[0]["traceId"] == moved["traceId"]
    deleted = h.write("mnote.page.delete", documentId=doc)
    assert deleted["ok"] and not (h.root / "archive/new.md").exists()
    assert h.call("mnote.page.get", documentId=doc)["error"]["code"] == "mnote_tool_not_found"


@pytest.mark.git  # (commits made with git)
def test_history_names_the_subject_time_and_author_of_commits_made_with_git(h: Harness) -> None:
    # Commits made outside mnoted (the user's own `git commit`, or a repository's history
    # from before mnoted) came back with an empty subject and time 0.
    path = h.root / "notes/plan.md"
    path.write_text(path.read_text() + "\nTypo fixed by hand.\n")
    h.git("add", "notes/plan.md")
    h.git("commit", "-qm", "Fix a typo\n\nMore words.", "--author=Ann Editor <ann@example.invalid>")
    edited = h.write(
        "mnote.doc.markdown_edit",
        path="notes/plan.md",
        args={"operations": [{"search": "Typo fixed by hand.", "replace": "Typo fixed."}]},
    )
    assert edited["ok"], edited["error"]
    commits = h.call("mnote.doc.history", path="notes/plan.md")["result"]["commits"]
    by_hand = commits[1]
    assert by_hand["commit"] == h.git("rev-parse", "HEAD~1").strip()
    assert by_hand["subject"] == "Fix a typo"
    assert by_hand["author"] == "Ann Editor"
    assert by_hand["actor"] is None and by_hand["commandId"] is None
    assert by_hand["time"] == int(h.git("log", "-1", "--format=%ct", "HEAD~1"))
    assert commits[0]["commandId"] == edited["audit"]["commandId"]
    assert commits[0]["subject"].startswith("doc.markdownEdit")
    assert all(c["subject"] and c["time"] > 0 and c["author"] for c in commits)


@pytest.mark.parametrize(
    "bad", ["../escape.md", "/etc/passwd.md", ".git/hooks/x.md", ".mnote/x.md", "notes/x.txt"]
)
def test_page_create_refuses_bad_paths(h: Harness, bad: str) -> None:
    resp = h.write("mnote.page.create", args={"path": bad, "content": "x"})
    assert resp["ok"] is False
    assert resp["error"]["code"] in ("mnote_path_rejected", "mnote_tool_invalid_arguments")


def test_workspace_list_filters(h: Harness) -> None:
    agent = h.agent(grants=("notes/**",))
    pages = h.call("mnote.workspace.list", agent)["result"]["pages"]
    assert [p["path"] for p in pages] == ["notes/plan.md"]
    assert pages[0]["title"] == "Project plan"
    owner_pages = h.call("mnote.workspace.list", args={"query": "salary"})["result"]["pages"]
    assert [p["path"] for p in owner_pages] == ["private/secret.md"]


@pytest.mark.git  # (git status and the commit's author)
def test_file_grant_and_release(h: Harness) -> None:
    agent = h.agent("reasonix")
    doc = h.doc("notes/plan.md")
    grant = h.write("mnote.file.grant", agent, documentId=doc)["result"]
    path = h.root / ".mnote/grants" / grant["grantId"] / "plan.md"
    assert grant["absolutePath"] == str(path) and path.read_text() == PLAN
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    path.write_text(PLAN.replace("Monday", "Tuesday"))
    assert h.git("status", "--porcelain", "--", ".mnote") == ""  # (the copy is no edit)
    released = h.write("mnote.file.release", agent, documentId=doc, grantId=grant["grantId"])
    assert released["ok"], released["error"]
    assert len(released["result"]["changedBlockIds"]) == 1
    assert (
        h.git("log", "-1", "--format=%an|%(trailers:key=Mnote-Actor,valueonly)").strip()
        == "reasonix|reasonix"
    )
    assert (h.root / "notes/plan.md").read_text() == PLAN.replace("Monday", "Tuesday")
    assert not path.parent.exists()  # (a release that lands closes the grant)
    again = h.write("mnote.file.release", agent, documentId=doc, grantId=grant["grantId"])
    assert again["error"]["code"] == "mnote_tool_not_found"


def test_file_release_after_someone_else_committed_is_a_conflict(h: Harness) -> None:
    agent = h.agent("reasonix")
    doc = h.doc("notes/plan.md")
    grant = h.write("mnote.file.grant", agent, documentId=doc)["result"]
    h.write(
        "mnote.doc.markdown_edit",
        documentId=doc,
        args={"operations": [{"search": "high", "replace": "low"}]},
    )
    copy = h.root / ".mnote/grants" / grant["grantId"] / "plan.md"
    copy.write_text(PLAN.replace("Budget risk is high.", "Budget risk is unknown."))
    head = h.head()
    resp = h.write("mnote.file.release", agent, documentId=doc, grantId=grant["grantId"])
    assert resp["error"]["code"] == "mnote_tool_conflict"
    assert h.head() == head and copy.exists()  # (nothing written, the copy kept)


@pytest.mark.git  # (commit trailers, read with git log)
def test_file_release_merges_the_agents_blocks_with_the_persons(h: Harness) -> None:
    agent = h.agent("reasonix")
    doc = h.doc("notes/plan.md")
    grant = h.write("mnote.file.grant", agent, documentId=doc)["result"]
    copy = h.root / ".mnote/grants" / grant["grantId"] / "plan.md"
    copy.write_text(PLAN.replace("Ship the beta on Monday.", "Ship the beta on Friday."))
    # meanwhile the person edits the page itself in an editor: their edit stays theirs
    (h.root / "notes/plan.md").write_text(PLAN.replace("high", "low"))
    resp = h.write("mnote.file.release", agent, documentId=doc, grantId=grant["grantId"])
    assert resp["ok"], resp["error"]
    assert resp["result"]["merged"] is True
    text = (h.root / "notes/plan.md").read_text()
    assert "Friday" in text and "Budget risk is low." in text
    log = h.git("log", "-2", "--format=%(trailers:key=Mnote-Actor,valueonly,separator=)|%s")
    log = log.split("\n")
    assert log[0].startswith("reasonix|") and log[1].startswith("external|"), log


envelope_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=8),
    st.lists(st.text(max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "toolName",
                "workspaceId",
                "documentId",
                "sessionId",
                "runId",
                "toolCallId",
                "traceId",
                "idempotencyKey",
                "dryRun",
                "args",
                "content",
                "capabilityScope",
                "mode",
                "bogus",
            ]
        ),
        envelope_values,
        max_size=10,
    ),
    st.sampled_from([*sorted(TOOLS), "mnote.nope", ""]),
)
def test_malformed_envelopes_get_structured_errors(h: Harness, fields: dict, tool: str) -> None:
    raw = {"toolName": tool, **fields}
    resp = h.service.call(raw, h.owner)
    assert set(resp) == {"ok", "toolName", "toolCallId", "traceId", "result", "audit", "error"}
    if not resp["ok"]:
        assert resp["error"]["code"].startswith("mnote_") and resp["error"]["message"]
        assert resp["error"]["code"] != "mnote_internal_error", resp["error"]


def test_non_object_requests(h: Harness) -> None:
    for raw in ([], "x", 3, None):
        resp = h.service.call(raw, h.owner)  # type: ignore[arg-type]
        assert resp["error"]["code"] == "mnote_tool_invalid_arguments"


@pytest.mark.git  # (commit trailers, read with git log)
def test_a_page_saved_a_moment_ago_is_found_before_the_watcher_commits_it(h: Harness) -> None:
    (h.root / "notes" / "fresh.md").write_text("# Fresh\n\nJust saved.\n")
    resp = h.call("mnote.page.get", documentId="notes/fresh.md")
    assert resp["ok"] and resp["result"]["title"] == "Fresh"
    assert (
        h.git("log", "-1", "--format=%(trailers:key=Mnote-Actor,valueonly,separator=)").strip()
        == "external"
    )
    assert (
        h.call("mnote.page.get", documentId="notes/missing.md")["error"]["code"]
        == "mnote_tool_not_found"
    )


def test_a_missing_field_is_named_with_a_hint_about_that_field(h: Harness) -> None:
    no_page = h.write("mnote.file.release", args={"grantId": "grant_x"})["error"]
    assert no_page["code"] == "mnote_tool_invalid_arguments"
    assert no_page["details"]["missing"] == ["documentId"]
    assert "documentId" in no_page["hint"] and "idempotencyKey" not in no_page["hint"]
    no_key = h.call("mnote.doc.markdown_edit", documentId="notes/plan.md", args={})["error"]
    assert set(no_key["details"]["missing"]) == {"idempotencyKey", "dryRun"}
    assert "idempotencyKey" in no_key["hint"]


@pytest.mark.parametrize(
    ("tool", "args", "dry", "effect"),
    [
        ("mnote.doc.markdown_edit", WRITE_ARGS["mnote.doc.markdown_edit"], False, "write"),
        ("mnote.page.save", {"content": ["Later."], "mode": "append"}, False, "none"),  # held
        ("mnote.doc.markdown_edit", WRITE_ARGS["mnote.doc.markdown_edit"], True, "dry_run"),
    ],
)
def test_a_write_works_out_each_fact_once(
    h: Harness, monkeypatch: pytest.MonkeyPatch, tool: str, args: dict, dry: bool, effect: str
) -> None:
    """The write path visits each step once: the block diff (answer, preview, a review
    session share it), the grant decision per path, the approval rule, the call's header
    (its audit, its trailers, a session's request)."""
    from mnoted.service import calls, provenance, visibility

    counts: dict[str, int] = {}

    def counting(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapped(*a, **k):  # type: ignore[no-untyped-def]
            counts[name] = counts.get(name, 0) + 1
            return fn(*a, **k)

        return wrapped

    monkeypatch.setattr(calls, "block_diff", counting("diff", calls.block_diff))
    monkeypatch.setattr(calls, "held_for_approval", counting("approval", calls.held_for_approval))
    monkeypatch.setattr(visibility, "may_see", counting("grant", visibility.may_see))
    monkeypatch.setattr(provenance, "header", counting("header", provenance.header))
    agent = h.agent("hermes", grants=("notes/**",))
    resp = h.write(tool, agent, documentId=h.doc("notes/plan.md"), dryRun=dry, args=args)
    assert resp["ok"], resp["error"]
    assert resp["audit"]["effect"] == effect
    assert counts == {"diff": 1, "approval": 1, "grant": 1, "header": 1}, counts
    if dry:  # the draft a review would hold shows the answer's own preview
        draft = resp["result"]["reviewSession"]["preview"]
        assert draft["changedBlocks"] == resp["result"]["changedBlocks"]
