"""Git as a person sees it beside the daemon: the index after each write, a merge under way.

- After every acknowledged write, ``git diff --cached`` is empty and ``git status`` shows no
  staged reversion (``MM``): a person's ``git commit`` at that moment commits nothing of
  the agent's, and never its reversion.
"""

from __future__ import annotations

import subprocess
from typing import Any

from tests.e2e.conftest import DaemonProcess


def _call(client: Any, tool: str, doc: str | None, args: dict[str, Any]) -> dict[str, Any]:
    status, resp = client.request("POST", "/v1/tools/call", client.envelope(tool, doc, args))
    assert status < 500, resp
    return dict(resp)


def _git(daemon: DaemonProcess, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=daemon.workspace, check=True, capture_output=True, text=True
    ).stdout


def test_the_index_holds_every_acknowledged_write(daemon: DaemonProcess) -> None:
    client = daemon.client()
    for i in range(50):
        path = f"loop/page-{i % 7}.md"
        if i < 7:
            resp = _call(client, "mnote.page.create", None, {"path": path, "content": f"v{i}"})
        elif i % 10 == 9:
            resp = _call(client, "mnote.page.delete", path, {})
        else:
            resp = _call(client, "mnote.page.save", path, {"content": [f"v{i}"]})
            if not resp["ok"] and resp["error"]["code"] == "mnote_tool_not_found":
                resp = _call(client, "mnote.page.create", None, {"path": path, "content": f"v{i}"})
        assert resp["ok"], resp["error"]
        cached = _git(daemon, "diff", "--cached", "--name-status")
        assert cached == "", f"write {i}: the index differs from HEAD:\n{cached}"
        status = _git(daemon, "status", "--porcelain")
        assert status == "", f"write {i}: git status is not clean:\n{status}"
