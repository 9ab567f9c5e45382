"""Where mnoted keeps things on this machine, as both the daemon and its clients agree:
the config folder, the owner's token file, the default socket and the socket record.

Standard library only and no writes: a base module beneath every layer, so the daemon
(:mod:`mnoted.server.locations`) and the clients (:mod:`mnoted.client.locations`) share
one rule for each place.
"""

from __future__ import annotations

import os
from pathlib import Path

SOCKET_RECORD = "socket-path"
"""The file in the config folder where a running daemon writes the path of its socket."""

OWNER_TOKEN = "owner.token"
"""The file in the config folder that holds the owner's token (0600)."""


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


def read_owner_token(directory: Path) -> str | None:
    """The owner's token kept in ``directory`` (the config folder); None if there is none."""
    try:
        return (directory / OWNER_TOKEN).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
