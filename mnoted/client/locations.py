"""How a client finds the daemon's socket (standard library only: doors load it fast)."""

from __future__ import annotations

import os
from pathlib import Path

from mnoted.locations import SOCKET_RECORD, config_dir, default_socket_path


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
