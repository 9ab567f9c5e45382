"""People's own Git in the workspace while agents write: locks, commits, branches, gc, pull."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mnoted.service import Actor, Service
from mnoted.store import Workspace
from tests.e2e.conftest import DaemonProcess, fsck


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout


@pytest.mark.parametrize("lock", ["index.lock", "HEAD.lock", "refs/heads/main.lock"])
def test_a_foreign_git_lock_is_named_waited_for_and_never_deleted(
    tmp_path: Path, lock: str
) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    ws = Workspace.open(root, lock_wait=0.2)
    service = Service()
    service.add(ws)
    base = {"sessionId": "s", "runId": "r", "toolCallId": "c", "traceId": "t", "dryRun": False}
    lock_path = root / ".git" / lock
    lock_path.write_text("held by the user's git\n")
    try:
        resp = service.call(
            {
                **base,
                "toolName": "mnote.page.save",
                "documentId": "Welcome.md",
                "idempotencyKey": "k1",
                "content": ["x"],
                "mode": "append",
            },
            Actor.owner(),
        )
        if lock in ("index.lock", "HEAD.lock"):
            # A commit moves the branch ref only; the index is brought in step when idle.
            assert resp["ok"], resp["error"]
        else:
            assert resp["error"]["code"] == "mnote_store_locked"
            assert lock in resp["error"]["message"] or lock in str(resp["error"]["details"])
        assert lock_path.read_text() == "held by the user's git\n"  # never deleted
    finally:
        lock_path.unlink()
    resp = service.call(
        {
            **base,
            "toolName": "mnote.page.save",
            "documentId": "Welcome.md",
            "idempotencyKey": "k2",
            "content": ["after"],
            "mode": "append",
        },
        Actor.owner(),
    )
    assert resp["ok"], resp["error"]
    ws.idle()
    assert git(root, "status", "--porcelain") == ""
    ws.close()


def appending_agent(
    daemon: DaemonProcess,
    stop: threading.Event,
    pause: list[float],
    acked: list[str],
    free: threading.Event | None = None,
) -> None:
    """An agent appending to plan.md until ``stop``, ``pause[0]`` seconds between writes
    (read each time, so a test may change it), and only while ``free`` is set if given; the
    command id of each acknowledged write goes to ``acked``."""
    client = daemon.client()
    i = 0
    while not stop.is_set():
        if free is not None and not free.wait(0.05):
            continue
        body = client.envelope(
            "mnote.page.save", "plan.md", {"content": [f"agent {i}"], "mode": "append"}
        )
        _, resp = client.request("POST", "/v1/tools/call", body)
        if resp.get("ok"):
            acked.append(resp["audit"]["commandId"])
        i += 1
        time.sleep(pause[0])


def give_up_merge(root: Path) -> str:
    """What a person does after a merge stopped half-way (the branch moved under it, Git
    could not make its commit): `git merge --abort`, tried again while a lock is held. What
    the last refused abort said, if it never went through."""
    said = ""
    for _ in range(20):
        if not (root / ".git" / "MERGE_HEAD").exists():
            return ""
        run = subprocess.run(["git", "merge", "--abort"], cwd=root, capture_output=True)
        said = run.stderr.decode(errors="replace").strip()
        time.sleep(0.05)
    return said


def test_users_git_while_agents_write_loses_no_acknowledged_commit(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    root = daemon.workspace
    acked: list[str] = []
    stop = threading.Event()
    # Seconds between the agent's writes: 0.01 (without pause) while the person's pulls race
    # it, then 0.1 (a busy agent) between the person's commands, each of which must go
    # through: the agent waits while one runs (on a loaded machine a write every 0.1 s
    # kept the index behind the work tree for 20 tries of `git pull`). Writing every 10 ms
    # leaves Git's merge no moment when HEAD, the index and the work tree agree: it refuses,
    # or fails half-way and puts HEAD back over the daemon's newer commits (kept under
    # refs/mnote/rewound/, so still reachable).
    pause = [0.01]
    free = threading.Event()
    free.set()
    agent = functools.partial(appending_agent, daemon, stop, pause, acked, free)

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    (clone / "from-clone.md").write_text("# From a second clone\n")
    git(clone, "add", "from-clone.md")
    git(clone, "-c", "user.name=U", "-c", "user.email=u@x", "commit", "-q", "-m", "from clone")

    thread = threading.Thread(target=agent)
    thread.start()
    try:
        time.sleep(0.3)
        (root / "mine.md").write_text("# Mine\n")
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "U",
            "GIT_AUTHOR_EMAIL": "u@x",
            "GIT_COMMITTER_NAME": "U",
            "GIT_COMMITTER_EMAIL": "u@x",
        }
        for args in (
            ["add", "mine.md"],
            # The watcher may commit mine.md first once it has been quiet for 0.3 s (a retry
            # of `git add` above takes that long): the user's commit then has nothing of
            # its own, and is still made.
            ["commit", "-q", "--allow-empty", "-m", "my own commit"],
            ["gc", "-q"],
            ["pull", "-q", "--no-rebase", "--no-edit", str(clone), "main"],
            ["checkout", "-q", "-b", "side"],  # the agent's next writes land on `side`
        ):
            if args[0] == "pull":
                for _ in range(5):  # racing an agent that never pauses: may fail, any way
                    subprocess.run(["git", *args], cwd=root, env=env, capture_output=True)
                    give_up_merge(root)
                pause[0] = 0.1
            # The daemon may hold the index or the branch for a moment (its last write landing,
            # the index brought in step once idle): retry as a person would, until a deadline.
            errors: list[str] = []
            free.clear()
            deadline = time.monotonic() + 60
            while True:
                run = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True)
                if run.returncode == 0:
                    break
                errors.append(run.stderr.decode(errors="replace").strip())
                refused = give_up_merge(root)
                if refused:
                    errors.append(f"git merge --abort: {refused}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"git {args[0]} failed {len(errors)}: {errors[-3:]}")
                time.sleep(0.1)
            free.set()
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(30)
    deadline = time.monotonic() + 20
    while git(root, "status", "--porcelain") and time.monotonic() < deadline:
        time.sleep(0.1)
    reachable = git(
        root, "log", "--all", "--format=%(trailers:key=Mnote-Command-Id,valueonly,separator=)"
    )
    assert acked and all(cid in reachable for cid in acked)
    assert "my own commit" in git(root, "log", "--format=%s")
    assert "from clone" in git(root, "log", "--format=%s")  # the pull's merge, kept
    assert git(root, "rev-parse", "--abbrev-ref", "HEAD").strip() == "side"
    checked = fsck(root)
    assert checked.returncode == 0, checked.stderr
    # The user's `git pull` rewrites work-tree files under the agents' feet; what it wrote
    # is then committed as an edit like any other. What must hold: every acknowledged
    # command stays in history, and the work tree and HEAD agree once idle.
    assert git(root, "show", "HEAD:plan.md") == (root / "plan.md").read_text()


def test_a_detached_head_refuses_writes_until_a_branch_is_back(daemon: DaemonProcess) -> None:
    # A person checks out a commit to look at it while an agent writes. The first write
    # after that was refused, but the next ones landed on `main` under the detached HEAD;
    # and a call arriving as the group began went unanswered for two minutes.
    root = daemon.workspace
    acked: list[str] = []
    stop = threading.Event()
    pause = [0.02]
    client = daemon.client()
    thread = threading.Thread(target=appending_agent, args=(daemon, stop, pause, acked))
    thread.start()
    try:
        time.sleep(0.3)
        errors = []
        for _ in range(50):  # the daemon may hold the index for a moment
            run = subprocess.run(
                ["git", "checkout", "-q", "--detach"], cwd=root, capture_output=True
            )
            if run.returncode == 0:
                break
            errors.append(run.stderr.decode(errors="replace").strip())
            time.sleep(0.1)
        else:
            raise AssertionError(f"git checkout --detach failed 50 times: {errors[-3:]}")
        # A call may still join a group begun before the checkout, and land with it on
        # `main` (the branch, not HEAD, is what a landing moves); the next is refused.
        for n in range(5):
            body = client.envelope(
                "mnote.page.save", "plan.md", {"content": [f"refused {n}"], "mode": "append"}
            )
            _, resp = client.request("POST", "/v1/tools/call", body)
            if not resp["ok"]:
                break
        assert resp["error"]["code"] == "mnote_workspace_invalid", resp
        assert n <= 1
        detached_at = git(root, "rev-parse", "main").strip()
        before = len(acked)
        time.sleep(0.5)  # the agent keeps writing: each write refused, at once
        while_detached = len(acked) - before
        assert git(root, "rev-parse", "main").strip() == detached_at
        (root / "saved-meanwhile.md").write_text("# Saved while detached\n")
        for _ in range(20):
            if subprocess.run(["git", "checkout", "-q", "main"], cwd=root).returncode == 0:
                break
            time.sleep(0.1)
        deadline = time.monotonic() + 30  # writing again once the branch is back
        while len(acked) <= before + while_detached and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(30)
    assert while_detached <= 1  # (one may have been answered just before the checkout)
    assert len(acked) > before + while_detached  # writing again once the branch is back
    deadline = time.monotonic() + 30
    while git(root, "status", "--porcelain") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert git(root, "status", "--porcelain") == ""
    assert "saved-meanwhile.md" in git(root, "ls-files")
    reachable = git(root, "log", "--format=%(trailers:key=Mnote-Command-Id,valueonly)")
    assert all(cid in reachable for cid in acked)
    assert f"refused {n}" not in (root / "plan.md").read_text()
    checked = fsck(root)
    assert checked.returncode == 0, checked.stderr


def test_a_second_daemon_on_the_same_workspace_refuses_to_start(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "mnoted.cli.main",
            "daemon",
            "--workspace",
            str(daemon.workspace),
            "--socket",
            str(tmp_path / "second.sock"),
        ],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode != 0
    assert "another mnoted process serves this workspace" in second.stderr
    assert not (tmp_path / "second.sock").exists()
    status, _ = daemon.client().request("GET", "/v1/health")  # the first one still serves
    assert status == 200


def test_the_git_index_follows_head_while_an_agent_writes_without_pause(
    daemon: DaemonProcess,
) -> None:
    """The index is refreshed when the daemon's queue runs dry; an agent that never lets
    it still sees the index follow HEAD (refreshed again and again while it writes), so
    `git status` in the workspace shows no phantom staged changes for long. Watched until
    the index moved three times beside 40 writes (a generous deadline, not a window)."""
    root = daemon.workspace
    stop = threading.Event()
    acked: list[str] = []
    agent = functools.partial(appending_agent, daemon, stop, [0.01], acked)

    thread = threading.Thread(target=agent)
    thread.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while (len(seen) < 3 or len(acked) <= 40) and time.monotonic() < deadline:
            staged = git(root, "ls-files", "-s", "plan.md").split()
            if staged and (not seen or seen[-1] != staged[1]):
                seen.append(staged[1])
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(30)
    assert len(acked) > 40  # the agent kept the daemon busy
    assert len(seen) >= 3, f"the index's plan.md changed {len(seen) - 1} times in 60 s"
    # Once idle the index is HEAD's again: nothing staged, nothing modified.
    deadline = time.monotonic() + 10
    while git(root, "status", "--porcelain") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert git(root, "status", "--porcelain") == ""
