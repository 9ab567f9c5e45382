"""Who is calling: the owner, or an agent holding a token, and what they may touch."""

from __future__ import annotations

import fnmatch
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
        """Whether the token's path grants cover ``path`` (``**`` matches across folders)."""
        if self.is_owner:
            return True
        return any(_glob(path, pattern) for pattern in self.grants)

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


def _glob(path: str, pattern: str) -> bool:
    if pattern in ("**", "*"):
        return True
    if pattern.endswith("/**"):
        return path.startswith(pattern[:-2])
    return fnmatch.fnmatchcase(path, pattern)
