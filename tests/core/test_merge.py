"""The three-way merge of a page on its top-level blocks (core.merge)."""

from __future__ import annotations

import random

from mnoted.core.merge import chunks, merge3, merge_pages
from mnoted.core.page import parse_page

BASE = "---\ntitle: Plan\n---\n# Plan\n\nFirst.\n\nSecond.\n\n- a\n- b\n\nLast.\n"


def page(text: str):  # type: ignore[no-untyped-def]
    return parse_page(text.encode(), "p.md")


def test_chunks_join_back_to_the_page() -> None:
    assert "".join(chunks(page(BASE))) == BASE
    crlf = BASE.replace("\n", "\r\n")
    assert "".join(chunks(page(crlf))) == crlf


def test_changes_to_different_blocks_merge() -> None:
    ours = BASE.replace("First.", "First, by the person.")
    theirs = BASE.replace("Last.", "Last, by the agent.")
    merged = merge_pages(page(BASE), page(ours), page(theirs))
    assert (
        merged
        == BASE.replace("First.", "First, by the person.")
        .replace("Last.", "Last, by the agent.")
        .encode()
    )


def test_changes_to_the_same_block_conflict_and_equal_ones_merge() -> None:
    ours = BASE.replace("Second.", "Second (person).")
    theirs = BASE.replace("Second.", "Second (agent).")
    assert merge_pages(page(BASE), page(ours), page(theirs)) is None
    assert merge_pages(page(BASE), page(ours), page(ours)) == ours.encode()


def test_merge3_on_generated_sequences_keeps_both_sides_or_refuses() -> None:
    rng = random.Random(3)
    for _ in range(2000):
        base = [f"b{i}" for i in range(rng.randint(0, 8))]
        ours, theirs = list(base), list(base)
        for side, tag in ((ours, "o"), (theirs, "t")):
            for _ in range(rng.randint(0, 2)):
                k = rng.randint(0, len(side))
                if rng.random() < 0.5 or not side or k == len(side):
                    side.insert(k, f"{tag}{rng.randint(0, 99)}")
                else:
                    side[k] = f"{tag}{rng.randint(0, 99)}"
        merged = merge3(base, ours, theirs)
        if merged is None:
            continue
        assert merge3(base, ours, base) == ours and merge3(base, base, theirs) == theirs
        for item in ours + theirs:
            if item not in base:
                assert item in merged  # (neither side's new text is dropped)
        for item in base:
            if item in ours and item in theirs:
                assert item in merged  # (what both kept stays)
