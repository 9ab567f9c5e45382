"""A tiny localhost HTTP server in front of ``git http-backend`` (Git's smart HTTP, as a
CGI program), for tests that sync over a network transport: every request runs the backend
with the CGI environment and streams its answer back.

Pushes are allowed by ``http.receivepack`` in the served repositories (no authentication:
the server listens on 127.0.0.1 only, for the test's life).
"""

from __future__ import annotations

import http.server
import subprocess
import threading
from pathlib import Path
from typing import Any


def serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve the bare repositories under ``root``; returns the server (``shutdown()`` it) and
    its base URL (``http://127.0.0.1:PORT/``)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *args: Any) -> None:  # quiet in tests
            pass

        def do_GET(self) -> None:
            self._cgi(b"")

        def do_POST(self) -> None:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                body = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        break
                    body += self.rfile.read(size)
                    self.rfile.readline()
            else:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._cgi(body)

        def _cgi(self, body: bytes) -> None:
            path, _, query = self.path.partition("?")
            env = {
                "GIT_PROJECT_ROOT": str(root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "REQUEST_METHOD": self.command,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_ADDR": "127.0.0.1",
                "PATH": "/usr/local/bin:/usr/bin:/bin",
            }
            if self.headers.get("Content-Encoding"):
                env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
            if self.headers.get("Git-Protocol"):
                env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
            ran = subprocess.run(
                ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60
            )
            head, _, payload = ran.stdout.partition(b"\r\n\r\n")
            if not _:
                head, _, payload = ran.stdout.partition(b"\n\n")
            status = 200
            headers: list[tuple[str, str]] = []
            for line in head.decode("latin-1").splitlines():
                key, _, value = line.partition(":")
                if key.lower() == "status":
                    status = int(value.strip().split()[0])
                elif key:
                    headers.append((key.strip(), value.strip()))
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def bare(root: Path, name: str) -> Path:
    """A bare repository under ``root`` that accepts pushes over HTTP."""
    repo = root / name
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "config", "http.receivepack", "true"], cwd=repo, check=True)
    return repo
