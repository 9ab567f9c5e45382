"""markdown_edit: exact-once search/replace, all or nothing, scoped to blocks."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnoted.core.diffs import unified_diff
from mnoted.core.markdown_edit import markdown_edit
from mnoted.core.page import parse_page
from mnoted.core.source import Source
from mnoted.errors import EditMismatch, InvalidArguments, TargetOutOfScope
from tests.core.helpers import assert_consistent

SRC = (
    b"# Plan\r\n\r\nShip it on Monday.\r\n\r\n- task one\r\n- task two\r\n\r\n"
    b"Notes [[Other page]] #tag\r\n"
)


def test_applies_in_order_and_keeps_crlf() -> None:
    page = parse_page(SRC)
    para = page.blocks[1].id
    r = markdown_edit(
        page,
        [{"search": "Monday", "replace": "Tuesday"}, {"search": "Tuesday.", "replace": "Tuesday!"}],
    )
    assert r.page.to_bytes() == SRC.replace(b"Monday.", b"Tuesday!")
    assert r.changed_block_ids == [para]
    assert r.page.blocks[1].id == para


def test_multiline_search_matches_across_crlf() -> None:
    page = parse_page(SRC)
    r = markdown_edit(
        page,
        [{"search": "- task one\n- task two", "replace": "- task one\n- task 1.5\n- task two"}],
    )
    assert r.page.to_bytes() == SRC.replace(b"- task two", b"- task 1.5\r\n- task two")
    before = set(page.block_ids())
    assert before <= set(r.page.block_ids())


def test_zero_or_many_matches_are_refused_with_where() -> None:
    page = parse_page(SRC)
    with pytest.raises(EditMismatch) as none:
        markdown_edit(page, [{"search": "Friday", "replace": "x"}])
    assert none.value.details["matches"] == 0
    with pytest.raises(EditMismatch) as many:
        markdown_edit(page, [{"search": "task", "replace": "x"}])
    assert many.value.details["matches"] == 2
    assert many.value.details["lines"] == [5, 6]
    assert "2 times" in many.value.message


def test_all_or_nothing() -> None:
    page = parse_page(SRC)
    with pytest.raises(EditMismatch):
        markdown_edit(
            page,
            [{"search": "Monday", "replace": "Tuesday"}, {"search": "nowhere", "replace": "x"}],
        )
    assert page.to_bytes() == SRC


def test_allowed_block_ids_scope_edits() -> None:
    page = parse_page(SRC)
    para = page.blocks[1].id
    r = markdown_edit(page, [{"search": "Ship", "replace": "Send"}], allowed_block_ids=[para])
    assert b"Send it" in r.page.to_bytes()
    with pytest.raises(TargetOutOfScope):
        markdown_edit(page, [{"search": "task one", "replace": "x"}], allowed_block_ids=[para])


def test_obsidian_syntax_survives() -> None:
    page = parse_page(SRC)
    r = markdown_edit(page, [{"search": "Monday.", "replace": "[[Monday]]. ^anchor"}])
    assert b"Notes [[Other page]] #tag\r\n" in r.page.to_bytes()
    assert r.page.blocks[1].id == "anchor"


@pytest.mark.parametrize(
    "edits",
    [[], "x", [{"search": "", "replace": "x"}], [{"search": 1, "replace": "x"}], [3]],
)
def test_bad_arguments(edits) -> None:
    with pytest.raises(InvalidArguments):
        markdown_edit(parse_page(SRC), edits)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(["a", "b", "c", "", "- x", "# h", "> q", "```"]), min_size=1, max_size=8
    ),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.booleans(),
    st.data(),
)
def test_result_is_the_text_replacement(
    lines: list[str], nl: str, final: bool, data: st.DataObject
) -> None:
    """Any search/replace, the page's end included (with or without its final newline,
    which a replacement may take or give)."""
    src = nl.join(lines) + (nl if final else "")
    page = parse_page(src.encode())
    text = page.source.normalized
    if not text:
        return
    if data.draw(st.booleans()):
        assert page.source.newlines == text.count("\n")  # (then kept through the splice)
    a = data.draw(st.integers(0, len(text) - 1))
    b = data.draw(st.one_of(st.just(len(text)), st.integers(a + 1, len(text))))
    replace = data.draw(st.sampled_from(["", "X", "\n", "Y\nZ", "- new item", "X\n", "\n\n"]))
    try:
        result = markdown_edit(page, [{"search": text[a:b], "replace": replace}])
    except EditMismatch:
        return
    assert result.page.source.normalized == text[:a] + replace + text[b:]
    # the edit hands its spliced text to the new source: it must be what the lines join to
    done = result.page.source
    joined = Source(done.lines, done.ends, done.bom)
    assert done.normalized == joined.normalized
    assert done.text == joined.text
    assert done.newlines == joined.newlines == joined.normalized.count("\n")
    assert_consistent(result.page)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(["a", "b", "c", "", "- x", "# h", "> q"]), min_size=1, max_size=12),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
    st.data(),
)
def test_the_lines_an_edit_left_alone_are_what_its_diff_skips(
    lines: list[str], nl: str, final: bool, data: st.DataObject
) -> None:
    page = parse_page((nl.join(lines) + (nl if final else "")).encode())
    text = page.source.normalized
    edits = []
    for _ in range(data.draw(st.integers(1, 3))):
        if not text:
            break
        a = data.draw(st.integers(0, len(text) - 1))
        b = data.draw(st.integers(a + 1, len(text)))
        replace = data.draw(st.sampled_from(["", "X", "\n", "Y\nZ", "- new item", "a"]))
        edits.append({"search": text[a:b], "replace": replace})
        text = text[:a] + replace + text[b:]
    if not edits:
        return
    try:
        result = markdown_edit(page, edits)
    except EditMismatch:
        return
    old, new = page.source, result.page.source
    head, tail = result.same_ends
    assert (old.lines[:head], old.ends[:head]) == (new.lines[:head], new.ends[:head])
    assert tail <= min(len(old), len(new)) - head
    assert (old.lines[len(old) - tail :], old.ends[len(old) - tail :]) == (
        new.lines[len(new) - tail :],
        new.ends[len(new) - tail :],
    )
    assert result.diff == unified_diff(page, result.page)  # as found with no hint


def test_a_code_fence_that_loses_its_closing_line_is_reported_changed() -> None:
    # Found by the command-sequence property test: the fence's text (empty) and props
    # stay the same, but it is one line now; its id must be among the changed blocks.
    page = parse_page(b"[[link]]\n\n```\n```", "gen.md")
    code = page.blocks[1]
    result = markdown_edit(page, [{"search": "[[link]]\n\n", "replace": "a"}])
    assert result.page.to_bytes() == b"a```\n```"
    assert code.id in result.changed_block_ids


@pytest.mark.parametrize(
    ("doc", "search", "replace", "after"),
    [
        # Found by the command-sequence property test: the quote's paragraph reads "xyz"
        # either way, but its line changed; its id must be among the changed blocks.
        (b"---\ntitle: T\n---\n> xyz", " xyz", "xyz", b"---\ntitle: T\n---\n>xyz"),
        (b"> a\n> xyz\n\nrest\n", "> xyz", ">  xyz", b"> a\n>  xyz\n\nrest\n"),
        (b"- one\n-  two\n", "-  two", "- two", b"- one\n- two\n"),
    ],
)
def test_a_block_whose_markup_alone_changed_is_reported_changed(
    doc: bytes, search: str, replace: str, after: bytes
) -> None:
    page = parse_page(doc, "gen.md")
    result = markdown_edit(page, [{"search": search, "replace": replace}])
    assert result.page.to_bytes() == after
    assert result.changed_block_ids  # something changed, and the answer says where
    unchanged = [b for b in page.walk() if b.id not in result.changed_block_ids]
    for block in unchanged:  # every block not reported keeps its bytes, or holds one that is
        new = result.page.block(block.id)
        if new.type in ("list", "quote", "list_item", "task_item", "callout"):
            continue
        assert (
            result.page.source.lines[new.start : new.end]
            == page.source.lines[block.start : block.end]
        )


_pieces = st.sampled_from(
    ["a", "b", " ", "\n", "\n\n", "# h", "- i", "é", "中", "😀", "\udc80", "\r\n", "\r", "\ufeff"]
)


def _as_text(page_source: Source) -> Source:
    """The same source, made to take the search through its text (as a page with a BOM or
    CR line endings does)."""
    out = Source(page_source.lines, page_source.ends, page_source.bom)
    out.__dict__["lf_bytes"] = None
    return out


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.lists(_pieces, max_size=40).map("".join),
    raw_tail=st.sampled_from([b"", b"\xff", b"\xc3", b"\xed\xa0\x80"]),
    data=st.data(),
)
def test_a_search_in_the_bytes_is_the_search_in_the_text(
    body: str, raw_tail: bytes, data: st.DataObject
) -> None:
    """A page whose bytes are its LF text is searched and spliced as bytes: the same
    matches, the same lines, the same bytes written as the search in the text, for any
    search (emoji, invalid bytes carried as surrogates, lone surrogates, a BOM)."""
    raw = body.encode("utf-8", "surrogateescape") + raw_tail
    page = parse_page(raw, "p.md")
    text = page.source.normalized
    if text and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(text) - 1))
        search = text[i : data.draw(st.integers(i + 1, min(len(text), i + 12)))]
    else:
        search = data.draw(st.lists(_pieces, min_size=1, max_size=3).map("".join))
    replace = data.draw(st.lists(_pieces, max_size=3).map("".join))
    edits = [{"search": search, "replace": replace}]
    through_text = parse_page(_as_text(page.source), "p.md")

    def outcome(p: object) -> object:
        try:
            result = markdown_edit(p, edits)  # type: ignore[arg-type]
        except (EditMismatch, InvalidArguments) as exc:
            return type(exc), str(exc), exc.details
        new = result.page.source
        return new.to_bytes(), new.lines, new.ends, result.changed_block_ids

    assert outcome(page) == outcome(through_text)
    if page.source.lf_bytes is not None:
        assert page.source.lf_bytes == raw


def test_an_edit_that_takes_the_final_newline_reparses_only_its_own_lines() -> None:
    """A search running to the end of the page, its final newline included, is spliced as
    any other: the blocks before it are the page's own (it rebuilt the page from its whole
    text, diffing every line: minutes for a 1 MB page of many blank lines)."""
    text = "".join(f"Paragraph {n}.\n\n" for n in range(2000)) + "The last line.\n"
    page = parse_page(text.encode())
    result = markdown_edit(page, [{"search": "The last line.\n", "replace": "The end."}])
    assert result.page.to_bytes() == text.replace("The last line.\n", "The end.").encode()
    first = page.blocks[0]
    assert result.page.block(first.id) is first
    assert result.same_ends[0] == len(page.source) - 1
    assert_consistent(result.page)
