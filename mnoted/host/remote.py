"""Wiring of one workspace's sync into the daemon: its writer thread, review sessions, events.

The composition root (the daemon) calls :func:`attach` once a workspace's runner started;
everything the sync does to the workspace runs as a job on that runner's thread.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from typing import Any

import pygit2

from mnoted.core.merge import Held
from mnoted.host.runner import WorkspaceRunner
from mnoted.remote import blockids
from mnoted.remote.sync import Configured, RemoteSync, SyncConfig
from mnoted.service import review_sessions
from mnoted.service.actors import Actor

log = logging.getLogger(__name__)
WRITER_TIMEOUT = 120.0
SYNC_ACTOR = "sync"
_LOCAL_COMMITS = frozenset({"commit", "external_edit", "review"})


def config_from_env() -> SyncConfig:
    """The daemon's sync timing: ``MNOTE_SYNC_INTERVAL``, ``MNOTE_SYNC_PUSH_DELAY`` (seconds)."""

    def number(name: str, default: float) -> float:
        try:
            return max(0.05, float(os.environ.get(name, default)))
        except ValueError:
            return default

    return SyncConfig(
        interval=number("MNOTE_SYNC_INTERVAL", 60.0),
        push_delay=number("MNOTE_SYNC_PUSH_DELAY", 2.0),
        host=os.environ.get("MNOTE_SYNC_HOST", ""),
    )


def configured_from(ws_config: Any) -> Configured:
    """The ``[remote]`` of a workspace's config; ``MNOTE_SYNC_INTERVAL`` and
    ``MNOTE_SYNC_PUSH_DELAY``, when set, win over its timing (the operator's, and the tests')."""
    env = config_from_env()
    return Configured(
        name=ws_config.remote_name,
        url=ws_config.remote_url,
        interval=env.interval if "MNOTE_SYNC_INTERVAL" in os.environ else ws_config.sync_interval,
        push_delay=(
            env.push_delay if "MNOTE_SYNC_PUSH_DELAY" in os.environ else ws_config.push_delay
        ),
    )


def attach(runner: WorkspaceRunner, config: SyncConfig | None = None) -> RemoteSync:
    """Start the sync of ``runner``'s workspace; the caller stops it before the runner."""
    ws = runner.ws
    assert ws is not None
    service = runner.service
    wid = ws.workspace_id

    def on_writer(fn: Any) -> Any:
        return runner.submit(fn).result(timeout=WRITER_TIMEOUT)

    def head() -> tuple[str | None, str]:
        ws.refresh()
        return ws.head, ws.branch

    def land(commit: str, expect: str | None, command_id: str) -> object:
        return ws.land_commit(commit, expect=expect, command_id=command_id)

    def hold(path: str, held: Held, commit: str) -> str | None:
        """A held version as a review session proposing it in place of what the page keeps."""
        if not held.ours.strip():
            return None
        raw = {
            "toolName": "mnote.doc.plan_update",
            "workspaceId": wid,
            "path": path,
            "toolCallId": "sync_" + secrets.token_hex(6),
            "traceId": f"sync_{commit[:12]}",
            "sessionId": f"sync_{commit[:12]}",
            "runId": f"sync_{commit[:12]}",
            "idempotencyKey": f"sync_{commit}_{secrets.token_hex(6)}",
            "dryRun": False,
            "args": {
                "operations": [
                    {
                        "search": held.ours.replace("\r\n", "\n"),
                        "replace": held.theirs.replace("\r\n", "\n"),
                    }
                ],
                "reason": (
                    f"held back by the merge {commit[:12]}: "
                    + (f"frontmatter key {held.key!r}" if held.key else held.where)
                    + " changed on both devices; the page kept this device's version"
                ),
            },
        }
        answer = json.loads(service.answer(raw, Actor.owner(SYNC_ACTOR)))
        result = answer.get("result") or {}
        session = result.get("reviewSession") or result
        sid = session.get("sessionId") if isinstance(session, dict) else None
        if not sid:
            log.warning(
                "the held version of %s is kept in remote.json only: %s", path, answer.get("error")
            )
        return str(sid) if sid else None

    def publish(kind: str, **fields: Any) -> None:
        service.events.publish(kind, workspaceId=wid, **fields)

    def ids_in(old: str | None, remote: str) -> None:
        blockids.adopt(ws, service.pages, pygit2.Repository(str(ws.root)), old, remote)

    def ids_out(since: str | None, remote: str) -> str | None:
        return blockids.publish(ws, service.pages, pygit2.Repository(str(ws.root)), since, remote)

    def decided(sids: list[str]) -> set[str]:
        store = review_sessions.store_of(service, ws)
        out = set()
        for sid in sids:
            session = store.get(sid)
            if session is None or session.get("state") in review_sessions.FINISHED:
                out.add(sid)
        return out

    sync = RemoteSync(
        runner.root,
        ws.state_dir,
        on_writer,
        hold=hold,
        land=land,
        head=head,
        publish=publish,
        ids_in=ids_in,
        ids_out=ids_out,
        decided=decided,
        config=config or config_from_env(),
        configured=lambda: configured_from(ws.config),  # (read per cycle: a reload applies)
    )

    def on_event(event: dict[str, Any]) -> None:
        if event.get("workspaceId") == wid and event.get("type") in _LOCAL_COMMITS:
            sync.committed()

    sync.unsubscribe = service.events.subscribe(on_event)  # type: ignore[attr-defined]
    runner.idle_hooks.append(sync.poke)  # (a remote added by `git remote add`)
    sync.start()
    return sync


def detach(sync: RemoteSync) -> None:
    unsubscribe = getattr(sync, "unsubscribe", None)
    if unsubscribe is not None:
        unsubscribe()
    sync.stop()
