"""The command journal: a command's full intent, made durable before it touches anything.

One file, ``.mnote/state/command.journal``, because the store lands one command (or one
group of commands, journaled as their base, their last commit and each path's blob before
and after the group) at a time.
It names the branch, the parent commit, the new commit (already written to the object
database) and, per path, the blob before and after. After a crash, recovery uses it to
complete the command (the ref and the files are set from these objects) or to drop it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from mnoted.store.atomic import fsync_dir

JOURNAL_NAME = "command.journal"


@dataclass(frozen=True)
class FileStep:
    """One path of a journaled command: blob before and after (None = absent) and mode."""

    path: str
    old: str | None
    new: str | None
    mode: int


@dataclass(frozen=True)
class Entry:
    """A journaled command."""

    command_id: str
    branch: str
    parent: str | None
    commit: str
    files: tuple[FileStep, ...]

    def to_json(self) -> bytes:
        data = asdict(self)
        data["version"] = 1
        return json.dumps(data, sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes) -> Entry:
        data = json.loads(raw)
        return cls(
            command_id=data["command_id"],
            branch=data["branch"],
            parent=data["parent"],
            commit=data["commit"],
            files=tuple(FileStep(**f) for f in data["files"]),
        )


class Journal:
    """The journal file in the state folder, kept open and overwritten in place.

    A write is one ``pwrite`` + ``fdatasync`` (no temp file, no folder sync): the record
    carries a checksum, so a write torn by a crash reads as "no journal" (and a torn write
    means the command had not yet moved the branch). Clearing truncates without syncing:
    a clear lost to a power cut brings back only the newest record, whose commit recovery
    then finds already landed.
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / JOURNAL_NAME
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fsync_dir(state_dir)

    @property
    def fd(self) -> int:
        """The journal's file descriptor (to sync it together with other files)."""
        return self._fd

    def write(self, entry: Entry, *, sync: bool = True) -> None:
        """Replace the record; durable at return unless ``sync`` is False (the caller then
        syncs :attr:`fd`)."""
        body = entry.to_json()
        record = hashlib.sha256(body).hexdigest().encode("ascii") + b"\n" + body
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, record, 0)
        if sync:
            os.fdatasync(self._fd)

    def read(self) -> Entry | None:
        """The pending entry, or None (a torn or unreadable journal was never acted on)."""
        size = os.fstat(self._fd).st_size
        raw = os.pread(self._fd, size, 0) if size else b""
        digest, _, body = raw.partition(b"\n")
        if not body or hashlib.sha256(body).hexdigest().encode("ascii") != digest:
            return None
        try:
            return Entry.from_json(body)
        except (ValueError, KeyError, TypeError):
            return None

    def clear(self) -> None:
        os.ftruncate(self._fd, 0)

    def close(self) -> None:
        os.close(self._fd)
