"""The request and response envelopes of every ``mnote.*`` tool call (seed 000 §2-3).

Field names are the seed's camelCase; the seed-004 header names
(``document_id``, ``request_id``, ``trace_id``, ``actor_id``, ``actor_type``,
``reason``) are accepted as aliases. Tool arguments travel in ``args``; the
flat form of the seed's schemas (``content`` next to ``documentId``) is
accepted too and folded into ``args`` by the executor, where a top-level name the
tool's arguments declare is the tool's argument (docs/protocol.md, "Envelope and
arguments").

Types are strict: a boolean is a JSON boolean (``"dryRun": "no"`` or ``0`` is refused,
not read as false), a string a JSON string.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import pydantic_core
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

Effect = Literal["read", "write", "dry_run", "none"]

ENVELOPE_FIELDS = frozenset(
    {
        "toolName",
        "workspaceId",
        "documentId",
        "path",
        "actorId",
        "actorType",
        "sessionId",
        "runId",
        "toolCallId",
        "traceId",
        "requestId",
        "idempotencyKey",
        "dryRun",
        "capabilityScope",
        "baseRevision",
        "reason",
        "args",
    }
)
"""Every field of the envelope; anything else in a flat call is a tool argument."""

_Id = Field(default=None, min_length=1, max_length=256)


class ToolRequest(BaseModel):
    """One tool call as a client sends it."""

    model_config = ConfigDict(
        extra="allow", populate_by_name=True, str_strip_whitespace=False, strict=True
    )

    toolName: str = Field(
        min_length=1, max_length=128, validation_alias=AliasChoices("toolName", "tool_name")
    )
    workspaceId: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        validation_alias=AliasChoices("workspaceId", "workspace_id"),
    )
    documentId: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        validation_alias=AliasChoices("documentId", "document_id"),
    )
    path: str | None = Field(default=None, min_length=1, max_length=4096)
    actorId: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        validation_alias=AliasChoices("actorId", "actor_id"),
    )
    actorType: str | None = Field(
        default=None, max_length=64, validation_alias=AliasChoices("actorType", "actor_type")
    )
    sessionId: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        validation_alias=AliasChoices("sessionId", "session_id"),
    )
    runId: str | None = Field(
        default=None, min_length=1, max_length=256, validation_alias=AliasChoices("runId", "run_id")
    )
    toolCallId: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        validation_alias=AliasChoices("toolCallId", "tool_call_id"),
    )
    traceId: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        validation_alias=AliasChoices("traceId", "trace_id"),
    )
    requestId: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        validation_alias=AliasChoices("requestId", "request_id"),
    )
    idempotencyKey: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        validation_alias=AliasChoices("idempotencyKey", "idempotency_key"),
    )
    dryRun: bool | None = Field(default=None, validation_alias=AliasChoices("dryRun", "dry_run"))
    capabilityScope: list[str] | None = Field(
        default=None,
        max_length=64,
        validation_alias=AliasChoices("capabilityScope", "capability_scope"),
    )
    baseRevision: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        validation_alias=AliasChoices("baseRevision", "base_revision"),
    )
    reason: str | None = Field(default=None, max_length=2000)
    args: dict[str, Any] = Field(default_factory=dict)

    def extras(self) -> dict[str, Any]:
        """Top-level fields that are not envelope fields (the seed's flat argument form)."""
        return dict(self.model_extra or {})


class ErrorBody(BaseModel):
    code: str
    message: str
    hint: str = ""
    details: dict[str, Any] | None = None


class Audit(BaseModel):
    """What a call did, for the caller's own records (seed 000 §3, seed 004 §6)."""

    effect: Effect
    commandId: str | None = None
    workspaceId: str | None = None
    documentId: str | None = None
    revision: str | None = None
    changedBlockIds: list[str] = Field(default_factory=list)
    actorId: str | None = None
    commandName: str | None = None
    rebased: bool | None = None
    replayed: bool | None = None
    # seed 004 §6: the input header, kept as sent (service.provenance)
    requestId: str | None = None
    actorType: str | None = None
    reason: str | None = None
    targetBlockId: str | None = None
    onBehalfOf: str | None = None


class ToolResponse(BaseModel):
    """The answer to every call: HTTP 200 for tool errors too, with ``ok: false``."""

    ok: bool
    toolName: str
    toolCallId: str | None = None
    traceId: str | None = None
    result: Any = None
    audit: Audit
    error: ErrorBody | None = None

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=False)


def wire_bytes(value: Any) -> bytes:
    """How answers go on the wire: compact JSON in UTF-8, made by pydantic-core (in C,
    and it leaves non-ASCII text unescaped, which the json module would escape); text
    pydantic-core cannot encode (a lone surrogate, from a file that is not UTF-8) goes
    through the json module, escaped."""
    try:
        return pydantic_core.to_json(value)
    except pydantic_core.PydanticSerializationError:
        return json.dumps(value, separators=(",", ":")).encode()


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def readable_json(value: Any, indent: int | None = None) -> tuple[str, bool]:
    """JSON for a person or a model to read, and whether it escaped anything: text in any
    script as it is, except lone surrogates (the bytes of a file that are not UTF-8, as the
    daemon sends them), which no UTF-8 output can carry: those are written as escapes."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    text, escaped = _LONE_SURROGATE.subn(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text, escaped > 0
