"""Workspaces for the daemon benches: bench/commit.py's tree, packed before anything is timed;
and what those benches share around the daemon (its environment, its memory).

`git commit` of thousands of new files starts `git gc --auto` detached, which then repacks
the whole repository in the background while the bench starts the daemon and times it (and
races `Workspace.init`). Here the tree is committed with automatic gc off and packed in the
foreground, as a notes repository that has lived a while would be.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from commit import GIT_ENV, build_repo

NO_AUTO_GC = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "gc.auto", "GIT_CONFIG_VALUE_0": "0"}


def build_packed_repo(root: Path, size: int, env: dict[str, str]) -> None:
    """`size` small notes in folders of 100, one commit, every object in one pack."""
    quiet = {**env, **NO_AUTO_GC}
    build_repo(root, size, quiet)
    subprocess.run(["git", "-C", str(root), "repack", "-a", "-d", "-q"], env=quiet, check=True)


def daemon_env(base: Path) -> dict[str, str]:
    """The environment a bench's daemon and Git commands run in: a home, config and runtime
    folder of its own below ``base``, a fixed Git identity, warnings only in the log."""
    return {
        **os.environ,
        **GIT_ENV,
        "HOME": str(base),
        "XDG_CONFIG_HOME": str(base / "cfg"),
        "XDG_RUNTIME_DIR": str(base / "run"),
        "MNOTED_LOG": "warning",
    }


def status_mb(pid: int, *keys: str) -> tuple[float, ...]:
    """Fields of ``/proc/<pid>/status`` given in kB (``VmRSS``, ``VmHWM``, ``RssAnon``...),
    in MB, in the order asked."""
    fields = {}
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = row.partition(":")
        if key in keys:
            fields[key] = int(value.split()[0]) / 1024
    return tuple(fields[key] for key in keys)
