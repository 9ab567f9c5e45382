"""The Hermes plugin: the ``mnote.*`` tools an agent's token may use, as native Hermes tools.

Hermes loads it through the ``hermes_agent.plugins`` entry point once it is listed
under ``plugins: enabled:`` in ``~/.hermes/config.yaml``. Model providers accept tool
names ``[A-Za-z0-9_-]{1,64}`` only, so each tool is registered under its safe name
(``mnote_page_get``) and mapped back to the canonical ``mnote.page.get`` on the way to
the daemon. Handlers return the daemon's response envelope as a JSON string and never
raise: a daemon that is down is an answer too.

The agent authenticates with ``MNOTE_TOKEN`` (from ``mnote grant create``); without it
the plugin registers nothing, unless ``MNOTE_AS_OWNER=1`` says to act as the owner. The
daemon is found as every client finds it (``MNOTED_SOCKET``, ``XDG_RUNTIME_DIR``, else
the path the daemon recorded in the user's config folder).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Callable
from typing import Any

from mnoted.client.client import Client, Unreachable
from mnoted.contract.envelope import readable_json
from mnoted.contract.tools import TOOLS, ToolSpec, lookup
from mnoted.integrations.tooling import agent_schema, call_body

TOOLSET = "mnote"
_SESSION = f"hermes_{uuid.uuid4().hex[:12]}"
log = logging.getLogger("mnoted.hermes")


def _error(spec: ToolSpec, code: str, message: str, hint: str) -> str:
    return json.dumps(
        {
            "ok": False,
            "toolName": spec.name,
            "toolCallId": None,
            "traceId": None,
            "result": None,
            "audit": {"effect": "none"},
            "error": {"code": code, "message": message, "hint": hint},
        }
    )


def _token() -> str | None:
    """The agent's token; None with ``MNOTE_AS_OWNER=1`` (the client then uses the owner's)."""
    return os.environ.get("MNOTE_TOKEN") or None


def _client() -> Client:
    return Client(token=_token())


class PluginClient:
    """The plugin's one client, shared by its handlers (its kept connections serve every
    call); made when first needed, and made again after the daemon could not be reached,
    so the next call finds the socket and the token anew (a daemon restarted elsewhere)."""

    def __init__(self, factory: Callable[[], Client] = _client) -> None:
        self._factory = factory
        self._client: Client | None = None
        self._lock = threading.Lock()

    def get(self) -> Client:
        with self._lock:
            if self._client is None:
                self._client = self._factory()
            return self._client

    def drop(self, client: Client) -> None:
        """Forget ``client`` after a failure (unless another call already replaced it)."""
        with self._lock:
            if self._client is not client:
                return
            self._client = None
        client.close()


def make_handler(spec: ToolSpec, clients: PluginClient) -> Callable[..., str]:
    def handler(args: dict[str, Any] | None = None, **context: Any) -> str:
        client: Client | None = None
        try:
            call_id = context.get("tool_call_id")
            body = call_body(
                spec,
                dict(args or {}),
                session=str(context.get("session_id") or _SESSION),
                tool_call_id=str(call_id) if call_id else None,
            )
            client = clients.get()
            _status, response = client.request("POST", "/v1/tools/call", body)
            return readable_json(response)[0]
        except Unreachable as exc:
            if client is not None:
                clients.drop(client)
            return _error(
                spec, "mnote_daemon_unreachable", str(exc), "Start mnoted, or set MNOTED_SOCKET."
            )
        except Exception as exc:  # a Hermes tool handler must never raise
            return _error(
                spec, "mnote_internal_error", f"{type(exc).__name__}: {exc}", "See the daemon log."
            )

    handler.__name__ = spec.safe_name
    return handler


def offered(client: Client) -> list[ToolSpec]:
    """The tools this token may use, as the daemon's manifest says; every declared tool
    if the daemon cannot be asked now (it still refuses, per call, what the token lacks)."""
    try:
        status, manifest = client.request("GET", "/v1/tools")
    except Unreachable:
        return list(TOOLS.values())
    if status != 200:
        return []
    specs = []
    for entry in manifest.get("tools", []):
        spec = lookup(str(entry.get("name")))
        if spec is not None and entry.get("availability", {}).get("enabled"):
            specs.append(spec)
    return specs


def register(ctx: Any) -> None:
    """Hermes entry point: register the token's tools under their model-safe names."""
    if _token() is None and os.environ.get("MNOTE_AS_OWNER") != "1":
        log.warning(
            "mnote: no tools registered: set MNOTE_TOKEN to a token from `mnote grant create`"
            " (or MNOTE_AS_OWNER=1 to act as the owner)"
        )
        return
    clients = PluginClient()
    for spec in offered(clients.get()):
        ctx.register_tool(
            name=spec.safe_name,
            toolset=TOOLSET,
            schema={
                "name": spec.safe_name,
                "description": f"{spec.description} (mnoted tool {spec.name})",
                "parameters": agent_schema(spec),
            },
            handler=make_handler(spec, clients),
            description=spec.description,
            emoji="📝",
        )
