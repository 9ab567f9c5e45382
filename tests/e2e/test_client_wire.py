"""The client's HTTP/1.1 reader (``mnoted.client.wire``): every framing HTTP allows, read the
same however the bytes arrive, answers one after another on one kept connection, and
what is not HTTP refused with an error instead of a wrong answer."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnoted.client import wire
from mnoted.client.wire import Answer, BadAnswer, Connection, Dropped


@pytest.fixture
def pair() -> Iterator[tuple[Connection, socket.socket]]:
    """A connection whose socket is one end of a pair; the test is the daemon at the other."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    conn = Connection("unused", 1.0)  # type: ignore[arg-type]
    conn.sock = ours
    yield conn, theirs
    conn.close()
    theirs.close()


def framed(status: int, body: bytes, framing: str, extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}"
    if framing == "length":
        return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
    if framing == "chunked":
        out = f"{head}Transfer-Encoding: chunked\r\n\r\n".encode()
        for i in range(0, len(body), 7):
            piece = body[i : i + 7]
            out += f"{len(piece):x};ext=1\r\n".encode() + piece + b"\r\n"
        return out + b"0\r\nX-Trailer: 1\r\n\r\n"
    return f"{head}Connection: close\r\n\r\n".encode() + body  # to the end of the connection


def request(conn: Connection) -> Answer:
    return conn.exchange("POST", "/v1/tools/call", b"{}", {"Authorization": "Bearer t"})


@settings(max_examples=200, deadline=None)
@given(
    answers=st.lists(
        st.tuples(
            st.sampled_from([200, 400, 413, 500]),
            st.binary(max_size=300),
            st.sampled_from(["length", "chunked"]),
        ),
        min_size=1,
        max_size=4,
    ),
    last_to_end=st.booleans(),
    read=st.integers(min_value=1, max_value=64),
    informational=st.booleans(),
)
def test_answers_read_alike_however_the_bytes_arrive(
    answers: list[tuple[int, bytes, str]], last_to_end: bool, read: int, informational: bool
) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    conn = Connection("unused", 1.0)  # type: ignore[arg-type]
    conn.sock = ours
    real = wire.READ
    wire.READ = read  # one recv returns at most this much: every boundary gets hit
    try:
        for n, (status, body, framing) in enumerate(answers):
            last = n == len(answers) - 1
            early = b"HTTP/1.1 100 Continue\r\n\r\n" if informational and n == 0 else b""
            theirs.sendall(early + framed(status, body, "end" if last and last_to_end else framing))
            if last and last_to_end:
                theirs.shutdown(socket.SHUT_WR)
            assert request(conn) == Answer(status, body, last and last_to_end)
    finally:
        wire.READ = real
        conn.close()
        theirs.close()


def test_the_request_is_sent_whole(pair: tuple[Connection, socket.socket]) -> None:
    conn, theirs = pair
    theirs.sendall(framed(200, b"{}", "length"))
    request(conn)
    sent = theirs.recv(65536)
    assert sent == (
        b"POST /v1/tools/call HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer t\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    )


@pytest.mark.parametrize(
    ("reply", "will_close"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", True),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", True),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n{}", False),
        (b"HTTP/1.1 204 No Content\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}extra", True),  # not asked for
    ],
)
def test_whether_the_connection_may_be_kept(
    pair: tuple[Connection, socket.socket], reply: bytes, will_close: bool
) -> None:
    conn, theirs = pair
    theirs.sendall(reply)
    assert request(conn).will_close is will_close


def test_a_connection_closed_before_any_answer_is_dropped(
    pair: tuple[Connection, socket.socket],
) -> None:
    conn, theirs = pair
    theirs.shutdown(socket.SHUT_WR)
    with pytest.raises(Dropped):
        request(conn)


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nContent-Le",  # ends inside the headers
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",  # inside the body
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",  # inside a chunk
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # a bad chunk size
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",  # no CRLF
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n",
        b"SSH-2.0-OpenSSH_9.2\r\n\r\n",  # not HTTP at all
        b"HTTP/1.1 2x0 OK\r\n\r\n",
    ],
)
def test_what_is_not_an_http_answer_is_refused(
    pair: tuple[Connection, socket.socket], reply: bytes
) -> None:
    conn, theirs = pair
    theirs.sendall(reply)
    theirs.shutdown(socket.SHUT_WR)
    with pytest.raises(BadAnswer):
        request(conn)


def test_endless_headers_are_refused_without_reading_them_all(
    pair: tuple[Connection, socket.socket],
) -> None:
    conn, theirs = pair
    theirs.sendall(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * (wire.HEAD_LIMIT + 10))
    with pytest.raises(BadAnswer, match="too long"):
        request(conn)
