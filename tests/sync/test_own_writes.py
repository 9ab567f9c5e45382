"""The early filter for mnoted's own writes: Git blob ids and the registry's rules."""

from __future__ import annotations

import os
from pathlib import Path

import pygit2

from mnoted.sync.debounce import SettledBatch
from mnoted.sync.own_writes import ABSENT, OwnWrites, blob_id, read_blob_id


def test_blob_id_is_gits(tmp_path: Path) -> None:
    for data in (b"", b"hello\n", os.urandom(3_000_000)):
        assert blob_id(data) == str(pygit2.hash(data))
        (tmp_path / "f").write_bytes(data)
        assert read_blob_id(str(tmp_path / "f")) == blob_id(data)


def test_read_blob_id_never_follows_symlinks(tmp_path: Path) -> None:
    (tmp_path / "target.md").write_text("secret")
    os.symlink(tmp_path / "target.md", tmp_path / "link.md")
    assert read_blob_id(str(tmp_path / "link.md")) is None
    assert read_blob_id(str(tmp_path / "missing.md")) is ABSENT
    assert read_blob_id(str(tmp_path / "target.md" / "below")) is ABSENT
    assert read_blob_id(str(tmp_path)) is None  # a folder is not a blob


def test_registry_drops_exact_content_and_forgets_on_mismatch() -> None:
    reg = OwnWrites()
    reg.expect("a.md", blob_id(b"v1"))
    assert reg.is_own("a.md", blob_id(b"v1"))
    assert reg.is_own("a.md", blob_id(b"v1"))  # a touch later: still ours
    assert not reg.is_own("a.md", blob_id(b"person's edit"))
    # The file moved on from what mnoted wrote: returning to v1 is a real change now.
    assert not reg.is_own("a.md", blob_id(b"v1"))
    assert not reg.is_own("a.md", None)  # unreadable: let the store decide


def test_registry_deletes_and_renames_path_by_path() -> None:
    reg = OwnWrites()
    reg.expect("gone.md", ABSENT)
    assert reg.is_own("gone.md", ABSENT)
    reg.expect("old.md", ABSENT)
    reg.committed("new.md", blob_id(b"x"))
    disk = {"new.md": blob_id(b"x"), "old.md": ABSENT, "other.md": blob_id(b"y")}
    batch = SettledBatch(("old.md", "new.md", "other.md"))
    kept, dropped = reg.drop_from(batch, disk.__getitem__)
    assert kept == SettledBatch(("other.md",)) and dropped == 2
    reg.forget("new.md")
    kept, dropped = reg.drop_from(SettledBatch(("old.md", "new.md")), disk.__getitem__)
    assert kept == SettledBatch(("new.md",)) and dropped == 1
    assert len(reg) == 2  # gone.md and old.md
