"""Workspaces for the daemon benches: bench/commit.py's tree, packed before anything is timed;
and what those benches share around the daemon (its environment, its memory).

The tree is committed straight into a pack (`git fast-import`), as a notes repository that
has lived a while holds it, and with no loose object made and removed on the way. Both
matter to what is timed after:

- `git commit` of thousands of new files starts `git gc --auto` detached, which then
  repacks the whole repository in the background while the bench starts the daemon and
  times it (and races `Workspace.init`).
- Removing 100,000 loose objects (`git add` then `git repack -d`) made every write timed in
  the next minute 0.7 ms slower on this machine. Its ext4 has no journal, and there a new
  file's inode is found by skipping, one at a time, the free inodes of its folder's group
  that were freed in the last 60 seconds (the kernel's ``recently_deleted``). The pack a
  write makes was created in 0.4 ms instead of 0.05.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from commit import GIT_ENV, rel_path, write_note

NO_AUTO_GC = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "gc.auto", "GIT_CONFIG_VALUE_0": "0"}


def build_packed_repo(root: Path, size: int, env: dict[str, str]) -> None:
    """bench/commit.py's tree of ``size`` notes, one commit, every object in one pack; the Git
    index in step with the files."""
    quiet = {**env, **NO_AUTO_GC}
    stream = [
        b"commit refs/heads/main\n",
        f"committer {quiet['GIT_COMMITTER_NAME']} <{quiet['GIT_COMMITTER_EMAIL']}> "
        f"{int(time.time())} +0000\ndata 13\ninitial notes\n".encode(),
    ]
    for i in range(size):
        data = write_note(root, i)
        stream.append(f"M 100644 inline {rel_path(i)}\ndata {len(data)}\n".encode() + data)
    git = ["git", "-C", str(root)]
    subprocess.run([*git, "init", "-q", "-b", "main"], env=quiet, check=True)
    subprocess.run([*git, "fast-import", "--quiet"], input=b"".join(stream), env=quiet, check=True)
    subprocess.run([*git, "reset", "-q"], env=quiet, check=True)  # the index, from HEAD
    subprocess.run([*git, "update-index", "-q", "--refresh"], env=quiet, check=True)


CHECKOUT = Path(__file__).resolve().parent.parent
"""The source tree this bench belongs to: the package its daemons run."""


def daemon_env(base: Path) -> dict[str, str]:
    """The environment a bench's daemon and Git commands run in: a home, config and runtime
    folder of its own below ``base``, a fixed Git identity, warnings only in the log, and
    this checkout's package (``bench/turns.py`` names another one)."""
    return {
        **os.environ,
        **GIT_ENV,
        "PYTHONPATH": str(CHECKOUT),
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
