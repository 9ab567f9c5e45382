"""Named crash points in the write path, for the fault-injection test only.

Production code calls :func:`point` at each step of a command; it does nothing unless a test
process armed it with :func:`arm`, in which case the process SIGKILLs itself at that step.
The library never reads the environment: only the test's helper script calls :func:`arm`.
"""

from __future__ import annotations

import os
import signal

STEPS = (
    "external-committed",
    "objects-written",
    "journal-written",
    "ref-updated",
    "file-written",
    "files-written",
    "sidecar-updated",
    "journal-cleared",
    "index-written",
)

_armed: dict[str, int] = {}


def arm(step: str, countdown: int = 0) -> None:
    """Kill this process the ``countdown+1``-th time ``step`` is reached."""
    if step not in STEPS:
        raise ValueError(f"unknown crash point {step!r}")
    _armed[step] = countdown


def point(step: str) -> None:
    """A crash point (a dictionary lookup when nothing is armed)."""
    if not _armed or step not in _armed:
        return
    if _armed[step] <= 0:
        os.kill(os.getpid(), signal.SIGKILL)
    _armed[step] -= 1
