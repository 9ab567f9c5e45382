"""The page aggregate: a document's title, options and block tree over its exact bytes."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from mnoted.core import frontmatter as fm
from mnoted.core.blocks import Block, find_parent, walk
from mnoted.core.ids import assign_ids
from mnoted.core.parse import parse_blocks
from mnoted.core.sequences import shared_ends
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
        if not self._index:
            self._index = {b.id: b for b in walk(self.blocks)}

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
        meta = self.meta
        for key in PAGE_OPTIONS:
            if key in meta and not isinstance(meta[key], bool):
                out.append(
                    f"option {key} ignored: {meta[key]!r} is not true or false (read as false)"
                )
        return out

    def walk(self) -> list[Block]:
        return walk(self.blocks)

    def block_ids(self) -> list[str]:
        return list(self._index)  # built in document order

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
    flat = walk(blocks)
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
    # top-level blocks are in line order: bisect for those the splice touches
    k0 = bisect_left(tops, start, key=lambda b: b.end)
    k1 = bisect_right(tops, end, key=lambda b: b.start)
    first = k0 - 1 if k0 < k1 else k1 - 1
    last = (k1 - 1 if k0 < k1 else first) + 1
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
    after = [_shifted(b, delta) for b in tops[hi + 1 :]] if delta else tops[hi + 1 :]
    old_window = walk(tops[lo : hi + 1])
    old_ids = frozenset(b.id for b in old_window)
    assign_ids(window, tops[lo : hi + 1], line_map, forced, _Outside(page._index, old_ids))
    new_window = walk(window)
    new_ids = frozenset(b.id for b in new_window)
    blocks = [*before, *window, *after]
    if delta:
        return Page(source, page.name, front, blocks, (old_ids, new_ids))
    # The blocks outside the window are the very objects of the old page: its index (copied
    # in C) is the new one but for the window, whose blocks take their places when they kept
    # their ids in order, and else are spliced in by slicing around the window.
    if [b.id for b in new_window] == [b.id for b in old_window]:
        index = page._index.copy()
        index.update((b.id, b) for b in new_window)
        return Page(source, page.name, front, blocks, (old_ids, new_ids), index)
    items = list(page._index.items())
    i0 = page.block_ids().index(old_window[0].id)
    index = dict(items[:i0])
    index.update((b.id, b) for b in new_window)
    index.update(items[i0 + len(old_window) :])
    return Page(source, page.name, front, blocks, (old_ids, new_ids), index)


class _Outside:
    """The ids of a page's blocks outside an edit's window, looked up without a copy."""

    __slots__ = ("_all", "_window")

    def __init__(self, index: Mapping[str, Block], window: frozenset[str]) -> None:
        self._all, self._window = index, window

    def __contains__(self, ident: object) -> bool:
        return ident in self._all and ident not in self._window


_EXACT_LINES = 2000


def diff_line_map(old: Sequence[str], new: Sequence[str]) -> Mapping[int, int]:
    """Old line → new line for every line a change left in place.

    The lines both versions share at their start and end are mapped as they are; only
    those between are matched by ``SequenceMatcher``, which is quadratic in a page's many
    blank lines, so matching whole pages would cost seconds on a large one. Where more
    than :data:`_EXACT_LINES` lines changed (a long page rewritten or reordered), lines
    found in more than 1% of them (blank ones) do not start a match (difflib's
    ``autojunk``): linear enough, and nearly every line that is not blank is still found.
    """
    head, tail = shared_ends(old, new)
    middle: dict[int, int] = {}
    a, b = old[head : len(old) - tail], new[head : len(new) - tail]
    matcher = SequenceMatcher(None, a, b, autojunk=max(len(a), len(b)) > _EXACT_LINES)
    for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                middle[head + i1 + k] = head + j1 + k
    return SpliceLineMap(len(old), head, len(old) - tail, len(new) - head - tail, middle)


class SpliceLineMap(Mapping[int, int]):
    """Old line → new line when lines ``start:end`` were replaced by ``n_new`` lines (of
    which ``within`` maps those kept).

    Computed on lookup: a dict of every line of a 1 MB page would cost more than the edit.
    """

    def __init__(
        self, n_old: int, start: int, end: int, n_new: int, within: dict[int, int] | None = None
    ) -> None:
        self._n_old, self._start, self._end = n_old, start, end
        self._delta = n_new - (end - start)
        self._within = within or {}

    def __getitem__(self, line: int) -> int:
        if 0 <= line < self._start:
            return line
        if self._end <= line < self._n_old:
            return line + self._delta
        return self._within[line]

    def __iter__(self) -> Iterator[int]:
        yield from range(self._start)
        yield from self._within
        yield from range(self._end, self._n_old)

    def __len__(self) -> int:
        return self._start + len(self._within) + self._n_old - self._end


def splice_line_map(n_old: int, start: int, end: int, n_new: int) -> Mapping[int, int]:
    """Old line → new line when lines ``start:end`` were replaced by ``n_new`` lines."""
    return SpliceLineMap(n_old, start, end, n_new)
