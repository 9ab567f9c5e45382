"""The whole work tree compared with HEAD by the ``git`` command, in a process of its own.

The start-up pass asks ``git status`` where the ``git`` command is there: at 100,000
files it takes about a third of the time of the store's own walk
(:mod:`mnoted.store.scan`), none of it holding this process's GIL, and the daemon serves
only once it is done. It runs with ``--no-optional-locks`` (it never takes ``index.lock``
from someone's ``git add``), without the user's file-system monitor hook, and with the
``GIT_*`` variables of the environment left out, so it looks at this workspace's
repository and nothing else. Later passes walk: the walk remembers what it hashed, while
``git status`` without its lock would hash again every file whose index entry has no
stat data (those mnoted set).

What it lists only tells the store where to look: each path is read again through
folder fds before anything is committed, so a path it named through a folder swapped
for a symlink is read as the symlink it now is. Where ``git`` is missing, refuses the
repository (another owner, an index it cannot read) or fails, the store walks the tree
itself; the two agree path for path (``tests/store/test_scan.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ARGS = (
    "--no-optional-locks",
    "-c",
    "core.fsmonitor=false",
    "status",
    "--porcelain=v2",
    "-z",
    "--untracked-files=all",
    "--ignore-submodules=dirty",
    "--no-renames",
)
TIMEOUT_SECONDS = 300.0


def changes_by_git(root: Path, git: str | None = None) -> set[str] | None:
    """Paths that differ between the work tree, the index and HEAD; None: ``git`` could not
    tell. As the store's walk: a submodule only where a new commit of it is staged, never
    another repository's files, no rename pairing."""
    git = git or shutil.which("git")
    if git is None:
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        done = subprocess.run(
            [git, "-C", str(root), *ARGS],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return parse(done.stdout)


def parse(out: bytes) -> set[str]:
    """The paths of ``git status --porcelain=v2 -z --no-renames`` output."""
    paths: set[str] = set()
    for record in out.split(b"\0"):
        if not record:
            continue
        kind = record[:1]
        if kind == b"1":  # 1 XY sub mH mI mW hH hI path
            fields = record.split(b" ", 8)
            if fields[2].startswith(b"S") and fields[1][:1] == b".":
                continue  # a submodule whose new commit is not staged: its own business
            paths.add(_text(fields[8]))
        elif kind == b"u":  # u XY sub m1 m2 m3 mW h1 h2 h3 path
            paths.add(_text(record.split(b" ", 10)[10]))
        elif kind == b"?":
            path = record[2:]
            if not path.endswith(b"/"):  # another repository inside the work tree
                paths.add(_text(path))
    return paths


def _text(path: bytes) -> str:
    return path.decode("utf-8", "surrogateescape")
