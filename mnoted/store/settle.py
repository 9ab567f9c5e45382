"""Whether a work-tree file is settled: the only state the store commits or writes over.

An editor that truncates a file and writes it in several ``write()`` calls (nano, scripts
``>`` then ``>>``) leaves a half-written file on disk between the calls. Committed then, the
torn version enters history; replaced then (a rename over it), the writer's next calls go to
a file no longer at the path and its save is lost. A file is *settled* when

- nobody holds it open for writing: the kernel refuses a read lease (``F_SETLEASE``) on a
  file open for writing anywhere, which answers exactly, in a few microseconds, without a
  walk of ``/proc``; and
- it has not changed for :data:`QUIET_NS` (a script's ``>`` and ``>>`` are two opens, with
  the file closed between them), or its stat data is what it was when last found settled
  (the store's own writes are recorded so, and need not wait).

Where leases are not available (a file another user owns, a file system without them), only
the quiet time is checked. A lease held for the probe would make a writer opening the file
wait until it is released, which is at once; its break is signalled with ``SIGURG``, whose
default action is to be ignored (``SIGIO``, the default, would end the daemon).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mnoted.errors import PathRejected
from mnoted.store import dirfd
from mnoted.store.statcache import Key, key_of

QUIET_NS = 100_000_000
"""How long a file must have been left alone before it is committed or written over. The
gap between an editor's writes is a few milliseconds; file times come from the kernel's
coarse clock, a tick late at most, and the quiet time is many ticks."""
POLL_SECONDS = 0.005
"""How often a file held open for writing is looked at again while waited for."""
LIMIT = 10_000

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@contextmanager
def _read_lease(folder: int, name: str) -> Iterator[tuple[int | None, bool | None]]:
    """Open file ``name`` in ``folder`` and hold a read lease on it for the body. Yields the
    fd (None if it did not open) and whether someone holds the file open for writing: True
    (the kernel refused the lease, or someone holds one of their own), False (the lease is
    held), None (the kernel cannot tell: not the owner, no leases on this file system)."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=folder)
    except BlockingIOError:  # someone holds a lease of their own on it: writing, say
        yield None, True
        return
    except OSError:
        yield None, None
        return
    leased = False
    try:
        busy: bool | None = False
        try:
            dirfd.lease(fd, fcntl.F_RDLCK)
            leased = True
        except OSError as exc:
            busy = True if exc.errno in (errno.EAGAIN, errno.EBUSY) else None
        yield fd, busy
    finally:
        if leased:
            fcntl.fcntl(fd, dirfd.F_SETLEASE, fcntl.F_UNLCK)
        os.close(fd)


def held_for_writing(folder: int, name: str, st: os.stat_result) -> bool | None:
    """Whether another process holds the file ``name`` (stat ``st``) in ``folder`` open for
    writing; None where the kernel cannot tell (no lease on this file for this process)."""
    with _read_lease(folder, name) as (fd, busy):
        if fd is not None and os.fstat(fd).st_ino != st.st_ino:
            return True  # replaced meanwhile: changed a moment ago
        return busy


_F_GETLEASE = getattr(fcntl, "F_GETLEASE", 1025)


@contextmanager
def no_new_writer(folder: int, name: str) -> Iterator[Callable[[], bool]]:
    """Hold a read lease on file ``name`` while the body replaces it: a writer that opens it
    meanwhile waits until the body is done. Yields a function that says whether the file may
    be replaced now: False if someone holds it open for writing, or began to open it so
    (the writer would then write to the replaced file). Where leases are not available it
    always says True (the stat check before a rename is then all there is)."""
    with _read_lease(folder, name) as (fd, busy):
        if busy is None:
            yield lambda: True
        elif busy or fd is None:
            yield lambda: False
        else:
            leased = fd
            yield lambda: fcntl.fcntl(leased, _F_GETLEASE) == fcntl.F_RDLCK


class Settling:
    """The stat data of files last found settled, and the check itself (:meth:`wait_for`).

    ``clock`` gives the time of day in nanoseconds (file times are compared with it).
    """

    def __init__(
        self,
        clock: Callable[[], int] = time.time_ns,
        sleep: Callable[[float], object] = time.sleep,
        quiet_ns: int = QUIET_NS,
    ) -> None:
        self._keys: dict[str, Key] = {}
        self._clock = clock
        self._sleep = sleep
        self.quiet_ns = quiet_ns

    def settled(self, rel: str, st: os.stat_result) -> None:
        """``rel`` is settled with stat data ``st`` (the store just put it in place)."""
        if len(self._keys) >= LIMIT:
            self._keys.clear()
        self._keys[rel] = key_of(st)

    def check(self, folder: int, name: str, rel: str) -> float:
        """0 if file ``rel`` (``name`` in ``folder``) is settled or absent, else how long to
        wait before looking again."""
        st = dirfd.lstat_at(folder, name)
        if st is None or not stat.S_ISREG(st.st_mode):
            return 0.0
        if held_for_writing(folder, name, st):
            return POLL_SECONDS
        key = key_of(st)
        if self._keys.get(rel) == key:
            return 0.0
        age = self._clock() - max(st.st_ctime_ns, st.st_mtime_ns)
        if age < self.quiet_ns:
            return max((self.quiet_ns - age) / 1e9, 0.001)
        self.settled(rel, st)
        return 0.0

    def check_path(self, root: Path, rel: str) -> float:
        """:meth:`check` of workspace path ``rel`` (0 for a path that is no file)."""
        *folders, name = rel.split("/")
        try:
            with dirfd.folder(root, folders) as fd:
                return 0.0 if fd is None else self.check(fd, name, rel)
        except (PathRejected, OSError):
            return 0.0

    def wait_for(self, root: Path, paths: list[str], seconds: float) -> set[str]:
        """Wait up to ``seconds`` for ``paths`` to be settled; the paths still unsettled."""
        deadline = time.monotonic() + seconds
        todo = list(paths)
        while True:
            waits = {rel: self.check_path(root, rel) for rel in todo}
            todo = [rel for rel, wait in waits.items() if wait > 0]
            if not todo:
                return set()
            left = deadline - time.monotonic()
            if left <= 0:
                return set(todo)
            self._sleep(min(min(waits[rel] for rel in todo), left))
