"""Pages as the service sees them: a document at its revision, with its block ids.

Block ids are not in the files, so the service keeps the id list of every blob it has
parsed in the workspace database (:mod:`mnoted.service.idlists`) and, per document, the last
blob it knows (table ``last_blob``). A blob seen for the first time takes its ids
from the document's last known version (the core's carry-over), so ids survive edits made
in any editor. Parsed pages are cached by blob id.
"""

from __future__ import annotations

from dataclasses import dataclass

from mnoted.core.page import Page, parse_page
from mnoted.errors import NotFound
from mnoted.service.idlists import IdLists
from mnoted.service.lru import Bounded
from mnoted.store import DocRef, WorkspaceApi

_CACHE_SIZE = 256
_CACHE_LINES = 250_000
"""A parsed page costs about 600 bytes per line (15 MB for a 1 MB page of 23,500 lines): the
cache keeps at most this many lines (~150 MB), whatever the number of pages."""


@dataclass(frozen=True)
class LoadedPage:
    """A document read at HEAD: where it is, what it is, and the keys to write it back."""

    doc: DocRef
    page: Page
    blob: str
    revision: str

    @property
    def path(self) -> str:
        return self.doc.path


_Key = tuple[str, str, str]  # workspace id, blob id, path


def _key(ws: WorkspaceApi, doc: DocRef, blob: str) -> _Key:
    """A page's key in the cache: the same text at the same path may have other ids in
    another workspace of the daemon (reached there by another history)."""
    return (ws.workspace_id, blob, doc.path)


class PageCache:
    """Parsed pages by blob id, with their ids kept in the store's sidecar; shared by the
    threads of the daemon's workspaces."""

    def __init__(self) -> None:
        self._pages: Bounded[_Key, Page] = Bounded(
            _CACHE_SIZE, _CACHE_LINES, lambda page: len(page.source)
        )
        self._ids = IdLists()

    def at_blob(self, ws: WorkspaceApi, doc: DocRef, blob: str) -> Page | None:
        """The page of ``blob`` at ``doc``'s path: from the cache (the blob is not read
        again), else read and parsed; None if the repository lacks the blob."""
        page = self._pages.get(_key(ws, doc, blob))
        if page is not None:
            return page
        data = ws.read_blob(blob)
        return None if data is None else self.page_for(ws, doc, blob, data)

    def page_for(self, ws: WorkspaceApi, doc: DocRef, blob: str, data: bytes) -> Page:
        """The page of ``data`` (blob ``blob``) with stable ids."""
        key = _key(ws, doc, blob)
        cached = self._pages.get(key)
        if cached is not None:
            return cached
        ids = self._ids_of(ws, blob)
        if ids is not None:
            page = parse_page(data, doc.path, ids=ids)
        else:
            previous = self._previous(ws, doc, blob)
            page = parse_page(data, doc.path, previous=previous)
            self.remember_ids(ws, doc, blob, page)
        self._pages.put(key, page)
        return page

    def _previous(self, ws: WorkspaceApi, doc: DocRef, blob: str) -> Page | None:
        last = ws.block_ids.last_blob(doc.document_id)
        if last is None or last == blob:
            return None
        ids = self._ids_of(ws, last)
        data = ws.read_blob(last)
        if ids is None or data is None:
            return None
        return parse_page(data, doc.path, ids=ids)

    def _ids_of(self, ws: WorkspaceApi, blob: str) -> list[str] | None:
        """The ids kept for ``blob``; None if none are (or they cannot be read)."""
        stored = ws.block_ids.entry(blob)
        return None if stored is None else self._ids.read(ws.block_ids, stored)

    def remember_ids(self, ws: WorkspaceApi, doc: DocRef, blob: str, page: Page) -> None:
        """Keep ``page``'s ids as those of ``blob``, the document's newest known version."""
        ws.block_ids.keep(self._ids.entries(ws.block_ids, doc.document_id, blob, page.block_ids()))
        self._pages.put(_key(ws, doc, blob), page)

    def load(self, ws: WorkspaceApi, ref: str) -> LoadedPage:
        """The document ``ref`` (id or path) at HEAD, after committing any edit on disk."""
        try:
            doc = ws.resolve(ref)
        except NotFound:
            # A page saved in an editor a moment ago, not yet committed by the watcher.
            if (
                not ref.lower().endswith(".md")
                or ws.operation() is not None
                or ws.commit_external([ref]) is None
            ):
                raise
            doc = ws.resolve(ref)
        ws.refuse_filtered(doc.path)  # (its blob is a filter's output, not its text)
        # (while a merge or the like is under way, HEAD's version is served: Workspace.operation)
        if ws.operation() is None and ws.commit_external([doc.path]) is not None:
            doc = ws.resolve(doc.document_id)  # (the edit may have moved it)
        blob = ws.blob_id(doc.path)
        if blob is None:
            raise NotFound(f"no document {ref!r}", ref=ref)
        page = self.at_blob(ws, doc, blob)
        if page is None:
            raise NotFound(f"no document {ref!r}", ref=ref)
        return LoadedPage(doc, page, blob, ws.revision_of(doc.path))

    def at_revision(self, ws: WorkspaceApi, doc: DocRef, revision: str) -> Page | None:
        """The document as it was at ``revision`` (None if unknown there)."""
        found = ws.blob_at(revision, doc.path)
        if found is None:
            return None
        blob, data = found
        return self.page_for(ws, doc, blob, data)
