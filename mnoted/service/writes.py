"""The write path: plan → approval gate → landing → answer, each step once per write.

Admission (who, where, which tool, its arguments) is the executor's; then a write is
checked against the caller's grants and its idempotency key (:mod:`.idempotency`), planned
by its handler, guarded (``protectEditing``, the base revision), and either held as a review
session (the approval gate: :func:`mnoted.contract.manifest.held_for_approval`), answered
as a dry run, or landed as one commit, read back and answered. A write that lands is
recorded by its commit and its trailers alone; review records are the review sessions'.
"""

from __future__ import annotations

import re
from typing import Any

from mnoted.contract.envelope import Audit, ToolResponse
from mnoted.core.page import Page
from mnoted.errors import BaseChanged, Conflict, PermissionDenied, StorageError
from mnoted.service import idempotency, provenance, review_sessions, visibility
from mnoted.service.answers import audit, ok
from mnoted.service.calls import Call, Handler, WritePlan
from mnoted.store import CommandMeta, CommitResult, WorkspaceApi, Write

_REPLANS = 3
"""Plans of one write when the page keeps changing between its read and its commit."""

REVIEW_DRAFTS = frozenset({"mnote.doc.apply_block_ops", "mnote.doc.markdown_edit"})
"""Writes whose dry run also returns the review session it would make (as plan_update)."""


def write(call: Call, handler: Handler) -> ToolResponse:
    """Run an admitted write call: its answer (an error raises)."""
    key = call.request.idempotencyKey
    digest = idempotency.request_hash(call)
    call.authorize_request()  # (before the actor's stored answers are looked at)
    if key and not call.request.dryRun:
        record = idempotency.check(call, key, digest)
        if record is not None:
            return idempotency.replay(call, record, digest)
    for _ in range(_REPLANS - 1):
        try:
            return _plan_and_land(call, handler, key, digest)
        except BaseChanged:
            # Someone saved the page between this call's read and its commit (the store
            # committed their save first): plan the write again on what they saved, so
            # their edit stays and the call still applies (or says why not).
            call.loaded.clear()
    return _plan_and_land(call, handler, key, digest)


def _plan_and_land(call: Call, handler: Handler, key: str | None, digest: str) -> ToolResponse:
    plan = handler(call)
    if isinstance(plan, dict):  # a review tool: its answer is the session
        return session_answer(call, plan, key, digest)
    return _gate_and_land(call, plan, key, digest)


def _gate_and_land(call: Call, plan: WritePlan, key: str | None, digest: str) -> ToolResponse:
    ws, request = call.ws, call.request
    if plan.loaded is not None:
        _guard_page(call, plan)
    held = bool(plan.changes) and call.held
    if plan.changes and (request.dryRun or held):
        ws.check_writable(plan.changes)  # (refused as the write would be; apply checks it)
    preview = review_sessions.preview(call.spec.name, plan)
    if held and not request.dryRun:
        session = _propose(call, plan, preview)
        return session_answer(call, session, None, digest)
    result = _result(call, plan, preview)
    changed = list(plan.edit.changed_block_ids) if plan.edit else []
    document_id = plan.document.document_id if plan.document else None
    if request.dryRun or not (plan.changes or plan.from_disk):
        result.setdefault("revision", plan.loaded.revision if plan.loaded else None)
        if not request.dryRun and plan.result.get("commandId"):
            return ok(call, result, _committed_before(call, plan, result, changed))
        made = audit(
            "dry_run" if request.dryRun else "none",
            ws.workspace_id,
            call=call,
            document_id=document_id,
            revision=result["revision"],
            changed=changed,
            command=plan.command,
        )
        return ok(call, result, made)
    meta = _command_meta(call, plan, key, digest)
    if plan.from_disk:
        commit = ws.commit_external(plan.from_disk, meta=meta)
        if commit is None:  # the watcher committed it for the grant in the meantime
            return ok(call, result, _committed_before(call, plan, result, changed))
    else:
        commit = land(ws, plan, meta)
        if commit.planned is not None:
            result.setdefault("warnings", []).append(
                f"saved by someone else as it landed (commit {commit.parent}): the write "
                f"was applied again on their save, as commit {commit.commit}"
            )
    if commit.replayed:  # (the store's own check; the one before planning normally answers)
        record = idempotency.check(call, key, digest) if key else None
        if record is not None:
            return idempotency.replay(call, record, digest)
    if plan.after_commit is not None:
        result.update(plan.after_commit(ws, commit.commit))
    result["revision"] = commit.commit
    document_id = document_id or result.get("documentId")  # (a page just created)
    path = result.get("path") or (plan.document.path if plan.document else None)
    made = audit(
        "write",
        ws.workspace_id,
        call=call,
        document_id=document_id,
        revision=commit.commit,
        command_id=commit.command_id,
        changed=changed,
        command=plan.command,
        rebased=result.get("rebased") or None,
    )
    response = ok(call, result, made)
    if key:
        idempotency.keep(call, key, digest, response)
    landed(
        call,
        plan,
        commit,
        path=path,
        document_id=document_id,
        tool=call.spec.name,
        tool_call_id=request.toolCallId,
        trace_id=request.traceId,
        actor=call.actor.actor_id,
        externalCommit=commit.external_commit,
    )
    return response


def _propose(call: Call, plan: WritePlan, preview: dict[str, Any]) -> dict[str, Any]:
    """The review session of ``plan`` (kept, or only shown for a dry run)."""
    args = call.wire_args
    proposal = review_sessions.proposal_of(call.spec.name, args, plan)
    return review_sessions.propose(call, call.spec.name, args, proposal, plan, preview)


def _result(call: Call, plan: WritePlan, preview: dict[str, Any]) -> dict[str, Any]:
    """A write's result before it lands: the plan's own, its diff, and what a review
    preview shows (seed 003 §3.3: ``changedBlocks``, ``risk``, ``blocked``, ``warnings``);
    page.save's seed-000 summary; a dry run's review session (seed 003 §8 D)."""
    result = {"commandName": plan.command, "dryRun": bool(call.request.dryRun), **plan.result}
    result.setdefault("changedBlockIds", list(plan.edit.changed_block_ids) if plan.edit else [])
    if plan.edit is not None:
        result.setdefault("diff", plan.diff)
        result.setdefault("unifiedDiff", plan.edit.diff)
    for key in ("changedBlocks", "risk", "blocked"):
        result.setdefault(key, preview[key])
    result.setdefault("warnings", list(preview["warnings"]))  # (a landing may add its own)
    if call.request.dryRun and call.spec.name in REVIEW_DRAFTS and plan.edit is not None:
        result["reviewSession"] = _propose(call, plan, preview)  # (nothing is kept)
    if call.spec.name == "mnote.page.save" and plan.edit is not None:
        result.setdefault("diffSummary", save_summary(call.args.mode, result["diff"]))
    return result


def _command_meta(call: Call, plan: WritePlan, key: str | None, digest: str) -> CommandMeta:
    request = call.request
    return CommandMeta(
        plan.command,
        actor=call.actor.actor_id,
        trace_id=request.traceId,
        tool=call.spec.name,
        tool_call_id=request.toolCallId,
        run_id=request.runId,
        session_id=request.sessionId,
        idempotency_key=key,
        request_hash=digest,
        extra=provenance.trailers(call),
    )


def land(ws: WorkspaceApi, plan: WritePlan, meta: CommandMeta) -> CommitResult:
    """Commit ``plan``'s changes as one command, read back before it is reported."""
    commit = ws.apply(meta, plan.changes)
    if not commit.replayed:
        read_back(ws, plan, commit)
    return commit


def session_answer(
    call: Call, session: dict[str, Any], key: str | None, digest: str
) -> ToolResponse:
    """The answer of a call that produced a review session (and maybe, on accept, a commit)."""
    applied = session.get("applied") if session.get("state") == "applied" else None
    committed = bool(applied and applied.get("commandId"))
    made = audit(
        "write" if committed else ("dry_run" if call.request.dryRun else "none"),
        call.ws.workspace_id,
        call=call,
        document_id=session.get("documentId"),
        revision=(applied or {}).get("commit") or (session.get("base") or {}).get("revision"),
        command_id=applied.get("commandId") if committed and applied else None,
        changed=[c["blockId"] for c in (session.get("preview") or {}).get("changedBlocks", [])],
        command=call.spec.command,
    )
    response = ok(call, {**session, "reviewSessionId": session["sessionId"]}, made)
    if committed and key:
        idempotency.keep(call, key, digest, response)
    return response


def landed(
    call: Call,
    plan: WritePlan,
    commit: CommitResult,
    *,
    path: str | None,
    tool: str,
    tool_call_id: str | None,
    trace_id: str | None,
    actor: str,
    document_id: str | None = None,
    **extra: Any,
) -> None:
    """What follows every committed write: the page's ids kept for its new blob, the event.

    The ids are kept at once (a later command of the same group reads them); the event
    waits until the commit is durable. It names the page's path, so the event stream
    can hide it from agents whose grants do not cover it.
    """
    ws, service = call.ws, call.service
    if plan.edit is not None and plan.document is not None:
        blob = ws.blob_id(plan.document.path)
        if blob is not None:
            service.pages.remember_ids(ws, plan.document, blob, plan.edit.page)
    event = {
        "workspaceId": ws.workspace_id,
        "documentId": plan.document.document_id if plan.document else document_id,
        "path": path,
        "commit": commit.commit,
        "commandId": commit.command_id,
        "command": plan.command,
        "tool": tool,
        "toolCallId": tool_call_id,
        "traceId": trace_id,
        "actor": actor,
        **extra,
    }
    readers = visibility.readers_of(ws, path) + plan.paths
    event[visibility.READERS] = sorted(set(readers))
    ws.after_landing(lambda: service.events.publish("commit", **event))


def _guard_page(call: Call, plan: WritePlan) -> None:
    """protectEditing and the base revision, for a write to an existing page."""
    loaded = plan.loaded
    assert loaded is not None
    if not call.may_edit(loaded):
        raise PermissionDenied(
            f"{loaded.path} is protected (protectEditing); only the owner may change it",
            hint="Ask the owner to turn protectEditing off, or propose the change for review.",
        )
    base = call.request.baseRevision
    if base is None or base == loaded.revision or plan.edit is None:
        return
    before = call.service.pages.at_revision(call.ws, loaded.doc, base)
    touched = set(plan.edit.changed_block_ids)
    if before is None or not _untouched_since(before, loaded.page, touched):
        raise Conflict(
            f"{loaded.path} changed since revision {base[:12]} in the blocks this edit "
            "touches; "
            f"it is now at {loaded.revision[:12]}",
            hint="Fetch the page again and redo the edit on the current revision.",
            currentRevision=loaded.revision,
            baseRevision=base,
        )
    plan.result["rebased"] = True
    plan.result.setdefault("warnings", []).append(
        f"applied on revision {loaded.revision[:12]}: the page changed since "
        f"{base[:12]}, but not in the blocks this edit touches"
    )


def _untouched_since(before: Page, now: Page, touched: set[str]) -> bool:
    """Whether the blocks (and frontmatter) an edit touches are as they were at ``before``."""
    if before.frontmatter != now.frontmatter and not touched:
        return False
    for ident in touched:
        old = before.index.get(ident)
        new = now.index.get(ident)
        if old is None and new is None:
            continue  # created by this edit
        if old is None or new is None or old.signature() != new.signature():
            return False
    return True


def save_summary(mode: str, diff: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Seed 000's summary of a page.save, ``[{op: "append", blocks: 1}]``: one entry for
    the save's mode, counting the blocks it adds (append) or changes (replace)."""
    if mode == "append":
        return [{"op": "append", "blocks": sum(1 for d in diff if d["op"] == "insert")}]
    return [{"op": "replace", "blocks": len(diff)}]


def _committed_before(
    call: Call, plan: WritePlan, result: dict[str, Any], changed: list[str]
) -> Audit:
    """The audit of a file release whose edits the watcher had already committed for its
    grant: the command that holds them (the latest commit of the page)."""
    ws = call.ws
    path = plan.document.path if plan.document else plan.from_disk[0]
    entries = ws.history(path, limit=1)
    current = entries[0].commit if entries else ws.revision_of(path)
    command_id = plan.result.get("commandId") or (entries[0].command_id if entries else None)
    result["revision"] = current
    result["commandId"] = command_id
    return audit(
        "write" if command_id else "none",
        ws.workspace_id,
        call=call,
        document_id=plan.document.document_id if plan.document else None,
        revision=current,
        command_id=command_id,
        changed=changed,
        command=plan.command,
    )


def read_back(ws: WorkspaceApi, plan: WritePlan, commit: CommitResult) -> None:
    """Seed 003 §3.3: a write is reported applied only once its commit is read back and
    holds what was planned: each written path's bytes in the commit are the planned bytes
    (as Git stores them: line endings and ``$Id$`` cleaned), so the page aggregate read
    from them is the planned page. A mismatch is an error, never a silent success."""
    for change in plan.changes:
        if not isinstance(change, Write):
            continue
        found = ws.blob_at(commit.planned or commit.commit, change.path)
        if found is None or (
            found[1] != change.data and _as_stored(found[1]) != _as_stored(change.data)
        ):
            raise StorageError(
                f"read-back failed: commit {commit.commit[:12]} does not hold the bytes "
                f"planned for {change.path}",
                hint="Fetch the page and check it; make the write again if it is not there.",
                commit=commit.commit,
                path=change.path,
            )


def _as_stored(data: bytes) -> bytes:
    """``data`` with what Git's clean filters may change undone (CRLF, ``$Id$``)."""
    return re.sub(rb"\$Id:[^$\n]*\$", b"$Id$", data.replace(b"\r\n", b"\n"))
