"""A workspace's status as ``GET /v1/workspaces`` reports it, built in this one place.

Three parts, each read where it may be read without stalling the others: what needs the
store (head, branch, uncommitted paths, the Git operation under way, the search index) on
the workspace's thread, within the request time limit (``busy`` past it, ``refused`` while
the repository refuses commits); names that are not UTF-8 from a walk of folder names off
that thread, at most every :data:`BAD_NAMES_EVERY` seconds; the remote's state off it
too. Every part passes the actor's filter: an agent sees only paths its grants cover
(:mod:`mnoted.service.visibility`), and neither the root nor the remote.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnoted.errors import MnoteError
from mnoted.service import visibility
from mnoted.service.actors import Actor
from mnoted.service.search_tools import sees_all
from mnoted.store import search_index
from mnoted.store.badnames import names_not_utf8

if TYPE_CHECKING:
    from mnoted.host.host import Host

UNCOMMITTED_LISTED = 50
"""How many of a workspace's uncommitted paths its status names (each with its reason)."""
BAD_NAMES_EVERY = 5.0
"""How often a status looks again for names that are not UTF-8 (a walk of the folders)."""
NO_STATUS: dict[str, Any] = dict.fromkeys(
    ("head", "branch", "pendingChanges", "uncommitted", "gitOperation")
)
"""The store's part of a status when the workspace's thread could not give it."""
BAD_NAME_REASON = (
    "its name is not valid UTF-8, so Git, pages and tool calls cannot hold it: "
    "rename it (e.g. convmv -f latin1 -t utf8 --notest)"
)


@dataclass
class BadNames:
    """The last walk for names under ``root`` that are not UTF-8: (when, (count, names))."""

    root: Path
    clock: Callable[[], float] = time.monotonic
    found: tuple[float, tuple[int, list[str]]] | None = field(default=None, init=False)

    async def get(self) -> tuple[int, list[str]]:
        """The count and the first names, walked again (off the loop) when older than
        :data:`BAD_NAMES_EVERY` seconds."""
        now = self.clock()
        if self.found is None or now - self.found[0] > BAD_NAMES_EVERY:
            loop = asyncio.get_running_loop()
            walked = await loop.run_in_executor(None, names_not_utf8, self.root, UNCOMMITTED_LISTED)
            self.found = (now, walked)
        return self.found[1]


def store_status(host: Host, actor: Actor, listed: int) -> dict[str, Any]:
    """The store's part as ``actor`` may see it (on the workspace's thread): an agent's
    listing names only paths its grants cover, and counts only those; at most ``listed``
    paths are named."""
    external = host.runner.external
    ws = external.ws
    if actor.is_owner:
        count, named = external.uncommitted(listed)
    else:
        seen = [p for p in external.pending_changes() if visibility.may_see(actor, ws, p)]
        count = len(seen)
        named = [{"path": p, "reason": external.skip_reason(p)} for p in seen[:listed]]
    operation = ws.operation()
    return {
        "head": ws.head,
        "branch": ws.branch,
        "pendingChanges": count,
        "uncommitted": named,
        "search": search_index.status_for(ws, None if sees_all(actor) else actor.grants),
        "gitOperation": None
        if operation is None
        else {"operation": operation[0], "end": operation[1]},
        # (they name the workspace's files: the owner's)
        "stateWarnings": ws.state_warnings if actor.is_owner else [],
    }


async def workspace_status(host: Host, actor: Actor, wait: float) -> dict[str, Any]:
    """The whole status of ``host``'s workspace for ``actor``; the store's part waited for
    at most ``wait`` seconds (awaited, so a long commit never stalls other requests)."""
    try:
        status = await asyncio.wait_for(
            asyncio.wrap_future(
                host.submit(partial(store_status, host, actor, UNCOMMITTED_LISTED))
            ),
            wait,
        )
    except TimeoutError:  # the workspace's thread is still busy (a huge commit)
        status = {**NO_STATUS, "busy": True}
    except MnoteError as exc:  # the repository refuses commits now (HEAD detached, ...)
        status = {**NO_STATUS, "refused": exc.to_dict()}
    if isinstance(status.get("uncommitted"), list):
        status = _with_bad_names(status, *await host.bad_names.get())
    return {
        "workspaceId": host.workspace_id,
        "root": str(host.root) if actor.is_owner else None,
        "watcher": host.watcher_state(),
        "externalCommits": host.runner.external.commits,
        "remote": await _remote_status(host) if actor.is_owner else None,
        **status,
    }


def _with_bad_names(status: dict[str, Any], count: int, names: list[str]) -> dict[str, Any]:
    """``status`` with the files left uncommitted for their names (not UTF-8)."""
    if not count:
        return status
    listed = [*status["uncommitted"], *({"path": n, "reason": BAD_NAME_REASON} for n in names)]
    return {
        **status,
        "pendingChanges": (status.get("pendingChanges") or 0) + count,
        "uncommitted": listed[:UNCOMMITTED_LISTED],
    }


async def _remote_status(host: Host) -> dict[str, Any] | None:
    sync = host.sync
    if sync is None:
        return None
    return await asyncio.get_running_loop().run_in_executor(None, sync.status)
