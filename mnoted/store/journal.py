"""The command journal: a command's full intent, made durable before it touches anything.

One file, ``.git/mnote/state/command.journal``, because the store lands one command (or one
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
from dataclasses import dataclass
from pathlib import Path

import pygit2

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
        # (by hand: ``dataclasses.asdict`` copies recursively, three times as long)
        data = {
            "command_id": self.command_id,
            "branch": self.branch,
            "parent": self.parent,
            "commit": self.commit,
            "files": [vars(step) for step in self.files],
            "version": 1,
        }
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
    r"""The journal file in the state folder, kept open and overwritten in place.

    A record is ``v2 <length> <sha256>\n<body>`` written at offset 0 with one ``pwrite`` and
    synced with the landing's other files (no temp file, no folder sync). The file is never
    truncated on the way (bytes of a longer earlier record may follow the body): an overwrite in
    place frees and allocates no block, so its sync writes the data only. A record torn by a
    crash fails its checksum and reads as "no journal" (a torn write means the command had not
    yet moved the branch). Clearing overwrites the whole header without syncing, so that no torn
    write of a later header can bring the cleared record back; a clear lost to a power cut
    brings back only the newest record, whose commit recovery then finds already landed. A file
    left by a version that wrote ``<sha256>\n<body>`` (and truncated) is still read.
    """

    _SHRINK_OVER = 1 << 20  # a clear truncates a file grown past this by a large group
    _HEAD_MAX = 128  # "v2 <length> <64 hex digits>\n" fits

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
        head = f"v2 {len(body)} {hashlib.sha256(body).hexdigest()}\n".encode("ascii")
        os.pwrite(self._fd, head + body, 0)
        if sync:
            os.fdatasync(self._fd)

    def read(self) -> Entry | None:
        """The pending entry, or None (a torn, cleared or unreadable journal was never acted
        on)."""
        head = os.pread(self._fd, self._HEAD_MAX, 0)
        if head.startswith(b"v2 "):
            line, newline, _ = head.partition(b"\n")
            fields = line.split(b" ")
            if not newline or len(fields) != 3 or not fields[1].isdigit():
                return None
            length, digest = int(fields[1]), fields[2]
            body = os.pread(self._fd, length, len(line) + 1)
            if len(body) != length:  # a header torn over a shorter record
                return None
        else:  # the earlier format: the whole file is the record
            size = os.fstat(self._fd).st_size
            digest, _, body = (os.pread(self._fd, size, 0) if size else b"").partition(b"\n")
        if not body or hashlib.sha256(body).hexdigest().encode("ascii") != digest:
            return None
        try:
            return Entry.from_json(body)
        except (ValueError, KeyError, TypeError):
            return None

    def clear(self) -> None:
        if os.fstat(self._fd).st_size > self._SHRINK_OVER:
            os.ftruncate(self._fd, 0)
        else:
            os.pwrite(self._fd, b"-" * self._HEAD_MAX, 0)

    def close(self) -> None:
        os.close(self._fd)


def file_steps(old: pygit2.Tree | None, new: pygit2.Tree) -> list[FileStep]:
    """The files to write to go from tree ``old`` to ``new``: a rename as the removal of its
    old path and the write of its new one; submodules left out (their commits are their own
    repository's business)."""
    steps: list[FileStep] = []
    diff = old.diff_to_tree(new) if old is not None else new.diff_to_tree(swap=True)
    for delta in diff.deltas:
        old_f, new_f = delta.old_file, delta.new_file
        if pygit2.GIT_FILEMODE_COMMIT in (old_f.mode, new_f.mode):
            continue
        if old_f.path != new_f.path:
            steps.append(FileStep(old_f.path, str(old_f.id), None, old_f.mode))
        gone = delta.status == pygit2.GIT_DELTA_DELETED
        steps.append(
            FileStep(
                new_f.path,
                None if delta.status == pygit2.GIT_DELTA_ADDED else str(old_f.id),
                None if gone else str(new_f.id),
                old_f.mode if gone else new_f.mode,
            )
        )
    return steps
