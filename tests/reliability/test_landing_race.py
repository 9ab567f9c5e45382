"""A person's save racing an agent's landing: an ``ok`` is never reverted.

The save is injected deterministically (``faults.arm_call``) at the two instants that
matter: during the landing's disk syncs (the re-check before the branch moves sees it and
lands nothing: the write is planned again on the save), and between that re-check and the
rename (the save stays, is committed, and the write is merged on it as a second commit of
the same command, or refused with ``mnote_tool_conflict`` naming the person's commit).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mnoted.store import faults
from tests.service.conftest import Harness

PAGE = "notes/plan.md"


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    faults.disarm()


def _save(h: Harness, transform: Callable[[str], str]) -> None:
    """The person's editor: read the page, change it, write it back in place."""
    path = h.root / PAGE
    path.write_text(transform(path.read_text()))


def _commits(h: Harness, command_id: str) -> list[str]:
    out = h.git("log", "--format=%H", f"--grep=Mnote-Command-Id: {command_id}")
    return out.split()


def _trailer(h: Harness, commit: str, key: str) -> str:
    return h.git("log", "-1", f"--format=%(trailers:key={key},valueonly)", commit).strip()


def _clean(h: Harness) -> None:
    h.ws.idle()
    assert h.git("status", "--porcelain") == ""
    assert h.git("show", f"HEAD:{PAGE}") == (h.root / PAGE).read_text()
    assert list(h.root.rglob(".mnote-tmp-*")) == []
    subprocess.run(
        ["git", "fsck", "--strict", "--no-progress"], cwd=h.root, check=True, capture_output=True
    )


def test_a_save_during_the_syncs_lands_nothing_and_the_write_applies_on_it(h: Harness) -> None:
    faults.arm_call("landing-synced", lambda: _save(h, lambda t: t + "\nPerson's line.\n"))
    resp = h.write("mnote.page.save", documentId=h.doc(PAGE), content=["Agent."], mode="append")
    assert resp["ok"], resp
    text = (h.root / PAGE).read_text()
    assert "Person's line." in text and text.endswith("Agent.\n")
    commits = _commits(h, resp["audit"]["commandId"])
    assert len(commits) == 1  # one commit: nothing landed before the save was seen
    parent = h.git("show", "-s", "--format=%P", commits[0]).strip()
    assert "Person's line." in h.git("show", f"{parent}:{PAGE}")  # (the save, committed)
    _clean(h)


def test_a_save_between_the_recheck_and_the_rename_is_merged_after_it(h: Harness) -> None:
    intro = "# Goals\n\nPerson's intro.\n"
    faults.arm_call("file-replacing", lambda: _save(h, lambda t: t.replace("# Goals\n", intro)))
    resp = h.write("mnote.page.save", documentId=h.doc(PAGE), content=["Agent."], mode="append")
    assert resp["ok"], resp
    assert any("applied again on their save" in w for w in resp["result"]["warnings"])
    text = (h.root / PAGE).read_text()
    assert "Person's intro." in text and text.endswith("Agent.\n")
    first, follow = reversed(_commits(h, resp["audit"]["commandId"]))
    head = h.git("rev-parse", "HEAD").strip()
    assert follow == head and resp["audit"]["revision"] == head  # the answer names the follow-up
    assert _trailer(h, follow, "Mnote-Trace-Id") == _trailer(h, first, "Mnote-Trace-Id")
    between = h.git("rev-list", f"{first}..{follow}").split()
    assert len(between) == 2  # the person's save, then the change put back on it
    assert "Person's intro." in h.git("show", f"{between[1]}:{PAGE}")
    assert "Agent." not in h.git("show", f"{between[1]}:{PAGE}")
    _clean(h)


def test_a_save_during_the_put_backs_own_landing_is_merged_on_too(h: Harness) -> None:
    """The change put back lands like any write: a second save during its disk syncs makes
    it land nothing, and it is merged again on that save."""
    intro = "# Goals\n\nPerson's intro.\n"
    later = lambda t: t.replace("is high.", "is high, says the person.")  # noqa: E731

    def first_save() -> None:
        _save(h, lambda t: t.replace("# Goals\n", intro))
        # the next landing commits that save; the one after it is the put-back's
        faults.arm_call("landing-synced", lambda: None)
        faults.arm_call("landing-synced", lambda: _save(h, later))

    faults.arm_call("file-replacing", first_save)
    resp = h.write("mnote.page.save", documentId=h.doc(PAGE), content=["Agent."], mode="append")
    assert resp["ok"], resp
    text = (h.root / PAGE).read_text()
    assert "Person's intro." in text and "says the person." in text and text.endswith("Agent.\n")
    assert resp["audit"]["revision"] == h.git("rev-parse", "HEAD").strip()
    assert len(_commits(h, resp["audit"]["commandId"])) == 2  # its own, and the put-back
    _clean(h)


def test_a_change_that_does_not_apply_on_the_save_is_a_conflict(h: Harness) -> None:
    person = "Budget risk is low now."
    lower = lambda t: t.replace("is high.", "is low now.")  # noqa: E731
    faults.arm_call("file-replacing", lambda: _save(h, lower))
    body = (h.root / PAGE).read_text().split("---\n", 2)[2].replace("is high.", "is gone.")
    args = {"documentId": h.doc(PAGE), "content": [body], "idempotencyKey": "once"}
    resp = h.write("mnote.page.save", **args)
    assert not resp["ok"], resp
    error = resp["error"]
    assert error["code"] == "mnote_tool_conflict"
    theirs = error["details"]["external_commit"]
    ours = error["details"]["commit"]
    assert theirs in error["hint"] and ours in error["hint"]
    assert person in (h.root / PAGE).read_text()  # the person's save stays
    assert person in h.git("show", f"{theirs}:{PAGE}")
    assert "Budget risk is gone." in h.git("show", f"{ours}:{PAGE}")  # the agent's, kept
    _clean(h)
    # Its key is not taken by a change the file did not keep: a retry runs it anew.
    again = h.write("mnote.page.save", **args)
    assert again["ok"] and not again["audit"].get("replayed"), again
    assert "Budget risk is gone." in (h.root / PAGE).read_text()
    _clean(h)


def test_a_groups_change_is_merged_on_a_save_made_as_it_landed(h: Harness) -> None:
    """A group's callers are answered with its landing: its change is put back all the same."""
    from mnoted.store import CommandMeta, Write

    intro = "# Goals\n\nPerson's intro.\n"
    faults.arm_call("file-replacing", lambda: _save(h, lambda t: t.replace("# Goals\n", intro)))
    before = (h.root / PAGE).read_text()
    with h.ws.group():
        for i in range(2):
            h.ws.apply(
                CommandMeta("page.body.save", actor="hermes", trace_id=f"t{i}"),
                [Write(PAGE, (before + "".join(f"\nAgent {k}.\n" for k in range(i + 1))).encode())],
            )
    text = (h.root / PAGE).read_text()
    assert "Person's intro." in text and text.endswith("Agent 0.\n\nAgent 1.\n")
    assert _trailer(h, "HEAD", "Mnote-Trace-Id") == "t1"  # the last command's, once more
    _clean(h)


def test_a_save_renamed_over_the_page_just_before_its_rename_is_not_replaced(h: Harness) -> None:
    """After the last check, in the instant before the rename: the page's file and the new
    one are exchanged, the one taken out is not the one checked, so it goes back."""
    path = h.root / PAGE

    def rename_save() -> None:  # vim, VS Code, JetBrains: a new file renamed over the page
        tmp = path.with_name(".plan.md.swp")
        tmp.write_text(path.read_text().replace("# Goals\n", "# Goals\n\nPerson's intro.\n"))
        tmp.replace(path)

    faults.arm_call("file-renaming", rename_save)
    resp = h.write("mnote.page.save", documentId=h.doc(PAGE), content=["Agent."], mode="append")
    assert resp["ok"], resp
    text = path.read_text()
    assert "Person's intro." in text and text.endswith("Agent.\n")
    assert len(_commits(h, resp["audit"]["commandId"])) == 2  # the change merged on the save
    _clean(h)


def test_a_writer_opening_the_page_just_before_its_rename_keeps_writing_to_it(
    h: Harness,
) -> None:
    """A writer that opens the page in that instant waits for the store's read lease; the
    file it then writes to must still be the page, not one renamed away."""
    import os
    import threading

    path = h.root / PAGE

    def writer() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)  # blocks until the lease is released
        try:
            os.write(fd, b"\nPerson's line.\n")
        finally:
            os.close(fd)

    thread = threading.Thread(target=writer)

    def start_writer() -> None:
        thread.start()
        deadline = time.monotonic() + 10
        while "BREAK" not in Path("/proc/locks").read_text() and time.monotonic() < deadline:
            time.sleep(0.001)  # until the kernel holds the open (the lease is being broken)

    faults.arm_call("file-renaming", start_writer)
    resp = h.write("mnote.page.save", documentId=h.doc(PAGE), content=["Agent."], mode="append")
    thread.join(30)
    assert resp["ok"], resp
    text = path.read_text()
    assert "Person's line." in text and "Agent." in text
    _clean(h)
