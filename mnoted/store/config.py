"""The workspace profile in ``.mnote/config.toml``: id, disabled tools, limits, ignores.

The store reads it once when a workspace opens; composition roots pass it on from there.
"""

from __future__ import annotations

import fnmatch
import re
import secrets
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnoted.errors import WorkspaceInvalid

CONFIG_PATH = ".mnote/config.toml"
_ID_LINE = re.compile(r'^workspaceId\s*=\s*""\s*$', re.MULTILINE)


def new_workspace_id() -> str:
    return "ws_" + secrets.token_hex(8)


def render(template: str, workspace_id: str) -> str:
    """The template's config text with its empty ``workspaceId`` filled in."""
    text, count = _ID_LINE.subn(f'workspaceId = "{workspace_id}"', template, count=1)
    if count != 1:
        text = f'workspaceId = "{workspace_id}"\n' + template
    return text


@dataclass(frozen=True)
class WorkspaceConfig:
    """A workspace's profile settings."""

    workspace_id: str
    disabled_tools: frozenset[str] = frozenset()
    max_file_bytes: int = 1_048_576
    max_request_bytes: int = 4_194_304
    ignore_patterns: tuple[str, ...] = ()
    approval_mode: str = "review"  # yolo | review | required

    def is_ignored(self, path: str) -> bool:
        """Whether a workspace-relative path matches one of the ignore patterns."""
        name = path.rsplit("/", 1)[-1]
        return any(
            fnmatch.fnmatchcase(path, pat) or fnmatch.fnmatchcase(name, pat)
            for pat in self.ignore_patterns
        )

    @classmethod
    def parse(cls, text: str, origin: str = CONFIG_PATH) -> WorkspaceConfig:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise WorkspaceInvalid(
                f"{origin} is not valid TOML: {exc}", hint=f"Fix {origin} and try again."
            ) from exc
        wid = data.get("workspaceId")
        if not isinstance(wid, str) or not wid.strip():
            raise WorkspaceInvalid(
                f"{origin} has no workspaceId", hint="Run `mnote init` on the folder again."
            )
        profile = _table(data, "profile", origin)
        limits = _table(data, "limits", origin)
        ignore = _table(data, "ignore", origin)
        try:
            return cls(
                workspace_id=wid.strip(),
                disabled_tools=frozenset(str(t) for t in profile.get("disabledTools", [])),
                max_file_bytes=int(limits.get("maxFileBytes", cls.max_file_bytes)),
                max_request_bytes=int(limits.get("maxRequestBytes", cls.max_request_bytes)),
                ignore_patterns=tuple(str(p) for p in ignore.get("patterns", [])),
                approval_mode=_approval_mode(profile.get("approvalMode", "review"), origin),
            )
        except (TypeError, ValueError) as exc:
            raise WorkspaceInvalid(f"{origin}: {exc}", hint=f"Fix {origin} and try again.") from exc

    @classmethod
    def load(cls, root: Path) -> WorkspaceConfig:
        path = root / CONFIG_PATH
        try:
            text = path.read_text("utf-8")
        except FileNotFoundError:
            raise WorkspaceInvalid(
                f"{root} is not an mnote workspace (no {CONFIG_PATH})",
                hint=f"Run `mnote init {root}` first.",
            ) from None
        return cls.parse(text, str(path))


def _table(data: dict[str, Any], name: str, origin: str) -> dict[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise WorkspaceInvalid(f"{origin}: [{name}] must be a table")
    return value


def _approval_mode(value: Any, origin: str) -> str:
    if value not in ("yolo", "review", "required"):
        raise WorkspaceInvalid(
            f"{origin}: approvalMode must be yolo, review or required, not {value!r}",
            hint=f"Fix {origin} and try again.",
        )
    return str(value)
