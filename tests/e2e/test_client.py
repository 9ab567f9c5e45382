"""The project's client: connections kept between calls, shared by threads, replaced when
the daemon closed them, and a request sent twice only where that is harmless."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnoted.client.client import Client, Unreachable
from tests.e2e.conftest import DaemonProcess


def open_sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own fd is gone by now
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


def test_calls_reuse_a_connection_threads_share_them_and_a_restart_is_survived(
    daemon: DaemonProcess,
) -> None:
    client = daemon.client()
    before = open_sockets()
    for _ in range(30):
        status, body = client.request("GET", "/v1/health")
        assert status == 200 and body["ok"] is not False
    assert open_sockets() - before <= 1  # one kept connection, not one per call

    results: list[bool] = []

    def reader() -> None:
        for _ in range(20):
            results.append(client.call("mnote.page.get", "plan.md")["ok"])

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 160
    assert open_sockets() - before <= Client.max_idle

    # The daemon restarts: the kept connections it closed are noticed and replaced.
    daemon.stop()
    with pytest.raises(Unreachable):
        client.request("GET", "/v1/health")
    daemon.start()
    edit = {"operations": [{"search": "Monday", "replace": "Friday"}]}
    answer = client.call("mnote.doc.markdown_edit", "plan.md", edit)
    assert answer["ok"], answer
    assert daemon.git("log", "-1", "--format=%s").strip()
    client.close()
    assert open_sockets() <= before


class DropsSecondRequest:
    """An HTTP server on a Unix socket that answers the first request of each connection
    with keep-alive, then closes that connection on its next request without answering:
    the daemon's keep-alive timeout firing just as a client sends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.received: list[bytes] = []
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket) -> bytes:
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                return b""
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(body) < length:
            body += conn.recv(65536)
        return head + b"\r\n\r\n" + body

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            first = self._read_request(conn)
            if not first:
                return
            self.received.append(first)
            payload = b'{"ok":true}'
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: keep-alive\r\n\r\n%s" % (len(payload), payload)
            )
            second = self._read_request(conn)
            if second:
                self.received.append(second)  # then closed unanswered

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def dropping(tmp_path: Path) -> Iterator[DropsSecondRequest]:
    server = DropsSecondRequest(tmp_path / "s.sock")
    yield server
    server.close()


def test_a_request_lost_on_a_kept_connection_is_sent_again_only_if_harmless(
    dropping: DropsSecondRequest,
) -> None:
    client = Client(dropping.path, token="t")
    assert client.request("GET", "/v1/health") == (200, {"ok": True})
    # The kept connection is still open when taken, then closed unanswered: a read is
    # sent again on a new connection.
    assert client.call("mnote.page.get", "a.md") == {"ok": True}
    assert len(dropping.received) == 3

    # A write with its idempotency key may be seen twice (answered from its record).
    assert client.call("mnote.doc.markdown_edit", "a.md", {"operations": []}) == {"ok": True}
    assert len(dropping.received) == 5

    # A write without one is not sent twice: the caller is told, the server saw it once.
    body = client.envelope("mnote.doc.markdown_edit", "a.md", {"operations": []})
    del body["idempotencyKey"]
    with pytest.raises(Unreachable):
        client.request("POST", "/v1/tools/call", body)
    assert len(dropping.received) == 6
    client.close()


def test_the_daemon_closes_an_idle_kept_connection_and_the_client_opens_another(
    daemon: DaemonProcess,
) -> None:
    daemon.stop()
    config = daemon.base / "keepalive.toml"
    config.write_text("[limits]\nkeepAliveSeconds = 0.5\n")
    daemon.start("--config", str(config))
    token = daemon.owner_token()
    with socket.socket(socket.AF_UNIX) as raw:
        raw.connect(str(daemon.socket))
        head = f"GET /v1/workspaces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        raw.sendall(head.encode() + b"\r\n")
        assert raw.recv(65536).startswith(b"HTTP/1.1 200")
        raw.settimeout(10)
        assert raw.recv(65536) == b""  # closed by the daemon once idle for half a second

    client = daemon.client()
    assert client.call("mnote.page.get", "plan.md")["ok"]
    time.sleep(1.0)  # the kept connection is closed behind the client's back
    assert client.call("mnote.page.get", "plan.md")["ok"]
    client.close()


def test_a_call_over_the_time_limit_is_answered_and_goes_on(daemon: DaemonProcess) -> None:
    """A write waiting for a branch lock held by someone else past ``requestSeconds`` is
    answered with a timeout at once; it still lands once the lock is gone, and the daemon
    answers others meanwhile."""
    daemon.stop()
    config = daemon.base / "limits.toml"
    config.write_text("[limits]\nrequestSeconds = 0.5\n")
    daemon.start("--config", str(config))
    lock = daemon.workspace / ".git" / "refs" / "heads" / "main.lock"
    lock.write_text("held by another program\n")
    client = daemon.client()
    edit = {"operations": [{"search": "Monday", "replace": "Friday"}]}
    answer = client.call("mnote.doc.markdown_edit", "plan.md", edit)
    # the limit's answer, not the lock's wait ending (held all along, it would end in
    # mnote_store_locked): no clock needed to tell them apart
    assert not answer["ok"] and answer["error"]["code"] == "mnote_tool_timeout", answer
    assert "still running" in answer["error"]["message"]
    assert client.request("GET", "/v1/health")[0] == 200  # served meanwhile
    lock.unlink()
    deadline = time.monotonic() + 10
    while "Friday" not in daemon.git("show", "HEAD:plan.md"):
        assert time.monotonic() < deadline, "the call did not go on after its timeout"
        time.sleep(0.05)
    assert "Friday" in (daemon.workspace / "plan.md").read_text()
    client.close()
