"""The one thread that owns a workspace: tool calls, external edits, idle upkeep.

A pygit2 repository and the sidecar database belong to the thread that opened
them, so each workspace gets a runner thread that opens it and then does all its
work in order: tool calls submitted by the transports, settled batches from the
watcher (edits made in editors, committed as ``external`` with block ids carried
over), reconciliation passes (start-up, overflow, periodic), and, whenever the
queue is empty, bringing the Git index in step with HEAD.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mnoted.contract.envelope import wire_bytes
from mnoted.errors import Conflict, MnoteError, NotFound, PathRejected
from mnoted.host.retention import forget_old
from mnoted.service import visibility
from mnoted.service.actors import Actor
from mnoted.service.executor import Service
from mnoted.service.file_tools import GRANTS, GRANTS_BY_PATH, grant_meta, read_grant
from mnoted.service.review_sessions import close_store
from mnoted.store import Maintainer, Workspace, search_index, trees
from mnoted.store.config import CONFIG_PATH
from mnoted.store.paths import hard_linked
from mnoted.sync import (
    ABSENT,
    ChangeKind,
    DebounceConfig,
    IgnoreRules,
    ReconcileReason,
    SettledBatch,
    Watcher,
    WatcherConfig,
    changes_by_git,
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
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(
            target=self._run, name=f"mnoted-ws-{root.name}", daemon=True
        )
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._maintainer: Maintainer | None = None
        self._last_reconcile = time.monotonic()
        self._index_flushed = time.monotonic()
        self._forgot_at: float | None = None  # (first at the first idle moment)
        self._held: _Job | None = None  # a job taken from the queue that ended a group
        self._reconciled_generation = -1  # the watcher's generation the last full pass covers
        self._retry_at: float | None = None  # when a failed pass is tried again
        self._retry_wait = self.config.retry_after
        self._refused = False  # whether the workspace refused a commit of edits since
        self._unsettled: set[str] = set()  # paths that may still differ from HEAD
        self._config_seen: tuple[int, ...] | None = None  # stat data of .mnote/config.toml
        self.external_commits = 0

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
                # Watches first, then the pass: an edit made meanwhile is seen by one of
                # them, and the watcher's "started" signal needs no second pass.
                self._start_watcher()
            self._reconcile("startup", first=True)
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
            st = os.stat(self.root / CONFIG_PATH)
        except OSError:
            return
        seen = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        previous, self._config_seen = self._config_seen, seen
        if previous == seen:
            return
        # (nothing if HEAD has these bytes; if the workspace refuses the commit, HEAD
        # detached say, the full pass it then asks for commits it later)
        self.commit_paths([CONFIG_PATH], "config")
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
            now = time.monotonic()
            if self._forgot_at is None or now - self._forgot_at >= self.config.forget_every:
                self._forgot_at = now
                forget_old(self.service, self.ws)
            due = self._retry_at is not None and now >= self._retry_at
            if due or now - self._last_reconcile > self.config.reconcile_every:
                with contextlib.suppress(MnoteError):  # (logged, and tried again later)
                    self._reconcile_or_retry("retry" if due else "periodic")
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
    def _start_watcher(self) -> None:
        assert self.ws is not None
        debounce = DebounceConfig(
            quiet_period=self.config.quiet_seconds, max_delay=self.config.max_delay_seconds
        )
        config = WatcherConfig(
            debounce=debounce,
            # a degraded watcher (folders over the watch limit) is backed by a full pass
            # this often; every 5 minutes would leave edits there uncommitted that long
            fallback_interval=min(self.config.reconcile_every, FALLBACK_SECONDS),
        )
        ignore = self._ignore_rules()
        self.watcher = Watcher(self.root, _Sink(self), config=config, ignore=ignore)
        own = self.watcher.own_writes
        # The store's own writes come back as events; the watcher drops those whose file
        # still holds what the store wrote (no commit to check, no rescan for renames).
        self.ws.on_write = lambda path, blob: own.expect(path, blob if blob else ABSENT)
        self.watcher.start()

    def _ignore_rules(self) -> IgnoreRules:
        """Git's ignore rules for the watcher's threads, on a repository of their own."""
        import pygit2

        repo = pygit2.Repository(str(self.root))  # read-only use, from the watcher's threads
        pack_dir = os.path.join(repo.path, "objects", "pack")
        lock = threading.Lock()
        packs_seen: list[int | None] = [None]

        def ignored(path: str) -> bool:
            with lock:
                return bool(repo.path_is_ignored(path))

        def tracked(path: str) -> bool:
            with lock:
                # libgit2 keeps every pack it read mapped, deleted or not: once the store
                # added or merged away packs, the repository lets go of its handles (and
                # opens what is there when next asked), or the packs merged away kept
                # their disk space for as long as the daemon ran.
                stamp = _mtime_ns(pack_dir)
                if stamp != packs_seen[0]:
                    repo.free()
                    packs_seen[0] = stamp
                try:
                    tree = repo.head.peel(pygit2.Tree)
                except (pygit2.GitError, KeyError):  # no commit yet
                    return False
                entry = trees.object_at(tree, path.rstrip("/"))
                return entry is not None and (entry.type_str == "tree") == path.endswith("/")

        return IgnoreRules(ignored, tracked)

    def commit_paths(self, paths: list[str], reason: str) -> int:
        """Commit what is on disk at ``paths`` (runner thread); carry block ids over.

        Paths settled together are one commit, so a file moved between folders is seen
        as a rename (the document keeps its id) even when the watcher saw a delete and
        a create; edits under an open file grant are committed apart, as the grant's.
        """
        assert self.ws is not None
        groups: dict[str | None, list[str]] = {}
        grants: dict[str, dict[str, Any]] = {}
        for path in dict.fromkeys(paths):
            grant = self._open_grant(path)
            key = grant["grantId"] if grant else None
            if grant is not None:
                grants[grant["grantId"]] = grant
            groups.setdefault(key, []).append(path)
        made = 0
        for key, group in groups.items():
            grant = grants.get(key) if key else None
            made += self._commit_group(group, grant, reason)
        self.external_commits += made
        return made

    def _commit_group(self, paths: list[str], grant: dict[str, Any] | None, reason: str) -> int:
        assert self.ws is not None
        ws = self.ws
        try:
            result = ws.commit_external(paths, meta=grant_meta(grant) if grant else None)
        except MnoteError as exc:
            log.warning(
                "could not commit external edits of %s: %s; trying again in %.0f s",
                ", ".join(paths),
                exc.message,
                self._retry_later(),
            )
            return 0
        if ws.unsettled:
            log.info(
                "not committing %s yet: being written by another program; again in %.0f s",
                ", ".join(sorted(ws.unsettled)),
                self._retry_later(),
            )
        committed = set(result.paths) if result is not None else set()
        for path in paths:
            if path not in committed:
                self._warn_if_skipped(path)
        if result is None:
            return 0
        if grant is not None:
            for path in committed:
                grant["blob"] = ws.blob_id(path)
            ws.sidecar.put(GRANTS, grant["grantId"], json.dumps(grant))
        for path in result.paths:
            document_id = None
            if path.lower().endswith(".md") and ws.blob_id(path) is not None:
                try:
                    document_id = ws.resolve(path).document_id
                    # Carry block ids over now only where ids were handed out before; a page
                    # nobody has read gets the same ids when it is first read.
                    if ws.sidecar.get("lastblob", document_id) is not None:
                        self.service.pages.load(ws, path)
                except NotFound:
                    document_id = None
                except PathRejected:
                    pass  # (a filter covers it now: its blob is not a page to carry ids to)
            self.service.events.publish(
                "external_edit",
                workspaceId=ws.workspace_id,
                path=path,
                documentId=document_id,
                commit=result.commit,
                commandId=result.command_id,
                reason=reason,
                _readers=visibility.readers_of(ws, path),
            )
        return 1

    def _warn_if_skipped(self, path: str) -> None:
        """Say so when an edit stays uncommitted (:meth:`skip_reason`): in the log and as a
        ``skipped`` event."""
        assert self.ws is not None
        reason = self.skip_reason(path)
        if reason is None:
            return
        log.warning("not committing %s: %s", path, reason)
        self.service.events.publish(
            "skipped", workspaceId=self.ws.workspace_id, path=path, reason=reason
        )

    def skip_reason(self, path: str) -> str | None:
        """Why an edit of ``path`` is kept out of the history, with the way out: a new file
        over the size limit, or a file with several hard links (``store.paths.hard_linked``)
        that differs from HEAD. None: nothing keeps it out."""
        assert self.ws is not None
        try:
            st = os.lstat(self.root / path)  # never through a symlink
        except (OSError, ValueError):
            return None
        if stat.S_ISLNK(st.st_mode):
            return (
                "a symbolic link: mnoted neither follows nor commits links (a folder swapped "
                "for one has its pages removed from HEAD); commit it with git, or add it to "
                ".gitignore"
            )
        limit = self.ws.config.max_file_bytes
        if st.st_size > limit and self.ws.blob_id(path) is None:
            return (
                f"{st.st_size:,} bytes, over the {limit:,}-byte file limit: raise [limits] "
                f"maxFileBytes in {CONFIG_PATH}, or add the file to .gitignore"
            )
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and self.ws.differs_on_disk(path):
            refused = hard_linked(path, st.st_nlink)
            return f"{refused.message}. {refused.hint}"
        return None

    def uncommitted(self, limit: int) -> tuple[int, list[dict[str, str | None]]]:
        """How many paths differ from HEAD (:meth:`pending_changes`), and the first ``limit``
        of them by name, each with what keeps it out of the history (None: nothing; the
        watcher commits it once quiet)."""
        paths = self.pending_changes()
        return len(paths), [
            {"path": path, "reason": self.skip_reason(path)} for path in paths[:limit]
        ]

    def _open_grant(self, path: str) -> dict[str, Any] | None:
        """The open file grant on ``path``, whose holder owns edits made there."""
        assert self.ws is not None
        grant = read_grant(self.ws, self.ws.sidecar.get(GRANTS_BY_PATH, path))
        return grant if grant is not None and grant["expiresAt"] > time.time() else None

    def apply_batch(self, batch: SettledBatch) -> None:
        paths: list[str] = []
        for change in batch.changes:
            if change.old_path:
                paths.append(change.old_path)
            paths.append(change.path)
        if batch.rescan_dirs or any(c.kind != ChangeKind.MODIFIED for c in batch.changes):
            # A move between folders can reach the watcher as a delete and a create in
            # different batches; committing every pending appearance and disappearance
            # of a page together lets the store see the rename and keep the page's id.
            paths += self._appeared_or_vanished(batch)
        self._unsettled.update(paths)
        self.commit_paths(paths, "watcher")

    def _appeared_or_vanished(self, batch: SettledBatch) -> list[str]:
        """Pages on disk but not in HEAD, or in HEAD but gone, that the watcher has settled.

        Only where the batch points: its rescanned folders (whole) and the folders of its
        changes (their own entries), not the whole work tree.
        """
        assert self.ws is not None
        parents = {c.path.rpartition("/")[0] for c in batch.changes}
        parents.update(c.old_path.rpartition("/")[0] for c in batch.changes if c.old_path)
        out = []
        for path in self.ws.scan_changes(batch.rescan_dirs, shallow=parents):
            if not path.lower().endswith(".md") or self._pending(path):
                continue
            if (self.ws.blob_id(path) is None) == os.path.lexists(self.root / path):
                out.append(path)
        appeared = [p for p in out if self.ws.blob_id(p) is None]
        # where pages that appeared here were moved from (reported apart, or not at all)
        out += [p for p in self.ws.moved_from(appeared) if not self._pending(p)]
        return out

    def _pending(self, path: str) -> bool:
        return self.watcher is not None and self.watcher.is_pending(path)

    def _reconcile(self, reason: str, *, signal: int | None = None, first: bool = False) -> int:
        """Commit every difference between the working tree and HEAD, found by content.

        A watcher's signal (its generation ``signal``) needs no pass of its own if a full
        pass began after it: that pass saw everything the lost events were about. The
        ``first`` pass, at start-up, asks the ``git`` command (``mnoted.sync.gitstatus``).
        """
        assert self.ws is not None
        if signal is not None and signal <= self._reconciled_generation:
            return 0
        self._last_reconcile = time.monotonic()
        generation = self.watcher.health().reconcile_generation if self.watcher else None
        found = self.ws.scan_changes(whole_tree=changes_by_git if first else None)
        made = self.commit_paths(found, reason)
        self._unsettled = set(found)
        if self.watcher is not None and generation is not None:
            self._reconciled_generation = generation
            self.watcher.mark_reconciled(generation)
        return made

    def pending_changes(self) -> list[str]:
        """The paths that differ from HEAD, sorted, without a walk of the whole work tree.

        While the watcher runs and has asked for no pass, a difference is one of the paths
        the last pass found or a batch named since (what could not be committed); only
        those are compared again. Otherwise the whole work tree is.
        """
        assert self.ws is not None
        health = self.watcher.health() if self.watcher is not None else None
        if health is None or not health.running or health.needs_reconcile:
            return sorted(self.ws.scan_changes())
        self._unsettled = set(self.ws.scan_changes(self._unsettled))
        return sorted(self._unsettled)

    def _reconcile_or_retry(self, reason: str, *, signal: int | None = None) -> int:
        """:meth:`_reconcile`, tried again in idle time while the workspace refuses it (HEAD
        detached, a merge under way, a lock held): edits that came meanwhile are committed
        soon after it is back, not at the next periodic pass."""
        self._refused = False
        try:
            made = self._reconcile(reason, signal=signal)
        except MnoteError as exc:
            wait = self._retry_later()
            log.warning(
                "reconciling the workspace failed (%s); trying again in %.0f s", exc.message, wait
            )
            raise
        if not self._refused:  # (every edit it found was committed)
            self._retry_at, self._retry_wait = None, self.config.retry_after
        return made

    def _retry_later(self) -> float:
        """Have a full pass made in idle time, sooner the first times; its delay."""
        self._refused = True
        if self._retry_at is None or self._retry_at < time.monotonic():
            self._retry_at = time.monotonic() + self._retry_wait
            self._retry_wait = min(self._retry_wait * 2, self.config.reconcile_every)
        return self._retry_at - time.monotonic()

    def reconcile(self, reason: str = "requested", *, signal: int | None = None) -> Future[int]:
        return self.submit(lambda: self._reconcile_or_retry(reason, signal=signal))


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


def _mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


class _Sink:
    """The watcher's sink: hands each batch to the runner thread and waits for it."""

    def __init__(self, runner: WorkspaceRunner) -> None:
        self.runner = runner

    def on_changes(self, batch: SettledBatch) -> None:
        self.runner.submit(lambda: self.runner.apply_batch(batch)).result()

    def on_reconcile_needed(self, reason: ReconcileReason, detail: str) -> None:
        log.info("reconciling the workspace: %s (%s)", reason.value, detail)
        watcher = self.runner.watcher
        signal = watcher.health().reconcile_generation if watcher is not None else None
        self.runner.reconcile(reason.value, signal=signal)
