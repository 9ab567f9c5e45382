"""I/O faults at every step of a write (ENOSPC, EIO, EROFS; once and persistent).

The caller gets a structured error, nothing is acknowledged that is not durable, no
command is half-applied, and the workspace recovers by itself once the fault clears.
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator

import pytest

from mnoted.store import faults
from tests.service.conftest import Harness

STEPS = [
    "pack-renamed",
    "objects-written",
    "journal-written",
    "ref-updated",
    "file-written",
    "files-written",
    "sidecar-updated",
]
ERRNOS = [errno.ENOSPC, errno.EIO, errno.EROFS]


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    faults.disarm()


def ids_in_history(h: Harness) -> list[str]:
    log = h.git("log", "--format=%(trailers:key=Mnote-Command-Id,valueonly,separator=)")
    return [line for line in log.split("\n") if line]


def check(h: Harness) -> None:
    ids = ids_in_history(h)
    assert len(ids) == len(set(ids)), "a command was committed twice"
    subprocess.run(
        ["git", "fsck", "--strict", "--no-progress"], cwd=h.root, check=True, capture_output=True
    )
    h.ws.idle()
    assert h.git("status", "--porcelain") == ""
    assert h.git("show", "HEAD:notes/plan.md") == (h.root / "notes/plan.md").read_text()
    assert [p for p in h.root.rglob(".mnote-tmp-*")] == []
    assert list((h.root / ".git/objects/pack").glob("tmp_*")) == []


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("code", ERRNOS, ids=lambda c: errno.errorcode[c])
def test_a_fault_once_is_reported_and_recovered(h: Harness, step: str, code: int) -> None:
    doc = h.doc("notes/plan.md")
    faults.arm_error(step, code, times=1)
    failed = h.write(
        "mnote.page.save", documentId=doc, content=["During the fault."], mode="append"
    )
    assert failed["ok"] is False
    assert failed["error"]["code"] == "mnote_store_io_error"
    assert failed["error"]["details"]["errno"] == code
    # The next write finishes or drops the interrupted command first, then lands.
    ok = h.write("mnote.page.save", documentId=doc, content=["After the fault."], mode="append")
    assert ok["ok"], ok["error"]
    assert ok["audit"]["commandId"] in ids_in_history(h)
    text = (h.root / "notes/plan.md").read_text()
    assert text.count("During the fault.") <= 1 and text.endswith("After the fault.\n")
    check(h)


@pytest.mark.parametrize("code", ERRNOS, ids=lambda c: errno.errorcode[c])
def test_a_fault_after_the_answer_fails_no_write(h: Harness, code: int) -> None:
    """A command is durable once its journal is: its answer waits neither for its folders'
    syncs nor for its journal entry to go (the next landing does both first). A journal
    that could not be cleared fails no write: the next landing writes over it."""
    doc = h.doc("notes/plan.md")
    faults.arm_error("journal-cleared", code, times=1)
    first = h.write("mnote.page.save", documentId=doc, content=["Before."], mode="append")
    assert first["ok"], first["error"]
    second = h.write("mnote.page.save", documentId=doc, content=["After."], mode="append")
    assert second["ok"], second["error"]
    ids = ids_in_history(h)
    assert first["audit"]["commandId"] in ids and second["audit"]["commandId"] in ids
    assert (h.root / "notes/plan.md").read_text().endswith("Before.\n\nAfter.\n")
    check(h)


@pytest.mark.parametrize("step", ["objects-written", "file-written"])
def test_a_persistent_fault_acknowledges_nothing_until_it_clears(h: Harness, step: str) -> None:
    doc = h.doc("notes/plan.md")
    faults.arm_error(step, errno.EROFS, times=-1)
    for i in range(3):
        resp = h.write("mnote.page.save", documentId=doc, content=[f"try {i}"], mode="append")
        assert resp["ok"] is False and resp["error"]["code"] == "mnote_store_io_error"
        assert resp["audit"]["commandId"] is None
    faults.disarm()
    ok = h.write("mnote.page.save", documentId=doc, content=["Cleared."], mode="append")
    assert ok["ok"], ok["error"]
    check(h)


@pytest.mark.parametrize("step", ["ref-updated", "file-written", "sidecar-updated"])
def test_a_retry_after_a_fault_that_landed_gets_the_commit(h: Harness, step: str) -> None:
    doc = h.doc("notes/plan.md")
    faults.arm_error(step, errno.EIO, times=1)  # after the branch moved
    failed = h.write(
        "mnote.page.save",
        documentId=doc,
        idempotencyKey="retry-me",
        content=["Landed anyway."],
        mode="append",
    )
    assert failed["error"]["code"] == "mnote_store_io_error"
    retry = h.write(
        "mnote.page.save",
        documentId=doc,
        idempotencyKey="retry-me",
        content=["Landed anyway."],
        mode="append",
    )
    assert retry["ok"] and retry["audit"]["replayed"] is True
    assert retry["audit"]["commandId"] in ids_in_history(h)
    assert (h.root / "notes/plan.md").read_text().count("Landed anyway.") == 1
    again = h.write(
        "mnote.page.save",
        documentId=doc,
        idempotencyKey="retry-me",
        content=["Landed anyway."],
        mode="append",
    )
    assert again["audit"]["commandId"] == retry["audit"]["commandId"]
    check(h)
