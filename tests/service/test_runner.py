"""The workspace runner end to end: a real watcher, real editor saves, real commits.

On the real store: the runner opens a Workspace; settling, ignore files and renames found
by content are the store's."""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnoted.host import external as external_module
from mnoted.host import runner as runner_module
from mnoted.host.runner import RunnerConfig, WorkspaceRunner
from mnoted.service import Actor, Service
from mnoted.store import CommandMeta, Workspace, Write, faults, packs, upkeep
from mnoted.store.indexkeeper import IndexKeeper
from tests.conftest import deleted_packs_held, needs_proc

PLAN = "# Plan\n\nFirst paragraph.\n\nSecond paragraph.\n\nThird paragraph.\n"


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[WorkspaceRunner]:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    (root / "plan.md").write_text(PLAN)
    service = Service()
    r = WorkspaceRunner(root, service, RunnerConfig(quiet_seconds=0.05, max_delay_seconds=1.0))
    r.start()
    yield r
    r.stop()


def call(r: WorkspaceRunner, tool: str, **fields) -> dict:
    raw = {
        "toolName": tool,
        "sessionId": "s",
        "runId": "r",
        "toolCallId": "c",
        "traceId": "t",
        **fields,
    }
    return r.call(raw, Actor.owner())


def commits(root: Path) -> int:
    return int(git(root, "rev-list", "--count", "HEAD"))


def _count_full_scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets an item for each scan of the whole work tree."""
    full_scans: list[int] = []
    real = Workspace.scan_changes

    def counting(ws: Workspace, paths=None, *, shallow=(), **kw):  # type: ignore[no-untyped-def]
        if paths is None and not shallow:
            full_scans.append(1)
        return real(ws, paths, shallow=shallow, **kw)

    monkeypatch.setattr(Workspace, "scan_changes", counting)
    return full_scans


def test_startup_reconciles_edits_made_while_down(runner: WorkspaceRunner) -> None:
    log = git(runner.root, "log", "--format=%s|%(trailers:key=Mnote-Actor,valueonly)", "-1").strip()
    assert log == "external.edit: plan.md|external"


def test_editor_save_becomes_one_commit_with_ids_carried(runner: WorkspaceRunner) -> None:
    root = runner.root
    before = {
        b["text"]: b["id"]
        for b in call(runner, "mnote.page.get", documentId="plan.md")["result"]["blocks"]
    }
    count = commits(root)
    # An editor's atomic save: write a temp file, rename it over the page.
    tmp = root / ".plan.md.swp"
    tmp.write_text(PLAN.replace("Second paragraph.", "Second paragraph, edited in vim."))
    os.replace(tmp, root / "plan.md")
    wait_for(lambda: commits(root) == count + 1)
    time.sleep(0.3)
    assert commits(root) == count + 1
    after = {
        b["text"]: b["id"]
        for b in call(runner, "mnote.page.get", documentId="plan.md")["result"]["blocks"]
    }
    assert after["First paragraph."] == before["First paragraph."]
    assert after["Third paragraph."] == before["Third paragraph."]
    assert after["Second paragraph, edited in vim."] == before["Second paragraph."]
    runner.submit(lambda: runner.ws.idle()).result()
    assert git(root, "status", "--porcelain") == ""


def test_tool_write_is_not_committed_twice_by_the_watcher(runner: WorkspaceRunner) -> None:
    root = runner.root
    count = commits(root)
    resp = call(
        runner,
        "mnote.page.save",
        documentId="plan.md",
        idempotencyKey="k",
        dryRun=False,
        content=["From an agent."],
        mode="append",
    )
    assert resp["ok"], resp["error"]
    time.sleep(0.5)
    assert commits(root) == count + 1


def test_a_persons_edits_during_a_file_grant_stay_theirs(runner: WorkspaceRunner) -> None:
    root = runner.root
    grant = call(runner, "mnote.file.grant", documentId="plan.md", idempotencyKey="g", dryRun=False)
    assert grant["ok"], grant["error"]
    copy = Path(grant["result"]["absolutePath"])
    copy.write_text(PLAN + "\nAgent's own file tool wrote this.\n")
    count = commits(root)
    (root / "plan.md").write_text("# Mine\n\n" + PLAN)  # the person, in their editor
    wait_for(lambda: commits(root) == count + 1)
    assert (
        git(root, "log", "-1", "--format=%(trailers:key=Mnote-Actor,valueonly)").strip()
        == "external"
    )
    released = call(
        runner,
        "mnote.file.release",
        documentId="plan.md",
        idempotencyKey="r",
        dryRun=False,
        grantId=grant["result"]["grantId"],
    )
    assert released["ok"], released["error"]
    assert len(released["result"]["changedBlockIds"]) == 1
    text = (root / "plan.md").read_text()
    assert text.startswith("# Mine\n") and text.endswith("Agent's own file tool wrote this.\n")


def test_reconcile_commits_what_a_stopped_watcher_missed(runner: WorkspaceRunner) -> None:
    root = runner.root
    assert runner.watcher is not None
    runner.reconcile("settle").result()  # the watcher's own start-up pass is done too (FIFO)
    runner.watcher.stop(flush=False)
    count = commits(root)
    (root / "missed.md").write_text("# Missed\n")
    (root / "plan.md").write_text(PLAN + "\nMissed edit.\n")
    time.sleep(0.3)
    assert commits(root) == count
    made = runner.reconcile("test").result()
    assert made == 1 and commits(root) == count + 1
    names = git(root, "log", "-1", "--name-only", "--format=").split()
    assert sorted(names) == ["missed.md", "plan.md"]


def test_rename_keeps_the_document_id_and_follows(runner: WorkspaceRunner) -> None:
    root = runner.root
    doc = call(runner, "mnote.page.get", documentId="plan.md")["result"]["documentId"]
    count = commits(root)
    (root / "archive").mkdir()
    os.rename(root / "plan.md", root / "archive" / "plan.md")
    wait_for(lambda: commits(root) == count + 1)
    moved = call(runner, "mnote.page.get", documentId=doc)["result"]
    assert moved["path"] == "archive/plan.md"
    follow = git(root, "log", "--follow", "--name-only", "--format=", "--", "archive/plan.md")
    assert "plan.md" in follow.split()


def test_jetbrains_safe_write_and_delete(runner: WorkspaceRunner) -> None:
    root = runner.root
    count = commits(root)
    (root / "plan.md___jb_tmp___").write_text(PLAN + "\nFrom the IDE.\n")
    os.rename(root / "plan.md", root / "plan.md___jb_old___")
    os.rename(root / "plan.md___jb_tmp___", root / "plan.md")
    os.unlink(root / "plan.md___jb_old___")
    wait_for(lambda: commits(root) == count + 1)
    time.sleep(0.3)
    assert commits(root) == count + 1
    assert "jb_" not in git(root, "log", "--name-only", "--format=")
    (root / "plan.md").unlink()
    wait_for(lambda: commits(root) == count + 2)
    assert git(root, "log", "-1", "--name-status", "--format=").split() == ["D", "plan.md"]


def test_a_tracked_file_a_gitignore_line_covers_is_still_committed_at_once(
    tmp_path: Path,
) -> None:
    """As ``git status`` sees it: a file committed before a ``.gitignore`` line covered it
    stays tracked, so its edits are committed as they come, not at the next full pass
    (five minutes); an untracked file the line covers is not committed. An Obsidian vault
    gets the editor's own layout state ignored, and its settings committed."""
    root = tmp_path / "vault"
    (root / "drafts").mkdir(parents=True)
    (root / ".obsidian").mkdir()
    (root / "drafts" / "kept.md").write_text("# Kept\n")
    (root / ".obsidian" / "app.json").write_text("{}\n")
    (root / ".obsidian" / "workspace.json").write_text('{"active": "a"}\n')
    Workspace.init(root).close()
    assert git(root, "ls-files", ".obsidian").split() == [".obsidian/app.json"]
    with (root / ".gitignore").open("a") as fh:
        fh.write("drafts/\n")
    git(root, "add", ".gitignore")
    git(root, "commit", "-qm", "drafts are private from now on")
    r = WorkspaceRunner(root, Service(), RunnerConfig(quiet_seconds=0.05, max_delay_seconds=1.0))
    r.start()
    try:
        count = commits(root)
        (root / ".obsidian" / "workspace.json").write_text('{"active": "b"}\n')
        (root / "drafts" / "new.md").write_text("# New\n")
        (root / "drafts" / "kept.md").write_text("# Kept\n\nEdited.\n")
        wait_for(lambda: commits(root) == count + 1)
        assert git(root, "log", "-1", "--name-only", "--format=").split() == ["drafts/kept.md"]
        (root / ".obsidian" / "app.json").write_text('{"vimMode": true}\n')
        wait_for(lambda: commits(root) == count + 2)
        assert git(root, "log", "-1", "--name-only", "--format=").split() == [".obsidian/app.json"]
        wait_for(lambda: git(root, "status", "--porcelain") == "")  # (once the index is)
    finally:
        r.stop()


@needs_proc
@pytest.mark.usefixtures("collector_off")
def test_the_watchers_repository_keeps_no_pack_merged_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watcher asks whether an ignored path is tracked by reading HEAD's trees, on a
    repository of its own that lives as long as the daemon. libgit2 keeps every pack it
    read mapped: the packs the store merged away since stayed mapped once deleted, their
    disk space with them, for as long as the daemon ran."""
    root = tmp_path / "ws"
    (root / "drafts").mkdir(parents=True)
    (root / "drafts" / "kept.md").write_text("# Kept\n")
    Workspace.init(root).close()
    (root / ".gitignore").write_text("drafts/\n")
    git(root, "add", ".gitignore")
    git(root, "commit", "-qm", "drafts are private from now on")
    rules = external_module.ignore_rules(root)
    monkeypatch.setattr(upkeep, "PACKS_PER_LEVEL", 3)
    with Workspace.open(root) as ws:
        for i in range(10):
            ws.apply(CommandMeta("x", actor="hermes"), [Write("p.md", b"v%d\n" % i)])
            assert not rules("drafts/kept.md")  # tracked (read in HEAD's newest pack)
            ws.upkeep(wait=True)
        assert ws.pack_upkeep.merge_thread is not None
        ws.pack_upkeep.merge_thread.submit(lambda: None).result()  # after the deletes queued
        assert list(packs.retired_dir(ws.gitdir / "objects" / "pack").iterdir()) == []
        assert not rules("drafts/kept.md")
        assert rules("drafts/new.md")
        assert deleted_packs_held(root / ".git") == []


def test_odd_files_are_committed_untouched_or_skipped_with_a_warning(
    runner: WorkspaceRunner,
) -> None:
    root = runner.root
    seen: list[dict] = []
    runner.service.events.subscribe(seen.append)
    count = commits(root)
    latin1 = b"# Caf\xe9\n\nnot UTF-8\n"
    (root / "latin1.md").write_bytes(latin1)
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    wait_for(lambda: {"latin1.md", "image.png"} <= set(git(root, "ls-files").split()))
    assert commits(root) in (count + 1, count + 2)  # one commit per settled batch
    assert (root / "latin1.md").read_bytes() == latin1
    page = call(runner, "mnote.page.get", documentId="latin1.md")
    assert page["ok"] and page["result"]["title"].startswith("Caf")
    (root / "huge.md").write_bytes(b"x" * (runner.ws.config.max_file_bytes + 1))
    wait_for(lambda: any(e["type"] == "skipped" for e in seen))
    assert "huge.md" not in git(root, "ls-files")


def test_own_writes_come_back_from_the_watcher_as_nothing(runner: WorkspaceRunner) -> None:
    before = runner.external.commits
    commits_before = commits(runner.root)
    resp = call(
        runner,
        "mnote.doc.markdown_edit",
        documentId="plan.md",
        idempotencyKey="own-1",
        dryRun=False,
        args={"operations": [{"search": "First paragraph.", "replace": "First, edited."}]},
    )
    assert resp["ok"], resp
    assert runner.watcher is not None
    wait_for(lambda: runner.watcher.health().own_writes_dropped >= 1)
    time.sleep(0.3)
    assert runner.external.commits == before
    assert commits(runner.root) == commits_before + 1


def test_pending_changes_without_a_full_walk_while_the_watcher_runs(
    runner: WorkspaceRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What could not be committed (a new file over the size limit) stays pending; with a
    healthy watcher only such paths are compared again, never the whole work tree."""
    assert runner.ws is not None
    root = runner.root
    runner.reconcile("settle").result()
    full_scans = _count_full_scans(monkeypatch)
    (root / "big.md").write_bytes(b"x" * (runner.ws.config.max_file_bytes + 1))
    wait_for(lambda: len(runner.submit(runner.external.pending_changes).result()) == 1)
    assert full_scans == []
    (root / "big.md").unlink()
    wait_for(lambda: runner.submit(runner.external.pending_changes).result() == [])
    assert full_scans == []
    assert git(root, "status", "--porcelain") == ""
    # A watcher that is not running vouches for nothing: the whole tree is compared.
    assert runner.watcher is not None
    runner.watcher.stop(flush=False)
    (root / "plan.md").write_text(PLAN + "\nNobody saw this.\n")
    assert len(runner.submit(runner.external.pending_changes).result()) == 1
    assert full_scans == [1]


def test_one_full_pass_at_start_covers_the_watchers_start_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    (root / "while-down.md").write_text("# Typed while the daemon was down\n")
    full_scans = _count_full_scans(monkeypatch)
    r = WorkspaceRunner(root, Service(), RunnerConfig(quiet_seconds=0.05, max_delay_seconds=1.0))
    r.start()
    try:
        assert "while-down.md" in git(root, "log", "-1", "--name-only", "--format=")
        r.submit(lambda: None).result()  # the watcher's start signal was handled by now
        time.sleep(0.2)
        r.submit(lambda: None).result()
        assert full_scans == [1]
        assert r.watcher is not None and not r.watcher.health().needs_reconcile
    finally:
        r.stop()


@pytest.mark.parametrize("git_there", [True, False])
def test_the_start_up_pass_asks_git_and_later_passes_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, git_there: bool
) -> None:
    """Without the ``git`` command the start-up pass walks the tree and commits the same."""
    from mnoted.sync import gitstatus

    root = tmp_path / "ws"
    Workspace.init(root).close()
    (root / "while-down.md").write_text("# Typed while the daemon was down\n")
    asked: list[set[str] | None] = []

    def counting(at: Path) -> set[str] | None:
        asked.append(gitstatus.changes_by_git(at, None if git_there else str(at / "no-git")))
        return asked[-1]

    monkeypatch.setattr(external_module, "changes_by_git", counting)
    r = WorkspaceRunner(root, Service(), RunnerConfig(watch=False))
    r.start()
    try:
        assert asked == [{"while-down.md"} if git_there else None]
        assert git(root, "log", "-1", "--name-only", "--format=").split() == ["while-down.md"]
        (root / "later.md").write_text("later\n")
        assert r.reconcile().result() == 1
        assert len(asked) == 1
    finally:
        r.stop()


def test_after_a_stretch_of_writes_the_maintenance_runs_and_then_its_follow_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once writes stopped for ``pack_idle_seconds`` the store packs and merges, and then
    ``after_maintenance`` runs (the daemon gives its free memory back): once a stretch,
    after the maintenance, even one that failed. The maintainer's clock is the test's: idle
    only between stretches, so a slow write inside one cannot end it."""
    root = tmp_path / "ws"
    Workspace.init(root).close()
    (root / "plan.md").write_text(PLAN)
    order: list[str] = []
    maintenance = Workspace.maintenance

    def maintain(ws: Workspace, **kwargs: object) -> object:
        order.append("maintenance")
        if len(order) > 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        return maintenance(ws, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Workspace, "maintenance", maintain)
    idle = threading.Event()  # past pack_idle_seconds since the last write, or just after it

    def clock() -> float:
        return math.inf if idle.is_set() else -math.inf

    maintainer = functools.partial(runner_module.Maintainer, poll_seconds=0.01, clock=clock)
    monkeypatch.setattr(runner_module, "Maintainer", maintainer)
    idle.set()
    config = RunnerConfig(quiet_seconds=0.05, pack_idle_seconds=0.3)
    r = WorkspaceRunner(root, Service(), config, after_maintenance=lambda: order.append("after"))
    r.start()
    try:
        wait_for(lambda: len(order) == 2)  # (the run a start is followed by)
        for stretch in range(1, 4):
            idle.clear()
            for i in range(3):
                save = {
                    "idempotencyKey": f"k{stretch}-{i}",
                    "content": [f"{stretch}.{i}"],
                    "dryRun": False,
                }
                got = call(r, "mnote.page.save", documentId="plan.md", mode="append", **save)
                assert got["ok"], got["error"]
            idle.set()
            wait_for(lambda n=stretch: len(order) == 2 * (n + 1))
        time.sleep(0.3)  # idle, nothing written: nothing more (the maintainer polls at 0.01 s)
        assert order == ["maintenance", "after"] * 4
    finally:
        r.stop()


def test_the_runner_outlives_a_failing_index_refresh(
    runner: WorkspaceRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while the idle writer refreshes the Git index: logged, the workspace
    keeps serving, and the index is brought in step once the disk has room again. (The
    landing's own index update is switched off: its paths are left to the idle refresh, as
    when someone else holds ``index.lock`` at the landing.)"""
    monkeypatch.setattr(IndexKeeper, "prepare", lambda self, commit, paths: None)
    root = runner.root
    faults.arm_error("index-written", errno.ENOSPC, times=3)

    def failures_left() -> int:
        return faults._errors["index-written"][1]

    try:
        for n in range(3):
            resp = call(
                runner,
                "mnote.page.save",
                documentId="plan.md",
                idempotencyKey=f"k{n}",
                dryRun=False,
                content=[f"Line {n}."],
                mode="append",
            )
            assert resp["ok"], resp["error"]
            wait_for(lambda n=n: failures_left() <= 2 - n)  # the idle refresh failed
    finally:
        faults.disarm()
    assert runner._thread.is_alive()
    wait_for(lambda: git(root, "status", "--porcelain") == "", timeout=15)


def test_a_write_while_head_is_detached_is_answered_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The group could not begin (HEAD is read as it begins), no call of it had started, and
    # the caller waited out the daemon's two-minute limit for an answer never given.
    root = tmp_path / "ws"
    Workspace.init(root).close()
    (root / "plan.md").write_text(PLAN)
    config = RunnerConfig(quiet_seconds=0.05, max_delay_seconds=1.0, retry_after=0.2)
    runner = WorkspaceRunner(root, Service(), config)
    runner.start()
    try:
        _detached(runner, caplog)
    finally:
        runner.stop()


def checkout(root: Path, *args: str) -> None:
    """`git checkout`, tried again as a person would while the runner holds the index."""
    for _ in range(50):
        run = subprocess.run(["git", "checkout", "-q", *args], cwd=root, capture_output=True)
        if run.returncode == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"git checkout {args}: {run.stderr.decode(errors='replace')}")


def _detached(runner: WorkspaceRunner, caplog: pytest.LogCaptureFixture) -> None:
    checkout(runner.root, "--detach")
    edit = {"operations": [{"search": "First", "replace": "1st"}]}
    fields = {"documentId": "plan.md", "idempotencyKey": "k1", "dryRun": False, "args": edit}
    raw = {"toolName": "mnote.doc.markdown_edit", "sessionId": "s", "runId": "r",
           "toolCallId": "c", "traceId": "t", **fields}  # fmt: skip
    future = runner.submit_call(raw, Actor.owner())
    answer = json.loads(future.result(timeout=10))
    assert answer["error"]["code"] == "mnote_workspace_invalid"
    assert "detached" in answer["error"]["message"]
    # an editor's save meanwhile waits, without a traceback in the log, and lands soon
    # after the branch is back (a failed pass is tried again, not left to the periodic one)
    (runner.root / "plan.md").write_text(PLAN + "\nSaved while detached.\n")
    config = runner.root / ".mnote" / "config.toml"
    config.write_text(config.read_text() + "# edited while detached\n")
    wait_for(lambda: any("trying again" in r.getMessage() for r in caplog.records))
    assert not [r for r in caplog.records if r.exc_info and "detached" in str(r.exc_info[1])]
    assert "1st" not in git(runner.root, "show", "main:plan.md")  # the refused edit
    checkout(runner.root, "-")
    wait_for(lambda: "Saved while detached." in git(runner.root, "show", "HEAD:plan.md"))
    wait_for(lambda: "edited while" in git(runner.root, "show", "HEAD:.mnote/config.toml"))
    assert "1st" not in git(runner.root, "show", "HEAD:plan.md")
    again = call(runner, "mnote.doc.markdown_edit", **{**fields, "idempotencyKey": "k2"})
    assert again["ok"], again["error"]


def test_an_edit_of_the_workspace_settings_is_committed_and_used(
    runner: WorkspaceRunner, caplog: pytest.LogCaptureFixture
) -> None:
    # (the watcher does not look in .mnote/: the edit stayed uncommitted, and unused until
    # a restart)
    config = runner.root / ".mnote" / "config.toml"
    assert runner.ws is not None and runner.ws.config.approval_mode == "review"
    text = config.read_text()
    config.write_text(text.replace('approvalMode = "review"', 'approvalMode = "yolo"'))
    wait_for(lambda: runner.ws is not None and runner.ws.config.approval_mode == "yolo")
    assert 'approvalMode = "yolo"' in git(runner.root, "show", "HEAD:.mnote/config.toml")
    wait_for(lambda: git(runner.root, "status", "--porcelain", "--", ".mnote") == "")
    # a config that does not read is committed (it is the user's file) but not used
    config.write_text(text.replace('approvalMode = "review"', 'approvalMode = "often"'))
    wait_for(lambda: "often" in git(runner.root, "show", "HEAD:.mnote/config.toml"))
    wait_for(lambda: any("settings stay as they were" in r.getMessage() for r in caplog.records))
    assert runner.ws.config.approval_mode == "yolo"
