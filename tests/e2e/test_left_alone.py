"""What the running daemon leaves out of the notes' history, whichever part meets it.

Another Git repository inside the workspace: a person clones one into their notes (a
team's shared notes, a project's docs). Git adds none of its files to the notes'
repository (``git status`` lists the folder once, ``git add -A`` leaves it out), and
neither does mnoted. Before, the watcher reported the clone's files one by one and each
was committed: the other repository's files went into the notes' history, and every later
``git pull`` there was copied in again.

Editors' temp, swap and backup files: the watcher never committed them, but the start-up
pass (and the periodic ones) committed every one it met, so a note left open in Emacs or
Kate put its autosave or swap file into history.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.e2e.conftest import DaemonProcess, fsck


def run_git(where: Path, *args: str) -> None:
    identity = ["-c", "user.name=Team", "-c", "user.email=team@example.com"]
    subprocess.run(["git", *identity, *args], cwd=where, check=True, capture_output=True)


def owner_call(daemon: DaemonProcess, tool: str, **args: Any) -> dict[str, Any]:
    client = daemon.client()
    _, resp = client.request("POST", "/v1/tools/call", client.envelope(tool, None, args, False))
    return resp


def in_head(daemon: DaemonProcess, under: str = ".") -> list[str]:
    return daemon.git("ls-tree", "-r", "--name-only", "HEAD", "--", under).splitlines()


def wait_for(daemon: DaemonProcess, path: str) -> None:
    deadline = time.monotonic() + 20
    while path not in in_head(daemon):
        assert time.monotonic() < deadline, f"{path} was never committed"
        time.sleep(0.1)


def test_a_repository_cloned_into_the_workspace_is_left_to_itself(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    other = tmp_path / "team"
    other.mkdir()
    run_git(other, "init", "-q")
    (other / "handbook.md").write_text("# Handbook\n")
    (other / "howto").mkdir()
    (other / "howto" / "deploy.md").write_text("# Deploy\n")
    run_git(other, "add", "-A")
    run_git(other, "commit", "-q", "-m", "team notes")

    clone = daemon.workspace / "shared" / "team"
    clone.parent.mkdir()
    run_git(clone.parent, "clone", "-q", str(other), "team")
    (clone / "howto" / "deploy.md").write_text("# Deploy\n\nEdited in the clone.\n")
    (daemon.workspace / "shared" / "mine.md").write_text("# Mine\n")  # the notes' own, beside it
    wait_for(daemon, "shared/mine.md")
    time.sleep(1.5)  # past the watcher's quiet period: the clone's files had their chance

    assert in_head(daemon, "shared") == ["shared/mine.md"]
    assert daemon.git("status", "--porcelain") == "?? shared/team/\n"  # as Git sees it

    made = owner_call(daemon, "mnote.page.create", path="shared/team/new.md", content="# New\n")
    assert not made["ok"] and made["error"]["code"] == "mnote_path_rejected", made
    assert "another Git repository (shared/team/.git)" in made["error"]["message"]
    assert not (clone / "new.md").exists()

    # A restart's pass over the whole work tree leaves it alone too.
    daemon.stop()
    (clone / "handbook.md").write_text("# Handbook\n\nEdited while mnoted was down.\n")
    daemon.start()
    [status] = daemon.client().request("GET", "/v1/workspaces")[1]["workspaces"]
    assert status["pendingChanges"] == 0, status
    assert in_head(daemon, "shared") == ["shared/mine.md"]
    assert fsck(daemon.workspace).returncode == 0


def test_editors_temp_files_met_by_the_start_up_pass_are_not_committed(
    daemon: DaemonProcess,
) -> None:
    daemon.stop()
    temps = {"#plan.md#": "autosave", "plan.md.kate-swp": "swap", ".~lock.budget.ods#": "lock"}
    for name, text in temps.items():
        (daemon.workspace / name).write_text(text)
    (daemon.workspace / "plan.md").write_text("# Plan\n\nEdited while mnoted was down.\n")
    daemon.start()
    wait_for(daemon, "plan.md")
    deadline = time.monotonic() + 20
    while "Edited while" not in daemon.git("show", "HEAD:plan.md"):
        assert time.monotonic() < deadline, "the edit made while down was never committed"
        time.sleep(0.1)
    assert not set(temps) & set(in_head(daemon)), in_head(daemon)
    [status] = daemon.client().request("GET", "/v1/workspaces")[1]["workspaces"]
    assert status["pendingChanges"] == 0, status


def test_a_note_with_a_second_hard_link_is_not_committed_and_the_log_says_why(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    """A `cp -al` backup gives every note a second link. mnoted neither serves, writes nor
    commits such a file (its other name may be anywhere); an edit made in place (as Obsidian
    saves) stayed uncommitted without a word. The log now names the file and the way out,
    and an agent's write is refused with it."""
    page = daemon.workspace / "plan.md"
    backup = tmp_path / "backup-plan.md"
    os.link(page, backup)
    head = daemon.git("rev-parse", "HEAD")
    with page.open("r+b") as fh:  # saved in place: the backup's name sees it too
        fh.seek(0, os.SEEK_END)
        fh.write(b"\nEdited in place.\n")
    deadline = time.monotonic() + 20
    while "not committing plan.md: plan.md has 2 hard links" not in daemon.log.read_text():
        assert time.monotonic() < deadline, daemon.log.read_text()
        time.sleep(0.1)
    assert "cp 'plan.md' 'plan.md.new' && mv 'plan.md.new' 'plan.md'" in daemon.log.read_text()
    assert daemon.git("rev-parse", "HEAD") == head

    client = daemon.client()
    args = {"operations": [{"search": "Monday", "replace": "Friday"}]}
    body = client.envelope("mnote.doc.markdown_edit", "plan.md", args, False)
    _, edit = client.request("POST", "/v1/tools/call", body)
    assert edit["error"]["code"] == "mnote_path_rejected", edit
    assert "2 hard links" in edit["error"]["message"] and "cp -al" in edit["error"]["hint"]
    assert daemon.git("rev-parse", "HEAD") == head

    subprocess.run(
        "cp 'plan.md' 'plan.md.new' && mv 'plan.md.new' 'plan.md'",
        shell=True, cwd=daemon.workspace, check=True,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while "Edited in place." not in daemon.git("show", "HEAD:plan.md"):
        assert time.monotonic() < deadline, "the edit was not committed once the link was broken"
        time.sleep(0.1)
    assert backup.read_text() == page.read_text()  # (the backup's own business)
