"""The Nth ``fsync``, ``rename`` (``renameat2`` too), ``write`` or ``pwrite`` of a write fails
(EIO, ENOSPC), once or from then on, wherever it happens: on the writer's thread or on the
fsync pool that syncs a landing's pack while the branch is locked.

The named fault points (``test_io_faults.py``) fail a step; these fail the system calls
under the steps, each one in turn. Either way: a structured error or a durable commit,
never an answer for a command that is not on disk, and the next write lands once the
fault clears.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mnoted.store import aio, dirfd
from tests.reliability.test_io_faults import check, ids_in_history
from tests.service.conftest import Harness

CALLS = ("fsync", "rename", "write", "pwrite", "renameat2")
OWNERS: dict[str, Any] = {"renameat2": dirfd}  # where a call is looked up, when not in os


class Injector:
    """Counts the calls of one ``os`` function made by the store and fails those from the
    ``fail_from``-th on."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.real: Callable[..., Any] = getattr(OWNERS.get(name, os), name)
        self.calls = 0
        self.fail_from: int | None = None
        self.fail_until: int | None = None  # exclusive; None: from then on
        self.code = errno.EIO
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.calls += 1
            n = self.calls
        if (
            self.fail_from is not None
            and n >= self.fail_from
            and (self.fail_until is None or n < self.fail_until)
        ):
            raise OSError(self.code, os.strerror(self.code))
        return self.real(*args, **kwargs)

    def arm(self, nth: int, *, once: bool, code: int) -> None:
        self.calls = 0
        self.fail_from = nth
        self.fail_until = nth + 1 if once else None
        self.code = code

    def clear(self) -> None:
        self.fail_from = None


@pytest.fixture(params=CALLS)
def injector(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Injector]:
    inj = Injector(request.param)
    monkeypatch.setattr(OWNERS.get(request.param, os), request.param, inj)
    if request.param == "fsync":  # (fsyncs handed to the kernel do not call os.fsync)
        monkeypatch.setattr(aio, "enabled", False)
    yield inj
    inj.clear()


def append(h: Harness, doc: str, text: str) -> dict[str, Any]:
    return h.write("mnote.page.save", documentId=doc, content=[text], mode="append")


def calls_per_write(h: Harness, inj: Injector, doc: str) -> int:
    inj.calls = 0
    assert append(h, doc, "Counted.")["ok"]
    return inj.calls


def assert_acknowledged_only_if_durable(h: Harness, resp: dict[str, Any], text: str) -> None:
    on_disk = (h.root / "notes/plan.md").read_text()
    if resp["ok"]:
        assert resp["audit"]["commandId"] in ids_in_history(h)
        assert text in on_disk
    else:
        assert resp["error"]["code"] == "mnote_store_io_error", resp["error"]
        assert resp["audit"]["commandId"] is None


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=errno.errorcode.get)
def test_each_call_of_a_write_failing_once(h: Harness, injector: Injector, code: int) -> None:
    doc = h.doc("notes/plan.md")
    total = calls_per_write(h, injector, doc)
    assert total > 0
    for nth in range(1, total + 1):
        injector.arm(nth, once=True, code=code)
        text = f"During fault {injector.name} #{nth}."
        resp = append(h, doc, text)
        injector.clear()
        assert_acknowledged_only_if_durable(h, resp, text)
        after = append(h, doc, f"After fault #{nth}.")
        assert after["ok"], (nth, after["error"])
        assert (h.root / "notes/plan.md").read_text().count(text) <= 1
    check(h)


def test_each_call_failing_from_then_on_until_it_clears(h: Harness, injector: Injector) -> None:
    doc = h.doc("notes/plan.md")
    total = calls_per_write(h, injector, doc)
    for nth in range(1, total + 1):
        injector.arm(nth, once=False, code=errno.EIO)
        text = f"Persistent fault {injector.name} #{nth}."
        resp = append(h, doc, text)
        again = append(h, doc, f"{text} Again.")
        injector.clear()
        assert_acknowledged_only_if_durable(h, resp, text)
        assert_acknowledged_only_if_durable(h, again, f"{text} Again.")
        cleared = append(h, doc, f"Cleared #{nth}.")
        assert cleared["ok"], (nth, cleared["error"])
    check(h)
