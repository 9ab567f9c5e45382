"""``markdown_edit``: search/replace pairs on a page's Markdown text.

Each ``search`` must match exactly once in the text as it stands after the
pairs before it; zero or several matches are refused with where they are, and
nothing is applied. Matching sees LF line endings whatever the file uses; the
result is written back with the file's own endings and every untouched line
keeps its bytes. ``allowed_block_ids`` limits the lines a pair may touch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, AnyStr

from mnoted.core.diffs import EditResult, changed_ids
from mnoted.core.page import Page, reparse_splice
from mnoted.core.source import Source
from mnoted.errors import EditMismatch, InvalidArguments, TargetOutOfScope

MAX_REPORTED = 5


@dataclass(frozen=True)
class _Hit:
    """Where a search matched once, and the page's LF text (or its bytes) with it replaced."""

    first: int  # the line the match begins on
    segment: str  # the lines the match spans, joined with LF
    offset: int  # where in ``segment`` it begins
    took_final_newline: bool
    normalized: str | None
    lf_bytes: bytes | None


def _line_at(text: AnyStr, newline: AnyStr, newlines: int, offset: int) -> int:
    """The line ``offset`` of ``text`` falls on, its newlines counted from the nearer end."""
    if offset <= len(text) // 2:
        return text.count(newline, 0, offset)
    return newlines - text.count(newline, offset)


def _occurrences(text: AnyStr, needle: AnyStr) -> list[int]:
    out = []
    at = text.find(needle)
    while at != -1:
        out.append(at)
        if len(out) > MAX_REPORTED:
            break
        at = text.find(needle, at + 1)
    return out


def _search_in(
    text: AnyStr,
    search: AnyStr,
    replace: AnyStr,
    newline: AnyStr,
    newlines: int,
    as_str: Callable[[AnyStr], str],
) -> _Hit | tuple[int, list[int]]:
    """The one match of ``search`` in ``text``; else how many there are (up to
    ``MAX_REPORTED`` + 1) and the lines of the first ones."""
    found = _occurrences(text, search)
    if len(found) != 1:
        return len(found), [_line_at(text, newline, newlines, at) for at in found[:MAX_REPORTED]]
    at = found[0]
    stop = at + len(search)
    seg_start = text.rfind(newline, 0, at) + 1
    seg_end = text.find(newline, stop)
    if seg_end == -1:
        seg_end = len(text) - 1 if text.endswith(newline) else len(text)
    spliced = text[:at] + replace + text[stop:]
    return _Hit(
        first=_line_at(text, newline, newlines, at),
        segment=as_str(text[seg_start:seg_end]),
        offset=len(as_str(text[seg_start:at])),
        took_final_newline=stop > seg_end,
        normalized=spliced if isinstance(spliced, str) else None,
        lf_bytes=spliced if isinstance(spliced, bytes) else None,
    )


def _utf8(text: str) -> bytes | None:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: it is matched in the text
        return None


def _decoded(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _search(source: Source, search: str, replace: str) -> _Hit | tuple[int, list[int]]:
    """``search`` in the page's LF text; in its bytes when they are that text as UTF-8 (a
    valid UTF-8 search matches there exactly where it matches in the text)."""
    raw = source.lf_bytes
    if raw is not None:
        needle, by = _utf8(search), _utf8(replace)
        if needle is not None and by is not None:
            return _search_in(raw, needle, by, b"\n", source.newlines, _decoded)
    return _search_in(source.normalized, search, replace, "\n", source.newlines, str)


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
        hit = _search(current.source, search, replace)
        if not isinstance(hit, _Hit):
            count, at_lines = hit
            lines = [line + 1 for line in at_lines]
            more = ", ..." if count > MAX_REPORTED else ""
            where = f" (lines {', '.join(map(str, lines))}{more})" if count else ""
            raise EditMismatch(
                f"edit {n}: search matches {count}{'+' if more else ''} times{where};"
                " it must match exactly once",
                hint=(
                    "Copy the exact text from a fresh fetch of the page."
                    if not count
                    else "Add surrounding text to the search so it matches one place."
                ),
                edit=n,
                matches=count,
                lines=lines,
            )
        first = hit.first
        last = min(first + search.count("\n"), len(current.source) - 1)
        if allowed is not None and not any(
            current.has_block(i) and current.block(i).start <= first and last < current.block(i).end
            for i in allowed
        ):
            raise TargetOutOfScope(
                f"edit {n} changes lines {first + 1}-{last + 1}, outside the allowed blocks",
                edit=n,
                allowedTargetBlockIds=allowed,
            )
        # Splice only the lines the match spans, so the rest keeps its bytes and parse; the
        # new text (or bytes) is the old with its only match replaced.
        segment, offset = hit.segment, hit.offset
        if hit.took_final_newline:
            # The match ran to the end of the file: the file now ends as the new text does.
            rest = segment[:offset] + replace
            open_end = bool(rest) and not rest.endswith("\n")
            new_lines = rest.split("\n") if open_end else rest.split("\n")[:-1]
        else:
            open_end = False
            new_lines = (segment[:offset] + replace + segment[offset + len(search) :]).split("\n")
        source = current.source.replace_lines(
            first,
            last + 1,
            new_lines,
            normalized=hit.normalized,
            lf_bytes=hit.lf_bytes,
            open_end=open_end,
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
