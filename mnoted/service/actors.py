"""Who is calling: the owner, or an agent holding a token, and what they may touch."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from mnoted.store.tokens import TokenRecord

OWNER_ID = "owner"


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

    def valid_at(self, now: float) -> bool:
        return not self.revoked and (self.expires_at is None or now < self.expires_at)

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
