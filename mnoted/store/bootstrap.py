"""Checks made before a folder is served: a sound repository, one daemon, the user's identity;
and the template's files put in a folder that becomes a workspace (:func:`adopt`)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pygit2

from mnoted.errors import LockBusy, WorkspaceInvalid
from mnoted.store import refs
from mnoted.store.atomic import make_dirs, write_atomic
from mnoted.store.config import (
    CONFIG_PATH,
    WorkspaceConfig,
    config_text,
    lacks_id,
    new_workspace_id,
    render,
)
from mnoted.store.model import Identity
from mnoted.store.paths import resolve
from mnoted.store.template import merged_gitignore, template_files

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
    **dict.fromkeys(
        (
            pygit2.enums.RepositoryState.REBASE,
            pygit2.enums.RepositoryState.REBASE_INTERACTIVE,
            pygit2.enums.RepositoryState.REBASE_MERGE,
        ),
        ("a rebase", "run `git rebase --continue` or `git rebase --abort`"),
    ),
    pygit2.enums.RepositoryState.APPLY_MAILBOX: (
        "a patch application",
        "run `git am --continue` or `git am --abort`",
    ),
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
        raise _unreadable(root, exc) from exc
    if repo.is_bare or repo.workdir is None or Path(repo.workdir).resolve() != root:
        raise WorkspaceInvalid(f"{root} is not the work tree of its Git repository")
    refs.current_branch(gitdir)
    lender = promisor_remote(repo)
    if lender is not None:
        raise WorkspaceInvalid(
            f"{root} is a partial clone: its remote {lender!r} lends objects on demand, and "
            "the libgit2 mnoted commits with cannot fetch them (the history's blobs are missing)",
            hint="Clone the repository again without `--filter`, and use that clone as the "
            "workspace.",
        )
    problem = unfinished_operation(repo)
    if problem is not None:
        raise WorkspaceInvalid(
            f"{root} is in the middle of {problem[0]}", hint=f"First {problem[1]}."
        )
    return repo


def _unreadable(root: Path, exc: pygit2.GitError) -> WorkspaceInvalid:
    message = f"{root} is not a readable Git repository: {exc}"
    if "object format" in str(exc):
        return WorkspaceInvalid(
            message,
            hint="mnoted keeps SHA-1 repositories (its libgit2 reads no other object format): "
            "copy the history into one (`git init --object-format=sha1 NEW`, "
            "`git fast-export --all | git -C NEW fast-import`, `git -C NEW checkout BRANCH`) "
            "and use NEW as the workspace.",
        )
    if "extension" in str(exc):
        return WorkspaceInvalid(
            message,
            hint="The repository uses a Git feature that libgit2 cannot read; use a plain "
            "clone of it as the workspace.",
        )
    return WorkspaceInvalid(message)


def promisor_remote(repo: pygit2.Repository) -> str | None:
    """The remote a partial clone (`git clone --filter`) fetches its missing objects from."""
    for entry in repo.config:
        name = entry.name.lower()
        if name == "extensions.partialclone" and entry.value:
            return str(entry.value)
        promisor = name.startswith("remote.") and name.endswith(".promisor")
        if promisor and str(entry.value).lower() in ("true", "yes", "on", "1"):
            return entry.name[len("remote.") : -len(".promisor")]
    return None


def identity_from_config(repo: pygit2.Repository) -> Identity:
    """The user's Git identity (for external edits), or a neutral one."""
    return user_identity(repo) or Identity(EXTERNAL_ACTOR, f"{EXTERNAL_ACTOR}@mnote.local")


def user_identity(repo: pygit2.Repository) -> Identity | None:
    """``user.name`` and ``user.email`` from the Git config the repository reads (its own,
    the user's, the system's), or None if either is unset."""
    try:
        name = repo.config["user.name"]
        email = repo.config["user.email"]
    except (KeyError, pygit2.GitError):
        return None
    return Identity(str(name), str(email))


def adopt(path: str | os.PathLike[str]) -> tuple[Path, bool, list[str]]:
    """Make ``path`` a folder with a repository and the template's files it lacks
    (``Workspace.init``): the folder, whether its repository had no commit, and the
    template paths written. A new config gets a workspace id; ``.gitignore`` gets
    mnoted's lines appended; the welcome page only goes to a new folder without notes."""
    root = Path(path).expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkspaceInvalid(f"cannot create the folder {root}: {exc.strerror}") from exc
    root = root.resolve()
    if not (root / ".git").exists():
        pygit2.init_repository(str(root), initial_head="main")
    repo = check_repository(root)
    unborn = repo.head_is_unborn
    has_notes = any(p.suffix.lower() == ".md" for p in root.iterdir() if p.is_file())
    del repo
    written: list[str] = []
    for rel, data in template_files().items():
        target = root / rel
        if rel == CONFIG_PATH:
            # the workspace's own config, or the template's; either gets an id if it
            # has none (a config copied from the template, or written by hand)
            text = config_text(root) if target.exists() else data.decode("utf-8")
            if not lacks_id(text):
                WorkspaceConfig.parse(text, str(target))  # (what else is wrong in it)
                continue
            text = render(text, new_workspace_id())
            WorkspaceConfig.parse(text, str(target))  # (the id went where TOML reads it)
            data = text.encode("utf-8")
        elif rel == ".gitignore" and target.exists():
            data = merged_gitignore(target.read_bytes(), data)
            if data == target.read_bytes():
                continue
        elif target.exists() or (rel.lower().endswith(".md") and (has_notes or not unborn)):
            continue
        if not rel.startswith(".mnote/"):
            resolve(root, rel)  # refuses a planted symlink at a template path
        make_dirs(root, target.parent)
        write_atomic(target, data)
        written.append(rel)
    return root, unborn, written
