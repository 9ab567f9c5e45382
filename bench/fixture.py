"""Workspaces for the daemon benches: bench/commit.py's tree, packed before anything is timed.

`git commit` of thousands of new files starts `git gc --auto` detached, which then repacks
the whole repository in the background while the bench starts the daemon and times it (and
races `Workspace.init`). Here the tree is committed with automatic gc off and packed in the
foreground, as a notes repository that has lived a while would be.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from commit import build_repo

NO_AUTO_GC = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "gc.auto", "GIT_CONFIG_VALUE_0": "0"}


def build_packed_repo(root: Path, size: int, env: dict[str, str]) -> None:
    """`size` small notes in folders of 100, one commit, every object in one pack."""
    quiet = {**env, **NO_AUTO_GC}
    build_repo(root, size, quiet)
    subprocess.run(["git", "-C", str(root), "repack", "-a", "-d", "-q"], env=quiet, check=True)
