"""Who a commit is authored by: the person's Git identity, or an agent's actor id.

:class:`Authors` reads the person's identity from Git's config (kept for
:data:`IDENTITY_SECONDS`), or uses the one the workspace was opened with.
"""

from __future__ import annotations

import time

import pygit2

from mnoted.store import bootstrap, message
from mnoted.store.model import CommandMeta, Identity

OWNER_ACTOR = "owner"
"""The owner's actor id (``service.actors.OWNER_ID``): their commits carry their Git identity."""
IDENTITY_SECONDS = 5.0
"""How long the person's Git identity, once read, is used before it is read again."""


class Authors:
    """The authors of the store's commits."""

    def __init__(self, repo: pygit2.Repository, given: Identity | None) -> None:
        """``given``: the identity external edits are authored as, instead of Git's config."""
        self._repo = repo
        self._given = given
        self._user: tuple[float, Identity | None] | None = None  # (read at, user_identity)

    def user_identity(self) -> Identity | None:
        """The person's Git identity (``user.name``, ``user.email``), or None if unset;
        read from Git's config again after :data:`IDENTITY_SECONDS` (a read costs about as
        much as a tenth of a small write)."""
        if self._given is not None:
            return self._given
        now = time.monotonic()
        if self._user is None or now - self._user[0] > IDENTITY_SECONDS:
            self._user = (now, bootstrap.user_identity(self._repo))
        return self._user[1]

    def signature(self, meta: CommandMeta) -> pygit2.Signature:
        """The author of ``meta``'s commit: ``meta.author``; the person's Git identity for
        ``external`` edits and for the owner; an address made of the actor id for agents."""
        if meta.author is not None:
            ident = meta.author
        elif meta.actor == bootstrap.EXTERNAL_ACTOR:
            ident = self._given or bootstrap.identity_from_config(self._repo)
        elif meta.actor == OWNER_ACTOR:  # (the person: `git log --author` finds their edits)
            ident = self.user_identity() or Identity(OWNER_ACTOR, f"{OWNER_ACTOR}@mnote.local")
        else:
            safe = "".join(c for c in meta.actor if c.isalnum() or c in "-_.") or "agent"
            ident = Identity(meta.actor, f"{safe}@mnote.local")
        # every name cleaned, whatever made it (a token from before actor ids were checked,
        # a Git config, a grant's)
        name = message.signature_name(ident.name) or ident.email.partition("@")[0] or "mnoted"
        return pygit2.Signature(name, ident.email)
