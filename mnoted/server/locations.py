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
