"""Events of either source (the inotify reader, watchdog's fallback observer), made
workspace-relative for the debouncer.

Pure: strings in, :class:`~mnoted.sync.debounce.FsEvent` out.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from mnoted.sync.debounce import EventKind, FsEvent
from mnoted.sync.ignore import is_internal

__all__ = ["Event", "Normalized", "normalize", "relative"]

Event = tuple[EventKind, str, "str | None", bool]
"""An event on absolute paths: kind, path, destination (moves), is a folder."""


def relative(root: str, path: str) -> str | None:
    """``path`` relative to ``root`` in POSIX form; "" for the root; None when outside."""
    if path == root:
        return ""
    prefix = root.rstrip(os.sep) + os.sep
    if not path.startswith(prefix):
        return None
    rel = path[len(prefix) :]
    return rel.replace(os.sep, "/") if os.sep != "/" else rel


@dataclass(slots=True)
class Normalized:
    """What :func:`normalize` kept, and what it dropped as internal."""

    events: list[FsEvent] = field(default_factory=list)
    internal: int = 0
    gitignore_changed: bool = False


def normalize(root: str, events: Iterable[Event]) -> Normalized:
    """Workspace-relative events; the root's own and those outside are left out, those in
    ``.git/`` or ``.mnote/`` counted (their top entries show on the root's watch), and a
    move out of the workspace becomes a delete."""
    out = Normalized()
    for kind, src, dest, is_dir in events:
        rel = relative(root, src)
        if not rel:
            continue  # outside, or the root itself: its loss is noticed by the liveness check
        dest_rel: str | None = None
        if kind is EventKind.MOVED:
            dest_rel = relative(root, dest) if dest is not None else None
            if not dest_rel:
                kind, dest_rel = EventKind.DELETED, None
        if is_internal(rel) and (dest_rel is None or is_internal(dest_rel)):
            out.internal += 1
            continue
        if not is_dir and (_is_gitignore(rel) or (dest_rel and _is_gitignore(dest_rel))):
            out.gitignore_changed = True
        out.events.append(FsEvent(kind, rel, dest_rel, is_dir))
    return out


def _is_gitignore(rel: str) -> bool:
    return rel == ".gitignore" or rel.endswith("/.gitignore")
