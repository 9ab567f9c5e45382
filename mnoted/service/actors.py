"""Who is calling: the owner, or an agent holding a token, and what they may touch."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from mnoted.store.tokens import TokenRecord, token_state

OWNER_ID = "owner"


def utc_iso(ts: float) -> str:
    """``2026-12-04T05:24:45Z``: times in answers and messages."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


@dataclass(frozen=True)
class Actor:
    """A caller. The owner may do everything; an agent what its token grants."""

    actor_id: str
    kind: str  # "owner" | "agent"
    scopes: frozenset[str] | None = None  # None: every scope
    grants: tuple[str, ...] = ("**",)
    expires_at: float | None = None
    revoked: bool = False
    workspace_id: str | None = None  # an agent's token belongs to one workspace

    @property
    def is_owner(self) -> bool:
        return self.kind == "owner"

    def may_access(self, path: str) -> bool:
        """Whether the token's path grants cover ``path`` (:func:`glob_match`)."""
        if self.is_owner:
            return True
        return any(glob_match(path, pattern) for pattern in self.grants)

    def invalid_at(self, now: float) -> str | None:
        """Why the token no longer acts at ``now`` (revoked, expired), or None."""
        state = token_state(self.revoked, self.expires_at, now)
        if state == "revoked":
            return "the token was revoked"
        if state == "expired":
            assert self.expires_at is not None
            return f"the token expired at {utc_iso(self.expires_at)}"
        return None

    @classmethod
    def owner(cls, actor_id: str = OWNER_ID) -> Actor:
        return cls(actor_id, "owner")

    @classmethod
    def from_token(cls, record: TokenRecord, workspace_id: str | None = None) -> Actor:
        return cls(
            record.actor_id,
            "agent",
            frozenset(record.scopes),
            record.grants,
            record.expires_at,
            record.revoked,
            workspace_id,
        )


_COMPILED: dict[str, re.Pattern[str]] = {}


def glob_match(path: str, pattern: str) -> bool:
    """Whether the workspace-relative ``path`` matches the grant ``pattern``, gitignore style.

    Every pattern is anchored at the workspace root (a leading ``/`` changes nothing);
    ``*``, ``?`` and ``[...]`` never match ``/``; ``**`` as a whole path component
    matches any number of folders (``a/**/b.md``: ``a/b.md``, ``a/x/y/b.md``); a pattern
    that matches a folder covers everything in it (``notes``, ``notes/``, ``notes/**``);
    ``**`` alone covers everything. So ``projects/*.md`` grants ``projects/a.md``, never
    ``projects/sub/b.md``. ``tests/service/test_globs.py`` holds it to ``pathspec``'s
    gitignore matcher with every pattern rooted.
    """
    compiled = _COMPILED.get(pattern)
    if compiled is None:
        compiled = re.compile(_translate(pattern))
        if len(_COMPILED) < 4096:
            _COMPILED[pattern] = compiled
    return compiled.fullmatch(path) is not None


def _translate(pattern: str) -> str:
    """The regular expression of a grant pattern (see :func:`glob_match`)."""
    pattern = pattern.lstrip("/")
    folder_only = pattern.endswith("/")  # (it names folders: what is in them matches)
    parts = pattern.rstrip("/").split("/")
    out: list[str] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]*/)*")  # (any folders, or none)
            continue
        out.append(_component(part) + ("" if last else "/"))
    # a folder that matches covers what is in it
    return "".join(out) + ("/.*" if folder_only else "(?:/.*)?")


def _component(part: str) -> str:
    """One path component's pattern: ``*``/``?``/``[...]`` within it, the rest literal."""
    out: list[str] = []
    i = 0
    while i < len(part):
        c = part[i]
        if c == "*":
            while i + 1 < len(part) and part[i + 1] == "*":
                i += 1  # (``**`` inside a component is ``*``)
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := _class_end(part, i)) > 0:
            body = part[i + 1 : end]
            negate = body[:1] in ("!", "^")
            inner = "".join(ch if ch == "-" else re.escape(ch) for ch in body[negate:])
            out.append(f"[^/{inner}]" if negate else f"(?!/)[{inner}]")
            i = end
        elif c == "\\" and i + 1 < len(part):
            i += 1
            out.append(re.escape(part[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _class_end(part: str, start: int) -> int:
    """The index of the ``]`` closing the class opened at ``start``, or -1."""
    i = start + 1
    if part[i : i + 1] in ("!", "^"):
        i += 1
    if part[i : i + 1] == "]":
        i += 1
    return part.find("]", i)
