"""Three-way merge of one page on its blocks and frontmatter keys. Pure: bytes in, bytes out.

``merge_page(base, ours, theirs)`` returns the merged bytes and the versions it
held back. What holds, and why a sync built on it never loses a version:

- Where only one side changed the page, the result is that side's bytes exactly.
- The body is cut into *chunks*: each leaf block (a paragraph, a heading, a list
  item's own lines, a whole quote or table...) with the blank lines before it, so
  the chunks of a page, joined, are its bytes. Each side's changes are the chunk
  edits a sequence diff finds against the base. Edits to different chunks apply
  both; insertions at the same place keep both (ours first).
- Where the two sides' edits touch the same chunks differently, the file keeps
  ours and theirs is *held*: a :class:`Held` carrying both versions of the
  region, for a person to apply. An edit against a deletion keeps the edit.
  No conflict marker is ever written into the page.
- Frontmatter merges per top-level key, with the same rules (a key changed on
  both sides keeps ours and holds theirs). Frontmatter that does not parse on
  some side merges as one unit.

Every chunk a side added or changed is therefore in the result or in a held
conflict (``tests/core/test_merge.py`` checks it over generated pages and the corpus).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

from mnoted.core import frontmatter as fm
from mnoted.core.blocks import ITEM_TYPES, Block
from mnoted.core.parse import parse_blocks
from mnoted.core.source import BOM, Source


@dataclass(frozen=True)
class Held:
    """A version held back: ``theirs`` could not go into the page next to ``ours``.

    ``where`` is ``"body"`` or ``"frontmatter"`` (``key`` then names the key, or is
    empty when the frontmatter merged as one unit). ``ours`` is the text the page
    keeps for the region (empty when the region holds nothing on our side), ``theirs``
    the other side's text for it; applying the held version replaces the first with
    the second.
    """

    where: str
    ours: str
    theirs: str
    base: str
    key: str = ""


@dataclass(frozen=True)
class MergeResult:
    """Merged bytes and what was held back (empty when both sides went in whole)."""

    data: bytes
    held: tuple[Held, ...]

    @property
    def clean(self) -> bool:
        return not self.held


Chunk = str
_Edit = tuple[int, int, tuple[Chunk, ...], int]  # base start, base end, replacement, side (0 ours)


def merge_page(base: bytes | None, ours: bytes, theirs: bytes) -> MergeResult:
    """Merge ``ours`` and ``theirs`` of one page against their common ``base``.

    ``base`` None means both sides added the page: merged against an empty page, so
    what they share stays once and what differs is kept or held.
    """
    if ours == theirs or theirs == base:
        return MergeResult(ours, ())
    if ours == base:
        return MergeResult(theirs, ())
    b, o, t = (_Split.of(x) for x in (base or b"", ours, theirs))
    held: list[Held] = []
    header = _merge_header(b, o, t, held)
    body = _merge_chunks(b.body, o.body, t.body, held, "body")
    bom = o.bom if o.bom != b.bom else t.bom
    text = "".join(header) + "".join(body)
    return MergeResult(
        ((BOM if bom else "") + text).encode("utf-8", "surrogateescape"), tuple(held)
    )


@dataclass(frozen=True)
class _Split:
    bom: bool
    front: fm.Frontmatter | None
    header: tuple[str, ...]  # the frontmatter's lines with their terminators
    body: tuple[Chunk, ...]

    @classmethod
    def of(cls, data: bytes) -> _Split:
        source = Source.from_data(data)
        full = [ln + e for ln, e in zip(source.lines, source.ends, strict=True)]
        front = fm.find(source.lines)
        start = front.end if front else 0
        blocks = parse_blocks(source.lines, start)
        ends = sorted({e for e in _unit_ends(blocks) if start < e <= len(full)})
        chunks: list[Chunk] = []
        at = start
        for end in ends:
            if end > at:
                chunks.append("".join(full[at:end]))
                at = end
        if at < len(full):
            chunks.append("".join(full[at:]))
        return cls(source.bom, front, tuple(full[:start]), tuple(chunks))


def _unit_ends(blocks: Sequence[Block]) -> list[int]:
    """Line ends of the merge units: leaf blocks, list items' own lines, whole quotes."""
    out: list[int] = []
    for block in blocks:
        if block.type == "list":
            out.extend(_unit_ends(block.children))
        elif block.type in ITEM_TYPES:
            out.append(block.head_end)
            out.extend(_unit_ends(block.children))
            out.append(block.end)
        else:  # a leaf, or a quote or callout: one unit (prefixed lines)
            out.append(block.end)
    return out


def _edits(base: Sequence[Chunk], side: Sequence[Chunk], who: int) -> list[_Edit]:
    matcher = SequenceMatcher(None, base, side, autojunk=False)
    return [
        (i1, i2, tuple(side[j1:j2]), who)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def _overlap(x: _Edit, y: _Edit) -> bool:
    """Whether two edits of different sides touch the same base chunks."""
    (a1, b1, _, _), (a2, b2, _, _) = x, y
    if a1 == b1 and a2 == b2:
        return False  # two insertions: both kept, in a fixed order
    if a1 == b1:
        return a2 < a1 < b2
    if a2 == b2:
        return a1 < a2 < b1
    return a1 < b2 and a2 < b1


def _apply(base: Sequence[Chunk], lo: int, hi: int, edits: Sequence[_Edit]) -> tuple[Chunk, ...]:
    out: list[Chunk] = []
    at = lo
    for a, b, rep, _ in edits:
        out.extend(base[at:a])
        out.extend(rep)
        at = b
    out.extend(base[at:hi])
    return tuple(out)


def _merge_chunks(
    base: Sequence[Chunk],
    ours: Sequence[Chunk],
    theirs: Sequence[Chunk],
    held: list[Held],
    where: str,
) -> list[Chunk]:
    edits = _edits(base, ours, 0) + _edits(base, theirs, 1)
    edits.sort(key=lambda e: (e[0], e[1] != e[0], e[3]))
    clusters: list[list[_Edit]] = []
    for edit in edits:
        if clusters and any(m[3] != edit[3] and _overlap(m, edit) for m in clusters[-1]):
            clusters[-1].append(edit)
        else:
            clusters.append([edit])
    out: list[Chunk] = []
    at = 0
    inserted: tuple[int, tuple[Chunk, ...]] = (-1, ())
    for cluster in clusters:
        lo = min(e[0] for e in cluster)
        hi = max(e[1] for e in cluster)
        out.extend(base[at:lo])
        at = max(at, hi)
        if len(cluster) == 1:
            a, b, rep, who = cluster[0]
            if a == b and who == 1 and inserted[0] == a:  # both inserted here: theirs after
                rep = tuple(c for c in rep if c not in inserted[1])
            elif a == b and who == 0:
                inserted = (a, rep)
            out.extend(rep)
            continue
        mine = _apply(base, lo, hi, [e for e in cluster if e[3] == 0])
        other = _apply(base, lo, hi, [e for e in cluster if e[3] == 1])
        if mine == other:
            out.extend(mine)
        elif not mine and lo < hi:
            out.extend(other)  # deleted here, edited there: the edit stays
        elif not other and lo < hi:
            out.extend(mine)
        else:
            out.extend(mine)
            held.append(Held(where, "".join(mine), "".join(other), "".join(base[lo:hi])))
    out.extend(base[at:])
    return out


def _merge_header(b: _Split, o: _Split, t: _Split, held: list[Held]) -> list[str]:
    """The merged frontmatter lines (per key when every side's parses, else as one unit)."""
    if o.header == t.header or t.header == b.header:
        return list(o.header)
    if o.header == b.header:
        return list(t.header)
    units = [_key_units(x) for x in (b, o, t)]
    if any(u is None for u in units):
        text_o, text_t = "".join(o.header), "".join(t.header)
        if not o.header:
            return list(t.header)
        if t.header:
            held.append(Held("frontmatter", text_o, text_t, "".join(b.header)))
        return list(o.header)
    ub, uo, ut = (u or {} for u in units)
    merged: dict[str, str] = {}
    order = list(uo)
    for i, key in enumerate(ut):
        if key not in uo and key not in ub:
            before = next((k for k in reversed(list(ut)[:i]) if k in order), None)
            order.insert(order.index(before) + 1 if before is not None else len(order), key)
    for key in order:
        vb, vo, vt = ub.get(key), uo.get(key), ut.get(key)
        if vo == vt or vt == vb:
            value = vo
        elif vo == vb or vo is None:
            value = vt
        elif vt is None:
            value = vo
        else:
            value = vo
            held.append(Held("frontmatter", vo, vt, vb or "", key=key))
        if value is not None:
            merged[key] = value
    for key, vt in ut.items():  # ours deleted a key theirs kept unchanged: gone
        if key not in merged and key not in order and vt != ub.get(key):
            merged[key] = vt
    if not merged or set(merged) <= {"\0open", "\0close"}:
        return []
    opening = merged.pop("\0open", None) or "---\n"
    closing = merged.pop("\0close", None) or "---\n"
    preamble = merged.pop("", "")
    return [opening, preamble, *merged.values(), closing]


def _key_units(split: _Split) -> dict[str, str] | None:
    """The frontmatter as units: fences, the lines before the first key, each key's lines.

    None when the frontmatter does not parse or names a key twice (merged as a unit).
    """
    if split.front is None:
        return {}
    if not split.front.valid:
        return None
    header = split.header
    body = [ln.rstrip("\r\n") for ln in header[1:-1]]
    spans = fm._key_spans(body)
    starts = sorted(s for s, _ in spans.values())
    if len(starts) != len(spans) or len(spans) != len(split.front.data):
        return None
    out: dict[str, str] = {
        "\0open": header[0],
        "": "".join(header[1 : 1 + (starts or [len(body)])[0]]),
    }
    by_start = {s: k for k, (s, _) in spans.items()}
    for i, s in enumerate(starts):
        e = starts[i + 1] if i + 1 < len(starts) else len(body)
        out[by_start[s]] = "".join(header[1 + s : 1 + e])
    out["\0close"] = header[-1]
    return out
