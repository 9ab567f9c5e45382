"""Context views of a page for agents (seed 003, ``mnote.page_ai_context.v1``).

A view picks blocks by scope (``full``, ``outline``, ``block``, ``selection``,
``keyword``), renders them as ``markdown``, ``text``, ``page_xml`` or ``json``
within a character budget (cut at block boundaries, with a cursor to continue),
and names the blocks a run may change (``allowedTargetBlockIds``) together with
the revision keys a later write is checked against.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from mnoted.core.blob import blob_id
from mnoted.core.blocks import CONTAINER_TYPES, Block
from mnoted.core.page import Page
from mnoted.errors import InvalidArguments

SCHEMA = "mnote.page_ai_context.v1"
SCOPES = ("full", "outline", "block", "selection", "keyword")
FORMATS = ("markdown", "text", "page_xml", "json")
DEFAULT_BUDGET = 60_000
_FORMAT_FIELD = {"markdown": "markdown", "text": "pageText", "page_xml": "pageXml", "json": None}


def conflict_key(page: Page, revision: str, blob: str | None = None) -> str:
    """``body:<revision>:<hash>``: changes whenever the page's bytes change.

    The hash is the page's Git blob id; a caller that has it (the store named the page by
    it) passes ``blob`` and spares hashing the page again.
    """
    digest = (blob or blob_id(page.to_bytes()))[:16]
    return f"body:{revision}:{digest}"


def revision_ref(revision: str, block: Block) -> str:
    return f"body:{revision}:{block.id}"


def _heading_paths(page: Page) -> dict[str, list[str]]:
    """For each block, the texts of the headings above it (outermost first)."""
    out: dict[str, list[str]] = {}
    stack: list[tuple[int, str]] = []
    for top in page.blocks:
        if top.type == "heading":
            level = int(top.props.get("level", 1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            out[top.id] = [t for _, t in stack]
            stack.append((level, top.text))
            continue
        path = [t for _, t in stack]
        for b in top.walk():
            out[b.id] = path
    return out


def _select(
    page: Page, scope: str, block_ids: Sequence[str] | None, query: str | None
) -> tuple[list[Block], list[str], list[str]]:
    """(blocks to show as subtrees, selected ids, allowed target ids)."""
    if scope == "full":
        ids = page.block_ids()
        return list(page.blocks), [], ids
    if scope == "outline":
        heads = [b for b in page.walk() if b.type == "heading"]
        return heads, [], [b.id for b in heads]
    if scope in ("block", "selection"):
        if not block_ids:
            raise InvalidArguments(f"scope {scope!r} needs blockIds")
        if scope == "block" and len(block_ids) != 1:
            raise InvalidArguments("scope 'block' takes exactly one block id")
        chosen = [page.block(i) for i in block_ids]
        # Drop blocks already inside another chosen block; keep document order.
        inside = {d.id for b in chosen for d in b.walk() if d.id != b.id}
        order = {b.id: n for n, b in enumerate(page.walk())}
        chosen = sorted(
            {b.id: b for b in chosen if b.id not in inside}.values(), key=lambda b: order[b.id]
        )
        allowed = [d.id for b in chosen for d in b.walk()]
        return chosen, list(block_ids), allowed
    if scope == "keyword":
        if not query or not query.strip():
            raise InvalidArguments("scope 'keyword' needs a query")
        needle = query.casefold()
        hits = [
            b
            for b in page.walk()
            if b.type not in CONTAINER_TYPES - {"list_item", "task_item"}
            and needle in b.text.casefold()
        ]
        return hits, [b.id for b in hits], [b.id for b in hits]
    raise InvalidArguments(f"unknown scope {scope!r}", hint=f"Use one of: {', '.join(SCOPES)}.")


def _markdown(page: Page, block: Block, subtree: bool) -> str:
    end = block.end if subtree else block.head_end
    return page.source.segment(block.start, end)


def _text(block: Block, subtree: bool) -> str:
    parts: list[str] = []
    for b in block.walk() if subtree else [block]:
        if b.type in ("list", "quote"):
            continue
        if b.type == "callout":
            parts.append(
                f"[!{b.props.get('calloutType', 'note')}] {b.props.get('title', '')}".rstrip()
            )
            continue
        if b.text:
            parts.append(b.text)
    return "\n".join(parts)


def _xml(block: Block, subtree: bool, editable: set[str]) -> str:
    attrs = f"id={quoteattr(block.id)} type={quoteattr(block.type)}"
    for key, value in block.props.items():
        if key in ("level", "language", "checked", "ordered", "calloutType"):
            attrs += (
                f" {key}={quoteattr(str(value).lower() if isinstance(value, bool) else str(value))}"
            )
    if block.id not in editable:
        attrs += ' editable="false"'
    own = (
        ""
        if block.type in ("list", "quote")
        else escape(block.props.get("title", "") if block.type == "callout" else block.text)
    )
    inner = "".join(_xml(c, True, editable) for c in block.children) if subtree else ""
    return f"<block {attrs}>{own}{inner}</block>"


def _render(fmt: str, page: Page, block: Block, subtree: bool, editable: set[str]) -> str:
    """One block (with the blocks inside it if ``subtree``) in the asked format, the only
    one rendered (rendering all three for a Markdown fetch spent half of it on XML);
    ``json`` sends no page text and counts the blocks' text against the budget."""
    if fmt == "markdown":
        return _markdown(page, block, subtree)
    if fmt == "page_xml":
        return _xml(block, subtree, editable)
    return _text(block, subtree)


def build_context(
    page: Page,
    *,
    document_id: str,
    revision: str,
    workspace_id: str | None = None,
    scope: str = "full",
    fmt: str = "markdown",
    block_ids: Sequence[str] | None = None,
    query: str | None = None,
    budget: int | None = None,
    cursor: str | None = None,
    editable: bool = True,
    blob: str | None = None,
) -> dict[str, Any]:
    """The frozen context of a page for one agent run (seed 003 section 5.1).

    ``blob``: the page's blob id, if the caller has it (see :func:`conflict_key`).
    """
    if fmt not in FORMATS:
        raise InvalidArguments(f"unknown format {fmt!r}", hint=f"Use one of: {', '.join(FORMATS)}.")
    budget = DEFAULT_BUDGET if budget is None else budget
    if not isinstance(budget, int) or budget < 1:
        raise InvalidArguments("budget must be a positive number of characters")
    shown, selected, allowed = _select(page, scope, block_ids, query)
    subtree = scope != "outline"
    start = 0
    if cursor:
        try:
            kind, _, value = cursor.partition(":")
            start = int(value)
            if kind != "b" or not 0 <= start <= len(shown):
                raise ValueError(cursor)
        except ValueError:
            raise InvalidArguments("cursor is not one this view returned") from None
    allowed_set = set(allowed) if editable else set()
    paths = _heading_paths(page) if scope == "keyword" else {}
    used = 0
    parts: list[str] = []
    blocks_out: list[dict[str, Any]] = []
    warnings = list(page.warnings)
    stop = len(shown)
    for n in range(start, len(shown)):
        block = shown[n]
        rendered = _render(fmt, page, block, subtree, allowed_set)
        size = len(rendered)
        if used and used + size > budget:
            stop = n
            break
        if not used and size > budget:
            warnings.append(f"block {block.id} alone is larger than the budget; it is sent whole")
        used += size
        parts.append(rendered)
        for b in block.walk() if subtree else [block]:
            item: dict[str, Any] = {
                "blockId": b.id,
                "type": b.type,
                "text": b.text,
                "revisionRef": revision_ref(revision, b),
                "editable": b.id in allowed_set,
                "lines": [b.start + 1, b.end],
            }
            if b.props:
                item["props"] = dict(b.props)
            if scope == "keyword":
                item["headingPath"] = paths.get(b.id, [])
            blocks_out.append(item)
    truncated = stop < len(shown)
    if truncated:
        warnings.append(
            f"truncated at block {stop} of {len(shown)} to stay within {budget} characters; "
            "call again with the continuation cursor for the rest"
        )
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "workspaceId": workspace_id,
        "documentId": document_id,
        "scope": scope,
        "format": fmt,
        "title": page.title,
        "revision": revision,
        "conflictDetectionKey": conflict_key(page, revision, blob),
        "allowedTargetBlockIds": [i for i in allowed if editable],
        "selectedBlockIds": selected,
        "blocks": blocks_out,
        "truncated": truncated,
        "warnings": warnings,
        "continuation": {"cursor": f"b:{stop}", "remainingBlocks": len(shown) - stop}
        if truncated
        else None,
    }
    field = _FORMAT_FIELD[fmt]
    if field == "pageXml":
        attrs = f"id={quoteattr(document_id)} revision={quoteattr(revision)}"
        out["pageXml"] = f"<page {attrs} title={quoteattr(page.title)}>{''.join(parts)}</page>"
    elif field is not None:
        out[field] = "\n\n".join(parts)
    return out
