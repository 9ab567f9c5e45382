"""Clients find the daemon from HOME alone: the daemon records its socket's path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mnoted.client.locations import find_socket
from mnoted.locations import SOCKET_RECORD
from mnoted.server.locations import record_socket
from tests.e2e.conftest import DaemonProcess


def test_the_cli_finds_the_daemon_with_home_alone(daemon: DaemonProcess) -> None:
    record = Path(daemon.env["HOME"]) / ".config" / "mnoted" / SOCKET_RECORD
    assert record.read_text().strip() == str(daemon.socket)
    assert record.stat().st_mode & 0o777 == 0o600
    bare = {"HOME": daemon.env["HOME"], "PATH": os.environ["PATH"]}  # an MCP host's kind
    status = subprocess.run(
        [sys.executable, "-m", "mnoted.cli.main", "--json", "status"],
        env=bare,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    daemon.stop()
    assert not record.exists()


def test_the_order_a_client_looks_in(tmp_path: Path) -> None:
    home, run = tmp_path / "home", tmp_path / "run"
    recorded = tmp_path / "elsewhere.sock"
    env = {"HOME": str(home)}
    assert find_socket(env) == Path(f"/tmp/mnoted-{os.getuid()}/mnoted.sock")
    record_socket(recorded, env)
    assert find_socket(env) == Path(f"/tmp/mnoted-{os.getuid()}/mnoted.sock")  # (not there)
    recorded.touch()
    assert find_socket(env) == recorded
    (run / "mnoted").mkdir(parents=True)
    (run / "mnoted" / "mnoted.sock").touch()
    assert find_socket({**env, "XDG_RUNTIME_DIR": str(run)}) == run / "mnoted" / "mnoted.sock"
    given = {**env, "XDG_RUNTIME_DIR": str(run), "MNOTED_SOCKET": "/x.sock"}
    assert find_socket(given) == Path("/x.sock")
