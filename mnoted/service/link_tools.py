"""The link graph: ``mnote.page.links``, and the link updates of ``mnote.page.move``.

Links are resolved against every page of the workspace (as Obsidian resolves them, the
rules in ``docs/links.md``); a target the caller may not read is shown as unresolved,
exactly as a missing page, and a linking page it may not read is never named.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from mnoted.core.links import Link, PathIndex, name_key, parse_links, replace_links, resolve
from mnoted.core.links import rewritten as rewritten_link
from mnoted.core.page import Page
from mnoted.errors import MnoteError
from mnoted.service.calls import Call, handles
from mnoted.service.pages import LoadedPage
from mnoted.service.search_tools import block_at
from mnoted.store import Write, search_index, search_queries
from mnoted.store.model import DocRef
from mnoted.store.treediff import RENAME_THRESHOLD, similarity


def _all_paths(call: Call) -> list[str]:
    return [doc.path for doc in call.ws.documents()]


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def linking_candidates(call: Call, path: str) -> tuple[list[str], bool]:
    """Pages that may link to ``path`` (by the index), and whether the index was complete;
    while it is not, every page is a candidate."""
    conn, complete = search_index.of(call.ws).current()
    if conn is None or not complete:
        return _all_paths(call), False
    keys = {name_key(path)}
    return search_queries.linking_pages(conn, sorted(keys)), True


def _parsed(call: Call, doc: DocRef, blob: str, data: bytes) -> Page | None:
    """The page of a linking page's committed bytes ``data``, parsed once for the block ids
    of all its links (cached by blob); None where the blob is not a page's text (a
    filter's output)."""
    try:
        call.ws.refuse_filtered(doc.path)
        return call.service.pages.page_for(call.ws, doc, blob, data)
    except MnoteError:
        return None


def _outgoing(call: Call, loaded: LoadedPage, index: PathIndex) -> list[dict[str, Any]]:
    out = []
    for link in parse_links(_text(loaded.page.to_bytes())):
        target = resolve(link, loaded.path, index)
        if target is not None and not call.may_see(target):
            target = None  # (a hidden page reads as a missing one)
        entry = {**link.to_dict(), "resolved": target is not None, "path": target}
        if target is not None:
            try:
                entry["documentId"] = call.ws.resolve(target).document_id
            except MnoteError:
                entry["documentId"] = None
        block = block_at(loaded.page, link.line)
        entry["blockId"] = block.id if block else None
        out.append(entry)
    return out


def _links_to(text: str, source: str, target: str, index: PathIndex) -> list[Link]:
    return [lk for lk in parse_links(text) if resolve(lk, source, index) == target]


def _backlinks(
    call: Call, loaded: LoadedPage, index: PathIndex
) -> tuple[list[dict[str, Any]], bool]:
    """The links to ``loaded`` in the pages the caller may see: each linking page read at
    HEAD once, its links found in that text and its blocks parsed from the same bytes."""
    candidates, complete = linking_candidates(call, loaded.path)
    out = []
    for source in candidates:
        if not call.may_see(source):
            continue
        blob = call.ws.blob_id(source)
        data = None if blob is None else call.ws.read_blob(blob)
        if blob is None or data is None:
            continue
        links = _links_to(_text(data), source, loaded.path, index)
        if not links:
            continue
        doc = call.ws.resolve(source)
        page = _parsed(call, doc, blob, data)
        for link in links:
            block = block_at(page, link.line) if page is not None else None
            out.append(
                {
                    "path": source,
                    "documentId": doc.document_id,
                    "blockId": block.id if block else None,
                    **link.to_dict(),
                }
            )
    return out, complete


@handles("mnote.page.links")
def page_links(call: Call) -> dict[str, Any]:
    loaded = call.load()
    index = PathIndex(_all_paths(call))
    result: dict[str, Any] = {
        "documentId": loaded.doc.document_id,
        "path": loaded.path,
        "revision": call.ws.head,
    }
    if call.args.direction in ("both", "outgoing"):
        result["outgoing"] = _outgoing(call, loaded, index)
    if call.args.direction in ("both", "backlinks"):
        result["backlinks"], result["complete"] = _backlinks(call, loaded, index)
    return result


# -- a move's link updates --------------------------------------------------------------


@dataclass
class LinkUpdates:
    """What a move changes besides the page: the linking pages rewritten, and those left."""

    writes: list[Write] = field(default_factory=list)
    moved_data: bytes | None = None  # the moved page's own text, its links updated
    pages: list[str] = field(default_factory=list)
    links: int = 0
    not_writable: int = 0  # links in pages the caller may not edit (counted, not named)
    diff: str = ""
    warnings: list[str] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        return {
            "pages": self.pages,
            "links": self.links,
            "notUpdated": self.not_writable,
        }


def _diff(path: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
    )


def _rewrite(
    text: str, source: str, new_source: str, old: str, new: str, before: PathIndex, after: PathIndex
) -> tuple[str, int]:
    """``text`` of page ``source`` (at ``new_source`` after the move) with its links to
    ``old`` pointing at ``new``, and its relative Markdown links kept pointing where they
    did; with the number of links changed."""
    changes: list[tuple[Link, str]] = []
    for link in parse_links(text):
        target = resolve(link, source, before)
        if target is None:
            continue
        goal = new if target == old else target
        if goal == target and source == new_source:
            continue
        if not link.target.strip() and goal == old and source == old:
            continue  # [[#Heading]] in the moved page itself still points at itself
        if link.kind == "markdown" or goal != target:
            text_new = rewritten_link(link, new_source, goal, after)
            if resolve(_reparsed(text_new), new_source, after) != goal:
                continue
            if text_new != link.raw:
                changes.append((link, text_new))
    return (replace_links(text, changes) if changes else text), len(changes)


def _reparsed(raw: str) -> Link:
    links = parse_links(raw)
    return links[0]


def plan_link_updates(call: Call, loaded: LoadedPage, new_path: str) -> LinkUpdates:
    """The edits that keep links pointing at a page moved from ``loaded.path`` to
    ``new_path``: in every page that links to it, and in the moved page itself."""
    old = loaded.path
    paths = _all_paths(call)
    before = PathIndex(paths)
    after = PathIndex([new_path if p == old else p for p in paths])
    updates = LinkUpdates()
    candidates, _ = linking_candidates(call, old)
    diffs: list[str] = []
    for source in candidates:
        if source == old:
            continue
        data = call.ws.read_head(source)
        if data is None:
            continue
        text = _text(data)
        new_text, count = _rewrite(text, source, source, old, new_path, before, after)
        if count == 0:
            continue
        writable = call.may_see(source) and _editable(call, source)
        if not writable:
            updates.not_writable += count
            continue
        updates.writes.append(
            Write(source, new_text.encode("utf-8"), base_blob=call.ws.blob_id(source))
        )
        updates.pages.append(source)
        updates.links += count
        diffs.append(_diff(source, text, new_text))
    own = _text(loaded.page.to_bytes())
    own_new, count = _rewrite(own, old, new_path, old, new_path, before, after)
    # The page keeps its documentId through a move only while Git still sees the move as
    # a rename (store.treediff, as a rebuilt registry will): its own links are rewritten
    # only where that holds.
    if count and similarity(own.encode(), own_new.encode()) >= RENAME_THRESHOLD:
        updates.moved_data = own_new.encode("utf-8")
        updates.links += count
        diffs.insert(0, _diff(new_path, own, own_new))
    elif count:
        updates.warnings.append(
            f"{count} relative link(s) in the moved page were left as they are: rewriting them"
            " would change so much of this short page that Git would no longer see the move"
            " as a rename (its documentId would not survive); edit them after the move"
        )
    updates.diff = "".join(diffs)
    return updates


def _editable(call: Call, path: str) -> bool:
    if call.actor.is_owner:
        return True
    try:
        loaded = call.service.pages.load(call.ws, path)
    except MnoteError:
        return False
    return call.may_edit(loaded)
