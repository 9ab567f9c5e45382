"""Handler of ``mnote.workspace.search``: ranked full-text hits over the caller's pages.

The index (:mod:`mnoted.store.search_index`) is brought up to HEAD before every answer,
so a search sees every write acknowledged before it; the answer names the commit it
reflects. The owner (and a grant of everything) searches the whole workspace's index; an
agent searches the index of its grants' scope, which holds only the pages it may read:
hidden pages add nothing to its hits, counts, ranking or time, so each hit's ``score``
(BM25 over the caller's pages) is returned.
"""

from __future__ import annotations

from typing import Any

from mnoted.core.blocks import Block
from mnoted.core.page import Page
from mnoted.core.search_text import Query, parse_query, snippet
from mnoted.errors import InvalidArguments, MnoteError
from mnoted.service.actors import Actor, glob_match
from mnoted.service.calls import Call, handles
from mnoted.service.visibility import is_artifact
from mnoted.store import search_index, search_queries

_CURSOR_PREFIX = "o"


def _offset(cursor: str | None) -> int:
    if cursor is None:
        return 0
    digits = cursor[len(_CURSOR_PREFIX) :]
    if not cursor.startswith(_CURSOR_PREFIX) or not digits.isdigit() or len(digits) > 9:
        raise InvalidArguments(
            f"cursor {cursor!r} is not one this tool gave", hint="Pass nextCursor as it came."
        )
    return int(digits)


def block_at(page: Page, line: int) -> Block | None:
    """The innermost block whose lines hold ``line`` (0-based), or None."""
    found = None
    for block in page.walk():
        if block.start <= line < block.end:
            found = block
    return found


def title_block(page: Page) -> Block | None:
    if page.title_and_source[1] != "heading":
        return None
    for block in page.walk():
        if block.type == "heading" and block.props.get("level") == 1:
            return block
    return None


def _hit(call: Call, hit: search_queries.Hit, query: Query) -> dict[str, Any]:
    out: dict[str, Any] = {
        "path": hit.path,
        "title": hit.title,
        "matchedIn": {"title": "title", "heading": "heading"}.get(hit.kind, "body"),
        "headingPath": hit.headings if hit.kind != "title" else [],
        "snippet": snippet(hit.text, query.marks),
        "score": round(hit.score, 6),
        "line": hit.line + 1 if hit.line >= 0 else None,
    }
    try:  # (the page as HEAD has it, as the index does: its blob, parsed once and kept)
        doc = call.ws.resolve(hit.path)
        page = call.service.pages.at_blob(call.ws, doc, hit.blob)
    except MnoteError:
        page = None
    if page is None:  # (a page the index holds and HEAD lost meanwhile: named by path only)
        return {"documentId": None, **out, "blockId": None}
    block = title_block(page) if hit.kind == "title" else block_at(page, hit.line)
    return {"documentId": doc.document_id, **out, "blockId": block.id if block else None}


def sees_all(actor: Actor) -> bool:
    """Whether ``actor`` may read every page (it then searches the whole index)."""
    return actor.is_owner or any(g in ("**", "*") for g in actor.grants)


def _in_scope(actor: Actor, path: str) -> bool:
    """Whether a page goes into an agent's own index: its grants cover it, and it is not an
    artifact, whose visibility follows its source page (:mod:`.visibility`), a page the
    index of a grant scope is not rebuilt for when it moves."""
    return actor.may_access(path) and not is_artifact(path)


def paths_matcher(globs: list[str] | None) -> Any:
    """A test of paths against globs, read as grants read them (``**`` across folders)."""
    if not globs:
        return None
    return lambda path: any(glob_match(path, pattern) for pattern in globs)


@handles("mnote.workspace.search")
def workspace_search(call: Call) -> dict[str, Any]:
    args = call.args
    query = parse_query(args.query)
    if query is None:
        raise InvalidArguments(
            "the query has no words to search for", hint="Give words, a phrase or a prefix*."
        )
    offset = _offset(args.cursor)
    actor = call.actor
    if sees_all(actor):
        index = search_index.of(call.ws)
    else:  # (its own index: the pages of its grants, and nothing else)
        index = search_index.scoped(call.ws, actor.grants, lambda p: _in_scope(actor, p))
    conn, complete = index.current()
    filters = search_queries.Filters(
        paths=paths_matcher(args.paths),
        tags=tuple(args.tags or ()),
        fields=tuple((args.frontmatter or {}).items()),
    )
    total, hits = 0, list[search_queries.Hit]()
    if conn is not None:
        total, hits = search_queries.search(conn, query, filters, args.limit, offset)
    answer: dict[str, Any] = {
        "revision": call.ws.head if complete else index.target,
        "complete": complete,
        "total": total,
        "hits": [_hit(call, h, query) for h in hits],
        "nextCursor": f"{_CURSOR_PREFIX}{offset + len(hits)}"
        if offset + len(hits) < total
        else None,
        "index": index.status(),
    }
    if not complete:
        answer["warnings"] = [
            f"the search index is still being built ({index.done} of {index.total} pages): "
            "hits may be missing"
        ]
    return answer
