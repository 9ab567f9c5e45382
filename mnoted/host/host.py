"""One served workspace: its service, its runner, and its companions."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from mnoted.host.remote import attach as attach_sync
from mnoted.host.remote import detach as detach_sync
from mnoted.host.runner import RunnerConfig, WorkspaceRunner
from mnoted.host.status import BadNames
from mnoted.remote.sync import RemoteSync
from mnoted.service.actors import Actor
from mnoted.service.events import EventBus
from mnoted.service.executor import Service
from mnoted.service.pages import PageCache
from mnoted.service.readcache import ReadCache
from mnoted.store import Workspace
from mnoted.store.statedir import STATE_DIR
from mnoted.store.tokens import TokenRecord, TokenStore

log = logging.getLogger("mnoted.host")
T = TypeVar("T")


class Companion(Protocol):
    """A per-workspace service started once the workspace is open and stopped before it
    closes (remote sync, say). It does its work on the workspace's thread through
    :meth:`Host.submit`, so it never shares the store with another thread."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass
class HostShared:
    """What the hosts of one daemon share: one bound for the parsed pages and the kept
    answers (their keys name the workspace), one event stream, one clock."""

    clock: Callable[[], float] = time.time
    pages: PageCache = field(default_factory=PageCache)
    reads: ReadCache = field(default_factory=ReadCache)
    events: EventBus = field(default_factory=EventBus)


class Host:
    """Serves the workspace at ``root``: :meth:`start` opens it on its runner thread (the
    watcher, the start-up pass, the search index, housekeeping), then its remote sync
    (``remote``: ``docs/remote.md``), then each companion ``companions`` makes;
    :meth:`stop` stops them in the reverse order, the workspace last."""

    def __init__(
        self,
        root: Path,
        config: RunnerConfig | None = None,
        *,
        shared: HostShared | None = None,
        after_maintenance: Callable[[], object] | None = None,
        remote: bool = False,
        companions: Sequence[Callable[[Host], Companion]] = (),
    ) -> None:
        shared = shared or HostShared()
        self.root = root
        self.service = Service(
            shared.clock, pages=shared.pages, reads=shared.reads, events=shared.events
        )
        self.runner = WorkspaceRunner(
            root, self.service, config, after_maintenance=after_maintenance
        )
        self._remote = remote
        self.sync: RemoteSync | None = None
        self._make_companions = list(companions)
        self.companions: list[Companion] = []
        self.bad_names = BadNames(root)  # (for its status: mnoted.host.status)

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Open the workspace and start its companions; raise what opening raised."""
        self.runner.start()
        if self._remote:
            self.sync = attach_sync(self.runner)
        for make in self._make_companions:
            companion = make(self)
            companion.start()
            self.companions.append(companion)

    def stop(self) -> None:
        """Stop the companions, then finish the queued work and close the workspace."""
        while self.companions:
            companion = self.companions.pop()
            try:
                companion.stop()
            except Exception:  # the workspace is closed whatever a companion does
                log.exception("a companion of %s failed to stop", self.root)
        sync, self.sync = self.sync, None
        if sync is not None:
            detach_sync(sync)
        self.runner.stop()

    # -- what the daemon asks ---------------------------------------------------------------
    @property
    def workspace_id(self) -> str:
        return self.runner.workspace_id

    @property
    def ws(self) -> Workspace | None:
        return self.runner.ws

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` on the workspace's thread."""
        return self.runner.submit(fn)

    def submit_call(self, raw: Any, actor: Actor) -> Future[bytes]:
        """Queue one tool call for this workspace; its future holds the wire response."""
        return self.runner.submit_call(raw, actor)

    def find_token(self, token: str) -> TokenRecord | None:
        """The agent's token record this workspace holds for ``token``, if any (read from
        any thread: the token file is replaced whole)."""
        return TokenStore(self.root / STATE_DIR).find(token)

    def watcher_state(self) -> dict[str, Any] | None:
        """The watcher's health as ``/v1/workspaces`` reports it; None: not watching."""
        watcher = self.runner.watcher
        if watcher is None:
            return None
        health = watcher.health()
        return {
            "state": health.state.value,
            "watchCount": health.watch_count,
            "overflows": health.overflows,
            "pending": health.pending,
            "needsReconcile": health.needs_reconcile,
            "lastError": health.last_error,
        }
