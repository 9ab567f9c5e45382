"""Connection floods: idle connections past the open-file limit, a burst past the backlog.

The daemon runs as a desktop session starts it (soft open-file limit 1,024, hard 4,096).
Every flood comes from other processes, as a runaway or hostile program's would.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.e2e.conftest import DaemonProcess, running_daemon

IDLE = 1_100
BURST = 400
FIRST_REQUEST_SECONDS = 6.0  # (how long the idle flood holds: the calls are made in it)

HOLDER = r"""
import socket, sys, time
path, n, grace = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
held = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(path)
    held.append(s)
print(f"held {len(held)}", flush=True)
sys.stdin.readline()  # (the test has made its calls)
# one over the per-caller cap asks something: it is answered, then closed
over = held.pop()
over.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
answer = b""
while chunk := over.recv(65536):
    answer += chunk
print(answer.split(b"\r\n", 1)[0].decode(), flush=True)
deadline = time.monotonic() + grace
open_ = list(held)
for s in held:
    s.settimeout(max(0.1, deadline - time.monotonic()))
    try:
        closed = s.recv(1) == b""
    except ConnectionResetError:
        closed = True
    except TimeoutError:
        closed = False
    if closed:
        open_.remove(s)
print(f"open {len(open_)}", flush=True)
"""

BURSTER = r"""
import os, socket, sys
path, n, token = sys.argv[1], int(sys.argv[2]), sys.argv[3]
keys = ("sessionId", "runId", "toolCallId", "traceId")
ids = ",".join(f'"{k}":"{k}_{os.getpid()}"' for k in keys)
body = b'{"toolName":"mnote.page.get","documentId":"plan.md","args":{},' + ids.encode() + b"}"
request = (
    b"POST /v1/tools/call HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    b"Content-Type: application/json\r\nAuthorization: Bearer " + token.encode() + b"\r\n"
    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
)
r, w = os.pipe()
kids = []
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os.close(r)
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(120)  # (as mnote's client: a connect that fails at once if the queue is full)
        try:
            s.connect(path)
        except OSError:
            os.write(w, b"R")
            os._exit(2)
        os.write(w, b"C")
        s.sendall(request)
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except OSError:
            os._exit(4)
        os._exit(0 if data.startswith(b"HTTP/1.1 200") and b'"ok":true' in data else 3)
    kids.append(pid)
os.close(w)
got = b""
while len(got) < n:
    got += os.read(r, n)
print(f"connected {got.count(b'C')} refused {got.count(b'R')}", flush=True)
sys.stdin.readline()  # (the daemon is running again)
codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in kids]
print(f"answered {codes.count(0)} of {len(codes)}: {sorted(set(codes))}", flush=True)
"""


@contextmanager
def desktop_daemon() -> Iterator[DaemonProcess]:
    """A daemon started at a desktop session's open-file limits, with a short first-request
    time so the test waits little for the idle connections to go."""

    def limited(d: DaemonProcess) -> None:
        d.prefix = ["prlimit", "--nofile=1024:4096", "--"]

    config = f"[limits]\nfirstRequestSeconds = {FIRST_REQUEST_SECONDS}\n"
    with running_daemon(config=config, setup=limited) as d:
        yield d


def helper(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_real_calls_are_answered_while_idle_connections_are_held() -> None:
    with desktop_daemon() as d:
        client = d.client(d.owner_token())
        holder = helper(HOLDER, str(d.socket), str(IDLE), str(FIRST_REQUEST_SECONDS + 20))
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert holder.stdout.readline().strip() == f"held {IDLE}"
            deadline = time.monotonic() + FIRST_REQUEST_SECONDS - 1
            while True:  # (until the daemon has taken every one from its listen queue)
                status, health = d.client().request("GET", "/v1/health")
                assert status == 200
                held = health["connections"]
                if held["open"] >= IDLE or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert held["open"] >= IDLE, held  # (all held: the daemon's limit was raised)
            assert held["refused"] >= IDLE - held["perCaller"], held
            for i in range(5):
                saved = client.call(
                    "mnote.page.save", "plan.md", {"mode": "append", "content": [f"line {i}"]}
                )
                got = client.call("mnote.page.get", "plan.md")
                assert saved["ok"] and got["ok"], (saved, got)
                if i == 0:  # answered while the flood held: none of the idle ones let go yet
                    _, health = d.client().request("GET", "/v1/health")
                    held = health["connections"]
                    assert held["closedIdle"] == 0 and held["open"] >= IDLE, held
            holder.stdin.write("go\n")
            holder.stdin.flush()
            over = holder.stdout.readline().strip()
            assert "503" in over, over  # the one over the cap was answered, then closed
            assert holder.stdout.readline().strip() == "open 0"  # the rest closed by the daemon
            status, health = d.client().request("GET", "/v1/health")
            assert health["connections"]["closedIdle"] >= IDLE - 1, health
        finally:
            holder.kill()
            holder.wait()


def test_a_burst_of_callers_is_queued_not_refused() -> None:
    """The daemon stopped (SIGSTOP) while 400 processes connect: each connect waits in the
    listen queue (128 long before: 272 got EAGAIN), and each is answered once it runs."""
    with desktop_daemon() as d:
        assert d.proc is not None
        d.proc.send_signal(signal.SIGSTOP)
        burst = helper(BURSTER, str(d.socket), str(BURST), d.owner_token())
        assert burst.stdin is not None and burst.stdout is not None
        try:
            connected = burst.stdout.readline().strip()
            d.proc.send_signal(signal.SIGCONT)
            assert connected == f"connected {BURST} refused 0"
            burst.stdin.write("go\n")
            burst.stdin.flush()
            answered = burst.stdout.readline().strip()
            assert answered.startswith(f"answered {BURST} of {BURST}"), answered
        finally:
            d.proc.send_signal(signal.SIGCONT)
            burst.kill()
            burst.wait()


def test_an_unauthenticated_request_closes_its_connection(daemon: DaemonProcess) -> None:
    """Answered 401, then closed: no connection stays open without a token."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(daemon.socket))
        s.sendall(b"GET /v1/workspaces HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := s.recv(65536):  # (to the end: the daemon closes it)
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401"), answer[:100]
    assert b"mnote_tool_permission_denied" in answer
