"""Git as a person sees it beside the daemon: the index after each write, a merge under way.

- After every acknowledged write, ``git diff --cached`` is empty and ``git status`` shows no
  staged reversion (``MM``): a person's ``git commit`` at that moment commits nothing of
  the agent's, and never its reversion.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.e2e.conftest import DaemonProcess


def _call(client: Any, tool: str, doc: str | None, args: dict[str, Any]) -> dict[str, Any]:
    status, resp = client.request("POST", "/v1/tools/call", client.envelope(tool, doc, args))
    assert status < 500, resp
    return dict(resp)


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
        cached = daemon.git("diff", "--cached", "--name-status")
        assert cached == "", f"write {i}: the index differs from HEAD:\n{cached}"
        status = daemon.git("status", "--porcelain")
        assert status == "", f"write {i}: git status is not clean:\n{status}"


def test_a_merge_in_progress(daemon: DaemonProcess) -> None:
    """Reads go on (HEAD's version: no conflict markers committed), writes are refused with
    the command that ends the merge, `mnote status` names it; once it is aborted, writes
    land and the edits saved meanwhile are committed."""
    root = daemon.workspace
    (root / "other.md").write_text("# Other\n\nbase\n")
    client = daemon.client()
    assert _call(client, "mnote.page.get", "other.md", {})["ok"]
    daemon.wait_idle_clean()
    clone = daemon.base / "clone"
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    (clone / "other.md").write_text("# Other\n\nfrom the clone\n")
    ident = ["-c", "user.name=p", "-c", "user.email=p@x"]
    subprocess.run(["git", *ident, "commit", "-qam", "side"], cwd=clone, check=True)
    saved = _call(client, "mnote.page.save", "other.md", {"content": ["from main"]})
    assert saved["ok"], saved["error"]
    daemon.wait_idle_clean()
    daemon.git("fetch", "-q", str(clone), "HEAD")
    merge = subprocess.run(
        ["git", *ident, "merge", "FETCH_HEAD"], cwd=root, capture_output=True, text=True
    )
    assert merge.returncode != 0 and (root / ".git" / "MERGE_HEAD").exists(), merge
    head = daemon.git("rev-parse", "HEAD").strip()
    for doc in ("plan.md", "other.md"):
        got = _call(client, "mnote.page.get", doc, {})
        assert got["ok"], got["error"]
    assert "<<<<<<<" not in json.dumps(_call(client, "mnote.page.get", "other.md", {}))
    refused = _call(client, "mnote.page.save", "plan.md", {"content": ["agent"]})
    assert not refused["ok"]
    assert "git merge --abort" in refused["error"]["hint"]
    (root / "plan.md").write_text("# Plan\n\nedited during the merge\n")
    shown = daemon.cli("status")
    assert "in the middle of a merge" in shown.stdout and "git merge --abort" in shown.stdout
    assert daemon.git("rev-parse", "HEAD").strip() == head  # nothing committed meanwhile
    aborted = subprocess.run(["git", "merge", "--abort"], cwd=root, capture_output=True, text=True)
    assert aborted.returncode == 0, (aborted.stderr, daemon.git("status", "--porcelain"))
    written = _call(client, "mnote.page.save", "plan.md", {"content": ["agent"], "mode": "append"})
    assert written["ok"], written["error"]
    text = daemon.git("show", "HEAD:plan.md")
    assert "edited during the merge" in text and "agent" in text
    assert "in the middle" not in daemon.cli("status").stdout
