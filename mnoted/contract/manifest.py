"""The tool manifest (seed 003 §5.2) and the scope rule, both derived from the declarations."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from mnoted.contract.tools import TOOLS, ToolSpec

MANIFEST_SCHEMA = "mnote.ai_tool_manifest.v1"

_ENVELOPE_PROPS: dict[str, dict[str, Any]] = {
    "workspaceId": {"type": "string", "description": "workspace id (see GET /v1/workspaces)"},
    "documentId": {"type": "string", "description": "documentId, or a workspace-relative path"},
    "sessionId": {
        "type": "string",
        "description": "the agent's conversation, as its runtime names it (for a review "
        "tool in the flat form, session_id: sessionId is then the review's id)",
    },
    "runId": {"type": "string", "description": "the agent run this call belongs to"},
    "toolCallId": {"type": "string", "description": "the runtime's id of this tool call"},
    "traceId": {"type": "string", "description": "a trace id, kept in the commit's trailers"},
    "idempotencyKey": {
        "type": "string",
        "description": "same key + same request replays the result",
    },
    "dryRun": {"type": "boolean", "description": "true: return the plan and diff, write nothing"},
    "baseRevision": {
        "type": "string",
        "description": "revision you read; a stale base on changed blocks is a conflict",
    },
    "capabilityScope": {
        "type": "array",
        "items": {"type": "string"},
        "description": "scopes the caller means to use (e.g. page.write); the call is refused "
        "if they do not cover the tool's",
    },
}


def scope_covers(required: Iterable[str], granted: Collection[str]) -> bool:
    """Whether ``granted`` scopes cover ``required`` (a write scope covers its read scope)."""
    for need in required:
        if need in granted:
            continue
        prefix, _, kind = need.rpartition(".")
        if kind == "read" and f"{prefix}.write" in granted:
            continue
        return False
    return True


def input_schema(spec: ToolSpec) -> dict[str, Any]:
    """The flat JSON Schema of seed 000: envelope fields and arguments side by side.

    Where an argument has an envelope field's name (a review tool's ``sessionId``,
    ``page.create``'s ``path``), the argument's entry is the one shown: in the flat form
    that name is the argument (docs/protocol.md)."""
    args = spec.args.model_json_schema()
    props: dict[str, Any] = {}
    for name in ("workspaceId", "documentId", "sessionId", "runId", "toolCallId", "traceId"):
        if name != "documentId" or spec.needs_document or spec.optional_document:
            props[name] = dict(_ENVELOPE_PROPS[name])
    if spec.writes:
        for name in ("idempotencyKey", "dryRun", "baseRevision"):
            props[name] = dict(_ENVELOPE_PROPS[name])
    props["capabilityScope"] = dict(_ENVELOPE_PROPS["capabilityScope"])
    arg_props = args.get("properties", {})
    if "sessionId" in arg_props:  # the call's own session, by the envelope's alias
        props["session_id"] = dict(_ENVELOPE_PROPS["sessionId"])
    props.update(arg_props)
    required = [f for f in spec.required_fields if f not in arg_props]
    schema: dict[str, Any] = {
        "type": "object",
        "required": [*required, *args.get("required", [])],
        "properties": props,
        "additionalProperties": False,
    }
    if "$defs" in args:
        schema["$defs"] = args["$defs"]
    return schema


def args_schema(spec: ToolSpec) -> dict[str, Any]:
    """The arguments alone (what MCP clients and model providers are shown)."""
    return spec.args.model_json_schema()


def output_schema(spec: ToolSpec) -> dict[str, Any]:
    return spec.result.model_json_schema(by_alias=True)


def availability(
    spec: ToolSpec, disabled: Collection[str], scopes: Collection[str] | None
) -> dict[str, Any]:
    """Whether the caller may use the tool here, and if not, why (the executor says the same)."""
    if spec.name in disabled:
        return {"enabled": False, "unsupportedReason": "disabled in this workspace's profile"}
    if scopes is not None and spec.owner_only:
        return {"enabled": False, "unsupportedReason": "only the workspace owner may use it"}
    if scopes is not None and not scope_covers(spec.scopes, scopes):
        return {
            "enabled": False,
            "unsupportedReason": f"needs scope {', '.join(spec.scopes)}",
        }
    return {"enabled": True, "unsupportedReason": ""}


REVIEW_TOOLS = frozenset(
    {
        "mnote.doc.plan_update",
        "mnote.review.accept",
        "mnote.review.reject",
        "mnote.review.retry",
        "mnote.review.abort",
    }
)
"""Writes that act on review sessions themselves: never held for approval."""


def held_for_approval(spec: ToolSpec, approval_mode: str, *, owner: bool) -> bool:
    """Whether a write with ``spec`` waits for a person (the one approval rule, seed 003
    §5.2): an agent's writes under ``approvalMode = "required"`` all wait, under
    ``"review"`` those declared ``requiresApproval``, under ``"yolo"`` none; the owner's
    never (the owner is the person who would review them), nor the review tools' own."""
    if owner or not spec.writes or spec.name in REVIEW_TOOLS:
        return False
    return approval_mode == "required" or (
        approval_mode == "review" and spec.annotations.requiresApproval
    )


def effective_annotations(
    spec: ToolSpec, approval_mode: str | None, scopes: Collection[str] | None
) -> dict[str, Any]:
    """The tool's annotations as they hold for this caller in this workspace: whether its
    calls wait for a person (:func:`held_for_approval`; ``scopes`` None is the owner).
    Without ``approval_mode`` the declaration is shown."""
    out = spec.annotations.model_dump()
    if approval_mode is None or not spec.writes or spec.name in REVIEW_TOOLS:
        return out
    held = held_for_approval(spec, approval_mode, owner=scopes is None)
    out["requiresApproval"] = held
    out["approvalMode"] = approval_mode if held else "none"
    return out


def tool_entry(
    spec: ToolSpec,
    disabled: Collection[str] = (),
    scopes: Collection[str] | None = None,
    approval_mode: str | None = None,
) -> dict[str, Any]:
    return {
        "name": spec.name,
        "safeName": spec.safe_name,
        "description": spec.description,
        "command": spec.command,
        "scopes": list(spec.scopes),
        "inputSchema": input_schema(spec),
        "outputSchema": output_schema(spec),
        "annotations": effective_annotations(spec, approval_mode, scopes),
        "availability": availability(spec, disabled, scopes),
    }


def manifest(
    disabled: Collection[str] = (),
    scopes: Collection[str] | None = None,
    approval_mode: str | None = None,
    caller: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest for one caller in one workspace; ``scopes`` None means the owner.

    With ``approval_mode`` (the workspace's) each tool's annotations say whether this
    caller's calls wait for a person; ``caller`` (its actor, scopes and path grants) is
    shown as ``permissions``."""
    out: dict[str, Any] = {
        "schema": MANIFEST_SCHEMA,
        "tools": [tool_entry(spec, disabled, scopes, approval_mode) for spec in TOOLS.values()],
    }
    if approval_mode is not None:
        out["approvalMode"] = approval_mode
    if caller is not None:
        out["permissions"] = caller
    return out
