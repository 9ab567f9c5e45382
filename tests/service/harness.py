"""The service tests' harness: a real workspace (Git repository in tmp_path) behind a real
executor, called as a client calls it and read as a user reads the repository."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path
from typing import Any

from mnoted.service import Actor, Service
from mnoted.store import Workspace
from mnoted.store.tokens import TokenStore
from tests.conftest import envelope

_ids = itertools.count(1)

PLAN = """---
title: Project plan
tags: [work]
---
# Goals

Ship the beta on Monday.

- design review
- write docs
  - API reference

## Risks

Budget risk is high.
"""

SECRET = """# Salary negotiation

The number I will ask for is 123456.
"""


class Harness:
    """Calls tools the way a client does, and reads the repository the way a user does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ws = Workspace.init(root)
        self.ws.settle_quiet = 0.0  # (its files are written whole, by write_file, and closed)
        self.service = Service()
        self.service.add(self.ws)
        self.owner = Actor.owner()

    def reopen(self) -> None:
        """A daemon restart: close everything, open the workspace and a new executor again."""
        self.ws.close()
        self.ws = Workspace.open(self.root)
        self.ws.settle_quiet = 0.0
        self.service = Service()
        self.service.add(self.ws)

    def write_file(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        self.ws.commit_external([rel])

    def doc(self, rel: str) -> str:
        return self.ws.resolve(rel).document_id

    def agent(
        self,
        actor_id: str = "hermes",
        scopes: tuple[str, ...] = ("page.read", "page.write", "artifact.write"),
        grants: tuple[str, ...] = ("**",),
        expires_at: float | None = None,
    ) -> Actor:
        _, record = TokenStore(self.ws.state_dir).create(
            actor_id, scopes, grants, expires_at, now=0.0
        )
        return Actor.from_token(record)

    def envelope(self, tool: str, **fields: Any) -> dict[str, Any]:
        return envelope(tool, **{"workspaceId": self.ws.workspace_id, **fields})

    def call(self, tool: str, actor: Actor | None = None, **fields: Any) -> dict[str, Any]:
        return self.service.call(self.envelope(tool, **fields), actor or self.owner)

    def write(self, tool: str, actor: Actor | None = None, **fields: Any) -> dict[str, Any]:
        fields.setdefault("idempotencyKey", f"idem_{next(_ids)}")
        fields.setdefault("dryRun", False)
        return self.call(tool, actor, **fields)

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=self.root, check=True, capture_output=True, text=True
        ).stdout

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").strip()
