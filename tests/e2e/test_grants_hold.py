"""Issue 41 over the real socket: status, event streams and tool listings hold to the grant."""

from __future__ import annotations

import json
import os
import random

from tests.conftest import envelope
from tests.e2e.conftest import DaemonProcess, listen_events, wait_for


def _token(daemon: DaemonProcess, *paths: str) -> tuple[str, str]:
    args = ["--json", "grant", "create", "--workspace", str(daemon.workspace), "--actor", "bot"]
    args += ["--scope", "page.write"]
    for path in paths:
        args += ["--path", path]
    made = daemon.cli(*args)
    assert made.returncode == 0, made.stderr
    out = json.loads(made.stdout)
    return str(out["token"]), str(out.get("tokenId") or out["record"]["tokenId"])


def test_status_lists_only_granted_uncommitted_paths(daemon: DaemonProcess) -> None:
    token, _ = _token(daemon, "notes/**")
    # two hard links: the watcher keeps both out of the history, and status names them
    (daemon.workspace / "salary-secret.md").write_text("# Salary\n\n123456\n")
    os.link(daemon.workspace / "salary-secret.md", daemon.workspace / "salary-copy.md")
    owner = daemon.client()
    wait_for(lambda: "salary-secret.md" in json.dumps(owner.request("GET", "/v1/workspaces")[1]))
    status, body = daemon.client(token=token).request("GET", "/v1/workspaces")
    assert status == 200 and "salary" not in json.dumps(body)
    assert body["workspaces"][0]["pendingChanges"] == 0


def test_stream_ids_leave_no_gap_for_hidden_events_and_revocation_ends_listings(
    daemon: DaemonProcess,
) -> None:
    token, token_id = _token(daemon, "notes/**")
    events: list[dict[str, object]] = []
    thread = listen_events(daemon, token, events, want=2)
    owner = daemon.client()
    for n, path in enumerate(["notes/a.md", "private/hidden.md", "notes/b.md"]):
        _, resp = owner.request(
            "POST",
            "/v1/tools/call",
            envelope(
                "mnote.page.create",
                idempotencyKey=f"k{n}",
                dryRun=False,
                args={"path": path, "content": "x"},
            ),
        )
        assert resp["ok"], resp
    thread.join(20)
    assert [e["path"] for e in events] == ["notes/a.md", "notes/b.md"]
    assert [e["id"] for e in events] == [1, 2]
    assert "hidden" not in json.dumps(events) and "_readers" not in json.dumps(events)
    agent = daemon.client(token=token)
    assert agent.request("GET", "/v1/tools")[0] == 200
    revoked = daemon.cli("grant", "revoke", "--workspace", str(daemon.workspace), token_id)
    assert revoked.returncode == 0, revoked.stderr
    status, body = agent.request("GET", "/v1/tools")
    assert status == 401 and "tools" not in body
    assert agent.request("GET", "/v1/workspaces")[0] == 401


def test_a_slice_of_generated_calls_through_the_socket_leaks_nothing(
    daemon: DaemonProcess,
) -> None:
    """The no-leak test's pairs (``tests/reliability/test_no_leak.py``), a slice of them
    through the real socket: the hidden page's answer is the missing page's."""
    from tests.reliability.test_no_leak import MARK, TARGETED, _normal

    owner = daemon.client()
    hidden = [f"private/{MARK}h{i}.md" for i in range(3)]
    for n, path in enumerate(hidden):
        _, made = owner.request(
            "POST",
            "/v1/tools/call",
            envelope(
                "mnote.page.create",
                idempotencyKey=f"h{n}",
                dryRun=False,
                args={"path": path, "content": f"# {MARK} title\n\n{MARK} text\n"},
            ),
        )
        assert made["ok"], made
    token, _ = _token(daemon, "notes/**", "ai/**")
    agent = daemon.client(token=token)
    rng = random.Random(41)
    for n in range(200):
        tool = rng.choice(sorted(TARGETED))
        hid = rng.choice(hidden)
        miss = f"private/{MARK}x{n}.md"
        field = rng.choice(["documentId", "path"])
        answers = []
        same = envelope(tool, args=dict(TARGETED[tool]))  # (both answers name the same ids)
        for ref in (hid, miss):
            raw = {**same, field: ref}
            if tool != "mnote.review.list" and not tool.endswith(("get", "fetch", "history")):
                raw.update(idempotencyKey=f"k{n}", dryRun=rng.random() < 0.5)
            status, body = agent.request("POST", "/v1/tools/call", raw)
            assert status == 200
            text = json.dumps(body, sort_keys=True)
            assert MARK not in text.replace(json.dumps(ref)[1:-1], ""), text
            answers.append(_normal(text.encode(), ref))
        assert answers[0] == answers[1], (tool, answers)
