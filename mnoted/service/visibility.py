"""Who sees what: the one filter of the actor that every answer passes before it leaves.

An agent sees a path when its grants cover it (:meth:`Actor.may_access`) and, for an
artifact (``ai/summaries/``, ``ai/notes/``), when they cover its source page too: a summary
tells what its page says. Everything an answer names (a page, a review session's pages, a
history entry's other files, an event, a status listing) is checked here, so a new field
that names a path has one place to ask. The owner sees everything. ``docs/protocol.md``,
*Who sees what*, is the table of it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from mnoted.errors import NotFound, PathRejected
from mnoted.service.actors import Actor
from mnoted.service.lru import Bounded
from mnoted.store import WorkspaceApi

ARTIFACT_DIRS = ("ai/summaries/", "ai/notes/")
READERS = "_readers"
"""An event's key for the paths whose grants it needs (:func:`event_visible`); a stream
sends no key that starts with ``_``."""
_SOURCE = re.compile(rb"^source:[ \t]*['\"]?([A-Za-z0-9_.-]+)['\"]?[ \t]*$", re.MULTILINE)
_SOURCES: Bounded[str, str] = Bounded(100_000, 100_000, lambda _: 1)
"""An artifact blob's source documentId (blobs never change: kept by blob id)."""
_NONE = ""


def is_artifact(path: str) -> bool:
    return path.startswith(ARTIFACT_DIRS)


def artifact_source(ws: WorkspaceApi, path: str) -> str | None:
    """The documentId of the page an artifact at ``path`` is about, or None.

    A summary names it in its file name (``ai/summaries/<documentId>.md``), from the
    registry alone; an AI note in its frontmatter (``source:``), read from its committed
    blob once per blob.
    """
    if path.startswith(ARTIFACT_DIRS[0]):
        name = path[len(ARTIFACT_DIRS[0]) :]
        return name[:-3] if name.endswith(".md") and "/" not in name else None
    if not path.startswith(ARTIFACT_DIRS[1]):
        return None
    try:
        blob = ws.blob_id(path)
    except PathRejected:  # (a path the store refuses names no artifact)
        return None
    if blob is None:
        return None
    known = _SOURCES.get(blob)
    if known is None:
        data = ws.read_blob(blob) or b""
        head = data[:4096] if data.startswith(b"---") else b""
        match = _SOURCE.search(head.split(b"\n---", 1)[0]) if head else None
        known = match.group(1).decode() if match else _NONE
        _SOURCES.put(blob, known)
    return known or None


def may_see(actor: Actor, ws: WorkspaceApi | None, path: str) -> bool:
    """Whether ``actor`` may learn anything of ``path`` (its name, its text, its history)."""
    if actor.is_owner:
        return True
    if not actor.may_access(path):
        return False
    if ws is None or not is_artifact(path):
        return True
    source = artifact_source(ws, path)
    if source is None:
        return True
    try:
        source_path = ws.resolve(source).path
    except NotFound:
        return True  # (its page is gone: the artifact tells of nothing hidden)
    return actor.may_access(source_path)


def session_paths(session: Mapping[str, Any]) -> list[str]:
    """Every path a review session touches (its page, and what its proposal writes)."""
    paths = set(session.get("paths") or ())
    if session.get("path"):
        paths.add(session["path"])
    return sorted(paths)


def may_see_all(actor: Actor, ws: WorkspaceApi | None, paths: Iterable[str]) -> bool:
    """Whether ``actor`` may see every one of ``paths`` (a session, a commit, an event)."""
    return all(may_see(actor, ws, p) for p in paths)


def event_visible(actor: Actor, event: Mapping[str, Any]) -> bool:
    """Whether ``actor``'s stream may carry ``event``: its workspace is the token's, and the
    grants cover every path it names (with an artifact's source)."""
    if actor.is_owner:
        return True
    if actor.workspace_id is not None and event.get("workspaceId") != actor.workspace_id:
        return False
    paths = list(event.get(READERS) or ())
    for key in ("path", "oldPath"):
        if isinstance(event.get(key), str):
            paths.append(event[key])
    return all(actor.may_access(str(p)) for p in paths)


def public(event: Mapping[str, Any]) -> dict[str, Any]:
    """``event`` as a stream sends it: without its internal keys."""
    return {k: v for k, v in event.items() if not k.startswith("_")}


def readers_of(ws: WorkspaceApi, path: str | None) -> list[str]:
    """The paths whose grants an event about ``path`` needs (it and an artifact's source),
    worked out on the workspace's thread where the event is made."""
    if path is None:
        return []
    out = [path]
    source = artifact_source(ws, path) if is_artifact(path) else None
    if source is not None:
        with contextlib.suppress(NotFound):
            out.append(ws.resolve(source).path)
    return out
