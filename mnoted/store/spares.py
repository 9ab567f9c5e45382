"""Empty files made ahead of need, on a thread of their own, for the writer to fill.

Every write creates new files: the page's new version, the pack and its index, the
branch's lock token. Creating a file is the slowest step of a write on a file system that
has freed many inodes lately (ext4 checks the free inodes it passes when it allocates):
0.12-1.2 ms each on this project's machine (``docs/store.md``), against ~0.01 ms to write
10 KB into a file already open. A :class:`Spares` keeps a stock of empty files, open, in one
folder (the state folder: ignored by Git, not watched), and refills it on its own thread
after each landing, while the writer runs the next commands. The writer writes into a
spare, syncs it and renames it to its place: a rename across folders of one file system is
as atomic as one inside a folder.

Spares are only an optimisation: when the stock is empty, or the place is on another file
system, the writer creates its file in place as before. Spares left by a crash are empty
files in the state folder; the next start removes them.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from mnoted.store import dirfd

log = logging.getLogger("mnoted.store")

PREFIX = "spare-"
FIRST_STOCK = 8  # a write takes four: a one-off write (a command-line edit) makes few
STOCK = 64  # the most: a group of agents' writes takes one each, and three for the group
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Spare:
    """An empty file in the spares' folder (``folder``: its fd), open for writing as ``fd``."""

    folder: int
    name: str
    fd: int

    def fill(self, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` (the spare is empty) and set the file's mode."""
        dirfd.write_all(self.fd, data)
        os.fchmod(self.fd, mode)  # it was made under the umask

    def place(self, name: str | os.PathLike[str], dir_fd: int | None = None) -> None:
        """Rename the spare to ``name`` (in folder ``dir_fd``, or a path)."""
        os.rename(self.name, name, src_dir_fd=self.folder, dst_dir_fd=dir_fd)

    def remove(self) -> None:
        """Remove a spare that was not put in place (its fd is the caller's to close)."""
        with contextlib.suppress(OSError):
            os.unlink(self.name, dir_fd=self.folder)

    def discard(self) -> None:
        """Close and remove a spare that will not be put in place."""
        os.close(self.fd)
        self.remove()


class Spares:
    """A stock of :class:`Spare` files in ``folder``, refilled on a thread of its own."""

    def __init__(self, folder: Path) -> None:
        self._stock = FIRST_STOCK  # doubled, up to STOCK, each time the writer finds none
        self._ready: collections.deque[Spare] = collections.deque()
        self._made = 0
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None  # started by the first refill
        try:  # never through a symlink: spares are made where the folder really is
            folder.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:  # no spares, then: the writer makes its files in place
            log.warning("no spare files in %s: %s", folder, exc)
            self._fd, self.dev, self._closed = -1, -1, True
            return
        self.dev = os.fstat(self._fd).st_dev
        for name in os.listdir(self._fd):  # left by a process that ended without closing
            if name.startswith(PREFIX):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=self._fd)

    def take(self, dev: int) -> Spare | None:
        """A spare to be put in a folder of device ``dev``; None: create the file in place.

        Someone may have removed spares (``git clean -x`` removes the whole state folder):
        a spare whose name is gone is not handed out, and neither are the others then; with
        its folder gone, there are no more spares until the workspace is opened again.
        """
        if dev != self.dev or self._closed:
            return None
        if os.fstat(self._fd).st_nlink == 0:
            self._closed = True
            self._wake.set()
            self._drop_stock()
            return None
        if not self._ready:
            self._stock = min(2 * self._stock, STOCK)
        found: Spare | None = None
        while found is None and self._ready:  # the writer is the only one to take
            spare = self._ready.popleft()
            if os.fstat(spare.fd).st_nlink > 0:
                found = spare
            else:
                os.close(spare.fd)
                self._drop_stock()
        if found is None:
            self.refill()  # (otherwise the writer calls refill once its landing is done)
        return found

    def refill(self) -> None:
        """Make spares up to the stock, on the spares' thread (started the first time).

        The writer calls it after a landing, not as it takes spares: files created while
        the landing renamed and synced its own made one agent's writes 10-14% slower
        (``docs/performance.md``).
        """
        if self._thread is None:
            self._thread = threading.Thread(target=self._fill, name="mnoted-spares", daemon=True)
            self._thread.start()
        self._wake.set()

    @property
    def stocked(self) -> int:
        """How many spares are ready."""
        return len(self._ready)

    def close(self) -> None:
        """Stop refilling; remove the spares not taken."""
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._drop_stock()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _drop_stock(self) -> None:
        while self._ready:
            self._ready.popleft().discard()

    def _fill(self) -> None:
        pid = os.getpid()
        while not self._closed:
            self._wake.clear()
            try:
                while not self._closed and len(self._ready) < self._stock:
                    self._made += 1
                    name = f"{PREFIX}{pid}-{self._made}"
                    fd = os.open(name, _FLAGS, 0o644, dir_fd=self._fd)
                    self._ready.append(Spare(self._fd, name, fd))
            except OSError as exc:  # a full disk, say: the writer creates in place meanwhile
                log.debug("no spare file made: %s", exc)
            self._wake.wait()
