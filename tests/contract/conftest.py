"""Conformance to the seeds, through a real daemon's socket: one daemon per module."""

from __future__ import annotations

import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mnoted.client.client import Client
from mnoted.store import Workspace
from tests.conftest import envelope
from tests.e2e.conftest import DaemonProcess

ANSWER_KEYS = {"ok", "toolName", "toolCallId", "traceId", "result", "audit", "error"}
PLAN = "# Plan\n\nShip on Monday.\n\nTest on Friday.\n\n- one\n- two\n"


def started(
    files: dict[str, str], config: Callable[[str], str] | None = None, workspaces: int = 1
) -> Iterator[DaemonProcess]:
    """A daemon over a fresh workspace holding ``files`` (and ``workspaces - 1`` more)."""
    with tempfile.TemporaryDirectory(prefix="mc") as tmp:
        base = Path(tmp)
        roots = [base / "notes", *(base / f"more{i}" for i in range(1, workspaces))]
        for root in roots:
            Workspace.init(root).close()
            if config is not None:
                cfg = root / ".mnote" / "config.toml"
                cfg.write_text(config(cfg.read_text()))
        for name, text in files.items():
            (roots[0] / name).parent.mkdir(parents=True, exist_ok=True)
            (roots[0] / name).write_text(text)
        d = DaemonProcess(base, roots[0])
        d.start(*(arg for root in roots[1:] for arg in ("--workspace", str(root))))
        try:
            yield d
        finally:
            d.stop()


def call(client: Client, tool: str, **fields: Any) -> dict[str, Any]:
    """Send ``envelope(tool, **fields)``; the answer (whatever its HTTP status)."""
    _status, body = client.request("POST", "/v1/tools/call", envelope(tool, **fields))
    assert isinstance(body, dict)
    return body


def write(client: Client, tool: str, **fields: Any) -> dict[str, Any]:
    """A write: idempotency key and dryRun (false unless given) added."""
    fields.setdefault("idempotencyKey", f"idem_{uuid.uuid4().hex[:12]}")
    fields.setdefault("dryRun", False)
    return call(client, tool, **fields)


def raw_http(sock_path: Path, request: bytes) -> tuple[int, bytes]:
    """One HTTP exchange over the Unix socket, bytes as given (no client to tidy them)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(sock_path))
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += s.recv(65536)
        return int(head.split(b" ", 2)[1]), body[:length]


def trailers(d: DaemonProcess, revision: str) -> dict[str, list[str]]:
    """The ``Mnote-*`` trailers of a commit, as ``git`` parses them."""
    text = d.git("log", "-1", "--format=%(trailers:only,unfold)", revision)
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, _, value = line.partition(": ")
        if key:
            out.setdefault(key, []).append(value)
    return out
