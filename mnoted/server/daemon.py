"""``mnoted``: the composition root that reads configuration and runs the daemon.

One daemon serves one or more workspaces (one runner thread each) on a private Unix
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
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from aiohttp import web

from mnoted import __version__
from mnoted.contract.envelope import wire_bytes
from mnoted.errors import (
    InvalidArguments,
    MnoteError,
    PermissionDenied,
    Timeout,
    WorkspaceInvalid,
)
from mnoted.server.allocator import fix_thresholds, give_back
from mnoted.server.app import Limits, build_app
from mnoted.server.locations import config_dir, default_socket_path, owner_token
from mnoted.server.sdnotify import notify, watchdog_interval
from mnoted.server.unixsocket import bind_private
from mnoted.service.actors import Actor
from mnoted.service.executor import Service
from mnoted.service.runner import RunnerConfig, WorkspaceRunner
from mnoted.store.statedir import STATE_DIR
from mnoted.store.tokens import TokenStore

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
        """``config.toml``: ``workspaces``, ``socket``, ``listen``, ``[limits]``, ``[sync]``."""
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls(config_file=path)
        except tomllib.TOMLDecodeError as exc:
            raise WorkspaceInvalid(f"{path} is not valid TOML: {exc}") from exc
        limits = data.get("limits", {})
        sync = data.get("sync", {})
        return cls(
            workspaces=[Path(p).expanduser() for p in data.get("workspaces", [])],
            socket=Path(data["socket"]).expanduser() if "socket" in data else default_socket_path(),
            listen=[Path(p).expanduser() for p in data.get("listen", [])],
            limits=Limits(
                max_body_bytes=int(limits.get("maxBodyBytes", Limits.max_body_bytes)),
                max_json_depth=int(limits.get("maxJsonDepth", Limits.max_json_depth)),
                request_seconds=float(limits.get("requestSeconds", Limits.request_seconds)),
                keepalive_seconds=float(limits.get("keepAliveSeconds", Limits.keepalive_seconds)),
            ),
            runner=RunnerConfig(
                watch=bool(sync.get("watch", True)),
                quiet_seconds=float(sync.get("quietSeconds", RunnerConfig.quiet_seconds)),
                max_delay_seconds=float(
                    sync.get("maxDelaySeconds", RunnerConfig.max_delay_seconds)
                ),
                reconcile_every=float(sync.get("reconcileSeconds", RunnerConfig.reconcile_every)),
            ),
            config_file=path,
        )


class Daemon:
    """The running daemon: runners by workspace id, the executor, the HTTP app."""

    def __init__(self, config: DaemonConfig, token: str) -> None:
        self.config = config
        self.token = token
        self.uid = os.getuid()
        self.service = Service()
        self.runners: dict[str, WorkspaceRunner] = {}
        self.started = time.time()
        self._sites: list[web.SockSite] = []
        self._web: web.AppRunner | None = None
        self._stop = asyncio.Event()

    # -- workspaces --------------------------------------------------------------------------
    def open_workspaces(self, roots: Sequence[Path], required: Sequence[Path] = ()) -> None:
        """Serve each of ``roots`` not served yet. One that cannot be opened is logged and
        left out, so the others are served, unless it is in ``required``: then its error
        is raised. If none at all is served, the first error is raised."""
        must = {p.resolve() for p in required}
        first: MnoteError | None = None
        for root in dict.fromkeys(p.resolve() for p in [*roots, *required]):
            if any(r.root == root for r in self.runners.values()):
                continue
            try:
                runner = WorkspaceRunner(
                    root, self.service, self.config.runner, after_maintenance=give_back
                )
                runner.start()
            except MnoteError as exc:
                if root in must:
                    raise
                log.error("not serving %s: %s (%s)", root, exc.message, exc.hint)
                first = first or exc
                continue
            self.runners[runner.workspace_id] = runner
            log.info("serving workspace=%s root=%s", runner.workspace_id, root)
        if first is not None and not self.runners:
            raise first

    def close_workspace(self, workspace_id: str) -> None:
        runner = self.runners.pop(workspace_id)
        runner.stop()
        self.service.workspaces.pop(workspace_id, None)
        log.info("stopped serving workspace=%s", workspace_id)

    def runner_for(self, workspace_id: str | None, actor: Actor) -> WorkspaceRunner:
        if workspace_id is None:
            # an agent's token names its workspace; the owner's names none
            workspace_id = actor.workspace_id
        if workspace_id is None:
            if len(self.runners) == 1:
                return next(iter(self.runners.values()))
            served = ", ".join(f"{wid} ({r.root})" for wid, r in self.runners.items())
            raise InvalidArguments(
                "workspaceId is required: this daemon serves several workspaces",
                hint=(
                    f"Name one of them: {served}; on the command line, mnote --workspace-id "
                    "ID, or run mnote from inside the workspace's folder."
                ),
            )
        runner = self.runners.get(workspace_id)
        if runner is None or (actor.workspace_id not in (None, workspace_id)):
            raise PermissionDenied(f"no workspace {workspace_id!r} is available to you")
        return runner

    # -- calls -----------------------------------------------------------------------------------
    def actor_for(self, authorization: str) -> Actor | None:
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        if hmac.compare_digest(token, self.token):
            return Actor.owner()
        for runner in list(self.runners.values()):
            record = TokenStore(runner.root / STATE_DIR).find(token)
            if record is not None:
                return Actor.from_token(record, workspace_id=runner.workspace_id)
        return None

    async def call(self, payload: Any, actor: Actor) -> bytes:
        """Run a tool call on its workspace's thread; the response as sent on the wire."""
        wid = payload.get("workspaceId") if isinstance(payload, dict) else None
        if wid is None and actor.workspace_id is not None:
            wid = actor.workspace_id
        try:
            runner = self.runner_for(wid if isinstance(wid, str) else None, actor)
        except MnoteError as exc:
            return wire_bytes(self.service.call_failed(payload, exc))
        limit = self.config.limits.request_seconds
        try:
            return await _answer(runner.submit_call(payload, actor), limit)
        except TimeoutError:
            log.warning("call over the %.0fs limit: %s", limit, payload.get("toolName"))
            return wire_bytes(
                self.service.call_failed(
                    payload, Timeout(f"the call took longer than {limit:.0f}s; it is still running")
                )
            )

    def cached_answer(self, payload: Any, actor: Actor) -> bytes | None:
        """A repeated read answered on the event loop (``service.readcache``); None: call."""
        try:
            return self.service.cached_answer(payload, actor)
        except Exception:  # the call then runs as any other and reports what is wrong
            log.exception("the read cache failed; the call runs in its workspace")
            return None

    def request_limit(self, payload: Any) -> int | None:
        """The request size limit of the workspace a call names (``maxRequestBytes``)."""
        wid = payload.get("workspaceId") if isinstance(payload, dict) else None
        runner = self.runners.get(wid) if isinstance(wid, str) else None
        if runner is None and len(self.runners) == 1:
            runner = next(iter(self.runners.values()))
        if runner is None or runner.ws is None:
            return None
        return runner.ws.config.max_request_bytes

    def may_see(self, actor: Actor, event: dict[str, Any]) -> bool:
        if actor.is_owner:
            return True
        if actor.workspace_id is not None and event.get("workspaceId") != actor.workspace_id:
            return False
        path = event.get("path")
        return path is None or actor.may_access(str(path))

    def health(self) -> dict[str, Any]:
        return {
            "ok": True,
            "version": __version__,
            "pid": os.getpid(),
            "uptimeSeconds": round(time.time() - self.started, 3),
            "workspaces": len(self.runners),
            "socket": str(self.config.socket),
        }

    async def workspace_status(self, actor: Actor) -> list[dict[str, Any]]:
        """Each workspace's state; awaited, so a long commit never stalls other requests."""
        out = []
        for wid, runner in list(self.runners.items()):
            if actor.workspace_id not in (None, wid):
                continue
            health = runner.watcher.health() if runner.watcher else None
            try:
                status = await asyncio.wait_for(
                    asyncio.wrap_future(runner.submit(partial(_runner_status, runner))),
                    self.config.limits.request_seconds,
                )
            except TimeoutError:  # the workspace's thread is still busy (a huge commit)
                status = {**_NO_STATUS, "busy": True}
            except MnoteError as exc:  # the repository refuses commits now (HEAD detached, ...)
                status = {**_NO_STATUS, "refused": exc.to_dict()}
            out.append(
                {
                    "workspaceId": wid,
                    "root": str(runner.root) if actor.is_owner else None,
                    "watcher": None
                    if health is None
                    else {
                        "state": health.state.value,
                        "watchCount": health.watch_count,
                        "overflows": health.overflows,
                        "pending": health.pending,
                        "needsReconcile": health.needs_reconcile,
                        "lastError": health.last_error,
                    },
                    "externalCommits": runner.external_commits,
                    **status,
                }
            )
        return out

    # -- serving ---------------------------------------------------------------------------------
    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(
            None, self.open_workspaces, self.config.workspaces, self.config.pinned
        )
        app = build_app(self, self.config.limits)
        self._web = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            keepalive_timeout=self.config.limits.keepalive_seconds,
        )
        await self._web.setup()
        for path in [self.config.socket, *self.config.listen]:
            sock = bind_private(path)
            site = web.SockSite(self._web, sock)
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
        print(f"mnoted {__version__} listening on {self.config.socket}", flush=True)
        notify(f"READY=1\nSTATUS=serving {len(self.runners)} workspace(s)")
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
        except MnoteError as exc:
            log.error("reload failed: %s", exc.message)
            return
        wanted = {p.resolve() for p in [*fresh.workspaces, *self.config.pinned]}
        loop = asyncio.get_running_loop()

        def apply() -> None:
            for wid, runner in list(self.runners.items()):
                if runner.root not in wanted:
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
        loop = asyncio.get_running_loop()
        for wid in list(self.runners):
            await loop.run_in_executor(None, self.close_workspace, wid)
        for path in [self.config.socket, *self.config.listen]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        log.info("stopped")


UNCOMMITTED_LISTED = 50
"""How many of a workspace's uncommitted paths its status names (each with its reason)."""
_NO_STATUS: dict[str, Any] = dict.fromkeys(
    ("head", "branch", "pendingChanges", "uncommitted", "gitOperation")
)


async def _answer(future: Future[bytes], limit: float) -> bytes:
    """The result of a call running on a workspace's thread, or TimeoutError after ``limit``
    seconds (the call goes on; so it does if the awaiting task is cancelled).

    One future set from that thread: ``wait_for(shield(wrap_future(...)))`` took four turns
    of the event loop to wake the request (0.21 ms from the answer to the response on this
    project's machine), this takes two."""
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


def _runner_status(runner: WorkspaceRunner) -> dict[str, Any]:
    ws = runner.ws
    assert ws is not None
    count, listed = runner.uncommitted(UNCOMMITTED_LISTED)
    operation = ws.operation()
    return {
        "head": ws.head,
        "branch": ws.branch,
        "pendingChanges": count,
        "uncommitted": listed,
        "gitOperation": None
        if operation is None
        else {"operation": operation[0], "end": operation[1]},
    }


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
    token = owner_token(config_dir(), create=True)
    assert token is not None
    daemon = Daemon(config, token)
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
