"""The current branch and a compare-and-swap update of its ref, in Git's own file format.

pygit2 has no compare-and-swap ref update. The store locks ``refs/heads/<branch>.lock``
(with an ownership token, see :mod:`mnoted.store.gitlock`), re-reads the ref under the lock,
and renames the lock onto the ref only if the ref still names the expected parent. A branch
is therefore never moved backwards or sideways over a commit someone else made meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import time
from functools import partial
from pathlib import Path

from mnoted.errors import WorkspaceInvalid
from mnoted.store import gitlock
from mnoted.store.atomic import in_folder
from mnoted.store.statcache import stamp_of

ZERO = "0" * 40
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC


class HeadMoved(Exception):
    """The branch no longer names the commit a new commit was built on (internal)."""

    def __init__(self, current: str | None) -> None:
        super().__init__(current)
        self.current = current


def gone(gitdir: Path) -> WorkspaceInvalid:
    """The error for a Git directory that is no longer there, and the way back."""
    return WorkspaceInvalid(
        f"the workspace's repository {gitdir} is gone: was its folder moved or deleted?",
        hint=f"Put the folder back at {gitdir.parent}: writes go on at once, and edits"
        " made meanwhile are committed. A folder moved for good is served from its new"
        " path once mnoted is restarted with it.",
    )


def current_branch(gitdir: Path) -> str:
    """``refs/heads/<name>`` that HEAD points at; a detached HEAD is refused."""
    try:
        head = _read(gitdir, "HEAD").decode("utf-8", "replace").strip()
    except OSError as exc:
        if not gitdir.is_dir():  # the workspace's folder moved or deleted under the daemon
            raise gone(gitdir) from exc
        raise WorkspaceInvalid(f"cannot read {gitdir / 'HEAD'}: {exc.strerror}") from exc
    if not head.startswith("ref: refs/heads/"):
        raise WorkspaceInvalid(
            "HEAD is detached: mnoted commits only on a branch",
            hint="Check out a branch (for example `git switch main`) and try again.",
        )
    return head[5:]


def stamp(gitdir: Path, refname: str) -> tuple[tuple[int, int, int, int] | None, ...]:
    """Stat data of ``HEAD``, ``refname`` and ``packed-refs``: equal stamps, same HEAD.

    Git replaces a ref by renaming a lock file over it (a new inode), so a moved branch
    or a switched HEAD always changes the stamp; three ``stat`` calls cost less than
    reading the files each time the store looks.
    """
    out: list[tuple[int, int, int, int] | None] = []
    base = os.fspath(gitdir)
    for rel in ("HEAD", refname, "packed-refs"):
        try:
            st = os.stat(f"{base}/{rel}")
        except OSError:
            out.append(None)
        else:
            out.append(stamp_of(st))
    return tuple(out)


def read_ref(gitdir: Path, refname: str) -> str | None:
    """The commit id ``refname`` names (loose file first, then packed-refs), or None."""
    try:
        value = _read(gitdir, refname).strip()
        if len(value) == 40:
            return value.decode("ascii")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        pass
    try:
        packed = (gitdir / "packed-refs").read_text("utf-8")
    except FileNotFoundError:
        return None
    for line in packed.splitlines():
        if line.endswith(" " + refname) and not line.startswith(("#", "^")):
            return line.split(" ", 1)[0]
    return None


def _read(gitdir: Path, rel: str) -> bytes:
    """A small file of the git directory (read on every write: no ``pathlib``, no text layer)."""
    with open(f"{os.fspath(gitdir)}/{rel}", "rb") as fh:
        return fh.read()


def update_branch(
    gitdir: Path,
    refname: str,
    old: str | None,
    new: str,
    *,
    ident: str,
    message: str,
    wait: float = gitlock.WAIT_SECONDS,
) -> None:
    """Move ``refname`` from ``old`` to ``new`` or raise :class:`HeadMoved`; log it."""
    held = lock_branch(gitdir, refname, old, new, wait=wait, sync=True)
    commit_branch(gitdir, held, refname, old, new, ident=ident, message=message)


def lock_branch(
    gitdir: Path,
    refname: str,
    old: str | None,
    new: str,
    *,
    wait: float = gitlock.WAIT_SECONDS,
    sync: bool = True,
) -> gitlock.HeldLock:
    """Take ``refname``'s lock holding ``new`` if it still names ``old``, else HeadMoved.

    With ``sync`` False the lock's content is not yet durable: the caller syncs
    ``held.token`` before :func:`commit_branch` (together with its own files).
    """
    content = (new + "\n").encode("ascii")
    held = gitlock.acquire(gitdir, f"{os.fspath(gitdir)}/{refname}", content, wait=wait, sync=sync)
    try:
        current = read_ref(gitdir, refname)
        if current != old:
            raise HeadMoved(current)
    except BaseException:
        held.release()
        raise
    return held


def commit_branch(
    gitdir: Path,
    held: gitlock.HeldLock,
    refname: str,
    old: str | None,
    new: str,
    *,
    ident: str,
    message: str,
    sync: bool = True,
) -> None:
    """Log the move and put the lock taken by :func:`lock_branch` in place (synced unless
    ``sync`` is False: the caller then syncs ``held.target``'s folder)."""
    try:
        _append_reflog(gitdir, refname, old, new, ident, message)
        held.commit(sync=sync)
    except BaseException:
        held.release()
        raise


def _append_reflog(  # best effort, not synced: the reflog is a convenience, not a record
    gitdir: Path, refname: str, old: str | None, new: str, ident: str, message: str
) -> None:
    offset = -time.timezone if time.localtime().tm_isdst <= 0 else -time.altzone
    sign = "+" if offset >= 0 else "-"
    tz = f"{sign}{abs(offset) // 3600:02d}{abs(offset) % 3600 // 60:02d}"
    subject = message.split("\n", 1)[0]
    line = f"{old or ZERO} {new} {ident} {int(time.time())} {tz}\tcommit: {subject}\n"
    data = line.encode("utf-8")
    logs = f"{os.fspath(gitdir)}/logs"
    for name in (refname, "HEAD"):
        log = f"{logs}/{name}"
        with contextlib.suppress(OSError):
            fd = in_folder(os.path.dirname(log), partial(os.open, log, _APPEND, 0o644))
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
