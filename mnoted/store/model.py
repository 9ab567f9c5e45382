"""The values the store takes and returns: changes, command metadata, results, records."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Write:
    """Put ``data`` at ``path``. ``base_blob``, when given, must be the committed blob there
    (after pending external edits are committed), or the write is a :class:`Conflict`."""

    path: str
    data: bytes
    base_blob: str | None = None


@dataclass(frozen=True)
class Delete:
    """Remove ``path`` (which must exist in HEAD)."""

    path: str
    base_blob: str | None = None


@dataclass(frozen=True)
class Move:
    """Rename ``old`` to ``new``, optionally with new content ``data``."""

    old: str
    new: str
    data: bytes | None = None
    base_blob: str | None = None


Change = Write | Delete | Move


@dataclass(frozen=True)
class Identity:
    """A Git author or committer."""

    name: str
    email: str


_salt = random.Random()  # seeded from os.urandom; ids need to be unique, not secret


def new_command_id(command: str) -> str:
    """A unique, time-ordered command id such as ``page_body_save_18a3f...``."""
    stem = "".join(c if c.isalnum() else "_" for c in command).strip("_") or "command"
    return f"{stem}_{time.time_ns():x}{_salt.getrandbits(40):010x}"


def scoped_key(owner: str, key: str) -> str:
    """An idempotency record's key in the sidecar: the key of one actor (``owner``), both
    as a commit's trailers hold them (whitespace runs made one space)."""
    return f"{' '.join(owner.split())}\x1f{' '.join(key.split())}"


@dataclass(frozen=True)
class CommandMeta:
    """Who asked for a command and why; it becomes the commit's author, subject and trailers.

    ``command`` is the subject verb (``page.body.save``); ``request_hash`` fingerprints the
    request for idempotency. ``author`` overrides the identity derived from ``actor``.
    """

    command: str
    actor: str
    command_id: str = ""
    trace_id: str | None = None
    tool: str | None = None
    tool_call_id: str | None = None
    run_id: str | None = None
    session_id: str | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None
    author: Identity | None = None
    extra: tuple[tuple[str, str], ...] = ()
    """Further ``Mnote-*`` trailers (a review session, the accepting actor, ...)."""

    def with_command_id(self) -> CommandMeta:
        """This metadata with a generated ``command_id`` if it had none."""
        if self.command_id:
            return self
        return replace(self, command_id=new_command_id(self.command))


@dataclass(frozen=True)
class CommitResult:
    """What an applied command produced: its commit (the new workspace revision) and paths."""

    commit: str
    command_id: str
    parent: str | None
    paths: tuple[str, ...]
    replayed: bool = False
    external_commit: str | None = None
    """The commit of pending external edits made just before this one, if any."""
    planned: str | None = None
    """The command's first commit, which holds its planned bytes, when ``commit`` is a second
    one that put its change back on a save a person made as it landed (``parent``)."""


@dataclass(frozen=True)
class DocRef:
    """A document's stable id and its current path."""

    document_id: str
    path: str


@dataclass(frozen=True)
class CommandRecord:
    """One commit made by mnoted, as found by its trailers."""

    commit: str
    command_id: str
    subject: str
    actor: str | None
    trace_id: str | None
    idempotency_key: str | None
    time: int
    trailers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HistoryEntry:
    """One commit that changed a document, and the path it had then."""

    commit: str
    path: str
    old_path: str | None
    status: str
    command_id: str | None
    actor: str | None  # mnoted's actor id; None for a commit made outside mnoted
    subject: str
    time: int
    author: str | None = None  # the commit's Git author name


@dataclass(frozen=True)
class IdempotencyRecord:
    """A stored idempotent command: its request fingerprint, commit and (if kept) result."""

    key: str
    request_hash: str | None
    commit: str
    command_id: str
    result_json: str | None
