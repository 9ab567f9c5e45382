"""Hostile clients on the socket: thousands of malformed requests, zero crashes, others served."""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.conftest import DaemonProcess

CASES = int(os.environ.get("MNOTE_HOSTILE_CASES", "500"))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
envelope_like = st.fixed_dictionaries(
    {
        "toolName": st.sampled_from(
            ["mnote.page.get", "mnote.page.save", "mnote.doc.markdown_edit", "x", ""]
        )
    },
    optional={
        "documentId": json_values,
        "args": json_values,
        "dryRun": json_values,
        "idempotencyKey": json_values,
        "sessionId": json_values,
        "capabilityScope": json_values,
    },
)


def raw_request(
    daemon: DaemonProcess,
    payload: bytes,
    *,
    method: str = "POST",
    path: str = "/v1/tools/call",
    length: int | None = None,
    auth: bool = True,
) -> bytes:
    head = [
        f"{method} {path} HTTP/1.1",
        "Host: x",
        f"Content-Length: {len(payload) if length is None else length}",
        "Content-Type: application/json",
        "Connection: close",
    ]
    if auth:
        head.append(f"Authorization: Bearer {daemon.owner_token()}")
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(daemon.socket))
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return out


def status_of(response: bytes) -> int:
    return (
        int(response.split(b" ", 2)[1]) if response.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")) else 0
    )


@pytest.mark.slow
def test_generated_hostile_requests(daemon: DaemonProcess) -> None:
    seen: dict[int, int] = {}

    @settings(max_examples=CASES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        st.one_of(
            st.binary(max_size=300).map(lambda b: ("bytes", b)),
            json_values.map(lambda v: ("json", json.dumps(v).encode())),
            envelope_like.map(lambda v: ("envelope", json.dumps(v).encode())),
        ),
        st.sampled_from(["POST", "GET", "PUT", "DELETE"]),
        st.sampled_from(["/v1/tools/call", "/v1/tools", "/v1/nope", "/", "/v1/tools/call?x=1"]),
        st.booleans(),
    )
    def one(case: tuple[str, bytes], method: str, path: str, auth: bool) -> None:
        _kind, payload = case
        response = raw_request(daemon, payload, method=method, path=path, auth=auth)
        code = status_of(response)
        seen[code] = seen.get(code, 0) + 1
        assert code in (200, 400, 401, 404, 405, 413), response[:300]
        if b"application/json" in response.split(b"\r\n\r\n", 1)[0]:
            body = json.loads(response.split(b"\r\n\r\n", 1)[1])
            assert "error" in body or body.get("ok") is True or "tools" in body
            if body.get("error"):
                assert (
                    body["error"]["code"].startswith("mnote_")
                    and body["error"]["code"] != "mnote_internal_error"
                )

    one()
    assert sum(seen.values()) >= CASES
    status, _ = daemon.client().request("GET", "/v1/health")
    assert status == 200


def test_lies_about_length_deep_nesting_and_huge_bodies(daemon: DaemonProcess) -> None:
    assert status_of(raw_request(daemon, b'{"toolName": "mnote.page.get"}', length=5)) in (400, 200)
    assert status_of(raw_request(daemon, b"[" * 10_000 + b"]" * 10_000)) == 400
    assert status_of(raw_request(daemon, b'{"a": "' + b"x" * (100 * 1024 * 1024) + b'"}')) == 413
    status, _ = daemon.client().request("GET", "/v1/health")
    assert status == 200


def test_slow_clients_do_not_block_others(daemon: DaemonProcess) -> None:
    slow = []
    auth = f"Authorization: Bearer {daemon.owner_token()}\r\n".encode()
    for _ in range(20):  # connections that send half a request and stall (authenticated: held)
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(daemon.socket))
        s.sendall(
            b"POST /v1/tools/call HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 1000\r\n\r\n{"
        )
        slow.append(s)
    results = []

    def ask() -> None:
        _, body = daemon.client().request(
            "POST", "/v1/tools/call", daemon.client().envelope("mnote.page.get", "plan.md")
        )
        results.append(body.get("ok"))

    threads = [threading.Thread(target=ask) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)  # (a hang guard: the slow ones are held for the request time limit)
    assert len(results) == 5 and all(results), results
    for s in slow:  # answered while every slow one was still held: none closed or answered
        s.setblocking(False)
        with pytest.raises(BlockingIOError):
            s.recv(1)
        s.close()
