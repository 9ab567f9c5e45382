"""The eight block commands and the page commands, byte for byte."""

from __future__ import annotations

import contextlib

import pytest

from mnoted.core import commands as C
from mnoted.core import page_edits as P
from mnoted.core.names import BLOCK_FIELDS, block_command_signature
from mnoted.core.page import parse_page
from mnoted.errors import BlockNotFound, InvalidArguments, InvalidTreeOperation, UnsupportedOption
from tests.core.helpers import assert_consistent

DOC = (
    b"# Title\r\n\r\nPara one\r\n\r\n- a\r\n- b\r\n  - c\r\n- d\r\n\r\n"
    b"> quote\r\n\r\n1. one\r\n2. two\r\n\r\nend"
)


@pytest.fixture
def page():
    return parse_page(DOC, "notes/x.md")


def ids(page) -> dict[str, str]:
    out = {}
    for b in page.walk():
        out.setdefault(f"{b.type}:{b.text.splitlines()[0] if b.text else ''}", b.id)
    return out


def check(result, expected: bytes) -> None:
    assert result.page.to_bytes() == expected
    assert_consistent(result.page)
    untouched = set(result.before.block_ids()) - set(result.changed_block_ids)
    assert untouched <= set(result.page.block_ids())


def test_insert_at_start_of_page(page) -> None:
    r = C.insert_block_after(page, {"type": "paragraph", "text": "new"})
    check(r, b"new\r\n\r\n" + DOC)
    assert r.details["insertedBlockId"] == r.page.blocks[0].id
    assert r.changed_block_ids == [r.details["insertedBlockId"]]


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (b"---\ntitle: T\n---\n\n# H\n", b"---\ntitle: T\n---\n\nnew\n\n# H\n"),
        (b"---\ntitle: T\n---\n# H\n", b"---\ntitle: T\n---\nnew\n\n# H\n"),
        (b"\n\n# H\n", b"\n\nnew\n\n# H\n"),
        (b"---\ntitle: T\n---\n", b"---\ntitle: T\n---\nnew\n"),
    ],
)
def test_insert_at_start_keeps_the_blank_line_after_the_frontmatter(
    doc: bytes, expected: bytes
) -> None:
    # (it went between the frontmatter and the blank line that parted it from the page)
    r = C.insert_block_after(parse_page(doc, "x.md"), {"type": "paragraph", "text": "new"})
    check(r, expected)
    assert r.page.blocks[0].id == r.details["insertedBlockId"]


def test_a_block_moved_to_the_start_goes_after_the_blank_line_below_the_frontmatter() -> None:
    page = parse_page(b"---\ntitle: T\n---\n\n# H\n\nlast\n", "x.md")
    last = page.blocks[-1].id
    r = C.move_block(page, last)
    check(r, b"---\ntitle: T\n---\n\nlast\n\n# H\n")
    assert r.page.blocks[0].id == last


def test_insert_after_paragraph_uses_the_files_line_ending(page) -> None:
    para = ids(page)["paragraph:Para one"]
    r = C.insert_block_after(page, {"type": "heading", "text": "Sub", "props": {"level": 2}}, para)
    check(r, DOC.replace(b"Para one\r\n\r\n", b"Para one\r\n\r\n## Sub\r\n\r\n"))


def test_insert_into_tight_list_keeps_it_tight(page) -> None:
    b = ids(page)["list_item:b"]
    r = C.insert_block_after(page, {"type": "list_item", "text": "b2"}, b)
    check(r, DOC.replace(b"  - c\r\n", b"  - c\r\n- b2\r\n"))
    new = r.page.block(r.details["insertedBlockId"])
    assert new.type == "list_item" and new.text == "b2"


def test_insert_into_ordered_list_numbers_the_item(page) -> None:
    one = ids(page)["list_item:one"]
    r = C.insert_block_after(page, {"type": "paragraph", "text": "one and a half"}, one)
    check(r, DOC.replace(b"1. one\r\n", b"1. one\r\n2. one and a half\r\n"))


def test_insert_non_item_into_list_is_refused(page) -> None:
    with pytest.raises(InvalidTreeOperation):
        C.insert_block_after(page, {"type": "code", "text": "x"}, ids(page)["list_item:a"])


def test_insert_after_missing_block(page) -> None:
    with pytest.raises(BlockNotFound):
        C.insert_block_after(page, {"type": "paragraph", "text": "x"}, "nope")


def test_replace_keeps_id_and_children(page) -> None:
    b = ids(page)["list_item:b"]
    r = C.replace_block(page, b, {"type": "task_item", "text": "B!", "props": {"checked": True}})
    check(r, DOC.replace(b"- b\r\n", b"- [x] B!\r\n"))
    assert r.page.block(b).type == "task_item"
    assert r.changed_block_ids == [b]


def test_replace_with_children_replaces_subtree(page) -> None:
    b = ids(page)["list_item:b"]
    c = ids(page)["list_item:c"]
    r = C.replace_block(page, b, {"type": "list_item", "text": "B", "children": []})
    check(r, DOC.replace(b"- b\r\n  - c\r\n", b"- B\r\n"))
    assert c in r.changed_block_ids


def test_replace_adds_a_blank_line_only_when_needed() -> None:
    page = parse_page("| a |\n|---|\n| 1 |\n# H\n\ntext\n")
    head = page.blocks[1].id
    r = C.replace_block(page, head, {"type": "paragraph", "text": "not a row"})
    assert r.page.to_bytes() == b"| a |\n|---|\n| 1 |\n\nnot a row\n\ntext\n"
    assert r.page.block(head).type == "paragraph"


def test_replace_keeps_obsidian_anchor() -> None:
    page = parse_page("First ^keep-me\n\nSecond\n")
    assert page.blocks[0].id == "keep-me"
    r = C.replace_block(page, "keep-me", {"type": "paragraph", "text": "Changed"})
    assert r.page.to_bytes() == b"Changed ^keep-me\n\nSecond\n"
    assert r.page.blocks[0].id == "keep-me"


def test_delete_block_and_separator(page) -> None:
    r = C.delete_block(page, ids(page)["paragraph:Para one"])
    check(r, DOC.replace(b"Para one\r\n\r\n", b""))


def test_delete_last_block_keeps_missing_final_newline(page) -> None:
    r = C.delete_block(page, ids(page)["paragraph:end"])
    check(r, DOC[: -len(b"\r\n\r\nend")])


def test_delete_only_item_removes_its_list(page) -> None:
    c = ids(page)["list_item:c"]
    r = C.delete_block(page, c)
    check(r, DOC.replace(b"  - c\r\n", b""))
    assert r.details["deletedBlockId"] == c


def test_delete_never_merges_neighbours() -> None:
    page = parse_page("A\n# H\nB\n")
    r = C.delete_block(page, page.blocks[1].id)
    assert [b.text for b in r.page.blocks] == ["A", "B"]
    assert r.page.to_bytes() == b"A\n\nB\n"


def test_move_within_list(page) -> None:
    d = ids(page)["list_item:d"]
    r = C.move_block(page, d, after_block_id=ids(page)["list_item:a"])
    check(r, DOC.replace(b"- a\r\n- b\r\n  - c\r\n- d\r\n", b"- a\r\n- d\r\n- b\r\n  - c\r\n"))
    assert r.page.block(d).start == 5


def test_move_into_quote_and_to_top(page) -> None:
    quote = next(b.id for b in page.walk() if b.type == "quote")
    para = ids(page)["paragraph:Para one"]
    r = C.move_block(page, para, target_parent_id=quote)
    check(
        r, DOC.replace(b"Para one\r\n\r\n", b"").replace(b"> quote", b"> Para one\r\n>\r\n> quote")
    )
    r2 = C.move_block(r.page, para)
    assert r2.page.blocks[0].id == para
    assert_consistent(r2.page)


def test_move_item_to_top_level_becomes_its_own_list(page) -> None:
    c = ids(page)["list_item:c"]
    r = C.move_block(page, c, after_block_id=ids(page)["paragraph:end"])
    assert r.page.to_bytes().endswith(b"end\r\n\r\n- c")
    assert r.page.block(c).type == "list_item"
    assert_consistent(r.page)


def test_move_refuses_cycles_and_bad_targets(page) -> None:
    b = ids(page)["list_item:b"]
    c = ids(page)["list_item:c"]
    with pytest.raises(InvalidTreeOperation):
        C.move_block(page, b, target_parent_id=c)
    with pytest.raises(InvalidTreeOperation):
        C.move_block(page, b, target_parent_id=b)
    with pytest.raises(InvalidTreeOperation):
        C.move_block(page, b, target_parent_id=ids(page)["paragraph:Para one"])
    with pytest.raises(InvalidTreeOperation):
        C.move_block(page, ids(page)["paragraph:Para one"], target_parent_id=ids(page)["list:- a"])


def test_indent_and_outdent(page) -> None:
    d = ids(page)["list_item:d"]
    r = C.indent_block(page, d)
    check(r, DOC.replace(b"- d\r\n", b"  - d\r\n"))
    r2 = C.outdent_block(r.page, d)
    assert r2.page.to_bytes() == DOC
    assert r2.page.block(d).type == "list_item"


def test_indent_creates_nested_list(page) -> None:
    b = ids(page)["list_item:b"]
    r = C.indent_block(page, b)
    check(r, DOC.replace(b"- b\r\n  - c\r\n", b"  - b\r\n    - c\r\n"))


def test_indent_first_item_and_outdent_top_are_refused(page) -> None:
    with pytest.raises(InvalidTreeOperation, match="first"):
        C.indent_block(page, ids(page)["list_item:a"])
    with pytest.raises(InvalidTreeOperation, match="top"):
        C.outdent_block(page, ids(page)["paragraph:Para one"])
    with pytest.raises(InvalidTreeOperation):
        C.outdent_block(page, ids(page)["list_item:a"])


def test_set_block_type(page) -> None:
    para = ids(page)["paragraph:Para one"]
    r = C.set_block_type(page, para, "heading", {"level": 3})
    check(r, DOC.replace(b"Para one", b"### Para one"))
    r2 = C.set_block_type(page, para, "code", {"language": "py"})
    check(r2, DOC.replace(b"Para one", b"```py\r\nPara one\r\n```"))
    with pytest.raises(InvalidTreeOperation):
        C.set_block_type(page, ids(page)["list:- a"], "heading")


def test_set_list_ordered(page) -> None:
    lst = ids(page)["list:- a"]
    r = C.set_block_type(page, lst, "list", {"ordered": True})
    check(r, DOC.replace(b"- a\r\n- b\r\n  - c\r\n- d", b"1. a\r\n2. b\r\n   - c\r\n3. d"))
    assert set(page.block_ids()) == set(r.page.block_ids())


def test_toggle_heading_collapse_is_kept_in_frontmatter(page) -> None:
    head = ids(page)["heading:Title"]
    r = C.toggle_heading_collapse(page, head)
    assert r.details["collapsed"] is True
    assert r.page.to_bytes() == f"---\r\ncollapsedBlocks:\r\n- {head}\r\n---\r\n".encode() + DOC
    assert r.page.collapsed == [head]
    assert r.page.block(head).id == head
    r2 = C.toggle_heading_collapse(r.page, head)
    assert r2.details["collapsed"] is False
    assert r2.page.collapsed == []
    with pytest.raises(InvalidTreeOperation):
        C.toggle_heading_collapse(page, ids(page)["paragraph:Para one"])


def test_update_title_from_heading_and_frontmatter(page) -> None:
    r = P.update_title(page, "New")
    check(r, DOC.replace(b"# Title", b"# New"))
    fm_page = parse_page(b"---\ntitle: Old # kept comment\ntags: [a]\n---\nbody\n")
    r2 = P.update_title(fm_page, "Brand new")
    assert r2.page.to_bytes() == b"---\ntitle: Brand new\ntags: [a]\n---\nbody\n"
    bare = parse_page(b"just text\n", "notes/stem.md")
    assert bare.title == "stem"
    r3 = P.update_title(bare, "Named")
    assert r3.page.to_bytes() == b"---\ntitle: Named\n---\njust text\n"
    with pytest.raises(InvalidArguments):
        P.update_title(page, "two\nlines")


def test_update_options_changes_only_its_lines() -> None:
    src = b"---\n# my notes\ntitle: T\nwideLayout: false\nother: {a: 1}\n---\nbody\n"
    page = parse_page(src)
    r = P.update_options(page, {"wideLayout": True, "showToc": True})
    assert r.page.to_bytes() == (
        b"---\n# my notes\ntitle: T\nwideLayout: true\nother: {a: 1}\nshowToc: true\n---\nbody\n"
    )
    assert r.page.options["wideLayout"] and r.page.options["showToc"]
    same = P.update_options(r.page, {"wideLayout": True})
    assert not same.changed
    with pytest.raises(UnsupportedOption):
        P.update_options(page, {"darkMode": True})
    with pytest.raises(InvalidArguments):
        P.update_options(page, {"wideLayout": "yes"})


def test_invalid_yaml_page_still_reads_but_refuses_option_writes() -> None:
    src = b"---\ntitle: [unclosed\n---\n# Heading\n\nbody\n"
    page = parse_page(src, "x.md")
    assert page.title == "Heading"
    assert page.warnings and "frontmatter" in page.warnings[0]
    from mnoted.errors import InvalidFrontmatter

    with pytest.raises(InvalidFrontmatter):
        P.update_options(page, {"wideLayout": True})
    assert page.to_bytes() == src


def test_save_replace_and_append(page) -> None:
    r = P.save(
        page, [{"type": "heading", "text": "T"}, {"type": "paragraph", "text": "x"}], "replace"
    )
    assert r.page.to_bytes() == b"# T\r\n\r\nx"
    r2 = P.save(page, [{"type": "paragraph", "text": "more"}, "raw *markdown*"], "append")
    assert r2.page.to_bytes() == DOC + b"\r\n\r\nmore\r\n\r\nraw *markdown*"
    assert set(page.block_ids()) <= set(r2.page.block_ids())


def test_save_keeps_frontmatter_and_ids_it_is_given() -> None:
    page = parse_page(b"---\ntitle: T\n---\nkeep me\n\nold\n")
    keep = page.blocks[0].id
    r = P.save(page, [{"id": keep, "type": "paragraph", "text": "kept but edited"}], "replace")
    assert r.page.to_bytes() == b"---\ntitle: T\n---\nkept but edited\n"
    assert r.page.blocks[0].id == keep


def test_every_command_has_a_diff(page) -> None:
    r = C.replace_block(page, ids(page)["paragraph:Para one"], {"type": "paragraph", "text": "P"})
    assert "-Para one\n+P\n" in r.diff
    assert r.diff.startswith("--- a/notes/x.md\n+++ b/notes/x.md\n")
    assert r.to_dict()["changedBlockIds"] == r.changed_block_ids


def test_dispatch_by_seed_names(page) -> None:
    r = C.apply_block_command(
        page, "insert_block_after", {"after_block_id": ids(page)["paragraph:end"], "block": "tail"}
    )
    assert r.page.to_bytes() == DOC + b"\r\n\r\ntail"
    with pytest.raises(InvalidArguments):
        C.apply_block_command(page, "explode", {})
    with pytest.raises(InvalidArguments):
        C.apply_block_command(page, "delete_block", {})
    assert set(C.BLOCK_COMMANDS) == {
        "insert_block_after",
        "replace_block",
        "delete_block",
        "move_block",
        "set_block_type",
        "indent_block",
        "outdent_block",
        "toggle_heading_collapse",
    }


# A valid value of each field, on the fixture's page: a field left out is refused because it
# is missing, not because of its value.
def _valid(page, field: str):
    values = {
        "block": {"type": "paragraph", "text": "new"},
        "block_type": "paragraph",
        "props": {},
    }
    return values.get(field, ids(page)["paragraph:Para one"])


@pytest.mark.parametrize("name", list(C.BLOCK_COMMANDS))
def test_each_command_refuses_a_field_it_needs_missing_or_one_it_does_not_take(
    page, name: str
) -> None:
    spec = C.BLOCK_COMMANDS[name]
    full = {field: _valid(page, field) for field in spec.required}
    for field in spec.required:
        with pytest.raises(InvalidArguments) as missing:
            C.apply_block_command(page, name, {k: v for k, v in full.items() if k != field})
        assert missing.value.message == f"{name} needs {field}"
        assert missing.value.hint == f"Its fields: {block_command_signature(name)}."
    for field in set(BLOCK_FIELDS) - set(spec.fields):
        with pytest.raises(InvalidArguments) as extra:
            C.apply_block_command(page, name, {**full, field: _valid(page, field)})
        assert extra.value.message == f"{name} does not take {field}"
    # None stands for a field left out (the schema's default)
    none_extra = {field: None for field in set(BLOCK_FIELDS) - set(spec.fields)}
    with contextlib.suppress(InvalidTreeOperation):  # (an indent of a paragraph, ...)
        C.apply_block_command(page, name, {**full, **none_extra})


@pytest.mark.skipif(__import__("shutil").which("patch") is None, reason="patch is not installed")
def test_unified_diff_applies_with_patch(tmp_path) -> None:
    import random
    import subprocess

    from mnoted.core.diffs import unified_diff

    rng = random.Random(7)
    for _ in range(300):
        a = [rng.choice(["x", "y", "", "- item", "# h"]) for _ in range(rng.randint(1, 25))]
        b = list(a)
        for _ in range(rng.randint(1, 3)):
            k = rng.randrange(len(b) + 1)
            if rng.random() < 0.5 and k < len(b):
                b[k] = "changed"
            else:
                b.insert(k, "inserted")
        ta, tb = "\n".join(a) + "\n", "\n".join(b) + ("\n" if rng.random() < 0.7 else "")
        diff = unified_diff(parse_page(ta, "p.md"), parse_page(tb, "p.md"))
        (tmp_path / "p.md").write_text(ta)
        subprocess.run(
            ["patch", "-s", "-p1", "-d", str(tmp_path)], input=diff, text=True, check=True
        )
        assert (tmp_path / "p.md").read_text() == tb


def test_replace_a_paragraph_inside_a_callout() -> None:
    page = parse_page(b"> [!note] Title\n> Inside.\n>\n> Second.\n\nAfter.\n", "c.md")
    callout = page.blocks[0]
    first, second = (b for b in page.walk() if b.type == "paragraph" and b.text != "After.")
    result = C.apply_block_command(page, "replace_block", {"block_id": first.id, "block": "New."})
    check(result, b"> [!note] Title\n> New.\n>\n> Second.\n\nAfter.\n")
    assert result.changed_block_ids == [first.id]
    assert result.page.blocks[0].id == callout.id
    block = {"type": "paragraph", "text": "Last."}
    result = C.apply_block_command(page, "replace_block", {"block_id": second.id, "block": block})
    check(result, b"> [!note] Title\n> Inside.\n>\n> Last.\n\nAfter.\n")
