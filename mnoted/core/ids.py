"""Stable block ids: assigned once, carried from one version of a page to the next.

Ids are never written into the Markdown (that would change the user's bytes);
they are derived and carried. A block with no predecessor gets an id from its
type and text (deterministic, so a rebuild from history gives the same ids). A
block of a new version inherits the id of the block it matches in the old
version: exact matches in order first, then the most similar block of the same
region, then exact matches anywhere (a moved block). An Obsidian block anchor
(``^abc-1``) is that block's id whatever else happens.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Container, Mapping, Sequence
from difflib import SequenceMatcher
from itertools import pairwise

from mnoted.core.blocks import Block

SHORT = {
    "heading": "h",
    "paragraph": "p",
    "list": "l",
    "list_item": "li",
    "task_item": "t",
    "code": "c",
    "quote": "q",
    "callout": "co",
    "table": "tb",
    "thematic_break": "hr",
    "html": "x",
    "math": "m",
    "definition": "d",
}
_SIMILAR = 0.5
_CHARS = 2000  # two texts longer than this together are compared by words
_MAX_REGION = (
    64  # pairwise similarity only inside regions this small (keeps carry-over near-linear)
)


def fresh_id(
    block: Block, used: Container[str], salt: int = 0, taken: Container[str] = frozenset()
) -> str:
    """An id derived from the block's type and text, in neither ``used`` nor ``taken``."""
    n = salt
    while True:
        seed = f"{block.type}\x00{block.text}\x00{n}".encode("utf-8", "surrogatepass")
        candidate = (
            f"{SHORT.get(block.type, 'b')}_{hashlib.blake2b(seed, digest_size=4).hexdigest()[:6]}"
        )
        if candidate not in used and candidate not in taken:
            return candidate
        n += 1


def _key(block: Block) -> tuple[str, str]:
    return (block.type, block.text)


def _similarity(a: Block, b: Block) -> float:
    """How alike two blocks' texts are, 0 to 1: by characters, or by words for long texts
    (matching characters is quadratic in the common ones, which a pasted log or a long
    table has many of)."""
    if a.text == b.text:
        return 1.0 if a.type == b.type else 0.9
    if a.type != b.type and not (a.type in _ITEMS and b.type in _ITEMS):
        return 0.0
    long = len(a.text) + len(b.text) > _CHARS
    x, y = (a.text.split(), b.text.split()) if long else (a.text, b.text)
    m = SequenceMatcher(None, x, y, autojunk=long)
    if m.real_quick_ratio() < _SIMILAR or m.quick_ratio() < _SIMILAR:
        return 0.0
    return m.ratio()


_ITEMS = frozenset({"list_item", "task_item"})


def _match_region(
    old: Sequence[Block],
    new: Sequence[Block],
    olds: list[int],
    news: list[int],
    pairs: dict[int, int],
) -> None:
    """Pair unmatched blocks ``news`` with ``olds`` of one region: in order, then by likeness."""
    matcher = SequenceMatcher(
        None, [_key(old[i]) for i in olds], [_key(new[j]) for j in news], autojunk=False
    )
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                pairs[news[j1 + k]] = olds[i1 + k]
        elif tag == "replace":
            ro, rn = olds[i1:i2], news[j1:j2]
            if len(ro) == len(rn) == 1 and old[ro[0]].type == new[rn[0]].type:
                # One block rewritten in place (the usual edit): paired whatever its
                # likeness, as the scoring below would pair it, by likeness or position.
                pairs[rn[0]] = ro[0]
                continue
            if len(ro) * len(rn) > _MAX_REGION * _MAX_REGION:
                for o, n in zip(ro, rn, strict=False):
                    if old[o].type == new[n].type:
                        pairs[n] = o
                continue
            scored = sorted(
                (-_similarity(old[o], new[n]), abs(a - b), n, o)
                for a, o in enumerate(ro)
                for b, n in enumerate(rn)
            )
            taken: set[int] = set()
            for neg, _dist, n, o in scored:
                if -neg < _SIMILAR:
                    break
                if n not in pairs and o not in taken:
                    pairs[n] = o
                    taken.add(o)
            # What is left of a one-for-one rewrite pairs by position (same type only).
            rest_o = [o for o in ro if o not in taken]
            rest_n = [n for n in rn if n not in pairs]
            if len(rest_o) == len(rest_n):
                for o, n in zip(rest_o, rest_n, strict=True):
                    if old[o].type == new[n].type:
                        pairs[n] = o


def match_blocks(
    old: Sequence[Block], new: Sequence[Block], line_map: Mapping[int, int] | None = None
) -> dict[int, int]:
    """Map index in ``new`` → index in ``old`` of the block it continues (flat, document order).

    ``line_map`` (old line → new line, for lines an edit left alone) pins blocks
    that did not change; the rest is matched region by region between them.
    """
    pairs: dict[int, int] = {}
    if line_map:
        by_span = {(b.start, b.type): j for j, b in enumerate(new)}
        for i, b in enumerate(old):
            ns = line_map.get(b.start)
            ne = line_map.get(b.end - 1)
            if ns is None or ne is None:
                continue
            j = by_span.get((ns, b.type))
            if (
                j is not None
                and j not in pairs
                and new[j].end - 1 == ne
                and new[j].signature() == b.signature()
            ):
                pairs[j] = i
    # Regions between pinned pairs, matched in order (monotone pins only).
    pins = sorted(pairs.items())
    monotone: list[tuple[int, int]] = []
    for j, i in pins:
        if not monotone or i > monotone[-1][1]:
            monotone.append((j, i))
        else:
            del pairs[j]
    bounds = [(-1, -1), *monotone, (len(new), len(old))]
    for (j0, i0), (j1, i1) in pairwise(bounds):
        news = list(range(j0 + 1, j1))
        olds = list(range(i0 + 1, i1))
        if news and olds:
            _match_region(old, new, olds, news, pairs)
    # Blocks moved elsewhere keep their id when their content is unchanged.
    used_old = set(pairs.values())
    by_key: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, b in enumerate(old):
        if i not in used_old:
            by_key[_key(b)].append(i)
    for j, b in enumerate(new):
        if j not in pairs and by_key.get(_key(b)):
            pairs[j] = by_key[_key(b)].pop(0)
    return pairs


def assign_ids(
    blocks: Sequence[Block],
    previous: Sequence[Block] = (),
    line_map: Mapping[int, int] | None = None,
    forced: Mapping[tuple[int, str], str] | None = None,
    taken: Container[str] = frozenset(),
) -> None:
    """Set ``id`` on every block of the tree ``blocks`` (in place).

    ``previous`` is the old version's tree, whose matched blocks hand on their
    ids; ``forced`` maps a new block's ``(first line, type)`` to the id it must
    get (a replaced block keeps its id whatever its new text; the outermost
    block of that line and type is meant); ``taken`` ids belong to blocks
    elsewhere in the page and are not handed out (any container: a page's 13,000 ids are
    only looked up in, never copied).
    """
    new_flat = [b for top in blocks for b in top.walk()]
    old_flat = [b for top in previous for b in top.walk()]
    pairs = match_blocks(old_flat, new_flat, line_map) if old_flat else {}
    by_index: dict[int, str] = {}
    if forced:
        for j, b in enumerate(new_flat):
            ident = forced.get((b.start, b.type))
            if ident is not None and ident not in by_index.values():
                by_index[j] = ident
    anchors: set[str] = set()
    for b in new_flat:
        if b.anchor and b.anchor not in anchors and b.anchor not in taken:
            anchors.add(b.anchor)
        else:
            b.anchor = None
    used: set[str] = set(anchors)  # with ``taken``: ids no other block may get
    for j, ident in list(by_index.items()):
        if new_flat[j].anchor is None and ident not in used and ident not in taken:
            used.add(ident)
        else:
            del by_index[j]
    reserved = {b.id for b in old_flat}
    pending: list[Block] = []
    for j, b in enumerate(new_flat):
        if b.anchor:
            b.id = b.anchor
            continue
        if j in by_index:
            b.id = by_index[j]
            continue
        carried = old_flat[pairs[j]].id if j in pairs else ""
        if carried and carried not in used and carried not in taken:
            b.id = carried
            used.add(carried)
        else:
            pending.append(b)
    avoid = used | reserved
    for b in pending:
        b.id = fresh_id(b, avoid, taken=taken)
        avoid.add(b.id)
