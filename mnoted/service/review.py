"""Review sessions (seed 003 §5.5): a proposed write held as a preview until a person decides.

A session keeps what was proposed (the original tool call), the base it was previewed on
(revision and conflict key), the preview (changed blocks before and after, the diff,
warnings, risk, whether it is blocked) and its state. Accepting re-reads the page: if it is
no longer what the preview was made on, the session goes ``stale`` and nothing is written;
otherwise the original call is applied as one commit naming the session, the original
tool call and who accepted it. ``yolo`` mode and every direct write also leave a session
(already ``applied``), so the history of proposals looks the same whatever the mode.
"""

from __future__ import annotations

import secrets
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
from mnoted.service import provenance, visibility
from mnoted.service.actors import Actor, utc_iso
from mnoted.service.executor import (
    HANDLERS,
    Call,
    ReviewHooks,
    Service,
    WritePlan,
    block_diff,
    context_of,
    handles,
    plan_paths,
    read_back,
    use_reviews,
)
from mnoted.store import CommandMeta, WorkspaceApi
from mnoted.store.reviews import ReviewStore

SCHEMA = "mnote.page_ai_review_session.v1"
STATES = (
    "draft",
    "planning",
    "previewing",
    "awaiting_user",
    "accepted",
    "rejected",
    "applying",
    "applied",
    "failed",
    "aborted",
    "stale",
)
TRANSITIONS: dict[str, frozenset[str]] = {
    "draft": frozenset({"planning", "previewing", "aborted"}),
    "planning": frozenset({"previewing", "failed", "aborted"}),
    "previewing": frozenset({"awaiting_user", "failed", "aborted"}),
    "awaiting_user": frozenset({"accepted", "rejected", "aborted", "previewing"}),
    "accepted": frozenset({"applying", "stale", "failed"}),
    "applying": frozenset({"applied", "failed", "stale"}),
    "stale": frozenset({"previewing", "aborted"}),
    "failed": frozenset({"previewing", "aborted"}),
    "applied": frozenset(),
    "rejected": frozenset(),
    "aborted": frozenset(),
}
PENDING = ("draft", "planning", "previewing", "awaiting_user", "accepted", "applying")
FINISHED = tuple(state for state, after in TRANSITIONS.items() if not after)
"""applied, rejected, aborted: nothing more can happen to these."""


def store_of(service: Service, ws: WorkspaceApi) -> ReviewStore:
    """The workspace's review store (opened on the workspace's own thread, once)."""
    store = service.review_store
    if store is None:
        store = service.review_store = ReviewStore(ws.state_dir)
        _recover(service, ws, store)
    return store


def close_store(service: Service, ws: WorkspaceApi) -> None:
    store, service.review_store = service.review_store, None
    if store is not None:
        store.close()


def _recover(service: Service, ws: WorkspaceApi, store: ReviewStore) -> None:
    """After a restart nothing is applied: a session caught mid-apply is settled by Git."""
    for session in store.list(states=("accepted", "applying"), limit=10_000):
        found = (
            ws.find_command(command_id=session["pendingCommandId"])
            if session.get("pendingCommandId")
            else []
        )
        if found:
            session["applied"] = {"commit": found[0].commit, "commandId": found[0].command_id}
            _set(service, ws, store, session, "applied", force=True)
        else:
            session["error"] = {
                "code": "mnote_review_interrupted",
                "message": "the daemon stopped while this session was being applied",
            }
            _set(service, ws, store, session, "failed", force=True)


def _set(
    service: Service,
    ws: WorkspaceApi,
    store: ReviewStore | None,
    session: dict[str, Any],
    state: str,
    *,
    force: bool = False,
) -> None:
    current = session["state"]
    if not force and state not in TRANSITIONS[current]:
        raise InvalidTransition(
            f"a review session in state {current!r} cannot become {state!r}",
            state=current,
            allowed=sorted(TRANSITIONS[current]),
        )
    session["state"] = state
    session["actions"] = _actions(state, session)
    session.setdefault("history", []).append({"state": state, "at": service.clock()})
    if store is None:  # a dry run: shown, not kept
        return
    store.put(session, service.clock())
    service.events.publish(
        "review",
        workspaceId=ws.workspace_id,
        documentId=session.get("documentId"),
        path=session.get("path"),
        sessionId=session["sessionId"],
        state=state,
        toolCallId=session.get("toolCallId"),
        traceId=session.get("traceId"),
        _readers=[
            p for path in visibility.session_paths(session) for p in visibility.readers_of(ws, path)
        ],
    )


def _actions(state: str, session: dict[str, Any]) -> dict[str, Any]:
    allowed = TRANSITIONS[state]
    blocked = bool((session.get("preview") or {}).get("blocked"))
    return {
        "accept": {
            "allowed": "accepted" in allowed and not blocked,
            "requiresFreshRevision": True,
            "requiresIdempotencyKey": True,
        },
        "reject": "rejected" in allowed,
        "retry": {"allowed": "previewing" in allowed, "requiresNewToolCallId": True},
        "abort": "aborted" in allowed,
    }


def _risk(tool: str, preview: dict[str, Any]) -> str:
    """What the proposal does, where its preview shows it: ``high`` if it removes a block or
    changes more than ten, ``medium`` for more than two, else ``low``; a destructive tool
    whose effect no preview shows (a page deleted) is ``high``. (By the tool alone, an
    agent's ``page.save`` that appends one paragraph was ``high``, as its replace is.)"""
    changed = preview.get("changedBlocks", [])
    if not changed:
        return "high" if TOOLS[tool].annotations.destructive else "low"
    if len(changed) > 10 or any(c.get("op") == "delete" for c in changed):
        return "high"
    return "medium" if len(changed) > 2 else "low"


def _preview(plan: WritePlan, blocked: bool, warnings: list[str]) -> dict[str, Any]:
    changed = block_diff(plan.edit) if plan.edit is not None else []
    revision = plan.loaded.revision if plan.loaded else None
    for entry in changed:
        entry["revisionRef"] = f"body:{revision}:{entry['blockId']}"
    return {
        "dryRun": True,
        "changedBlocks": changed,
        "diff": block_diff(plan.edit) if plan.edit is not None else [],
        "unifiedDiff": plan.edit.diff if plan.edit is not None else "",
        "warnings": warnings,
        "blocked": blocked,
    }


def _base(loaded: Any, args: dict[str, Any]) -> dict[str, Any]:
    """What a preview was made on: the page's revision and conflict key, and the selection."""
    return {
        "revision": loaded.revision,
        "conflictDetectionKey": conflict_key(loaded.page, loaded.revision, loaded.blob),
        "allowedTargetBlockIds": args.get("allowedTargetBlockIds"),
    }


def _full_preview(
    tool: str, plan: WritePlan | None, blocked: bool, warnings: list[str]
) -> dict[str, Any]:
    if plan is not None:
        preview = _preview(plan, blocked, warnings)
    else:
        preview = {
            "dryRun": True,
            "changedBlocks": [],
            "diff": [],
            "unifiedDiff": "",
            "warnings": warnings,
            "blocked": blocked,
        }
    preview["risk"] = _risk(tool, preview)
    return preview


def preview_of(tool: str, plan: WritePlan) -> dict[str, Any]:
    """The preview of a write as a review session shows it (a direct write returns it too)."""
    return _full_preview(tool, plan, False, [])


def proposal_of(tool: str, args: dict[str, Any], plan: WritePlan | None) -> dict[str, Any]:
    """Seed 003 §5.5's ``proposal`` of a held tool call: ``format``, and ``operations``
    (search/replace pairs, or seed-004 block commands) or ``fullContent`` (the page as it
    would be, for a whole-page save), with the original ``toolName`` and ``args``."""
    operations: list[dict[str, Any]] | None = None
    full: str | None = None
    fmt = "tool_call"
    if tool == "mnote.doc.markdown_edit":
        fmt = "markdown"
        operations = [{"op": "replace", **o} for o in args.get("operations", [])]
    elif tool == "mnote.doc.apply_block_ops":
        fmt, operations = "block_ops", list(args.get("operations", []))
    elif tool == "mnote.page.save" and plan is not None and plan.edit is not None:
        fmt = "markdown"
        full = plan.edit.page.to_bytes().decode("utf-8", "replace")
    return {
        "format": fmt,
        "operations": operations,
        "fullContent": full,
        "toolName": tool,
        "args": args,
    }


def _new_session(
    call: Call, tool: str, args: dict[str, Any], proposal: dict[str, Any]
) -> dict[str, Any]:
    request = call.request
    return {
        "schema": SCHEMA,
        "sessionId": "review_" + secrets.token_hex(8),
        "workspaceId": call.ws.workspace_id,
        "documentId": None,
        "path": None,
        "runId": request.runId,
        "toolCallId": request.toolCallId,
        "traceId": request.traceId,
        "sessionRef": request.sessionId,
        "state": "draft",
        "mode": call.ws.config.approval_mode,
        "source": {"runtimeOwner": "hermes", "writeOwner": "mnoted", "toolName": tool},
        "request": {
            "toolName": tool,
            "args": args,
            "documentId": request.documentId or request.path,
            "idempotencyKey": request.idempotencyKey,
            "header": {k: v for k, v in provenance.header(call).items() if v is not None},
        },
        "proposal": proposal,
        "base": None,
        "preview": None,
        "audit": {"createdAt": utc_iso(call.now), "createdBy": call.actor.actor_id},
        "retries": [request.toolCallId],
        "history": [{"state": "draft", "at": call.now}],
    }


def _plan_for(
    call: Call, tool: str, args: dict[str, Any], actor: Actor
) -> tuple[WritePlan | None, bool, list[str]]:
    """The dry-run plan of ``tool`` with ``args`` on the page as it is now."""
    spec = TOOLS[tool]
    sub_request = ToolRequest.model_validate(
        {
            **call.request.model_dump(exclude={"args"}, exclude_none=True),
            "toolName": tool,
            "dryRun": True,
            "args": args,
        }
    )
    sub = Call(
        spec, sub_request, spec.args.model_validate(args), actor, call.ws, call.service, call.now
    )
    try:
        plan = HANDLERS[tool](sub)
    except TargetOutOfScope as exc:
        return None, True, [exc.message]
    assert isinstance(plan, WritePlan)
    return plan, False, []


def propose(
    call: Call,
    tool: str,
    args: dict[str, Any],
    proposal: dict[str, Any],
    plan: WritePlan | None = None,
) -> dict[str, Any]:
    """Create a session awaiting a person, with a dry-run preview of ``tool(args)``.

    A dry run of the proposal itself returns the session it would create and keeps nothing.
    """
    # the caller must be able to see the page before anything is kept
    seen = call.load() if plan is None else None
    store = None if call.request.dryRun else store_of(call.service, call.ws)
    session = _new_session(call, tool, args, proposal)
    if seen is not None:  # (named also by a session whose plan fails)
        session["documentId"], session["path"] = seen.doc.document_id, seen.path
    service, ws = call.service, call.ws
    _set(service, ws, store, session, "planning")
    blocked, warnings = False, list[str]()
    if plan is None:
        try:
            plan, blocked, warnings = _plan_for(call, tool, args, call.actor)
        except MnoteError as exc:
            session["error"] = exc.to_dict()
            _set(service, ws, store, session, "failed")
            return session
    _set(service, ws, store, session, "previewing")
    loaded = plan.loaded if plan is not None and plan.loaded is not None else None
    if loaded is None and call.request.documentId:
        loaded = call.load()
    if loaded is not None:
        session["documentId"] = loaded.doc.document_id
        session["path"] = loaded.path
        session["base"] = _base(loaded, args)
    elif plan is not None and plan.changes:  # (a page created: the session names it)
        session["path"] = plan_paths(plan)[0]
    if plan is not None:
        session["paths"] = sorted({*plan_paths(plan), *visibility.session_paths(session)})
    session["preview"] = _full_preview(tool, plan, blocked, warnings)
    _set(service, ws, store, session, "awaiting_user")
    return session


def record_applied(
    call: Call,
    plan: WritePlan,
    commit: str,
    command_id: str,
    document_id: str | None,
    path: str | None,
) -> None:
    """The review-compatible record of a write that needed no review (yolo, owner, ...)."""
    args = call.wire_args
    store = store_of(call.service, call.ws)
    session = _new_session(call, call.spec.name, args, proposal_of(call.spec.name, args, plan))
    session["state"] = "applied"
    session["documentId"] = document_id
    session["path"] = path
    session["paths"] = sorted({*plan_paths(plan), *([path] if path else [])})
    if plan.loaded is not None:
        session["base"] = _base(plan.loaded, args)
    if plan.edit is not None:
        session["preview"] = _full_preview(call.spec.name, plan, False, [])
    session["applied"] = {
        "commit": commit,
        "commandId": command_id,
        "acceptedBy": None,
        "direct": True,
    }
    session["actions"] = _actions("applied", session)
    session["history"].append({"state": "applied", "at": call.now})
    store.put(session, call.service.clock())


def frozen_selection(call: Call, document_id: str) -> list[str] | None:
    """The blocks a run may change on a page, as its frozen context named them (seed 003
    §5.1, §6.3): None when the run froze no context of the page, or a ``full`` one."""
    run = call.request.runId
    if not run:
        return None
    context = store_of(call.service, call.ws).frozen_context(f"{run}:{document_id}")
    if context is None or context.get("scope") in (None, "full"):
        return None
    allowed = context.get("allowedTargetBlockIds")
    return [str(i) for i in allowed] if isinstance(allowed, list) else None


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
    _set(call.service, call.ws, store, session, "rejected")
    return session


@handles("mnote.review.abort")
def review_abort(call: Call) -> dict[str, Any]:
    store, session = _session(call)
    if not call.actor.is_owner and session["audit"]["createdBy"] != call.actor.actor_id:
        raise PermissionDenied("only the owner or the agent that proposed it may abort a session")
    if (dry := _dry(call, session, "aborted")) is not None:
        return dry
    _set(call.service, call.ws, store, session, "aborted")
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
    _set(call.service, call.ws, store, session, "previewing")
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
        plan, blocked, warnings = _plan_for(sub_call, tool, args, _acting(call, proposer))
    except MnoteError as exc:
        session["error"] = exc.to_dict()
        _set(call.service, call.ws, store, session, "failed")
        return session
    if plan is not None and plan.loaded is not None:
        session["base"] = _base(plan.loaded, args)
    session["preview"] = _full_preview(tool, plan, blocked, warnings)
    session.pop("error", None)
    _set(call.service, call.ws, store, session, "awaiting_user")
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
    _set(service, ws, store, session, "accepted")
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
        _set(service, ws, store, session, "stale")
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
        _set(service, ws, store, session, "stale")  # (kept: the session is stale from now)
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
        _set(service, ws, store, session, "failed")
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
        request_hash=call.service.accept_hash(call),
        extra=(
            ("Mnote-Review-Session", session["sessionId"]),
            ("Mnote-Accepted-By", call.actor.actor_id),
            ("Mnote-Accept-Call-Id", call.request.toolCallId or ""),
            *_header_trailers(session),
        ),
    ).with_command_id()
    session["pendingCommandId"] = meta.command_id
    _set(service, ws, store, session, "applying")
    try:
        commit = ws.apply(meta, plan.changes) if plan.changes else None
        if commit is not None and not commit.replayed:
            read_back(ws, plan, commit)  # (applied only once the commit holds the plan)
    except MnoteError as exc:
        session["error"] = exc.to_dict()
        _set(service, ws, store, session, "failed")
        return session
    if commit is not None and plan.after_commit is not None:
        plan.after_commit(ws, commit.commit)  # (ids of a page created, a grant closed)
    session["applied"] = {
        "commit": commit.commit if commit else (loaded.revision if loaded else None),
        "commandId": commit.command_id if commit else None,
        "acceptedBy": call.actor.actor_id,
    }
    _set(service, ws, store, session, "applied")
    if commit is not None:
        service.landed(
            ws,
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


def _header_trailers(session: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The proposing call's seed-004 header, as its accepted commit's trailers."""
    from mnoted.store import message

    head = session["request"].get("header") or {}
    names = {
        "requestId": message.REQUEST_ID,
        "actorType": message.ACTOR_TYPE,
        "reason": message.REASON,
        "onBehalfOf": message.ON_BEHALF_OF,
        "targetBlockId": message.TARGET_BLOCK_ID,
    }
    return tuple((names[k], str(v)) for k, v in head.items() if k in names and v)


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


use_reviews(
    ReviewHooks(
        propose=propose,
        proposal_of=proposal_of,
        preview_of=preview_of,
        record_applied=record_applied,
    )
)
