"""What the service layer asks of a workspace: :class:`WorkspaceApi`.

The service (``mnoted.service``) is typed against this Protocol, not against
:class:`~mnoted.store.workspace.Workspace`: it names every attribute and method the
service uses, and nothing else (the writer's groups, index refreshes, upkeep and opening
belong to the layer that composes a workspace). :class:`Workspace` implements it;
``tests/store/test_api_protocol.py`` holds that. The search index
(``store.search_index``) reads commits through it too: :class:`CommitFiles` on the
workspace's thread, a :class:`CommitReader` on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

from mnoted.store.config import WorkspaceConfig
from mnoted.store.facades import BlockIds, Grants, Idempotency
from mnoted.store.model import (
    Change,
    CommandMeta,
    CommandRecord,
    CommitResult,
    DocRef,
    HistoryEntry,
)
from mnoted.store.reviews import ReviewStore
from mnoted.store.statcache import Key


class CommitFiles(Protocol):
    """The files of commits, as the search index reads them."""

    def files_changed(self, old: str | None, new: str) -> list[tuple[str, str | None]]:
        """Every path whose regular file differs from commit ``old`` (None: no files) to
        commit ``new``, with its blob id in ``new`` (None: no regular file there now);
        KeyError if a commit is not known."""
        ...

    def read_blob(self, blob_id: str) -> bytes | None: ...


class CommitReader(CommitFiles, Protocol):
    """:class:`CommitFiles` for the thread that asked for it (``commit_reader``)."""

    def close(self) -> None: ...


class WorkspaceApi(Protocol):
    """A workspace as the service reads and writes it (``docs/store.md``, *Public API*)."""

    @property
    def root(self) -> Path: ...

    @property
    def state_dir(self) -> Path: ...

    @property
    def workspace_id(self) -> str: ...

    @property
    def config(self) -> WorkspaceConfig: ...

    @property
    def head(self) -> str | None: ...

    @property
    def block_ids(self) -> BlockIds: ...

    @property
    def grants(self) -> Grants: ...

    @property
    def reviews(self) -> ReviewStore: ...

    @property
    def idempotency(self) -> Idempotency: ...

    # reads (store.reads)
    def resolve(self, ref: str) -> DocRef: ...

    def documents(self, under: str = "") -> list[DocRef]: ...

    def listing(self, under: str = "") -> list[tuple[DocRef, str, str]]: ...

    def blob_id(self, path: str) -> str | None: ...

    def read_basis(self, path: str) -> tuple[object, Key] | None: ...

    def still_as_read(self, basis: tuple[object, Key], path: str) -> bool: ...

    def filter_of(self, path: str) -> str | None: ...

    def refuse_filtered(self, path: str) -> None: ...

    def read_head(self, path: str) -> bytes | None: ...

    def read_disk(self, path: str) -> bytes | None: ...

    def read_blob(self, blob_id: str) -> bytes | None: ...

    def blob_at(self, revision: str, path: str) -> tuple[str, bytes] | None: ...

    def revision_of(self, path: str) -> str: ...

    def history(self, ref: str, limit: int = 50) -> list[HistoryEntry]: ...

    def find_command(
        self,
        *,
        command_id: str | None = None,
        trace_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[CommandRecord]: ...

    def paths_of_commit(self, commit: str) -> list[str]: ...

    # commits' files (store.search_index)
    def files_changed(self, old: str | None, new: str) -> list[tuple[str, str | None]]: ...

    def commit_reader(self) -> CommitReader:
        """A reader of commits for the calling thread, which may be any (close it after)."""
        ...

    # state
    def refresh(self) -> bool: ...

    def operation(self) -> tuple[str, str] | None: ...

    # writes
    def apply(self, meta: CommandMeta, changes: Sequence[Change]) -> CommitResult: ...

    def check_writable(self, changes: Sequence[Change]) -> None: ...

    def commit_external(
        self,
        paths: Iterable[str],
        *,
        meta: CommandMeta | None = None,
        include_ignored: bool = False,
        wait: float = ...,
    ) -> CommitResult | None: ...

    def after_landing(self, callback: Callable[[], object]) -> None: ...
