"""``mnoted``: reads its configuration and serves its workspaces on a Unix socket.

One daemon serves one or more workspaces (one :class:`~mnoted.host.Host` each) on a private Unix
socket. It starts serving without parsing any page, shuts down cleanly on SIGTERM
(the command in flight finishes, watchers stop, the socket is removed), reloads its
configuration on SIGHUP (workspaces added or removed), and reports readiness and a
watchdog heartbeat to systemd when run under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hmac
import logging
import os
import signal
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from aiohttp import web

from mnoted import __version__
from mnoted.contract.envelope import wire_bytes
from mnoted.contract.tools import TOOLS
from mnoted.errors import (
    InvalidArguments,
    MnoteError,
    PermissionDenied,
    Timeout,
    TooLarge,
    WorkspaceInvalid,
)
from mnoted.host import Companion, Host, HostShared, RunnerConfig
from mnoted.host.status import workspace_status
from mnoted.locations import OWNER_TOKEN, config_dir, default_socket_path
from mnoted.server.allocator import fix_thresholds, give_back
from mnoted.server.app import Limits, build_app, stream_stats
from mnoted.server.connections import BACKLOG, FILES_RESERVED, ConnectionGuard, raise_open_files
from mnoted.server.locations import forget_socket, owner_token, record_socket
from mnoted.server.sdnotify import notify, watchdog_interval
from mnoted.server.unixsocket import bind_private
from mnoted.service import visibility
from mnoted.service.actors import Actor
from mnoted.service.answers import failure
from mnoted.service.events import EventBus
from mnoted.store.config import know_tools
from mnoted.store.settings import Setting, read_table, unknown_keys
from mnoted.store.statcache import stamp_of

log = logging.getLogger("mnoted")


@dataclass
class DaemonConfig:
    workspaces: list[Path] = field(default_factory=list)
    # named on the command line: served whatever the file says (a reload keeps them), and
    # the daemon does not start without them (the user is there to read why)
    pinned: list[Path] = field(default_factory=list)
    socket: Path = field(default_factory=default_socket_path)
    listen: list[Path] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    config_file: Path | None = None

    @classmethod
    def load(cls, path: Path) -> DaemonConfig:
        """``config.toml``: ``workspaces``, ``socket``, ``listen``, ``[limits]``, ``[sync]``;
        every key checked (:data:`SETTINGS`), :class:`WorkspaceInvalid` naming the first
        one that is wrong."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(config_file=path)
        except (OSError, UnicodeDecodeError) as exc:
            raise WorkspaceInvalid(
                f"{path} cannot be read: {exc}", hint=f"Fix {path} and try again."
            ) from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise WorkspaceInvalid(
                f"{path} is not valid TOML: {exc}", hint=f"Fix {path} and try again."
            ) from None
        origin = str(path)
        unknown_keys(data, SETTINGS, origin)
        top = read_table(data, None, SETTINGS[None], origin)
        limits = read_table(data, "limits", SETTINGS["limits"], origin)
        sync = read_table(data, "sync", SETTINGS["sync"], origin)
        return cls(
            workspaces=[Path(p).expanduser() for p in top["workspaces"]],
            socket=Path(top["socket"]).expanduser() if top["socket"] else default_socket_path(),
            listen=[Path(p).expanduser() for p in top["listen"]],
            limits=Limits(
                max_body_bytes=limits["maxBodyBytes"],
                max_json_depth=limits["maxJsonDepth"],
                heartbeat_seconds=limits["heartbeatSeconds"],
                request_seconds=limits["requestSeconds"],
                keepalive_seconds=limits["keepAliveSeconds"],
                first_request_seconds=limits["firstRequestSeconds"],
                connections_per_caller=limits["connectionsPerCaller"],
                event_write_seconds=limits["eventWriteSeconds"],
                event_buffer=limits["eventBuffer"],
                event_buffer_bytes=limits["eventBufferBytes"],
            ),
            runner=RunnerConfig(
                watch=sync["watch"],
                quiet_seconds=sync["quietSeconds"],
                max_delay_seconds=sync["maxDelaySeconds"],
                reconcile_every=sync["reconcileSeconds"],
            ),
            config_file=path,
        )


_DAY = 86_400.0
SETTINGS: dict[str | None, dict[str, Setting]] = {
    None: {
        "workspaces": Setting("list", []),
        "socket": Setting("str", ""),
        "listen": Setting("list", []),
    },
    "limits": {
        "maxBodyBytes": Setting("int", Limits.max_body_bytes, 1024, 1 << 30),
        "maxJsonDepth": Setting("int", Limits.max_json_depth, 4, 10_000),
        "heartbeatSeconds": Setting("float", Limits.heartbeat_seconds, 0.1, 3600),
        "requestSeconds": Setting("float", Limits.request_seconds, 0.1, _DAY),
        "keepAliveSeconds": Setting("float", Limits.keepalive_seconds, 0.1, _DAY),
        "firstRequestSeconds": Setting("float", Limits.first_request_seconds, 0.1, 3600),
        "connectionsPerCaller": Setting("int", Limits.connections_per_caller, 1, 1_000_000),
        "eventWriteSeconds": Setting("float", Limits.event_write_seconds, 0.1, 3600),
        "eventBuffer": Setting("int", Limits.event_buffer, 1, 1_000_000),
        "eventBufferBytes": Setting("int", Limits.event_buffer_bytes, 4096, 1 << 26),
    },
    "sync": {
        "watch": Setting("bool", RunnerConfig.watch),
        "quietSeconds": Setting("float", RunnerConfig.quiet_seconds, 0.0, 3600),
        "maxDelaySeconds": Setting("float", RunnerConfig.max_delay_seconds, 0.01, _DAY),
        "reconcileSeconds": Setting("float", RunnerConfig.reconcile_every, 0.1, _DAY * 7),
    },
}
"""Every key of the daemon's ``config.toml``, by table (None: the top level), with its
type, default and range."""


class Daemon:
    """The running daemon: a host by workspace id, the HTTP app. Which workspace a call is
    for is decided here (:meth:`host_for`), once; that workspace's service runs it."""

    def __init__(self, config: DaemonConfig, token: str, token_file: Path | None = None) -> None:
        self.config = config
        self.token = token
        self.owner_token_file = token_file  # (re-read when it changes: :meth:`owner_token`)
        self._owner_stamp: tuple[int, ...] | None = None
        self.uid = os.getuid()
        self.shared = HostShared()
        know_tools(TOOLS)  # (a disabledTools entry that names no tool is refused)
        self.hosts: dict[str, Host] = {}
        # per-workspace services each host starts beside its runner and remote sync
        self.companions: list[Callable[[Host], Companion]] = []
        self.started = time.time()
        self._sites: list[web.SockSite] = []
        self._web: web.AppRunner | None = None
        self._app: web.Application | None = None
        self._stop = asyncio.Event()
        self.connections = ConnectionGuard(
            config.limits.first_request_seconds, config.limits.connections_per_caller, 1_000_000
        )

    # -- workspaces --------------------------------------------------------------------------
    def open_workspaces(self, roots: Sequence[Path], required: Sequence[Path] = ()) -> None:
        """Serve each of ``roots`` not served yet. One that cannot be opened is logged and
        left out, so the others are served, unless it is in ``required``: then its error
        is raised. If none at all is served, the first error is raised."""
        must = {p.resolve() for p in required}
        first: MnoteError | None = None
        for root in dict.fromkeys(p.resolve() for p in [*roots, *required]):
            if any(h.root == root for h in self.hosts.values()):
                continue
            try:
                host = Host(
                    root,
                    self.config.runner,
                    shared=self.shared,
                    after_maintenance=give_back,
                    remote=True,
                    companions=self.companions,
                )
                host.start()
            except MnoteError as exc:
                if root in must:
                    raise
                log.error("not serving %s: %s (%s)", root, exc.message, exc.hint)
                first = first or exc
                continue
            self.hosts[host.workspace_id] = host
            log.info("serving workspace=%s root=%s", host.workspace_id, root)
        if first is not None and not self.hosts:
            raise first

    def close_workspace(self, workspace_id: str) -> None:
        self.hosts.pop(workspace_id).stop()
        log.info("stopped serving workspace=%s", workspace_id)

    @property
    def events(self) -> EventBus:
        return self.shared.events

    def clock(self) -> float:
        return self.shared.clock()

    def host_for(self, workspace_id: str | None, actor: Actor) -> Host:
        """The host of the workspace a call names, else its token's, else the only one
        served; :class:`PermissionDenied` for one the caller may not use."""
        if workspace_id is None:
            # an agent's token names its workspace; the owner's names none
            workspace_id = actor.workspace_id
        if workspace_id is None:
            if len(self.hosts) == 1:
                return next(iter(self.hosts.values()))
            served = ", ".join(f"{wid} ({h.root})" for wid, h in self.hosts.items())
            raise InvalidArguments(
                "workspaceId is required: this daemon serves several workspaces",
                hint=(
                    f"Name one of them: {served}; on the command line, mnote --workspace-id "
                    "ID, or run mnote from inside the workspace's folder."
                ),
            )
        host = self.hosts.get(workspace_id)
        if host is None or (actor.workspace_id not in (None, workspace_id)):
            raise PermissionDenied(f"no workspace {workspace_id!r} is available to you")
        return host

    # -- calls -----------------------------------------------------------------------------------
    def actor_for(self, authorization: str) -> Actor | None:
        """The caller a bearer token names, or None. A workspace whose token file is
        damaged: its error (:class:`WorkspaceInvalid`, naming the file), if no other
        workspace knows the token."""
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        if hmac.compare_digest(token, self.owner_token()):
            return Actor.owner()
        damaged: MnoteError | None = None
        for host in list(self.hosts.values()):
            try:
                record = host.find_token(token)
            except MnoteError as exc:
                damaged = damaged or exc
                continue
            if record is not None:
                return Actor.from_token(record, workspace_id=host.workspace_id)
        if damaged is not None:
            raise damaged
        return None

    def owner_token(self) -> str:
        """The owner's token as its file holds it now: a rotated token (the file replaced
        or rewritten) is taken at the next request, and the old one stops working. A file
        that is gone or empty keeps the last token read."""
        path = self.owner_token_file
        if path is None:
            return self.token
        try:
            stamp = stamp_of(os.stat(path))
        except OSError:
            return self.token
        if stamp != self._owner_stamp:
            try:
                fresh = path.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                return self.token
            self._owner_stamp = stamp
            if fresh and fresh != self.token:
                log.info("the owner's token changed (%s); the old one no longer works", path)
                self.token = fresh
        return self.token

    def call_failed(self, payload: Any, exc: MnoteError, actor: Actor | None) -> dict[str, Any]:
        """The response to a call refused before a workspace's service took it."""
        served = next(iter(self.hosts)) if len(self.hosts) == 1 else None
        return failure(payload, exc, actor, served).to_wire()

    def _host_of_call(self, payload: Any, actor: Actor) -> Host:
        wid = _named_workspace(payload)
        if wid is None and actor.workspace_id is not None:
            wid = actor.workspace_id
        return self.host_for(wid if isinstance(wid, str) else None, actor)

    async def call(self, payload: Any, actor: Actor, size: int = 0) -> bytes:
        """Answer a tool call of ``size`` bytes; the response as sent on the wire.

        Which workspace it is for is decided once, here: a body over that workspace's
        ``maxRequestBytes`` raises :class:`TooLarge` before anything runs; a repeated read
        whose kept answer holds is answered on the event loop (``service.readcache``); any
        other call runs on the workspace's thread.
        """
        try:
            host = self._host_of_call(payload, actor)
        except MnoteError as exc:
            return wire_bytes(self.call_failed(payload, exc, actor))
        if host.ws is not None and size > host.ws.config.max_request_bytes:
            most = host.ws.config.max_request_bytes
            raise TooLarge(f"request over this workspace's limit of {most} bytes")
        try:
            cached = host.service.cached_answer(payload, actor)
        except Exception:  # the call then runs as any other and reports what is wrong
            log.exception("the read cache failed; the call runs in its workspace")
            cached = None
        if cached is not None:
            return cached
        limit = self.config.limits.request_seconds
        try:
            return await _answer(host.submit_call(payload, actor), limit)
        except TimeoutError:
            log.warning("call over the %.0fs limit: %s", limit, payload.get("toolName"))
            return wire_bytes(
                host.service.call_failed(
                    payload,
                    Timeout(f"the call took longer than {limit:.0f}s; it is still running"),
                    actor,
                )
            )

    def may_see(self, actor: Actor, event: dict[str, Any]) -> bool:
        return visibility.event_visible(actor, event)

    def health(self) -> dict[str, Any]:
        return {
            "ok": True,
            "version": __version__,
            "pid": os.getpid(),
            "uptimeSeconds": round(time.time() - self.started, 3),
            "workspaces": len(self.hosts),
            "socket": str(self.config.socket),
            "connections": self.connections.stats(),
            "eventStreams": stream_stats(self._app) if self._app is not None else None,
        }

    async def workspace_status(self, actor: Actor) -> list[dict[str, Any]]:
        """Each workspace's state as ``actor`` may see it (:mod:`mnoted.host.status`)."""
        wait = self.config.limits.request_seconds
        return [
            await workspace_status(host, actor, wait)
            for wid, host in list(self.hosts.items())
            if actor.workspace_id in (None, wid)
        ]

    def workspace_roots(self, actor: Actor) -> list[dict[str, Any]]:
        """Each workspace's id and root (the owner's only), without asking its thread."""
        return [
            {"workspaceId": wid, "root": str(host.root) if actor.is_owner else None}
            for wid, host in list(self.hosts.items())
            if actor.workspace_id in (None, wid)
        ]

    async def sync_now(self, workspace_id: str | None, actor: Actor, resume: bool) -> Any:
        """Run a sync cycle of the workspace now (owner only) and return its remote status."""
        if not actor.is_owner:
            raise PermissionDenied("only the workspace owner runs sync")
        host = self.host_for(workspace_id, actor)
        sync = host.sync
        assert sync is not None  # (the daemon's hosts all sync: open_workspaces)
        loop = asyncio.get_running_loop()
        status = await loop.run_in_executor(None, partial(sync.sync_now, resume=resume))
        return {"workspaceId": host.workspace_id, **status}

    # -- serving ---------------------------------------------------------------------------------
    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        files = raise_open_files()
        self.connections.total = max(64, files - FILES_RESERVED)
        log.info("open-file limit %d; at most %d connections", files, self.connections.total)
        await loop.run_in_executor(
            None, self.open_workspaces, self.config.workspaces, self.config.pinned
        )
        app = self._app = build_app(self, self.config.limits)
        self._web = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            keepalive_timeout=self.config.limits.keepalive_seconds,
        )
        await self._web.setup()
        for path in [self.config.socket, *self.config.listen]:
            sock = bind_private(path)
            site = _GuardedSite(self._web, sock, self.connections)
            await site.start()
            self._sites.append(site)
            log.info("listening socket=%s", path)
        for sig, handler in (
            (signal.SIGTERM, self.request_stop),
            (signal.SIGINT, self.request_stop),
            (signal.SIGHUP, self.reload),
        ):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, handler)
        try:
            record_socket(self.config.socket)
        except OSError as exc:  # (clients still find it by MNOTED_SOCKET or XDG_RUNTIME_DIR)
            log.warning("could not record the socket's path: %s", exc)
        print(f"mnoted {__version__} listening on {self.config.socket}", flush=True)
        notify(f"READY=1\nSTATUS=serving {len(self.hosts)} workspace(s)")
        beat = watchdog_interval()
        heartbeat = asyncio.create_task(self._heartbeat(beat)) if beat else None
        await self._stop.wait()
        notify("STOPPING=1")
        if heartbeat is not None:
            heartbeat.cancel()
        await self.shutdown()

    async def _heartbeat(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            notify("WATCHDOG=1")

    def request_stop(self) -> None:
        log.info("stopping")
        self._stop.set()

    def reload(self) -> None:
        """SIGHUP: read the configuration file again; open new workspaces, close removed ones."""
        if self.config.config_file is None:
            return
        try:
            fresh = DaemonConfig.load(self.config.config_file)
        except MnoteError as exc:  # (the configuration in use stays)
            log.error(
                "reload refused, the last good configuration stays: %s (%s)", exc.message, exc.hint
            )
            return
        wanted = {p.resolve() for p in [*fresh.workspaces, *self.config.pinned]}
        loop = asyncio.get_running_loop()

        def apply() -> None:
            for wid, host in list(self.hosts.items()):
                if host.root not in wanted:
                    self.close_workspace(wid)
            try:
                self.open_workspaces(sorted(wanted))  # (each that fails is logged)
            except MnoteError as exc:
                log.error("reload could not open a workspace: %s", exc.message)

        loop.run_in_executor(None, apply)
        log.info("reloaded %s", self.config.config_file)

    async def shutdown(self) -> None:
        if self._web is not None:
            await self._web.cleanup()
        self.connections.close_all()
        loop = asyncio.get_running_loop()
        for wid in list(self.hosts):
            await loop.run_in_executor(None, self.close_workspace, wid)
        for path in [self.config.socket, *self.config.listen]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        forget_socket(self.config.socket)
        log.info("stopped")


class _GuardedSite(web.SockSite):
    """aiohttp's Unix-socket site with :data:`BACKLOG` and each connection admitted by the
    daemon's :class:`ConnectionGuard` (``SockSite`` listens again with a backlog of 128)."""

    def __init__(self, runner: web.AppRunner, sock: Any, guard: ConnectionGuard) -> None:
        super().__init__(runner, sock, backlog=BACKLOG)
        self._guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)  # (registers the site with its runner)
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._guard.factory(server), sock=self._sock, backlog=BACKLOG
        )


async def _answer(future: Future[bytes], limit: float) -> bytes:
    """The result of a call running on a workspace's thread, or TimeoutError after ``limit``
    seconds (the call goes on; so it does if the awaiting task is cancelled).

    One future set from that thread wakes the request in two turns of the event loop
    (``wait_for(shield(wrap_future(...)))`` would take four)."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[bytes] = loop.create_future()

    def deliver(done: Future[bytes]) -> None:
        if waiter.done():  # (timed out, or the request went away)
            return
        if done.cancelled():
            waiter.cancel()
            return
        exc = done.exception()
        if exc is None:
            waiter.set_result(done.result())
        else:
            waiter.set_exception(exc)

    def expire() -> None:
        if not waiter.done():
            waiter.set_exception(TimeoutError())

    def wake(done: Future[bytes]) -> None:  # (on the workspace's thread)
        if not loop.is_closed():
            loop.call_soon_threadsafe(deliver, done)

    future.add_done_callback(wake)
    timer = loop.call_later(limit, expire)
    try:
        return await waiter
    finally:
        timer.cancel()


GC_THRESHOLDS = (50_000, 20, 100)
"""Cycle-collector generation thresholds (the default is 700, 10, 10); see :func:`run`."""


def run(config: DaemonConfig) -> int:
    """Run the daemon in the foreground until SIGTERM or SIGINT."""
    logging.basicConfig(
        level=os.environ.get("MNOTED_LOG", "INFO").upper(),
        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
        stream=sys.stderr,
    )
    if not config.workspaces and not config.pinned:
        print("mnoted: no workspace given (use --workspace DIR or a config file)", file=sys.stderr)
        return 2
    token = owner_token(config_dir())
    daemon = Daemon(config, token, config_dir() / OWNER_TOKEN)
    # Parsed pages are tens of thousands of small objects each; with the default
    # thresholds the cycle collector walks them all many times per edit of a big page.
    # The modules loaded so far never become garbage: keep them out of its walks too.
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    fix_thresholds()
    try:
        asyncio.run(daemon.serve())
    except MnoteError as exc:
        print(f"mnoted: {exc.message}\n  hint: {exc.hint}", file=sys.stderr)
        return 1
    return 0


def _named_workspace(payload: Any) -> Any:
    """The workspace a call names, as ``workspaceId`` or seed 004's ``workspace_id``."""
    if not isinstance(payload, dict):
        return None
    named = payload.get("workspaceId")
    return payload.get("workspace_id") if named is None else named
