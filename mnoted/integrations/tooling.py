"""What agent runtimes see of a tool, and how a bridge turns a model's call into an envelope.

A model fills in a tool's own arguments, plus ``documentId`` where the tool works on a
page and ``dryRun`` / ``baseRevision`` where it writes; nothing else. The call's ids
(``sessionId``, ``runId``, ``toolCallId``, ``traceId``, ``idempotencyKey``) come from the
runtime or the bridge, and the actor from the token. The bridge sends the nested form
(every argument in ``args``), so an argument named like an envelope field (a review
tool's ``sessionId``, ``page.create``'s ``path``) is never taken for one.
"""

from __future__ import annotations

import copy
import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

from mnoted.contract.tools import TOOLS, ToolSpec

DOCUMENT_PROP: dict[str, Any] = {
    "type": "string",
    "description": "the page: its documentId, or its workspace-relative path (notes/plan.md)",
}
WRITE_PROPS: dict[str, dict[str, Any]] = {
    "dryRun": {
        "type": "boolean",
        "default": False,
        "description": "true: answer with the diff of what would change and write nothing; "
        "default false (the write is applied)",
    },
    "baseRevision": {
        "type": "string",
        "description": "the revision you read the page at; if a block this edit touches "
        "changed since, the write is refused (optional)",
    },
}


def page_fields(spec: ToolSpec) -> tuple[str, ...]:
    """The envelope fields a model may fill in for this tool."""
    page = ("documentId",) if spec.needs_document or spec.optional_document else ()
    return (*page, *(WRITE_PROPS if spec.writes else ()))


for _spec in TOOLS.values():  # a model's field names must mean one thing each
    assert not set(page_fields(_spec)) & set(_spec.args.model_fields), _spec.name


def agent_schema(spec: ToolSpec) -> dict[str, Any]:
    """The JSON Schema a model fills in: the page, the tool's arguments, the write flags."""
    args = copy.deepcopy(spec.args.model_json_schema())
    props: dict[str, Any] = {}
    required: list[str] = []
    if spec.needs_document or spec.optional_document:
        props["documentId"] = dict(DOCUMENT_PROP)
    if spec.needs_document:
        required.append("documentId")
    props.update(args.get("properties", {}))
    required += args.get("required", [])
    if spec.writes:
        props.update(copy.deepcopy(WRITE_PROPS))
    schema: dict[str, Any] = {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }
    if "$defs" in args:
        schema["$defs"] = args["$defs"]
    return schema


def idempotency_key(spec: ToolSpec, tool_call_id: str) -> str:
    """The key of a write, made from the runtime's id of the call: a retry of the same call
    (same id) replays the first answer instead of writing again."""
    digest = hashlib.sha256(f"{spec.name}\0{tool_call_id}".encode()).hexdigest()[:32]
    return f"call_{digest}"


def call_body(
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    *,
    session: str,
    tool_call_id: str | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The nested envelope of a model's call: the page and write flags it gave at the top,
    every other field it gave in ``args`` (an unknown one is refused there, by name).

    ``tool_call_id`` is the runtime's id of the call, where it has one: the write's
    idempotency key is derived from it. Without one, each call gets fresh ids.
    """
    args = dict(arguments)
    envelope = {name: args.pop(name) for name in page_fields(spec) if name in args}
    call_id = uuid.uuid4().hex[:16]
    body: dict[str, Any] = {
        "toolName": spec.name,
        "sessionId": session,
        "runId": run_id or f"run_{call_id}",
        "toolCallId": tool_call_id or f"call_{call_id}",
        "traceId": f"trace_{call_id}",
        **envelope,
        "args": args,
    }
    if spec.writes:
        body.setdefault("dryRun", False)
        body["idempotencyKey"] = (
            idempotency_key(spec, tool_call_id) if tool_call_id else f"idem_{call_id}"
        )
    return body
