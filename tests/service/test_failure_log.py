"""The daemon's log names the failures that are its operator's to fix.

A disk that filled up, or a bug, was only in the failing call's answer: the log said
nothing, and `mnote_internal_error`'s hint ("the daemon log has the details") pointed at a
log without them. Errors a client caused stay out of the log: they are its answer.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from mnoted.service import HANDLERS
from mnoted.store import faults
from tests.service.conftest import Harness

pytestmark = pytest.mark.twin


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    faults.disarm()


def records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "mnoted.calls"]


@pytest.mark.git  # (the store's own fault point in a landing)
def test_a_full_disk_is_logged_with_the_call(h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    faults.arm_error("pack-renamed", errno.ENOSPC, times=1)
    failed = h.write(
        "mnote.page.save", documentId=h.doc("notes/plan.md"), content=["x"], mode="append"
    )
    assert failed["error"]["code"] == "mnote_store_io_error"
    [record] = records(caplog)
    assert record.levelno == logging.WARNING
    assert "mnote.page.save failed" in record.getMessage()
    assert "No space left on device" in record.getMessage()


def test_a_bug_is_logged_with_its_traceback(
    h: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("a handler's bug")

    monkeypatch.setitem(HANDLERS, "mnote.page.get", broken)
    answer = h.call("mnote.page.get", documentId=h.doc("notes/plan.md"))
    assert answer["error"]["code"] == "mnote_internal_error"
    [record] = records(caplog)
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.exc_info[1] is not None and "a handler's bug" in str(record.exc_info[1])
    assert "in broken" in caplog.text  # the traceback, down to the failing line


def test_a_callers_own_mistakes_are_only_its_answer(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert h.call("mnote.page.get", documentId="nowhere.md")["error"]["code"] == (
        "mnote_tool_not_found"
    )
    assert h.call("mnote.no.such_tool")["error"]["code"] == "mnote_tool_unknown"
    assert records(caplog) == []
