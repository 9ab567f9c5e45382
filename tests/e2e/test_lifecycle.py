"""Daemon lifecycle: systemd notifications, SIGHUP reload, start-up without parsing."""

from __future__ import annotations

import signal
import socket
import tempfile
import time
from pathlib import Path

import pytest

from mnoted.store import Workspace
from tests.e2e.conftest import DaemonProcess


def test_sd_notify_ready_watchdog_and_stopping() -> None:
    with tempfile.TemporaryDirectory(prefix="mn") as tmp:
        base = Path(tmp)
        Workspace.init(base / "notes").close()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        listener.bind(str(base / "notify"))
        listener.settimeout(20)
        d = DaemonProcess(base, base / "notes")
        d.env["NOTIFY_SOCKET"] = str(base / "notify")
        d.env["WATCHDOG_USEC"] = "400000"  # a heartbeat every 0.2 s
        d.start()
        messages = [listener.recv(4096).decode()]
        deadline = time.monotonic() + 10
        while not any("WATCHDOG=1" in m for m in messages) and time.monotonic() < deadline:
            messages.append(listener.recv(4096).decode())
        assert messages[0].startswith("READY=1")
        assert any(m == "WATCHDOG=1" for m in messages)
        assert d.stop() == 0
        listener.settimeout(5)
        tail = []
        try:
            while True:
                tail.append(listener.recv(4096).decode())
        except TimeoutError:
            pass
        assert "STOPPING=1" in tail
        listener.close()


def test_sighup_reloads_the_workspace_list(daemon: DaemonProcess) -> None:
    second = daemon.base / "second"
    Workspace.init(second).close()
    config = daemon.base / "home" / ".config" / "mnoted" / "config.toml"
    config.write_text(f'workspaces = ["{second}"]\n')
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)
    client = daemon.client()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _, body = client.request("GET", "/v1/workspaces")
        if len(body["workspaces"]) == 2:
            break
        time.sleep(0.1)
    roots = sorted(w["root"] for w in body["workspaces"])
    assert roots == sorted([str(daemon.workspace.resolve()), str(second.resolve())])
    _, resp = client.request(
        "POST",
        "/v1/tools/call",
        {
            "toolName": "mnote.page.get",
            "sessionId": "s",
            "runId": "r",
            "toolCallId": "c",
            "traceId": "t",
            "documentId": "Welcome.md",
        },
    )
    assert resp["error"]["code"] == "mnote_tool_invalid_arguments"  # two workspaces: name one
    for w in body["workspaces"]:  # the hint says which there are
        assert f"{w['workspaceId']} ({w['root']})" in resp["error"]["hint"]
    wid = next(w["workspaceId"] for w in body["workspaces"] if w["root"] == str(second.resolve()))
    # an agent's token names its workspace: no workspaceId needed
    agent = daemon.client(daemon.agent_token("scribe", "page.read", workspace=second))
    _, resp = agent.request(
        "POST",
        "/v1/tools/call",
        {
            "toolName": "mnote.workspace.list",
            "sessionId": "s",
            "runId": "r",
            "toolCallId": "c",
            "traceId": "t",
        },
    )
    assert resp["ok"], resp
    assert resp["audit"]["workspaceId"] == wid
    _, resp = client.request(
        "POST",
        "/v1/tools/call",
        {
            "toolName": "mnote.page.get",
            "sessionId": "s",
            "runId": "r",
            "toolCallId": "c",
            "traceId": "t",
            "documentId": "Welcome.md",
            "workspaceId": wid,
        },
    )
    assert resp["ok"], resp
    # out of the file again: no longer served; the one named on the command line stays
    config.write_text("workspaces = []\n")
    daemon.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _, body = client.request("GET", "/v1/workspaces")
        if len(body["workspaces"]) == 1:
            break
        time.sleep(0.1)
    assert [w["root"] for w in body["workspaces"]] == [str(daemon.workspace.resolve())]


def test_a_configured_workspace_that_cannot_open_leaves_the_others_served(tmp_path: Path) -> None:
    """One of the config file's workspaces gone (or not a repository) took the daemon down
    with every other; under systemd it then restarted in a loop, serving nothing."""
    good, gone = tmp_path / "good", tmp_path / "gone"
    Workspace.init(good).close()
    config = tmp_path / "home" / ".config" / "mnoted" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'workspaces = ["{gone}", "{good}"]\n')
    d = DaemonProcess(tmp_path, tmp_path / "pinned")
    Workspace.init(d.workspace).close()
    d.start()
    try:
        _, body = d.client().request("GET", "/v1/workspaces")
        roots = sorted(w["root"] for w in body["workspaces"])
        assert roots == sorted([str(good.resolve()), str(d.workspace.resolve())])
        assert f"not serving {gone.resolve()}" in d.log.read_text()
        # taken out of the file it was read from at the start: no longer served
        config.write_text("workspaces = []\n")
        assert d.proc is not None
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while len(body["workspaces"]) != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
            _, body = d.client().request("GET", "/v1/workspaces")
        assert [w["root"] for w in body["workspaces"]] == [str(d.workspace.resolve())]
    finally:
        d.stop()
    # one named on the command line must open: the daemon says why it does not start
    d = DaemonProcess(tmp_path, gone)
    with pytest.raises(AssertionError, match="is not a Git repository"):
        d.start()


@pytest.mark.parametrize("reader", ["listening", "gone"])
def test_sigterm_stops_the_daemon_at_once_with_event_streams_open(
    daemon: DaemonProcess, reader: str
) -> None:
    """An agent runtime subscribed to ``/v1/events`` (or one that left a moment ago) must not
    hold the daemon: it waited for aiohttp's 60-second limit (then systemd's SIGKILL)."""
    conn = socket.socket(socket.AF_UNIX)
    conn.connect(str(daemon.socket))
    auth = f"Authorization: Bearer {daemon.owner_token()}"
    conn.sendall(f"GET /v1/events HTTP/1.1\r\nHost: x\r\n{auth}\r\n\r\n".encode())
    conn.settimeout(10)
    seen = b""
    while b": connected" not in seen:
        seen += conn.recv(4096)
    if reader == "gone":
        conn.close()
    started = time.monotonic()
    assert daemon.stop() == 0
    assert time.monotonic() - started < 25.0  # (a bound on a hang, not a speed figure)
    if reader == "listening":
        while not seen.endswith(b"0\r\n\r\n"):  # the stream's last chunk: it ended
            chunk = conn.recv(4096)
            assert chunk, seen
            seen += chunk
        conn.close()
