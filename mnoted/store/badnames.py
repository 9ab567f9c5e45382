"""Files whose names are not UTF-8: left uncommitted (no Git path, page or tool call can
hold them), so the person is told where they are (``mnote status``).

The watcher and the store pass such names over; this walk finds them. It lists names only
(no file is opened or read), from the root's fd, each subfolder opened with
``O_NOFOLLOW`` relative to its parent, so a folder swapped for a symlink is never entered;
``.git`` and ``.mnote`` and folders of other repositories are skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

from mnoted.store import dirfd
from mnoted.store.paths import not_utf8

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SKIPPED = frozenset({".git", ".mnote"})


def names_not_utf8(root: Path, limit: int) -> tuple[int, list[str]]:
    """How many paths under ``root`` have a name that is not UTF-8, and the first ``limit``
    of them shown with their bad bytes escaped (``caf\\xe9.md``)."""
    try:
        top = os.open(root, _DIR_FLAGS)
    except OSError:
        return 0, []
    count = 0
    shown: list[str] = []
    stack: list[tuple[int, str]] = [(top, "")]
    while stack:
        fd, prefix = stack.pop()
        try:
            if prefix and dirfd.holds_repository(fd):
                continue
            with os.scandir(fd) as entries:
                for entry in entries:
                    name = entry.name
                    if not prefix and name in _SKIPPED:
                        continue
                    path = prefix + name
                    bad = not_utf8(path)
                    if bad is not None and not_utf8(name) is not None:
                        count += 1
                        if len(shown) < limit:
                            shown.append(bad)
                        continue  # (nothing under a bad folder name is committed either)
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                    if is_dir:
                        try:
                            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                        except OSError:
                            continue
                        stack.append((child, path + "/"))
        except OSError:
            continue
        finally:
            os.close(fd)
    return count, sorted(shown)
