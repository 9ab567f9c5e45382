"""File grants: the local-first path for agents that edit files with their own tools.

``mnote.file.grant`` hands an agent the absolute path of a page and remembers the
revision it was granted at; ``mnote.file.release`` commits what the agent changed, with
the grant's actor and trace trailers, after checking that nobody else committed the
page in between (if someone did, the release is a conflict and commits nothing: the
agent re-reads, merges, and releases again).

Edits the watcher sees under an open grant are committed as the grant holder's
(actor and trace ids), and the grant follows them, so a release after such
commits is not mistaken for somebody else's change.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from mnoted.core.commands import EditResult, changed_ids
from mnoted.core.page import parse_page
from mnoted.errors import Conflict, NotFound, PermissionDenied
from mnoted.service.actors import utc_iso
from mnoted.service.executor import Call, WritePlan, approval_required, handles
from mnoted.store import CommandMeta, Workspace

GRANTS = "grants"
GRANTS_BY_PATH = "grant_by_path"  # path -> the open grant's id, for the watcher


def _refuse_unreviewed(call: Call) -> None:
    """File grants and releases are refused where the caller's writes wait for a person:
    a release commits the file as it is on disk, so it cannot be held as a proposal."""
    if approval_required(call.actor, call.ws, call.spec):
        raise PermissionDenied(
            f"{call.spec.name} is not available while your writes wait for approval "
            f"(approvalMode {call.ws.config.approval_mode!r})",
            hint="Propose the change with mnote.doc.plan_update or a write tool: it becomes "
            "a review session the owner accepts.",
        )


@handles("mnote.file.grant")
def file_grant(call: Call) -> WritePlan:
    """Every check comes before the grant is kept: a refused grant leaves nothing behind."""
    _refuse_unreviewed(call)
    loaded = call.load()
    if not call.may_edit(loaded):
        raise PermissionDenied(
            f"{loaded.path} is protected (protectEditing); only the owner may change it",
            hint="Ask the owner to turn protectEditing off, or propose the change for review.",
        )
    base = call.request.baseRevision
    if base is not None and base != loaded.revision:
        raise Conflict(
            f"{loaded.path} changed since revision {base[:12]}; it is now at "
            f"{loaded.revision[:12]}, and a grant hands over the whole file",
            hint="Fetch the page again and ask for the grant on its current revision.",
            currentRevision=loaded.revision,
            baseRevision=base,
        )
    grant_id = "grant_" + secrets.token_hex(8)
    expires = call.now + call.args.ttlSeconds
    record = {
        "grantId": grant_id,
        "documentId": loaded.doc.document_id,
        "path": loaded.path,
        "revision": loaded.revision,
        "blob": loaded.blob,  # the blob the grant's holder last had committed
        "originBlob": loaded.blob,
        "actorId": call.actor.actor_id,
        "traceId": call.request.traceId,
        "sessionId": call.request.sessionId,
        "runId": call.request.runId,
        "expiresAt": expires,
    }
    if not call.request.dryRun:
        call.ws.sidecar.put(GRANTS, grant_id, json.dumps(record))
        call.ws.sidecar.put(GRANTS_BY_PATH, loaded.path, grant_id)
    plan = WritePlan(
        command=call.spec.command or "file.grant",
        changes=[],
        result={
            "grantId": grant_id,
            "documentId": loaded.doc.document_id,
            "path": loaded.path,
            "absolutePath": str(call.ws.root / loaded.path),
            "revision": loaded.revision,
            "expiresAt": utc_iso(expires),
        },
        loaded=loaded,
        document=loaded.doc,
    )
    return plan


def grant_meta(grant: dict[str, Any]) -> CommandMeta:
    """Commit metadata for edits made under ``grant``: its holder, its trace ids."""
    return CommandMeta(
        "file.edit",
        actor=grant["actorId"],
        trace_id=grant.get("traceId"),
        run_id=grant.get("runId"),
        session_id=grant.get("sessionId"),
    )


def read_grant(ws: Workspace, grant_id: str | None) -> dict[str, Any] | None:
    """A grant as it was recorded (expired or not), or None."""
    raw = ws.sidecar.get(GRANTS, grant_id) if grant_id else None
    return dict(json.loads(raw)) if raw else None


def active_grant(call: Call, grant_id: str) -> dict[str, Any]:
    grant = read_grant(call.ws, grant_id)
    if grant is None or (grant["actorId"] != call.actor.actor_id and not call.actor.is_owner):
        raise NotFound(
            f"no open grant {grant_id!r}", hint="Ask for a new grant with mnote.file.grant."
        )
    if grant["expiresAt"] <= call.now:
        raise PermissionDenied(f"grant {grant_id} has expired", hint="Ask for a new grant.")
    return grant


@handles("mnote.file.release")
def file_release(call: Call) -> WritePlan:
    _refuse_unreviewed(call)
    grant = active_grant(call, call.args.grantId)
    ws = call.ws
    doc = ws.resolve(grant["documentId"])
    if not call.may_see(doc.path):
        raise call.service.hidden(grant["documentId"], call.actor)
    head_blob = ws.blob_id(doc.path)
    if head_blob != grant["blob"]:
        raise Conflict(
            f"{doc.path} was committed by someone else after the grant; "
            "your edit was not committed",
            hint="Read the page again (mnote.page.get), merge your change into the file, "
            "and ask for a new grant to release it.",
            grantedRevision=grant["revision"],
            currentRevision=ws.revision_of(doc.path),
        )
    data = ws.read_disk(doc.path)
    head_data = ws.read_head(doc.path)
    origin_data = ws.read_blob(grant["originBlob"])
    if data is None or head_data is None or head_blob is None or origin_data is None:
        raise NotFound(f"{doc.path} is gone", hint="The file was deleted during the grant.")
    before = call.service.pages.page_for(ws, doc, grant["originBlob"], origin_data)
    current = call.service.pages.page_for(ws, doc, head_blob, head_data)
    after = parse_page(data, doc.path, previous=current)
    edit = EditResult("file.release", after, before, changed_ids(before, after))
    if not call.request.dryRun:
        ws.sidecar.delete(GRANTS, call.args.grantId)
        if ws.sidecar.get(GRANTS_BY_PATH, doc.path) == call.args.grantId:
            ws.sidecar.delete(GRANTS_BY_PATH, doc.path)
    return WritePlan(
        command=call.spec.command or "file.release",
        changes=[],
        from_disk=[doc.path] if data != head_data else [],
        result={
            "documentId": doc.document_id,
            "path": doc.path,
            "grantId": call.args.grantId,
            "grantedRevision": grant["revision"],
            "revision": ws.revision_of(doc.path),
        },
        edit=edit,
        document=doc,
    )
