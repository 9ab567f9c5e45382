"""Frontmatter: found, parsed safely, edited one key's lines at a time."""

from __future__ import annotations

import pytest

from mnoted.core import frontmatter as fm
from mnoted.core.page import parse_page
from mnoted.errors import InvalidFrontmatter


def test_found_only_at_the_very_top() -> None:
    assert fm.find(["---", "a: 1", "---"]) is not None
    assert fm.find(["", "---", "a: 1", "---"]) is None
    assert fm.find(["---", "a: 1"]) is None  # never closed: not frontmatter
    assert fm.find(["---", "a: 1", "..."]) is not None


def test_dates_stay_strings_and_ids_are_read() -> None:
    found = fm.find(["---", "created: 2024-01-02", "id: 42", "---"])
    assert found is not None
    assert found.data == {"created": "2024-01-02", "id": 42}
    assert fm.document_id(b"---\nid: 42\n---\n") == "42"
    assert fm.document_id(b"\xef\xbb\xbf---\r\nid: abc\r\n---\r\nbody") == "abc"
    assert fm.document_id(b"no frontmatter") is None
    assert fm.document_id(b"---\nid: [1, 2]\n---\n") is None


@pytest.mark.parametrize(
    "raw,error",
    [("a: [1", "invalid YAML"), ("- a\n- b", "not a mapping"), ("just text", "not a mapping")],
)
def test_invalid_frontmatter_is_reported_not_raised(raw: str, error: str) -> None:
    found = fm.find(["---", *raw.split("\n"), "---"])
    assert found is not None and not found.valid
    assert error in (found.error or "")


def test_edit_keeps_comments_order_and_other_keys() -> None:
    lines = [
        "---",
        "title: Hi # c",
        "tags:",
        "  - a",
        "  - b",
        "# comment",
        "wideLayout: false",
        "---",
        "body",
    ]
    start, end, new = fm.edit_keys(lines, {"wideLayout": True, "showToc": True, "tags": fm.DELETE})
    assert (start, end) == (0, 8)
    assert new == ["---", "title: Hi # c", "# comment", "wideLayout: true", "showToc: true", "---"]


def test_edit_creates_minimal_frontmatter() -> None:
    assert fm.edit_keys(["body"], {"title": "x: y"}) == (0, 0, ["---", "title: 'x: y'", "---"])


def test_edit_refuses_what_it_cannot_edit_line_by_line() -> None:
    with pytest.raises(InvalidFrontmatter):
        fm.edit_keys(["---", "a: [1", "---"], {"a": 2})
    with pytest.raises(InvalidFrontmatter):
        fm.edit_keys(["---", "{a: 1, wideLayout: false}", "---"], {"wideLayout": True})


def test_title_falls_back_from_frontmatter_to_heading_to_name() -> None:
    assert parse_page("---\ntitle: FM\n---\n# H1\n", "a/b.md").title == "FM"
    assert parse_page("## H2\n\n# H1\n", "a/b.md").title == "H1"
    assert parse_page("text\n", "a/Stem name.md").title == "Stem name"
    page = parse_page('---\nwideLayout: true\nshowToc: "true"\n---\n')
    assert page.options == {
        "wideLayout": True,
        "smallText": False,
        "showToc": False,
        "protectEditing": False,
    }
