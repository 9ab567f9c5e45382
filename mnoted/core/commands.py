"""Block commands: page in, new page + changed block ids + diff out. Pure.

Every command is a splice of source lines: what it does not touch keeps its
bytes, new lines use the file's own line ending, and ids of untouched blocks
are pinned through the splice. A command that would break the tree is refused
with :class:`InvalidTreeOperation` naming the reason; nothing is half-applied
because nothing is written here at all.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from mnoted.core import frontmatter as fm
from mnoted.core.blocks import BLOCK_TYPES, ITEM_TYPES, Block
from mnoted.core.names import BLOCK_COMMANDS, block_command_signature
from mnoted.core.page import COLLAPSED_KEY, PAGE_OPTIONS, Page, parse_page, reparse_splice
from mnoted.core.parse import add_prefix, strip_prefix
from mnoted.core.render import item_marker, render, spec_type
from mnoted.core.sequences import shared
from mnoted.core.source import Source
from mnoted.errors import (
    InvalidArguments,
    InvalidFrontmatter,
    InvalidTreeOperation,
    UnsupportedOption,
)

_BULLETS = ("-", "*", "+")


@dataclass
class EditResult:
    """What a command did: the new page, the blocks it changed and a unified diff."""

    command: str
    page: Page
    before: Page
    changed_block_ids: list[str]
    details: dict[str, Any] = field(default_factory=dict)
    # Lines known equal at the head and at the tail of ``before`` and ``page`` (an edit that
    # knows where it changed the text says so): the diff compares only what lies between.
    same_ends: tuple[int, int] = (0, 0)

    @property
    def changed(self) -> bool:
        return self.page.source != self.before.source

    @cached_property
    def diff(self) -> str:
        return unified_diff(self.before, self.page, same_ends=self.same_ends)

    def to_dict(self) -> dict[str, Any]:
        return {
            "appliedCommand": self.command,
            "changedBlockIds": self.changed_block_ids,
            "diff": self.diff,
            **self.details,
        }


def _common_ends(a: Source, b: Source, known: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """How many lines ``a`` and ``b`` share at their head and at their tail (text and
    ending), at least ``known`` (what an edit knows it left alone is not compared again)."""
    n = min(len(a), len(b))
    k = min(known[0], n)
    head = min(shared(a.lines, b.lines, n, start=k), shared(a.ends, b.ends, n, start=k))
    k = min(known[1], n - head)
    tail = min(
        shared(a.lines, b.lines, n - head, forward=False, start=k),
        shared(a.ends, b.ends, n - head, forward=False, start=k),
    )
    return head, tail


def _diff_lines(src: Source, start: int, stop: int) -> list[str]:
    return [
        ln + "\n" if end else ln
        for ln, end in zip(src.lines[start:stop], src.ends[start:stop], strict=True)
    ]


def _opcodes(
    a: Source, b: Source, context: int, same_ends: tuple[int, int]
) -> tuple[list[tuple[str, int, int, int, int]], list[str], list[str], int]:
    """difflib's opcodes for ``a`` → ``b``, matching only the part between the common
    head and tail (a one-line edit of a 1 MB page compares lines, no sequence match).

    Also the lines of both sides from ``offset`` on (what the hunks can show)."""
    head, tail = _common_ends(a, b, same_ends)
    offset = max(0, head - context)
    la = _diff_lines(a, offset, len(a) - max(0, tail - context))
    lb = _diff_lines(b, offset, len(b) - max(0, tail - context))
    ops: list[tuple[str, int, int, int, int]] = [("equal", 0, head, 0, head)] if head else []
    matcher = difflib.SequenceMatcher(
        None,
        la[head - offset : len(a) - tail - offset],
        lb[head - offset : len(b) - tail - offset],
        autojunk=False,
    )
    ops += [
        (tag, i1 + head, i2 + head, j1 + head, j2 + head)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
    ]
    if tail:
        ops.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return ops, la, lb, offset


def _groups(
    ops: list[tuple[str, int, int, int, int]], n: int
) -> list[list[tuple[str, int, int, int, int]]]:
    """Hunks of ``ops`` with ``n`` lines of context (difflib's own grouping rule)."""
    ops = [op for op in ops if op[1] != op[2] or op[3] != op[4]]
    if not ops or all(op[0] == "equal" for op in ops):
        return []
    if ops[0][0] == "equal":
        tag, i1, i2, j1, j2 = ops[0]
        ops[0] = (tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2)
    if ops[-1][0] == "equal":
        tag, i1, i2, j1, j2 = ops[-1]
        ops[-1] = (tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n))
    groups: list[list[tuple[str, int, int, int, int]]] = []
    group: list[tuple[str, int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal" and i2 - i1 > 2 * n:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            groups.append(group)
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        groups.append(group)
    return groups


def _range(start: int, stop: int) -> str:
    length = stop - start
    first = start + 1 if length else start
    return str(first) if length == 1 else f"{first},{length}"


def unified_diff(
    before: Page, after: Page, context: int = 3, *, same_ends: tuple[int, int] = (0, 0)
) -> str:
    """The change as a unified diff of the file (LF endings), like ``diff -u``.

    ``same_ends``: lines known equal at the head and at the tail of both (see
    :attr:`EditResult.same_ends`); the diff is the same, found with less comparing.
    """
    if before.source.lines == after.source.lines and before.source.ends == after.source.ends:
        return ""
    ops, a, b, k = _opcodes(before.source, after.source, context, same_ends)
    name = before.name or "page.md"
    out = [f"--- a/{name}\n", f"+++ b/{name}\n"]
    for group in _groups(ops, context):
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + ln for ln in a[i1 - k : i2 - k]]
                continue
            out += ["-" + ln for ln in a[i1 - k : i2 - k]]
            out += ["+" + ln for ln in b[j1 - k : j2 - k]]
    return "".join(
        ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in out
    )


def changed_ids(before: Page, after: Page, also: Sequence[str] = ()) -> list[str]:
    """Ids inserted, deleted or changed in themselves (not merely through a child)."""
    old = before.index
    new = after.index
    if after.window is not None:
        old_ids, new_ids = after.window
        out = [i for i in new_ids if i not in old or old[i].signature() != new[i].signature()]
        out += [i for i in old_ids if i not in new]
    else:
        out = [i for i, b in new.items() if i not in old or old[i].signature() != b.signature()]
        out += [i for i in old if i not in new]
    out += [i for i in also if i not in out and (i in new or i in old)]
    if len(out) < 2:
        return out
    ids = list(new)  # document order; a few changed ids are looked up in C, not mapped all
    wanted = set(out)
    order = (
        {i: ids.index(i) for i in wanted if i in new}
        if len(wanted) < 64
        else {i: n for n, i in enumerate(ids) if i in wanted}
    )
    return sorted(out, key=lambda i: order.get(i, len(ids)))


# -- splicing helpers ----------------------------------------------------------


def _splice(
    page: Page,
    start: int,
    end: int,
    new_lines: Sequence[str],
    forced: Mapping[tuple[int, str], str] | None = None,
) -> Page:
    source = page.source.replace_lines(start, end, new_lines)
    return reparse_splice(page, source, start, end, len(new_lines), forced)


def _reparse(
    page: Page,
    source: Source,
    line_map: Mapping[int, int] | None,
    forced: Mapping[tuple[int, str], str] | None = None,
) -> Page:
    return parse_page(source, page.name, previous=page, line_map=line_map, forced=forced)


def _splice_block(
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
        before = before if not _blank(page, start - 1, prefix) and start > page.body_start else 0
        after = after if not _blank(page, end, prefix) else 0
        if (before, after) in tried:
            continue
        tried.add((before, after))
        placed = _place([*[""] * before, *lines, *[""] * after], prefix)
        first = start + before
        forced = {(first, new_type): ident} if ident and new_type else None
        new_page = _splice(page, start, end, placed, forced)
        block = _block_at(new_page, first, [new_type] if new_type else BLOCK_TYPES)
        if block is None or (ident and block.id != ident):
            continue
        if _others_unchanged(page, new_page, replaced):
            return new_page, first
    raise InvalidTreeOperation(
        "the new text would merge with the blocks around it",
        hint="Send a block that stands on its own (for example without a leading list marker).",
    )


def _others_unchanged(page: Page, new_page: Page, replaced: Sequence[Block]) -> bool:
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


def _blank(page: Page, line: int, prefix: str) -> bool:
    lines = page.source.lines
    return line < 0 or line >= len(lines) or not strip_prefix(lines[line], prefix).strip()


def _place(lines: Sequence[str], prefix: str) -> list[str]:
    return [add_prefix(ln, prefix) for ln in lines]


def _block_at(page: Page, line: int, types: Sequence[str]) -> Block | None:
    for b in page.walk():
        if b.start == line and b.type in types:
            return b
    return None


def _subtree_forced(old: Block, new_start: int) -> dict[tuple[int, str], str]:
    """Pin a moved subtree's ids at its new place (line offsets are kept by a move)."""
    delta = new_start - old.start
    return {(b.start + delta, b.type): b.id for b in old.walk()}


def _require(page: Page, block_id: str) -> Block:
    if not isinstance(block_id, str) or not block_id:
        raise InvalidArguments("block_id must be a non-empty string")
    return page.block(block_id)


def _neighbour_bullets(siblings: Sequence[Block], before: int, after: int) -> set[str]:
    """Markers of the lists at ``siblings[before]`` and ``siblings[after]`` (a new list
    between them must use another one, or Markdown merges it into theirs)."""
    return {
        str(siblings[k].props.get("marker", ""))
        for k in (before, after)
        if 0 <= k < len(siblings) and siblings[k].type == "list"
    }


def _unmerged_list(spec: Mapping[str, Any], near: set[str]) -> Mapping[str, Any]:
    """A list spec whose marker keeps it apart from the neighbouring lists' ``near``."""
    props = dict(spec.get("props") or {})
    if props.get("ordered"):
        if "." in near:
            props["marker"] = ")"
    elif props.get("marker") not in _BULLETS or props.get("marker") in near:
        props["marker"] = _free_bullet(near, ordered=False)
    return {**spec, "props": props}


def _free_bullet(taken: set[str], ordered: bool) -> str:
    """A list marker that will not merge the new list into a neighbouring one."""
    if ordered:
        return "1." if "." not in taken else "1)"
    for b in _BULLETS:
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
        taken = _neighbour_bullets(siblings, index - 1, index)
        marker = _free_bullet(taken, ordered=False)
        return render(spec, marker_hint=marker), prefix, False
    if kind == "list":
        spec = _unmerged_list(spec, _neighbour_bullets(siblings, index - 1, index))
    return render(spec), prefix, False


def _insert(
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
        at = _page_start(page, siblings)
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
    new_page, first = _splice_block(page, at, at, lines, prefix, new_type, forced_id, (), pads)
    return new_page, first, new_type


def _page_start(page: Page, tops: Sequence[Block]) -> int:
    """Where a block put first on the page goes: before the first block, past the blank
    lines that part it from the frontmatter (they stay there)."""
    return tops[0].start if tops else page.body_start


def insert_block_after(
    page: Page, block: Mapping[str, Any], after_block_id: str | None = None
) -> EditResult:
    """Insert ``block`` as the next sibling of ``after_block_id``, or first on the page."""
    if after_block_id is None:
        parent, index = None, 0
    else:
        _require(page, after_block_id)
        parent, i = page.parent(after_block_id)
        index = i + 1
    new_page, first, new_type = _insert(page, parent, index, block)
    inserted = _block_at(
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
    old = _require(page, block_id)
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
            near = _neighbour_bullets(page.siblings(parent), index - 1, index + 1)
            spec = _unmerged_list(spec, near)
        lines = render(spec)
        new_type = kind if kind != "markdown" else old.type
    end = old.head_end if keep_children else old.end
    replaced = (
        [old] if not keep_children else [Block(old.type, old.text, old.start, end, id=old.id)]
    )
    new_page, _ = _splice_block(
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
        and _blank(page, end, prefix)
        and (start == page.body_start or _blank(page, start - 1, prefix))
    ):
        end += 1
    elif end >= len(lines) and start > page.body_start and _blank(page, start - 1, prefix):
        start -= 1
    return start, end


def delete_block(page: Page, block_id: str) -> EditResult:
    """Delete a block with its children."""
    old = _require(page, block_id)
    parent, _ = page.parent(block_id)
    if parent is not None and parent.type in ITEM_TYPES and old.start == parent.start:
        raise InvalidTreeOperation(
            "this block shares its first line with its list item's marker",
            hint="Delete the list item instead.",
        )
    emptied = _emptied(page, old)
    target = emptied[-1] if emptied else old  # a container left empty goes with its last child
    start, end = _removal_span(page, target)
    new_page = _splice(page, start, end, [])
    if not _others_unchanged(page, new_page, [target]):
        # The blocks around it would merge: leave a blank line in its place.
        new_page = _splice(page, target.start, target.end, [target.outer_prefix.rstrip(" ")])
        if not _others_unchanged(page, new_page, [target]):
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
    taken = _neighbour_bullets(siblings, index - 1, index)
    old = str(block.props.get("marker", "-"))
    ordered = old[-1:] in ".)"
    if old not in taken and (not ordered or old[-1:] not in taken):
        return None
    return _free_bullet(taken, ordered)


def _resolve_target(
    page: Page, block: Block, target_parent_id: str | None, after_block_id: str | None
) -> tuple[Block | None, int]:
    """Where a moved block goes: its new parent and its index among the parent's children."""
    if target_parent_id is not None:
        parent: Block | None = _require(page, target_parent_id)
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
        at = siblings[index - 1].end if index > 0 else _page_start(page, siblings)
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
    placed = _place([*before, *bare, *after], prefix)
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
    forced = _subtree_forced(block, first)
    new_page = _reparse(page, source, line_map, forced)
    moved = _block_at(new_page, first, [block.type])
    if (
        moved is None
        or moved.id != block.id
        or not _others_unchanged(page, new_page, [block, *_emptied(page, block)])
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
    block = _require(page, block_id)
    if after_block_id is not None:
        _require(page, after_block_id)
        if _is_inside(page, after_block_id, block_id):
            raise InvalidTreeOperation("a block cannot move after one of its own descendants")
    parent, index = _resolve_target(page, block, target_parent_id, after_block_id)
    return _move(page, block, parent, index, "move_block")


def indent_block(page: Page, block_id: str) -> EditResult:
    """Make a block the last child of its previous sibling (a list item)."""
    block = _require(page, block_id)
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
    placed = _place(bare, item.prefix)
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
    new_page = _reparse(page, new_source, line_map, _subtree_forced(block, at_new))
    moved = _block_at(new_page, at_new, [block.type])
    if moved is None or moved.id != block.id:
        raise InvalidTreeOperation("indenting this item would change how the page parses")
    return EditResult("indent_block", new_page, page, changed_ids(page, new_page, [block.id]))


def outdent_block(page: Page, block_id: str) -> EditResult:
    """Move a block out of its container, to just after it."""
    block = _require(page, block_id)
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
    block = _require(page, block_id)
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
    bullet = props.get("marker") if props.get("marker") in _BULLETS else "-"
    lines = list(page.source.lines)
    new_lines: list[str] = []
    for n, item in enumerate(block.children):
        marker = f"{start + n}." if ordered else str(bullet)
        reshaped = _reshape(item, lines[item.start : item.end], None, marker)
        new_lines += _place(reshaped, item.outer_prefix)
    forced = {(b.start, b.type): b.id for b in block.walk()}
    new_page = _splice(page, block.start, block.end, new_lines, forced)
    result = EditResult("set_block_type", new_page, page, changed_ids(page, new_page, [block.id]))
    return result


def toggle_heading_collapse(page: Page, block_id: str) -> EditResult:
    """Collapse or expand a heading; the state lives in frontmatter, so it is versioned."""
    block = _require(page, block_id)
    if block.type != "heading":
        raise InvalidTreeOperation(f"only headings collapse, not a {block.type}")
    collapsed = page.collapsed
    now = block.id not in collapsed
    new_list = [*collapsed, block.id] if now else [c for c in collapsed if c != block.id]
    new_page = _frontmatter_edit(page, {COLLAPSED_KEY: new_list if new_list else fm.DELETE})
    return EditResult("toggle_heading_collapse", new_page, page, [block.id], {"collapsed": now})


# -- page-level commands -------------------------------------------------------


def _frontmatter_edit(page: Page, updates: Mapping[str, Any]) -> Page:
    start, end, new = fm.edit_keys(page.source.lines, updates)
    if start == end and not new:
        return page
    return _splice(page, start, end, new)


def update_title(page: Page, title: str) -> EditResult:
    """Set the page title where it comes from: frontmatter ``title``, else the first H1."""
    if not isinstance(title, str) or not title.strip() or "\n" in title or "\r" in title:
        raise InvalidArguments("title must be one non-empty line")
    title = title.strip()
    _, source = page.title_and_source
    if source == "heading":
        heading = next(b for b in page.walk() if b.type == "heading" and b.props.get("level") == 1)
        if heading.props.get("setext"):
            new_page = _splice(
                page,
                heading.start,
                heading.start + 1,
                _place([title], heading.outer_prefix),
                {(heading.start, "heading"): heading.id},
            )
        else:
            result = replace_block(
                page, heading.id, {"type": "heading", "text": title, "props": {"level": 1}}
            )
            result.command = "page.head.updateTitle"
            return result
    else:
        new_page = _frontmatter_edit(page, {"title": title})
    return EditResult("page.head.updateTitle", new_page, page, changed_ids(page, new_page))


def update_options(page: Page, options: Mapping[str, Any]) -> EditResult:
    """Set page options (frontmatter keys); only the changed keys' lines change."""
    if not isinstance(options, Mapping) or not options:
        raise InvalidArguments("options must be a non-empty object")
    unknown = [k for k in options if k not in PAGE_OPTIONS]
    if unknown:
        raise UnsupportedOption(
            f"unsupported page option(s): {', '.join(sorted(unknown))}",
            hint=f"Supported options: {', '.join(PAGE_OPTIONS)}.",
            unsupported=sorted(unknown),
        )
    bad = [k for k, v in options.items() if not isinstance(v, bool)]
    if bad:
        raise InvalidArguments(f"page options must be true or false: {', '.join(bad)}")
    if page.frontmatter is not None and not page.frontmatter.valid:
        # (refused even when nothing would change: the options read from it are not its own)
        raise InvalidFrontmatter(
            f"the page's options cannot be set: {page.frontmatter.error}",
            hint="Fix the YAML between the '---' lines at the top of the file first; "
            "mnote.page.get shows what is wrong in its warnings.",
        )
    current = page.options
    meta = page.meta
    updates = {
        k: v for k, v in options.items() if current[k] != v or (k in meta and meta[k] is not v)
    }
    updates = {k: v for k, v in updates.items() if v or k in meta}
    new_page = _frontmatter_edit(page, updates) if updates else page
    details = {"pageOptions": new_page.options, "changedOptions": sorted(updates)}
    return EditResult("page.layout.updateOptions", new_page, page, [], details)


def _render_content(
    content: Sequence[Mapping[str, Any] | str], page: Page
) -> tuple[list[str], list[tuple[int, str, str]]]:
    """Lines for a list of block specs, one blank line between blocks; ids asked to be kept."""
    if not isinstance(content, Sequence) or isinstance(content, str | bytes):
        raise InvalidArguments("content must be an array of blocks")
    out: list[str] = []
    keep: list[tuple[int, str, str]] = []
    prev_kind = ""
    for spec in content:
        if isinstance(spec, str):
            spec = {"markdown": spec}
        kind = spec_type(spec)
        if kind in ITEM_TYPES:
            lines = render(spec, marker_hint="1." if spec.get("props", {}).get("ordered") else "-")
        else:
            lines = render(spec)
        if out and not (kind in ITEM_TYPES and prev_kind in ITEM_TYPES):
            out.append("")
        ident = spec.get("id")
        if isinstance(ident, str) and page.has_block(ident) and kind != "markdown":
            keep.append((len(out), kind, ident))
        out += lines
        prev_kind = kind
    return out, keep


def save(
    page: Page, content: Sequence[Mapping[str, Any] | str], mode: str = "replace"
) -> EditResult:
    """``mnote.page.save``: replace the body with ``content`` blocks, or append them."""
    if mode not in ("replace", "append"):
        raise InvalidArguments("mode must be 'replace' or 'append'")
    lines, keep = _render_content(content, page)
    if not lines and mode == "append":
        raise InvalidArguments("content must not be empty for append")
    body = page.body_start
    n = len(page.source)
    if mode == "replace":
        start, end = body, n
        new_source = page.source.replace_lines(start, end, lines)
        first = start
        line_map = None
    else:
        last = n
        while last > body and not page.source.lines[last - 1].strip():
            last -= 1
        sep = [""] if last > body else []
        start = last
        new_source = page.source.replace_lines(last, n, [*sep, *lines])
        first = last + len(sep)
        line_map = {i: i for i in range(last)}
    forced = {(first + offset, kind): ident for offset, kind, ident in keep}
    new_page = _reparse(page, new_source, line_map, forced or None)
    details = {"mode": mode, "appendedBlocks": len(content) if mode == "append" else 0}
    return EditResult("page.body.save", new_page, page, changed_ids(page, new_page), details)


# -- dispatch by name ------------------------------------------------------------


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
