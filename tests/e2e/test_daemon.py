"""The daemon over its socket: tools, commits, events, limits, lifecycle, the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import subprocess
import time

from tests.conftest import envelope
from tests.e2e.conftest import DaemonProcess, listen_events


def test_socket_is_private(daemon: DaemonProcess) -> None:
    mode = os.stat(daemon.socket).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(os.stat(daemon.socket.parent).st_mode) == 0o700
    token = daemon.base / "home" / ".config" / "mnoted" / "owner.token"
    assert stat.S_IMODE(os.stat(token).st_mode) == 0o600


def test_call_a_write_and_see_its_commit(daemon: DaemonProcess) -> None:
    client = daemon.client()
    status, resp = client.request(
        "POST",
        "/v1/tools/call",
        envelope(
            "mnote.doc.markdown_edit",
            traceId="trace_e2e",
            documentId="plan.md",
            idempotencyKey="k1",
            dryRun=False,
            args={"operations": [{"search": "Monday", "replace": "Friday"}]},
        ),
    )
    assert status == 200 and resp["ok"], resp
    assert (
        daemon.workspace / "plan.md"
    ).read_text() == "# Plan\n\nShip on Friday.\n\n- one\n- two\n"
    assert (
        daemon.git("log", "-1", "--format=%(trailers:key=Mnote-Trace-Id,valueonly)").strip()
        == "trace_e2e"
    )
    assert (
        daemon.git("log", "-1", "--format=%(trailers:key=Mnote-Command-Id,valueonly)").strip()
        == resp["audit"]["commandId"]
    )
    assert (
        daemon.git("log", "--grep", resp["audit"]["commandId"], "--format=%H").strip()
        == resp["result"]["revision"]
    )


def test_tool_errors_are_200_and_bad_http_is_4xx(daemon: DaemonProcess) -> None:
    client = daemon.client()
    status, resp = client.request("POST", "/v1/tools/call", envelope("mnote.nope"))
    assert status == 200 and resp["error"]["code"] == "mnote_tool_unknown"
    status, resp = client.request(
        "POST", "/v1/tools/call", envelope("mnote.page.get", documentId="missing.md")
    )
    assert status == 200 and resp["error"]["code"] == "mnote_tool_not_found"
    deep = {"a": None}
    for _ in range(200):
        deep = {"a": deep}
    status, resp = client.request("POST", "/v1/tools/call", deep)
    assert status == 400 and resp["error"]["code"] == "mnote_tool_invalid_arguments"
    for depth, refused in ((64, False), (65, True)):  # the limit, with brackets in strings
        nested: object = "[[{{"  # (a value counts as a level, as the object holding it)
        for _ in range(depth - 2):
            nested = [nested]
        status, resp = client.request("POST", "/v1/tools/call", {"nested": nested})
        assert ("nested deeper than 64" in resp["error"]["message"]) is refused, depth
    status, resp = client.request(
        "POST",
        "/v1/tools/call",
        envelope("mnote.page.get", documentId="plan.md", pad="x" * (5 * 1024 * 1024)),
    )
    assert status == 413 and resp["error"]["code"] == "mnote_tool_too_large"
    status, resp = daemon.client(token="wrong").request("GET", "/v1/tools")
    assert status == 401 and resp["error"]["code"] == "mnote_tool_permission_denied"
    # ... and the daemon still serves.
    status, resp = client.request(
        "POST", "/v1/tools/call", envelope("mnote.page.get", documentId="plan.md")
    )
    assert status == 200 and resp["ok"]


def test_garbage_bytes_on_the_socket_do_not_hurt(daemon: DaemonProcess) -> None:
    for junk in [
        b"\x00\xff" * 100,
        b"GET / HTTP/1.1\r\n\r\n",
        b"POST /v1/tools/call HTTP/1.1\r\nContent-Length: 99\r\n\r\n{",
    ]:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(str(daemon.socket))
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            with contextlib.suppress(TimeoutError):
                s.recv(1000)
    status, _ = daemon.client().request("GET", "/v1/health")
    assert status == 200


def test_manifest_for_an_agent(daemon: DaemonProcess) -> None:
    token = daemon.agent_token("hermes", "page.read")
    status, manifest = daemon.client(token=token).request("GET", "/v1/tools")
    assert status == 200
    enabled = {t["name"] for t in manifest["tools"] if t["availability"]["enabled"]}
    assert "mnote.page.get" in enabled and "mnote.page.save" not in enabled
    status, resp = daemon.client(token=token).request(
        "POST",
        "/v1/tools/call",
        envelope(
            "mnote.page.save", documentId="plan.md", idempotencyKey="k", dryRun=False, content=["x"]
        ),
    )
    assert resp["error"]["code"] == "mnote_tool_permission_denied"


def test_events_stream_reports_commits_and_external_edits(daemon: DaemonProcess) -> None:
    events: list[dict] = []
    thread = listen_events(daemon, daemon.owner_token(), events, want=2)
    _, resp = daemon.client().request(
        "POST",
        "/v1/tools/call",
        envelope(
            "mnote.page.save",
            traceId="trace_e2e",
            documentId="plan.md",
            idempotencyKey="k2",
            dryRun=False,
            content=["More."],
            mode="append",
        ),
    )
    (daemon.workspace / "todo.md").write_text("# Todo\n")
    thread.join(15)
    kinds = [e["type"] for e in events]
    assert kinds == ["commit", "external_edit"]
    assert (
        events[0]["commandId"] == resp["audit"]["commandId"] and events[0]["traceId"] == "trace_e2e"
    )
    assert events[1]["path"] == "todo.md"


def test_second_daemon_refuses_and_sigterm_cleans_up(daemon: DaemonProcess) -> None:
    other = subprocess.run(
        [
            *daemon.proc.args[:4],
            "--workspace",
            str(daemon.workspace),
            "--socket",
            str(daemon.base / "s" / "x.sock"),
        ],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert other.returncode == 1
    assert "another mnoted process serves this workspace" in other.stderr
    (daemon.workspace / "late.md").write_text("# Late\n")
    time.sleep(0.05)
    assert daemon.stop() == 0
    assert not daemon.socket.exists()
    assert daemon.git("status", "--porcelain") == ""


def test_cli_round_trip_and_exit_codes(daemon: DaemonProcess) -> None:
    listed = daemon.cli("page", "list")
    assert listed.returncode == 0 and "plan.md" in listed.stdout
    got = daemon.cli("--json", "page", "get", "plan.md")
    blocks = json.loads(got.stdout)["result"]["blocks"]
    item = next(b["id"] for b in blocks if b["text"] == "two")
    done = daemon.cli(
        "editor", "insert_block_after", "plan.md", "--after-block-id", item, "--block", "three"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (daemon.workspace / "plan.md").read_text().endswith("- one\n- two\n- three\n")
    failed = daemon.cli("editor", "delete_block", "plan.md", "--block-id", "nope")
    assert failed.returncode == 1 and "mnote_block_not_found" in failed.stderr
    usage = daemon.cli("editor", "explode")
    assert usage.returncode == 2
    unreachable = subprocess.run(
        [*daemon.proc.args[:3], "--socket", str(daemon.base / "none.sock"), "status"],
        env=daemon.env,
        capture_output=True,
        text=True,
    )
    assert unreachable.returncode == 3 and "none.sock" in unreachable.stderr
    history = daemon.cli("log", "plan.md")
    assert history.returncode == 0 and "doc.applyBlockOps" in history.stdout


def test_workspace_request_limit(daemon: DaemonProcess) -> None:
    config = daemon.workspace / ".mnote" / "config.toml"
    config.write_text(
        config.read_text().replace("maxRequestBytes = 4194304", "maxRequestBytes = 10000")
    )
    daemon.stop()
    daemon.start()
    client = daemon.client()
    status, resp = client.request(
        "POST", "/v1/tools/call", envelope("mnote.page.get", documentId="plan.md", pad="x" * 20_000)
    )
    assert status == 413 and "workspace's limit of 10000 bytes" in resp["error"]["message"]
    status, resp = client.request(
        "POST", "/v1/tools/call", envelope("mnote.page.get", documentId="plan.md")
    )
    assert status == 200 and resp["ok"]


def test_status_names_what_the_repository_refuses_and_serves_on(daemon: DaemonProcess) -> None:
    # (with HEAD detached the whole answer was that one error, watcher health and all lost)
    client = daemon.client()
    git = ["git", "-C", str(daemon.workspace), "checkout", "-q"]

    def checkout(*args: str) -> None:  # retried: the daemon may hold index.lock a moment
        for _ in range(50):
            if subprocess.run([*git, *args], env=daemon.env, capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise AssertionError(f"git checkout {args} kept failing")

    checkout("--detach")
    status, body = client.request("GET", "/v1/workspaces")
    assert status == 200
    [ws] = body["workspaces"]
    assert ws["refused"]["code"] == "mnote_workspace_invalid" and ws["head"] is None
    assert ws["watcher"]["state"] == "running"
    checkout("-")
    [ws] = client.request("GET", "/v1/workspaces")[1]["workspaces"]
    assert "refused" not in ws and ws["head"]


def test_a_page_is_not_created_where_gitignore_keeps_files_out(daemon: DaemonProcess) -> None:
    """Every write is a commit: a page made in an ignored folder would have gone into the
    history (and to the remote) that .gitignore keeps it out of."""
    with (daemon.workspace / ".gitignore").open("a") as fh:
        fh.write("private/\n")
    head = daemon.git("rev-parse", "HEAD")
    client = daemon.client()
    _, resp = client.request(
        "POST",
        "/v1/tools/call",
        client.envelope("mnote.page.create", None, {"path": "private/diary.md", "content": "x"}),
    )
    assert not resp["ok"] and resp["error"]["code"] == "mnote_path_rejected", resp
    assert ".gitignore" in resp["error"]["message"]
    assert not (daemon.workspace / "private").exists()
    assert daemon.git("ls-files", "private") == ""
    assert daemon.git("rev-list", f"{head.strip()}..HEAD", "--", "private") == ""


def test_a_file_named_in_latin1_leaves_the_edits_beside_it_committed(
    daemon: DaemonProcess,
) -> None:
    """Its name reached the store's walk as lone surrogates, which Git's ignore lookup
    refused with UnicodeEncodeError: the watcher's batch failed, with every edit in it."""
    os.makedirs(os.path.join(bytes(daemon.workspace), b"old\xe9"))
    with open(os.path.join(bytes(daemon.workspace), b"old\xe9", b"caf\xe9.md"), "wb") as fh:
        fh.write(b"# Caf\xe9\n")
    with (daemon.workspace / "plan.md").open("a") as fh:
        fh.write("\nEdited beside it.\n")
    deadline = time.monotonic() + 20
    while "Edited beside it." not in daemon.git("show", "HEAD:plan.md"):
        assert time.monotonic() < deadline, daemon.log.read_text()
        time.sleep(0.1)
    assert "caf" not in daemon.git("ls-tree", "-r", "--name-only", "HEAD")
    # At the next start the file is named in a warning, once, and still left alone.
    daemon.stop()
    daemon.start()
    client = daemon.client()
    assert client.request("GET", "/v1/health")[0] == 200
    log = daemon.log.read_text()
    assert "Traceback" not in log and "sink_failed" not in log, log
    assert "not valid UTF-8" in log and "caf\\xe9.md" in log, log
