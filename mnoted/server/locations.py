"""Where mnoted keeps things on this machine: config folder, owner token, default socket.

Light on purpose (standard library only): clients and plugins import it without the
daemon's dependencies.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def config_dir(env: dict[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/mnoted``, else ``~/.config/mnoted``."""
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", str(Path.home()))) / ".config")
    return Path(base) / "mnoted"


def default_socket_path(env: dict[str, str] | None = None) -> Path:
    """``$XDG_RUNTIME_DIR/mnoted/mnoted.sock``, else ``/tmp/mnoted-$UID/mnoted.sock``."""
    env = dict(os.environ) if env is None else env
    runtime = env.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "mnoted" if runtime else Path(f"/tmp/mnoted-{os.getuid()}")
    return base / "mnoted.sock"


SOCKET_RECORD = "socket-path"
"""The file in the config folder where a running daemon writes the path of its socket."""


def record_socket(socket: Path, env: dict[str, str] | None = None) -> Path:
    """Write ``socket``'s absolute path in the config folder (replaced atomically, 0600), so
    a client started with HOME alone (an MCP host strips ``XDG_RUNTIME_DIR``) finds it."""
    directory = config_dir(env)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    record = directory / SOCKET_RECORD
    temp = directory / f".{SOCKET_RECORD}.{os.getpid()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(str(socket.absolute()) + "\n")
    os.replace(temp, record)
    return record


def forget_socket(socket: Path, env: dict[str, str] | None = None) -> None:
    """Remove the record if it still names ``socket`` (another daemon may have taken it)."""
    record = config_dir(env) / SOCKET_RECORD
    try:
        if record.read_text(encoding="utf-8").strip() == str(socket.absolute()):
            record.unlink()
    except OSError:
        pass


def find_socket(env: dict[str, str] | None = None) -> Path:
    """The daemon's socket as a client finds it: ``$MNOTED_SOCKET``; else
    ``$XDG_RUNTIME_DIR/mnoted/mnoted.sock`` if it is there; else the path the running
    daemon recorded in the config folder (found from HOME alone); else the default."""
    env = dict(os.environ) if env is None else env
    given = env.get("MNOTED_SOCKET")
    if given:
        return Path(given)
    default = default_socket_path(env)
    if env.get("XDG_RUNTIME_DIR") and default.exists():
        return default
    try:
        recorded = (config_dir(env) / SOCKET_RECORD).read_text(encoding="utf-8").strip()
    except OSError:
        recorded = ""
    if recorded and Path(recorded).exists():
        return Path(recorded)
    return default


def owner_token(directory: Path, *, create: bool) -> str | None:
    """The owner's token, kept 0600 in the user's config folder (created on first start)."""
    path = directory / "owner.token"
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        if not create:
            return None
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = "mno_" + secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    return token
