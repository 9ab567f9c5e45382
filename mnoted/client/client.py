"""A small synchronous client of the daemon's Unix socket (stdlib only: fast to start).

Connections are kept open between requests (HTTP keep-alive) and shared by the threads
that use one ``Client``: a long-lived caller such as the MCP bridge saves the connection
set-up on both sides, about a third of a millisecond a call here.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import threading
import uuid
from pathlib import Path
from typing import Any

import pydantic_core

from mnoted.client.locations import find_socket
from mnoted.client.wire import BadAnswer, Connection, Dropped
from mnoted.contract.tools import lookup
from mnoted.locations import config_dir, read_owner_token


class Unreachable(Exception):
    """No daemon answers on the socket."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"no mnoted answers on {path} ({reason})")
        self.path = path


def _safe_to_repeat(method: str, body: Any) -> bool:
    """A request the daemon may see twice without a second effect: a GET, a call of a tool
    that writes nothing, or a write with an idempotency key (answered from its record)."""
    if method == "GET":
        return True
    if not isinstance(body, dict):
        return False
    spec = lookup(str(body.get("toolName")))
    return spec is not None and (not spec.writes or bool(body.get("idempotencyKey")))


def _closed_by_peer(conn: Connection) -> bool:
    """Whether an idle kept connection was closed by the daemon (its keep-alive timeout, a
    restart): readable while no request is pending means end of file, or bytes that no
    request asked for. Either way it is not used again."""
    if conn.sock is None:
        return True
    poller = select.poll()  # not select(): a busy process may hold fds past 1024
    poller.register(conn.sock, select.POLLIN)
    return bool(poller.poll(0))


def parse_answer(body: bytes) -> Any:
    """A daemon's answer as Python values; one that is not JSON as an ``mnote_http`` error."""
    try:
        # pydantic's parser (imported anyway, with the tool specs): a 30 KB page answer in a
        # third of json.loads' time.
        return pydantic_core.from_json(body)
    except ValueError:
        pass
    try:  # it refuses lone surrogates: a page's bytes that are not UTF-8, as sent
        return json.loads(body)
    except ValueError:
        return {
            "ok": False,
            "error": {"code": "mnote_http", "message": body.decode(errors="replace")},
        }


class Client:
    """Talks to one daemon as one caller (the owner's token unless ``token`` is given)."""

    max_idle = 8  # kept connections: enough for the threads of a busy bridge

    def __init__(
        self, socket_path: Path | None = None, token: str | None = None, timeout: float = 120.0
    ) -> None:
        self.socket_path = socket_path or find_socket()
        self.token = token or os.environ.get("MNOTE_TOKEN") or read_owner_token(config_dir())
        self.timeout = timeout
        self.session = f"cli_{os.getpid()}"
        self._idle: list[Connection] = []
        self._lock = threading.Lock()

    def _take(self) -> tuple[Connection, bool]:
        """A kept connection that is still open, else a new one; and whether it was kept."""
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not _closed_by_peer(conn):
                    return conn, True
                conn.close()
        return Connection(self.socket_path, self.timeout), False

    def _keep(self, conn: Connection) -> None:
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the kept connections (a later request opens a new one)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit, modules may be gone
            self.close()

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        # A kept connection the daemon closed just as it was taken fails before any answer;
        # the request is sent again on a new connection only if doing it twice is harmless.
        conn, kept = self._take()
        try:
            try:
                answer = conn.exchange(method, path, data, headers)
            except (Dropped, BrokenPipeError, ConnectionResetError):
                conn.close()
                if not (kept and _safe_to_repeat(method, body)):
                    raise
                conn = Connection(self.socket_path, self.timeout)
                answer = conn.exchange(method, path, data, headers)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            conn.close()
            raise Unreachable(self.socket_path, type(exc).__name__) from None
        except OSError as exc:
            conn.close()
            raise Unreachable(self.socket_path, str(exc)) from None
        except BadAnswer as exc:
            conn.close()
            raise Unreachable(self.socket_path, f"{type(exc).__name__}: {exc}") from None
        if answer.will_close:
            conn.close()
        else:
            self._keep(conn)
        return answer.status, parse_answer(answer.body)

    def envelope(
        self,
        tool: str,
        document: str | None = None,
        args: dict[str, Any] | None = None,
        dry_run: bool = False,
        workspace: str | None = None,
        base_revision: str | None = None,
        header: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A complete call: the CLI makes up the ids an agent runtime would send.

        ``header``: envelope fields given by the user (``traceId``, ``reason``,
        ``actorType``), sent as given over the made-up ones."""
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
        if base_revision is not None:
            out["baseRevision"] = base_revision
        if spec is not None and spec.writes:
            out["idempotencyKey"] = f"idem_{call_id}"
            out["dryRun"] = dry_run
        out.update({k: v for k, v in (header or {}).items() if v is not None})
        return out

    def call(
        self,
        tool: str,
        document: str | None = None,
        args: dict[str, Any] | None = None,
        dry_run: bool = False,
        workspace: str | None = None,
        base_revision: str | None = None,
        header: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        envelope = self.envelope(tool, document, args, dry_run, workspace, base_revision, header)
        _status, body = self.request("POST", "/v1/tools/call", envelope)
        return dict(body)
