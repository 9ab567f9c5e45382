"""The HTTP/JSON API on the daemon's Unix socket.

``GET /v1/health``, ``GET /v1/workspaces``, ``GET /v1/tools``, ``POST /v1/tools/call``,
``GET /v1/events`` (server-sent events). Tool failures are HTTP 200 with ``ok: false``;
4xx answers are only for malformed HTTP (bad JSON, too large, no token), and they carry
the same ``error`` object. Nothing a client sends can stop the daemon.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from mnoted.contract.envelope import Audit
from mnoted.contract.manifest import manifest
from mnoted.errors import InvalidArguments, MnoteError, PermissionDenied, TooLarge
from mnoted.server.unixsocket import peer_uid
from mnoted.service.actors import Actor

if TYPE_CHECKING:
    from mnoted.server.daemon import Daemon

log = logging.getLogger("mnoted.http")
ACTOR = web.RequestKey("actor", Actor)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 4 * 1024 * 1024
    max_json_depth: int = 64
    heartbeat_seconds: float = 15.0
    keepalive_seconds: float = 75.0  # an idle kept connection is closed after this
    request_seconds: float = 120.0


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
        sock = transport.get_extra_info("socket") if transport else None
        uid = peer_uid(sock) if sock is not None else None
        if uid is not None and uid != daemon.uid:
            return json_error(403, PermissionDenied("this socket serves its owner only"))
        if request.path != "/v1/health":
            actor = daemon.actor_for(request.headers.get("Authorization", ""))
            if actor is None:
                return json_error(
                    401,
                    PermissionDenied(
                        "a valid token is required",
                        hint="Send 'Authorization: Bearer <token>'; an agent's token is made "
                        "by its owner with `mnote grant create`.",
                    ),
                )
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
        return web.json_response({"workspaces": await daemon.workspace_status(actor)})

    async def tools(request: web.Request) -> web.Response:
        actor = request[ACTOR]
        runner = daemon.runner_for(request.query.get("workspaceId"), actor)
        disabled = runner.ws.config.disabled_tools if runner.ws else frozenset()
        mode = runner.ws.config.approval_mode if runner.ws else None
        caller = {
            "actorId": actor.actor_id,
            "kind": actor.kind,
            "scopes": None if actor.scopes is None else sorted(actor.scopes),
            "paths": list(actor.grants),
            "protectEditing": "refused" if not actor.is_owner else "allowed",
        }
        body = manifest(disabled, None if actor.is_owner else actor.scopes, mode, caller)
        body["workspaceId"] = runner.workspace_id
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
            return web.json_response(
                daemon.service.call_failed(payload, too_deep, actor), status=400
            )
        workspace_limit = daemon.request_limit(payload)
        if workspace_limit is not None and len(raw) > workspace_limit:
            return json_error(
                413, TooLarge(f"request over this workspace's limit of {workspace_limit} bytes")
            )
        cached = daemon.cached_answer(payload, actor)
        if cached is not None:
            return web.Response(body=cached, content_type="application/json")
        return web.Response(body=await daemon.call(payload, actor), content_type="application/json")

    async def events(request: web.Request) -> web.StreamResponse:
        actor = request[ACTOR]
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=10_000)
        loop = asyncio.get_running_loop()

        def deliver(event: dict[str, Any]) -> None:
            if daemon.may_see(actor, event):
                loop.call_soon_threadsafe(_offer, queue, event)

        unsubscribe = daemon.service.events.subscribe(deliver)
        request.app[STREAMS].add(queue)
        try:
            await response.write(b": connected\n\n")
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), limits.heartbeat_seconds)
                except TimeoutError:
                    await response.write(b": ping\n\n")
                    continue
                if event is None:  # the daemon stops (`_end_streams`)
                    break
                data = json.dumps(event, separators=(",", ":"))
                await response.write(
                    f"id: {event['id']}\nevent: {event['type']}\ndata: {data}\n\n".encode()
                )
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            unsubscribe()
            request.app[STREAMS].discard(queue)
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


STREAMS = web.AppKey("streams", set["asyncio.Queue[dict[str, Any] | None]"])
"""The queues of the open ``/v1/events`` streams."""


async def _end_streams(app: web.Application) -> None:
    """End every event stream as the daemon stops. A stream lasts as long as its reader
    listens, and aiohttp waits for every handler before it closes: a reader still
    listening held ``mnoted`` for its 60-second limit after SIGTERM, and one gone a
    moment before held it until the next ping (15 s)."""
    for queue in app[STREAMS]:
        while queue.full():
            queue.get_nowait()
        queue.put_nowait(None)


def _offer(queue: asyncio.Queue[dict[str, Any] | None], event: dict[str, Any]) -> None:
    if not queue.full():  # a reader too slow to keep up loses events, never the daemon memory
        queue.put_nowait(event)
