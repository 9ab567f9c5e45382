"""The answer of every call: its ``audit`` (built here and nowhere else) and its envelope.

A write's audit carries the call's seed-004 header (:mod:`.provenance`); a read's does not,
so a read's answer may be kept for another caller (:mod:`.readcache`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mnoted.contract.envelope import Audit, Effect, ErrorBody, ToolResponse
from mnoted.contract.tools import lookup
from mnoted.errors import InternalError, LockBusy, MnoteError, StorageError, WorkspaceInvalid
from mnoted.service import readcache
from mnoted.service.actors import Actor
from mnoted.service.calls import Call

log = logging.getLogger("mnoted.calls")


def audit(
    effect: Effect,
    workspace_id: str | None,
    *,
    call: Call | None = None,
    document_id: str | None = None,
    revision: str | None = None,
    command_id: str | None = None,
    changed: list[str] | None = None,
    command: str | None = None,
    rebased: bool | None = None,
    replayed: bool | None = None,
) -> Audit:
    """What a call did (seed 000 §3, seed 004 §6): with ``call``, who made it and, for a
    write, its input header."""
    made = Audit(
        effect=effect,
        commandId=command_id,
        workspaceId=workspace_id,
        documentId=document_id,
        revision=revision,
        changedBlockIds=list(changed or ()),
        commandName=command,
        rebased=rebased,
        replayed=replayed,
    )
    return made if call is None else _stamp(made, call)


def replayed(call: Call, kept: dict[str, Any]) -> Audit:
    """The audit of a write's kept answer, given again to a retry of it."""
    return _stamp(Audit.model_validate({**kept, "replayed": True}), call)


def _stamp(made: Audit, call: Call) -> Audit:
    made.actorId = call.actor.actor_id
    if call.spec.writes:  # (seed 004 §6's command record; a read's answer may be kept)
        for key, value in call.header.items():
            setattr(made, key, value)
    return made


def ok(call: Call, result: dict[str, Any], made: Audit) -> ToolResponse:
    """The envelope of a call that succeeded."""
    return ToolResponse(
        ok=True,
        toolName=call.spec.name,
        toolCallId=call.request.toolCallId,
        traceId=call.request.traceId,
        result=result,
        audit=made,
    )


def encoded(response: ToolResponse) -> bytes:
    """The encoded ``"result": ..., "audit": ...`` of a successful answer."""
    wire = response.to_wire()
    return readcache.encode(wire["result"], wire["audit"])


def _log_failure(name: str, exc: MnoteError) -> None:
    """Name in the daemon's log the failures that are its operator's business, not the
    caller's: a bug (with its traceback), the disk, a Git lock or a repository state. An
    error a client caused (arguments, conflicts, permissions) is only its answer."""
    call = name or "a call"
    if isinstance(exc, InternalError):
        log.error("%s failed: %s", call, exc.message, exc_info=exc.__cause__)
    elif isinstance(exc, StorageError):
        log.warning("%s failed: %s", call, exc.message)
    elif isinstance(exc, LockBusy | WorkspaceInvalid):
        log.info("%s refused: %s", call, exc.message)


def failure(
    raw: Any, exc: MnoteError, actor: Actor | None = None, served: str | None = None
) -> ToolResponse:
    """The response to a call that failed with ``exc``; ``audit.workspaceId`` is the
    workspace the call named, else its token's, else ``served`` (the one that ran it)."""
    fields = raw if isinstance(raw, Mapping) else {}
    name = str(fields.get("toolName", ""))
    _log_failure(name, exc)
    spec = lookup(name)
    named = _str(fields.get("workspaceId", fields.get("workspace_id")))
    if named is None and actor is not None:
        named = actor.workspace_id
    return ToolResponse(
        ok=False,
        toolName=spec.name if spec else name or "",
        toolCallId=_str(fields.get("toolCallId", fields.get("tool_call_id"))),
        traceId=_str(fields.get("traceId", fields.get("trace_id"))),
        result=None,
        audit=audit(
            "none",
            named if named is not None else served,
            document_id=_str(fields.get("documentId", fields.get("document_id"))),
        ),
        error=ErrorBody(**exc.to_dict()),
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
