"""Backlinks and a move's link updates read and parse each linking page once."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from mnoted.core import links as core_links
from mnoted.service import link_tools, pages
from tests.service.conftest import Harness

pytestmark = pytest.mark.twin

LINKER = """# Linker

See [[Target]] first.

- then [[Target#Part]]
- and [the file](Target.md)

Unrelated [[Elsewhere]].
"""


@pytest.fixture
def counted(h: Harness, monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], Counter[str]]:
    """(texts scanned for links, pages parsed), each by its path or text."""
    scanned: Counter[str] = Counter()
    parsed: Counter[str] = Counter()
    real_links, real_page = core_links.parse_links, pages.parse_page

    def scan(text: str) -> list[core_links.Link]:
        scanned[text] += 1
        return real_links(text)

    def parse(data: Any, name: str, **kw: Any) -> Any:
        parsed[name] += 1
        return real_page(data, name, **kw)

    h.write_file("Target.md", "# Target\n\n## Part\n\nText.\n")
    h.write_file("Linker.md", LINKER)
    h.write_file("Elsewhere.md", "# Elsewhere\n")
    monkeypatch.setattr(link_tools, "parse_links", scan)
    monkeypatch.setattr(pages, "parse_page", parse)
    return scanned, parsed


def test_backlinks_parse_each_linking_page_once(
    h: Harness, counted: tuple[Counter[str], Counter[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    scanned, parsed = counted
    reads: Counter[str] = Counter()
    linker_blob = h.ws.blob_id("Linker.md")
    for name in ("read_blob", "read_head"):
        real = getattr(h.ws, name)

        def read(key: str, real: Any = real) -> Any:
            data = real(key)
            reads["Linker.md"] += key in ("Linker.md", linker_blob)
            return data

        monkeypatch.setattr(h.ws, name, read)
    out = h.call("mnote.page.links", documentId="Target.md", args={"direction": "backlinks"})
    assert out["ok"], out
    back = out["result"]["backlinks"]
    assert [b["raw"] for b in back] == ["[[Target]]", "[[Target#Part]]", "[the file](Target.md)"]
    assert scanned[LINKER] == 1 and parsed["Linker.md"] <= 1, (scanned, parsed)
    assert reads["Linker.md"] == 1, reads
    got = h.call("mnote.page.get", documentId="Linker.md")["result"]["blocks"]
    ids = {b["id"] for b in got} | {c["id"] for b in got for c in b.get("children", [])}
    assert all(b["blockId"] in ids for b in back), (back, got)


def test_a_move_scans_each_linking_page_once(
    h: Harness, counted: tuple[Counter[str], Counter[str]]
) -> None:
    scanned, _ = counted
    out = h.write("mnote.page.move", documentId="Target.md", args={"newPath": "moved/Target.md"})
    assert out["ok"], out
    assert scanned[LINKER] == 1, scanned
    text = (h.root / "Linker.md").read_text()
    assert "[[Target]]" in text and "(moved/Target.md)" in text
