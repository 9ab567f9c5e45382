"""A small synchronous client of the daemon's Unix socket (stdlib only: fast to start)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import uuid
from pathlib import Path
from typing import Any

from mnoted.contract.tools import lookup
from mnoted.server.locations import config_dir, default_socket_path, owner_token


class Unreachable(Exception):
    """No daemon answers on the socket."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"no mnoted answers on {path} ({reason})")
        self.path = path


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.unix_path)
        self.sock = sock


class Client:
    """Talks to one daemon as one caller (the owner's token unless ``token`` is given)."""

    def __init__(
        self, socket_path: Path | None = None, token: str | None = None, timeout: float = 120.0
    ) -> None:
        env_socket = os.environ.get("MNOTED_SOCKET")
        self.socket_path = socket_path or (
            Path(env_socket) if env_socket else default_socket_path()
        )
        self.token = (
            token or os.environ.get("MNOTE_TOKEN") or owner_token(config_dir(), create=False)
        )
        self.timeout = timeout
        self.session = f"cli_{os.getpid()}"

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = _UnixConnection(self.socket_path, self.timeout)
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise Unreachable(self.socket_path, type(exc).__name__) from None
        except OSError as exc:
            raise Unreachable(self.socket_path, str(exc)) from None
        finally:
            conn.close()
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, {
                "ok": False,
                "error": {"code": "mnote_http", "message": raw.decode(errors="replace")},
            }

    def envelope(
        self,
        tool: str,
        document: str | None = None,
        args: dict[str, Any] | None = None,
        dry_run: bool = False,
        workspace: str | None = None,
    ) -> dict[str, Any]:
        """A complete call: the CLI makes up the ids an agent runtime would send."""
        spec = lookup(tool)
        call_id = uuid.uuid4().hex[:16]
        out: dict[str, Any] = {
            "toolName": tool,
            "sessionId": self.session,
            "runId": f"run_{call_id}",
            "toolCallId": f"call_{call_id}",
            "traceId": f"trace_{call_id}",
            "args": args or {},
        }
        if workspace:
            out["workspaceId"] = workspace
        if document is not None:
            out["documentId"] = document
        if spec is not None and spec.writes:
            out["idempotencyKey"] = f"idem_{call_id}"
            out["dryRun"] = dry_run
        return out

    def call(
        self,
        tool: str,
        document: str | None = None,
        args: dict[str, Any] | None = None,
        dry_run: bool = False,
        workspace: str | None = None,
    ) -> dict[str, Any]:
        _status, body = self.request(
            "POST", "/v1/tools/call", self.envelope(tool, document, args, dry_run, workspace)
        )
        return dict(body)
