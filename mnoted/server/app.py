"""The HTTP/JSON API on the daemon's Unix socket.

``GET /v1/health``, ``GET /v1/workspaces[?brief=true]``, ``GET /v1/tools``, ``POST /v1/tools/call``,
``GET /v1/events`` (server-sent events). Tool failures are HTTP 200 with ``ok: false``;
4xx answers are only for malformed HTTP (bad JSON, too large, no token), and they carry
the same ``error`` object. Nothing a client sends can stop the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from mnoted.contract.envelope import Audit
from mnoted.contract.manifest import manifest
from mnoted.errors import InvalidArguments, MnoteError, PermissionDenied, TooLarge
from mnoted.server.unixsocket import peer_uid
from mnoted.service import visibility
from mnoted.service.actors import Actor

if TYPE_CHECKING:
    from mnoted.server.connections import ConnectionGuard
    from mnoted.service.events import EventBus
    from mnoted.store import Workspace

log = logging.getLogger("mnoted.http")
ACTOR = web.RequestKey("actor", Actor)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Served(Protocol):
    """One served workspace as the app sees it (:class:`mnoted.host.Host`)."""

    @property
    def ws(self) -> Workspace | None: ...

    @property
    def workspace_id(self) -> str: ...


class Daemon(Protocol):
    """What the app asks of the daemon (:class:`mnoted.server.daemon.Daemon`), so this
    module needs nothing from the one that builds it."""

    uid: int
    connections: ConnectionGuard

    @property
    def events(self) -> EventBus: ...

    def clock(self) -> float: ...

    def actor_for(self, authorization: str) -> Actor | None: ...

    def host_for(self, workspace_id: str | None, actor: Actor) -> Served: ...

    def health(self) -> dict[str, Any]: ...

    async def workspace_status(self, actor: Actor) -> list[dict[str, Any]]: ...

    def workspace_roots(self, actor: Actor) -> list[dict[str, Any]]: ...

    def call_failed(self, payload: Any, exc: MnoteError, actor: Actor | None) -> dict[str, Any]: ...

    async def call(self, payload: Any, actor: Actor, size: int) -> bytes: ...

    def may_see(self, actor: Actor, event: dict[str, Any]) -> bool: ...

    async def sync_now(self, workspace_id: str | None, actor: Actor, resume: bool) -> Any: ...


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 4 * 1024 * 1024
    max_json_depth: int = 64
    heartbeat_seconds: float = 15.0
    keepalive_seconds: float = 75.0  # an idle kept connection is closed after this
    request_seconds: float = 120.0
    first_request_seconds: float = 5.0  # a connection that sends no request head is closed
    connections_per_caller: int = 256  # open connections one process may hold
    event_write_seconds: float = 5.0  # an event stream whose reader takes no bytes is dropped
    event_buffer: int = 1_000  # events held for one stream's reader before it is dropped
    event_buffer_bytes: int = 65_536  # bytes of events held in one stream's socket buffers


def error_body(exc: MnoteError) -> dict[str, Any]:
    """A refusal before any tool ran (no token, not JSON), in the full shape of seed 000
    §3: the seven keys of every answer, with nothing known of the call left null."""
    return {
        "ok": False,
        "toolName": "",
        "toolCallId": None,
        "traceId": None,
        "result": None,
        "audit": Audit(effect="none").model_dump(mode="json"),
        "error": exc.to_dict(),
    }


def json_error(status: int, exc: MnoteError) -> web.Response:
    return web.json_response(error_body(exc), status=status)


def _closing(response: web.Response) -> web.Response:
    """``response``, after which its connection is closed (``Connection: close``)."""
    response.force_close()
    return response


def json_depth(value: Any, limit: int) -> int:
    """Nesting depth of a parsed JSON value, counted without recursion, capped at ``limit + 1``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def build_app(daemon: Daemon, limits: Limits) -> web.Application:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        daemon.connections.request_started(transport)
        sock = transport.get_extra_info("socket") if transport else None
        uid = peer_uid(sock) if sock is not None else None
        if uid is not None and uid != daemon.uid:
            return _closing(json_error(403, PermissionDenied("this socket serves its owner only")))
        if request.path != "/v1/health":
            try:
                actor = daemon.actor_for(request.headers.get("Authorization", ""))
            except MnoteError as exc:  # (a damaged token file: that file's error)
                return json_error(503, exc)
            if actor is None:  # (and the connection closed: no idle unauthenticated ones)
                return _closing(
                    json_error(
                        401,
                        PermissionDenied(
                            "a valid token is required",
                            hint="Send 'Authorization: Bearer <token>'; an agent's token is "
                            "made by its owner with `mnote grant create`.",
                        ),
                    )
                )
            invalid = actor.invalid_at(daemon.clock())
            if invalid is not None and request.path != "/v1/tools/call":
                # (a call is answered in its envelope, by the executor's own check)
                return json_error(401, PermissionDenied(invalid))
            request[ACTOR] = actor
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status == 413:
                return json_error(413, TooLarge(f"request body over {limits.max_body_bytes} bytes"))
            return json_error(exc.status, InvalidArguments(exc.reason))
        except MnoteError as exc:
            return json_error(400, exc)
        except Exception:  # the daemon keeps serving whatever one request does
            log.exception("unhandled error on %s %s", request.method, request.path)
            from mnoted.errors import InternalError

            return json_error(500, InternalError("internal error; see the daemon log"))

    async def health(request: web.Request) -> web.Response:
        return web.json_response(daemon.health())

    async def workspaces(request: web.Request) -> web.Response:
        actor = request[ACTOR]
        if request.query.get("brief") == "true":  # ids and roots: no workspace's thread asked
            return web.json_response({"workspaces": daemon.workspace_roots(actor)})
        return web.json_response({"workspaces": await daemon.workspace_status(actor)})

    async def tools(request: web.Request) -> web.Response:
        actor = request[ACTOR]
        served = daemon.host_for(request.query.get("workspaceId"), actor)
        disabled = served.ws.config.disabled_tools if served.ws else frozenset()
        mode = served.ws.config.approval_mode if served.ws else None
        caller = {
            "actorId": actor.actor_id,
            "kind": actor.kind,
            "scopes": None if actor.scopes is None else sorted(actor.scopes),
            "paths": list(actor.grants),
            "protectEditing": "refused" if not actor.is_owner else "allowed",
        }
        body = manifest(disabled, None if actor.is_owner else actor.scopes, mode, caller)
        body["workspaceId"] = served.workspace_id
        return web.json_response(body)

    async def call(request: web.Request) -> web.Response:
        actor = request[ACTOR]
        raw = await request.read()
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            message = (
                "request body is not JSON"
                if isinstance(exc, ValueError)
                else "JSON nested too deep"
            )
            return json_error(400, InvalidArguments(message))
        limit = limits.max_json_depth
        # (fewer brackets than the limit cannot nest deeper: most requests skip the walk)
        if raw.count(b"[") + raw.count(b"{") > limit and json_depth(payload, limit) > limit:
            too_deep = InvalidArguments(f"JSON nested deeper than {limits.max_json_depth}")
            return web.json_response(daemon.call_failed(payload, too_deep, actor), status=400)
        try:  # (the daemon decides the call's workspace once, and its limit with it)
            body = await daemon.call(payload, actor, len(raw))
        except TooLarge as exc:
            return json_error(413, exc)
        return web.Response(body=body, content_type="application/json")

    async def events(request: web.Request) -> web.StreamResponse:
        actor = request[ACTOR]
        authorization = request.headers.get("Authorization", "")
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        stream = _Stream(request.transport, limits.event_buffer)
        _bound_buffers(request.transport, limits.event_buffer_bytes)
        await response.prepare(request)
        loop = asyncio.get_running_loop()

        def deliver(event: dict[str, Any]) -> None:
            if daemon.may_see(actor, event):
                loop.call_soon_threadsafe(stream.offer, visibility.public(event))

        unsubscribe = daemon.events.subscribe(deliver)
        request.app[STREAMS].add(stream)
        quiet = 0.0
        sent = 0  # ids count this stream's events only: a gap would tell of a hidden one
        try:
            await stream.send(response, b": connected\n\n", limits.event_write_seconds)
            while not stream.ended:
                try:
                    event = await asyncio.wait_for(stream.queue.get(), TOKEN_CHECK_SECONDS)
                except TimeoutError:
                    event = None
                    quiet += TOKEN_CHECK_SECONDS
                if stream.ended:  # the daemon stops (`_end_streams`)
                    break
                # the stream lasts as long as its token acts (revoked, expired, rotated: ends)
                if not _still_valid(daemon, authorization):
                    break
                if event is None:
                    if quiet >= limits.heartbeat_seconds:
                        quiet = 0.0
                        await stream.send(response, b": ping\n\n", limits.event_write_seconds)
                    continue
                quiet = 0.0
                sent += 1
                event["id"] = sent
                data = json.dumps(event, separators=(",", ":"))
                chunk = f"id: {event['id']}\nevent: {event['type']}\ndata: {data}\n\n"
                await stream.send(response, chunk.encode(), limits.event_write_seconds)
        except (ConnectionResetError, asyncio.CancelledError, _Dropped):
            stream.drop()
        finally:
            unsubscribe()
            request.app[STREAMS].discard(stream)
        return response

    async def sync(request: web.Request) -> web.Response:
        """``mnote sync now``: one fetch-merge-push cycle now (``?resume=1`` after a stop)."""
        actor = request[ACTOR]
        resume = request.query.get("resume") in ("1", "true")
        status = await daemon.sync_now(request.query.get("workspaceId"), actor, resume)
        return web.json_response(status)

    app = web.Application(middlewares=[guard], client_max_size=limits.max_body_bytes)
    app.router.add_get("/v1/health", health)
    app.router.add_get("/v1/workspaces", workspaces)
    app.router.add_get("/v1/tools", tools)
    app.router.add_post("/v1/tools/call", call)
    app.router.add_get("/v1/events", events)
    app.router.add_post("/v1/sync", sync)
    app["started"] = time.time()
    app[STREAMS] = set()
    app.on_shutdown.append(_end_streams)
    return app


STREAMS = web.AppKey("streams", set["_Stream"])
"""The open ``/v1/events`` streams."""

TOKEN_CHECK_SECONDS = 1.0
"""How often a quiet event stream checks that its token still acts (and on each event)."""


class _Dropped(Exception):
    """An event stream's reader stopped taking bytes, or fell a whole buffer behind."""


class _Stream:
    """One ``/v1/events`` subscriber: at most ``buffer`` events held for it, and a write
    that does not complete in time drops it, so a reader that stops reading costs a
    bounded amount of memory and never holds the daemon's stop."""

    def __init__(self, transport: asyncio.BaseTransport | None, buffer: int) -> None:
        self.transport = transport
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=buffer)
        self.ended = False
        self.writing = False

    dropped = 0  # (streams dropped since the daemon started)

    def offer(self, event: dict[str, Any]) -> None:
        if self.ended:
            return
        if self.queue.full():  # a whole buffer behind: dropped, never the daemon's memory
            log.info("dropping an event stream %d events behind", self.queue.qsize())
            _Stream.dropped += 1
            self.drop()
            return
        self.queue.put_nowait(event)

    async def send(self, response: web.StreamResponse, data: bytes, seconds: float) -> None:
        self.writing = True
        try:
            await asyncio.wait_for(response.write(data), seconds)
        except TimeoutError:
            log.info("dropping an event stream whose reader took nothing for %.0fs", seconds)
            _Stream.dropped += 1
            raise _Dropped() from None
        finally:
            self.writing = False

    def end(self) -> None:
        """Ends the stream at its next turn: its handler returns (and the response ends)."""
        self.ended = True
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait({})  # (wakes the handler)

    def drop(self) -> None:
        """Ends the stream and closes its connection at once (its reader is not reading)."""
        self.ended = True
        if isinstance(self.transport, asyncio.Transport) and not self.transport.is_closing():
            self.transport.abort()


def stream_stats(app: web.Application) -> dict[str, int]:
    """The open event streams, those whose write waits on their reader, and those dropped."""
    streams: set[_Stream] = app[STREAMS]
    return {
        "open": len(streams),
        "waiting": sum(1 for s in streams if s.writing),
        "dropped": _Stream.dropped,
    }


def _still_valid(daemon: Daemon, authorization: str) -> bool:
    try:
        actor = daemon.actor_for(authorization)
    except MnoteError:
        return False
    return actor is not None and actor.invalid_at(time.time()) is None


def _bound_buffers(transport: asyncio.BaseTransport | None, size: int) -> None:
    """At most ``size`` bytes waiting in the connection's own and the kernel's buffers: a
    reader that stops reading is found after that much, not after megabytes."""
    if not isinstance(transport, asyncio.WriteTransport):
        return
    transport.set_write_buffer_limits(high=size)
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)


async def _end_streams(app: web.Application) -> None:
    """End every event stream as the daemon stops: aiohttp waits for every handler before
    it closes, so a stream whose reader listens is ended, and one whose reader stopped
    reading (its write waiting) is closed at once."""
    streams: set[_Stream] = app[STREAMS]
    for stream in list(streams):
        if stream.writing:
            stream.drop()
        else:
            stream.end()
