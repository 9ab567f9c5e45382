"""Seed 004's input header kept with every command (§6): in the answer's audit and in the
commit's trailers.

``request_id``, ``actor_type`` and ``reason`` (``requestId``, ``actorType``, ``reason`` in
the camelCase envelope) are the caller's own words, kept as sent; ``target_block_id`` is the
block the call's block command names. When the owner's token names another ``actorId`` (a
client relaying a person's request, as seed 000's examples do), the call runs as the owner
and both are kept: the author is the owner, ``onBehalfOf`` the named actor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mnoted.store.message import ACTOR_TYPE, ON_BEHALF_OF, REASON, REQUEST_ID, TARGET_BLOCK_ID

if TYPE_CHECKING:
    from mnoted.service.calls import Call


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
    targets = call.targets
    return {
        "requestId": call.request.requestId,
        "actorType": call.request.actorType or call.actor.kind,
        "reason": call.request.reason,
        "targetBlockId": targets[0] if targets else None,
        "onBehalfOf": on_behalf_of(call),
    }


def trailers(call: Call) -> tuple[tuple[str, str], ...]:
    """The ``Mnote-*`` trailers of the call's header, for its commit."""
    return trailers_of(call.header, call.targets)


def trailers_of(
    head: Mapping[str, Any], targets: Sequence[str] | None = None
) -> tuple[tuple[str, str], ...]:
    """The ``Mnote-*`` trailers of a header as :func:`header` makes it (the one map from
    header to trailers): ``targets`` every block the call names, by default the header's
    ``targetBlockId`` (a review session keeps the header, and its accept commits it)."""
    if targets is None:
        targets = [head["targetBlockId"]] if head.get("targetBlockId") else []
    pairs = [
        (REQUEST_ID, head.get("requestId")),
        (ACTOR_TYPE, head.get("actorType")),
        (REASON, head.get("reason")),
        (ON_BEHALF_OF, head.get("onBehalfOf")),
        *((TARGET_BLOCK_ID, ident) for ident in targets),
    ]
    return tuple((k, str(v)) for k, v in pairs if v)
