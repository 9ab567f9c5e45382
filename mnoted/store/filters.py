"""Git's clean filters: the blob Git stores for a file that ``.gitattributes`` filters.

Line endings first: where ``.gitattributes`` (``text``, ``eol``) or ``core.autocrlf`` ask
Git to store LF, ``git add`` of a CRLF file stores it with LF (with ``text=auto``, unless
the index already has it with CRLF). libgit2 has that filter: the store applies it to a
file it commits from the disk, so the blob is the one ``git add`` would make, ``git status``
agrees, and a person's own commit of the file is not answered by a commit of its CRLF.

Then drivers: a path whose ``filter`` attribute names a driver with a ``clean`` or
``process`` command in Git's config (Git LFS, git-crypt) is not stored as its bytes either:
``git add`` stores what the driver makes of them (an LFS pointer, ciphertext). libgit2 runs
no such command; the store never runs ``git`` either, so the process that opens a workspace
gives it a ``Clean`` function that does (the daemon's: ``mnoted.sync.gitclean``), called
whenever a file such a filter covers is committed from the disk. Without it an edited LFS
image went into history whole, a git-crypt note in clear, and ``git status`` showed the file
modified for ever.

mnoted's own writes never go to such a path (the work tree would need the driver's smudge
too): :meth:`Filters.refuse` tells the store and the service which paths to refuse.

And the mode: where ``core.fileMode`` is false (``git init`` sets it on a file system whose
execute bits mean nothing: FAT, exFAT, NTFS, a Windows drive under WSL, where every file
reads as executable), ``git add`` keeps the executable bit HEAD has and sets none on a new
file (:meth:`Filters.stored_mode`). Without it, every note committed from such a disk was
made executable in history.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pygit2

from mnoted.errors import PathRejected, StorageError
from mnoted.store import trees

CONFIG_CHECK_SECONDS = 1.0

Clean = Callable[[str, bytes], str]
"""``(path, bytes) -> blob id``: runs Git's clean filter for ``path`` on ``bytes`` and writes
the result to the repository's object database, as ``git hash-object -w --path`` does."""


class Filters:
    """Which paths go through a clean filter, and the blob Git makes of their bytes.

    The drivers are read from Git's config again when one of its files changed: checked on
    every ``fresh`` question (a write, a commit from the disk, once for all its files: a few
    ``stat`` calls), at most once a second for the others (reads, where a second late
    only serves or hides a page a moment longer). Where no driver is configured (most
    workspaces) nothing more is asked.
    """

    def __init__(self, repo: pygit2.Repository, gitdir: str) -> None:
        self._repo = repo
        self.run: Clean | None = None
        self._files = _config_files(gitdir)
        self._stamp: tuple[object, ...] | None = None
        self._looked = -CONFIG_CHECK_SECONDS
        self._drivers: frozenset[str] = frozenset()
        self._trusts_mode = True  # core.fileMode

    def of(self, rel: str, *, fresh: bool = True) -> str | None:
        """The driver that filters normalised path ``rel``, or None."""
        drivers = self._configured(fresh)
        if not drivers:
            return None
        try:
            name = self._repo.get_attr(rel, "filter")
        except pygit2.GitError:
            return None
        return name if isinstance(name, str) and name in drivers else None

    def refuse(self, rel: str, *, fresh: bool = True) -> None:
        """Raise :class:`PathRejected` if mnoted must not read or write ``rel`` (filtered)."""
        driver = self.of(rel, fresh=fresh)
        if driver is not None:
            raise PathRejected(
                f"{rel} goes through Git's {driver!r} filter (.gitattributes): mnoted does "
                "not read or write it",
                hint="Edit it in your editor: mnoted commits it through the filter, as "
                "`git add` would.",
                path=rel,
                filter=driver,
            )

    def clean(self, rel: str, data: bytes, *, fresh: bool = True) -> bytes:
        """What Git stores for ``data`` at ``rel``: a driver's output, made by :attr:`run`;
        else ``data`` with the line endings Git's attributes and ``core.autocrlf`` ask for
        (libgit2's own filters, in this process); else ``data`` itself. Without ``fresh``,
        the drivers last read serve (a caller cleaning many files reads them once)."""
        driver = self.of(rel, fresh=fresh)
        if driver is None:
            try:
                filters = self._repo.load_filter_list(rel)
                if filters is None:
                    return data
                if b"\0" not in data:
                    return filters.apply_to_buffer(data)
            except pygit2.GitError as exc:
                raise StorageError(f"Git's filters for {rel} failed: {exc}", path=rel) from exc
            # pygit2 returns libgit2's output up to its first NUL: such bytes go to `git`.
            if self.run is None:
                return data
        elif self.run is None:
            raise StorageError(
                f"{rel} goes through Git's {driver!r} filter, which this process cannot run",
                hint="Let the daemon commit it (it runs Git's filters), or commit it with git.",
                path=rel,
            )
        blob = self._repo[self.run(rel, data)]
        assert isinstance(blob, pygit2.Blob)
        return bytes(blob.data)

    def stored(self, rel: str, data: bytes) -> bytes:
        """What Git stores for bytes mnoted writes at ``rel`` (never a path a driver filters:
        :meth:`refuse`): ``data`` through libgit2's line-ending and ident filters. Only bytes
        those could change are filtered: with a CR, or with a ``$`` where ``ident`` is set
        (a byte is found by ``memchr``, far cheaper than a search for ``$Id`` itself)."""
        if b"\r" in data or (b"$" in data and self._repo.get_attr(rel, "ident") is True):
            return self.clean(rel, data, fresh=False)
        return data

    def smudge(self, rel: str, data: bytes) -> bytes:
        """The bytes a checkout of blob ``data`` writes at ``rel``: ``data`` with the line
        endings ``git checkout`` writes (CRLF where ``.gitattributes`` ``eol=crlf`` or
        ``core.autocrlf=true`` ask for it). Not done: bytes with a NUL are written as stored
        (pygit2 cuts a filter's output at its first NUL), and ``ident``'s ``$Id$`` is not
        expanded (libgit2 expands it only from a blob, not from bytes)."""
        if b"\0" in data:
            return data
        try:
            filters = self._repo.load_filter_list(rel, mode=pygit2.enums.FilterMode.SMUDGE)
            return data if filters is None else filters.apply_to_buffer(data)
        except pygit2.GitError as exc:
            raise StorageError(f"Git's filters for {rel} failed: {exc}", path=rel) from exc

    def stored_mode(self, disk: int, head: int | None, *, fresh: bool = True) -> int:
        """The mode ``git add`` stores for a file whose Git mode on disk is ``disk`` and that
        HEAD has with mode ``head`` (None: a new file): ``disk``, unless ``core.fileMode``
        is false; then HEAD's executable bit, none on a new file. Git's config is asked only
        where the two differ."""
        if disk in (head, trees.LINK) or (head is None and disk == trees.FILE):
            return disk
        if self.trusts_mode(fresh=fresh):
            return disk
        return trees.EXECUTABLE if head == trees.EXECUTABLE else trees.FILE

    def trusts_mode(self, *, fresh: bool = True) -> bool:
        """Whether Git records the executable bits found on disk (``core.fileMode``)."""
        self._configured(fresh)
        return self._trusts_mode

    def _configured(self, fresh: bool) -> frozenset[str]:
        now = time.monotonic()
        if not fresh and now - self._looked < CONFIG_CHECK_SECONDS:
            return self._drivers
        self._looked = now
        stamp = tuple(_stat(p) for p in self._files)
        if stamp != self._stamp:
            drivers = set()
            for entry in self._repo.config:
                parts = entry.name.split(".")
                if len(parts) >= 3 and parts[0] == "filter" and parts[-1] in ("clean", "process"):
                    drivers.add(".".join(parts[1:-1]))
            try:
                self._trusts_mode = self._repo.config.get_bool("core.filemode")
            except (KeyError, pygit2.GitError):
                self._trusts_mode = True
            self._drivers, self._stamp = frozenset(drivers), stamp
        return self._drivers


def _config_files(gitdir: str) -> list[str]:
    """The files libgit2 reads Git's config from (a change to any re-reads the drivers)."""
    where = pygit2.settings.search_path
    levels = pygit2.enums.ConfigLevel
    return [
        os.path.join(gitdir, "config"),
        os.path.join(where[levels.GLOBAL], ".gitconfig"),
        os.path.join(where[levels.XDG], "config"),
        os.path.join(where[levels.SYSTEM], "gitconfig"),
    ]


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns
