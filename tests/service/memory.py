"""An in-memory twin of the store for service tests: :class:`MemoryWorkspace`.

It implements :class:`mnoted.store.WorkspaceApi` without Git: commits are dicts (path to
blob id), revisions are hashes of them, and blobs are kept by their Git blob id. The work
tree is a plain folder (tests write files there to play a person's editor, as on the real
store) and the state folder another, so the service's own files (review sessions, file
copies, the search index) have a home. Each twin gets a new workspace id, as
``Workspace.init`` gives one. Its bookkeeping is the store's own: an in-memory sidecar
(documents, history, commands, idempotency records, block ids, grants, review sessions)
filled as the store's indexer fills it (ids kept across moves, pinned by frontmatter, else
made from the commit and path), and the same path checks (``planning.validate``,
``check_base``). The search index (``store.search_index``) reads its commits as it reads
the store's: ``files_changed`` and ``read_blob``, and a :class:`MemoryCommitReader` for the
full pass's thread.

What it does not model: Git's filters, ignore files, settling, file modes (every file is a
regular one), renames found by content (an external move is a delete and a new document),
commit authors, groups (``after_landing`` runs its callback at once), a Git operation under
way, the Git index, the stat data that lets a read be answered again (``read_basis`` is
None), and the fault points of a landing. Tests of those run on the real store: in a module
marked ``twin``, a test marked ``git`` gets a real workspace (``tests/service/conftest.py``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from mnoted.core.blob import blob_id
from mnoted.errors import Conflict, InvalidArguments, NotFound, PathRejected
from mnoted.service import Actor, Service
from mnoted.store import (
    BlockIds,
    Change,
    CommandMeta,
    CommandRecord,
    CommitResult,
    Delete,
    DocRef,
    Grants,
    HistoryEntry,
    Idempotency,
    Move,
    ReviewStore,
    WorkspaceApi,
    WorkspaceConfig,
    Write,
    is_internal,
    message,
    normalize,
    template_files,
)
from mnoted.store.config import CONFIG_PATH, new_workspace_id, render
from mnoted.store.facades import BLOCK_IDS, GRANTS
from mnoted.store.indexer import generated_id, is_document, pinned_id, record_command
from mnoted.store.paths import resolve
from mnoted.store.planning import check_base, validate
from mnoted.store.reads import commands_of, doc_ref
from mnoted.store.reviews import REVIEWS
from mnoted.store.sidecar import Sidecar
from mnoted.store.statcache import Key
from tests.service.harness import PLAN, SECRET, Harness


@dataclass(frozen=True)
class MemoryCommit:
    """One commit: its parent, every file it holds (path to blob id) and its message."""

    parent: str | None
    files: dict[str, str]
    message: str
    time: int
    changed: tuple[str, ...] = field(default=())


class MemoryWorkspace:
    """:class:`~mnoted.store.WorkspaceApi` in memory; ``state_dir`` is a real folder (the
    service keeps review sessions and file copies there)."""

    def __init__(
        self,
        root: Path,
        state_dir: Path,
        *,
        workspace_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        state_dir.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.state_dir = state_dir
        self._side = Sidecar.open(Path(":memory:"), (REVIEWS, BLOCK_IDS, GRANTS))
        self.block_ids = BlockIds(self._side, lambda: None)
        self.grants = Grants(self._side, lambda: None)
        self.reviews = ReviewStore(self._side, lambda: None)
        self.idempotency = Idempotency(self._side, lambda: None)
        self.commits: dict[str, MemoryCommit] = {}
        self.blobs: dict[str, bytes] = {}
        self.head: str | None = None
        self._clock = clock
        # The template's files, committed as `Workspace.init` does in an empty folder.
        files = template_files()
        config = render(files[CONFIG_PATH].decode("utf-8"), workspace_id or new_workspace_id())
        files[CONFIG_PATH] = config.encode()
        for rel, data in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        self.config = self.reload_config()
        self.commit_external(sorted(files), meta=CommandMeta("workspace.init", actor="mnoted"))

    def reload_config(self) -> WorkspaceConfig:
        """Read ``.mnote/config.toml`` again (``Workspace.reload_config``)."""
        self.config = WorkspaceConfig.load(self.root)
        return self.config

    @property
    def workspace_id(self) -> str:
        return self.config.workspace_id

    def close(self) -> None:
        self._side.close()

    # reads -----------------------------------------------------------------------------
    def _files(self) -> dict[str, str]:
        return {} if self.head is None else self.commits[self.head].files

    def resolve(self, ref: str) -> DocRef:
        return doc_ref(self._side, ref)

    def documents(self, under: str = "") -> list[DocRef]:
        return [doc for doc, _, _ in self.listing(under)]

    def listing(self, under: str = "") -> list[tuple[DocRef, str, str]]:
        return [(DocRef(d, p), b, r) for d, p, b, r in self._side.documents(under)]

    def blob_id(self, path: str) -> str | None:
        return self._files().get(normalize(path))

    def read_basis(self, path: str) -> tuple[object, Key] | None:
        return None  # (no file system: every read is answered afresh)

    def still_as_read(self, basis: tuple[object, Key], path: str) -> bool:
        return False

    def filter_of(self, path: str) -> str | None:
        return None

    def refuse_filtered(self, path: str) -> None:
        normalize(path)

    def read_head(self, path: str) -> bytes | None:
        blob = self.blob_id(path)
        return None if blob is None else self.blobs[blob]

    def read_disk(self, path: str) -> bytes | None:
        target = resolve(self.root, normalize(path))
        return target.read_bytes() if target.is_file() else None

    def read_blob(self, blob_id: str) -> bytes | None:
        return self.blobs.get(blob_id)

    def blob_at(self, revision: str, path: str) -> tuple[str, bytes] | None:
        commit = self.commits.get(revision)
        blob = None if commit is None else commit.files.get(normalize(path))
        return None if blob is None else (blob, self.blobs[blob])

    def revision_of(self, path: str) -> str:
        rel = normalize(path)
        row = self._side.file(rel)
        if row is None:
            raise NotFound(f"{rel} is not in the workspace", path=rel)
        return row[1]

    def history(self, ref: str, limit: int = 50) -> list[HistoryEntry]:
        doc_id: str | None
        try:
            doc = self.resolve(ref)
            doc_id, path = doc.document_id, doc.path
        except NotFound:
            doc_id, path = None, normalize(ref)
        return self._side.history(doc_id, path, limit)

    def find_command(
        self,
        *,
        command_id: str | None = None,
        trace_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[CommandRecord]:
        return commands_of(
            self._side, command_id=command_id, trace_id=trace_id, idempotency_key=idempotency_key
        )

    def paths_of_commit(self, commit: str) -> list[str]:
        return self._side.paths_of_commit(commit)

    # commits' files (store.search_index) -----------------------------------------------
    def files_changed(self, old: str | None, new: str) -> list[tuple[str, str | None]]:
        return _files_changed(self.commits, old, new)

    def commit_reader(self) -> MemoryCommitReader:
        return MemoryCommitReader(self.commits, self.blobs)

    # state -----------------------------------------------------------------------------
    def refresh(self) -> bool:
        return False

    def operation(self) -> tuple[str, str] | None:
        return None

    # writes ----------------------------------------------------------------------------
    def check_writable(self, changes: Sequence[Change]) -> None:
        validate(self.root, self.config, changes)

    def apply(self, meta: CommandMeta, changes: Sequence[Change]) -> CommitResult:
        meta = meta.with_command_id()
        if meta.idempotency_key:
            owner = message.meta_key_owner(meta)
            rec = self.idempotency.check(meta.idempotency_key, meta.request_hash, owner)
            if rec is not None:
                commit = self.commits[rec.commit]
                paths = tuple(self._side.paths_of_commit(rec.commit))
                return CommitResult(rec.commit, rec.command_id, commit.parent, paths, replayed=True)
        if not changes:
            raise InvalidArguments("a command needs at least one change")
        touched = validate(self.root, self.config, changes)
        external = self.commit_external(touched)
        files = dict(self._files())
        written: dict[str, bytes | None] = {}
        moves: dict[str, str] = {}
        for change in changes:
            if isinstance(change, Write):
                rel = normalize(change.path)
                check_base(rel, _entry(files, rel), change.base_blob)
                written[rel] = change.data
            elif isinstance(change, Delete):
                rel = normalize(change.path)
                if rel not in files:
                    raise NotFound(f"{rel} is not in the workspace", path=rel)
                check_base(rel, _entry(files, rel), change.base_blob)
                written[rel] = None
            else:
                old, new = normalize(change.old), normalize(change.new)
                if old not in files:
                    raise NotFound(f"{old} is not in the workspace", path=old)
                check_base(old, _entry(files, old), change.base_blob)
                if new in files:
                    raise Conflict(
                        f"cannot move {old} to {new}: {new} exists",
                        path=new,
                        hint="Choose another name or delete the existing page.",
                    )
                written[old] = None
                written[new] = change.data if change.data is not None else self.blobs[files[old]]
                moves[new] = old
        subjects = [normalize(c.new if isinstance(c, Move) else c.path) for c in changes]
        result = self._commit(meta, written, moves, subjects)
        if external is not None:
            result = replace(result, external_commit=external.commit)
        return result

    def commit_external(
        self,
        paths: Iterable[str],
        *,
        meta: CommandMeta | None = None,
        include_ignored: bool = False,
        wait: float = 0.0,
    ) -> CommitResult | None:
        files = self._files()
        written: dict[str, bytes | None] = {}
        for rel in self._expanded(paths):
            target = resolve(self.root, rel, config_ok=True)  # (the config is committed too)
            on_disk = target.read_bytes() if target.is_file() else None
            committed = files.get(rel)
            if (on_disk is None and committed is not None) or (
                on_disk is not None and blob_id(on_disk) != committed
            ):
                written[rel] = on_disk
        if not written:
            return None
        meta = (meta or CommandMeta("external.edit", actor="external")).with_command_id()
        return self._commit(meta, written, {}, sorted(written))

    def _expanded(self, paths: Iterable[str]) -> list[str]:
        """``paths``, a folder standing for the files below it (on disk and committed), but
        those mnoted never commits."""
        out: list[str] = []
        for path in paths:
            try:
                rel = normalize(path, config_ok=True)
                target = resolve(self.root, rel, config_ok=True)
            except PathRejected:
                continue
            if not target.is_dir():
                out.append(rel)
                continue
            found = [p.relative_to(self.root).as_posix() for p in target.rglob("*") if p.is_file()]
            out += found + [p for p in self._files() if p.startswith(rel + "/")]
        return sorted(p for p in set(out) if not is_internal(p))

    def after_landing(self, callback: Callable[[], object]) -> None:
        callback()

    # the commit, and what the store's indexer records of it ----------------------------
    def _commit(
        self,
        meta: CommandMeta,
        written: dict[str, bytes | None],
        moves: dict[str, str],
        subjects: list[str],
    ) -> CommitResult:
        files = dict(self._files())
        for path, data in written.items():
            if data is None:
                files.pop(path, None)
            else:
                blob = blob_id(data)
                self.blobs[blob] = data
                files[path] = blob
        text = message.format_message(meta, subjects)
        when = int(self._clock())
        parent = self.head
        cid = hashlib.sha1(
            repr((parent, sorted(files.items()), text, when)).encode(), usedforsecurity=False
        ).hexdigest()
        self.commits[cid] = MemoryCommit(parent, files, text, when, tuple(written))
        self.head = cid
        for path, data in written.items():
            target = self.root / path
            if data is None:
                target.unlink(missing_ok=True)
            elif not target.is_file() or target.read_bytes() != data:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        self._index(cid, written, moves, text, when)
        return CommitResult(cid, meta.command_id, parent, tuple(written))

    def _index(
        self,
        cid: str,
        written: dict[str, bytes | None],
        moves: dict[str, str],
        text: str,
        when: int,
    ) -> None:
        moved_away = set(moves.values())
        moved_ids = {old: (self._side.file(old) or (None, None, None))[2] for old in moved_away}
        for path, data in written.items():
            if data is None:
                row = self._side.file(path)
                self._side.drop_file(path)
                if path not in moved_away:
                    self._side.add_change(cid, row[2] if row else None, path, None, "D")
        for path, data in written.items():
            if data is None:
                continue
            old = moves.get(path)
            row = self._side.file(path) if old is None else None
            carried = row[2] if row else moved_ids.get(old) if old is not None else None
            doc = (
                (pinned_id(data) or carried or generated_id(cid, path))
                if is_document(path)
                else None
            )
            status = "R" if old is not None else "M" if row else "A"
            self._side.put_file(path, blob_id(data), cid, doc)
            self._side.add_change(cid, doc, path, old, status)
        record_command(self._side, cid, text, when, {})  # (as the store's indexer does)


class MemoryCommitReader:
    """:class:`~mnoted.store.api.CommitReader` on the twin's commits and blobs (only ever
    added to, so another thread may read them)."""

    def __init__(self, commits: dict[str, MemoryCommit], blobs: dict[str, bytes]) -> None:
        self._commits = commits
        self._blobs = blobs

    def files_changed(self, old: str | None, new: str) -> list[tuple[str, str | None]]:
        return _files_changed(self._commits, old, new)

    def read_blob(self, blob_id: str) -> bytes | None:
        return self._blobs.get(blob_id)

    def close(self) -> None:
        pass  # (nothing is open)


def _files_changed(
    commits: dict[str, MemoryCommit], old: str | None, new: str
) -> list[tuple[str, str | None]]:
    """Every path whose blob differs from ``old`` (None: no files) to ``new``, with its blob
    in ``new``; KeyError for a commit the twin never made."""
    before = {} if old is None else commits[old].files
    after = commits[new].files
    return [
        (path, after.get(path))
        for path in sorted(before.keys() | after.keys())
        if before.get(path) != after.get(path)
    ]


def _entry(files: dict[str, str], path: str) -> tuple[str, int] | None:
    blob = files.get(path)
    return None if blob is None else (blob, 0o100644)


def _conforms(ws: MemoryWorkspace) -> WorkspaceApi:
    return ws  # (mypy holds the twin to the protocol here)


class MemoryHarness(Harness):
    """:class:`~tests.service.harness.Harness` on a :class:`MemoryWorkspace`: no Git
    repository (``git`` fails the test); files are written and committed as on the store.
    Its state folder is ``<root>.state``, beside the work tree."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ws = MemoryWorkspace(root, root.parent / f"{root.name}.state")  # type: ignore[assignment]
        self.service = Service()
        self.service.add(self.ws)
        self.owner = Actor.owner()

    @property
    def twin(self) -> MemoryWorkspace:
        assert isinstance(self.ws, MemoryWorkspace)
        return self.ws

    def reopen(self) -> None:
        """A daemon restart: the twin's commits stay, its config is read again, a new
        executor serves it."""
        self.twin.reload_config()
        self.service = Service()
        self.service.add(self.ws)

    def git(self, *args: str) -> str:
        raise AssertionError("a memory workspace has no Git repository")

    def head(self) -> str:
        assert self.ws.head is not None
        return self.ws.head


def memory_harness(tmp_path: Path) -> Iterator[MemoryHarness]:
    """What the service tests' ``h`` fixture yields in a module marked ``twin``: the twin
    holding PLAN and SECRET, as the real harness does."""
    harness = MemoryHarness(tmp_path / "ws")
    harness.write_file("notes/plan.md", PLAN)
    harness.write_file("private/secret.md", SECRET)
    yield harness
    harness.twin.close()
