"""Parsed pages and their ids, cached by a daemon that serves several workspaces."""

from __future__ import annotations

from pathlib import Path

from mnoted.service import Service
from tests.service.conftest import Harness
from tests.service.memory import MemoryHarness

FIRST = "# Notes\n\nThe first draft of a paragraph.\n"
SECOND = "# Notes\n\nThe second draft of a paragraph, rewritten.\n"


def ids(h: Harness, rel: str) -> list[str]:
    page = h.call("mnote.page.get", documentId=h.doc(rel))["result"]
    return [b["id"] for b in page["blocks"]]


def test_a_workspace_never_gets_another_workspaces_ids_for_the_same_text(tmp_path: Path) -> None:
    """Two workspaces of one daemon hold the same text at the same path, reached by other
    histories: each gets the ids its own history gave, the same before and after a restart."""
    a, b = MemoryHarness(tmp_path / "a"), MemoryHarness(tmp_path / "b")
    b.service = Service(pages=a.service.pages)  # one daemon: its services share the cache
    b.service.add(b.ws)
    try:
        a.write_file("notes/p.md", FIRST)
        carried = ids(a, "notes/p.md")
        a.write_file("notes/p.md", SECOND)
        assert ids(a, "notes/p.md") == carried  # the paragraph kept its id
        b.write_file("notes/p.md", SECOND)  # the same blob, without the first draft
        fresh = ids(b, "notes/p.md")
        assert fresh != carried
        b.reopen()
        assert ids(b, "notes/p.md") == fresh
    finally:
        a.ws.close()
        b.ws.close()
