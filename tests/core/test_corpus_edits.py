"""Edits on real notes: every edit is a splice and block ids survive it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnoted.core import commands as C
from mnoted.core.page import parse_page
from tests.conftest import corpus_files
from tests.core.helpers import assert_consistent

FILES = corpus_files()
NEW_TEXT = "Replaced by the test: [[Wikilink]] and #tag."


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_replace_each_top_level_block_changes_only_its_lines(path: Path) -> None:
    data = path.read_bytes()
    page = parse_page(data, path.name)
    lines = page.source.lines
    # A fresh full parse of every result would dominate the suite; check a spread of them.
    check_every = max(1, len(page.blocks) // 8)
    for n, block in enumerate(page.blocks):
        spec = {"type": "paragraph", "text": NEW_TEXT}
        result = C.replace_block(page, block.id, spec)
        new = result.page
        new_lines = new.source.lines
        end = block.end
        assert new_lines[: block.start] == lines[: block.start]
        tail = len(lines) - end
        assert new_lines[len(new_lines) - tail :] == lines[end:]
        assert new.source.ends[: block.start] == page.source.ends[: block.start]
        replaced = new.block(block.id)
        # A blank line is added before it only where the new text would merge otherwise.
        assert replaced.start == block.start or (
            replaced.start == block.start + 1 and new_lines[block.start] == ""
        )
        assert replaced.type == "paragraph"
        assert replaced.text.startswith(NEW_TEXT)
        assert result.changed_block_ids[0] == block.id
        untouched = {
            b.id
            for b in page.walk()
            if b.id != block.id and not any(b.id == d.id for d in block.walk())
        }
        assert untouched <= set(new.block_ids())
        if n % check_every == 0:
            assert_consistent(new)


def _middle_edits(data: bytes) -> list[tuple[str, bytes]]:
    """Edits people make in their editors: change, insert or delete one block mid-page."""
    page = parse_page(data)
    paras = [b for b in page.blocks if b.type == "paragraph"]
    if len(paras) < 3:
        return []
    target = paras[len(paras) // 2]
    lines = data.split(b"\n")
    changed = [*lines[: target.start], b"A sentence someone wrote in vim.", *lines[target.end :]]
    inserted = [*lines[: target.start], b"A new paragraph.", b"", *lines[target.start :]]
    deleted = [*lines[: target.start], *lines[target.end + 1 :]]
    return [
        ("change", b"\n".join(changed)),
        ("insert", b"\n".join(inserted)),
        ("delete", b"\n".join(deleted)),
    ]


@pytest.mark.parametrize("path", FILES[::4], ids=lambda p: p.name)
def test_ids_survive_external_edits(path: Path) -> None:
    data = path.read_bytes()
    old = parse_page(data)
    for kind, new_data in _middle_edits(data):
        new = parse_page(new_data, previous=old)
        old_by_key = {(b.type, b.text): b.id for b in old.walk()}
        new_by_key = {(b.type, b.text): b.id for b in new.walk()}
        # Every block whose own content is untouched keeps its id.
        counts: dict[tuple[str, str], int] = {}
        for b in old.walk():
            counts[(b.type, b.text)] = counts.get((b.type, b.text), 0) + 1
        for key, ident in old_by_key.items():
            if (
                key in new_by_key
                and counts[key] == 1
                and key[0] not in ("list", "quote", "callout")
            ):
                assert new_by_key[key] == ident, (kind, key)
        if kind == "change":
            # The changed paragraph itself keeps its id (matched by position).
            assert len(set(old.block_ids()) - set(new.block_ids())) <= 1
