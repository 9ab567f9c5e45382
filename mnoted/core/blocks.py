"""The block tree of a page: what each block is and where its lines are.

A block knows its source line span, so that every edit can be a splice of the
source, and its container prefix (the list indentation or ``> `` marks that
its lines carry), so that new text can be written where it belongs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

BLOCK_TYPES = (
    "heading",
    "paragraph",
    "list",
    "list_item",
    "task_item",
    "code",
    "quote",
    "callout",
    "table",
    "thematic_break",
    "html",
    "math",
    "definition",
)
CONTAINER_TYPES = frozenset({"list", "list_item", "task_item", "quote", "callout"})
ITEM_TYPES = frozenset({"list_item", "task_item"})


@dataclass(slots=True)
class Block:
    """One block of a page.

    ``start:end`` are source lines (0-based, end exclusive) covering the block and
    its children; ``head_end`` ends the block's own lines (a list item's text, a
    callout's title line) before its children. ``prefix`` is what every line of
    the block's children starts with; ``outer_prefix`` what the block's own
    continuation lines start with (its parent's ``prefix``).
    """

    type: str
    text: str
    start: int
    end: int
    props: dict[str, Any] = field(default_factory=dict)
    children: list[Block] = field(default_factory=list)
    head_end: int = -1
    prefix: str = ""
    outer_prefix: str = ""
    anchor: str | None = None
    id: str = ""

    def __post_init__(self) -> None:
        if self.head_end < 0:
            self.head_end = self.end

    def signature(self) -> tuple[Any, ...]:
        """What the block is apart from its children: equal signatures, same block content.

        A list, quote or callout is its props (its text is its children's: a callout's
        type, title and fold are props); the parser writes
        props in a fixed order, so they compare as they are. A block of a type that holds
        no others also counts its lines: the same text can be written in more or fewer of
        them (a code fence that lost its closing line, a setext heading turned ATX).
        """
        if self.type in ("list", "quote", "callout"):
            return (self.type, tuple(self.props.items()))
        if self.type not in CONTAINER_TYPES:
            return (self.type, self.text, tuple(self.props.items()), self.end - self.start)
        return (self.type, self.text, tuple(self.props.items()))

    def walk(self) -> list[Block]:
        """This block and its descendants, in document order."""
        return walk([self])

    def to_dict(self, *, children: bool = True) -> dict[str, Any]:
        """The JSON shape agents see (line numbers are 1-based and inclusive)."""
        out: dict[str, Any] = {"id": self.id, "type": self.type, "text": self.text}
        if self.props:
            out["props"] = dict(self.props)
        out["lines"] = [self.start + 1, self.end]
        if children and self.children:
            out["children"] = [c.to_dict() for c in self.children]
        return out


def walk(blocks: Sequence[Block]) -> list[Block]:
    """``blocks`` and their descendants, in document order (a list: 13,000 blocks of a
    1 MB page are flattened several times per edit, and nested generators cost 4x more)."""
    out: list[Block] = []
    stack = list(reversed(blocks))
    push, pop, append = stack.extend, stack.pop, out.append
    while stack:
        block = pop()
        append(block)
        if block.children:
            push(reversed(block.children))
    return out


def find_parent(blocks: list[Block], block_id: str) -> tuple[Block | None, int]:
    """The parent (None for the page root) and index of the block with ``block_id``."""

    def search(parent: Block | None, siblings: list[Block]) -> tuple[Block | None, int] | None:
        for i, b in enumerate(siblings):
            if b.id == block_id:
                return parent, i
            found = search(b, b.children)
            if found is not None:
                return found
        return None

    found = search(None, blocks)
    if found is None:
        raise KeyError(block_id)
    return found
