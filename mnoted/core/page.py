"""The page aggregate: a document's title, options and block tree over its exact bytes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from mnoted.core import frontmatter as fm
from mnoted.core.blocks import Block, find_parent, walk
from mnoted.core.ids import assign_ids
from mnoted.core.parse import parse_blocks
from mnoted.core.source import Source
from mnoted.errors import BlockNotFound

PAGE_OPTIONS = ("wideLayout", "smallText", "showToc", "protectEditing")
COLLAPSED_KEY = "collapsedBlocks"


def name_stem(name: str) -> str:
    """``notes/Plan.md`` → ``Plan``."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    return base[:-3] if base.lower().endswith(".md") else base


@dataclass
class Page:
    """A parsed document. Treat as immutable: commands return new pages."""

    source: Source
    name: str
    frontmatter: fm.Frontmatter | None
    blocks: list[Block]
    # After an incremental re-parse: ids of the old and new blocks inside the
    # re-parsed window. Blocks outside it are unchanged by construction.
    window: tuple[frozenset[str], frozenset[str]] | None = field(default=None, repr=False)
    _index: dict[str, Block] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._index = {b.id: b for b in self.walk()}

    # -- reading -------------------------------------------------------------
    @property
    def body_start(self) -> int:
        return self.frontmatter.end if self.frontmatter else 0

    @property
    def meta(self) -> dict[str, Any]:
        return self.frontmatter.data if self.frontmatter else {}

    @property
    def title(self) -> str:
        return self.title_and_source[0]

    @property
    def title_and_source(self) -> tuple[str, str]:
        """The title and where it comes from: ``frontmatter``, ``heading`` or ``name``."""
        value = self.meta.get("title")
        if (
            isinstance(value, str | int | float)
            and not isinstance(value, bool)
            and str(value).strip()
        ):
            return str(value).strip(), "frontmatter"
        for b in self.walk():
            if b.type == "heading" and b.props.get("level") == 1:
                return b.text.strip(), "heading"
        return name_stem(self.name), "name"

    @property
    def options(self) -> dict[str, bool]:
        return {k: self.meta.get(k) is True for k in PAGE_OPTIONS}

    @property
    def collapsed(self) -> list[str]:
        value = self.meta.get(COLLAPSED_KEY)
        return [str(v) for v in value] if isinstance(value, list) else []

    @property
    def warnings(self) -> list[str]:
        out = []
        if self.frontmatter is not None and not self.frontmatter.valid:
            out.append(f"frontmatter ignored: {self.frontmatter.error}")
        return out

    def walk(self) -> Iterator[Block]:
        for b in self.blocks:
            yield from b.walk()

    def block_ids(self) -> list[str]:
        return [b.id for b in self.walk()]

    def block(self, block_id: str) -> Block:
        try:
            return self._index[block_id]
        except KeyError:
            raise BlockNotFound(f"no block {block_id!r} on this page", block_id=block_id) from None

    @property
    def index(self) -> Mapping[str, Block]:
        """Blocks by id."""
        return self._index

    def has_block(self, block_id: str) -> bool:
        return block_id in self._index

    def parent(self, block_id: str) -> tuple[Block | None, int]:
        """The parent block (None at the top) and the index among its siblings."""
        self.block(block_id)
        return find_parent(self.blocks, block_id)

    def siblings(self, parent: Block | None) -> list[Block]:
        return self.blocks if parent is None else parent.children

    def to_bytes(self) -> bytes:
        return self.source.to_bytes()

    def to_dict(self) -> dict[str, Any]:
        title, title_from = self.title_and_source
        out: dict[str, Any] = {
            "title": title,
            "titleSource": title_from,
            "pageOptions": self.options,
            "frontmatter": self.meta,
            "blocks": [b.to_dict() for b in self.blocks],
        }
        if self.warnings:
            out["warnings"] = self.warnings
        return out


def parse_page(
    data: bytes | str | Source,
    name: str = "",
    *,
    previous: Page | None = None,
    line_map: Mapping[int, int] | None = None,
    forced: Mapping[tuple[int, str], str] | None = None,
    ids: Sequence[str] | None = None,
) -> Page:
    """Parse a document into a page.

    Block ids come from ``ids`` (a stored list, in document order) when it fits,
    else are carried from ``previous`` (matching blocks, pinned by ``line_map``
    where the caller knows which lines an edit kept), else derived afresh.
    When ``previous`` is given without a ``line_map``, one is computed by diffing lines.
    """
    source = data if isinstance(data, Source) else Source.from_data(data)
    front = fm.find(source.lines)
    blocks = parse_blocks(source.lines, front.end if front else 0)
    flat = [b for top in blocks for b in top.walk()]
    if ids is not None and len(ids) == len(flat) and len(set(ids)) == len(ids):
        for b, ident in zip(flat, ids, strict=True):
            b.id = ident
    else:
        old_blocks: Sequence[Block] = ()
        if previous is not None:
            old_blocks = previous.blocks
            if line_map is None:
                line_map = diff_line_map(previous.source.lines, source.lines)
        assign_ids(blocks, old_blocks, line_map, forced)
    return Page(source, name, front, blocks)


def _shifted(block: Block, delta: int) -> Block:
    """A copy of ``block`` (and its subtree) moved ``delta`` lines down."""
    return Block(
        block.type,
        block.text,
        block.start + delta,
        block.end + delta,
        block.props,
        [_shifted(c, delta) for c in block.children],
        block.head_end + delta,
        block.prefix,
        block.outer_prefix,
        block.anchor,
        block.id,
    )


def _same(a: Block, b: Block, delta: int) -> bool:
    return (
        a.type == b.type
        and a.start + delta == b.start
        and a.end + delta == b.end
        and a.text == b.text
    )


def reparse_splice(
    page: Page,
    source: Source,
    start: int,
    end: int,
    n_new: int,
    forced: Mapping[tuple[int, str], str] | None = None,
) -> Page:
    """The page after lines ``start:end`` became ``n_new`` lines, parsing only what changed.

    The window re-parsed reaches one untouched top-level block past each side of
    the edit; when those come out of the window exactly as they were, the rest of
    the page parses as before and is reused. Otherwise the whole page is parsed.
    """
    line_map = splice_line_map(len(page.source), start, end, n_new)
    tops = page.blocks
    front = page.frontmatter
    delta = n_new - (end - start)
    if end <= page.body_start and (page.frontmatter is not None or start == end == 0):
        # Only the frontmatter changed: the body parses as before, a few lines lower.
        new_front = fm.find(source.lines)
        if (new_front.end if new_front else 0) == page.body_start + delta:
            moved = [_shifted(b, delta) for b in tops]
            return Page(source, page.name, new_front, moved, (frozenset(), frozenset()))
    if start <= page.body_start or len(tops) < 3:
        return parse_page(source, page.name, previous=page, line_map=line_map, forced=forced)
    touched = [k for k, b in enumerate(tops) if b.end >= start and b.start <= end]
    first = (
        touched[0] if touched else next((k for k, b in enumerate(tops) if b.start > end), len(tops))
    ) - 1
    last = (touched[-1] if touched else first) + 1
    w0 = tops[first].start if first >= 0 else page.body_start
    w1 = tops[last].end if last < len(tops) else len(page.source)
    if w1 < end:
        w1 = len(page.source)
    window = parse_blocks(source.lines[w0 : w1 + delta])
    window = [_shifted(b, w0) for b in window]
    if first >= 0 and (not window or not _same(tops[first], window[0], 0)):
        return parse_page(source, page.name, previous=page, line_map=line_map, forced=forced)
    if last < len(tops) and (not window or not _same(tops[last], window[-1], delta)):
        return parse_page(source, page.name, previous=page, line_map=line_map, forced=forced)
    lo = max(first, 0)
    hi = min(last, len(tops) - 1)
    before = tops[:lo]
    after = [_shifted(b, delta) for b in tops[hi + 1 :]]
    taken = {b.id for b in walk(before)} | {b.id for b in walk(after)}
    assign_ids(window, tops[lo : hi + 1], line_map, forced, taken)
    old_ids = frozenset(b.id for b in walk(tops[lo : hi + 1]))
    new_ids = frozenset(b.id for b in walk(window))
    return Page(source, page.name, front, [*before, *window, *after], (old_ids, new_ids))


def diff_line_map(old: Sequence[str], new: Sequence[str]) -> dict[int, int]:
    """Old line → new line for every line a change left in place."""
    out: dict[int, int] = {}
    matcher = SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                out[i1 + k] = j1 + k
    return out


def splice_line_map(n_old: int, start: int, end: int, n_new: int) -> dict[int, int]:
    """Old line → new line when lines ``start:end`` were replaced by ``n_new`` lines."""
    delta = n_new - (end - start)
    out = {i: i for i in range(start)}
    out.update({i: i + delta for i in range(end, n_old)})
    return out
