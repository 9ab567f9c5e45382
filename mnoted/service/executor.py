"""The tool executor: authorize → validate → idempotency → revision check → apply → commit → audit.

Every ``mnote.*`` call, whatever door it came through (socket, CLI, MCP, Hermes), runs
here, in this order, on the thread that owns the workspace. Every check reads the tool's
one declaration (:mod:`mnoted.contract.tools`); handlers (one module per tool family)
only compute what a call reads or plans to write.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ValidationError

from mnoted.contract.envelope import (
    ENVELOPE_FIELDS,
    Audit,
    ErrorBody,
    ToolRequest,
    ToolResponse,
    wire_bytes,
)
from mnoted.contract.manifest import availability, scope_covers
from mnoted.contract.tools import TOOLS, ToolSpec, lookup
from mnoted.core.commands import EditResult
from mnoted.core.page import Page
from mnoted.core.views import build_context
from mnoted.errors import (
    BaseChanged,
    Conflict,
    InternalError,
    InvalidArguments,
    LockBusy,
    MnoteError,
    NotFound,
    PathRejected,
    PermissionDenied,
    StorageError,
    ToolDisabled,
    UnknownTool,
    WorkspaceInvalid,
)
from mnoted.service import provenance, readcache, visibility
from mnoted.service.actors import Actor
from mnoted.service.events import EventBus
from mnoted.service.pages import LoadedPage, PageCache
from mnoted.store import (
    Change,
    CommandMeta,
    CommitResult,
    DocRef,
    IdempotencyRecord,
    Move,
    WorkspaceApi,
    Write,
)
from mnoted.store.paths import normalize
from mnoted.store.reviews import ReviewStore

log = logging.getLogger("mnoted.calls")


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
        audit=Audit(
            effect="none",
            workspaceId=named if named is not None else served,
            documentId=_str(fields.get("documentId", fields.get("document_id"))),
        ),
        error=ErrorBody(**exc.to_dict()),
    )


@dataclass
class WritePlan:
    """What a write tool would do: the changes to commit and the result to report."""

    command: str
    changes: list[Change]
    result: dict[str, Any]
    loaded: LoadedPage | None = None
    edit: EditResult | None = None
    document: DocRef | None = None
    after_commit: Callable[[WorkspaceApi, str], dict[str, Any]] | None = None
    # Paths whose bytes on disk are the change (a file grant's release), committed as is.
    from_disk: list[str] = field(default_factory=list)


@dataclass
class Call:
    """One call as handlers see it."""

    spec: ToolSpec
    request: ToolRequest
    args: Any
    actor: Actor
    ws: WorkspaceApi
    service: Service
    now: float
    loaded: list[LoadedPage] = field(default_factory=list)  # the pages it read, in order
    kept: bytes | None = None  # a write's answer as encoded for its idempotency record

    def load(self, ref: str | None = None) -> LoadedPage:
        """The call's document (or ``ref``), checked against the caller's grants first."""
        target = ref if ref is not None else self.document_ref
        self.authorize(target)
        try:
            loaded = self.service.pages.load(self.ws, target)
        except NotFound:
            raise self.service.hidden(target, self.actor) from None
        except PathRejected as exc:  # (said only to a caller who may see the path)
            if not self.actor.may_access(str(exc.details.get("path", target))):
                raise self.service.hidden(target, self.actor) from None
            raise
        if not self.may_see(loaded.path):
            raise self.service.hidden(target, self.actor)
        self.loaded.append(loaded)
        return loaded

    def may_see(self, path: str) -> bool:
        """Whether the caller may learn anything of ``path`` (:mod:`.visibility`)."""
        return visibility.may_see(self.actor, self.ws, path)

    def visible_session(self, session: Mapping[str, Any]) -> bool:
        """Whether the caller sees a review session: a grant on every path it touches."""
        return visibility.may_see_all(self.actor, self.ws, visibility.session_paths(session))

    def authorize(self, ref: str) -> None:
        """Refuse, as :meth:`Service.hidden`, a page ``ref`` outside the caller's grants.

        Decided from the request and the registry of paths alone (a documentId is looked up
        to its path), before any cache, stored answer, file or parse of the page: a hidden
        page costs what a missing one costs, and says what it says.
        """
        if self.actor.is_owner:
            return
        path = target_path(self.ws, ref)
        if path is None or not self.may_see(path):
            raise self.service.hidden(ref, self.actor)

    def authorize_request(self) -> None:
        """:meth:`authorize` every page the request names (its document, a new path)."""
        if self.actor.is_owner:
            return
        ref = self.request.documentId or self.request.path
        if ref is not None:
            self.authorize(ref)
        for name in ("path", "newPath"):
            value = getattr(self.args, name, None)
            if isinstance(value, str):
                self.authorize(value)

    @cached_property
    def wire_args(self) -> dict[str, Any]:
        """The arguments as JSON values, those not given left out (hashed, recorded)."""
        return dict(self.args.model_dump(mode="json", exclude_none=True))

    def may_edit(self, loaded: LoadedPage) -> bool:
        """Whether the caller may change this page (``protectEditing`` stops agents)."""
        return self.actor.is_owner or not loaded.page.options["protectEditing"]

    @property
    def document_ref(self) -> str:
        ref = self.request.documentId or self.request.path
        if ref is None:
            raise InvalidArguments("documentId (or path) is required")
        return ref


Handler = Callable[[Call], dict[str, Any] | WritePlan]  # a dict: a review session
HANDLERS: dict[str, Handler] = {}
STORE_ONLY: set[str] = set()
"""Tools whose every effect is in the workspace store, so their calls can land in a group."""
CACHED: set[str] = set()
"""Reads whose answer may be given again while their page is unchanged (service.readcache)."""


def context_of(call: Call, loaded: LoadedPage, **view: Any) -> dict[str, Any]:
    """The page's context view for this caller (its ids, its revision, what it may edit)."""
    return build_context(
        loaded.page,
        document_id=loaded.doc.document_id,
        revision=loaded.revision,
        workspace_id=call.ws.workspace_id,
        editable=call.may_edit(loaded),
        blob=loaded.blob,
        **view,
    )


@dataclass(frozen=True)
class ReviewHooks:
    """What the pipeline asks of review sessions: :mod:`mnoted.service.review` registers
    them when it is imported (:func:`use_reviews`), as handlers register with
    :func:`handles`, so the review module depends on the executor and never the reverse."""

    propose: Callable[[Call, str, dict[str, Any], dict[str, Any], WritePlan], dict[str, Any]]
    proposal_of: Callable[[str, dict[str, Any], WritePlan | None], dict[str, Any]]
    preview_of: Callable[[str, WritePlan], dict[str, Any]]
    record_applied: Callable[[Call, WritePlan, str, str, str | None, str | None], None]


_REVIEWS: list[ReviewHooks] = []


def use_reviews(hooks: ReviewHooks) -> None:
    """Register the review sessions' side of the pipeline (once)."""
    _REVIEWS[:] = [hooks]


def reviews() -> ReviewHooks:
    if not _REVIEWS:
        raise InternalError("the review module is not loaded (import mnoted.service)")
    return _REVIEWS[0]


def handles(
    name: str, *, store_only: bool = False, cached: bool = False
) -> Callable[[Handler], Handler]:
    """Register the handler of a declared tool (one handler per declaration).

    ``store_only``: the handler reads and writes nothing but the workspace store (Git, the
    sidecar), so a call can be staged with others and answered once the group is durable
    (:meth:`Service.groupable`). ``cached``: a read whose answer depends only on the
    caller, the arguments and the one page it loads as HEAD has it, so the same call can
    be answered again from :mod:`mnoted.service.readcache` while that page is unchanged.
    """
    if name not in TOOLS:
        raise KeyError(f"{name} is not a declared tool")

    def register(fn: Handler) -> Handler:
        if name in HANDLERS:
            raise KeyError(f"{name} already has a handler")
        HANDLERS[name] = fn
        if store_only:
            STORE_ONLY.add(name)
        if cached:
            if TOOLS[name].writes:
                raise KeyError(f"{name} writes: its answers cannot be kept")
            CACHED.add(name)
        return fn

    return register


_REPLANS = 3
"""Plans of one write when the page keeps changing between its read and its commit."""


def _read_key(call: Call) -> str:
    args = call.args.model_dump(mode="json")
    return readcache.request_key(call.spec.name, call.ws.workspace_id, call.document_ref, args)


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


def _fold_flat(raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], frozenset[str]]:
    """A flat call (no ``args`` object) with the tool's own arguments moved into ``args``,
    and which envelope names they took.

    The rule that keeps the two apart (docs/protocol.md): in the flat form, a top-level
    field the tool's arguments declare is the tool's argument, even where the envelope has
    a field of that name (``page.create``'s ``path``, a review tool's ``sessionId``,
    ``plan_update``'s ``reason``); the envelope's own is then given by its snake_case alias
    (``session_id``), or the call is sent in the nested form, where ``args`` holds every
    argument and the top level is the envelope's alone. The envelope field a flat
    argument took is not required of the call.
    """
    if "args" in raw:
        return raw, frozenset()
    name = raw.get("toolName", raw.get("tool_name"))
    spec = lookup(name) if isinstance(name, str) else None
    if spec is None:
        return raw, frozenset()
    declared = spec.args.model_fields
    args = {k: v for k, v in raw.items() if k in declared}
    envelope = {k: v for k, v in raw.items() if k not in declared}
    return {**envelope, "args": args}, frozenset(args) & ENVELOPE_FIELDS


def _validation_message(exc: ValidationError) -> tuple[str, list[dict[str, Any]]]:
    problems = [
        {"field": ".".join(str(p) for p in err["loc"]) or "(request)", "problem": err["msg"]}
        for err in exc.errors(include_url=False, include_input=False)
    ]
    first = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{first['field']}: {first['problem']}{more}", problems


class Service:
    """The executor of one workspace (bound by :meth:`add`, once).

    Which workspace a call is for is decided above, by the daemon (:mod:`mnoted.host`);
    a call that names another workspace is refused here, never served. The page cache,
    the kept answers and the event bus may be shared by the services of one daemon (their
    keys name the workspace), so one bound covers them all.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        pages: PageCache | None = None,
        reads: readcache.ReadCache | None = None,
        events: EventBus | None = None,
    ) -> None:
        self.ws: WorkspaceApi | None = None
        self.pages = pages if pages is not None else PageCache()
        self.reads = reads if reads is not None else readcache.ReadCache()
        self.events = events if events is not None else EventBus()
        self.clock = clock
        self.review_store: ReviewStore | None = None  # opened on first use: service.review

    def add(self, ws: WorkspaceApi) -> None:
        """Serve ``ws`` (a service serves one workspace; binding another is a bug)."""
        if self.ws is not None and self.ws is not ws:
            raise ValueError(f"this service serves {self.ws.workspace_id}, not {ws.workspace_id}")
        self.ws = ws

    @staticmethod
    def groupable(raw: Any, actor: Actor, ws: WorkspaceApi) -> bool:
        """Whether a call may land in a group with others (:meth:`Workspace.group`).

        Its tool's effects must all be in the store, and a write must not become a review
        session (those live outside the store).
        """
        name = raw.get("toolName") if isinstance(raw, Mapping) else None
        spec = lookup(name) if isinstance(name, str) else None
        if spec is None or spec.name not in STORE_ONLY:
            return False
        return not (spec.writes and approval_required(actor, ws, spec))

    @staticmethod
    def hidden(ref: str, actor: Actor) -> MnoteError:
        """The one answer for a page that is missing or that the caller may not see."""
        if actor.is_owner:
            return NotFound(f"no page {ref!r} in this workspace", ref=ref)
        return PermissionDenied(
            f"no page {ref!r} is available to you",
            hint="Check the documentId, or ask the owner for a grant that covers the page.",
        )

    # -- the pipeline ---------------------------------------------------------------------
    def call(self, raw: Mapping[str, Any], actor: Actor) -> dict[str, Any]:
        """Run one tool call; always returns a response envelope, never raises."""
        return self._respond(raw, actor)[0].to_wire()

    def answer(self, raw: Any, actor: Actor) -> bytes:
        """:meth:`call` as the bytes that go on the wire (the daemon's path): a read whose
        answer is kept (:mod:`~mnoted.service.readcache`) is encoded once, for both."""
        response, body = self._respond(raw, actor)
        if body is not None:
            return readcache.envelope(
                response.toolName, response.toolCallId, response.traceId, body
            )
        return wire_bytes(response.to_wire())

    def _respond(self, raw: Any, actor: Actor) -> tuple[ToolResponse, bytes | None]:
        """The response, and the encoded body of a read's answer if it was made (else None)."""
        name = str(raw.get("toolName", "")) if isinstance(raw, Mapping) else ""
        try:
            return self._call(raw, actor)
        except MnoteError as exc:
            return self._failure(raw, name, exc, actor), None
        except Exception as exc:
            error = InternalError(f"internal error: {type(exc).__name__}: {exc}")
            error.__cause__ = exc  # (its traceback goes to the log)
            return self._failure(raw, name, error, actor), None

    def call_failed(self, raw: Any, exc: MnoteError, actor: Actor | None = None) -> dict[str, Any]:
        """The response envelope of a call refused before it ran."""
        served = self.ws.workspace_id if self.ws is not None else None
        return failure(raw, exc, actor, served).to_wire()

    def _failure(
        self, raw: Any, name: str, exc: MnoteError, actor: Actor | None = None
    ) -> ToolResponse:
        return failure(raw, exc, actor, self.ws.workspace_id if self.ws is not None else None)

    def _call(self, raw: Mapping[str, Any], actor: Actor) -> tuple[ToolResponse, bytes | None]:
        call = self._admit(raw, actor)
        handler = HANDLERS.get(call.spec.name)
        if handler is None:
            raise InternalError(f"{call.spec.name} is declared but has no handler")
        if call.spec.writes:
            response = self._write(call, handler)
            return response, call.kept  # the answer kept for a retry is the one sent
        result = handler(call)
        assert isinstance(result, dict)
        response = self._ok(
            call,
            result,
            Audit(
                effect="read", workspaceId=call.ws.workspace_id, documentId=result.get("documentId")
            ),
        )
        if call.spec.name in CACHED:
            return response, self._keep_answer(call, response)
        return response, None

    def _admit(self, raw: Any, actor: Actor) -> Call:
        """Steps 1-5 of every call: who, where, which tool, what scopes, what arguments.

        Reads the workspace's configuration only, so the event loop may admit a call too
        (:meth:`cached_answer`).
        """
        if not isinstance(raw, Mapping):
            raise InvalidArguments("a tool call must be a JSON object")
        raw, taken = _fold_flat(raw)
        try:
            request = ToolRequest.model_validate(raw)
        except ValidationError as exc:
            message, problems = _validation_message(exc)
            raise InvalidArguments(message, problems=problems) from None
        spec = lookup(request.toolName)
        if spec is None:
            raise UnknownTool(f"no tool named {request.toolName!r}", tool=request.toolName)
        now = self.clock()
        # 1. who: a valid token, acting as itself
        invalid = actor.invalid_at(now)
        if invalid is not None:
            raise PermissionDenied(invalid)
        if request.actorId is not None and request.actorId != actor.actor_id and not actor.is_owner:
            raise PermissionDenied("actorId does not match the token")
        # 2. where: a workspace the caller is a member of
        ws = self._workspace(request, actor)
        # 3. the tool is enabled, and 4. the declared and granted scopes suffice
        avail = availability(spec, ws.config.disabled_tools, None)
        if not avail["enabled"]:
            raise ToolDisabled(f"{spec.name} is {avail['unsupportedReason']}", tool=spec.name)
        if request.capabilityScope is not None and not scope_covers(
            spec.scopes, request.capabilityScope
        ):
            raise PermissionDenied(
                f"capabilityScope {request.capabilityScope} does not cover {list(spec.scopes)}",
                hint="Declare the scopes the tool needs, or leave capabilityScope out.",
            )
        if actor.scopes is not None and not scope_covers(spec.scopes, actor.scopes):
            raise PermissionDenied(f"this token lacks scope {', '.join(spec.scopes)}")
        # 5. the envelope fields this tool requires, and its arguments
        args = self._arguments(spec, request, taken)
        return Call(spec, request, args, actor, ws, self, now)

    # -- kept answers of reads (service.readcache) ------------------------------------------
    def cached_answer(self, raw: Any, actor: Actor) -> bytes | None:
        """The encoded response to a repeated read whose answer still holds, else None.

        Called on the daemon's event loop before a call is sent to its workspace's thread;
        None (a miss, or any problem with the call, which the call itself then reports)
        sends it on.
        """
        if not isinstance(raw, Mapping) or raw.get("toolName") not in CACHED:
            return None
        try:
            call = self._admit(raw, actor)
            answer = self.reads.get(actor, _read_key(call))
            if answer is None or not actor.may_access(answer.path):
                return None
            if not call.ws.still_as_read(answer.basis, answer.path):
                return None
        except MnoteError:
            return None
        request = call.request
        return readcache.envelope(call.spec.name, request.toolCallId, request.traceId, answer.body)

    def _keep_answer(self, call: Call, response: ToolResponse) -> bytes:
        """A read's encoded answer, kept if it rests on one page checked against the branch
        itself."""
        body = _encoded(response)
        if len(call.loaded) == 1:
            path = call.loaded[0].path
            basis = call.ws.read_basis(path)
            if basis is not None:
                self.reads.put(call.actor, _read_key(call), readcache.Answer(basis, path, body))
        return body

    def _workspace(self, request: ToolRequest, actor: Actor) -> WorkspaceApi:
        """This service's workspace, if the call and its caller may have it."""
        ws = self.ws
        if ws is None:
            raise InternalError("the service was asked for a call before its workspace opened")
        wid = request.workspaceId or actor.workspace_id
        if wid is not None and (wid != ws.workspace_id or actor.workspace_id not in (None, wid)):
            raise PermissionDenied(f"no workspace {wid!r} is available to you")
        return ws

    def _arguments(
        self, spec: ToolSpec, request: ToolRequest, taken: frozenset[str] = frozenset()
    ) -> BaseModel:
        missing = [
            f
            for f in spec.required_fields
            if getattr(request, f, None) is None and f != "workspaceId" and f not in taken
        ]
        if spec.needs_document and "documentId" in missing and request.path is not None:
            missing.remove("documentId")
        if missing:
            hint = (
                "Name the page with documentId (its id, or its workspace-relative path)."
                if missing == ["documentId"]
                else "Writes need idempotencyKey and an explicit dryRun; every call needs "
                "sessionId, runId, toolCallId and traceId"
                + (", and this tool a documentId." if "documentId" in missing else ".")
            )
            raise InvalidArguments(
                f"{spec.name} requires {', '.join(missing)}", hint=hint, missing=missing
            )
        args = dict(request.args)
        declared = set(spec.args.model_fields)
        for key, value in request.extras().items():
            if key in declared and key not in args:
                args[key] = value
            elif key not in declared:
                raise InvalidArguments(f"unknown field {key!r} for {spec.name}", field=key)
        try:
            return spec.args.model_validate(args)
        except ValidationError as exc:
            message, problems = _validation_message(exc)
            raise InvalidArguments(message, problems=problems) from None

    def _ok(self, call: Call, result: dict[str, Any], audit: Audit) -> ToolResponse:
        audit.actorId = call.actor.actor_id
        if call.spec.writes:  # (seed 004 §6's command record; a read's answer may be kept)
            provenance.fill(audit, call)
        return ToolResponse(
            ok=True,
            toolName=call.spec.name,
            toolCallId=call.request.toolCallId,
            traceId=call.request.traceId,
            result=result,
            audit=audit,
        )

    # -- writes ---------------------------------------------------------------------------
    def _write(self, call: Call, handler: Handler) -> ToolResponse:
        ws, request = call.ws, call.request
        key = request.idempotencyKey
        digest = request_hash(call)
        call.authorize_request()  # (before the actor's stored answers are looked at)
        if key and not request.dryRun:
            record = ws.idempotency.check(key, digest, call.actor.actor_id)
            if record is not None:
                return self._replay(call, record, digest)
        for _ in range(_REPLANS - 1):
            try:
                return self._plan_and_write(call, handler, key, digest)
            except BaseChanged:
                # Someone saved the page between this call's read and its commit (the
                # store committed their save first): plan the write again on what they
                # saved, so their edit stays and the call still applies (or says why not).
                call.loaded.clear()
        return self._plan_and_write(call, handler, key, digest)

    def _plan_and_write(
        self, call: Call, handler: Handler, key: str | None, digest: str
    ) -> ToolResponse:
        ws, request, spec = call.ws, call.request, call.spec
        plan = handler(call)
        if isinstance(plan, dict):
            return self._session_result(call, plan, key, digest)
        if plan.loaded is not None:
            self._guard_page(call, plan)
        waits = not request.dryRun and needs_review(call, plan)
        if plan.changes and (request.dryRun or waits):
            ws.check_writable(plan.changes)  # (refused as the write would be; apply checks it)
        if waits:
            review = reviews()
            args = call.wire_args
            session = review.propose(
                call, spec.name, args, review.proposal_of(spec.name, args, plan), plan
            )
            return self._session_result(call, session, None, digest)
        changed = plan.edit.changed_block_ids if plan.edit else []
        document_id = plan.document.document_id if plan.document else None
        result = {"commandName": plan.command, "dryRun": bool(request.dryRun), **plan.result}
        result.setdefault("changedBlockIds", changed)
        if plan.edit is not None:
            result.setdefault("diff", block_diff(plan.edit))
            result.setdefault("unifiedDiff", plan.edit.diff)
        _preview_fields(call, plan, result)
        if request.dryRun or not (plan.changes or plan.from_disk):
            result.setdefault("revision", plan.loaded.revision if plan.loaded else None)
            if not request.dryRun and plan.result.get("commandId"):
                return self._ok(call, result, _committed_before(call, plan, result, changed))
            audit = Audit(
                effect="dry_run" if request.dryRun else "none",
                workspaceId=ws.workspace_id,
                documentId=document_id,
                revision=result["revision"],
                changedBlockIds=changed,
                commandName=plan.command,
            )
            return self._ok(call, result, audit)
        meta = CommandMeta(
            plan.command,
            actor=call.actor.actor_id,
            trace_id=request.traceId,
            tool=spec.name,
            tool_call_id=request.toolCallId,
            run_id=request.runId,
            session_id=request.sessionId,
            idempotency_key=key,
            request_hash=digest,
            extra=provenance.trailers(call),
        )
        if plan.from_disk:
            made = ws.commit_external(plan.from_disk, meta=meta)
            if made is None:  # the watcher committed it for the grant in the meantime
                return self._ok(call, result, _committed_before(call, plan, result, changed))
            commit = made
        else:
            commit = ws.apply(meta, plan.changes)
            if not commit.replayed:
                read_back(ws, plan, commit)
            if commit.planned is not None:
                result.setdefault("warnings", []).append(
                    f"saved by someone else as it landed (commit {commit.parent}): the write "
                    f"was applied again on their save, as commit {commit.commit}"
                )
        if commit.replayed:  # (the store's own check; the one above normally answers)
            record = ws.idempotency.check(key, digest, call.actor.actor_id) if key else None
            if record is not None:
                return self._replay(call, record, digest)
        if plan.after_commit is not None:
            result.update(plan.after_commit(ws, commit.commit))
        result["revision"] = commit.commit
        document_id = document_id or result.get("documentId")  # (a page just created)
        path = result.get("path") or (plan.document.path if plan.document else None)
        audit = Audit(
            effect="write",
            commandId=commit.command_id,
            workspaceId=ws.workspace_id,
            documentId=document_id,
            revision=commit.commit,
            changedBlockIds=changed,
            commandName=plan.command,
            rebased=result.get("rebased") or None,
        )
        response = self._ok(call, result, audit)
        if key:
            _keep(call, key, digest, response)
        review = reviews()
        ws.with_landing(  # (kept in the group's review batch: dropped if it fails)
            lambda: review.record_applied(
                call, plan, commit.commit, commit.command_id, document_id, path
            )
        )
        self.landed(
            ws,
            plan,
            commit,
            path=path,
            document_id=document_id,
            tool=spec.name,
            tool_call_id=request.toolCallId,
            trace_id=request.traceId,
            actor=call.actor.actor_id,
            externalCommit=commit.external_commit,
        )
        return response

    def _replay(self, call: Call, record: IdempotencyRecord, digest: str) -> ToolResponse:
        """The answer to a write retried with its idempotency key: nothing is written again.

        The answer kept with the record, or, when the first try landed but its answer was
        lost (an I/O error after the commit, a crash, a group completed from its journal),
        one made from its commit, then kept for later retries. The record is the caller's
        own (keys are scoped to the actor); the grant is checked again on every path its
        commit touched, so a grant narrowed since refuses the replay like a missing page.
        """
        paths = [] if call.actor.is_owner else call.ws.paths_of_commit(record.commit)
        if not visibility.may_see_all(call.actor, call.ws, paths):
            ref = call.request.documentId or call.request.path or getattr(call.args, "path", "")
            raise self.hidden(str(ref), call.actor)
        if record.result_json:
            stored = json.loads(record.result_json)
            audit = Audit.model_validate({**stored["audit"], "replayed": True})
            return self._ok(call, stored["result"], audit)
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
        audit = Audit(
            effect="write",
            commandId=record.command_id,
            workspaceId=ws.workspace_id,
            documentId=document_id,
            revision=record.commit,
            commandName=command,
            replayed=True,
        )
        response = self._ok(call, result, audit)
        _keep(call, record.key, digest, response)
        return response

    def landed(
        self,
        ws: WorkspaceApi,
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
        if plan.edit is not None and plan.document is not None:
            blob = ws.blob_id(plan.document.path)
            if blob is not None:
                self.pages.remember_ids(ws, plan.document, blob, plan.edit.page)
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
        readers = visibility.readers_of(ws, path) + list(plan_paths(plan))
        event[visibility.READERS] = sorted(set(readers))
        ws.after_landing(lambda: self.events.publish("commit", **event))

    def _session_result(
        self, call: Call, session: dict[str, Any], key: str | None, digest: str
    ) -> ToolResponse:
        """The answer of a call that produced a review session (and maybe, on accept, a commit)."""
        applied = session.get("applied") if session.get("state") == "applied" else None
        committed = bool(applied and applied.get("commandId"))
        audit = Audit(
            effect="write" if committed else ("dry_run" if call.request.dryRun else "none"),
            commandId=applied.get("commandId") if committed and applied else None,
            workspaceId=call.ws.workspace_id,
            documentId=session.get("documentId"),
            revision=(applied or {}).get("commit") or (session.get("base") or {}).get("revision"),
            changedBlockIds=[
                c["blockId"] for c in (session.get("preview") or {}).get("changedBlocks", [])
            ],
            commandName=call.spec.command,
        )
        response = self._ok(call, {**session, "reviewSessionId": session["sessionId"]}, audit)
        if committed and key:
            _keep(call, key, digest, response)
        return response

    def accept_hash(self, call: Call) -> str:
        """The fingerprint an accept commit carries, so a repeated accept replays."""
        return request_hash(call)

    def _guard_page(self, call: Call, plan: WritePlan) -> None:
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
        before = self.pages.at_revision(call.ws, loaded.doc, base)
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


def _encoded(response: ToolResponse) -> bytes:
    """The encoded ``"result": ..., "audit": ...`` of a successful answer."""
    wire = response.to_wire()
    return readcache.encode(wire["result"], wire["audit"])


def _keep(call: Call, key: str, digest: str, response: ToolResponse) -> None:
    """Keep a write's answer with its idempotency record, to replay it as it was (and
    send it encoded as kept: one encoding for both)."""
    call.kept = _encoded(response)
    call.ws.idempotency.record(key, digest, (b"{%s}" % call.kept).decode(), call.actor.actor_id)


def approval_required(actor: Actor, ws: WorkspaceApi, spec: ToolSpec) -> bool:
    """Whether ``actor``'s writes with ``spec`` wait for a person (the approval mode)."""
    mode = ws.config.approval_mode
    return not actor.is_owner and (
        mode == "required" or (mode == "review" and spec.annotations.requiresApproval)
    )


def needs_review(call: Call, plan: WritePlan) -> bool:
    """Whether this write becomes a review session instead of a commit: every write kind
    (an edit, a page created, an artifact, a file grant's release) passes the same gate.
    (A grant made before private copies released the bytes on disk: it is refused where
    this would hold, before it plans.)"""
    if not plan.changes:
        return False
    return approval_required(call.actor, call.ws, call.spec)


def target_path(ws: WorkspaceApi, ref: str) -> str | None:
    """The workspace path a page reference names (its documentId's path, or the path
    itself), from the registry alone; None if it names none."""
    try:
        return ws.resolve(ref).path
    except NotFound:
        pass
    try:
        return normalize(ref)
    except PathRejected as exc:  # (refused later, in the same words, if the grant covers it)
        return str(exc.details.get("path", ref))


def plan_paths(plan: WritePlan) -> list[str]:
    """Every path a write plan touches: its page, and each change's paths."""
    paths = {plan.document.path} if plan.document is not None else set()
    for change in plan.changes:
        if isinstance(change, Move):
            paths.update((change.old, change.new))
        else:
            paths.add(change.path)
    paths.update(plan.from_disk)
    return sorted(paths)


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


def block_diff(edit: EditResult) -> list[dict[str, Any]]:
    """Per changed block: what it was and what it becomes (the seed's ``diff`` array)."""
    out = []
    for ident in edit.changed_block_ids:
        old = edit.before.index.get(ident)
        new = edit.page.index.get(ident)
        op = "update" if old and new else ("insert" if new else "delete")
        entry: dict[str, Any] = {"op": op, "blockId": ident}
        if old is not None:
            entry["before"] = old.text
        if new is not None:
            entry["after"] = new.text
            entry["type"] = new.type
        out.append(entry)
    return out


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def page_write(call: Call, loaded: LoadedPage, edit: EditResult, **extra: Any) -> WritePlan:
    """The plan of an edit to one existing page (a write of its new bytes)."""
    changes: list[Change] = []
    if edit.changed:
        changes.append(Write(loaded.path, edit.page.to_bytes(), base_blob=loaded.blob))
    return WritePlan(
        command=call.spec.command or call.spec.name,
        changes=changes,
        result={"documentId": loaded.doc.document_id, "path": loaded.path, **extra},
        loaded=loaded,
        edit=edit,
        document=loaded.doc,
    )


def _preview_fields(call: Call, plan: WritePlan, result: dict[str, Any]) -> None:
    """What a review preview shows, on a direct write's result too (seed 003 §3.3):
    ``changedBlocks``, ``risk``, ``blocked``, ``warnings``; and page.save's seed-000
    summary."""
    review = reviews()
    preview = review.preview_of(call.spec.name, plan)
    for key in ("changedBlocks", "risk", "blocked", "warnings"):
        result.setdefault(key, preview[key])
    if call.request.dryRun and call.spec.name in REVIEW_DRAFTS and plan.edit is not None:
        # seed 003 §8 D: the session a review of this write would hold (nothing is kept)
        args = call.wire_args
        result["reviewSession"] = review.propose(
            call, call.spec.name, args, review.proposal_of(call.spec.name, args, plan), plan
        )
    if call.spec.name == "mnote.page.save" and plan.edit is not None:
        result.setdefault("diffSummary", save_summary(call.args.mode, result["diff"]))


REVIEW_DRAFTS = frozenset({"mnote.doc.apply_block_ops", "mnote.doc.markdown_edit"})
"""Writes whose dry run also returns the review session it would make (as plan_update)."""


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
    return Audit(
        effect="write" if command_id else "none",
        commandId=command_id,
        workspaceId=ws.workspace_id,
        documentId=plan.document.document_id if plan.document else None,
        revision=current,
        changedBlockIds=changed,
        commandName=plan.command,
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
