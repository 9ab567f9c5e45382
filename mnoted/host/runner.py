"""The one thread that owns a workspace: tool calls, external edits, idle upkeep.

A pygit2 repository and the sidecar database belong to the thread that opened
them, so each workspace gets a runner thread that opens it and then does all its
work in order: tool calls submitted by the transports (landed in groups), settled
batches from the watcher and reconciliation passes (start-up, overflow, periodic),
handed to its :class:`~mnoted.host.external.ExternalEdits` (edits made in editors,
committed as ``external`` with block ids carried over), and, whenever the queue is
empty, bringing the Git index in step with HEAD. The runner holds the loop and
composes the workspace's pieces: the store, the watcher, the external edits and the
maintainer.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mnoted.contract.envelope import wire_bytes
from mnoted.errors import Conflict, MnoteError
from mnoted.host.external import ExternalEdits, ignore_rules
from mnoted.host.retention import forget_old
from mnoted.service.actors import Actor
from mnoted.service.executor import Service
from mnoted.service.review_sessions import close_store
from mnoted.store import Maintainer, Workspace, search_index
from mnoted.store.config import CONFIG_PATH
from mnoted.store.statcache import stamp_of
from mnoted.sync import (
    ABSENT,
    DebounceConfig,
    ReconcileReason,
    SettledBatch,
    Watcher,
    WatcherConfig,
    is_temp,
)
from mnoted.sync.gitclean import git_clean

log = logging.getLogger("mnoted.runner")
T = TypeVar("T")


@dataclass(frozen=True)
class RunnerConfig:
    watch: bool = True
    quiet_seconds: float = 0.3
    max_delay_seconds: float = 5.0
    reconcile_every: float = 300.0
    retry_after: float = 5.0  # a failed pass is tried again this soon, then twice as late
    idle_after: float = 0.05
    index_lag_seconds: float = 1.0  # the Git index follows HEAD this closely under load
    pack_idle_seconds: float = 5.0
    forget_every: float = 3600.0  # records past their time (service.retention) dropped this often


class WorkspaceRunner:
    """Owns one workspace on its own thread; everything touching it goes through :meth:`submit`."""

    def __init__(
        self,
        root: Path,
        service: Service,
        config: RunnerConfig | None = None,
        *,
        after_maintenance: Callable[[], object] | None = None,
    ) -> None:
        self.root = root
        self.service = service
        self.config = config or RunnerConfig()
        self._after_maintenance = after_maintenance
        self.ws: Workspace | None = None
        self.watcher: Watcher | None = None
        self._external: ExternalEdits | None = None  # (made once the workspace is open)
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(
            target=self._run, name=f"mnoted-ws-{root.name}", daemon=True
        )
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._maintainer: Maintainer | None = None
        self._index_flushed = time.monotonic()
        self._forgot_at: float | None = None  # (first at the first idle moment)
        self.idle_hooks: list[Callable[[], object]] = []  # run at each idle tick (a second)
        self._held: _Job | None = None  # a job taken from the queue that ended a group
        self._config_seen: tuple[int, ...] | None = None  # stat data of .mnote/config.toml

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Open the workspace on the runner thread; raise what opening raised."""
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Finish the job in flight and those queued, stop watching, close the workspace."""
        if self.watcher is not None:
            self.watcher.stop(flush=True)
        self._jobs.put(None)
        self._thread.join(timeout=30)

    @property
    def workspace_id(self) -> str:
        assert self.ws is not None
        return self.ws.workspace_id

    @property
    def external(self) -> ExternalEdits:
        """The workspace's external edits (once :meth:`start` returned); their methods are
        called on the runner thread (:meth:`submit`)."""
        assert self._external is not None
        return self._external

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        self._jobs.put(_Job(fn, future))
        return future

    def call(self, raw: Any, actor: Actor) -> dict[str, Any]:
        """Run one tool call on this workspace's thread and wait for its response."""
        answer: dict[str, Any] = json.loads(self.submit_call(raw, actor).result())
        return answer

    def submit_call(self, raw: Any, actor: Actor) -> Future[bytes]:
        """Queue one tool call; its future holds the response envelope as sent on the wire.

        Calls that arrive while others run are landed together (group commit): each is
        still its own commit, answered only once the group is durable.
        """
        job = _Job(lambda: self.service.answer(raw, actor), Future())
        if self.ws is not None and self.service.groupable(raw, actor, self.ws):
            job.groupable = True
            job.answer_error = lambda exc: wire_bytes(self.service.call_failed(raw, exc))
        self._jobs.put(job)
        return job.future

    # -- the thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.ws = Workspace.open(self.root)
            self.ws.clean_filter = git_clean(self.root)  # (LFS, git-crypt: store.filters)
            self.ws.left_alone = is_temp  # (what the watcher never commits, nor do the passes)
            self.service.add(self.ws)
            if self.config.watch:
                self.watcher = self._watcher(self.ws)
            self._external = ExternalEdits(
                self.root,
                self.ws,
                self.service,
                self.watcher,
                retry_after=self.config.retry_after,
                reconcile_every=self.config.reconcile_every,
            )
            if self.watcher is not None:
                # Watches first, then the pass: an edit made meanwhile is seen by one of
                # them, and the watcher's "started" signal needs no second pass.
                self.watcher.start()
            self._external.reconcile("startup", first=True)
            search_index.of(self.ws).start()  # (the first full index: in the background)
            self._check_config()  # (an edit made while the daemon was down is committed)
            self._maintainer = Maintainer(
                self._maintain,
                lambda: self.ws.last_write if self.ws else 0.0,
                idle_seconds=self.config.pack_idle_seconds,
            )
            self._maintainer.start()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            if self.ws is not None:
                self.ws.close()
            return
        self._ready.set()
        idle_done = False
        while True:
            job: _Job | None
            if self._held is not None:
                job, self._held = self._held, None
            else:
                try:
                    job = self._jobs.get(timeout=self.config.idle_after if not idle_done else 1.0)
                except queue.Empty:
                    idle_done = self._on_idle(idle_done)
                    continue
            if job is None:
                break
            idle_done = False
            if job.groupable:
                self._run_group(job)
            else:
                job.run()
            self._bound_index_lag()
        self._shutdown()

    def _maintain(self) -> None:
        """Once writes stopped for a while (on the maintainer's thread): pack and merge, then
        ``after_maintenance`` (the daemon gives its free memory back then)."""
        assert self.ws is not None
        try:
            self.ws.maintenance()
        finally:
            if self._after_maintenance is not None:
                self._after_maintenance()

    def _queued_calls(self, limit: int) -> list[_Job]:
        """Up to ``limit`` groupable calls waiting in the queue, taken without waiting. The
        first other job met is held for after the group; a stop is put back."""
        taken: list[_Job] = []
        while self._held is None and len(taken) < limit:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is None:
                self._jobs.put(None)  # stop once this group is done
                break
            if job.groupable:
                taken.append(job)
            else:
                self._held = job
        return taken

    def _bound_index_lag(self) -> None:
        """Refresh the Git index now and then while calls keep coming.

        The index is refreshed when the queue runs dry (:meth:`Workspace.idle`); an agent
        writing more often than that never lets it, and the index fell ever further behind
        HEAD: ``git status`` showed the store's own commits as staged reversals and ``git
        merge`` refused to run. A lock held by someone else is not waited for here.
        """
        assert self.ws is not None
        now = time.monotonic()
        if now - self._index_flushed < self.config.index_lag_seconds:
            return
        self._index_flushed = now
        self._check_config()
        try:
            self.ws.refresh_index_soon()
        except MnoteError as exc:
            log.debug("index refresh under load skipped: %s", exc.message)
        except Exception:  # as in idle upkeep: logged, tried again a second later
            log.exception("index refresh under load failed")

    def _run_group(self, first: _Job) -> None:
        """Run ``first`` as one group with the calls queued behind it and those that come in
        while they run, up to :data:`MAX_GROUP`; if it cannot land, run each on its own."""
        assert self.ws is not None
        live: list[_Job] = []
        results: list[Any] = []
        try:
            with self.ws.group():
                batch = _started([first])
                while batch:
                    live.extend(batch)
                    results.extend(job.fn() for job in batch)
                    # Calls that came in meanwhile join the group: its landing is shared by
                    # more of them (the fixed cost of a landing is paid by a cohort of
                    # agents once, not by each half of it in turn).
                    batch = _started(self._queued_calls(MAX_GROUP - len(live)))
        except MnoteError as exc:
            if not live:  # the group could not begin (HEAD detached meanwhile, say)
                log.info("a group could not begin (%s); running its call alone", exc.message)
                first.run()  # its answer is the error, as it would be alone
                return
            if len(live) == 1 and not isinstance(exc, Conflict) and live[0].answer_error:
                # one call: its error is its answer (a branch moved by someone else is
                # retried, as a call on its own would be)
                live[0].future.set_result(live[0].answer_error(exc))
                return
            log.info(
                "%d calls did not land together (%s); running each alone", len(live), exc.message
            )
            for job in live:
                job.run(started=True)
            return
        except BaseException as exc:
            for job in live or [first]:
                job.future.set_exception(exc)
            return
        for job, result in zip(live, results, strict=True):
            job.future.set_result(result)
        try:
            self.ws.upkeep()  # after the answers: merging packs delays no one
        except MnoteError as exc:
            log.warning("upkeep after a group failed: %s", exc.message)

    def _check_config(self) -> None:
        """Take in an edit of ``.mnote/config.toml`` (the watcher does not look in
        ``.mnote/``): commit it, as any edit, and use the settings from the next call on
        (approval mode, disabled tools, limits, ignore patterns). Asked at most once a
        second, when idle or between groups; a stat call when nothing changed."""
        assert self.ws is not None
        try:
            seen = stamp_of(os.stat(self.root / CONFIG_PATH))
        except OSError:
            return
        previous, self._config_seen = self._config_seen, seen
        if previous == seen:
            return
        # (nothing if HEAD has these bytes; if the workspace refuses the commit, HEAD
        # detached say, the full pass it then asks for commits it later)
        self.external.commit_paths([CONFIG_PATH], "config")
        if previous is None:  # at start: the workspace opened with this text
            return
        try:
            config = self.ws.reload_config()
        except MnoteError as exc:
            log.warning("%s; the workspace's settings stay as they were", exc.message)
            return
        log.info("workspace settings read again (approval mode %s)", config.approval_mode)

    def _on_idle(self, idle_done: bool) -> bool:
        assert self.ws is not None
        try:
            if not idle_done:
                self.ws.idle(background=True)
                self._index_flushed = time.monotonic()
            else:
                self.ws.refresh_index_soon()  # takes in the one started, if it ended
            self._check_config()
            for hook in self.idle_hooks:
                hook()
            now = time.monotonic()
            if self._forgot_at is None or now - self._forgot_at >= self.config.forget_every:
                self._forgot_at = now
                forget_old(self.service, self.ws)
            self.external.reconcile_if_due(now)
        except MnoteError as exc:
            log.warning("idle upkeep failed: %s", exc.message)
            return False
        except Exception:  # the workspace's thread must outlive any of its upkeep
            log.exception("idle upkeep failed")
            return False
        return True

    def _shutdown(self) -> None:
        if self._maintainer is not None:
            self._maintainer.stop()
        if self.ws is not None:
            close_store(self.service, self.ws)
            search_index.forget(self.ws)
            try:
                self.ws.idle()
            except MnoteError as exc:
                log.warning("index refresh at shutdown failed: %s", exc.message)
            self.ws.close()

    # -- external edits ------------------------------------------------------------------------
    def _watcher(self, ws: Workspace) -> Watcher:
        """The workspace's watcher, not yet started; the store's own writes are told to it."""
        debounce = DebounceConfig(
            quiet_period=self.config.quiet_seconds, max_delay=self.config.max_delay_seconds
        )
        config = WatcherConfig(
            debounce=debounce,
            # a degraded watcher (folders over the watch limit) is backed by a full pass
            # this often; every 5 minutes would leave edits there uncommitted that long
            fallback_interval=min(self.config.reconcile_every, FALLBACK_SECONDS),
        )
        watcher = Watcher(self.root, _Sink(self), config=config, ignore=ignore_rules(self.root))
        own = watcher.own_writes
        # The store's own writes come back as events; the watcher drops those whose file
        # still holds what the store wrote (no commit to check, no rescan for renames).
        ws.on_write = lambda path, blob: own.expect(path, blob if blob else ABSENT)
        return watcher

    def reconcile(self, reason: str = "requested", *, signal: int | None = None) -> Future[int]:
        """Queue a full pass (:meth:`ExternalEdits.reconcile_or_retry`); its future holds
        the number of commits it made."""
        return self.submit(lambda: self.external.reconcile_or_retry(reason, signal=signal))


FALLBACK_SECONDS = 30.0
"""Full passes of a degraded or failed watcher (see ``docs/sync.md``)."""

MAX_GROUP = 64
"""Calls landed together at most (their files are written with one wait each way)."""


@dataclass
class _Job:
    """Work for the runner thread; ``groupable`` calls may land with their neighbours."""

    fn: Callable[[], Any]
    future: Future[Any]
    groupable: bool = False
    answer_error: Callable[[MnoteError], Any] | None = None  # the answer when it fails alone

    def run(self, *, started: bool = False) -> None:
        if not started and not self.future.set_running_or_notify_cancel():
            return
        try:
            self.future.set_result(self.fn())
        except BaseException as exc:
            self.future.set_exception(exc)


def _started(jobs: list[_Job]) -> list[_Job]:
    """The jobs not cancelled meanwhile, now marked as running."""
    return [job for job in jobs if job.future.set_running_or_notify_cancel()]


class _Sink:
    """The watcher's sink: hands each batch to the runner thread (the watcher goes on
    reading events while it is committed)."""

    def __init__(self, runner: WorkspaceRunner) -> None:
        self.runner = runner

    def on_changes(self, batch: SettledBatch) -> Future[None]:
        return self.runner.submit(lambda: self.runner.external.apply_batch(batch))

    def on_reconcile_needed(self, reason: ReconcileReason, detail: str) -> None:
        log.info("reconciling the workspace: %s (%s)", reason.value, detail)
        watcher = self.runner.watcher
        signal = watcher.health().reconcile_generation if watcher is not None else None
        self.runner.reconcile(reason.value, signal=signal)
