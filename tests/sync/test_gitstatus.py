"""The start-up pass by the ``git`` command (``mnoted.sync.gitstatus``): the paths it reads
from ``git status``, and the store's walk of the tree wherever the command cannot tell.

That it finds what the walk finds on random trees is checked by the property test of
``tests/store/test_scan.py``; these are the cases that test does not make.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnoted.store import Workspace
from mnoted.sync import gitstatus
from mnoted.sync.gitstatus import changes_by_git


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Workspace]:
    with Workspace.init(tmp_path / "notes") as workspace:
        yield workspace


def test_records_of_every_kind_are_read() -> None:
    hid = b"0" * 40
    out = b"\0".join(
        [
            b"1 .M N... 100644 100644 100644 " + hid + b" " + hid + b" notes/a b.md",
            b"1 D. N... 100644 000000 000000 " + hid + b" " + hid + b" gone.md",
            b"1 M. SC.. 160000 160000 160000 " + hid + b" " + hid + b" staged-sub",
            b"1 .M SC.. 160000 160000 160000 " + hid + b" " + hid + b" moved-sub",
            b"u UU N... 100644 100644 100644 100644 " + hid + b" " + hid + b" " + hid + b" c.md",
            b"? new\nline.md",
            b"? bad-\xff.md",
            b"? nested/",
            b"",
        ]
    )
    assert gitstatus.parse(out) == {
        "notes/a b.md",
        "gone.md",
        "staged-sub",
        "c.md",
        "new\nline.md",
        "bad-\udcff.md",
    }


def test_a_missing_command_or_a_refused_repository_tells_nothing(tmp_path: Path) -> None:
    assert changes_by_git(tmp_path, git=str(tmp_path / "no-git")) is None
    assert changes_by_git(tmp_path) is None  # not a repository


def test_without_the_command_the_start_up_pass_walks(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws.root / "note.md").write_text("written while nobody watched\n")
    monkeypatch.setattr(gitstatus.shutil, "which", lambda name: None)
    assert ws.scan_changes(whole_tree=changes_by_git) == ["note.md"]


def test_the_environment_does_not_point_it_at_another_repository(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    (other / "theirs.md").write_text("someone else's\n")
    (ws.root / "ours.md").write_text("ours\n")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    assert ws.scan_changes(whole_tree=changes_by_git) == ["ours.md"]


def test_it_writes_no_index_and_waits_for_no_lock(ws: Workspace) -> None:
    """``git status`` would otherwise refresh the index, taking ``index.lock`` from whoever
    runs ``git add`` at that moment."""
    index = ws.root / ".git" / "index"
    stamp = os.stat(index).st_ino, os.stat(index).st_mtime_ns
    (ws.root / "note.md").write_text("an edit\n")
    assert ws.scan_changes(whole_tree=changes_by_git) == ["note.md"]
    assert (os.stat(index).st_ino, os.stat(index).st_mtime_ns) == stamp
    lock = ws.root / ".git" / "index.lock"
    lock.write_bytes(b"someone's\n")
    assert ws.scan_changes(whole_tree=changes_by_git) == ["note.md"]
    assert lock.read_bytes() == b"someone's\n"
