"""Fixtures for store tests: a clean Git environment and helpers that ask the real `git`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnoted.store import Workspace


@pytest.fixture(autouse=True)
def git_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Strip GIT_* variables; point HOME and XDG dirs at a temporary folder; fix identities."""
    home = tmp_path_factory.mktemp("home")
    for name in list(os.environ):
        if name.startswith("GIT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(home))
    for xdg in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(xdg, str(home / xdg.lower()))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test User")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "user@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test User")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "user@example.com")
    # libgit2 caches the search path of global config; point it at the new HOME too
    import pygit2

    for level in (pygit2.enums.ConfigLevel.GLOBAL, pygit2.enums.ConfigLevel.XDG):
        pygit2.settings.search_path[level] = str(home)


def git(
    repo: Path,
    *args: str,
    check: bool = True,
    input_text: str | None = None,
    input_bytes: bytes | None = None,
) -> str:
    """Run the real git in ``repo`` and return its stdout."""
    out = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        check=False,
        input=input_text.encode() if input_text is not None else input_bytes,
    )
    stdout, stderr = out.stdout.decode(errors="replace"), out.stderr.decode(errors="replace")
    if check and out.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {stderr}")
    return stdout


def assert_clean(repo: Path) -> None:
    """The work tree, the index and HEAD agree, and the repository is sound."""
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    git(repo, "fsck", "--strict", "--no-dangling")


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Workspace]:
    """A fresh workspace made from the template."""
    workspace = Workspace.init(tmp_path / "notes")
    try:
        yield workspace
    finally:
        workspace.close()
