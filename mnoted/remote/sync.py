"""Background sync of one workspace with its Git remotes: fetch, merge, push.

One thread per workspace does the network work (``git`` in a process, :mod:`.git`); the
merge is planned and landed on the workspace's own writer thread (``on_writer``), through
the store's one write path (``Workspace.land_commit``), so local writes never wait for the
network and the network never holds the writer.

A cycle, per remote (its branch of the workspace's branch name):

1. ``git fetch``. A remote head that does not descend from the one last seen (force-pushed,
   rewritten, deleted) stops sync for that remote with a clear status: nothing is merged or
   pushed until the user looks and runs ``mnote sync now --resume``.
2. Merge the fetched head into HEAD (:mod:`.merging`): a fast-forward, or one merge commit.
   Each held version becomes a review session proposing it (``mnote review list``) and is
   listed in the status, with the merge commit naming it in a trailer.
3. ``git push`` of HEAD, never forced. A rejected push goes back to 1 (a few times).

Unreachable remotes are retried with a doubling delay (capped); the state kept in
``.git/mnote/state/remote.json`` (last seen head, last fetch/push, last error, stops,
held versions) survives restarts. A crash anywhere leaves the branch at the old or the new
head (the landing is journaled) and the next cycle carries on.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pygit2

from mnoted.core.merge import Held
from mnoted.remote import git
from mnoted.remote.merging import Plan, plan_merge
from mnoted.store import faults

log = logging.getLogger(__name__)
T = TypeVar("T")
STATE_FILE = "remote.json"
_PUSH_ATTEMPTS = 4
_LAND_ATTEMPTS = 3
LOOK_SECONDS = 1.0
"""How often, at most, a commit has Git's config read for a remote (:meth:`RemoteSync.poke`)."""
_NOTE_JOBS = 100_000  # (jobs of blockids.MAX_NOTED pages: far beyond any workspace)


@dataclass(frozen=True)
class SyncConfig:
    interval: float = 60.0  # fetch this often
    push_delay: float = 2.0  # push once local commits paused this long
    push_max_delay: float = 10.0  # ... or this long after the first of them
    backoff_max: float = 300.0  # the longest wait after failures
    host: str = ""  # names this device in conflict copies (default: the host name)


@dataclass(frozen=True)
class Configured:
    """What the workspace config (``[remote]`` of ``.mnote/config.toml``) asks for, read at
    every cycle (a reload applies from the next): a remote to keep, and the timing."""

    name: str = "origin"
    url: str = ""  # "" = none named there
    interval: float = 60.0
    push_delay: float = 2.0


class RemoteSync:
    """Sync of one workspace; the daemon makes one per workspace and feeds it commits."""

    def __init__(
        self,
        root: Path,
        state_dir: Path,
        on_writer: Callable[[Callable[[], Any]], Any],
        *,
        hold: Callable[[str, Held, str], str | None] | None = None,
        land: Callable[[str, str | None, str], object] | None = None,
        head: Callable[[], tuple[str | None, str]] | None = None,
        publish: Callable[..., object] | None = None,
        ids_in: Callable[[str | None, str], object] | None = None,
        ids_out: Callable[[str | None, str], str | None] | None = None,
        decided: Callable[[list[str]], set[str]] | None = None,
        config: SyncConfig | None = None,
        configured: Callable[[], Configured] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.state_path = state_dir / STATE_FILE
        self.config = config or SyncConfig()
        self.host = self.config.host or socket.gethostname() or "remote"
        self._on_writer = on_writer
        self._hold = hold
        self._land = land
        self._head = head
        self._publish = publish or (lambda kind, **fields: None)
        self._ids_in = ids_in
        self._ids_out = ids_out
        self._decided = decided
        self._configured = configured
        self._clock = clock
        self._lock = threading.Condition()
        self._state: dict[str, Any] = self._load()
        self._push_first: float | None = None
        self._push_at: float | None = None
        self._next_fetch = clock()
        self._failures = 0
        self._wanted: list[threading.Event] = []
        self._stopping = False
        self._running = False
        self._started = False
        self._thread: threading.Thread | None = None  # the loop, while there is a remote
        self._looked = -LOOK_SECONDS  # (clock) when poke last read Git's config

    # -- control ------------------------------------------------------------------------------
    def start(self) -> None:
        """Sync from now on: the loop runs while the repository has a remote (or the
        workspace config names one); :meth:`poke` starts it again once one appears."""
        with self._lock:
            self._started = True
        self.poke()

    def poke(self) -> None:
        """Start the loop if it is not running and there is a remote to sync with (one small
        file read): the runner calls it when idle, :meth:`committed` after a commit once
        :data:`LOOK_SECONDS` passed since, so a remote added by ``git remote add`` is noticed
        within a second, and a busy writer does not read Git's config at every commit."""
        if self._thread is None:
            self._looked = self._clock()
            if self._has_remote():
                self._ensure_loop()

    def _ensure_loop(self) -> None:
        with self._lock:  # (reentrant: sync_now holds it)
            if self._thread is not None or self._stopping or not self._started:
                return
            self._next_fetch = min(self._next_fetch, self._clock())
            self._thread = threading.Thread(
                target=self._loop, name=f"mnoted-sync-{self.root.name}", daemon=True
            )
            self._thread.start()

    def _has_remote(self) -> bool:
        """Whether there may be a remote: the workspace config names one, or Git's config has
        a remote section (or includes another file, or cannot be read: the loop finds out)."""
        if self._settings().url:
            return True
        try:
            text = (self.root / ".git" / "config").read_bytes()
        except OSError:
            return True
        return b"[remote" in text or b"[include" in text

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def committed(self) -> None:
        """A local commit landed: push once commits pause (debounced)."""
        now = self._clock()
        delay = self._settings().push_delay
        with self._lock:
            if self._push_first is None:
                self._push_first = now
            self._push_at = min(now + delay, self._push_first + self.config.push_max_delay)
            self._lock.notify_all()
        if now - self._looked >= LOOK_SECONDS:
            self.poke()

    def sync_now(self, *, resume: bool = False, timeout: float = 120.0) -> dict[str, Any]:
        """Run a cycle now (``resume``: clear a stop after a rewritten remote) and return the
        status once it ran."""
        done = threading.Event()
        with self._lock:
            if resume:
                for entry in self._state["remotes"].values():
                    entry.pop("stopped", None)
                    entry["lastSeen"] = None
                self._save()
            self._wanted.append(done)
            self._lock.notify_all()
            # (under the lock that the loop ends under: a loop already running takes this
            # request, else one starts; never a second loop for nothing)
            self._ensure_loop()
        done.wait(timeout)
        return self.status()

    # -- status -------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Per remote: URL, ahead/behind, last fetch and push, last error, whether stopped;
        and the held versions still waiting for a person."""
        with self._lock:
            state = json.loads(json.dumps(self._state))
        out: list[dict[str, Any]] = []
        try:
            repo = pygit2.Repository(str(self.root))
            urls = {r.name: git.redact(r.url or "") for r in repo.remotes}
            branch = repo.head.shorthand if not repo.head_is_unborn else None
            head = None if repo.head_is_unborn else repo.head.target
        except (pygit2.GitError, KeyError):
            return {"remotes": [], "held": _listed(state["held"]), "running": self._running}
        for name, url in urls.items():
            entry = dict(state["remotes"].get(name, {}))
            ahead = behind = None
            if branch is not None and head is not None:
                ref = repo.references.get(f"refs/remotes/{name}/{branch}")
                if ref is not None:
                    ahead, behind = repo.ahead_behind(head, ref.target)
                else:
                    ahead, behind = len(list(repo.walk(head))) if head else 0, 0
            out.append(
                {
                    "name": name,
                    "url": url,
                    "branch": branch,
                    "ahead": ahead,
                    "behind": behind,
                    "lastFetch": entry.get("lastFetch"),
                    "lastPush": entry.get("lastPush"),
                    "lastError": entry.get("lastError"),
                    "stopped": entry.get("stopped"),
                    "lastSeen": entry.get("lastSeen"),
                }
            )
        return {"remotes": out, "held": _listed(state["held"]), "running": self._running}

    # -- the loop -------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            idle = not self._has_remote()
            with self._lock:
                if idle and not self._wanted:  # (no remote: no thread, until poke finds one)
                    self._thread = None
                    return
                while not self._stopping:
                    now = self._clock()
                    due = [self._next_fetch]
                    if self._push_at is not None:
                        due.append(self._push_at)
                    if self._wanted or min(due) <= now:
                        break
                    self._lock.wait(min(due) - now)
                if self._stopping:
                    break
                wanted, self._wanted = self._wanted, []
                self._push_first = self._push_at = None
                self._running = True
            ok = False
            try:
                ok = self.cycle()
            except Exception as exc:  # the loop must outlive any one failure
                log.exception("sync of %s failed", self.root)
                self._note_error(None, f"internal error: {type(exc).__name__}: {exc}")
            with self._lock:
                self._running = False
                self._failures = 0 if ok else self._failures + 1
                wait = self._settings().interval
                if not ok:  # doubling from the interval, up to backoff_max
                    wait = min(
                        max(self.config.backoff_max, wait),
                        wait * 2.0 ** min(self._failures - 1, 16),
                    )
                self._next_fetch = self._clock() + wait
            for event in wanted:
                event.set()

    def cycle(self) -> bool:
        """One fetch-merge-push round with every remote; True if all went through."""
        self._keep_configured()
        try:
            repo = pygit2.Repository(str(self.root))
            names = [r.name for r in repo.remotes if r.name and not r.name.startswith("-")]
            branch = None if repo.head_is_unborn else repo.head.shorthand
        except pygit2.GitError as exc:
            self._note_error(None, str(exc))
            return False
        if branch is None:
            return True  # (an unborn branch: nothing to push, nothing to merge into yet)
        with self._lock:
            interrupted = any(h.get("pending") for h in self._state["held"])
        if interrupted:  # held versions of a merge a crash interrupted
            self._on_writer(self._open_sessions)
        self._forget_decided()
        ok = True
        for name in names:
            ok = self._with_remote(name, branch) and ok
        return ok

    def _with_remote(self, name: str, branch: str) -> bool:
        entry = self._entry(name)
        if entry.get("stopped"):
            return False
        for _ in range(_PUSH_ATTEMPTS):
            theirs, ran = git.fetch(self.root, name, branch)
            if not ran.ok:
                self._note_error(name, f"fetch failed: {ran.err.strip()[-500:]}")
                return False
            faults.point("sync-fetched")
            self._update(name, lastFetch=time.time(), lastError=None)
            self._publish("sync.fetched", remote=name, head=theirs)
            seen = entry.get("lastSeen")
            if seen and seen != theirs and not self._descends(theirs, seen):
                reason = (
                    f"{name}/{branch} was rewritten: it no longer contains {seen[:12]}, "
                    "which this workspace saw there. Sync with it stopped; nothing was "
                    f"merged, pushed or discarded. Look with `git log {name}/{branch}`, then "
                    "run `mnote sync now --resume` to merge it as it is now."
                )
                self._update(name, stopped=reason, lastError=reason)
                self._publish("sync.stopped", remote=name, reason=reason)
                return False
            if theirs is not None:
                self._merge(name, theirs)
                self._update(name, lastSeen=theirs)
            head = self._local_head()
            if (
                head is None
                or head == theirs
                or (theirs is not None and self._descends(theirs, head))
            ):
                return True
            notes = self._note_ids(theirs, name)
            ran = git.push(self.root, name, head, branch, notes)
            if ran.ok:
                faults.point("sync-pushed")
                self._update(name, lastPush=time.time(), lastSeen=head, lastError=None)
                self._publish("sync.pushed", remote=name, head=head)
                return True
            if not git.rejected(ran):
                self._note_error(name, f"push failed: {(ran.err or ran.out).strip()[-500:]}")
                return False
        self._note_error(name, "the remote kept moving while pushing; trying again later")
        return False

    def _merge(self, name: str, theirs: str) -> None:
        def job() -> tuple[Plan, str | None]:
            assert self._head is not None and self._land is not None
            for _ in range(_LAND_ATTEMPTS):
                ours, _branch = self._head()
                repo = pygit2.Repository(str(self.root))
                start = time.time()
                plan = plan_merge(repo, ours, theirs, host=self.host, source=name)
                if plan.commit is None:
                    return plan, None
                if plan.kind == "merge":
                    _sync_loose_objects(Path(repo.path), start)
                entries = [
                    {
                        "path": path,
                        "where": held.where,
                        "key": held.key,
                        "commit": plan.commit,
                        "sessionId": None,
                        "pending": True,
                        "ours": held.ours,
                        "theirs": held.theirs,
                    }
                    for path, held in plan.held
                ]
                self._keep_held(entries)  # (before landing: a crash after it loses none)
                faults.point("sync-merge-written")
                landed = self._land(plan.commit, ours, f"{plan.kind}_{plan.commit[:12]}")
                if landed is None:
                    self._drop_held(plan.commit)
                    continue
                faults.point("sync-landed")
                if self._ids_in is not None:
                    self._ids_in(ours, name)
                self._open_sessions()
                return plan, plan.commit
            raise RuntimeError("HEAD kept moving while merging")

        plan, landed = self._on_writer(job)
        if landed is not None:
            self._publish(  # (counts only: the events reach agents that may not see a page)
                "sync.merged",
                remote=name,
                how=plan.kind,
                commit=landed,
                pages=len(plan.merged),
                held=len(plan.held),
                copies=len(plan.copies),
            )

    def _keep_held(self, entries: list[dict[str, Any]]) -> None:
        if entries:
            with self._lock:
                self._state["held"].extend(entries)
                self._save()

    def _drop_held(self, commit: str) -> None:
        with self._lock:
            self._state["held"] = [h for h in self._state["held"] if h.get("commit") != commit]
            self._save()

    def _open_sessions(self) -> None:
        """Held versions of merges that landed get their review session; those of a merge
        that never landed (a crash before its branch moved) go: the merge is made again.
        Runs on the writer thread."""
        with self._lock:
            pending = [h for h in self._state["held"] if h.get("pending")]
        if not pending:
            return
        repo = pygit2.Repository(str(self.root))
        head = None if repo.head_is_unborn else repo.head.target
        for entry in pending:
            commit = pygit2.Oid(hex=entry["commit"])
            landed = head is not None and (head == commit or repo.descendant_of(head, commit))
            if not landed:
                self._drop_held(entry["commit"])
                continue
            held = Held(entry["where"], entry["ours"], entry["theirs"], "", entry["key"])
            sid = self._hold(entry["path"], held, entry["commit"]) if self._hold else None
            with self._lock:
                entry["sessionId"], entry["pending"] = sid, False
                for kept in self._state["held"]:
                    if (
                        kept.get("pending")
                        and kept["commit"] == entry["commit"]
                        and (
                            kept["path"],
                            kept["where"],
                            kept["key"],
                            kept["theirs"],
                        )
                        == (entry["path"], entry["where"], entry["key"], entry["theirs"])
                    ):
                        kept.update(sessionId=sid, pending=False)
                self._save()

    def _forget_decided(self) -> None:
        """Drop from the held list the versions whose review session a person decided."""
        with self._lock:
            sids = [h["sessionId"] for h in self._state["held"] if h.get("sessionId")]
        if not sids or self._decided is None:
            return
        decided = self._on_writer(partial(self._decided, sids))
        if decided:
            with self._lock:
                self._state["held"] = [
                    h for h in self._state["held"] if h.get("sessionId") not in decided
                ]
                self._save()

    # -- helpers ------------------------------------------------------------------------------
    def _note_ids(self, theirs: str | None, name: str) -> str | None:
        """The notes commit to push with HEAD: every page version pushed noted, in writer jobs
        of a bounded number of pages each (``blockids.MAX_NOTED``): a job notes the next
        pages, until one adds none (its notes commit is the last one's)."""
        if self._ids_out is None:
            return None
        notes: str | None = None
        for _ in range(_NOTE_JOBS):
            last = notes
            notes = self._on_writer(partial(self._ids_out, theirs, name))
            if notes == last:
                break
        return notes

    def _settings(self) -> Configured:
        if self._configured is None:
            return Configured(interval=self.config.interval, push_delay=self.config.push_delay)
        try:
            return self._configured()
        except Exception:  # (the last good config is the workspace's business; never fatal)
            log.exception("sync settings of %s unreadable", self.root)
            return Configured(interval=self.config.interval, push_delay=self.config.push_delay)

    def _keep_configured(self) -> None:
        """The remote the workspace config names exists in the repository with its URL (the
        config is the truth for that name; a remote it stops naming is left as it is)."""
        wanted = self._settings()
        if not wanted.url:
            return
        try:
            repo = pygit2.Repository(str(self.root))
            found = next((r for r in repo.remotes if r.name == wanted.name), None)
            if found is None:
                repo.remotes.create(wanted.name, wanted.url)
            elif found.url != wanted.url:
                repo.remotes.set_url(wanted.name, wanted.url)
            else:
                return
            log.info("sync: remote %s set from the workspace config", wanted.name)
        except (pygit2.GitError, ValueError) as exc:
            self._note_error(wanted.name, f"the configured remote cannot be set: {exc}")

    def _local_head(self) -> str | None:
        assert self._head is not None
        head_of = self._head
        head: str | None = self._on_writer(head_of)[0]
        return head

    def _descends(self, commit: str | None, ancestor: str) -> bool:
        if commit is None:
            return False
        try:
            repo = pygit2.Repository(str(self.root))
            return commit == ancestor or repo.descendant_of(
                pygit2.Oid(hex=commit), pygit2.Oid(hex=ancestor)
            )
        except (pygit2.GitError, KeyError, ValueError):
            return False

    def _entry(self, name: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._state["remotes"].get(name, {}))

    def _update(self, name: str, **fields: Any) -> None:
        with self._lock:
            self._state["remotes"].setdefault(name, {}).update(fields)
            self._save()

    def _note_error(self, name: str | None, message: str) -> None:
        message = git.redact(message)
        log.warning("sync %s: %s", name or "", message)
        if name is not None:
            self._update(name, lastError=message, lastErrorAt=time.time())
        self._publish("sync.error", remote=name, error=message)

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("remotes"), dict):
                data.setdefault("held", [])
                return data
        except (OSError, ValueError):
            pass
        return {"remotes": {}, "held": []}

    def _save(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._state, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.state_path)


def _listed(held: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Held versions as the status lists them: where, and the session holding the text."""
    return [
        {k: v for k, v in h.items() if k not in ("ours", "theirs", "pending")}
        for h in held
        if not h.get("pending")
    ]


def _sync_loose_objects(gitdir: Path, since: float) -> None:
    """Make the loose objects a merge just wrote durable (libgit2 does not fsync them): the
    journaled landing that follows names a commit whose objects must survive a power cut."""
    objects = gitdir / "objects"
    folders: list[int] = []
    for sub in os.scandir(objects):
        if len(sub.name) != 2 or not sub.is_dir():
            continue
        touched = False
        for item in os.scandir(sub.path):
            if item.stat().st_mtime >= since - 1:
                fd = os.open(item.path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                touched = True
        if touched:
            folders.append(os.open(sub.path, os.O_RDONLY))
    for fd in folders:
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
