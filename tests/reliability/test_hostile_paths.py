"""Path attacks through every tool that takes a path: refused, nothing read or written outside."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest

from tests.service.conftest import Harness

ATTACKS = [
    "../escape.md",
    "notes/../../escape.md",
    "/etc/passwd.md",
    "~/escape.md",
    "C:\\Windows\\escape.md",
    "\\\\server\\share\\escape.md",
    "..\\escape.md",
    "%2e%2e/escape.md",
    ".git/config.md",
    ".git/hooks/pre-commit.md",
    ".GIT/hooks/x.md",
    ".mnote/state/x.md",
    ".mnote/config.md",
    "notes/" + "a" * 256 + ".md",
    "notes/bad\x00name.md",
    "notes/bad\nname.md",
    "notes/\u202eevil.md",
    "",
    "notes/",
]


def outside_snapshot(base: Path) -> set[str]:
    return {
        str(p.relative_to(base))
        for p in base.rglob("*")
        if "ws" not in p.relative_to(base).parts[:1]
    }


@pytest.mark.parametrize("path", ATTACKS)
def test_page_create_refuses(h: Harness, path: str) -> None:
    before = outside_snapshot(h.root.parent)
    head = h.head()
    resp = h.write("mnote.page.create", args={"path": path, "content": "x"})
    assert resp["ok"] is False, path
    assert resp["error"]["code"] in ("mnote_path_rejected", "mnote_tool_invalid_arguments")
    assert h.head() == head
    assert outside_snapshot(h.root.parent) == before
    assert not (h.root / ".git" / "hooks" / "pre-commit.md").exists()


@pytest.mark.parametrize("path", ATTACKS)
def test_page_move_and_reads_refuse(h: Harness, path: str) -> None:
    doc = h.doc("notes/plan.md")
    moved = h.write("mnote.page.move", documentId=doc, args={"newPath": path})
    assert moved["ok"] is False
    read = h.call("mnote.page.get", documentId=path) if path else h.call("mnote.page.get", path="x")
    assert read["ok"] is False
    assert (h.root / "notes/plan.md").exists()


def test_sibling_prefix_and_symlinks_out(h: Harness, tmp_path: Path) -> None:
    evil = Path(str(h.root) + "-evil")
    evil.mkdir()
    (evil / "secret.md").write_text("# outside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.md").write_text("# target outside\n")
    os.symlink(outside / "target.md", h.root / "notes" / "link.md")
    os.symlink(outside, h.root / "linked-folder")
    os.symlink(h.root / "nowhere.md", h.root / "notes" / "dangling.md")
    h.ws.commit_external(["notes/link.md", "linked-folder", "notes/dangling.md"])
    for ref in [
        "../ws-evil/secret.md",
        "notes/link.md",
        "linked-folder/target.md",
        "notes/dangling.md",
    ]:
        resp = h.call("mnote.page.get", documentId=ref)
        assert resp["ok"] is False, ref
        assert "target outside" not in str(resp)
    for path in ["linked-folder/new.md", "notes/link.md"]:
        resp = h.write("mnote.page.create", args={"path": path, "content": "x"})
        assert resp["ok"] is False, path
    assert sorted(p.name for p in outside.iterdir()) == ["target.md"]
    assert (outside / "target.md").read_text() == "# target outside\n"


def test_nfc_nfd_twins_are_one_name_each(h: Harness) -> None:
    nfc = unicodedata.normalize("NFC", "notes/café.md")
    nfd = unicodedata.normalize("NFD", "notes/café.md")
    first = h.write("mnote.page.create", args={"path": nfc, "content": "one"})
    assert first["ok"], first["error"]
    second = h.write("mnote.page.create", args={"path": nfd, "content": "two"})
    if second["ok"]:  # a distinct name on this filesystem: both pages exist, neither overwritten
        assert (h.root / nfc).read_text() == "one\n"
        assert (h.root / nfd).read_text() == "two\n"
    else:
        assert (h.root / nfc).read_text() == "one\n"
