"""Properties over generated Markdown and generated command sequences."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnoted.core import commands as C
from mnoted.core.markdown_edit import markdown_edit
from mnoted.core.page import parse_page
from mnoted.core.source import Source
from mnoted.errors import EditMismatch, InvalidTreeOperation, MnoteError
from tests.core.helpers import assert_consistent

SETTINGS = settings(suppress_health_check=[HealthCheck.too_slow])

words = (
    st.lists(
        st.sampled_from(["a", "b", "xyz", " ", "[[link]]", "#tag", "**b**", "`c`", "é", "中"]),
        min_size=1,
        max_size=8,
    )
    .map("".join)
    .map(lambda s: s.strip() or "w")
)

line_kinds = st.one_of(
    words,
    words.map(lambda w: f"# {w}"),
    words.map(lambda w: f"### {w}"),
    words.map(lambda w: f"- {w}"),
    words.map(lambda w: f"  - {w}"),
    words.map(lambda w: f"1. {w}"),
    words.map(lambda w: f"- [ ] {w}"),
    words.map(lambda w: f"> {w}"),
    words.map(lambda w: f"> [!note] {w}"),
    st.just("```py"),
    st.just("```"),
    st.just("$$"),
    st.just("---"),
    st.just("| a | b |"),
    st.just("|---|---|"),
    st.just("<div>"),
    st.just("    indented code"),
    words.map(lambda w: f"{w} ^anc-{len(w)}"),
    st.just("[ref]: /url"),
    st.just(""),
    st.just(""),
    st.just(" \t"),
)


@st.composite
def documents(draw: Any) -> bytes:
    lines = draw(st.lists(line_kinds, max_size=30))
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    text = newline.join(lines)
    if draw(st.booleans()):
        text += newline
    if draw(st.booleans()):
        text = f"---{newline}title: T{newline}---{newline}" + text
    data = text.encode("utf-8")
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    return data


@SETTINGS
@given(documents())
def test_generated_markdown_round_trips(data: bytes) -> None:
    page = parse_page(data)
    assert page.to_bytes() == data
    ids = page.block_ids()
    assert len(ids) == len(set(ids))


@SETTINGS
@given(st.binary(max_size=400))
def test_arbitrary_bytes_round_trip(data: bytes) -> None:
    assert parse_page(data).to_bytes() == data


specs = st.one_of(
    words.map(lambda w: {"type": "paragraph", "text": w}),
    words.map(lambda w: {"type": "heading", "text": w, "props": {"level": 2}}),
    words.map(lambda w: {"type": "list_item", "text": w}),
    words.map(lambda w: {"type": "task_item", "text": w, "props": {"checked": True}}),
    words.map(lambda w: {"type": "code", "text": w, "props": {"language": "py"}}),
    words.map(lambda w: {"type": "quote", "text": w}),
)


@st.composite
def operation(draw: Any, page: Any) -> tuple[str, dict[str, Any]]:
    ids = page.block_ids()
    name = draw(st.sampled_from([*C.BLOCK_COMMANDS, "markdown_edit"]))
    pick = st.sampled_from(ids) if ids else st.just("missing")
    args: dict[str, Any] = {"block_id": draw(pick)}
    if name == "insert_block_after":
        args = {"after_block_id": draw(st.one_of(st.none(), pick)), "block": draw(specs)}
    elif name == "replace_block":
        args["block"] = draw(specs)
    elif name == "move_block":
        args["target_parent_id"] = draw(st.one_of(st.none(), pick))
        args["after_block_id"] = draw(st.one_of(st.none(), pick))
    elif name == "set_block_type":
        args["block_type"] = draw(
            st.sampled_from(
                ["paragraph", "heading", "code", "quote", "list_item", "task_item", "list"]
            )
        )
        args["props"] = draw(
            st.sampled_from([{}, {"level": 1}, {"ordered": True}, {"checked": True}])
        )
    elif name == "markdown_edit":
        text = page.source.normalized
        if not text:
            args = {"edits": [{"search": "x", "replace": "y"}]}
        else:
            a = draw(st.integers(0, len(text) - 1))
            b = draw(st.integers(a + 1, min(len(text), a + 12)))
            args = {"edits": [{"search": text[a:b], "replace": draw(words)}]}
    return name, args


@SETTINGS
@given(st.data(), documents())
def test_command_sequences_keep_a_valid_tree_and_untouched_blocks(data: Any, doc: bytes) -> None:
    page = parse_page(doc, "gen.md")
    for _ in range(6):
        name, args = data.draw(operation(page))
        try:
            if name == "markdown_edit":
                result = markdown_edit(page, args["edits"])
            else:
                result = C.apply_block_command(page, name, args)
        except (InvalidTreeOperation, EditMismatch, MnoteError):
            continue  # refused: the page is a value, nothing can have changed
        new = result.page
        assert_consistent(new)
        changed = set(result.changed_block_ids)
        for block in page.walk():
            if block.id in changed or not new.has_block(block.id):
                continue
            if any(d.id in changed for d in block.walk()) and block.type in (
                "list",
                "quote",
                "callout",
                "list_item",
                "task_item",
            ):
                continue
            assert new.block(block.id).signature() == block.signature(), (name, block.id)
        # The bytes of blocks nobody touched are the same.
        old_lines = page.source.lines
        for block in page.blocks:
            if not new.has_block(block.id):
                continue
            nb = new.block(block.id)
            if not any(d.id in changed for d in [*block.walk(), *nb.walk()]):
                assert new.source.lines[nb.start : nb.end] == old_lines[block.start : block.end]
        page = new


@given(
    st.lists(st.sampled_from(["", "a", "- b", "# c"]), max_size=8),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.booleans(),
    st.lists(st.sampled_from(["", "x", "> y"]), max_size=3),
    st.data(),
)
def test_a_splice_keeps_the_count_of_newlines(
    lines: list[str], nl: str, final: bool, new: list[str], data: Any
) -> None:
    source = Source.from_data(nl.join(lines) + (nl if final else ""))
    start = data.draw(st.integers(0, len(source)))
    end = data.draw(st.integers(start, len(source)))
    assert source.newlines == source.normalized.count("\n")  # computed, then carried
    out = source.replace_lines(start, end, new)
    assert out.newlines == out.normalized.count("\n")
