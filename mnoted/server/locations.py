"""What the daemon writes where its clients look (:mod:`mnoted.locations`): the socket
record and the owner's token, made on first start."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from mnoted.locations import OWNER_TOKEN, SOCKET_RECORD, config_dir, read_owner_token


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


def owner_token(directory: Path) -> str:
    """The owner's token, kept 0600 in the user's config folder (created on first start)."""
    token = read_owner_token(directory)
    if token is not None:
        return token
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = "mno_" + secrets.token_urlsafe(32)
    fd = os.open(directory / OWNER_TOKEN, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    return token
