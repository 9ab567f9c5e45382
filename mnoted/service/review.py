"""The review tools (seed 003 §5.5): propose, list, get, accept, reject, retry, abort, and
the page context a run freezes (§5.1).

Accepting re-reads the page: if it is no longer what the preview was made on, the session
goes ``stale`` and nothing is written; otherwise the original call is applied as one
commit naming the session, the original tool call and who accepted it. What a session is
and how one is made: :mod:`mnoted.service.review_sessions`.
"""

from __future__ import annotations

from typing import Any

from mnoted.contract.envelope import ToolRequest
from mnoted.contract.tools import TOOLS
from mnoted.core.views import conflict_key
from mnoted.errors import (
    InvalidArguments,
    InvalidTransition,
    MnoteError,
    NotFound,
    PermissionDenied,
    Stale,
    TargetOutOfScope,
)
from mnoted.service import idempotency, provenance, writes
from mnoted.service.actors import Actor
from mnoted.service.calls import HANDLERS, Call, WritePlan, context_of, handles
from mnoted.service.review_sessions import (
    STATES,
    TRANSITIONS,
    base_of,
    plan_for,
    preview,
    propose,
    set_state,
    store_of,
)
from mnoted.store import CommandMeta
from mnoted.store.reviews import ReviewStore


def _session(call: Call) -> tuple[ReviewStore, dict[str, Any]]:
    store = store_of(call.service, call.ws)
    session = store.get(call.args.sessionId)
    if session is None or not call.visible_session(session):
        raise NotFound(f"no review session {call.args.sessionId!r}")
    return store, session


# -- tools ----------------------------------------------------------------------------------


@handles("mnote.doc.plan_update")
def plan_update(call: Call) -> dict[str, Any]:
    args = call.args
    given = [k for k in ("operations", "blockOps", "fullContent") if getattr(args, k) is not None]
    if len(given) != 1:
        raise InvalidArguments("give exactly one of operations, blockOps or fullContent")
    allowed = (
        {"allowedTargetBlockIds": args.allowedTargetBlockIds} if args.allowedTargetBlockIds else {}
    )
    if args.operations is not None:
        tool = "mnote.doc.markdown_edit"
        tool_args = {
            "operations": [o.model_dump(exclude_none=True) for o in args.operations],
            **allowed,
        }
    elif args.blockOps is not None:
        tool = "mnote.doc.apply_block_ops"
        tool_args = {
            "operations": [o.model_dump(exclude_none=True) for o in args.blockOps],
            **allowed,
        }
    else:
        tool = "mnote.page.save"
        tool_args = {"content": [{"markdown": args.fullContent}], "mode": "replace"}
    proposal = {
        "format": "markdown",
        "operations": [
            {"op": "replace", **o.model_dump(exclude_none=True)} for o in args.operations or []
        ],
        "blockOps": [o.model_dump(exclude_none=True) for o in args.blockOps or []],
        "fullContent": args.fullContent,
        "reason": args.reason,
    }
    return propose(call, tool, tool_args, proposal)


@handles("mnote.review.get")
def review_get(call: Call) -> dict[str, Any]:
    return _session(call)[1]


@handles("mnote.review.list")
def review_list(call: Call) -> dict[str, Any]:
    store = store_of(call.service, call.ws)
    document_id = None
    ref = call.request.documentId or call.request.path
    if ref:
        document_id = call.load(ref).doc.document_id
    states = tuple(call.args.states or ())
    unknown = [s for s in states if s not in STATES]
    if unknown:
        raise InvalidArguments(
            f"unknown state(s): {', '.join(unknown)}", hint=f"States: {', '.join(STATES)}."
        )
    sessions = [
        {
            k: s.get(k)
            for k in ("sessionId", "documentId", "path", "state", "toolCallId", "traceId", "source")
        }
        for s in store.list(document_id=document_id, states=states, limit=call.args.limit)
        if call.visible_session(s)
    ]
    return {"sessions": sessions}


def _dry(call: Call, session: dict[str, Any], state: str) -> dict[str, Any] | None:
    """For a dry run: the session with the state the action would give it, nothing kept."""
    if not call.request.dryRun:
        return None
    if state not in TRANSITIONS[session["state"]]:
        raise InvalidTransition(
            f"a review session in state {session['state']!r} cannot become {state!r}",
            state=session["state"],
            allowed=sorted(TRANSITIONS[session["state"]]),
        )
    return {**session, "dryRun": True, "nextState": state}


@handles("mnote.review.reject")
def review_reject(call: Call) -> dict[str, Any]:
    store, session = _session(call)
    if not call.actor.is_owner:
        raise PermissionDenied("only the workspace owner decides on review sessions")
    if (dry := _dry(call, session, "rejected")) is not None:
        return dry
    session["decision"] = {"by": call.actor.actor_id, "reason": call.args.reason, "at": call.now}
    set_state(call.service, call.ws, store, session, "rejected")
    return session


@handles("mnote.review.abort")
def review_abort(call: Call) -> dict[str, Any]:
    store, session = _session(call)
    if not call.actor.is_owner and session["audit"]["createdBy"] != call.actor.actor_id:
        raise PermissionDenied("only the owner or the agent that proposed it may abort a session")
    if (dry := _dry(call, session, "aborted")) is not None:
        return dry
    set_state(call.service, call.ws, store, session, "aborted")
    return session


@handles("mnote.review.retry")
def review_retry(call: Call) -> dict[str, Any]:
    store, session = _session(call)
    if call.request.toolCallId in session.get("retries", []):
        raise InvalidArguments(
            "a retry needs a new toolCallId",
            hint="Send the retry with a toolCallId not used before.",
        )
    if (dry := _dry(call, session, "previewing")) is not None:
        return dry
    set_state(call.service, call.ws, store, session, "previewing")
    session["retries"].append(call.request.toolCallId)
    tool = session["request"]["toolName"]
    args = session["request"]["args"]
    proposer = (
        Actor(session["audit"]["createdBy"], "agent")
        if session["audit"]["createdBy"] != "owner"
        else call.actor
    )
    sub_call = _as_original(call, session)
    try:
        plan, blocked, warnings = plan_for(sub_call, tool, args, _acting(call, proposer))
    except MnoteError as exc:
        session["error"] = exc.to_dict()
        set_state(call.service, call.ws, store, session, "failed")
        return session
    if plan is not None and plan.loaded is not None:
        session["base"] = base_of(plan.loaded, args)
    session["preview"] = preview(tool, plan, blocked, warnings)
    session.pop("error", None)
    set_state(call.service, call.ws, store, session, "awaiting_user")
    return session


def _acting(call: Call, proposer: Actor) -> Actor:
    """Who an accepted write runs as: the proposer's name, with the owner's approval."""
    return Actor(proposer.actor_id, "owner") if call.actor.is_owner else call.actor


def _as_original(call: Call, session: dict[str, Any]) -> Call:
    """A call carrying the original request's document and ids, for re-planning it."""
    original = session["request"]
    request = ToolRequest.model_validate(
        {
            "toolName": original["toolName"],
            "workspaceId": call.ws.workspace_id,
            "documentId": session.get("documentId") or original.get("documentId"),
            "sessionId": session.get("sessionRef") or "review",
            "runId": session.get("runId") or "review",
            "toolCallId": session.get("toolCallId") or "review",
            "traceId": session.get("traceId") or "review",
            "idempotencyKey": original.get("idempotencyKey") or session["sessionId"],
            "dryRun": True,
            "args": original["args"],
        }
    )
    spec = TOOLS[original["toolName"]]
    return Call(
        spec,
        request,
        spec.args.model_validate(original["args"]),
        call.actor,
        call.ws,
        call.service,
        call.now,
    )


@handles("mnote.review.accept")
def review_accept(call: Call) -> dict[str, Any]:
    store, session = _session(call)
    service, ws = call.service, call.ws
    if not call.actor.is_owner:
        raise PermissionDenied("only the workspace owner accepts review sessions")
    if session["state"] == "stale":
        raise Stale(
            f"review session {session['sessionId']} is stale: its page changed since the "
            "proposal was previewed; nothing was written",
            sessionId=session["sessionId"],
            state="stale",
        )
    if "accepted" not in TRANSITIONS[session["state"]]:  # (a failed session has no preview)
        raise InvalidTransition(
            f"a review session in state {session['state']!r} cannot be accepted",
            state=session["state"],
            allowed=sorted(TRANSITIONS[session["state"]]),
        )
    if (session.get("preview") or {}).get("blocked"):
        raise TargetOutOfScope(
            "this proposal writes outside its allowedTargetBlockIds and cannot be accepted",
            hint="Reject it, or retry with a proposal inside the selection.",
        )
    if (dry := _dry(call, session, "accepted")) is not None:
        return dry
    set_state(service, ws, store, session, "accepted")
    session["decision"] = {
        "by": call.actor.actor_id,
        "at": call.now,
        "toolCallId": call.request.toolCallId,
    }
    original = _as_original(call, session)
    proposer = Actor(session["audit"]["createdBy"], "owner")
    original.actor = proposer
    loaded = None
    try:
        if session.get("base") is not None:  # (a page created has no base: it is re-planned)
            loaded = original.load()
    except MnoteError as exc:
        session["error"] = exc.to_dict()
        set_state(service, ws, store, session, "stale")
        raise Stale(
            f"review session {session['sessionId']} is stale: its page is gone; nothing was "
            "written",
            sessionId=session["sessionId"],
            state="stale",
        ) from None
    base = session.get("base") or {}
    if loaded is not None and (
        base.get("revision") != loaded.revision
        or base.get("conflictDetectionKey")
        != conflict_key(loaded.page, loaded.revision, loaded.blob)
    ):
        session["stale"] = {
            "baseRevision": base.get("revision"),
            "currentRevision": loaded.revision,
        }
        set_state(service, ws, store, session, "stale")  # (kept: the session is stale from now)
        raise Stale(
            f"review session {session['sessionId']} is stale: {loaded.path} changed since the "
            "proposal was previewed; nothing was written",
            sessionId=session["sessionId"],
            state="stale",
            baseRevision=base.get("revision"),
            currentRevision=loaded.revision,
        )
    try:
        plan = HANDLERS[original.spec.name](original)
        assert isinstance(plan, WritePlan)
    except MnoteError as exc:
        session["error"] = exc.to_dict()
        set_state(service, ws, store, session, "failed")
        return session
    meta = CommandMeta(
        plan.command,
        actor=proposer.actor_id,
        trace_id=session.get("traceId"),
        tool=original.spec.name,
        tool_call_id=session.get("toolCallId"),
        run_id=session.get("runId"),
        session_id=session.get("sessionRef"),
        idempotency_key=call.request.idempotencyKey,
        request_hash=idempotency.request_hash(call),  # (so a repeated accept replays)
        extra=(
            ("Mnote-Review-Session", session["sessionId"]),
            ("Mnote-Accepted-By", call.actor.actor_id),
            ("Mnote-Accept-Call-Id", call.request.toolCallId or ""),
            *provenance.trailers_of(session["request"].get("header") or {}),
        ),
    ).with_command_id()
    session["pendingCommandId"] = meta.command_id
    set_state(service, ws, store, session, "applying")
    try:
        commit = writes.land(ws, plan, meta) if plan.changes else None
    except MnoteError as exc:
        session["error"] = exc.to_dict()
        set_state(service, ws, store, session, "failed")
        return session
    if commit is not None and plan.after_commit is not None:
        plan.after_commit(ws, commit.commit)  # (ids of a page created, a grant closed)
    session["applied"] = {
        "commit": commit.commit if commit else (loaded.revision if loaded else None),
        "commandId": commit.command_id if commit else None,
        "acceptedBy": call.actor.actor_id,
    }
    set_state(service, ws, store, session, "applied")
    if commit is not None:
        writes.landed(
            call,
            plan,
            commit,
            path=session.get("path"),
            tool=original.spec.name,
            tool_call_id=session.get("toolCallId"),
            trace_id=session.get("traceId"),
            actor=proposer.actor_id,
            reviewSession=session["sessionId"],
        )
    return session


@handles("mnote.page_ai.context")
def page_ai_context(call: Call) -> dict[str, Any]:
    loaded = call.load()
    args = call.args
    common: dict[str, Any] = {
        "scope": args.scope,
        "block_ids": args.blockIds,
        "query": args.query,
        "budget": args.budget,
        "cursor": args.cursor,
    }
    text = context_of(call, loaded, fmt="text", **common)
    xml = context_of(call, loaded, fmt="page_xml", **common)
    context = {
        **text,
        "format": "text+page_xml",
        "pageXml": xml["pageXml"],
        "path": loaded.path,
        "runId": call.request.runId,
    }
    store = store_of(call.service, call.ws)
    frozen = store.freeze_context(
        f"{call.request.runId}:{loaded.doc.document_id}", context, call.now
    )
    frozen["frozen"] = frozen.get("selectedBlockIds") != context.get("selectedBlockIds") or (
        frozen.get("revision") != context.get("revision")
    )
    return frozen
