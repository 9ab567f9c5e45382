"""A page's permissions on disk, through the running daemon.

A note kept private (``chmod 600``) stayed private only until an agent's first edit, which
wrote the new file 0644: readable by every user of the machine. A note made read-only
(``chmod a-w``) was written over all the same, and made writable.
"""

from __future__ import annotations

import stat
from typing import Any

from tests.e2e.conftest import DaemonProcess


def edit(daemon: DaemonProcess, page: str, old: str, new: str) -> dict[str, Any]:
    client = daemon.client()
    args = {"operations": [{"search": old, "replace": new}]}
    body = client.envelope("mnote.doc.markdown_edit", page, args, False)
    return client.request("POST", "/v1/tools/call", body)[1]


def mode(daemon: DaemonProcess, page: str) -> int:
    return stat.S_IMODE((daemon.workspace / page).stat().st_mode)


def test_an_agents_edit_keeps_a_private_note_private(daemon: DaemonProcess) -> None:
    (daemon.workspace / "plan.md").chmod(0o600)
    for old, new in (("Monday", "Tuesday"), ("Tuesday", "Friday")):
        made = edit(daemon, "plan.md", old, new)
        assert made["ok"], made
        assert mode(daemon, "plan.md") == 0o600
    assert "Ship on Friday." in (daemon.workspace / "plan.md").read_text()


def test_a_read_only_note_is_not_written_over(daemon: DaemonProcess) -> None:
    page = daemon.workspace / "plan.md"
    page.chmod(0o444)
    before = page.read_bytes()
    head = daemon.git("rev-parse", "HEAD")
    refused = edit(daemon, "plan.md", "Monday", "Tuesday")
    assert not refused["ok"] and refused["error"]["code"] == "mnote_path_rejected", refused
    assert "read-only on disk (mode 0444)" in refused["error"]["message"]
    assert "chmod u+w 'plan.md'" in refused["error"]["hint"]
    assert page.read_bytes() == before and mode(daemon, "plan.md") == 0o444
    assert daemon.git("rev-parse", "HEAD") == head
    page.chmod(0o644)
    assert edit(daemon, "plan.md", "Monday", "Tuesday")["ok"]
