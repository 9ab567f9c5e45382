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
_BLANK_ID_LINE = re.compile(
    r"""^workspaceId[ \t]*=[ \t]*(["'])[ \t]*\1(?P<rest>[ \t]*(?:#.*)?)$""", re.MULTILINE
)


def new_workspace_id() -> str:
    return "ws_" + secrets.token_hex(8)


def render(text: str, workspace_id: str) -> str:
    """Config ``text`` (the template's, or a workspace's own) with its blank or missing
    ``workspaceId`` filled in; the rest of the text is kept as it was."""
    line = f'workspaceId = "{workspace_id}"'
    filled, count = _BLANK_ID_LINE.subn(lambda m: line + m["rest"], text, count=1)
    return filled if count else f"{line}\n{text}"


def lacks_id(text: str) -> bool:
    """Whether config ``text`` is TOML whose ``workspaceId`` is missing or blank (what
    ``mnote init`` fills in: a config copied from the template, or written by hand)."""
    try:
        wid = tomllib.loads(text).get("workspaceId")
    except tomllib.TOMLDecodeError:
        return False
    return wid is None or (isinstance(wid, str) and not wid.strip())


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
        return cls.parse(config_text(root), str(root / CONFIG_PATH))


def config_text(root: Path) -> str:
    """The text of ``root``'s config; :class:`WorkspaceInvalid` if it has none or it is not
    UTF-8."""
    path = root / CONFIG_PATH
    try:
        return path.read_text("utf-8")
    except FileNotFoundError:
        raise WorkspaceInvalid(
            f"{root} is not an mnote workspace (no {CONFIG_PATH})",
            hint=f"Run `mnote init {root}` first.",
        ) from None
    except UnicodeDecodeError as exc:
        raise WorkspaceInvalid(
            f"{path} is not UTF-8 ({exc.reason} at byte {exc.start})",
            hint=f"Fix {path} and try again.",
        ) from None


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
