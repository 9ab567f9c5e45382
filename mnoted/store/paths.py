"""Path safety: every workspace path is checked by its components, never by string prefix.

A string-prefix containment check let ``/allowed_evil`` through in a well-known MCP server
(CVE-2025-53110) and a symlink inside the allowed folder escaped it (CVE-2025-53109). Here a
path is first normalised as text (no ``..``, no absolute path, no ``.git``/``.mnote``
internals), then walked on disk one component at a time with ``lstat`` so that no symbolic
link is ever followed. Git itself refuses to track paths beyond a symlink, so refusing every
symlink keeps the work tree and the tree objects describing the same files.
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path

from mnoted.errors import PathRejected

TEMP_PREFIX = ".mnote-tmp-"
"""Names of the store's temporary files start with this; watchers and Git ignore them."""

_RESERVED_TOP = (".mnote",)
COMMITTED_INTERNAL = (".mnote/config.toml",)
"""Files under ``.mnote/`` that are part of the notes' history (edited by people, not tools)."""
_RESERVED_ANYWHERE = (".git",)


def normalize(path: str, *, config_ok: bool = False) -> str:
    """The canonical relative POSIX form of ``path``, or :class:`PathRejected`.

    ``.`` and empty components are dropped; ``..``, absolute paths, backslashes, NUL, names
    that are not UTF-8, ``.git`` anywhere, ``.mnote`` at the top and the store's temporary
    names are refused.
    With ``config_ok`` the committed files in :data:`COMMITTED_INTERNAL` are allowed.
    """
    if not isinstance(path, str) or not path:
        raise PathRejected("empty path", path=str(path))
    return _normalized(path, config_ok)


@functools.lru_cache(maxsize=4096)
def _normalized(path: str, config_ok: bool) -> str:
    """:func:`normalize`, kept: a command normalises its paths a dozen times."""
    if "\x00" in path or "\\" in path:
        raise PathRejected(f"path {path!r} contains a NUL byte or a backslash", path=path)
    shown = not_utf8(path)
    if shown is not None:
        raise PathRejected(f"path {shown!r} is not valid UTF-8", path=shown)
    if path.startswith("/"):
        raise PathRejected(f"path {path!r} is absolute", path=path)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts:
        raise PathRejected(f"path {path!r} names the workspace root", path=path)
    if config_ok and "/".join(parts) in COMMITTED_INTERNAL:
        return "/".join(parts)
    for i, part in enumerate(parts):
        low = part.lower()
        if part == "..":
            raise PathRejected(f"path {path!r} climbs out with '..'", path=path)
        if low in _RESERVED_ANYWHERE or (i == 0 and low in _RESERVED_TOP):
            raise PathRejected(f"path {path!r} is inside {part}/ (internal)", path=path)
        if part.startswith(TEMP_PREFIX):
            raise PathRejected(f"path {path!r} is a mnoted temporary file name", path=path)
    return "/".join(parts)


_BIDI_AND_INVISIBLE = frozenset(
    "\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufeff"
)
_ENCODED = ("%2e", "%2f", "%5c")
NAME_MAX = 255


def check_new_name(path: str) -> str:
    """:func:`normalize`, and stricter for names an agent gives to a new or moved page.

    Files people already have are committed whatever their names; a name a tool is asked
    to create must also be one a person can read and type: no control or bidirectional
    formatting characters, no ``~`` or drive-letter component, no percent-encoded dots or
    slashes, no component over 255 bytes.
    """
    rel = normalize(path)
    for i, part in enumerate(rel.split("/")):
        if any(ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 or ch in _BIDI_AND_INVISIBLE for ch in part):
            raise PathRejected(f"path {path!r} has control or bidi characters", path=path)
        if part.startswith("~") or (i == 0 and len(part) == 2 and part[1] == ":"):
            raise PathRejected(f"path {path!r} looks like a home folder or a drive", path=path)
        if any(code in part.lower() for code in _ENCODED):
            raise PathRejected(f"path {path!r} has percent-encoded dots or slashes", path=path)
        if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX:
            raise PathRejected(f"a component of {path!r} is over {NAME_MAX} bytes", path=path)
    return rel


def resolve(root: Path, path: str, *, config_ok: bool = False) -> Path:
    """The on-disk location of workspace path ``path`` under ``root`` (an absolute real path).

    Walks the existing prefix component by component with ``lstat``: a symlink anywhere,
    or a non-directory where a directory is needed, is refused. Missing trailing components
    are fine (the caller may create them). The final component, if it exists, must be a
    regular file with a single link (a hard link could alias a file outside).
    """
    rel = normalize(path, config_ok=config_ok)
    parts = rel.split("/")
    current = str(root)  # (strings: a Path per step cost more than the lstat)
    for i, part in enumerate(parts):
        current = f"{current}/{part}"
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return root.joinpath(*parts)
        except OSError as exc:
            raise PathRejected(
                f"path {rel!r} cannot be inspected: {exc.strerror}", path=rel
            ) from exc
        last = i == len(parts) - 1
        if stat.S_ISLNK(st.st_mode):
            raise PathRejected(f"path {rel!r} passes through a symbolic link", path=rel)
        if not last and not stat.S_ISDIR(st.st_mode):
            raise PathRejected(
                f"path {rel!r}: {'/'.join(parts[: i + 1])} is not a folder", path=rel
            )
        if last:
            if stat.S_ISDIR(st.st_mode):
                raise PathRejected(f"path {rel!r} is a folder, not a file", path=rel)
            if not stat.S_ISREG(st.st_mode):
                raise PathRejected(f"path {rel!r} is not a regular file", path=rel)
            if st.st_nlink > 1:
                raise hard_linked(rel, st.st_nlink)
    return Path(current)


def hard_linked(rel: str, links: int) -> PathRejected:
    """The refusal of a file with several hard links: its other names may be outside the
    workspace, and its bytes with them (a secret linked in, or a backup's copy)."""
    return PathRejected(
        f"{rel} has {links} hard links: it may be a file outside the workspace too, which "
        "mnoted neither serves, writes nor commits",
        hint=f"A `cp -al` backup links every file it copies. Give the file a name of its own: "
        f"cp '{rel}' '{rel}.new' && mv '{rel}.new' '{rel}'",
        path=rel,
    )


def resolve_folder(root: Path, path: str) -> Path | None:
    """The on-disk folder at workspace path ``path``, None if there is no folder there.

    Like :func:`resolve`, no component may be a symbolic link.
    """
    rel = normalize(path)
    current = str(root)
    for part in rel.split("/"):
        current = f"{current}/{part}"
        try:
            st = os.lstat(current)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISLNK(st.st_mode):
            raise PathRejected(f"path {rel!r} passes through a symbolic link", path=rel)
        if not stat.S_ISDIR(st.st_mode):
            return None
    return Path(current)


def not_utf8(path: str) -> str | None:
    """``path`` shown with its bad bytes escaped (``caf\\xe9.md``) if its name is not valid
    UTF-8, else None. Such a name (a file from an old archive, in Latin-1) reaches Python
    as lone surrogates, which no Git path, page or tool call can hold."""
    if path.isascii():
        return None
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return None


def is_internal(path: str) -> bool:
    """Whether a (watcher-reported) relative path is one mnoted never commits."""
    try:
        normalize(path, config_ok=True)
    except PathRejected:
        return True
    return False
