"""The user's own ``git`` for everything that crosses the network.

Fetch and push run ``git`` in the workspace, in the daemon's environment: the user's SSH
config and agent, credential helpers and ``insteadOf`` rules work as in their terminal.
Nothing may prompt on a terminal: ``GIT_TERMINAL_PROMPT=0``, and ``git`` runs in a session
of its own, without a controlling terminal, so ssh cannot ask there either (an ``SSH_ASKPASS``
program the user set up still can). The user's ``core.sshCommand`` and
``GIT_SSH_COMMAND`` are left as they are. What ``git`` prints is kept only after
:func:`redact` took any password or token out of URLs.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mnoted.errors import InvalidArguments

GIT_TIMEOUT = 120.0
_URL_SECRET = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<auth>[^/@\s]+)@")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def redact(text: str) -> str:
    """``text`` with the user-info of every URL (``https://user:token@host``) hidden."""
    return _URL_SECRET.sub(lambda m: f"{m.group('scheme')}***@", text)


def check_name(name: str) -> str:
    """A remote's name as ``git remote`` takes it (no option, no path tricks)."""
    if not _NAME.match(name) or name.endswith(".lock") or ".." in name:
        raise InvalidArguments(
            f"{name!r} is not a usable remote name",
            hint="Use letters, digits, '.', '_' or '-' (for example: origin).",
        )
    return name


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0


def environment() -> dict[str, str]:
    """The daemon's environment for ``git``, made unable to prompt."""
    env = dict(os.environ)
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(key, None)
    return env


def run(root: Path, *args: str, timeout: float = GIT_TIMEOUT) -> Ran:
    """``git -C root args``; a timeout or a missing ``git`` reads as a failed run."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args],
            env=environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # (no controlling terminal: nothing can prompt on it)
        )
    except subprocess.TimeoutExpired:
        return Ran(124, "", f"git {args[0]} took longer than {timeout:.0f} s")
    except OSError as exc:
        return Ran(127, "", f"git could not be run: {exc}")
    return Ran(done.returncode, done.stdout, redact(done.stderr))


def remotes(root: Path) -> dict[str, str]:
    """Configured remotes and their fetch URLs (redacted), in ``git remote`` order."""
    ran = run(root, "remote", "-v")
    out: dict[str, str] = {}
    for line in ran.out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "(fetch)":
            out.setdefault(parts[0], redact(parts[1]))
    return out


def fetch(root: Path, remote: str, branch: str) -> tuple[str | None, Ran]:
    """Fetch ``branch`` of ``remote`` into ``refs/remotes/<remote>/<branch>``.

    Returns the fetched commit (None when the remote has no such branch yet) and the run.
    The tracking ref is forced: whether the remote was rewritten is judged by the caller
    against what it last saw, not by refusing to look.
    """
    ref = f"refs/remotes/{remote}/{branch}"
    notes = f"+refs/notes/mnote-*:refs/mnote/remote-notes/{remote}/mnote-*"
    ran = run(
        root, "fetch", "--no-tags", "--no-write-fetch-head", remote, f"+{branch}:{ref}", notes
    )
    if not ran.ok:
        if "couldn't find remote ref" in ran.err:
            return None, Ran(0, ran.out, ran.err)
        return None, ran
    head = run(root, "rev-parse", "--verify", "--quiet", ref + "^{commit}")
    return (head.out.strip() or None), ran


def push(root: Path, remote: str, commit: str, branch: str, notes: str | None = None) -> Ran:
    """Push ``commit`` to ``remote``'s ``branch``, never forced; with ``notes`` (a commit of
    the block-id notes) both or neither."""
    specs = [f"{commit}:refs/heads/{branch}"]
    if notes is not None:
        specs.append(f"{notes}:refs/notes/mnote-blockids")
    return run(root, "push", "--porcelain", "--atomic", remote, *specs)


def rejected(ran: Ran) -> bool:
    """Whether a push failed because the remote moved on (fetch, merge, push again)."""
    text = ran.out + ran.err
    return any(
        word in text
        for word in (
            "[rejected]",
            "non-fast-forward",
            "fetch first",
            "stale info",
            "cannot lock ref",
            "failed to update ref",
        )
    )
