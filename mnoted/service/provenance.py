"""Seed 004's input header kept with every command (§6): in the answer's audit and in the
commit's trailers.

``request_id``, ``actor_type`` and ``reason`` (``requestId``, ``actorType``, ``reason`` in
the camelCase envelope) are the caller's own words, kept as sent; ``target_block_id`` is the
block the call's block command names. When the owner's token names another ``actorId`` (a
client relaying a person's request, as seed 000's examples do), the call runs as the owner
and both are kept: the author is the owner, ``onBehalfOf`` the named actor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mnoted.store.message import ACTOR_TYPE, ON_BEHALF_OF, REASON, REQUEST_ID, TARGET_BLOCK_ID

if TYPE_CHECKING:
    from mnoted.contract.envelope import Audit
    from mnoted.service.executor import Call


def target_blocks(call: Call) -> list[str]:
    """The blocks the call's block commands name, in order (none for other tools)."""
    out: list[str] = []
    for op in getattr(call.args, "operations", None) or ():
        ident = getattr(op, "block_id", None) or getattr(op, "after_block_id", None)
        if isinstance(ident, str) and ident not in out:
            out.append(ident)
    return out


def on_behalf_of(call: Call) -> str | None:
    """The actor the owner's call names, when it is not the owner itself."""
    named = call.request.actorId
    if named is None or named == call.actor.actor_id:
        return None
    return named


def header(call: Call) -> dict[str, Any]:
    """The audit fields of the call's seed-004 header (absent ones left None)."""
    targets = target_blocks(call)
    return {
        "requestId": call.request.requestId,
        "actorType": call.request.actorType or call.actor.kind,
        "reason": call.request.reason,
        "targetBlockId": targets[0] if targets else None,
        "onBehalfOf": on_behalf_of(call),
    }


def fill(audit: Audit, call: Call) -> Audit:
    """``audit`` with the call's header fields set."""
    for key, value in header(call).items():
        setattr(audit, key, value)
    return audit


def trailers(call: Call) -> tuple[tuple[str, str], ...]:
    """The ``Mnote-*`` trailers of the header, for the call's commit."""
    head = header(call)
    pairs = [
        (REQUEST_ID, head["requestId"]),
        (ACTOR_TYPE, head["actorType"]),
        (REASON, head["reason"]),
        (ON_BEHALF_OF, head["onBehalfOf"]),
        *((TARGET_BLOCK_ID, ident) for ident in target_blocks(call)),
    ]
    return tuple((k, v) for k, v in pairs if v)
