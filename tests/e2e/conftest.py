"""The real daemon, started as a process on a real Unix socket, polled until ready."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mnoted.client.client import Client, Unreachable
from mnoted.store import Workspace


class DaemonProcess:
    def __init__(self, base: Path, workspace: Path) -> None:
        self.base = base
        self.workspace = workspace
        self.socket = base / "s" / "d.sock"  # short: socket paths are limited to 108 bytes
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "XDG_"))},
            "HOME": str(base / "home"),
            "XDG_CONFIG_HOME": str(base / "home" / ".config"),
            "XDG_RUNTIME_DIR": str(base / "run"),
            "MNOTED_SOCKET": str(self.socket),
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        self.proc: subprocess.Popen[str] | None = None
        self.log = base / "daemon.log"
        self.prefix: list[str] = []  # run the daemon under a wrapper (e.g. `unshare -U -r ...`)

    def start(self, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                *self.prefix,
                sys.executable,
                "-m",
                "mnoted.cli.main",
                "daemon",
                "--workspace",
                str(self.workspace),
                "--socket",
                str(self.socket),
                *extra,
            ],
            env=self.env,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited: {self.log.read_text()}")
            try:
                status, _ = self.client().request("GET", "/v1/health")
                if status == 200:
                    return
            except Unreachable:
                pass
            time.sleep(0.05)
        raise AssertionError(f"daemon not ready: {self.log.read_text()}")

    def owner_token(self) -> str:
        return (self.base / "home" / ".config" / "mnoted" / "owner.token").read_text().strip()

    def client(self, token: str | None = None) -> Client:
        old = os.environ.get("XDG_CONFIG_HOME")
        os.environ["XDG_CONFIG_HOME"] = self.env["XDG_CONFIG_HOME"]
        try:
            return Client(self.socket, token=token)
        finally:
            if old is None:
                os.environ.pop("XDG_CONFIG_HOME", None)
            else:
                os.environ["XDG_CONFIG_HOME"] = old

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mnoted.cli.main", "--socket", str(self.socket), *args],
            env=self.env,
            capture_output=True,
            text=True,
            input=stdin,
            timeout=60,
        )

    def agent_token(
        self, actor: str, *scopes: str, workspace: Path | None = None, paths: Sequence[str] = ()
    ) -> str:
        """A token made the way a user makes one: `mnote grant create` (owner's CLI), for
        ``paths`` (grant globs) if given, else the whole workspace."""
        where = str(workspace or self.workspace)
        args = ["--json", "grant", "create", "--workspace", where, "--actor", actor]
        for scope in scopes:
            args += ["--scope", scope]
        for path in paths:
            args += ["--path", path]
        made = self.cli(*args)
        assert made.returncode == 0, made.stderr
        return str(json.loads(made.stdout)["token"])

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is not None and self.proc.returncode != 0:
            # it died under the test: its log is the first thing to read (pytest shows it
            # with the failure)
            tail = self.log.read_text()[-8000:]
            print(f"the daemon had exited with {self.proc.returncode}:\n{tail}")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
        return self.proc.returncode

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=self.workspace, check=True, capture_output=True, text=True
        ).stdout

    def wait_idle_clean(self, timeout: float = 60) -> None:
        """Until ``git status`` is clean: the daemon brings Git's index in step once idle."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.git("status", "--porcelain") == "":
                return
            time.sleep(0.1)
        raise AssertionError(f"not clean when idle:\n{self.git('status', '--porcelain')[:2000]}")


def wait_for(condition: Callable[[], Any], message: str = "", timeout: float = 30.0) -> Any:
    """Poll ``condition`` until it gives a true value (returned), or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out: {message or 'condition not met'}")


def listen_events(
    daemon: DaemonProcess, token: str, events: list[dict], want: int, timeout: float = 20
) -> threading.Thread:
    """Read ``/v1/events`` with ``token`` on a thread until ``want`` distinct events are in
    ``events`` (or the stream ends); returns once the stream said it is connected."""
    ready = threading.Event()

    def listen() -> None:
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(daemon.socket))
        s.settimeout(timeout)
        s.sendall(
            f"GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
        )
        buf = b""
        try:
            while len(events) < want:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
                if b": connected" in buf:
                    ready.set()
                for line in buf.split(b"\n"):
                    if line.startswith(b"data: "):
                        event = json.loads(line[6:])
                        if event not in events:
                            events.append(event)
        finally:
            ready.set()
            s.close()

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    assert ready.wait(timeout)
    return thread


def fsck(root: Path) -> subprocess.CompletedProcess[str]:
    """``git fsck --strict`` of a repository a running daemon may repack meanwhile.

    The daemon's maintenance merges packs once the workspace is quiet; a pack that goes
    while fsck reads makes fsck report it (as it would during ``git gc``). So fsck runs
    again until the packs were the same before and after it.
    """
    pack_dir = root / ".git" / "objects" / "pack"
    for _ in range(10):
        before = sorted(os.listdir(pack_dir))
        result = subprocess.run(
            ["git", "fsck", "--strict", "--no-progress"], cwd=root, capture_output=True, text=True
        )
        if sorted(os.listdir(pack_dir)) == before:
            return result
    raise AssertionError("the packs kept changing during git fsck")


PLAN = "# Plan\n\nShip on Monday.\n"


@contextmanager
def running_daemon(
    prepare: Callable[[Path], object] | None = None,
    *,
    config: str | None = None,
    setup: Callable[[DaemonProcess], object] | None = None,
    parent: str | None = None,
) -> Iterator[DaemonProcess]:
    """A daemon over a fresh workspace ``notes`` in a temporary folder (under ``parent``),
    stopped at the end: ``prepare`` fills the workspace (default: a ``plan.md``), ``config``
    is the text of its config file, ``setup`` adjusts the process (prefix, environment,
    socket) before it starts."""
    with tempfile.TemporaryDirectory(prefix="mn", dir=parent) as tmp:
        base = Path(tmp)
        workspace = base / "notes"
        Workspace.init(workspace).close()
        if prepare is None:
            (workspace / "plan.md").write_text(PLAN)
        else:
            prepare(workspace)
        d = DaemonProcess(base, workspace)
        if setup is not None:
            setup(d)
        extra: list[str] = []
        if config is not None:
            (base / "config.toml").write_text(config)
            extra = ["--config", str(base / "config.toml")]
        d.start(*extra)
        try:
            yield d
        finally:
            d.stop()


@pytest.fixture
def daemon() -> Iterator[DaemonProcess]:
    def plan(workspace: Path) -> None:
        (workspace / "plan.md").write_text(PLAN + "\n- one\n- two\n")

    with running_daemon(plan) as d:
        yield d
