"""The systemd notify protocol (``READY=1``, ``WATCHDOG=1``, ``STOPPING=1``): a datagram
to ``$NOTIFY_SOCKET``. A few lines; no dependency."""

from __future__ import annotations

import os
import socket


def notify(message: str, env: dict[str, str] | None = None) -> bool:
    """Send ``message`` to systemd if it is listening; False when not run under systemd."""
    target = (env if env is not None else os.environ).get("NOTIFY_SOCKET")
    if not target:
        return False
    address = "\0" + target[1:] if target.startswith("@") else target
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(address)
            sock.sendall(message.encode("utf-8"))
        except OSError:
            return False
    return True


def watchdog_interval(env: dict[str, str] | None = None) -> float | None:
    """Half the watchdog timeout systemd asked for, in seconds (None: no watchdog)."""
    env = env if env is not None else dict(os.environ)
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2_000_000
    except ValueError:
        return None
