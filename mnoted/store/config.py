"""The workspace profile in ``.mnote/config.toml``: id, disabled tools, limits, ignores.

The store reads it once when a workspace opens; composition roots pass it on from there.
"""

from __future__ import annotations

import fnmatch
import re
import secrets
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mnoted.errors import WorkspaceInvalid
from mnoted.store.settings import Setting, read_table, unknown_keys

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
    remote_name: str = "origin"  # [remote]: a Git remote the sync keeps (docs/remote.md)
    remote_url: str = ""  # "" = none named here (`mnote remote add` still works)
    sync_interval: float = 60.0  # fetch this often (seconds)
    push_delay: float = 2.0  # push once local commits paused this long (seconds)

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
        unknown_keys(data, SETTINGS, origin)
        profile = read_table(data, "profile", SETTINGS["profile"], origin)
        limits = read_table(data, "limits", SETTINGS["limits"], origin)
        ignore = read_table(data, "ignore", SETTINGS["ignore"], origin)
        remote = read_table(data, "remote", SETTINGS["remote"], origin)
        _check_remote(remote, origin)
        unknown = [t for t in profile["disabledTools"] if _known_tools and t not in _known_tools]
        if unknown:
            raise WorkspaceInvalid(
                f"{origin}: [profile] disabledTools names no tool: {', '.join(unknown)}",
                hint="Name tools as `mnote tools` lists them (e.g. mnote.page.delete) in "
                f"{origin}.",
                file=origin,
                key="profile.disabledTools",
            )
        return cls(
            workspace_id=wid.strip(),
            disabled_tools=frozenset(profile["disabledTools"]),
            max_file_bytes=limits["maxFileBytes"],
            max_request_bytes=limits["maxRequestBytes"],
            ignore_patterns=tuple(ignore["patterns"]),
            approval_mode=profile["approvalMode"],
            remote_name=remote["name"],
            remote_url=remote["url"],
            sync_interval=remote["interval"],
            push_delay=remote["pushDelay"],
        )

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


_known_tools: frozenset[str] = frozenset()


def know_tools(names: Iterable[str]) -> None:
    """The tool names ``disabledTools`` may hold, given by the composition root (the store
    does not know the contract); until then any name is taken."""
    global _known_tools
    _known_tools = frozenset(names)


SETTINGS: dict[str | None, dict[str, Setting]] = {
    None: {"workspaceId": Setting("str", "")},
    "profile": {
        "disabledTools": Setting("list", []),
        "approvalMode": Setting("str", "review", choices=("yolo", "review", "required")),
    },
    "limits": {
        # (a smaller file limit refuses every page worth the name; a smaller request limit,
        # every call that carries a page)
        "maxFileBytes": Setting("int", WorkspaceConfig.max_file_bytes, 1024, 1 << 30),
        "maxRequestBytes": Setting("int", WorkspaceConfig.max_request_bytes, 4096, 1 << 30),
    },
    "ignore": {"patterns": Setting("list", [])},
    "remote": {
        "name": Setting("str", WorkspaceConfig.remote_name),
        "url": Setting("str", WorkspaceConfig.remote_url),
        "interval": Setting("float", WorkspaceConfig.sync_interval, 1, 86_400),
        "pushDelay": Setting("float", WorkspaceConfig.push_delay, 0.1, 3_600),
    },
}
"""Every key of ``.mnote/config.toml``, by table (None: the top level), with its type,
default and range."""


_REMOTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _check_remote(remote: dict[str, object], origin: str) -> None:
    """A remote's name as ``git remote`` takes one; a URL that holds no password (the file
    is committed and synced: a secret in it would travel with the notes)."""
    name = str(remote["name"])
    if not _REMOTE_NAME.fullmatch(name):
        raise WorkspaceInvalid(
            f"{origin}: [remote] name = {name!r} is not a Git remote name",
            hint=f"Use letters, digits, '.', '_' or '-' (e.g. \"origin\") in {origin}.",
            file=origin,
            key="remote.name",
        )
    url = str(remote["url"])
    if any(c.isspace() for c in url) or url.startswith("-"):
        raise WorkspaceInvalid(
            f"{origin}: [remote] url is not a URL git can use",
            hint=f"Write it as `git clone` takes it (ssh://, https://, file://, host:path) in "
            f"{origin}.",
            file=origin,
            key="remote.url",
        )
    user = url.partition("://")[2].partition("/")[0].rpartition("@")[0]
    if ":" in user:
        raise WorkspaceInvalid(
            f"{origin}: [remote] url holds a password",
            hint="This file is committed and synced with the notes: leave the password out "
            "and let git's credential helper or SSH agent supply it.",
            file=origin,
            key="remote.url",
        )
