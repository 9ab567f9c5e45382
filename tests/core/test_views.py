"""Context views: scopes, formats, budgets and allowedTargetBlockIds."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from mnoted.core.page import parse_page
from mnoted.core.views import build_context
from mnoted.errors import BlockNotFound, InvalidArguments

SRC = """---
title: Plan
---
# Goals

Ship the <beta> & more.

- one
  - nested
- two

## Risks

Budget risk is high.
"""


@pytest.fixture
def page():
    return parse_page(SRC, "plan.md")


def ctx(page, **kw):
    return build_context(page, document_id="doc_1", revision="abc123", **kw)


def test_full_markdown_view(page) -> None:
    out = ctx(page)
    assert out["schema"] == "mnote.page_ai_context.v1"
    assert out["markdown"].startswith("# Goals")
    assert out["allowedTargetBlockIds"] == page.block_ids()
    assert out["conflictDetectionKey"].startswith("body:abc123:")
    assert out["truncated"] is False and out["continuation"] is None
    assert all(b["revisionRef"] == f"body:abc123:{b['blockId']}" for b in out["blocks"])


def test_outline_scope_is_headings_only(page) -> None:
    out = ctx(page, scope="outline", fmt="text")
    assert out["pageText"] == "Goals\n\nRisks"
    assert {b["type"] for b in out["blocks"]} == {"heading"}


def test_selection_scope_and_allowed_targets(page) -> None:
    lst = next(b for b in page.walk() if b.type == "list")
    out = ctx(page, scope="selection", block_ids=[lst.id], fmt="json")
    assert out["selectedBlockIds"] == [lst.id]
    assert out["allowedTargetBlockIds"] == [b.id for b in lst.walk()]
    assert all(b["editable"] for b in out["blocks"])


def test_keyword_scope_has_heading_path(page) -> None:
    out = ctx(page, scope="keyword", query="budget")
    assert [b["text"] for b in out["blocks"]] == ["Budget risk is high."]
    assert out["blocks"][0]["headingPath"] == ["Goals", "Risks"]


def test_page_xml_is_well_formed_and_escaped(page) -> None:
    out = ctx(page, fmt="page_xml")
    root = ET.fromstring(out["pageXml"])
    assert root.attrib == {"id": "doc_1", "revision": "abc123", "title": "Plan"}
    texts = [el.text for el in root.iter("block")]
    assert "Ship the <beta> & more." in texts


def test_budget_truncates_at_block_boundaries_with_continuation(page) -> None:
    first = ctx(page, budget=30)
    assert first["truncated"] is True
    seen = list(first["blocks"])
    cursor = first["continuation"]["cursor"]
    while cursor:
        nxt = ctx(page, budget=30, cursor=cursor)
        seen += nxt["blocks"]
        cursor = nxt["continuation"]["cursor"] if nxt["truncated"] else None
    assert [b["blockId"] for b in seen] == page.block_ids()


def test_bad_view_arguments(page) -> None:
    with pytest.raises(InvalidArguments):
        ctx(page, scope="everything")
    with pytest.raises(InvalidArguments):
        ctx(page, fmt="html")
    with pytest.raises(InvalidArguments):
        ctx(page, scope="selection")
    with pytest.raises(BlockNotFound):
        ctx(page, scope="block", block_ids=["missing"])
    with pytest.raises(InvalidArguments):
        ctx(page, cursor="garbage")
