"""Checks made before a folder is served: a sound repository, one daemon, the user's identity."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pygit2

from mnoted.errors import LockBusy, WorkspaceInvalid
from mnoted.store import refs
from mnoted.store.model import Identity

EXTERNAL_ACTOR = "external"

STATE_HINTS = {
    pygit2.enums.RepositoryState.MERGE: (
        "a merge",
        "finish it with `git commit` or abort it with `git merge --abort`",
    ),
    pygit2.enums.RepositoryState.REVERT: ("a revert", "run `git revert --continue` or `--abort`"),
    pygit2.enums.RepositoryState.CHERRYPICK: (
        "a cherry-pick",
        "run `git cherry-pick --continue` or `--abort`",
    ),
    pygit2.enums.RepositoryState.BISECT: ("a bisect", "run `git bisect reset`"),
}


def unfinished_operation(repo: pygit2.Repository) -> tuple[str, str] | None:
    """``(what, how to end it)`` if the repository is mid-merge, -rebase, ...; else None."""
    state = repo.state()
    if state == pygit2.enums.RepositoryState.NONE:
        return None
    return STATE_HINTS.get(
        state, ("a rebase or patch application", "finish it or abort it with git")
    )


def take_process_lock(path: Path) -> int:
    """Hold ``flock`` on ``path`` for the life of the returned fd (freed if the process dies)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LockBusy(
            f"another mnoted process serves this workspace ({path} is locked)",
            hint="Stop the other daemon, or talk to it instead of opening the folder again.",
            path=str(path),
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def check_repository(root: Path) -> pygit2.Repository:
    """The repository whose work tree is ``root``, refusing states mnoted must not commit in."""
    gitdir = root / ".git"
    if not gitdir.exists():
        raise WorkspaceInvalid(f"{root} is not a Git repository", hint=f"Run `mnote init {root}`.")
    if not gitdir.is_dir() or gitdir.is_symlink():
        raise WorkspaceInvalid(
            f"{root}/.git is not a folder (linked worktrees and submodules are not supported)",
            hint="Use a regular clone of the repository as the workspace.",
        )
    try:
        repo = pygit2.Repository(str(root))
    except pygit2.GitError as exc:
        raise WorkspaceInvalid(f"{root} is not a readable Git repository: {exc}") from exc
    if repo.is_bare or repo.workdir is None or Path(repo.workdir).resolve() != root:
        raise WorkspaceInvalid(f"{root} is not the work tree of its Git repository")
    refs.current_branch(gitdir)
    problem = unfinished_operation(repo)
    if problem is not None:
        raise WorkspaceInvalid(
            f"{root} is in the middle of {problem[0]}", hint=f"First {problem[1]}."
        )
    return repo


def identity_from_config(repo: pygit2.Repository) -> Identity:
    """The user's Git identity (for external edits), or a neutral one."""
    try:
        name = repo.config["user.name"]
        email = repo.config["user.email"]
    except (KeyError, pygit2.GitError):
        return Identity(EXTERNAL_ACTOR, f"{EXTERNAL_ACTOR}@mnote.local")
    return Identity(str(name), str(email))
