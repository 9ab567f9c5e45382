"""What the sync layer never commits and never lets wake the debouncer.

One predicate, :class:`IgnoreRules`, answers "is this workspace path ignored?"
for the watcher and the debouncer alike, so a temp file can never be committed
by one part and tracked by another. It is pure: the only outside knowledge,
Git's ignore rules, arrives as injected callables (in the daemon wrappers of
``pygit2.Repository.path_is_ignored`` and of a lookup in HEAD's tree), and the
patterns' answers are cached because every filesystem event asks.

Paths are workspace-relative POSIX strings (``notes/plan.md``), never absolute.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from enum import StrEnum

__all__ = [
    "INTERNAL_DIRS",
    "MNOTE_TEMP_PREFIX",
    "IgnoreReason",
    "IgnoreRules",
    "is_internal",
    "is_temp",
    "is_utf8",
    "temp_pattern",
]

INTERNAL_DIRS: frozenset[str] = frozenset({".git", ".mnote"})
"""Folders owned by Git or by mnoted: anything below them is the daemon's own state."""

MNOTE_TEMP_PREFIX = ".mnote-tmp-"
"""Prefix of the temp files mnoted's atomic writes create next to their target."""

# Editor and tool temp / swap / backup names, matched against the file's base name.
# Each entry names who produces it, so docs/sync.md and the tests can list them.
_TEMP_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("mnoted atomic write", re.compile(re.escape(MNOTE_TEMP_PREFIX) + r".*\Z", re.S)),
    ("backup (vim, emacs, many tools)", re.compile(r".*~\Z", re.S)),
    ("vim/nano swap", re.compile(r".*\.(sw[a-p]|swpx)\Z", re.S)),
    ("emacs auto-save", re.compile(r"#.*#\Z", re.S)),
    ("emacs lock link", re.compile(r"\.#.*\Z", re.S)),
    ("jetbrains safe write", re.compile(r".*___jb_(tmp|old|bak)___\Z", re.S)),
    ("gedit / gio safe write", re.compile(r"\.goutputstream-.*\Z", re.S)),
    ("sed -i", re.compile(r"sed[A-Za-z0-9]{6}\Z")),
    ("kate swap", re.compile(r".*\.kate-swp\Z", re.S)),
    ("libreoffice lock", re.compile(r"\.~lock\..*#\Z", re.S)),
)

# vim probes whether it may create files in a folder with a file named 4913,
# then 5036, 5159, ... (4913 + k * 123) while the name is taken.
_VIM_PROBE_FIRST = 4913
_VIM_PROBE_STEP = 123


class IgnoreReason(StrEnum):
    """Why a path is ignored; logged and shown in docs."""

    INTERNAL = "internal"
    TEMP = "temp"
    GITIGNORED = "gitignored"
    NOT_UTF8 = "not_utf8"


def is_internal(rel_path: str) -> bool:
    """Whether a path lies in ``.git/`` or ``.mnote/`` (at any depth: nested repositories too)."""
    return any(part in INTERNAL_DIRS for part in rel_path.split("/"))


def is_utf8(rel_path: str) -> bool:
    """Whether a path's name is valid UTF-8. A name that is not (a file unpacked from an old
    archive, say) reaches Python with its bad bytes as lone surrogates, which no Git path,
    page or tool call can hold: mnoted leaves such a file alone."""
    if rel_path.isascii():
        return True
    try:
        rel_path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_temp(rel_path: str) -> bool:
    """Whether a file's path names an editor's temp, swap or backup file (a folder's path,
    ending with ``/``, never does): what the store's scan leaves alone for the daemon, as
    the watcher does (``Workspace.left_alone``)."""
    return not rel_path.endswith("/") and temp_pattern(rel_path.rsplit("/", 1)[-1]) is not None


def temp_pattern(name: str) -> str | None:
    """Which editor's temp/swap/backup pattern a base name matches, or None."""
    if name.isdigit() and name.isascii():
        number = int(name)
        if number >= _VIM_PROBE_FIRST and (number - _VIM_PROBE_FIRST) % _VIM_PROBE_STEP == 0:
            return "vim write probe"
    for who, pattern in _TEMP_PATTERNS:
        if pattern.match(name):
            return who
    return None


GitIgnoredFn = Callable[[str], bool]
"""``(rel_path) -> bool``; for folders the path ends with ``/``."""

TrackedFn = Callable[[str], bool]
"""``(rel_path) -> bool``: whether HEAD has a file (a folder, for a path ending with ``/``)
there."""


class IgnoreRules:
    """The one ignore predicate: ``rules(rel_path, is_dir) -> bool``.

    ``is_gitignored`` is called with a workspace-relative path (folders end with
    ``/``); the answer is cached (LRU, ``cache_size`` entries) until
    :meth:`invalidate`, which the watcher calls whenever a ``.gitignore`` changes.
    The callable runs on the watcher's event thread; if it wraps a pygit2
    ``Repository``, give it one of its own (repositories are not thread safe).
    A callable that raises is treated as "not ignored": committing a file too
    many is recoverable, silently dropping one is not.

    As in Git, a path the patterns match is still synced while it is tracked
    (``is_tracked``): a note committed before a ``.gitignore`` line covered it, or
    Obsidian's ``workspace.json`` in a vault that committed it. Dropping its events
    left it modified in ``git status`` until the next full pass. That answer is not
    cached: a commit can make a path tracked at any time.
    """

    def __init__(
        self,
        is_gitignored: GitIgnoredFn | None = None,
        is_tracked: TrackedFn | None = None,
        *,
        cache_size: int = 65536,
    ) -> None:
        self._is_gitignored = is_gitignored
        self._is_tracked = is_tracked
        self._cache: OrderedDict[str, bool] = OrderedDict()
        self._lock = threading.Lock()  # invalidate() may come from another thread
        self._cache_size = cache_size
        self.gitignore_errors = 0

    def __call__(self, rel_path: str, is_dir: bool = False) -> bool:
        return self.reason(rel_path, is_dir) is not None

    def reason(self, rel_path: str, is_dir: bool = False) -> IgnoreReason | None:
        """Why ``rel_path`` is ignored, or None if it is a path to sync."""
        if not rel_path or rel_path == ".":
            return None
        if is_internal(rel_path):
            return IgnoreReason.INTERNAL
        if not is_utf8(rel_path):
            return IgnoreReason.NOT_UTF8
        name = rel_path.rsplit("/", 1)[-1]
        if not is_dir and temp_pattern(name) is not None:
            return IgnoreReason.TEMP
        if self._is_gitignored is not None and name != ".gitignore":
            key = rel_path + "/" if is_dir else rel_path
            if self._gitignored(key) and not self._tracked(key):
                return IgnoreReason.GITIGNORED
        return None

    def invalidate(self) -> None:
        """Forget cached Git answers (a ``.gitignore`` or ``info/exclude`` changed)."""
        with self._lock:
            self._cache.clear()

    def _tracked(self, key: str) -> bool:
        if self._is_tracked is None:
            return False
        try:
            return bool(self._is_tracked(key))
        except Exception:
            self.gitignore_errors += 1
            return True  # (not ignored, as for the patterns)

    def _gitignored(self, key: str) -> bool:
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        assert self._is_gitignored is not None
        try:
            answer = bool(self._is_gitignored(key))
        except Exception:
            self.gitignore_errors += 1
            return False
        with self._lock:
            self._cache[key] = answer
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return answer
