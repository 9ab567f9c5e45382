"""Page-level commands: title, page options and whole-body save. Pure.

Like the block commands they splice source lines (frontmatter keys change alone) and
return an :class:`EditResult`; nothing is written here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mnoted.core.blocks import ITEM_TYPES
from mnoted.core.commands import replace_block
from mnoted.core.diffs import EditResult, changed_ids
from mnoted.core.page import PAGE_OPTIONS, Page
from mnoted.core.render import render, spec_type
from mnoted.core.splicing import frontmatter_edit, place, reparse, splice
from mnoted.errors import (
    InvalidArguments,
    InvalidFrontmatter,
    UnsupportedOption,
)


def update_title(page: Page, title: str) -> EditResult:
    """Set the page title where it comes from: frontmatter ``title``, else the first H1."""
    if not isinstance(title, str) or not title.strip() or "\n" in title or "\r" in title:
        raise InvalidArguments("title must be one non-empty line")
    title = title.strip()
    _, source = page.title_and_source
    if source == "heading":
        heading = next(b for b in page.walk() if b.type == "heading" and b.props.get("level") == 1)
        if heading.props.get("setext"):
            new_page = splice(
                page,
                heading.start,
                heading.start + 1,
                place([title], heading.outer_prefix),
                {(heading.start, "heading"): heading.id},
            )
        else:
            result = replace_block(
                page, heading.id, {"type": "heading", "text": title, "props": {"level": 1}}
            )
            result.command = "page.head.updateTitle"
            return result
    else:
        new_page = frontmatter_edit(page, {"title": title})
    return EditResult("page.head.updateTitle", new_page, page, changed_ids(page, new_page))


def update_options(page: Page, options: Mapping[str, Any]) -> EditResult:
    """Set page options (frontmatter keys); only the changed keys' lines change."""
    if not isinstance(options, Mapping) or not options:
        raise InvalidArguments("options must be a non-empty object")
    unknown = [k for k in options if k not in PAGE_OPTIONS]
    if unknown:
        raise UnsupportedOption(
            f"unsupported page option(s): {', '.join(sorted(unknown))}",
            hint=f"Supported options: {', '.join(PAGE_OPTIONS)}.",
            unsupported=sorted(unknown),
        )
    bad = [k for k, v in options.items() if not isinstance(v, bool)]
    if bad:
        raise InvalidArguments(f"page options must be true or false: {', '.join(bad)}")
    if page.frontmatter is not None and not page.frontmatter.valid:
        # (refused even when nothing would change: the options read from it are not its own)
        raise InvalidFrontmatter(
            f"the page's options cannot be set: {page.frontmatter.error}",
            hint="Fix the YAML between the '---' lines at the top of the file first; "
            "mnote.page.get shows what is wrong in its warnings.",
        )
    current = page.options
    meta = page.meta
    updates = {
        k: v for k, v in options.items() if current[k] != v or (k in meta and meta[k] is not v)
    }
    updates = {k: v for k, v in updates.items() if v or k in meta}
    new_page = frontmatter_edit(page, updates) if updates else page
    details = {"pageOptions": new_page.options, "changedOptions": sorted(updates)}
    return EditResult("page.layout.updateOptions", new_page, page, [], details)


def _render_content(
    content: Sequence[Mapping[str, Any] | str], page: Page
) -> tuple[list[str], list[tuple[int, str, str]]]:
    """Lines for a list of block specs, one blank line between blocks; ids asked to be kept."""
    if not isinstance(content, Sequence) or isinstance(content, str | bytes):
        raise InvalidArguments("content must be an array of blocks")
    out: list[str] = []
    keep: list[tuple[int, str, str]] = []
    prev_kind = ""
    for spec in content:
        if isinstance(spec, str):
            spec = {"markdown": spec}
        kind = spec_type(spec)
        if kind in ITEM_TYPES:
            lines = render(spec, marker_hint="1." if spec.get("props", {}).get("ordered") else "-")
        else:
            lines = render(spec)
        if out and not (kind in ITEM_TYPES and prev_kind in ITEM_TYPES):
            out.append("")
        ident = spec.get("id")
        if isinstance(ident, str) and page.has_block(ident) and kind != "markdown":
            keep.append((len(out), kind, ident))
        out += lines
        prev_kind = kind
    return out, keep


def save(
    page: Page, content: Sequence[Mapping[str, Any] | str], mode: str = "replace"
) -> EditResult:
    """``mnote.page.save``: replace the body with ``content`` blocks, or append them."""
    if mode not in ("replace", "append"):
        raise InvalidArguments("mode must be 'replace' or 'append'")
    lines, keep = _render_content(content, page)
    if not lines and mode == "append":
        raise InvalidArguments("content must not be empty for append")
    body = page.body_start
    n = len(page.source)
    if mode == "replace":
        start, end = body, n
        new_source = page.source.replace_lines(start, end, lines)
        first = start
        line_map = None
    else:
        last = n
        while last > body and not page.source.lines[last - 1].strip():
            last -= 1
        sep = [""] if last > body else []
        start = last
        new_source = page.source.replace_lines(last, n, [*sep, *lines])
        first = last + len(sep)
        line_map = {i: i for i in range(last)}
    forced = {(first + offset, kind): ident for offset, kind, ident in keep}
    new_page = reparse(page, new_source, line_map, forced or None)
    details = {"mode": mode, "appendedBlocks": len(content) if mode == "append" else 0}
    return EditResult("page.body.save", new_page, page, changed_ids(page, new_page), details)
