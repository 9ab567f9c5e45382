"""Splicing a page's source lines: the shared steps of the block commands. Pure.

A splice replaces a range of lines and re-parses only around it, pinning the ids of
untouched blocks; every helper here returns a new page and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mnoted.core import frontmatter as fm
from mnoted.core.blocks import BLOCK_TYPES, Block
from mnoted.core.page import Page, parse_page, reparse_splice
from mnoted.core.parse import add_prefix, strip_prefix
from mnoted.core.render import item_marker, render, spec_type
from mnoted.core.source import Source
from mnoted.errors import (
    InvalidArguments,
    InvalidTreeOperation,
)

BULLETS = ("-", "*", "+")


# -- splicing helpers ----------------------------------------------------------


def splice(
    page: Page,
    start: int,
    end: int,
    new_lines: Sequence[str],
    forced: Mapping[tuple[int, str], str] | None = None,
) -> Page:
    source = page.source.replace_lines(start, end, new_lines)
    return reparse_splice(page, source, start, end, len(new_lines), forced)


def reparse(
    page: Page,
    source: Source,
    line_map: Mapping[int, int] | None,
    forced: Mapping[tuple[int, str], str] | None = None,
) -> Page:
    return parse_page(source, page.name, previous=page, line_map=line_map, forced=forced)


def splice_block(
    page: Page,
    start: int,
    end: int,
    lines: Sequence[str],
    prefix: str,
    new_type: str,
    ident: str | None,
    replaced: Sequence[Block] = (),
    pads: Sequence[tuple[int, int]] = ((0, 0), (1, 0), (0, 1), (1, 1)),
) -> tuple[Page, int]:
    """Splice one block's lines in, with blank lines around it only where it would merge.

    Tries each ``(before, after)`` padding in turn and keeps the first result in
    which the new block stands on its own and every other block is unchanged.
    Returns the page and the new block's first line.
    """
    tried = set()
    for before, after in pads:
        before = before if not blank_at(page, start - 1, prefix) and start > page.body_start else 0
        after = after if not blank_at(page, end, prefix) else 0
        if (before, after) in tried:
            continue
        tried.add((before, after))
        placed = place([*[""] * before, *lines, *[""] * after], prefix)
        first = start + before
        forced = {(first, new_type): ident} if ident and new_type else None
        new_page = splice(page, start, end, placed, forced)
        block = block_at(new_page, first, [new_type] if new_type else BLOCK_TYPES)
        if block is None or (ident and block.id != ident):
            continue
        if others_unchanged(page, new_page, replaced):
            return new_page, first
    raise InvalidTreeOperation(
        "the new text would merge with the blocks around it",
        hint="Send a block that stands on its own (for example without a leading list marker).",
    )


def others_unchanged(page: Page, new_page: Page, replaced: Sequence[Block]) -> bool:
    """Whether every block outside ``replaced`` is still there, itself unchanged."""
    gone = {b.id for r in replaced for b in r.walk()}
    index = new_page.index
    candidates = list(page.walk())
    old_tops, new_tops = page.blocks, new_page.blocks
    if new_page.window is not None:
        old_ids, new_ids = new_page.window
        if not gone <= old_ids:
            return False
        candidates = [page.index[i] for i in old_ids]
        old_tops = [b for b in page.blocks if b.id in old_ids]
        new_tops = [b for b in new_page.blocks if b.id in new_ids]
    old_parents = _parents(old_tops)
    new_parents = _parents(new_tops)
    for b in candidates:
        if b.id in gone:
            continue
        other = index.get(b.id)
        if other is None or (other is not b and other.signature() != b.signature()):
            return False
        if old_parents.get(b.id) != new_parents.get(b.id):
            return False
    return True


def _parents(tops: Sequence[Block]) -> dict[str, str | None]:
    """Block id → parent id within the trees ``tops``."""
    out: dict[str, str | None] = {}

    def visit(block: Block, parent: str | None) -> None:
        out[block.id] = parent
        for child in block.children:
            visit(child, block.id)

    for top in tops:
        visit(top, None)
    return out


def blank_at(page: Page, line: int, prefix: str) -> bool:
    lines = page.source.lines
    return line < 0 or line >= len(lines) or not strip_prefix(lines[line], prefix).strip()


def place(lines: Sequence[str], prefix: str) -> list[str]:
    return [add_prefix(ln, prefix) for ln in lines]


def block_at(page: Page, line: int, types: Sequence[str]) -> Block | None:
    for b in page.walk():
        if b.start == line and b.type in types:
            return b
    return None


def subtree_forced(old: Block, new_start: int) -> dict[tuple[int, str], str]:
    """Pin a moved subtree's ids at its new place (line offsets are kept by a move)."""
    delta = new_start - old.start
    return {(b.start + delta, b.type): b.id for b in old.walk()}


def require_block(page: Page, block_id: str) -> Block:
    if not isinstance(block_id, str) or not block_id:
        raise InvalidArguments("block_id must be a non-empty string")
    return page.block(block_id)


def neighbour_bullets(siblings: Sequence[Block], before: int, after: int) -> set[str]:
    """Markers of the lists at ``siblings[before]`` and ``siblings[after]`` (a new list
    between them must use another one, or Markdown merges it into theirs)."""
    return {
        str(siblings[k].props.get("marker", ""))
        for k in (before, after)
        if 0 <= k < len(siblings) and siblings[k].type == "list"
    }


def unmerged_list(spec: Mapping[str, Any], near: set[str]) -> Mapping[str, Any]:
    """A list spec whose marker keeps it apart from the neighbouring lists' ``near``."""
    props = dict(spec.get("props") or {})
    if props.get("ordered"):
        if "." in near:
            props["marker"] = ")"
    elif props.get("marker") not in BULLETS or props.get("marker") in near:
        props["marker"] = free_bullet(near, ordered=False)
    return {**spec, "props": props}


def free_bullet(taken: set[str], ordered: bool) -> str:
    """A list marker that will not merge the new list into a neighbouring one."""
    if ordered:
        return "1." if "." not in taken else "1)"
    for b in BULLETS:
        if b not in taken:
            return b
    return "-"


# -- insertion -----------------------------------------------------------------


def _lines_for(
    page: Page, spec: Mapping[str, Any], parent: Block | None, siblings: Sequence[Block], index: int
) -> tuple[list[str], str, bool]:
    """Lines for ``spec`` placed as child ``index`` of ``parent``: (lines, prefix, is_item)."""
    kind = spec_type(spec)
    if parent is not None and parent.type == "list":
        if kind not in ("paragraph", "list_item", "task_item", "markdown"):
            raise InvalidTreeOperation(
                f"a list holds only list items, not a {kind}",
                hint="Insert after the list itself, or use type list_item.",
            )
        item_spec = dict(spec)
        if kind in ("paragraph", "markdown"):
            item_spec = {"type": "list_item", "text": spec.get("text", spec.get("markdown", ""))}
        ref = siblings[index - 1] if index > 0 else (siblings[0] if siblings else None)
        marker = str(parent.props.get("marker", "-"))
        if parent.props.get("ordered"):
            prev = siblings[index - 1] if index > 0 else None
            number = (
                int(str(prev.props.get("marker", "1."))[:-1]) + 1
                if prev
                else int(parent.props.get("start", 1))
            )
            marker = f"{number}{parent.props.get('marker', '.')}"
        elif ref is not None:
            marker = item_marker(ref.props, marker)
        return render(item_spec, marker_hint=marker), parent.outer_prefix, True
    prefix = "" if parent is None else parent.prefix
    if kind in ("list_item", "task_item"):
        taken = neighbour_bullets(siblings, index - 1, index)
        marker = free_bullet(taken, ordered=False)
        return render(spec, marker_hint=marker), prefix, False
    if kind == "list":
        spec = unmerged_list(spec, neighbour_bullets(siblings, index - 1, index))
    return render(spec), prefix, False


def insert_spec(
    page: Page,
    parent: Block | None,
    index: int,
    spec: Mapping[str, Any],
    forced_id: str | None = None,
) -> tuple[Page, int, str]:
    """Insert ``spec`` as child ``index`` of ``parent``; returns (page, first new line, type)."""
    siblings = page.siblings(parent)
    lines, prefix, in_list = _lines_for(page, spec, parent, siblings, index)
    if index > 0:
        at = siblings[index - 1].end
    elif parent is None:
        at = page_start(page, siblings)
    else:
        at = parent.head_end
    tight = in_list and parent is not None and parent.props.get("tight", True)
    kind = spec_type(spec)
    new_type = kind
    if in_list:
        new_type = "task_item" if kind == "task_item" else "list_item"
    elif kind == "markdown":
        new_type = ""
    pads = ((0, 0), (1, 0), (0, 1), (1, 1)) if tight else ((1, 1), (1, 0), (0, 1), (0, 0))
    new_page, first = splice_block(page, at, at, lines, prefix, new_type, forced_id, (), pads)
    return new_page, first, new_type


def page_start(page: Page, tops: Sequence[Block]) -> int:
    """Where a block put first on the page goes: before the first block, past the blank
    lines that part it from the frontmatter (they stay there)."""
    return tops[0].start if tops else page.body_start


def frontmatter_edit(page: Page, updates: Mapping[str, Any]) -> Page:
    start, end, new = fm.edit_keys(page.source.lines, updates)
    if start == end and not new:
        return page
    return splice(page, start, end, new)
