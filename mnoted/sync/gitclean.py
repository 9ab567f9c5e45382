"""Git's clean filters (LFS, git-crypt), run by the ``git`` command for the store.

The store commits a file a ``.gitattributes`` filter covers as what the filter makes of
it (``mnoted.store.filters``), and runs no process itself: this is the function the
daemon gives it. ``git hash-object -w --stdin --path`` runs the driver exactly as
``git add`` would (a ``process`` driver through its protocol, with ``%f`` set), on the
bytes the store read, and writes the result to the object database; the ``GIT_*``
variables of the environment are left out, so it works on this workspace's repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from mnoted.errors import StorageError

TIMEOUT_SECONDS = 120.0


def git_clean(root: Path) -> Callable[[str, bytes], str]:
    """``(path, bytes) -> blob id`` for the workspace at ``root``: the store's ``Clean``."""

    def clean(rel: str, data: bytes) -> str:
        git = shutil.which("git")
        if git is None:
            raise StorageError(
                f"{rel} goes through a Git filter, and the git command is not on PATH",
                hint="Install git (and the filter's tool) where the daemon can run it.",
                path=rel,
            )
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        try:
            done = subprocess.run(
                [git, "-C", str(root), "hash-object", "-w", "--stdin", f"--path={rel}"],
                input=data,
                env=env,
                capture_output=True,
                timeout=TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise StorageError(f"Git's filter for {rel} could not run: {exc}", path=rel) from exc
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise StorageError(
                f"Git's filter for {rel} failed: {said[-1] if said else done.returncode}",
                hint="Check the filter's tool (`git add` of the file fails the same way).",
                path=rel,
            )
        return done.stdout.decode().strip()

    return clean
