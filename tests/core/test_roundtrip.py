"""Byte fidelity: parsing never changes a byte, and spans describe the source exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnoted.core.blocks import Block
from mnoted.core.page import Page, parse_page
from mnoted.core.parse import strip_prefix
from tests.conftest import commonmark_examples, corpus_files

FILES = corpus_files()
EXAMPLES = commonmark_examples()


def variants(data: bytes) -> dict[str, bytes]:
    """The same document with the line endings and framing editors produce."""
    lf = data.replace(b"\r\n", b"\n")
    return {
        "as-is": data,
        "crlf": lf.replace(b"\n", b"\r\n"),
        "bom": b"\xef\xbb\xbf" + data,
        "no-final-newline": lf.rstrip(b"\n"),
        "mixed": b"".join(
            line + (b"\r\n" if i % 2 else b"\n") for i, line in enumerate(lf.split(b"\n"))
        ),
        "bare-cr": lf.replace(b"\n", b"\r"),
        "trailing-space-tabs": lf.replace(b"\n", b" \t\n"),
    }


def check_spans(page: Page) -> None:
    """Children lie inside parents, siblings are ordered and disjoint, ids are unique."""

    def check(blocks: list[Block], lo: int, hi: int) -> None:
        prev_end = lo
        for b in blocks:
            assert lo <= b.start < b.end <= hi, (b.type, b.start, b.end, lo, hi)
            assert b.start >= prev_end, (b.type, b.start, prev_end)
            assert b.start <= b.head_end <= b.end
            prev_end = b.end
            check(b.children, b.head_end if b.children and b.head_end > b.start else b.start, b.end)

    check(page.blocks, page.body_start, len(page.source))
    ids = page.block_ids()
    assert len(ids) == len(set(ids))
    assert all(ids)


def check_coverage(page: Page) -> None:
    """Every non-blank body line belongs to some top-level block."""
    covered = set()
    for b in page.blocks:
        covered.update(range(b.start, b.end))
    for i in range(page.body_start, len(page.source)):
        if i not in covered:
            assert not strip_prefix(page.source.lines[i], "").strip(), (i, page.source.lines[i])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_corpus_file_round_trips(path: Path) -> None:
    data = path.read_bytes()
    for name, variant in variants(data).items():
        page = parse_page(variant, path.name)
        assert page.to_bytes() == variant, name
        check_spans(page)
        check_coverage(page)


def test_corpus_has_enough_variety() -> None:
    assert len(FILES) > 300
    kinds = {b.type for path in FILES[:120] for b in parse_page(path.read_bytes()).walk()}
    assert {"heading", "paragraph", "list", "list_item", "code", "callout", "table"} <= kinds


def test_every_commonmark_example_round_trips() -> None:
    assert len(EXAMPLES) > 600
    for ex in EXAMPLES:
        md = str(ex["markdown"])
        for name, variant in variants(md.encode("utf-8")).items():
            page = parse_page(variant)
            assert page.to_bytes() == variant, (ex["example"], name)
            check_spans(page)


def test_invalid_utf8_and_nul_bytes_round_trip() -> None:
    for data in [b"\xff\xfe# x\n", b"a\x00b\n\n- \x80\n", b"", b"\n", b"\r", b"---\n---\n"]:
        page = parse_page(data)
        assert page.to_bytes() == data
        check_spans(page)
