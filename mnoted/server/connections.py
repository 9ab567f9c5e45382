"""Connections no caller can use to lock the others out of the daemon.

Three floods starved every caller before (``docs/reliability.md``): idle connections up to
the open-file limit (1,024 in a desktop session: ``accept`` then fails and asyncio stops
accepting for a second at a time), a burst of connects over the listen backlog (128: the
rest get ``EAGAIN``), and one process holding as many connections as it likes. So:

- the daemon raises its own open-file soft limit to the hard limit (:func:`raise_open_files`);
- the listen backlog is :data:`BACKLOG` (the kernel caps it at ``net.core.somaxconn``);
- a connection that has not sent a whole request's head within ``first_request_seconds`` is
  closed (after its first request, the keep-alive timeout applies);
- each caller (the peer's pid, from ``SO_PEERCRED``) holds at most ``per_caller`` open
  connections: one more is answered ``503`` with an ``mnote_tool_too_large`` error when
  its request comes, and closed;
- past :attr:`ConnectionGuard.total` connections (the open-file limit less a reserve for
  the workspaces' own files) a new connection is closed at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import socket
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any

from mnoted.errors import TooLarge

log = logging.getLogger("mnoted.connections")

BACKLOG = max(4096, socket.SOMAXCONN)
"""Connects queued before the daemon accepts them (the kernel caps it at somaxconn)."""

FILES_RESERVED = 512
"""Open files kept for the workspaces (repositories, packs, the sidecar, the watcher)."""

NOFILE_CEILING = 1 << 20
"""The soft limit asked for when the hard limit is unlimited."""


def raise_open_files() -> int:
    """Raise this process's soft open-file limit to its hard limit; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = NOFILE_CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError) as exc:  # (a sandbox may refuse it)
            log.warning("could not raise the open-file limit from %d: %s", soft, exc)
    return int(soft) if soft != resource.RLIM_INFINITY else NOFILE_CEILING


def peer_creds(sock: Any) -> tuple[int, int] | None:
    """The (pid, uid) of the process at the other end (SO_PEERCRED), None where unsupported."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    pid, uid, _gid = struct.unpack("3i", creds)
    return int(pid), int(uid)


def peer_pid(sock: Any) -> int | None:
    """The pid of the process at the other end; None where unsupported."""
    creds = peer_creds(sock)
    return creds[0] if creds is not None and creds[0] > 0 else None


def refusal(exc: TooLarge) -> bytes:
    """The whole HTTP answer sent on a connection over a cap, before it is closed."""
    body = json.dumps({"ok": False, "error": exc.to_dict()}).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class ConnectionGuard:
    """Counts open connections by caller and wraps the HTTP server's protocol factory."""

    def __init__(self, first_request_seconds: float, per_caller: int, total: int) -> None:
        self.first_request_seconds = first_request_seconds
        self.per_caller = per_caller
        self.total = total
        self.by_caller: Counter[int | None] = Counter()
        self.open = 0
        self.refused = 0
        self.expired = 0
        self._waiting: dict[int, _Guarded] = {}  # by id(transport): no request head yet
        self._all: set[_Guarded] = set()

    def factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for ``loop.create_server`` around aiohttp's ``inner``."""
        return lambda: _Guarded(self, inner)

    def request_started(self, transport: asyncio.BaseTransport | None) -> None:
        """A request's head arrived on ``transport``: the first-request deadline is met."""
        if transport is not None:
            guarded = self._waiting.pop(id(transport), None)
            if guarded is not None:
                guarded.met_deadline()

    def close_all(self) -> None:
        """Close every connection still open (at shutdown, after aiohttp closed its own)."""
        for guarded in list(self._all):
            guarded.close()

    def stats(self) -> dict[str, int]:
        return {
            "open": self.open,
            "callers": len(self.by_caller),
            "refused": self.refused,
            "closedIdle": self.expired,
            "limit": self.total,
            "perCaller": self.per_caller,
        }


class _Guarded(asyncio.Protocol):
    """One connection: aiohttp's protocol, admitted or refused by the guard."""

    def __init__(self, guard: ConnectionGuard, inner: Callable[[], asyncio.Protocol]) -> None:
        self.guard = guard
        self.make_inner = inner
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.caller: int | None = None
        self.counted = False
        self.over: TooLarge | None = None  # refused: answered this when its request comes
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        guard = self.guard
        self.transport = transport
        if guard.open >= guard.total:
            guard.refused += 1
            transport.abort()
            return
        self.caller = peer_pid(transport.get_extra_info("socket"))
        guard.open += 1
        guard.by_caller[self.caller] += 1
        guard._all.add(self)
        self.counted = True
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(guard.first_request_seconds, self.expire)
        if self.caller is not None and guard.by_caller[self.caller] > guard.per_caller:
            guard.refused += 1
            self.over = TooLarge(
                f"process {self.caller} holds {guard.per_caller} connections to mnoted, its limit",
                hint="Reuse a connection (HTTP keep-alive) or close the ones left idle.",
            )
            return
        guard._waiting[id(transport)] = self
        self.inner = self.make_inner()
        self.inner.connection_made(transport)

    def met_deadline(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def expire(self) -> None:
        """No request head within the first-request time: closed."""
        self.timer = None
        self.guard.expired += 1
        self.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)
        elif self.over is not None and self.transport is not None:
            self.transport.write(refusal(self.over))
            self.over = None
            self.transport.close()

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        guard = self.guard
        self.met_deadline()
        if self.counted:
            self.counted = False
            guard.open -= 1
            guard.by_caller[self.caller] -= 1
            if guard.by_caller[self.caller] <= 0:
                del guard.by_caller[self.caller]
            guard._all.discard(self)
        if self.transport is not None:
            guard._waiting.pop(id(self.transport), None)
        if self.inner is not None:
            self.inner.connection_lost(exc)
