"""The Hermes plugin: every ``mnote.*`` tool as a native Hermes tool.

Hermes loads it through the ``hermes_agent.plugins`` entry point once it is listed
under ``plugins: enabled:`` in ``~/.hermes/config.yaml``. Model providers accept tool
names ``[A-Za-z0-9_-]{1,64}`` only, so each tool is registered under its safe name
(``mnote_page_get``) and mapped back to the canonical ``mnote.page.get`` on the way to
the daemon. Handlers return the daemon's response envelope as a JSON string and never
raise: a daemon that is down is an answer too.

The daemon is found through ``MNOTED_SOCKET`` (default: the user's runtime folder)
and the agent authenticates with ``MNOTE_TOKEN`` (from ``mnote grant create``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from mnoted.cli.client import Client, Unreachable
from mnoted.contract.envelope import readable_json
from mnoted.contract.tools import TOOLS, ToolSpec
from mnoted.integrations.tooling import agent_schema, split_arguments

TOOLSET = "mnote"
_SESSION = f"hermes_{uuid.uuid4().hex[:12]}"


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


def make_handler(
    spec: ToolSpec, client_factory: Callable[[], Client] = Client
) -> Callable[..., str]:
    def handler(args: dict[str, Any] | None = None, **context: Any) -> str:
        try:
            envelope, tool_args = split_arguments(spec, dict(args or {}))
            call_id = uuid.uuid4().hex[:16]
            body = {
                "toolName": spec.name,
                "sessionId": str(context.get("session_id") or _SESSION),
                "runId": str(context.get("run_id") or f"run_{call_id}"),
                "toolCallId": str(context.get("tool_call_id") or f"call_{call_id}"),
                "traceId": f"trace_{call_id}",
                **({"idempotencyKey": f"idem_{call_id}"} if spec.writes else {}),
                **envelope,
                "args": tool_args,
            }
            _status, response = client_factory().request("POST", "/v1/tools/call", body)
            return readable_json(response)[0]
        except Unreachable as exc:
            return _error(
                spec, "mnote_daemon_unreachable", str(exc), "Start mnoted, or set MNOTED_SOCKET."
            )
        except Exception as exc:  # a Hermes tool handler must never raise
            return _error(
                spec, "mnote_internal_error", f"{type(exc).__name__}: {exc}", "See the daemon log."
            )

    handler.__name__ = spec.safe_name
    return handler


def register(ctx: Any) -> None:
    """Hermes entry point: register every declared tool under its model-safe name."""
    for spec in TOOLS.values():
        ctx.register_tool(
            name=spec.safe_name,
            toolset=TOOLSET,
            schema={
                "name": spec.safe_name,
                "description": f"{spec.description} (mnoted tool {spec.name})",
                "parameters": agent_schema(spec),
            },
            handler=make_handler(spec),
            description=spec.description,
            emoji="📝",
        )
