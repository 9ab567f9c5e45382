"""Three-way merge of a page on its top-level blocks (pure).

A page is cut into chunks: its frontmatter, then each top-level block with the blank lines
after it. Each side's changes against the common base are the runs of chunks that differ
(``difflib``); changes of the two sides merge when they are apart: a run of base chunks
that both sides change, or a place where both insert or where one's change touches the
other's, is a conflict (None), unless both made the very same change. Nothing is ever
written with conflict markers.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from difflib import SequenceMatcher

from mnoted.core.page import Page

_Change = tuple[int, int, list[str], int]  # base start, base end, replacement, side


def chunks(page: Page) -> list[str]:
    """The page's text cut before each top-level block (and after its frontmatter)."""
    src = page.source
    lines = [line + end for line, end in zip(src.lines, src.ends, strict=True)]
    cuts = {0, len(lines)}
    if page.frontmatter is not None:
        cuts.add(page.frontmatter.end)
    cuts.update(b.start for b in page.blocks)
    edges = sorted(c for c in cuts if 0 <= c <= len(lines))
    return ["".join(lines[a:b]) for a, b in itertools.pairwise(edges) if b > a]


def _changes(base: Sequence[str], other: Sequence[str], side: int) -> list[_Change]:
    matcher = SequenceMatcher(None, base, other, autojunk=False)
    return [
        (i1, i2, list(other[j1:j2]), side)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def merge3(base: Sequence[str], ours: Sequence[str], theirs: Sequence[str]) -> list[str] | None:
    """``base`` with the changes of both ``ours`` and ``theirs``, or None if they meet."""
    changes = sorted(
        _changes(base, ours, 0) + _changes(base, theirs, 1), key=lambda c: (c[0], c[1])
    )
    out: list[str] = []
    pos = 0
    i = 0
    while i < len(changes):
        cluster = [changes[i]]
        end = changes[i][1]
        i += 1
        while i < len(changes) and changes[i][0] <= end:  # overlapping or touching
            cluster.append(changes[i])
            end = max(end, changes[i][1])
            i += 1
        if len({c[3] for c in cluster}) > 1:  # both sides changed here
            if len(cluster) != 2 or cluster[0][:3] != cluster[1][:3]:
                return None
            cluster = cluster[:1]  # (the very same change on both sides)
        for c_start, c_end, replacement, _ in cluster:  # (one side's, apart, in order)
            out.extend(base[pos:c_start])
            out.extend(replacement)
            pos = c_end
    out.extend(base[pos:])
    return out


def merge_pages(base: Page, ours: Page, theirs: Page) -> bytes | None:
    """The bytes of ``base`` with both sides' block changes, or None where they conflict
    (``ours``'s byte order mark kept, every line's own ending kept)."""
    merged = merge3(chunks(base), chunks(ours), chunks(theirs))
    if merged is None:
        return None
    text = ("\ufeff" if ours.source.bom else "") + "".join(merged)
    return text.encode("utf-8", "surrogateescape")
