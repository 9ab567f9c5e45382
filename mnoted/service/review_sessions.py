"""Review sessions (seed 003 §5.5): their states, their store, and how one is proposed.

A session keeps what was proposed (the original tool call), the base it was previewed on
(revision and conflict key), the preview (changed blocks before and after, the diff,
warnings, risk, whether it is blocked) and its state. Only a write that waits for a person
(or a proposal, ``mnote.doc.plan_update``) makes one: a write that applies directly is
recorded by its commit and trailers, and its answer carries the same preview fields. The
tools that act on sessions are :mod:`mnoted.service.review`.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from mnoted.contract.envelope import ToolRequest
from mnoted.contract.tools import TOOLS
from mnoted.core.views import conflict_key
from mnoted.errors import InvalidTransition, MnoteError, TargetOutOfScope
from mnoted.service import visibility
from mnoted.service.actors import Actor, utc_iso
from mnoted.service.calls import HANDLERS, Call, WritePlan
from mnoted.service.pages import LoadedPage
from mnoted.store import WorkspaceApi
from mnoted.store.reviews import ReviewStore

if TYPE_CHECKING:
    from mnoted.service.executor import Service

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
    """The workspace's review store (on the workspace's own thread).

    Sessions a stop caught mid-apply are settled the first time it is asked for outside a
    sidecar transaction: settling them is no call's effect, so it must not join a group's
    transaction and be undone with it (``docs/store.md``, *The workspace database*).
    """
    store = ws.reviews
    if not service.reviews_recovered and not store.in_transaction():
        service.reviews_recovered = True
        _recover(service, ws, store)
    return store


def close_store(service: Service, ws: WorkspaceApi) -> None:
    """Forget that sessions were settled: a workspace opened again settles them again."""
    service.reviews_recovered = False


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
            set_state(service, ws, store, session, "applied", force=True)
        else:
            session["error"] = {
                "code": "mnote_review_interrupted",
                "message": "the daemon stopped while this session was being applied",
            }
            set_state(service, ws, store, session, "failed", force=True)


def set_state(
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


def preview(
    tool: str, plan: WritePlan | None, blocked: bool = False, warnings: list[str] | None = None
) -> dict[str, Any]:
    """The preview of a write as a review session shows it (a direct write's answer shows
    its ``changedBlocks``, ``risk``, ``blocked`` and ``warnings`` too): made once per plan,
    from the plan's one :attr:`~WritePlan.diff`."""
    diff = plan.diff if plan is not None else []
    revision = plan.loaded.revision if plan is not None and plan.loaded else None
    made: dict[str, Any] = {
        "dryRun": True,
        "changedBlocks": [
            {**entry, "revisionRef": f"body:{revision}:{entry['blockId']}"} for entry in diff
        ],
        "diff": diff,
        "unifiedDiff": plan.edit.diff if plan is not None and plan.edit is not None else "",
        "warnings": list(warnings or ()),
        "blocked": blocked,
    }
    made["risk"] = _risk(tool, made)
    return made


def base_of(loaded: LoadedPage, args: dict[str, Any]) -> dict[str, Any]:
    """What a preview was made on: the page's revision and conflict key, and the selection."""
    return {
        "revision": loaded.revision,
        "conflictDetectionKey": conflict_key(loaded.page, loaded.revision, loaded.blob),
        "allowedTargetBlockIds": args.get("allowedTargetBlockIds"),
    }


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
            "header": {k: v for k, v in call.header.items() if v is not None},
        },
        "proposal": proposal,
        "base": None,
        "preview": None,
        "audit": {"createdAt": utc_iso(call.now), "createdBy": call.actor.actor_id},
        "retries": [request.toolCallId],
        "history": [{"state": "draft", "at": call.now}],
    }


def plan_for(
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
    made: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Create a session awaiting a person, with a dry-run preview of ``tool(args)`` (or
    ``plan``, already made, and its preview ``made``).

    A dry run of the proposal itself returns the session it would create and keeps nothing.
    """
    # the caller must be able to see the page before anything is kept
    seen = call.load() if plan is None else None
    store = None if call.request.dryRun else store_of(call.service, call.ws)
    session = _new_session(call, tool, args, proposal)
    if seen is not None:  # (named also by a session whose plan fails)
        session["documentId"], session["path"] = seen.doc.document_id, seen.path
    service, ws = call.service, call.ws
    set_state(service, ws, store, session, "planning")
    blocked, warnings = False, list[str]()
    if plan is None:
        try:
            plan, blocked, warnings = plan_for(call, tool, args, call.actor)
        except MnoteError as exc:
            session["error"] = exc.to_dict()
            set_state(service, ws, store, session, "failed")
            return session
    set_state(service, ws, store, session, "previewing")
    loaded = plan.loaded if plan is not None and plan.loaded is not None else None
    if loaded is None and call.request.documentId:
        loaded = call.load()
    if loaded is not None:
        session["documentId"] = loaded.doc.document_id
        session["path"] = loaded.path
        session["base"] = base_of(loaded, args)
    elif plan is not None and plan.changes:  # (a page created: the session names it)
        session["path"] = plan.paths[0]
    if plan is not None:
        session["paths"] = sorted({*plan.paths, *visibility.session_paths(session)})
    session["preview"] = made if made is not None else preview(tool, plan, blocked, warnings)
    set_state(service, ws, store, session, "awaiting_user")
    return session


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
