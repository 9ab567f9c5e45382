"""Where a workspace keeps what it never commits: ``.git/mnote/state/``.

The sidecar database, the review sessions, the agents' tokens and the command journal live
in the Git directory, beside the daemon's lock, because nothing that
cleans a work tree reaches there: ``git clean -fdx`` and ``git stash --all`` remove ignored
files, and removed ``.mnote/state/`` (where mnoted kept them before) with every grant and
every unanswered review session in it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from mnoted.store.atomic import fsync_dir

PRIVATE_DIR = ".git/mnote"
"""mnoted's own folder in the Git directory: the daemon's lock, the state folder, Git lock
tokens and the private index."""
STATE_DIR = f"{PRIVATE_DIR}/state"
LEGACY_STATE_DIR = ".mnote/state"
"""Where mnoted kept its state before: moved to :data:`STATE_DIR` when found."""
log = logging.getLogger("mnoted.store")


def state_dir(root: Path) -> Path:
    """The workspace's state folder, made if missing; a state folder an earlier mnoted left
    in the work tree is moved here first, whole, in one rename (the sidecar database and its
    write-ahead log cannot end up apart, whoever moves it: the daemon or ``mnote grant``)."""
    path = root / STATE_DIR
    legacy = root / LEGACY_STATE_DIR
    path.parent.mkdir(exist_ok=True)
    if os.path.lexists(legacy) and not os.path.lexists(path):
        try:
            os.rename(legacy, path)
        except FileNotFoundError:  # moved by another process in between
            pass
        else:
            (path / ".gitignore").unlink(missing_ok=True)  # its "*": Git ignores .git anyway
            fsync_dir(path.parent)
            fsync_dir(legacy.parent)
            log.info("moved the state folder from %s to %s", legacy, path)
    path.mkdir(exist_ok=True)
    return path
