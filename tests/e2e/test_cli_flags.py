"""The `mnote` command's flags, run as a user runs it against a real daemon."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mnoted.cli.output import pad, print_status
from mnoted.cli.parser import parser
from mnoted.core.names import BLOCK_COMMANDS
from tests.e2e.conftest import DaemonProcess


def mnote(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    cli = [sys.executable, "-m", "mnoted.cli.main", "--socket", str(daemon.socket)]
    return subprocess.run([*cli, *args], env=daemon.env, capture_output=True, text=True, timeout=60)


def test_json_is_taken_after_the_command_as_before_it(daemon: DaemonProcess) -> None:
    after = mnote(daemon, "page", "get", "Welcome.md", "--json")
    assert after.returncode == 0, after.stderr
    before = mnote(daemon, "--json", "page", "get", "Welcome.md")
    assert json.loads(after.stdout)["result"] == json.loads(before.stdout)["result"]
    plain = mnote(daemon, "page", "get", "Welcome.md")
    assert plain.returncode == 0 and not plain.stdout.startswith("{")


def test_base_makes_a_write_on_a_block_changed_since_a_conflict(daemon: DaemonProcess) -> None:
    got = mnote(daemon, "page", "get", "Welcome.md", "--json")
    base = json.loads(got.stdout)["result"]["revision"]
    page = daemon.workspace / "Welcome.md"
    edit = ["page", "edit", "Welcome.md", "--base", base, "--replace"]
    first = mnote(daemon, *edit, "Welcome to your", "Hello from your")
    assert first.returncode == 0, first.stdout + first.stderr
    after_first = page.read_text()
    stale = mnote(daemon, *edit, "mnote workspace", "notes", "--json")  # the same heading
    assert stale.returncode == 1
    answer = json.loads(stale.stdout)
    assert answer["error"]["code"] == "mnote_tool_conflict"
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=daemon.workspace, capture_output=True, text=True
    ).stdout.strip()
    assert answer["error"]["details"]["currentRevision"] == head
    assert page.read_text() == after_first  # nothing written
    # a block the write since left alone: the edit is carried onto the current revision
    other = mnote(daemon, "editor", "insert_block_after", "Welcome.md", "--block", "Late.",
                  "--base", base, "--json")  # fmt: skip
    assert other.returncode == 0 and json.loads(other.stdout)["audit"]["rebased"] is True
    assert "Hello from your" in page.read_text() and "Late." in page.read_text()


def test_a_tool_error_goes_to_stderr_with_its_code_and_hint(daemon: DaemonProcess) -> None:
    missing = mnote(daemon, "page", "get", "nope.md")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("error mnote_tool_not_found:")
    assert "  hint: " in missing.stderr
    as_json = mnote(daemon, "page", "get", "nope.md", "--json")
    assert as_json.returncode == 1 and as_json.stderr == ""
    assert json.loads(as_json.stdout)["error"]["code"] == "mnote_tool_not_found"


def test_columns_count_a_wide_character_as_two() -> None:
    assert pad("中文/笔记 一.md", 20) == "中文/笔记 一.md" + " " * 5  # 15 columns wide
    assert pad("abc", 5) == "abc  " and pad("abcdef", 3) == "abcdef"


def test_a_malformed_option_is_a_usage_error(daemon: DaemonProcess) -> None:
    bad = mnote(daemon, "page", "options", "Welcome.md", "wide=maybe")
    assert bad.returncode == 2 and "use key=true or key=false" in bad.stderr
    good = mnote(daemon, "page", "options", "Welcome.md", "wideLayout=true", "--json")
    assert json.loads(good.stdout)["ok"]
    assert "wideLayout: true" in (daemon.workspace / "Welcome.md").read_text()


def test_every_command_and_option_says_what_it_is_for() -> None:
    missing: list[str] = []

    def walk(p: argparse.ArgumentParser, path: str) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {choice.dest: choice.help for choice in action._choices_actions}
                for name, child in action.choices.items():
                    if not helps.get(name):
                        missing.append(f"{path} {name}")
                    walk(child, f"{path} {name}")
            elif action.help is None:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(parser(), "mnote")
    assert missing == []


@pytest.mark.parametrize("name", list(BLOCK_COMMANDS))
def test_each_editor_command_offers_its_own_fields_with_help(name: str) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "mnoted.cli.main", "editor", name, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    offered = {w[2:].replace("-", "_") for w in text.split() if w.startswith("--")}
    spec = BLOCK_COMMANDS[name]
    assert offered - {"help", "dry_run", "base", "snapshot", "reason", "trace_id"} == set(
        spec.fields
    )
    assert spec.summary in text.lower()
    for field in spec.required:  # required options show without brackets in the usage
        option = "--" + field.replace("_", "-")
        assert f"{option} {field.upper()}" in text and f"[{option} " not in text


def test_a_block_field_a_command_does_not_take_is_refused_and_nothing_written(
    daemon: DaemonProcess,
) -> None:
    head = daemon.git("rev-parse", "HEAD")
    before = (daemon.workspace / "Welcome.md").read_bytes()
    got = json.loads(mnote(daemon, "page", "get", "Welcome.md", "--json").stdout)
    block = got["result"]["blocks"][-1]["id"]
    usage = mnote(
        daemon, "editor", "delete_block", "Welcome.md", "--block-id", block, "--props", "{}"
    )
    assert usage.returncode == 2 and "unrecognized arguments: --props" in usage.stderr
    # The same through the tool itself: a move asked of replace_block would silently not move.
    op = {"command": "replace_block", "block_id": block, "block": "x", "after_block_id": block}
    call = mnote(
        daemon, "call", "mnote.doc.apply_block_ops", "--doc", "Welcome.md",
        "--args", json.dumps({"operations": [op]}), "--json",
    )  # fmt: skip
    assert call.returncode == 1
    error = json.loads(call.stdout)["error"]
    assert error["code"] == "mnote_tool_invalid_arguments"
    assert (
        error["message"]
        == "operation 0 (replace_block): replace_block does not take after_block_id"
    )
    assert error["hint"] == "Its fields: replace_block(block_id, block)."
    assert daemon.git("rev-parse", "HEAD") == head
    assert (daemon.workspace / "Welcome.md").read_bytes() == before


def test_a_file_grant_prints_the_file_to_edit_and_the_grant(daemon: DaemonProcess) -> None:
    granted = mnote(daemon, "call", "mnote.file.grant", "--doc", "Welcome.md")
    assert granted.returncode == 0, granted.stderr
    assert f"  file      {daemon.workspace / '.mnote/grants'}/grant_" in granted.stdout
    assert "  grant     grant_" in granted.stdout
    assert "(nothing written)" in granted.stdout


def test_json_for_people_shows_names_as_written(daemon: DaemonProcess) -> None:
    made = mnote(
        daemon,
        "grant",
        "create",
        "--workspace",
        str(daemon.workspace),
        "--actor",
        "scribe",
        "--scope",
        "page.read",
        "--path",
        "笔记/**",
        "--json",
    )
    assert made.returncode == 0, made.stderr
    listed = mnote(daemon, "grant", "list", "--workspace", str(daemon.workspace), "--json")
    assert '"笔记/**"' in listed.stdout and "\\u" not in listed.stdout
    assert json.loads(listed.stdout)[-1]["grants"] == ["笔记/**"]


def test_grant_list_says_which_tokens_no_longer_act(daemon: DaemonProcess) -> None:
    where = ["--workspace", str(daemon.workspace)]
    for actor, expires in (("brief", "1s"), ("lasting", "7d")):
        made = mnote(daemon, "grant", "create", *where, "--actor", actor, "--expires", expires)
        assert made.returncode == 0, made.stderr
    time.sleep(1.2)
    states = {
        row["actorId"]: row["state"]
        for row in json.loads(mnote(daemon, "grant", "list", *where, "--json").stdout)
    }
    assert states["brief"] == "expired" and states["lasting"] == "active"
    listed = mnote(daemon, "grant", "list", *where).stdout
    assert any("brief" in line and " expired " in line for line in listed.splitlines())


def status_showing(
    daemon: DaemonProcess, text: str, timeout: float = 20.0
) -> subprocess.CompletedProcess[str]:
    """`mnote status` again until it shows ``text`` (the daemon meets a change on disk in its
    own time), each answered with exit 0; the last one, whether it shows it or not."""
    deadline = time.monotonic() + timeout
    while True:
        shown = mnote(daemon, "status")
        assert shown.returncode == 0, shown.stderr
        if text in shown.stdout or time.monotonic() > deadline:
            return shown
        time.sleep(0.2)


def test_status_names_what_is_not_committed_and_why(daemon: DaemonProcess, tmp_path: Path) -> None:
    """`mnote status` printed the daemon's JSON and a bare count of uncommitted files; a
    photo over the size limit, or a note hard-linked by a backup, stayed out of the history
    with nothing but a log line to say which or why."""
    photo = daemon.workspace / "attachments" / "photo.png"
    photo.parent.mkdir()
    photo.write_bytes(b"\x89PNG" + bytes(2_000_000))
    os.link(daemon.workspace / "plan.md", tmp_path / "backup.md")
    with (daemon.workspace / "plan.md").open("a") as fh:  # saved in place: the link sees it
        fh.write("\nEdited in place.\n")
    shown = status_showing(daemon, "2 files not committed")
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("mnoted ") and "branch main at " in shown.stdout, shown.stdout
    assert "  2 files not committed:" in lines, shown.stdout
    photo_line = next(line for line in lines if "attachments/photo.png:" in line)
    assert "2,000,004 bytes, over the 1,048,576-byte file limit" in photo_line
    assert "maxFileBytes in .mnote/config.toml" in photo_line
    plan_line = next(line for line in lines if line.startswith("    plan.md:"))
    assert "2 hard links" in plan_line and "cp 'plan.md' 'plan.md.new'" in plan_line

    as_json = json.loads(mnote(daemon, "status", "--json").stdout)
    ws = as_json["workspaces"][0]
    assert ws["pendingChanges"] == 2
    assert [u["path"] for u in ws["uncommitted"]] == ["attachments/photo.png", "plan.md"]
    photo.unlink()
    (daemon.workspace / "plan.md").unlink()  # the backup keeps its bytes; the page goes
    daemon.wait_idle_clean()
    assert "everything on disk is committed" in mnote(daemon, "status").stdout


def test_status_of_a_workspace_whose_folder_went(daemon: DaemonProcess, tmp_path: Path) -> None:
    """A folder moved away under the daemon: `mnote status` says so (it stopped with a
    traceback: the watcher has no watches to count), and the folder can be put back."""
    moved = tmp_path / "elsewhere"
    daemon.workspace.rename(moved)
    try:
        shown = status_showing(daemon, "commits refused")
        assert "Traceback" not in shown.stderr
        assert "was its folder moved or deleted?" in shown.stdout, shown.stdout
        assert f"hint: Put the folder back at {daemon.workspace}" in shown.stdout
        # nothing made again at the old path (an empty .git with an index and a lock
        # folder was, by the index's idle refresh, and the folder could not be put back)
        assert not daemon.workspace.exists(), sorted(daemon.workspace.rglob("*"))
    finally:
        moved.rename(daemon.workspace)
    served = status_showing(daemon, "branch main at").stdout
    assert "branch main at" in served, f"the folder put back is not served again:\n{served}"


def test_status_of_a_watcher_that_could_not_start(capsys: pytest.CaptureFixture[str]) -> None:
    """What the daemon answers for a workspace whose folder went before its watcher started
    (no watches to count): printed, not a traceback."""
    watcher = {"state": "failed", "watchCount": None, "overflows": 0, "pending": 0,
               "needsReconcile": True, "lastError": "cannot watch /n: No such file"}  # fmt: skip
    refused = {"message": "the workspace's repository /n/.git is gone", "hint": "Put it back."}
    health = {"version": "0.1.0", "pid": 1, "uptimeSeconds": 5.0, "socket": "/s"}
    print_status(health, [{"workspaceId": "ws_1", "root": "/n", "watcher": watcher,
                           "refused": refused}])  # fmt: skip
    out = capsys.readouterr().out
    assert "commits refused: the workspace's repository /n/.git is gone; watcher failed;" in out
    assert "last error: cannot watch /n" in out and "  hint: Put it back." in out


def test_the_workspace_called_is_the_one_the_current_folder_is_in(tmp_path: Path) -> None:
    """With two workspaces served, every `mnote` call needed `--workspace-id`, even one run
    from inside a workspace's folder."""
    from mnoted.store import Workspace

    first, second = tmp_path / "first", tmp_path / "second"
    for root, title in ((first, "First"), (second, "Second")):
        Workspace.init(root).close()
        (root / "projects").mkdir()
        (root / "projects" / "plan.md").write_text(f"# {title} plan\n")
    daemon = DaemonProcess(tmp_path, first)
    daemon.start("--workspace", str(second))
    try:
        cli = [sys.executable, "-m", "mnoted.cli.main", "--json", "page", "get", "projects/plan.md"]

        def get(cwd: Path) -> dict:
            done = subprocess.run(cli, env=daemon.env, cwd=cwd, capture_output=True, text=True)
            return json.loads(done.stdout)

        for cwd, title in ((second / "projects", "Second plan"), (first, "First plan")):
            deadline = time.monotonic() + 20  # (until the daemon committed the new pages)
            while (answer := get(cwd))["ok"] is False and time.monotonic() < deadline:
                time.sleep(0.2)
            assert answer["ok"] and answer["result"]["title"] == title, answer
        outside = get(tmp_path)
        assert outside["error"]["code"] == "mnote_tool_invalid_arguments", outside
        assert "inside the workspace's folder" in outside["error"]["hint"]
    finally:
        daemon.stop()
