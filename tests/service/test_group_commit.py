"""Group commit in the runner: calls that queue up land together, each its own commit.

On the real store: groups (several commits landed at once) are the store's writer's."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnoted.host.runner import RunnerConfig, WorkspaceRunner
from mnoted.service import Actor, Service
from mnoted.store import Workspace, faults
from tests.service.test_runner import git, wait_for

PAGES = 6
REVIEW_LIST = {  # a call outside the store: it never joins a group
    "toolName": "mnote.review.list",
    "sessionId": "s",
    "runId": "r",
    "toolCallId": "l",
    "traceId": "l",
}


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[WorkspaceRunner]:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    for k in range(PAGES):
        (root / f"p{k}.md").write_text(f"# Page {k}\n\nmarker A\n")
    r = WorkspaceRunner(root, Service(), RunnerConfig(watch=False))
    r.start()
    yield r
    r.stop()
    faults.disarm()


def edit(k: int, n: int, doc: str | None = None, **extra: Any) -> dict[str, Any]:
    a, b = ("marker A", "marker B") if n % 2 == 0 else ("marker B", "marker A")
    return {
        "toolName": "mnote.doc.markdown_edit",
        "documentId": doc or f"p{k}.md",
        "sessionId": "s",
        "runId": f"r{k}",
        "toolCallId": f"c{k}-{n}",
        "traceId": f"t{k}-{n}",
        "idempotencyKey": f"k{k}-{n}",
        "dryRun": False,
        "args": {"operations": [{"search": a, "replace": b}]},
        **extra,
    }


def queued_calls(r: WorkspaceRunner, raws: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hold the runner, queue every call from its own thread, in order, then let them all
    run."""
    gate = threading.Event()
    held = r.submit(gate.wait)
    wait_for(lambda: r._jobs.qsize() == 0)  # the runner holds the gate, the queue is empty
    answers: list[dict[str, Any] | None] = [None] * len(raws)

    def send(i: int) -> None:
        answers[i] = r.call(raws[i], Actor.owner())

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(raws))]
    for i, t in enumerate(threads):
        t.start()
        wait_for(lambda i=i: r._jobs.qsize() == i + 1)  # queued in this order
    gate.set()
    held.result()
    for t in threads:
        t.join()
    assert all(a is not None for a in answers)
    return answers  # type: ignore[return-value]


def test_queued_writes_land_as_one_group_of_commits(runner: WorkspaceRunner) -> None:
    root = runner.root
    events: list[dict[str, Any]] = []
    heads_at_event: list[str] = []

    def listen(event: dict[str, Any]) -> None:
        if event["type"] == "commit":
            events.append(event)
            heads_at_event.append(git(root, "rev-parse", "HEAD").strip())

    runner.service.events.subscribe(listen)
    before = git(root, "rev-parse", "HEAD").strip()
    answers = queued_calls(runner, [edit(k, 0) for k in range(PAGES)])
    assert all(a["ok"] for a in answers), answers
    revisions = [a["result"]["revision"] for a in answers]
    history = git(root, "rev-list", "--reverse", f"{before}..HEAD").split()
    assert history == revisions  # one commit per call, in the order they were queued
    for k, rev in enumerate(revisions):
        body = git(root, "log", "-1", "--format=%B", rev)
        assert f"Mnote-Trace-Id: t{k}-0" in body and f"Mnote-Idempotency-Key: k{k}-0" in body
        assert (root / f"p{k}.md").read_text() == f"# Page {k}\n\nmarker B\n"
    # they landed together: one move of the branch, and no event before it was durable
    assert f"{PAGES} commands" in git(root, "reflog", "-1", "--format=%gs")
    assert [e["commit"] for e in events] == revisions
    assert set(heads_at_event) == {revisions[-1]}
    wait_for(lambda: git(root, "status", "--porcelain") == "")


def test_a_group_that_cannot_land_runs_each_call_alone(runner: WorkspaceRunner) -> None:
    root = runner.root
    before = git(root, "rev-parse", "HEAD").strip()
    # (after the landing's wait)
    faults.arm_error("objects-written", errno.EIO, times=1)
    answers = queued_calls(runner, [edit(k, 0) for k in range(PAGES)])
    assert all(a["ok"] for a in answers), answers
    history = git(root, "rev-list", "--reverse", f"{before}..HEAD").split()
    assert history == [a["result"]["revision"] for a in answers]
    trailers = git(root, "log", "--format=%(trailers:key=Mnote-Idempotency-Key,valueonly)")
    assert sorted(t for t in trailers.split() if t) == sorted(f"k{k}-0" for k in range(PAGES))


def test_a_group_landing_after_an_error_answers_with_its_commits(
    runner: WorkspaceRunner,
) -> None:
    root = runner.root
    faults.arm_error("files-written", errno.EIO, times=1)
    answers = queued_calls(runner, [edit(k, 0) for k in range(PAGES)])
    assert all(a["ok"] for a in answers), [a["error"] for a in answers]
    revisions = [a["result"]["revision"] for a in answers]
    assert git(root, "rev-parse", "HEAD").strip() == revisions[-1]
    assert all(a["audit"]["replayed"] for a in answers)  # the group's own commits, once each
    assert len(set(revisions)) == PAGES
    for k in range(PAGES):
        assert (root / f"p{k}.md").read_text().endswith("marker B\n")


def test_edits_of_one_page_in_a_group_build_on_each_other(runner: WorkspaceRunner) -> None:
    root = runner.root
    answers = queued_calls(runner, [edit(0, n) for n in range(4)])
    assert all(a["ok"] for a in answers), answers
    assert (root / "p0.md").read_text() == "# Page 0\n\nmarker A\n"  # B, A, B, A
    assert git(root, "log", "--format=%s", "-4", "--", "p0.md").count("\n") == 4


def test_same_base_revision_in_one_group_one_wins(runner: WorkspaceRunner) -> None:
    page = runner.call(
        {
            "toolName": "mnote.page.get",
            "documentId": "p0.md",
            "sessionId": "s",
            "runId": "r",
            "toolCallId": "g",
            "traceId": "g",
        },
        Actor.owner(),
    )
    base = page["result"]["revision"]
    other = edit(0, 2, baseRevision=base)
    other["args"] = {"operations": [{"search": "marker", "replace": "marker C"}]}
    first, second = queued_calls(runner, [edit(0, 0, baseRevision=base), other])
    assert first["ok"] and not second["ok"], (first, second)
    assert second["error"]["code"] == "mnote_tool_conflict"
    assert second["error"]["details"]["currentRevision"] == first["result"]["revision"]
    assert git(runner.root, "rev-parse", "HEAD").strip() == first["result"]["revision"]


def test_calls_outside_the_store_end_a_group(runner: WorkspaceRunner) -> None:
    raws = [edit(0, 0), edit(1, 0), REVIEW_LIST, edit(2, 0)]
    started = time.monotonic()
    answers = queued_calls(runner, raws)
    assert all(a["ok"] for a in answers), answers
    assert time.monotonic() - started < 30
    reflog = git(runner.root, "reflog", "--format=%gs", "-2").splitlines()
    assert "2 commands" in reflog[1] and "commands" not in reflog[0]


def test_calls_queued_while_a_group_runs_join_it(
    runner: WorkspaceRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agents whose answers came with one landing send their next calls while the next
    group runs: those join it, up to a call outside the store, which waits for the landing."""
    answer = runner.service.answer
    running, go_on = threading.Event(), threading.Event()

    def first_waits(raw: dict[str, Any], actor: Actor) -> bytes:
        if raw["toolCallId"] == "c0-0":
            running.set()
            go_on.wait(30)
        return answer(raw, actor)

    monkeypatch.setattr(runner.service, "answer", first_waits)
    raws = [edit(0, 0), edit(1, 0), edit(2, 0), REVIEW_LIST, edit(3, 0)]
    answers: list[dict[str, Any] | None] = [None] * len(raws)

    def send(i: int) -> None:
        answers[i] = runner.call(raws[i], Actor.owner())

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(raws))]
    threads[0].start()
    assert running.wait(30)  # the first call runs, alone in its group so far
    for i, t in enumerate(threads[1:]):
        t.start()
        wait_for(lambda i=i: runner._jobs.qsize() == i + 1)  # queued in this order
    go_on.set()
    for t in threads:
        t.join()
    assert all(a is not None and a["ok"] for a in answers), answers
    reflog = git(runner.root, "reflog", "--format=%gs", "-2").splitlines()
    assert "3 commands" in reflog[1]  # the first call and the two queued behind it
    assert "commands" not in reflog[0]  # the last, after the review list, alone
