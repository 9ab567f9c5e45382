"""Repeated reads over the socket, answered on the event loop, never older than the disk."""

from __future__ import annotations

import time

from mnoted.store import statcache
from tests.e2e.conftest import DaemonProcess

QUIET = statcache.TICK_NS / 1e9 + 0.02


def _get(daemon: DaemonProcess, client: object, n: int) -> dict[str, object]:
    body = {
        "toolName": "mnote.page.get",
        "documentId": "plan.md",
        "sessionId": "s",
        "runId": "r",
        "toolCallId": f"call_{n}",
        "traceId": f"trace_{n}",
    }
    status, out = client.request("POST", "/v1/tools/call", body)  # type: ignore[attr-defined]
    assert status == 200 and out["ok"], out
    assert out["toolCallId"] == f"call_{n}" and out["traceId"] == f"trace_{n}"
    return out["result"]  # type: ignore[no-any-return]


def test_every_save_in_an_editor_is_seen_by_the_next_read(daemon: DaemonProcess) -> None:
    client = daemon.client()
    path = daemon.workspace / "plan.md"
    words = [b"Monday", b"MONDAY", b"monday", b"MonDay"]  # same size: only stat data differs
    time.sleep(QUIET)
    _get(daemon, client, 0)
    for n in range(1, 41):
        word = words[n % len(words)]
        data = path.read_bytes()
        at = max(data.find(w) for w in words)
        with path.open("r+b") as fh:  # saved in place, as VS Code does
            fh.seek(at)
            fh.write(word)
        if n % 2:
            time.sleep(QUIET)  # half of the saves are read once quiet, half at once
        first = _get(daemon, client, 2 * n)
        again = _get(daemon, client, 2 * n + 1)  # the kept answer, when there is one
        for result in (first, again):
            assert word.decode() in str(result["body"]), (n, word)
            assert result["revision"] == daemon.git("rev-parse", "HEAD").strip()
    assert daemon.git("show", "HEAD:plan.md").encode() == path.read_bytes()


def test_a_read_after_an_acknowledged_write_sees_it(daemon: DaemonProcess) -> None:
    client = daemon.client()
    time.sleep(QUIET)
    _get(daemon, client, 0)
    _get(daemon, client, 1)
    for n, (old, new) in enumerate([("Monday", "Friday"), ("Friday", "Sunday")], start=2):
        _, out = client.request(
            "POST",
            "/v1/tools/call",
            {
                "toolName": "mnote.doc.markdown_edit",
                "documentId": "plan.md",
                "sessionId": "s",
                "runId": "r",
                "toolCallId": f"w{n}",
                "traceId": f"t{n}",
                "idempotencyKey": f"k{n}",
                "dryRun": False,
                "args": {"operations": [{"search": old, "replace": new}]},
            },
        )
        assert out["ok"], out
        result = _get(daemon, client, 10 * n)
        assert new in str(result["body"]) and result["revision"] == out["result"]["revision"]
        time.sleep(QUIET)
        assert new in str(_get(daemon, client, 10 * n + 1)["body"])
