"""External edits of a workspace: what the runner commits that it did not write itself.

:class:`ExternalEdits` is the runner's collaborator for them, made once the workspace is
open and given the workspace, its service and its watcher (None: not watched). Edits
made in editors reach it as the watcher's settled batches or are found by a
reconciliation pass (by content, against HEAD); either way they are committed as
``external`` with block ids carried over, apart per open file grant. An edit kept out
of the history (a symbolic link, a file over the size limit, a hard-linked file) is
said so, with the way out. It keeps its own state: the count of commits made, when the
last full pass ran and which watcher signal it covers, when a refused pass is tried
again, and the paths that may still differ from HEAD. Everything there runs on the
runner's thread. :func:`ignore_rules` are Git's ignore rules for the watcher's threads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

from mnoted.errors import MnoteError, NotFound, PathRejected
from mnoted.service import visibility
from mnoted.service.executor import Service
from mnoted.service.file_tools import grant_meta, read_grant
from mnoted.store import Workspace, trees
from mnoted.store.config import CONFIG_PATH
from mnoted.store.paths import hard_linked
from mnoted.sync import IgnoreRules, SettledBatch, Watcher, changes_by_git

log = logging.getLogger("mnoted.runner")


class ExternalEdits:
    """Commits a workspace's external edits (on the runner's thread): the watcher's
    batches, full passes (at start, on the watcher's signal, periodic, and again while
    the workspace refuses them), and config edits the runner hands over."""

    def __init__(
        self,
        root: Path,
        ws: Workspace,
        service: Service,
        watcher: Watcher | None,
        *,
        retry_after: float,
        reconcile_every: float,
    ) -> None:
        self.root = root
        self.ws = ws
        self.service = service
        self.watcher = watcher
        self.retry_after = retry_after  # a refused pass is tried again this soon, then later
        self.reconcile_every = reconcile_every  # a full pass at least this often (idle time)
        self.commits = 0  # external commits made
        self._last_reconcile = time.monotonic()
        self._reconciled_generation = -1  # the watcher's generation the last full pass covers
        self._retry_at: float | None = None  # when a failed pass is tried again
        self._retry_wait = retry_after  # (then twice as long each time, up to reconcile_every)
        self._refused = False  # whether the workspace refused a commit of edits since
        self._unsettled: set[str] = set()  # paths that may still differ from HEAD

    def commit_paths(self, paths: list[str], reason: str) -> int:
        """Commit what is on disk at ``paths`` (runner thread); carry block ids over.

        Paths settled together are one commit, so a file moved between folders is seen
        as a rename (the document keeps its id) even when the watcher saw a delete and
        a create; edits under an open file grant are committed apart, as the grant's.
        """
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
        self.commits += made
        return made

    def _commit_group(self, paths: list[str], grant: dict[str, Any] | None, reason: str) -> int:
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
            ws.grants.put(grant["grantId"], json.dumps(grant))
        for path in result.paths:
            document_id = None
            if path.lower().endswith(".md") and ws.blob_id(path) is not None:
                try:
                    document_id = ws.resolve(path).document_id
                    # Carry block ids over now only where ids were handed out before; a page
                    # nobody has read gets the same ids when it is first read.
                    if ws.block_ids.last_blob(document_id) is not None:
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
        grant = read_grant(self.ws, self.ws.grants.by_path(path))
        return grant if grant is not None and grant["expiresAt"] > time.time() else None

    def apply_batch(self, batch: SettledBatch) -> None:
        paths = list(batch.paths)
        if batch.rescan_dirs or any(self._appeared_or_gone(p) for p in paths):
            # A move between folders can reach the watcher as a delete and a create in
            # different batches; committing every pending appearance and disappearance
            # of a page together lets the store see the rename and keep the page's id.
            paths += self._appeared_or_vanished(batch)
        self._unsettled.update(paths)
        self.commit_paths(paths, "watcher")

    def _appeared_or_gone(self, path: str) -> bool:
        """On disk but not in HEAD, or in HEAD but not on disk."""
        return (self.ws.blob_id(path) is None) == os.path.lexists(self.root / path)

    def _appeared_or_vanished(self, batch: SettledBatch) -> list[str]:
        """Pages on disk but not in HEAD, or in HEAD but gone, that the watcher has settled.

        Only where the batch points: its rescanned folders (whole) and the folders of its
        paths (their own entries), not the whole work tree.
        """
        parents = {p.rpartition("/")[0] for p in batch.paths}
        out = []
        for path in self.ws.scan_changes(batch.rescan_dirs, shallow=parents):
            if not path.lower().endswith(".md") or self._pending(path):
                continue
            if self._appeared_or_gone(path):
                out.append(path)
        appeared = [p for p in out if self.ws.blob_id(p) is None]
        # where pages that appeared here were moved from (reported apart, or not at all)
        out += [p for p in self.ws.moved_from(appeared) if not self._pending(p)]
        return out

    def _pending(self, path: str) -> bool:
        return self.watcher is not None and self.watcher.is_pending(path)

    def reconcile(self, reason: str, *, signal: int | None = None, first: bool = False) -> int:
        """Commit every difference between the working tree and HEAD, found by content.

        A watcher's signal (its generation ``signal``) needs no pass of its own if a full
        pass began after it: that pass saw everything the lost events were about. The
        ``first`` pass, at start-up, asks the ``git`` command (``mnoted.sync.gitstatus``).
        """
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
        health = self.watcher.health() if self.watcher is not None else None
        if health is None or not health.running or health.needs_reconcile:
            return sorted(self.ws.scan_changes())
        self._unsettled = set(self.ws.scan_changes(self._unsettled))
        return sorted(self._unsettled)

    def reconcile_or_retry(self, reason: str, *, signal: int | None = None) -> int:
        """:meth:`reconcile`, tried again in idle time while the workspace refuses it (HEAD
        detached, a merge under way, a lock held): edits that came meanwhile are committed
        soon after it is back, not at the next periodic pass."""
        self._refused = False
        try:
            made = self.reconcile(reason, signal=signal)
        except MnoteError as exc:
            wait = self._retry_later()
            log.warning(
                "reconciling the workspace failed (%s); trying again in %.0f s", exc.message, wait
            )
            raise
        if not self._refused:  # (every edit it found was committed)
            self._retry_at, self._retry_wait = None, self.retry_after
        return made

    def reconcile_if_due(self, now: float) -> None:
        """In idle time: the full pass a refusal asked to try again (once its time came),
        else the periodic one (``reconcile_every`` after the last); a failure is logged
        (:meth:`reconcile_or_retry`) and tried again later."""
        due = self._retry_at is not None and now >= self._retry_at
        if due or now - self._last_reconcile > self.reconcile_every:
            with contextlib.suppress(MnoteError):
                self.reconcile_or_retry("retry" if due else "periodic")

    def _retry_later(self) -> float:
        """Have a full pass made in idle time, sooner the first times; its delay."""
        self._refused = True
        if self._retry_at is None or self._retry_at < time.monotonic():
            self._retry_at = time.monotonic() + self._retry_wait
            self._retry_wait = min(self._retry_wait * 2, self.reconcile_every)
        return self._retry_at - time.monotonic()


def ignore_rules(root: Path) -> IgnoreRules:
    """Git's ignore rules of the workspace at ``root`` for the watcher's threads, on a
    repository of their own."""
    import pygit2

    repo = pygit2.Repository(str(root))  # read-only use, from the watcher's threads
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


def _mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None
