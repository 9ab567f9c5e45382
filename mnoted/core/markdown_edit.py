"""``markdown_edit``: search/replace pairs on a page's Markdown text.

Each ``search`` must match exactly once in the text as it stands after the
pairs before it; zero or several matches are refused with where they are, and
nothing is applied. Matching sees LF line endings whatever the file uses; the
result is written back with the file's own endings and every untouched line
keeps its bytes. ``allowed_block_ids`` limits the lines a pair may touch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mnoted.core.commands import EditResult, changed_ids
from mnoted.core.page import Page, parse_page, reparse_splice
from mnoted.core.source import Source
from mnoted.errors import EditMismatch, InvalidArguments, TargetOutOfScope

MAX_REPORTED = 5


def _line_at(source: Source, offset: int) -> int:
    """The line of ``source.normalized`` that ``offset`` falls on, its newlines counted from
    the nearer end (a 1 MB page is 4 MB of text once it holds one emoji: ~0.8 ms a pass)."""
    text = source.normalized
    if offset <= len(text) // 2:
        return text.count("\n", 0, offset)
    return source.newlines - text.count("\n", offset)


def _on_lines(page: Page, start: int, end: int) -> list[str]:
    """Ids of the blocks whose own lines (before their children) meet lines ``start`` to
    ``end`` of ``page``; only those of its re-parsed window when it has one."""
    ids = page.window[1] if page.window is not None else page.index
    index = page.index
    return [i for i in ids if index[i].start < end and start < index[i].head_end]


def _restyled(before: Page, after: Page, ids: set[str]) -> list[str]:
    """Those of ``ids`` whose own lines changed though the block reads the same: ``> a``
    made ``>a`` keeps the quote's paragraph and its text, but not its bytes."""
    out = []
    for ident in ids:
        old, new = before.index.get(ident), after.index.get(ident)
        if old is not None and new is not None:
            was = before.source.lines[old.start : old.head_end]
            if was != after.source.lines[new.start : new.head_end]:
                out.append(ident)
    return out


def _occurrences(text: str, needle: str) -> list[int]:
    out = []
    at = text.find(needle)
    while at != -1:
        out.append(at)
        if len(out) > MAX_REPORTED:
            break
        at = text.find(needle, at + 1)
    return out


def markdown_edit(
    page: Page,
    edits: Sequence[Mapping[str, Any]],
    allowed_block_ids: Sequence[str] | None = None,
) -> EditResult:
    """Apply ``edits`` (``[{"search", "replace"}]``) in order, all or nothing."""
    if not isinstance(edits, Sequence) or isinstance(edits, str) or not edits:
        raise InvalidArguments("edits must be a non-empty array of {search, replace} objects")
    allowed = list(allowed_block_ids) if allowed_block_ids is not None else None
    for ident in allowed or ():
        page.block(ident)
    current = page
    head = tail = len(page.source)  # lines no pair has touched, at each end
    touched: set[str] = set()  # blocks on lines a pair replaced
    for n, edit in enumerate(edits):
        if not isinstance(edit, Mapping):
            raise InvalidArguments(f"edit {n} must be an object with search and replace")
        search, replace = edit.get("search"), edit.get("replace")
        if not isinstance(search, str) or not isinstance(replace, str):
            raise InvalidArguments(f"edit {n}: search and replace must be strings")
        search = search.replace("\r\n", "\n").replace("\r", "\n")
        replace = replace.replace("\r\n", "\n").replace("\r", "\n")
        if not search:
            raise InvalidArguments(f"edit {n}: search must not be empty")
        text = current.source.normalized
        found = _occurrences(text, search)
        if len(found) != 1:
            lines = [_line_at(current.source, at) + 1 for at in found[:MAX_REPORTED]]
            more = ", ..." if len(found) > MAX_REPORTED else ""
            where = f" (lines {', '.join(map(str, lines))}{more})" if found else ""
            count = f"{len(found)}+" if len(found) > MAX_REPORTED else str(len(found))
            raise EditMismatch(
                f"edit {n}: search matches {count} times{where}; it must match exactly once",
                hint=(
                    "Copy the exact text from a fresh fetch of the page."
                    if not found
                    else "Add surrounding text to the search so it matches one place."
                ),
                edit=n,
                matches=len(found),
                lines=lines,
            )
        at = found[0]
        stop = at + len(search)
        first = _line_at(current.source, at)
        last = min(first + search.count("\n"), len(current.source) - 1)  # text[at:stop] == search
        if allowed is not None and not any(
            current.has_block(i) and current.block(i).start <= first and last < current.block(i).end
            for i in allowed
        ):
            raise TargetOutOfScope(
                f"edit {n} changes lines {first + 1}-{last + 1}, outside the allowed blocks",
                edit=n,
                allowedTargetBlockIds=allowed,
            )
        # Splice only the lines the match spans, so the rest keeps its bytes and parse. The
        # new LF text is the old one with its only match replaced (one copy of the page).
        seg_start = text.rfind("\n", 0, at) + 1
        seg_end = text.find("\n", stop)
        if seg_end == -1:
            seg_end = len(text) - 1 if text.endswith("\n") else len(text)
        if stop > seg_end:
            # The match took the file's final newline: rebuild from the whole text.
            new_text = text[:at] + replace + text[stop:]
            source = current.source.with_normalized_text(new_text)
            current = parse_page(source, current.name, previous=current)
            head, tail = min(head, first), 0
            touched.update(_on_lines(current, first, len(current.source)))
            continue
        segment = text[seg_start:seg_end]
        offset = at - seg_start
        new_lines = (segment[:offset] + replace + segment[offset + len(search) :]).split("\n")
        source = current.source.replace_lines(
            first, last + 1, new_lines, normalized=text.replace(search, replace, 1)
        )
        head, tail = min(head, first), min(tail, len(current.source) - last - 1)
        current = reparse_splice(current, source, first, last + 1, len(new_lines))
        touched.update(_on_lines(current, first, first + len(new_lines)))
    return EditResult(
        "markdown_edit",
        current,
        page,
        changed_ids(page, current, _restyled(page, current, touched)),
        {"editsApplied": len(edits)},
        same_ends=(head, tail),
    )
