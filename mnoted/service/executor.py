"""The tool executor: admission → (a read's handler | the write path) → answer.

Every ``mnote.*`` call, whatever door it came through (socket, CLI, MCP, Hermes), runs
here, on the thread that owns the workspace: admitted once (who, where, which tool, what
scopes, what arguments: :meth:`Service._admit`), then a read runs its handler and a write
takes the write path (:mod:`mnoted.service.writes`). Every check reads the tool's one
declaration (:mod:`mnoted.contract.tools`); handlers (one module per tool family,
registered in :mod:`mnoted.service.calls`) only compute what a call reads or plans to write.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from mnoted.contract.envelope import ENVELOPE_FIELDS, ToolRequest, ToolResponse, wire_bytes
from mnoted.contract.manifest import availability, scope_covers
from mnoted.contract.tools import ToolSpec, lookup
from mnoted.errors import (
    InternalError,
    InvalidArguments,
    MnoteError,
    PermissionDenied,
    ToolDisabled,
    UnknownTool,
)
from mnoted.service import readcache, writes
from mnoted.service.actors import Actor
from mnoted.service.answers import audit, encoded, failure, ok
from mnoted.service.calls import CACHED, HANDLERS, STORE_ONLY, Call, approval_required
from mnoted.service.events import EventBus
from mnoted.service.pages import PageCache
from mnoted.store import WorkspaceApi


def _read_key(call: Call) -> str:
    args = call.args.model_dump(mode="json")
    return readcache.request_key(call.spec.name, call.ws.workspace_id, call.document_ref, args)


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
        self.reviews_recovered = False  # review_sessions.store_of settled interrupted sessions

    def add(self, ws: WorkspaceApi) -> None:
        """Serve ``ws`` (a service serves one workspace; binding another is a bug)."""
        if self.ws is not None and self.ws is not ws:
            raise ValueError(f"this service serves {self.ws.workspace_id}, not {ws.workspace_id}")
        self.ws = ws

    @staticmethod
    def groupable(raw: Any, actor: Actor, ws: WorkspaceApi) -> bool:
        """Whether a call may land in a group with others (:meth:`Workspace.group`).

        Its tool's effects must all be in the store, and a write must not become a review
        session (its state changes are published as they are written, before a group lands).
        """
        name = raw.get("toolName") if isinstance(raw, Mapping) else None
        spec = lookup(name) if isinstance(name, str) else None
        if spec is None or spec.name not in STORE_ONLY:
            return False
        return not (spec.writes and approval_required(actor, ws, spec))

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
            response = writes.write(call, handler)
            return response, call.kept  # the answer kept for a retry is the one sent
        result = handler(call)
        assert isinstance(result, dict)
        made = audit("read", call.ws.workspace_id, call=call, document_id=result.get("documentId"))
        response = ok(call, result, made)
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
        body = encoded(response)
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
