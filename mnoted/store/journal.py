"""The command journal: a command's full intent, made durable before it touches anything.

One file, ``.mnote/state/journal.json``, because the store applies one command at a time.
It names the branch, the parent commit, the new commit (already written to the object
database) and, per path, the blob before and after. After a crash, recovery uses it to
complete the command (the ref and the files are set from these objects) or to drop it.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from mnoted.store.atomic import fsync_dir, write_atomic

JOURNAL_NAME = "journal.json"


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
    """Reads and writes the journal file in the state folder."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / JOURNAL_NAME

    def write(self, entry: Entry) -> None:
        write_atomic(self.path, entry.to_json())

    def read(self) -> Entry | None:
        """The pending entry, or None (a torn or unreadable journal was never acted on)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return Entry.from_json(raw)
        except (ValueError, KeyError, TypeError):
            return None

    def clear(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
            fsync_dir(self.path.parent)
