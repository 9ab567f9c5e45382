"""Agent tokens of a workspace: who may call, with which scopes, on which paths, until when.

Kept in ``.git/mnote/state/tokens.json`` (mode 0600, never committed). Only a hash of each
token is stored; the token itself is shown once, when the owner creates it.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

from mnoted.errors import InvalidArguments, NotFound, WorkspaceInvalid
from mnoted.store import statcache
from mnoted.store.atomic import write_atomic

TOKENS_FILE = "tokens.json"
TOKEN_PREFIX = "mnt_"
ACTOR_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""An agent's actor id: it names the agent in commits (author, ``Mnote-Actor`` trailer)."""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TokenRecord:
    """What a token grants. ``grants`` are path globs (``notes/**``); ``expires_at`` epoch s."""

    token_id: str
    actor_id: str
    scopes: tuple[str, ...]
    grants: tuple[str, ...]
    expires_at: float | None
    created_at: float
    hash: str
    revoked: bool = False

    def state(self, now: float) -> str:
        return token_state(self.revoked, self.expires_at, now)


def token_state(revoked: bool, expires_at: float | None, now: float) -> str:
    """``active``, ``expired`` or ``revoked``: whether a token acts at ``now``."""
    if revoked:
        return "revoked"
    return "expired" if expires_at is not None and now >= expires_at else "active"


_Stamp = tuple[int, int, int, int]
_LOADED: dict[Path, tuple[_Stamp, list[TokenRecord]]] = {}
"""Parsed token files by path, with the stat data they were read at (every request of an
agent looks its token up; the file is parsed again only when it changed)."""


class TokenStore:
    """The token file of one workspace (checked on every lookup, so revocation is immediate:
    the file is replaced by a rename, which changes its stat data)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / TOKENS_FILE

    def _load(self) -> list[TokenRecord]:
        stamp = statcache.stamp(self.path)
        if stamp is None:
            return []
        known = _LOADED.get(self.path)
        if known is not None and known[0] == stamp:
            return list(known[1])
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            raise self._damaged(str(exc)) from None
        records = self._parse(text)
        _LOADED[self.path] = (stamp, records)
        return list(records)

    def _parse(self, text: str) -> list[TokenRecord]:
        """The records of the file's ``text``; :class:`WorkspaceInvalid` naming the file if
        it is not what :meth:`_save` writes."""
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise self._damaged(f"not JSON ({exc})") from None
        rows = raw.get("tokens") if isinstance(raw, dict) else None
        if not isinstance(rows, list):
            raise self._damaged('no "tokens" list at its top')
        records = []
        for n, row in enumerate(rows):
            try:
                record = TokenRecord(
                    **{**row, "scopes": tuple(row["scopes"]), "grants": tuple(row["grants"])}
                )
                ok = (
                    all(isinstance(v, str) for v in (record.token_id, record.actor_id))
                    and isinstance(record.hash, str)
                    and all(isinstance(v, str) for v in (*record.scopes, *record.grants))
                    and isinstance(record.revoked, bool)
                    and (record.expires_at is None or isinstance(record.expires_at, int | float))
                )
            except (TypeError, KeyError):
                ok = False
            if not ok:
                raise self._damaged(f"token {n + 1} is not a token record")
            records.append(record)
        return records

    def _damaged(self, detail: str) -> WorkspaceInvalid:
        return WorkspaceInvalid(
            f"{self.path} is damaged: {detail}; no agent token of this workspace is accepted "
            "until it is mended",
            hint=f"Restore {self.path} from a backup, or move it aside and make the agents' "
            "tokens again with `mnote grant create` (the owner's token still works).",
            file=str(self.path),
        )

    def _save(self, records: list[TokenRecord]) -> None:
        data = json.dumps({"tokens": [asdict(r) for r in records]}, indent=2).encode("utf-8")
        write_atomic(self.path, data, mode=0o600)

    def create(
        self,
        actor_id: str,
        scopes: tuple[str, ...],
        grants: tuple[str, ...],
        expires_at: float | None,
        now: float,
    ) -> tuple[str, TokenRecord]:
        """A new token (returned once, in clear) and its record."""
        if not ACTOR_ID.fullmatch(actor_id) or actor_id in ("owner", "external", "mnoted"):
            raise InvalidArguments(
                f"{actor_id!r} cannot be an agent's actor id",
                hint="Use up to 64 letters, digits, '.', '_' or '-' (e.g. hermes), other "
                "than owner, external and mnoted.",
            )
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        record = TokenRecord(
            token_id="tok_" + secrets.token_hex(6),
            actor_id=actor_id,
            scopes=tuple(scopes),
            grants=tuple(grants) or ("**",),
            expires_at=expires_at,
            created_at=now,
            hash=token_hash(token),
        )
        self._save([*self._load(), record])
        return token, record

    def find(self, token: str) -> TokenRecord | None:
        digest = token_hash(token)
        for record in self._load():
            if secrets.compare_digest(record.hash, digest):
                return record
        return None

    def list(self) -> list[TokenRecord]:
        return self._load()

    def revoke(self, token_id: str) -> TokenRecord:
        records = self._load()
        for i, record in enumerate(records):
            if record.token_id == token_id:
                records[i] = TokenRecord(**{**asdict(record), "revoked": True})
                self._save(records)
                return records[i]
        raise NotFound(f"no token {token_id!r}")
