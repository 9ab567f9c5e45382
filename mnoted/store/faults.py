"""Named fault points in the write path, for the fault-injection tests only.

Production code calls :func:`point` at each step of a command; it does nothing unless a test
armed it: with :func:`arm` the process SIGKILLs itself at that step, with
:func:`arm_error` the step fails with an ``OSError`` (ENOSPC, EIO, EROFS, ...) once, a few
times, or until :func:`disarm`; with :func:`arm_call` a function runs there (someone else
acting at that instant: a person's save racing a landing). The library never reads the
environment: only tests arm it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

STEPS = (
    "external-committed",
    "pack-renamed",
    "objects-written",
    "journal-written",
    "ref-updated",
    "file-written",
    "files-written",
    "sidecar-updated",
    "journal-cleared",
    "index-written",
)
MAINTENANCE_STEPS = ("pack-published", "search-batch")  # background maintenance, off the write path
REMOTE_STEPS = ("sync-fetched", "sync-merge-written", "sync-landed", "sync-pushed")
"""Steps of a remote sync (``mnoted/remote/sync.py``) between the store's own."""
RACE_STEPS = ("landing-synced", "file-replacing", "file-renaming")
"""Where a landing's files may change under it: during the disk syncs (before the re-check
that lands nothing then), between that re-check and a file's last check (the residual window,
where the change is merged after the branch moved), and between that last check and the
rename (the exchange then puts the person's file back)."""

_armed: dict[str, int] = {}
_errors: dict[str, list[int]] = {}  # step -> [errno, times left (-1: until disarmed)]
_calls: dict[str, list[Callable[[], object]]] = {}  # step -> functions run there, in turn


def arm(step: str, countdown: int = 0) -> None:
    """Kill this process the ``countdown+1``-th time ``step`` is reached."""
    if step not in STEPS + MAINTENANCE_STEPS + REMOTE_STEPS:
        raise ValueError(f"unknown crash point {step!r}")
    _armed[step] = countdown


def arm_error(step: str, errno: int, times: int = 1) -> None:
    """Make ``step`` raise ``OSError(errno)`` the next ``times`` times (-1: until disarmed)."""
    if step not in STEPS + MAINTENANCE_STEPS:
        raise ValueError(f"unknown fault point {step!r}")
    _errors[step] = [errno, times]


def arm_call(step: str, fn: Callable[[], object], times: int = 1) -> None:
    """Run ``fn`` the next ``times`` times ``step`` is reached."""
    if step not in STEPS + RACE_STEPS:
        raise ValueError(f"unknown fault point {step!r}")
    _calls.setdefault(step, []).extend([fn] * times)


def disarm() -> None:
    _armed.clear()
    _errors.clear()
    _calls.clear()


def point(step: str) -> None:
    """A fault point (a dictionary lookup when nothing is armed)."""
    if _calls and _calls.get(step):
        _calls[step].pop(0)()
    if _errors and step in _errors:
        errno, left = _errors[step]
        if left != 0:
            _errors[step][1] = left - 1 if left > 0 else -1
            raise OSError(errno, os.strerror(errno), f"fault injected at {step}")
    if not _armed or step not in _armed:
        return
    if _armed[step] <= 0:
        os.kill(os.getpid(), signal.SIGKILL)
    _armed[step] -= 1
