"""What agent runtimes see of a tool: its arguments schema without the ids a bridge fills in."""

from __future__ import annotations

import copy
from typing import Any

from mnoted.contract.envelope import ENVELOPE_FIELDS
from mnoted.contract.manifest import input_schema
from mnoted.contract.tools import ToolSpec

# Filled in by the bridge for every call; an agent may still send its own.
BRIDGE_FILLED = ("workspaceId", "sessionId", "runId", "toolCallId", "traceId", "idempotencyKey")
HIDDEN = ("capabilityScope",)


def agent_schema(spec: ToolSpec) -> dict[str, Any]:
    """The tool's input schema as an agent should fill it (the seed's flat form)."""
    schema = copy.deepcopy(input_schema(spec))
    for name in HIDDEN:
        schema["properties"].pop(name, None)
    schema["required"] = [
        r for r in schema["required"] if r not in BRIDGE_FILLED and r not in HIDDEN
    ]
    return schema


def split_arguments(
    spec: ToolSpec, arguments: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(envelope fields, tool arguments) of a flat argument object from an agent."""
    envelope = {k: v for k, v in arguments.items() if k in ENVELOPE_FIELDS and k != "args"}
    args = {k: v for k, v in arguments.items() if k not in ENVELOPE_FIELDS}
    return envelope, args
