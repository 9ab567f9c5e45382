"""Empty files made ahead of need, on a thread of their own, for the writer to fill.

Every write creates new files: the page's new version, the pack and its index, the branch's lock
token. Creating a file is the slowest step of a write on a file system that has freed many
inodes lately (ext4 checks the free inodes it passes when it allocates), far slower than writing
a page into a file already open. A :class:`Spares` keeps a stock of empty files, open, in one
folder (in the state folder, in the Git directory: not watched), and refills it on its own
thread after each landing, while the writer runs the next commands. The writer writes into a
spare, syncs it and renames it to its place: a rename across folders of one file system is as
atomic as one inside a folder.

A page's file that a write replaces is taken back as a spare rather than freed: the new
file is *exchanged* with the old one (``renameat2(RENAME_EXCHANGE)``), which leaves the old
one at the spare's name, and the next write overwrites it. On ext4 an exchange is cheaper
than a rename over a file (the old file's blocks are not freed) and the overwrite's fsync
cheaper than a new file's (no blocks to allocate); ``bench/exchange.py`` times both.
A file is only taken back when reusing it cannot be told from a new file by anyone:

- mnoted put it in place itself and nobody changed it since (its ctime is the one recorded
  then: no write, mode, owner, link or attribute change);
- it has no other name (one link) and nobody has it open (a write lease is granted only
  then), so no reader ever sees a page's bytes change into another's;
- the landing that replaced it is durable (its folders synced): until then a crash could
  bring the old name back, and it must find the old bytes there.

The same thread removes the files the writer hands it (:meth:`Spares.free_later`): the
branch's old file, which freeing would otherwise make the writer wait for the disk
(:meth:`~mnoted.store.gitlock.HeldLock.commit`).

Spares are only an optimisation: when the stock is empty, or the place is on another file
system, the writer creates its file in place as before. Spares left by a crash are files in
the state folder, empty or holding a replaced page's old bytes; the next start removes them.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import logging
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mnoted.store import dirfd
from mnoted.store.statcache import Key, key_of

log = logging.getLogger("mnoted.store")

PREFIX = "spare-"
FIRST_STOCK = 8  # a write takes four: a one-off write (a command-line edit) makes few
STOCK = 64  # the most: a group of agents' writes takes one each, and three for the group
PLACED = 4096  # page files put in place remembered (ino → ctime), to be taken back later
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Spare:
    """An empty file in the spares' folder (``folder``: its fd), open for writing as ``fd``."""

    folder: int
    name: str
    fd: int
    used: bool = False  # a replaced page's file taken back: it holds that page's old bytes

    def fill(self, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` over what the spare holds and set the file's mode."""
        dirfd.write_all(self.fd, data)
        if self.used:  # (its blocks are overwritten, not freed: only a longer tail goes)
            os.ftruncate(self.fd, len(data))
        dirfd.set_mode(self.fd, mode)  # it was made under the umask

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
        self._used: collections.deque[Spare] = collections.deque()  # taken back (writer only)
        self._placed: dict[int, int] = {}  # inode → ctime of page files put in place
        self.exchanges = True  # False once the file system refused an exchange
        self._made = 0
        self._freed: collections.deque[str] = collections.deque()  # paths to remove
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

    def take(self, dev: int, *, used: bool = False) -> Spare | None:
        """A spare to be put in a folder of device ``dev``; None: create the file in place.
        With ``used``, a file taken back first (one the caller fills with :meth:`Spare.fill`).

        Someone may have removed spares (or the whole state folder):
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
        # A spare with another link (a backup of the state folder made with `cp -al`, say)
        # is never written: the other name would change too, and a page put there would
        # have two links (which the store refuses to write).
        while used and self._used:
            spare = self._used.pop()  # the newest: its blocks are likelier still cached
            if os.fstat(spare.fd).st_nlink == 1:
                return spare
            spare.discard()
        if not self._ready:
            self._stock = min(2 * self._stock, STOCK)
        found: Spare | None = None
        while found is None and self._ready:  # the writer is the only one to take
            spare = self._ready.popleft()
            links = os.fstat(spare.fd).st_nlink
            if links == 1:
                found = spare
            elif links > 1:
                spare.discard()
            else:
                os.close(spare.fd)
                self._drop_stock()
        if found is None:
            self.refill()  # (otherwise the writer calls refill once its landing is done)
        return found

    def refill(self) -> None:
        """Make spares up to the stock, on the spares' thread (started the first time).

        The writer calls it after a landing, not as it takes spares: files created while
        the landing renames and syncs its own would compete with it for the disk and the
        file system's locks (``docs/store.md``, *Spare files*).
        """
        if self._thread is None:
            self._thread = threading.Thread(target=self._fill, name="mnoted-spares", daemon=True)
            self._thread.start()
        self._wake.set()

    def placed(self, st: os.stat_result) -> None:
        """Remember a page file just put in place (``st``: its stat data, after the rename)."""
        if len(self._placed) >= PLACED:
            del self._placed[next(iter(self._placed))]
        self._placed[st.st_ino] = st.st_ctime_ns

    def exchange(
        self, spare: Spare, name: str, folder: int, seen: Key
    ) -> str | Literal[False] | None:
        """Put ``spare`` in place of file ``name`` in ``folder`` by exchanging the two.

        ``seen``: the stat data the caller's check found at ``name``. Returns the spare's
        name, now holding the replaced file, if that file may be taken back (:meth:`take_back`
        once the landing is durable); None when the spare is in place and the replaced file
        removed (or renamed over, where the file system cannot exchange: :attr:`exchanges`
        is then False); False when the file there was no longer the one checked (the
        exchange is undone; nothing changed).
        """
        try:  # (the page first: see the comment on _exchange)
            _exchange(folder, name, spare)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
                self.exchanges = False
                spare.place(name, folder)
                return None
            if exc.errno != errno.ENOENT or not _exists(spare.folder, spare.name):
                raise
            return False  # (ENOENT with the spare there: the file went since the check)
        try:
            st = os.stat(spare.name, dir_fd=spare.folder, follow_symlinks=False)
        except FileNotFoundError:  # someone removed it from the state folder: nothing to keep
            return None
        if key_of(st)[:5] != seen[:5] or not stat.S_ISREG(st.st_mode):  # (all but ctime)
            _exchange(folder, name, spare)  # put theirs back
            return False
        mine = self._placed.pop(st.st_ino, None) == seen[5] and st.st_nlink == 1
        if mine and len(self._used) < STOCK:
            return spare.name
        with contextlib.suppress(OSError):
            os.unlink(spare.name, dir_fd=spare.folder)
        return None

    def take_back(self, names: list[str]) -> None:
        """Keep the files that :meth:`exchange` left at ``names`` as spares to write over,
        each unless someone has it open (its bytes must not change under a reader) or it
        has another link (a backup made with ``cp -al`` must keep its bytes too)."""
        for name in names:
            fd = -1
            try:
                fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._fd)
                if os.fstat(fd).st_nlink != 1:  # linked elsewhere since the exchange
                    raise OSError(errno.EMLINK, "another link")
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)  # EAGAIN: open elsewhere
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
            except OSError:
                if fd >= 0:
                    os.close(fd)
                self.drop_back([name])
                continue
            self._used.append(Spare(self._fd, name, fd, used=True))

    def drop_back(self, names: list[str]) -> None:
        """Remove files :meth:`exchange` left at ``names`` that will not be taken back."""
        for name in names:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self._fd)

    def free_later(self, path: str) -> None:
        """Remove the file at ``path`` on the spares' thread (now, if there is none): freeing
        its blocks may wait for the disk (see :meth:`gitlock.HeldLock.commit`)."""
        if self._closed:
            with contextlib.suppress(OSError):
                os.unlink(path)
            return
        self._freed.append(path)
        self.refill()

    @property
    def stocked(self) -> int:
        """How many spares are ready (not counting files taken back)."""
        return len(self._ready)

    def close(self) -> None:
        """Stop refilling; remove the spares not taken."""
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._drop_stock()
        self._free()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _drop_stock(self) -> None:
        while self._ready:
            self._ready.popleft().discard()
        while self._used:
            self._used.popleft().discard()

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
            self._free()
            self._wake.wait()

    def _free(self) -> None:
        while True:
            try:
                path = self._freed.popleft()
            except IndexError:  # (none left; the writer may take the last one at close)
                return
            with contextlib.suppress(OSError):
                os.unlink(path)


def _exchange(folder: int, name: str, spare: Spare) -> None:
    """Exchange file ``name`` of ``folder`` with ``spare``, the page's name given first.

    The kernel reports an exchange as two moves, the first name's file first. So the page's
    folder sees ``IN_MOVED_FROM`` then ``IN_MOVED_TO`` of the page's name, which watchers
    take as the file replaced (an update). The other order, a file created and at once
    removed, is dropped whole by some: @parcel/watcher's event list, which VS Code uses,
    erases a path created and removed in one batch, so an editor would miss the write.
    """
    dirfd.exchange(folder, name, spare.folder, spare.name)


def _exists(folder: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
