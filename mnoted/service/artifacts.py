"""AI artifacts: a page's one summary and its AI notes, as Markdown files linked to it.

An artifact is a page like any other, under ``ai/summaries/`` or ``ai/notes/``, whose
frontmatter names its kind and its source page (the reference edge); its body ends with a
wikilink to the source so the edge shows in Obsidian too. ``mnote.page.get`` lists them.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

import yaml

from mnoted.core.page import name_stem, parse_page
from mnoted.errors import PermissionDenied
from mnoted.service.calls import WritePlan, handles
from mnoted.store import Change, Write

if TYPE_CHECKING:
    from mnoted.service.calls import Call

SUMMARY_DIR = "ai/summaries"
NOTES_DIR = "ai/notes"
KIND_KEY = "mnoteArtifact"


def _frontmatter(fields: dict[str, Any]) -> str:
    return (
        "---\n"
        + yaml.safe_dump(fields, allow_unicode=True, sort_keys=False, width=1 << 30)
        + "---\n"
    )


def _link(path: str) -> str:
    return f"[[{path[:-3] if path.endswith('.md') else path}]]"


def artifact_text(kind: str, source: Any, title: str, body: str, extra: dict[str, Any]) -> bytes:
    fields = {
        "title": title,
        KIND_KEY: kind,
        "source": source.doc.document_id,
        "sourcePath": source.path,
        **extra,
    }
    text = _frontmatter(fields) + f"\n{body.strip()}\n\nSource: {_link(source.path)}\n"
    return text.encode("utf-8")


# The reference edges of a workspace at one HEAD: source documentId -> its artifacts.
_EDGES: dict[str, tuple[str | None, dict[str, list[dict[str, Any]]]]] = {}


def _edges(call: Call) -> dict[str, list[dict[str, Any]]]:
    """Every artifact of the workspace by source page, worked out once per HEAD."""
    ws = call.ws
    cached = _EDGES.get(ws.workspace_id)
    ws.refresh()
    if cached is not None and cached[0] == ws.head:
        return cached[1]
    edges: dict[str, list[dict[str, Any]]] = {}
    for doc, blob, _ in ws.listing(under="ai/"):
        page = call.service.pages.at_blob(ws, doc, blob)
        if page is None:
            continue
        source = page.meta.get("source")
        if isinstance(source, str) and page.meta.get(KIND_KEY):
            edges.setdefault(source, []).append(
                {
                    "documentId": doc.document_id,
                    "path": doc.path,
                    "kind": page.meta[KIND_KEY],
                    "title": page.title,
                    "edge": {"type": "reference", "from": doc.document_id, "to": source},
                }
            )
    _EDGES[ws.workspace_id] = (ws.head, edges)
    return edges


def artifacts_of(call: Call, document_id: str) -> list[dict[str, Any]]:
    """The artifacts whose source is ``document_id`` and which the caller may read."""
    found = [a for a in _edges(call).get(document_id, []) if call.may_see(a["path"])]
    return sorted(found, key=lambda a: (a["kind"], a["path"]))


def _check_writable(call: Call, path: str) -> None:
    if not call.may_see(path):
        raise PermissionDenied(
            f"your grants do not cover {path}",
            hint=f"Artifacts are written under {path.rsplit('/', 1)[0]}/; ask for a grant there.",
        )


def _after(call: Call, path: str, data: bytes) -> Any:
    def after(ws: Any, commit: str) -> dict[str, Any]:
        doc = ws.resolve(path)
        blob = ws.blob_id(path)
        if blob is not None:
            call.service.pages.remember_ids(ws, doc, blob, parse_page(data, path))
        return {"artifactId": doc.document_id}

    return after


@handles("mnote.artifact.create_summary", store_only=True)
def create_summary(call: Call) -> WritePlan:
    source = call.load()
    path = f"{SUMMARY_DIR}/{source.doc.document_id}.md"
    _check_writable(call, path)
    data = artifact_text(
        "summary", source, f"Summary of {source.page.title}", call.args.summary, {}
    )
    existing = call.ws.blob_id(path)
    created = existing is None
    changes: list[Change] = (
        [] if call.ws.read_head(path) == data else [Write(path, data, base_blob=existing)]
    )
    return WritePlan(
        command=call.spec.command or "artifact.summary.upsert",
        changes=changes,
        result={
            "documentId": source.doc.document_id,
            "artifactPath": path,
            "created": created,
            "edge": {"type": "reference", "to": source.doc.document_id},
        },
        document=source.doc,
        after_commit=_after(call, path, data),
    )


@handles("mnote.artifact.create_ai_note", store_only=True)
def create_ai_note(call: Call) -> WritePlan:
    source = call.load()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(call.now))
    path = f"{NOTES_DIR}/{name_stem(source.path)}-{stamp}-{secrets.token_hex(3)}.md"
    _check_writable(call, path)
    title = call.args.title or f"AI note on {source.page.title}"
    data = artifact_text("ai_note", source, title, call.args.content, {})
    return WritePlan(
        command=call.spec.command or "artifact.aiNote.create",
        changes=[Write(path, data)],
        result={
            "documentId": source.doc.document_id,
            "artifactPath": path,
            "created": True,
            "edge": {"type": "reference", "to": source.doc.document_id},
        },
        document=source.doc,
        after_commit=_after(call, path, data),
    )
