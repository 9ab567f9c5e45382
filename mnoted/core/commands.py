"""Block commands: page in, new page + changed block ids + diff out. Pure.

Every command is a splice of source lines: what it does not touch keeps its
bytes, new lines use the file's own line ending, and ids of untouched blocks
are pinned through the splice. A command that would break the tree is refused
with :class:`InvalidTreeOperation` naming the reason; nothing is half-applied
because nothing is written here at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mnoted.core import frontmatter as fm
from mnoted.core.blocks import ITEM_TYPES, Block
from mnoted.core.diffs import EditResult as EditResult
from mnoted.core.diffs import changed_ids as changed_ids
from mnoted.core.names import BLOCK_COMMANDS, block_command_signature
from mnoted.core.page import COLLAPSED_KEY, Page
from mnoted.core.parse import strip_prefix
from mnoted.core.render import render, spec_type
from mnoted.core.splicing import (
    BULLETS,
    blank_at,
    block_at,
    free_bullet,
    frontmatter_edit,
    insert_spec,
    neighbour_bullets,
    others_unchanged,
    page_start,
    place,
    reparse,
    require_block,
    splice,
    splice_block,
    subtree_forced,
    unmerged_list,
)
from mnoted.errors import InvalidArguments, InvalidTreeOperation


def insert_block_after(
    page: Page, block: Mapping[str, Any], after_block_id: str | None = None
) -> EditResult:
    """Insert ``block`` as the next sibling of ``after_block_id``, or first on the page."""
    if after_block_id is None:
        parent, index = None, 0
    else:
        require_block(page, after_block_id)
        parent, i = page.parent(after_block_id)
        index = i + 1
    new_page, first, new_type = insert_spec(page, parent, index, block)
    inserted = block_at(
        new_page, first, [new_type] if new_type else [b.type for b in new_page.walk()]
    )
    details: dict[str, Any] = {"insertedBlockId": inserted.id if inserted else None}
    return EditResult("insert_block_after", new_page, page, changed_ids(page, new_page), details)


# -- replace / delete ----------------------------------------------------------


def _keep_anchor(old: Block, spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """Carry an inline Obsidian ``^anchor`` over to the replacement text."""
    text = spec.get("text")
    if not old.anchor or not isinstance(text, str) or f"^{old.anchor}" in text:
        return spec
    if not old.text.rstrip().endswith(f"^{old.anchor}"):
        return spec
    return {**spec, "text": text.rstrip("\n") + f" ^{old.anchor}"}


def replace_block(page: Page, block_id: str, block: Mapping[str, Any]) -> EditResult:
    """Replace a block's content, keeping its id.

    An item's or callout's children are kept unless ``block`` names ``children``.
    """
    old = require_block(page, block_id)
    parent, index = page.parent(block_id)
    spec = _keep_anchor(old, block)
    kind = spec_type(spec)
    in_list = parent is not None and parent.type == "list"
    if parent is not None and parent.type in ITEM_TYPES and old.start == parent.start:
        raise InvalidTreeOperation(
            "this block shares its first line with its list item's marker",
            hint="Replace the list item instead.",
        )
    keep_children = (
        "children" not in spec
        and bool(old.children)
        and (
            (old.type in ITEM_TYPES and kind in (*ITEM_TYPES, "paragraph", "markdown"))
            or (old.type == "callout" and kind == "callout")
        )
    )
    if in_list:
        if kind not in ("list_item", "task_item", "paragraph", "markdown"):
            raise InvalidTreeOperation(f"a list item cannot become a {kind}")
        item_spec = dict(spec)
        if kind in ("paragraph", "markdown"):
            item_spec = {"type": old.type, "text": spec.get("text", spec.get("markdown", ""))}
            if old.type == "task_item":
                item_spec["props"] = {"checked": old.props.get("checked", False)}
        if keep_children:
            item_spec.pop("children", None)
        lines = render(item_spec, marker_hint=str(old.props.get("marker", "-")))
        new_type = spec_type(item_spec)
        new_type = new_type if new_type in ITEM_TYPES else "list_item"
    else:
        if kind in ITEM_TYPES:
            raise InvalidTreeOperation(
                "only a block inside a list can become a list item",
                hint="Use type list with children, or set_block_type.",
            )
        if kind == "list":
            near = neighbour_bullets(page.siblings(parent), index - 1, index + 1)
            spec = unmerged_list(spec, near)
        lines = render(spec)
        new_type = kind if kind != "markdown" else old.type
    end = old.head_end if keep_children else old.end
    replaced = (
        [old] if not keep_children else [Block(old.type, old.text, old.start, end, id=old.id)]
    )
    new_page, _ = splice_block(
        page, old.start, end, lines, old.outer_prefix, new_type, old.id, replaced
    )
    return EditResult("replace_block", new_page, page, changed_ids(page, new_page, [old.id]))


def _removal_span(page: Page, block: Block) -> tuple[int, int]:
    """Lines to remove for ``block``, with one blank separator when it stood between blanks."""
    start, end = block.start, block.end
    prefix = block.outer_prefix
    lines = page.source.lines
    if (
        end < len(lines)
        and blank_at(page, end, prefix)
        and (start == page.body_start or blank_at(page, start - 1, prefix))
    ):
        end += 1
    elif end >= len(lines) and start > page.body_start and blank_at(page, start - 1, prefix):
        start -= 1
    return start, end


def delete_block(page: Page, block_id: str) -> EditResult:
    """Delete a block with its children."""
    old = require_block(page, block_id)
    parent, _ = page.parent(block_id)
    if parent is not None and parent.type in ITEM_TYPES and old.start == parent.start:
        raise InvalidTreeOperation(
            "this block shares its first line with its list item's marker",
            hint="Delete the list item instead.",
        )
    emptied = _emptied(page, old)
    target = emptied[-1] if emptied else old  # a container left empty goes with its last child
    start, end = _removal_span(page, target)
    new_page = splice(page, start, end, [])
    if not others_unchanged(page, new_page, [target]):
        # The blocks around it would merge: leave a blank line in its place.
        new_page = splice(page, target.start, target.end, [target.outer_prefix.rstrip(" ")])
        if not others_unchanged(page, new_page, [target]):
            raise InvalidTreeOperation("deleting this block would merge the blocks around it")
    details = {"deletedBlockId": old.id}
    return EditResult(
        "delete_block", new_page, page, changed_ids(page, new_page, [old.id]), details
    )


# -- move / indent / outdent ---------------------------------------------------


def _is_inside(page: Page, block_id: str, ancestor_id: str) -> bool:
    return any(b.id == block_id for b in page.block(ancestor_id).walk())


def _reshape(
    block: Block, lines: Sequence[str], target: Block | None, marker: str | None
) -> list[str]:
    """A block's lines without its old prefix, with its list marker changed when asked."""
    out = [strip_prefix(ln, block.outer_prefix) for ln in lines]
    if marker is not None and block.type in ITEM_TYPES and out:
        old_marker = str(block.props.get("marker", "-"))
        head = out[0].lstrip(" ")
        indent = len(out[0]) - len(head)
        if head.startswith(old_marker):
            width_delta = len(marker) - len(old_marker)
            out[0] = " " * indent + marker + head[len(old_marker) :]
            if width_delta:
                span = block.end - block.start
                for k in range(1, span):
                    ln = out[k]
                    if width_delta > 0 and ln:
                        out[k] = " " * width_delta + ln
                    elif width_delta < 0 and ln.startswith(" " * -width_delta):
                        out[k] = ln[-width_delta:]
    return out


def _target_marker(
    page: Page, block: Block, parent: Block | None, siblings: Sequence[Block], index: int
) -> str | None:
    """The marker an item needs in its new list (None: keep its own)."""
    if block.type not in ITEM_TYPES:
        return None
    if parent is not None and parent.type == "list":
        if parent.props.get("ordered"):
            prev = siblings[index - 1] if index > 0 else None
            number = (
                int(str(prev.props.get("marker", "1."))[:-1]) + 1
                if prev and prev.id != block.id
                else int(parent.props.get("start", 1))
            )
            return f"{number}{parent.props.get('marker', '.')}"
        return str(parent.props.get("marker", "-"))
    taken = neighbour_bullets(siblings, index - 1, index)
    old = str(block.props.get("marker", "-"))
    ordered = old[-1:] in ".)"
    if old not in taken and (not ordered or old[-1:] not in taken):
        return None
    return free_bullet(taken, ordered)


def _resolve_target(
    page: Page, block: Block, target_parent_id: str | None, after_block_id: str | None
) -> tuple[Block | None, int]:
    """Where a moved block goes: its new parent and its index among the parent's children."""
    if target_parent_id is not None:
        parent: Block | None = require_block(page, target_parent_id)
    elif after_block_id is not None:
        parent, _ = page.parent(after_block_id)
    else:
        parent = None
    if parent is not None:
        if parent.id == block.id or _is_inside(page, parent.id, block.id):
            raise InvalidTreeOperation("a block cannot move into itself or one of its descendants")
        if parent.type in ITEM_TYPES and block.type in ITEM_TYPES:
            # An item under an item goes into that item's nested list.
            nested = [c for c in parent.children if c.type == "list"]
            if after_block_id is not None:
                for lst in nested:
                    if any(c.id == after_block_id for c in lst.children):
                        parent = lst
                        break
            elif nested:
                parent = nested[-1]
                return parent, 0
        if parent.type not in ("list", *ITEM_TYPES, "quote", "callout"):
            raise InvalidTreeOperation(f"a {parent.type} cannot contain other blocks")
        if parent.type == "list" and block.type not in ITEM_TYPES:
            raise InvalidTreeOperation(
                "a list holds only list items", hint="Move the block into a list item instead."
            )
    siblings = page.siblings(parent)
    if after_block_id is None:
        return parent, 0
    if after_block_id == block.id:
        raise InvalidTreeOperation("a block cannot be placed after itself")
    for i, s in enumerate(siblings):
        if s.id == after_block_id:
            return parent, i + 1
    raise InvalidTreeOperation(
        f"block {after_block_id!r} is not a child of the target parent",
        hint="after_block_id must name a child of target_parent_id (or a top-level block).",
    )


def _move(page: Page, block: Block, parent: Block | None, index: int, command: str) -> EditResult:
    old_parent, old_index = page.parent(block.id)
    same_parent = (parent.id if parent else None) == (old_parent.id if old_parent else None)
    if same_parent and index in (old_index, old_index + 1):
        return EditResult(command, page, page, [])
    siblings = page.siblings(parent)
    lines = page.source.lines[block.start : block.end]
    marker = _target_marker(page, block, parent, siblings, index)
    bare = _reshape(block, lines, parent, marker)
    # Remove, then insert into the page without the block.
    r_start, r_end = _removal_span(page, block)
    removed = page.source.replace_lines(r_start, r_end, [])
    shift = r_end - r_start

    def moved_line(line: int) -> int:
        if line >= r_end:
            return line - shift
        return min(line, r_start)

    prefix = ""
    in_list = False
    if parent is None:
        at = siblings[index - 1].end if index > 0 else page_start(page, siblings)
    else:
        in_list = parent.type == "list"
        prefix = parent.outer_prefix if in_list else parent.prefix
        first_line = parent.start if in_list else parent.head_end
        at = siblings[index - 1].end if index > 0 else first_line
    at = moved_line(at)
    before: list[str] = []
    after: list[str] = []
    tight = in_list and parent is not None and parent.props.get("tight", True)
    if not tight:

        def blank(line: int) -> bool:
            return (
                line < 0
                or line >= len(removed)
                or not strip_prefix(removed.lines[line], prefix).strip()
            )

        body_start = page.body_start
        if at > body_start and not blank(at - 1):
            before = [""]
        if at < len(removed) and not blank(at):
            after = [""]
    placed = place([*before, *bare, *after], prefix)
    source = removed.replace_lines(at, at, placed)
    first = at + len(before)
    # Line map: composition of the removal and the insertion.
    n_old = len(page.source)
    line_map: dict[int, int] = {}
    for i in range(n_old):
        if r_start <= i < r_end:
            continue
        j = moved_line(i)
        line_map[i] = j if j < at else j + len(placed)
    forced = subtree_forced(block, first)
    new_page = reparse(page, source, line_map, forced)
    moved = block_at(new_page, first, [block.type])
    if (
        moved is None
        or moved.id != block.id
        or not others_unchanged(page, new_page, [block, *_emptied(page, block)])
    ):
        raise InvalidTreeOperation(
            f"moving this {block.type} there would change how the page parses",
            hint="Choose another target; a blank line or different list may be needed.",
        )
    return EditResult(command, new_page, page, changed_ids(page, new_page, [block.id]))


def _emptied(page: Page, block: Block) -> list[Block]:
    """The containers that hold nothing but ``block`` and so go away with it."""
    out = []
    parent, _ = page.parent(block.id)
    while parent is not None and parent.type in ("list", "quote") and len(parent.children) == 1:
        out.append(parent)
        parent, _ = page.parent(parent.id)
    return out


def move_block(
    page: Page,
    block_id: str,
    target_parent_id: str | None = None,
    after_block_id: str | None = None,
) -> EditResult:
    """Move a block and its children under ``target_parent_id``, after ``after_block_id``."""
    block = require_block(page, block_id)
    if after_block_id is not None:
        require_block(page, after_block_id)
        if _is_inside(page, after_block_id, block_id):
            raise InvalidTreeOperation("a block cannot move after one of its own descendants")
    parent, index = _resolve_target(page, block, target_parent_id, after_block_id)
    return _move(page, block, parent, index, "move_block")


def indent_block(page: Page, block_id: str) -> EditResult:
    """Make a block the last child of its previous sibling (a list item)."""
    block = require_block(page, block_id)
    parent, index = page.parent(block_id)
    siblings = page.siblings(parent)
    if index == 0:
        raise InvalidTreeOperation(
            "the first block of its list or container cannot be indented",
            hint="Indent needs a previous sibling to nest under.",
        )
    prev = siblings[index - 1]
    if prev.type == "list" and block.type not in ITEM_TYPES and prev.children:
        prev = prev.children[-1]
    if prev.type not in ITEM_TYPES:
        raise InvalidTreeOperation(
            f"a {block.type} can only be indented under a list item "
            f"(the previous block is a {prev.type})"
        )
    if block.type in ITEM_TYPES:
        nested = [c for c in prev.children if c.type == "list"]
        if nested:
            return _move(page, block, nested[-1], len(nested[-1].children), "indent_block")
    target_index = len(prev.children)
    if block.type in ITEM_TYPES:
        # A new nested list under ``prev``: the item is written at the item's content column.
        return _move_into_new_list(page, block, prev)
    return _move(page, block, prev, target_index, "indent_block")


def _move_into_new_list(page: Page, block: Block, item: Block) -> EditResult:
    lines = page.source.lines[block.start : block.end]
    bare = [strip_prefix(ln, block.outer_prefix) for ln in lines]
    r_start, r_end = _removal_span(page, block)
    at = item.end
    placed = place(bare, item.prefix)
    # The block directly follows its previous sibling, so removal and insertion meet.
    if r_start != at:
        new_source = page.source.replace_lines(r_start, r_end, [])
        shift = r_end - r_start
        at_new = at if at < r_start else at - shift
        new_source = new_source.replace_lines(at_new, at_new, placed)
    else:
        new_source = page.source.replace_lines(r_start, r_end, placed)
        at_new = r_start
    line_map = {i: i for i in range(r_start)}
    delta = len(new_source) - len(page.source)
    line_map.update({i: i + delta for i in range(r_end, len(page.source))})
    new_page = reparse(page, new_source, line_map, subtree_forced(block, at_new))
    moved = block_at(new_page, at_new, [block.type])
    if moved is None or moved.id != block.id:
        raise InvalidTreeOperation("indenting this item would change how the page parses")
    return EditResult("indent_block", new_page, page, changed_ids(page, new_page, [block.id]))


def outdent_block(page: Page, block_id: str) -> EditResult:
    """Move a block out of its container, to just after it."""
    block = require_block(page, block_id)
    parent, _ = page.parent(block_id)
    if parent is None:
        raise InvalidTreeOperation("the block is already at the top level")
    container = parent
    if parent.type == "list":
        grand, _ = page.parent(parent.id)
        if grand is None or grand.type not in ITEM_TYPES:
            raise InvalidTreeOperation("the item is already in a top-level list")
        container = grand
    outer, idx = page.parent(container.id)
    return _move(page, block, outer, idx + 1, "outdent_block")


# -- types, collapse -----------------------------------------------------------

_TEXT_TYPES = ("paragraph", "heading", "code", "math", "quote", "callout")


def set_block_type(
    page: Page, block_id: str, block_type: str, props: Mapping[str, Any] | None = None
) -> EditResult:
    """Change a block's type (and props) keeping its text and id."""
    block = require_block(page, block_id)
    props = dict(props or {})
    if block.type == "list" and block_type == "list":
        return _relist(page, block, props)
    merged = {k: v for k, v in block.props.items() if k not in ("marker", "setext")}
    merged.update(props)
    if block.type in ITEM_TYPES and block_type in ITEM_TYPES:
        spec: dict[str, Any] = {"type": block_type, "text": block.text, "props": merged}
        result = replace_block(page, block_id, spec)
        result.command = "set_block_type"
        return result
    if block.type not in _TEXT_TYPES or block_type not in _TEXT_TYPES:
        raise InvalidTreeOperation(
            f"a {block.type} cannot be turned into a {block_type}",
            hint=f"set_block_type converts among {', '.join(_TEXT_TYPES)}, between list_item and "
            "task_item, and a list between ordered and bullet.",
        )
    if (
        block.children
        and block.type in ("quote", "callout")
        and block_type not in ("quote", "callout")
    ):
        raise InvalidTreeOperation(
            f"a {block.type} with several blocks cannot become a {block_type}"
        )
    text = block.text
    if block.type == "heading" or block_type == "heading":
        text = " ".join(text.split("\n")) if block_type == "heading" else text
    result = replace_block(page, block_id, {"type": block_type, "text": text, "props": merged})
    result.command = "set_block_type"
    return result


def _relist(page: Page, block: Block, props: Mapping[str, Any]) -> EditResult:
    """Switch a list between bullet and ordered by rewriting its items' markers."""
    ordered = bool(props.get("ordered", block.props.get("ordered")))
    start = int(props.get("start", block.props.get("start", 1)) or 1)
    bullet = props.get("marker") if props.get("marker") in BULLETS else "-"
    lines = list(page.source.lines)
    new_lines: list[str] = []
    for n, item in enumerate(block.children):
        marker = f"{start + n}." if ordered else str(bullet)
        reshaped = _reshape(item, lines[item.start : item.end], None, marker)
        new_lines += place(reshaped, item.outer_prefix)
    forced = {(b.start, b.type): b.id for b in block.walk()}
    new_page = splice(page, block.start, block.end, new_lines, forced)
    result = EditResult("set_block_type", new_page, page, changed_ids(page, new_page, [block.id]))
    return result


def toggle_heading_collapse(page: Page, block_id: str) -> EditResult:
    """Collapse or expand a heading; the state lives in frontmatter, so it is versioned."""
    block = require_block(page, block_id)
    if block.type != "heading":
        raise InvalidTreeOperation(f"only headings collapse, not a {block.type}")
    collapsed = page.collapsed
    now = block.id not in collapsed
    new_list = [*collapsed, block.id] if now else [c for c in collapsed if c != block.id]
    new_page = frontmatter_edit(page, {COLLAPSED_KEY: new_list if new_list else fm.DELETE})
    return EditResult("toggle_heading_collapse", new_page, page, [block.id], {"collapsed": now})


def _opt_str(args: Mapping[str, Any], key: str) -> str | None:
    value = args.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidArguments(f"{key} must be a non-empty string")
    return value


def _req_str(args: Mapping[str, Any], key: str) -> str:
    value = _opt_str(args, key)
    if value is None:
        raise InvalidArguments(f"{key} is required")
    return value


def _req_block(args: Mapping[str, Any]) -> Mapping[str, Any]:
    block = args.get("block")
    if isinstance(block, str):
        return {"markdown": block}
    if not isinstance(block, Mapping):
        raise InvalidArguments(
            "block must be an object like {'type': 'paragraph', 'text': '...'}, or a string "
            "of Markdown"
        )
    return block


def _check_fields(name: str, args: Mapping[str, Any]) -> None:
    """Refuse a command without a field it needs, or with one it does not take (an agent
    that sent ``after_block_id`` to ``replace_block`` meant a move that would not happen)."""
    spec = BLOCK_COMMANDS.get(name)
    if spec is None:
        raise InvalidArguments(
            f"unknown block command {name!r}", hint=f"Use one of: {', '.join(BLOCK_COMMANDS)}."
        )
    given = [key for key, value in args.items() if value is not None]
    if extra := [key for key in given if key not in spec.fields]:
        raise InvalidArguments(
            f"{name} does not take {', '.join(extra)}",
            hint=f"Its fields: {block_command_signature(name)}.",
        )
    if missing := [key for key in spec.required if args.get(key) is None]:
        raise InvalidArguments(
            f"{name} needs {', '.join(missing)}",
            hint=f"Its fields: {block_command_signature(name)}.",
        )


def apply_block_command(page: Page, name: str, args: Mapping[str, Any]) -> EditResult:
    """Run one of the eight seed-004 commands by name with its seed field names."""
    _check_fields(name, args)
    if name == "insert_block_after":
        return insert_block_after(page, _req_block(args), _opt_str(args, "after_block_id"))
    if name == "replace_block":
        return replace_block(page, _req_str(args, "block_id"), _req_block(args))
    if name == "delete_block":
        return delete_block(page, _req_str(args, "block_id"))
    if name == "move_block":
        return move_block(
            page,
            _req_str(args, "block_id"),
            _opt_str(args, "target_parent_id"),
            _opt_str(args, "after_block_id"),
        )
    if name == "set_block_type":
        props = args.get("props")
        if props is not None and not isinstance(props, Mapping):
            raise InvalidArguments("props must be an object")
        return set_block_type(page, _req_str(args, "block_id"), _req_str(args, "block_type"), props)
    if name == "indent_block":
        return indent_block(page, _req_str(args, "block_id"))
    if name == "outdent_block":
        return outdent_block(page, _req_str(args, "block_id"))
    return toggle_heading_collapse(page, _req_str(args, "block_id"))
