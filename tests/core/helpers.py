"""Helpers shared by the core tests."""

from __future__ import annotations

from typing import Any

from mnoted.core.page import Page, parse_page


def shape(page: Page) -> list[tuple[Any, ...]]:
    """The parse structure of a page (types, spans, text), ids left out."""
    return [
        (b.type, b.start, b.head_end, b.end, b.text, sorted(b.props.items())) for b in page.walk()
    ]


def assert_consistent(page: Page) -> None:
    """A page a command returned parses the same when its bytes are parsed afresh."""
    fresh = parse_page(page.to_bytes(), page.name)
    assert shape(fresh) == shape(page)
    ids = page.block_ids()
    assert len(ids) == len(set(ids)), "block ids must be unique"
    assert ids == [b.id for b in page.walk()], "the id index must follow document order"
    assert all(page.block(b.id) is b for b in page.walk())
