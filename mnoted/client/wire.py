"""HTTP/1.1 on the daemon's Unix socket: the part of it the client needs, and no more.

``http.client`` parsed each answer's headers with the ``email`` package and read the body
through a buffered file: about a quarter of a millisecond a call here, as much as the
daemon's own work for a cached read. The daemon is the only server this talks to, so a
request is written in one piece and the answer read with ``recv`` into one buffer. What
HTTP/1.1 allows and the daemon may send is handled: a body sized by ``Content-Length``,
a chunked one, or one that runs to the end of the connection; ``1xx`` answers are skipped;
``Connection: close`` is honoured.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

HEAD_LIMIT = 64 * 1024  # an answer's status line and headers
READ = 256 * 1024  # bytes asked of one recv: a page's answer in one call


class Dropped(ConnectionError):
    """The connection was closed before any byte of an answer came back."""


class BadAnswer(Exception):
    """What came back is not an HTTP/1.1 answer."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    will_close: bool  # the daemon closes the connection after this answer


class Connection:
    """One connection to the daemon's socket, opened on first use and kept by the caller."""

    def __init__(self, path: Path, timeout: float) -> None:
        self.path = str(path)
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self._buf = bytearray()  # bytes read past the last answer (none from a sane server)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def exchange(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> Answer:
        """Send one request and read its answer."""
        if self.sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(self.timeout)
                sock.connect(self.path)
            except BaseException:
                sock.close()
                raise
            self.sock = sock
        lines = [f"{method} {target} HTTP/1.1", "Host: localhost"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        while True:
            status, fields, version = self._head()
            if not 100 <= status < 200:
                break
        if status in (204, 304):
            data = b""
            to_end = False
        elif "chunked" in fields.get("transfer-encoding", "").lower():
            data, to_end = self._chunked(), False
        elif "content-length" in fields:
            data, to_end = self._exactly(_length(fields["content-length"])), False
        else:
            data, to_end = self._to_end(), True
        connection = fields.get("connection", "").lower()
        will_close = (
            to_end
            or bool(self._buf)  # bytes no request asked for: the connection is not reused
            or "close" in connection
            or (version == "HTTP/1.0" and "keep-alive" not in connection)
        )
        return Answer(status, data, will_close)

    # reading ---------------------------------------------------------------------------------
    def _fill(self) -> bool:
        """Read what has come; False at the end of the connection."""
        assert self.sock is not None
        chunk = self.sock.recv(READ)
        if not chunk:
            return False
        self._buf += chunk
        return True

    def _head(self) -> tuple[int, dict[str, str], str]:
        while (end := self._buf.find(b"\r\n\r\n")) < 0:
            if len(self._buf) > HEAD_LIMIT:
                raise BadAnswer("the answer's headers are too long")
            if not self._fill():
                if not self._buf:
                    raise Dropped("the daemon closed the connection without answering")
                raise BadAnswer("the connection ended inside the answer's headers")
        head = bytes(self._buf[:end]).decode("latin-1")
        del self._buf[: end + 4]
        status_line, *rest = head.split("\r\n")
        version, _, tail = status_line.partition(" ")
        code = tail[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise BadAnswer(f"not an HTTP answer: {status_line[:80]!r}")
        fields: dict[str, str] = {}
        for line in rest:
            name, colon, value = line.partition(":")
            if colon:
                key = name.strip().lower()
                value = value.strip()
                fields[key] = f"{fields[key]}, {value}" if key in fields else value
        return int(code), fields, version

    def _exactly(self, size: int) -> bytes:
        while len(self._buf) < size:
            if not self._fill():
                raise BadAnswer("the connection ended inside the answer's body")
        data = bytes(self._buf[:size])
        del self._buf[:size]
        return data

    def _line(self) -> bytes:
        while (end := self._buf.find(b"\r\n")) < 0:
            if len(self._buf) > HEAD_LIMIT:
                raise BadAnswer("a chunk size line is too long")
            if not self._fill():
                raise BadAnswer("the connection ended inside a chunked body")
        line = bytes(self._buf[:end])
        del self._buf[: end + 2]
        return line

    def _chunked(self) -> bytes:
        out = bytearray()
        while True:
            size_text = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise BadAnswer(f"a bad chunk size: {size_text[:20]!r}") from None
            if size == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                return bytes(out)
            out += self._exactly(size)
            if self._exactly(2) != b"\r\n":
                raise BadAnswer("a chunk does not end with CRLF")

    def _to_end(self) -> bytes:
        while self._fill():
            pass
        data = bytes(self._buf)
        self._buf.clear()
        return data


def _length(value: str) -> int:
    try:
        size = int(value.split(",")[0])
    except ValueError:
        raise BadAnswer(f"a bad Content-Length: {value[:20]!r}") from None
    if size < 0:
        raise BadAnswer(f"a bad Content-Length: {value[:20]!r}")
    return size
