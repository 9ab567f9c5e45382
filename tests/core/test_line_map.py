"""Carrying block ids over an edit made outside mnoted: the line map, the likeness of blocks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnoted.core import ids as ids_module
from mnoted.core import page as page_module
from mnoted.core.page import diff_line_map, parse_page

lines = st.lists(st.sampled_from(["", "a", "b", "- c", "# d"]), max_size=30)


@given(
    old=lines, edits=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3), lines), max_size=3)
)
def test_every_line_mapped_is_the_same_line_and_the_order_is_kept(
    old: list[str], edits: list[tuple[int, int, list[str]]]
) -> None:
    new = list(old)
    for at, removed, added in edits:
        at = min(at, len(new))
        new[at : at + removed] = added
    mapped = diff_line_map(old, new)
    pairs = sorted(mapped.items())
    assert all(old[i] == new[j] for i, j in pairs)
    assert [j for _, j in pairs] == sorted({j for _, j in pairs})  # increasing, no repeat
    assert len(mapped) == len(pairs) == len(list(mapped))
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    assert all(mapped[i] == i for i in range(head))  # what both start with stays put


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """The lines difflib was given to match, and whether popular ones were left out."""
    calls: list[tuple[int, bool]] = []
    real = page_module.SequenceMatcher

    def spy(junk: Any, a: list[str], b: list[str], autojunk: bool = True) -> Any:
        calls.append((len(a) + len(b), autojunk))
        return real(junk, a, b, autojunk=autojunk)

    monkeypatch.setattr(page_module, "SequenceMatcher", spy)
    return calls


def test_a_save_that_changes_one_line_matches_only_that_part(
    compared: list[tuple[int, bool]],
) -> None:
    """Only the lines between what both versions share at their ends are matched by
    difflib (quadratic in a page's blank lines: 10 s on a 1 MB page)."""
    old = [f"line {n}" if n % 2 else "" for n in range(20_000)]
    new = [*old[:9_000], "typed in an editor", *old[9_001:]]
    mapped = diff_line_map(old, new)
    assert compared == [(2, False)]
    assert len(mapped) == 19_999 and 9_000 not in mapped and mapped[19_999] == 19_999


def test_a_long_page_rewritten_throughout_starts_no_match_on_its_blank_lines(
    compared: list[tuple[int, bool]],
) -> None:
    """Past 2,000 changed lines, lines found in over 1% of them start no match (18 s → 69
    ms for the 1 MB page's paragraphs reordered); the lines that are not blank still map."""
    old = [f"line {n}" if n % 2 else "" for n in range(6_000)]
    new = old[3_000:] + old[:3_000]
    mapped = diff_line_map(old, new)
    assert compared[0][0] > 11_000 and compared[0][1] is True
    assert sum(1 for n in mapped if old[n]) >= 1_499  # one half of the page, as it moved
    diff_line_map(old[:400], old[200:400] + old[:200])
    assert compared[1][1] is False  # (a short page: every line may start a match)


def test_long_blocks_are_compared_by_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long table edited in the same save as a paragraph added after it: the blocks of
    that stretch are paired by likeness, and two long texts are compared word by word (by
    characters, two 20 KB texts took 3.9 s); the table keeps its id."""
    given: list[int] = []
    real = ids_module.SequenceMatcher

    def spy(junk: Any, a: Any, b: Any, autojunk: bool = True) -> Any:
        given.append(max(len(a), len(b)))
        return real(junk, a, b, autojunk=autojunk)

    monkeypatch.setattr(ids_module, "SequenceMatcher", spy)
    rows = "".join(f"| row {n} | some words in a cell | {n * 7} |\n" for n in range(600))
    old = f"# Data\n\n| a | b | c |\n|---|---|---|\n{rows}\nThe end.\n".encode()
    new = old.replace(b"| row 300 |", b"| row three hundred |").replace(
        b"\nThe end.", b"\nA new paragraph.\n\nThe end, rewritten."
    )
    before = parse_page(old)
    after = parse_page(new, previous=before)
    table = next(b for b in before.walk() if b.type == "table")
    assert any(b.type == "table" and b.id == table.id for b in after.walk())
    assert given and max(given) < 10_000  # words, not the table's 25,000 characters
