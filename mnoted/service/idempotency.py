"""The service's one owner of idempotency records: a write's fingerprint, the check before
it plans, the answer kept once it landed, and the replay of a retry.

The store keeps the records (:class:`mnoted.store.facades.Idempotency`, scoped to the
actor); nothing else in the service reads or writes them.
"""

from __future__ import annotations

import hashlib
import json

from mnoted.contract.envelope import ToolResponse
from mnoted.errors import InvalidArguments, NotFound
from mnoted.service.answers import audit, encoded, ok, replayed
from mnoted.service.calls import Call, hidden
from mnoted.store import IdempotencyRecord


def request_hash(call: Call) -> str:
    """Fingerprint of what a write asks for (ids of the call itself left out)."""
    request = call.request
    body = {
        "tool": call.spec.name,
        "workspace": request.workspaceId,
        "document": request.documentId or request.path,
        "args": call.wire_args,
        "baseRevision": request.baseRevision,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def check(call: Call, key: str, digest: str) -> IdempotencyRecord | None:
    """The caller's record of ``key`` for this same request, None if the key is new (a
    different request with it raises ``mnote_tool_idempotency_conflict``)."""
    return call.ws.idempotency.check(key, digest, call.actor.actor_id)


def keep(call: Call, key: str, digest: str, response: ToolResponse) -> None:
    """Keep a write's answer with its idempotency record, to replay it as it was (and
    send it encoded as kept: one encoding for both)."""
    call.kept = encoded(response)
    call.ws.idempotency.record(key, digest, (b"{%s}" % call.kept).decode(), call.actor.actor_id)


def replay(call: Call, record: IdempotencyRecord, digest: str) -> ToolResponse:
    """The answer to a write retried with its idempotency key: nothing is written again.

    The answer kept with the record, or, when the first try landed but its answer was
    lost (an I/O error after the commit, a crash, a group completed from its journal),
    one made from its commit, then kept for later retries. The record is the caller's
    own (keys are scoped to the actor); the grant is checked again on every path its
    commit touched, so a grant narrowed since refuses the replay like a missing page.
    """
    paths = [] if call.actor.is_owner else call.ws.paths_of_commit(record.commit)
    if not all(call.may_see(p) for p in paths):
        ref = call.request.documentId or call.request.path or getattr(call.args, "path", "")
        raise hidden(str(ref), call.actor)
    if record.result_json:
        stored = json.loads(record.result_json)
        return ok(call, stored["result"], replayed(call, stored["audit"]))
    ws, spec = call.ws, call.spec
    try:
        document_id: str | None = ws.resolve(call.document_ref).document_id
    except (NotFound, InvalidArguments):
        document_id = None
    command = spec.command or spec.name
    result = {
        "commandName": command,
        "dryRun": False,
        "revision": record.commit,
        "documentId": document_id,
        "warnings": ["this idempotency key was applied before; nothing new was written"],
    }
    made = audit(
        "write",
        ws.workspace_id,
        call=call,
        document_id=document_id,
        revision=record.commit,
        command_id=record.command_id,
        command=command,
        replayed=True,
    )
    response = ok(call, result, made)
    keep(call, record.key, digest, response)
    return response
