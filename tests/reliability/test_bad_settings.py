"""Configuration and state files checked like requests: a bad value is refused naming the
file, the key and what it must be (at start-up, and at reload keeping the last good
settings), never a traceback; a damaged token file is that file's error, never a 500; a
rotated owner token is taken without a restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mnoted.errors import WorkspaceInvalid
from mnoted.server.daemon import DaemonConfig
from mnoted.store import Workspace
from mnoted.store.config import WorkspaceConfig
from mnoted.store.statedir import state_dir
from tests.e2e.conftest import DaemonProcess, wait_for

GOOD = 'workspaceId = "ws_1"\n'


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[limits]\nmaxFileBytes = inf\n", "maxFileBytes = inf"),
        ("[limits]\nmaxFileBytes = nan\n", "maxFileBytes = nan"),
        ("[limits]\nmaxFileBytes = -1\n", "maxFileBytes = -1"),
        ("[limits]\nmaxFileBytes = 1.5\n", "maxFileBytes = 1.5"),
        ("[limits]\nmaxFileBytes = true\n", "maxFileBytes = true"),
        ("[limits]\nmaxRequestBytes = 1\n", "maxRequestBytes = 1"),
        ('[limits]\nmaxRequestBytes = "4MB"\n', 'maxRequestBytes = "4MB"'),
        ('[profile]\ndisabledTools = "mnote.page.get"\n', 'disabledTools = "mnote.page.get"'),
        ("[profile]\ndisabledTools = [1]\n", "disabledTools = [1]"),
        ('[profile]\napprovalMode = "sometimes"\n', 'approvalMode = "sometimes"'),
        ('[ignore]\npatterns = "*.tmp"\n', 'patterns = "*.tmp"'),
        ("limits = 3\n", "[limits] must be a table"),
        ("[limits]\nmaxFileByte = 10\n", "unknown setting [limits] maxFileByte"),
        ("[profle]\n", "unknown setting profle"),
        ("[remote]\ninterval = 0\n", "interval = 0"),
        ('[remote]\npushDelay = "2s"\n', 'pushDelay = "2s"'),
        ("[remote]\nurl = 5\n", "url = 5"),
        ('[remote]\nname = "my remote"\n', "[remote] name"),
        ('[remote]\nurl = "https://me:s3cret@host/notes.git"\n', "[remote] url holds a password"),
        ('[remote]\nurls = "x"\n', "unknown setting [remote] urls"),
    ],
)
def test_each_bad_workspace_setting_is_refused_by_name(text: str, key: str) -> None:
    with pytest.raises(WorkspaceInvalid) as caught:
        WorkspaceConfig.parse(GOOD + text, "notes/.mnote/config.toml")
    assert "notes/.mnote/config.toml" in caught.value.message
    assert key in caught.value.message, caught.value.message
    assert caught.value.hint
    assert "s3cret" not in caught.value.message + caught.value.hint


def test_a_disabled_tool_that_is_no_tool_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the daemon has told the store the tools' names (``know_tools``)."""
    from mnoted.contract.tools import TOOLS
    from mnoted.store import config

    monkeypatch.setattr(config, "_known_tools", frozenset(TOOLS))
    with pytest.raises(WorkspaceInvalid, match=r"names no tool: mnote\.page\.gett"):
        WorkspaceConfig.parse(GOOD + '[profile]\ndisabledTools = ["mnote.page.gett"]\n')
    WorkspaceConfig.parse(GOOD + '[profile]\ndisabledTools = ["mnote.page.get"]\n')


def test_good_workspace_settings_are_read() -> None:
    config = WorkspaceConfig.parse(
        GOOD + '[profile]\ndisabledTools = ["mnote.page.get"]\napprovalMode = "yolo"\n'
        "[limits]\nmaxFileBytes = 2048.0\nmaxRequestBytes = 8192\n"
    )
    assert config.disabled_tools == {"mnote.page.get"}
    assert (config.max_file_bytes, config.max_request_bytes) == (2048, 8192)
    assert config.approval_mode == "yolo"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[limits]\nrequestSeconds = inf\n", "requestSeconds = inf"),
        ("[limits]\nconnectionsPerCaller = 0\n", "connectionsPerCaller = 0"),
        ("[limits]\nmaxBodyBytes = -5\n", "maxBodyBytes = -5"),
        ("[sync]\nwatch = 1\n", "watch = 1"),
        ("[sync]\nquietSeconds = -1\n", "quietSeconds = -1"),
        ('workspaces = "~/notes"\n', 'workspaces = "~/notes"'),
        ("sockt = 3\n", "unknown setting sockt"),
    ],
)
def test_each_bad_daemon_setting_is_refused_by_name(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(WorkspaceInvalid) as caught:
        DaemonConfig.load(path)
    assert str(path) in caught.value.message and key in caught.value.message, caught.value
    assert caught.value.hint


def make_daemon(base: Path) -> DaemonProcess:
    workspace = base / "notes"
    Workspace.init(workspace).close()
    (workspace / "plan.md").write_text("# Plan\n\nShip on Monday.\n")
    return DaemonProcess(base, workspace)


def set_limit(workspace: Path, line: str) -> None:
    config = workspace / ".mnote" / "config.toml"
    text = config.read_text()
    start = text.index("maxFileBytes =")
    end = text.index("\n", start)
    config.write_text(text[:start] + line + text[end:])


def test_a_bad_workspace_setting_at_start_up_is_an_error_not_a_traceback() -> None:
    with tempfile.TemporaryDirectory(prefix="mn") as tmp:
        d = make_daemon(Path(tmp))
        set_limit(d.workspace, "maxFileBytes = inf")
        with pytest.raises(AssertionError, match="daemon exited") as caught:
            d.start()
        log = str(caught.value)
        assert "Traceback" not in log
        assert ".mnote/config.toml" in log and "maxFileBytes = inf" in log and "hint:" in log


def test_a_bad_daemon_setting_at_start_up_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[limits]\nrequestSeconds = inf\n")
    ran = subprocess.run(
        [sys.executable, "-m", "mnoted.cli.main", "daemon", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode != 0
    assert "Traceback" not in ran.stderr
    assert "requestSeconds = inf" in ran.stderr and "hint:" in ran.stderr


def test_a_bad_value_at_reload_keeps_the_last_good_settings() -> None:
    with tempfile.TemporaryDirectory(prefix="mn") as tmp:
        base = Path(tmp)
        d = make_daemon(base)
        config = base / "config.toml"
        config.write_text(f"workspaces = [{json.dumps(str(d.workspace))}]\n")
        d.start("--config", str(config))
        try:
            client = d.client(d.owner_token())
            # the workspace's own settings: a bad limit is committed but not used
            set_limit(d.workspace, "maxFileBytes = -1")
            wait_for(lambda: "maxFileBytes = -1" in d.log.read_text())
            saved = client.call("mnote.page.save", "plan.md", {"content": ["Still writable."]})
            assert saved["ok"], saved
            # the daemon's settings: SIGHUP with a bad value keeps serving as before
            config.write_text("[limits]\nrequestSeconds = -3\n")
            assert d.proc is not None
            d.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: "requestSeconds = -3" in d.log.read_text())
            assert client.call("mnote.page.get", "plan.md")["ok"]
            assert "Traceback" not in d.log.read_text()
        finally:
            d.stop()


def test_a_damaged_token_file_is_its_own_error(daemon: DaemonProcess) -> None:
    token = daemon.agent_token("hermes", "page.read")
    tokens = state_dir(daemon.workspace) / "tokens.json"
    tokens.write_text('{"tokens": [{"token_id": ')  # (cut short)
    status, body = daemon.client(token).request(
        "POST", "/v1/tools/call", daemon.client(token).envelope("mnote.page.get", "plan.md")
    )
    assert status == 503, (status, body)
    assert body["error"]["code"] == "mnote_workspace_invalid"
    assert "tokens.json" in body["error"]["message"] and body["error"]["hint"]
    # the owner is still served
    assert daemon.client(daemon.owner_token()).call("mnote.page.get", "plan.md")["ok"]
    made = daemon.cli("grant", "create", "--workspace", str(daemon.workspace), "--actor", "x")
    assert made.returncode != 0
    assert "Traceback" not in made.stderr
    assert "tokens.json is damaged" in made.stderr and "hint:" in made.stderr
    assert tokens.read_text() == '{"tokens": [{"token_id": '  # (left for the person to mend)


def test_a_rotated_owner_token_is_taken_without_a_restart(daemon: DaemonProcess) -> None:
    old = daemon.owner_token()
    assert daemon.client(old).call("mnote.page.get", "plan.md")["ok"]
    path = daemon.base / "home" / ".config" / "mnoted" / "owner.token"
    fresh = "mno_rotated_" + os.urandom(8).hex()
    rotated = path.with_name("owner.token.new")
    rotated.write_text(fresh + "\n")
    rotated.chmod(0o600)
    rotated.replace(path)
    status, _ = daemon.client(old).request("GET", "/v1/workspaces")
    assert status == 401
    assert daemon.client(fresh).call("mnote.page.get", "plan.md")["ok"]
