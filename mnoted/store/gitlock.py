"""Git lock files taken in a way that proves, after a crash, which ones are ours.

Git's lock protocol is ``O_EXCL`` creation of ``<file>.lock``. libgit2 creates such files
itself, and a crash leaves one behind with nothing that says who made it, so a daemon could
not tell its own stale lock from a live ``git`` process's lock. Here the store first writes
an *ownership token* under ``.git/mnote/locks/`` and then takes the lock with ``link(token,
<file>.lock)``, which is as atomic and exclusive as ``O_EXCL``. After a crash a lock that is
the same inode as one of our tokens is ours and is removed; any other lock belongs to someone
else and is only waited for (bounded), then reported with its path (:class:`LockBusy`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from mnoted.errors import LockBusy, StorageError
from mnoted.store.atomic import fsync_dir, in_folder

TOKEN_DIR = "mnote/locks"
WAIT_SECONDS = 3.0

_live: set[str] = set()
"""Tokens of this process whose lock is held (added before the lock is taken and dropped
after it is removed, so a lock that is the same inode as a token outside this set is a
leftover, never a live lock)."""
_dropping = threading.Lock()
"""One thread at a time checks and removes a leftover (two could remove a new live lock)."""


def token_dir(gitdir: Path) -> Path:
    """Where ownership tokens live (inside the git directory, same filesystem as the locks)."""
    return gitdir / TOKEN_DIR


@dataclass(slots=True)
class HeldLock:
    """A Git lock file this process created; :meth:`commit` renames it onto its target.

    Paths are strings: a lock is taken on every write, and ``pathlib`` cost more than the
    system calls.
    """

    target: str
    lock: str
    token: str

    def commit(self, *, sync: bool = True) -> None:
        """Publish the lock file's bytes as the target (Git's ``commit_lock_file``).

        With ``sync`` False the new name is not yet durable: the caller syncs the target's
        folder (together with other folders, in one wait).
        """
        try:
            os.rename(self.lock, self.target)
        finally:
            _live.discard(self.token)  # (after the lock's name is gone, or failed to go)
        if sync:
            fsync_dir(os.path.dirname(self.target))
        self._drop_token()

    def release(self) -> None:
        """Give the lock up without changing the target."""
        with contextlib.suppress(FileNotFoundError):
            if os.path.samefile(self.lock, self.token):
                os.unlink(self.lock)
        _live.discard(self.token)  # (after the lock is gone, or failed to go)
        self._drop_token()

    def _drop_token(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.token)


def acquire(
    gitdir: Path,
    target: str | os.PathLike[str],
    content: bytes = b"",
    *,
    wait: float = WAIT_SECONDS,
    sync: bool = True,
) -> HeldLock:
    """Take ``<target>.lock`` holding ``content``, retrying up to ``wait`` seconds.

    The content is fsynced unless ``sync`` is False: then the caller syncs ``lock.token``
    itself (with other files, in one wait) before :meth:`HeldLock.commit`.
    """
    token, fd = make_token(gitdir, target)
    try:
        try:
            os.write(fd, content)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        os.unlink(token)
        raise
    return take(gitdir, target, token, wait=wait)


def make_token(
    gitdir: Path, target: str | os.PathLike[str], reuse: str | None = None
) -> tuple[str, int]:
    """A new ownership token for a lock on ``target`` and its fd, open for writing: what
    the lock will hold is written here before :func:`take` (a caller that does not take it
    removes it). With ``reuse``, that file (on the same file system) is renamed to be the
    token, its bytes as they are."""
    tokens, named = _token_names(os.fspath(gitdir), os.fspath(target))
    token = f"{named}.{os.getpid()}.{secrets.token_hex(6)}"
    if reuse is None:
        return token, in_folder(tokens, lambda: _make_token(token))
    os.rename(reuse, token)
    try:
        return token, os.open(token, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except BaseException:
        os.unlink(token)
        raise


def take(
    gitdir: Path, target: str | os.PathLike[str], token: str, *, wait: float = WAIT_SECONDS
) -> HeldLock:
    """Take ``<target>.lock`` as the token :func:`make_token` made (and the caller filled),
    retrying up to ``wait`` seconds; the token is removed if the lock is not taken."""
    dest = os.fspath(target)
    tokens, named = _token_names(os.fspath(gitdir), dest)
    lock = dest + ".lock"
    deadline = time.monotonic() + wait
    delay = 0.002
    _live.add(token)
    while True:
        try:
            # (the lock's folder is missing for a branch's first ref)
            in_folder(os.path.dirname(lock), lambda: os.link(token, lock))
            return HeldLock(dest, lock, token)
        except FileExistsError:
            if _drop_leftover(tokens, named, lock):
                continue
            if time.monotonic() >= deadline:
                _live.discard(token)
                os.unlink(token)
                raise LockBusy(
                    f"{lock} is held by another program",
                    hint=(
                        "Wait for the running git command to finish. If no git process is "
                        f"running, the lock is stale: remove {lock} and try again."
                    ),
                    path=str(lock),
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        except OSError as exc:
            _live.discard(token)
            with contextlib.suppress(FileNotFoundError):  # (the folder went meanwhile)
                os.unlink(token)
            raise StorageError(f"cannot take lock {lock}: {exc.strerror}", path=str(lock)) from exc


def _drop_leftover(tokens: str, named: str, lock: str) -> bool:
    """Remove ``lock`` if it is a leftover of this process (see the module's docstring)."""
    mine = f"{os.path.basename(named)}.{os.getpid()}."
    with _dropping:
        return _drop_mine(tokens, mine, lock)


def _drop_mine(tokens: str, mine: str, lock: str) -> bool:
    try:
        held = os.stat(lock)
        names = [n for n in os.listdir(tokens) if n.startswith(mine)]
    except FileNotFoundError:
        return False
    for name in names:
        token = f"{tokens}/{name}"
        if token in _live:
            continue
        with contextlib.suppress(FileNotFoundError):
            seen = os.stat(token)
            if (seen.st_dev, seen.st_ino) == (held.st_dev, held.st_ino):
                os.unlink(lock)
                os.unlink(token)
                return True
    return False


@functools.lru_cache(maxsize=64)
def _token_names(gitdir: str, dest: str) -> tuple[str, str]:
    """The tokens' folder and the start of the name of a token for ``dest`` (the same for
    every lock on one target: the branch is locked at every write)."""
    tokens = f"{gitdir}/{TOKEN_DIR}"
    return tokens, f"{tokens}/{urllib.parse.quote(os.path.relpath(dest, gitdir), safe='')}"


def _make_token(token: str) -> int:
    """Create the token file; its open fd."""
    return os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)


def recover(gitdir: Path) -> list[Path]:
    """Remove lock files our earlier (dead) process left; return what was removed.

    Only call while holding the workspace's process lock: then no live mnoted owns a token.
    """
    removed: list[Path] = []
    tokens = token_dir(gitdir)
    if not tokens.is_dir():
        return removed
    for token in tokens.iterdir():
        lock = gitdir / (_target_of(token) + ".lock")
        with contextlib.suppress(FileNotFoundError):
            if os.path.samefile(lock, token):
                os.unlink(lock)
                removed.append(lock)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(token)
    return removed


def _target_of(token: Path) -> str:
    quoted, _pid, _nonce = token.name.rsplit(".", 2)
    return urllib.parse.unquote(quoted)
