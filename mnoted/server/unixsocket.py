"""A Unix socket only its owner can reach: 0700 folder, 0600 socket, peer uid checked.

aiohttp cannot set a socket's mode, so the socket is bound here (under a umask, so there
is never a moment it is open to others) and handed to ``web.SockSite``. A socket left by a
crashed daemon is replaced; one that answers belongs to a live daemon and is left alone.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from pathlib import Path

from mnoted.errors import WorkspaceInvalid
from mnoted.server.connections import BACKLOG, peer_creds

MAX_PATH = 107  # sun_path is 108 bytes with the trailing NUL


def private_dir(path: Path) -> None:
    """Create ``path`` 0700, or check that an existing one is ours, a real folder, and private."""
    with contextlib.suppress(FileExistsError):
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise WorkspaceInvalid(f"{path} is not a folder (a symlink or file is in the way)")
    if info.st_uid != os.getuid():
        raise WorkspaceInvalid(f"{path} belongs to another user; refusing to put a socket there")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)


def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def bind_private(path: Path) -> socket.socket:
    """A listening socket at ``path``, mode 0600, inside a private folder."""
    if len(os.fsencode(str(path))) > MAX_PATH:
        raise WorkspaceInvalid(
            f"socket path {path} is longer than {MAX_PATH} bytes",
            hint="Pass a shorter --listen path (for example under /tmp).",
        )
    private_dir(path.parent)
    if path.exists() or path.is_symlink():
        if _answers(path):
            raise WorkspaceInvalid(
                f"another mnoted is already listening on {path}",
                hint="Use that daemon (mnote status), or stop it first.",
            )
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end, None where unsupported."""
    creds = peer_creds(sock)
    return None if creds is None else creds[1]
