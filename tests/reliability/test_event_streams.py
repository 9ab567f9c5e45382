"""``/v1/events`` readers that stop reading: dropped, and the daemon stops at once beside them;
a stream ends when its token stops acting."""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tests.e2e.conftest import DaemonProcess, running_daemon

STALLED = 51


@contextmanager
def daemon_with(limits: str) -> Iterator[DaemonProcess]:
    with running_daemon(config="[limits]\n" + limits) as d:
        yield d


def subscribe(d: DaemonProcess, token: str) -> socket.socket:
    """An event stream's connection, its answer's head read, nothing more."""
    s = socket.socket(socket.AF_UNIX)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(30)
    s.connect(str(d.socket))
    s.sendall(
        f"GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head
    return s


def health(d: DaemonProcess) -> dict[str, Any]:
    status, body = d.client().request("GET", "/v1/health")
    assert status == 200
    return dict(body)


def save_until(d: DaemonProcess, done: Callable[[dict[str, Any]], bool], limit: float = 60) -> None:
    """Page saves (each an event for every subscriber) until ``done(health)``."""
    client = d.client(d.owner_token())
    deadline = time.monotonic() + limit
    i = 0
    while not done(health(d)):
        assert time.monotonic() < deadline, health(d)
        for _ in range(10):
            i += 1
            answer = client.call("mnote.page.save", "plan.md", {"content": [f"Line {i} " * 40]})
            assert answer["ok"], answer


def ended(s: socket.socket, within: float) -> bool:
    """Whether the daemon ends the stream within ``within`` seconds (what was sent before
    is read and thrown away)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
        if not chunk or chunk.endswith(b"0\r\n\r\n"):  # (closed, or the last chunk)
            return True
    return False


def test_sigterm_beside_stalled_subscribers_exits_at_once() -> None:
    # (small socket buffers, so a few events fill them; no write timeout before the stop)
    with daemon_with("eventBufferBytes = 4096\neventWriteSeconds = 600\n") as d:
        stalled = [subscribe(d, d.owner_token()) for _ in range(STALLED)]
        save_until(d, lambda h: h["eventStreams"]["waiting"] == STALLED)
        assert d.proc is not None
        started = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        code = d.proc.wait(timeout=60)
        took = time.monotonic() - started
        assert code == 0
        # a bound on a hang (a stalled reader's write waits 600 s, aiohttp's shutdown 60 s)
        assert took < 30, f"the daemon took {took:.1f}s to stop beside {STALLED} stalled readers"
        assert not d.socket.exists()
        for s in stalled:
            s.close()


def test_a_stalled_subscriber_is_dropped_a_reading_one_is_not() -> None:
    with daemon_with("eventBufferBytes = 4096\neventWriteSeconds = 1\n") as d:
        stalled = [subscribe(d, d.owner_token()) for _ in range(3)]
        reader = subscribe(d, d.owner_token())
        seen: list[int] = []
        buffer = b""

        def read_some() -> None:
            nonlocal buffer
            reader.settimeout(0.01)
            try:
                while chunk := reader.recv(65536):
                    buffer += chunk
            except TimeoutError:
                pass
            for line in buffer.split(b"\n"):
                if line.startswith(b"id: "):
                    seen.append(int(line[4:]))
            buffer = buffer[buffer.rfind(b"\n") + 1 :]

        def dropped(h: dict[str, Any]) -> bool:
            read_some()
            return bool(h["eventStreams"]["dropped"] >= 3 and h["eventStreams"]["open"] == 1)

        save_until(d, dropped)
        for s in stalled:
            assert ended(s, 10)
        read_some()
        assert seen and seen == list(range(seen[0], seen[0] + len(seen)))  # none lost
        reader.close()


def test_a_stream_ends_when_its_token_is_revoked_or_expires() -> None:
    with daemon_with("") as d:
        where = ["--workspace", str(d.workspace)]
        made = d.cli("--json", "grant", "create", *where, "--actor", "watcher")
        short = d.cli("--json", "grant", "create", *where, "--actor", "brief", "--expires", "1s")
        assert made.returncode == 0 and short.returncode == 0, made.stderr + short.stderr
        grant = json.loads(made.stdout)
        revoked = subscribe(d, grant["token"])
        expiring = subscribe(d, json.loads(short.stdout)["token"])
        assert ended(expiring, 15)  # (checked once a second: no event needed)
        assert not ended(revoked, 0.5)  # (a live token: the stream goes on)
        done = d.cli("grant", "revoke", *where, grant["tokenId"])
        assert done.returncode == 0, done.stderr
        assert ended(revoked, 10)
        revoked.close()
        expiring.close()
