"""Work-tree I/O relative to folder file descriptors: the folder checked is the folder used.

Checking a path (``paths.resolve`` walks it with ``lstat``) and then opening it by name
leaves a window in which a parent folder can be swapped for a symlink to a folder outside
the workspace, and the open, rename or unlink then happens out there (a TOCTOU race). Here
the parent folder is opened by walking from an anchor (the workspace root) one component
at a time with ``O_NOFOLLOW | O_DIRECTORY`` relative to the previous folder's fd, so a
symlink at any step is refused by the kernel (``ELOOP``/``ENOTDIR`` → :class:`PathRejected`)
and every later operation (temp file, rename, fsync, unlink, mkdir, read) names an entry of
that one folder. A folder swapped after it was opened is not followed either: the I/O stays
in the folder that was checked (wherever a rename has since put it), never in a link's target.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import secrets
import signal
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from mnoted.errors import PathRejected
from mnoted.store.paths import TEMP_PREFIX, hard_linked

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted at a page's name must not block the writer thread on open.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _step(parent: int, name: str) -> int:
    """Open folder ``name`` inside ``parent`` without following a symlink."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PathRejected(
                f"a folder on the way ({name!r}) is a symbolic link or not a folder", path=name
            ) from exc
        raise


def _walk(anchor: Path, parts: Sequence[str], *, create: bool) -> list[int] | None:
    """The fds of ``anchor`` and each folder of ``parts`` below it (caller closes them).

    None if a folder is missing and not ``create``; with ``create`` missing folders are
    made, each fsynced into its parent so a crash cannot lose a folder holding a new file.
    """
    fds = [os.open(anchor, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    try:
        for name in parts:
            try:
                fds.append(_step(fds[-1], name))
                continue
            except FileNotFoundError:
                if not create:
                    _close(fds)
                    return None
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=fds[-1])
                os.fsync(fds[-1])
            fds.append(_step(fds[-1], name))
    except BaseException:
        _close(fds)
        raise
    return fds


def _close(fds: Sequence[int]) -> None:
    for fd in fds:
        os.close(fd)


def open_folder(anchor: Path, parts: Sequence[str], *, create: bool = False) -> int | None:
    """An fd of folder ``anchor/parts...`` reached without following symlinks (None: absent)."""
    fds = _walk(anchor, parts, create=create)
    if fds is None:
        return None
    _close(fds[:-1])
    return fds[-1]


@contextlib.contextmanager
def folder(anchor: Path, parts: Sequence[str], *, create: bool = False) -> Iterator[int | None]:
    """:func:`open_folder` as a context manager that closes the fd."""
    fd = open_folder(anchor, parts, create=create)
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def anchored(location: Path) -> tuple[Path, list[str]]:
    """``("/", components)`` for an absolute path given without its workspace root.

    Walking from ``/`` means no component of ``location`` may be a symlink: the store passes
    paths under a workspace root that was made a real path (``Path.resolve``) when opened.
    """
    parts = Path(os.path.abspath(location)).parts
    return Path(parts[0]), list(parts[1:])


def _regular(st: os.stat_result, name: str, *, links_ok: bool = False) -> os.stat_result:
    if not stat.S_ISREG(st.st_mode):
        raise PathRejected(f"{name!r} is not a regular file", path=name)
    if st.st_nlink > 1 and not links_ok:
        raise hard_linked(name, st.st_nlink)
    return st


def stat_at(fd: int, name: str) -> os.stat_result | None:
    """Stat data of regular file ``name`` in folder ``fd`` (not followed); None if absent.

    Refused as :func:`read_at` refuses: a symlink, a non-regular file, several hard links.
    """
    try:
        st = lstat_at(fd, name)
    except OSError as exc:
        raise PathRejected(f"cannot read {name!r}: {exc.strerror}", path=name) from exc
    return None if st is None else _regular(st, name)


def lstat_at(fd: int, name: str) -> os.stat_result | None:
    """Stat data of entry ``name`` in folder ``fd``, whatever it is (not followed); None if
    absent."""
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def holds_repository(fd: int) -> bool:
    """Whether folder ``fd`` holds a ``.git`` (a folder, or the file of a submodule or a
    linked worktree): its files belong to another repository."""
    return lstat_at(fd, ".git") is not None


def read_at(fd: int, name: str, *, links_ok: bool = False) -> tuple[bytes, os.stat_result] | None:
    """Bytes and stat data of regular file ``name`` in folder ``fd``; None if absent.

    A symlink, a non-regular file or (unless ``links_ok``) a file with several hard links
    (which could alias a file outside) is refused, checked with ``fstat`` on the file
    actually opened.
    """
    try:
        file_fd = os.open(name, _READ_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PathRejected(f"cannot read {name!r}: {exc.strerror}", path=name) from exc
    try:
        st = _regular(os.fstat(file_fd), name, links_ok=links_ok)
        data = read_all(file_fd, st.st_size)
    finally:
        os.close(file_fd)
    return data, st


def read_all(file_fd: int, size: int) -> bytes:
    """The rest of an open regular file whose ``fstat`` gave ``size``: one read of ``size`` + 1
    bytes, not a 1 MiB buffer made and shrunk to a note's 10 KB; a file that grew meanwhile
    is read to its end."""
    want = size + 1
    chunks = []
    while chunk := os.read(file_fd, want):
        chunks.append(chunk)
        if len(chunk) < want:  # a short read of a regular file: its end
            break
        want = 1 << 16
    return b"".join(chunks)


libc = ctypes.CDLL(None, use_errno=True)
"""The C library, for the system calls ``os`` lacks (here, and ``store.aio``'s)."""
_renameat2 = getattr(libc, "renameat2", None)  # glibc 2.28+
if _renameat2 is not None:
    _renameat2.argtypes = (
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    )
RENAME_EXCHANGE = 2
_fallocate = getattr(libc, "fallocate64", None) or getattr(libc, "fallocate", None)
if _fallocate is not None:
    _fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
_NOT_ALLOCATED = {errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


def renameat2(src_fd: int, src: str, dst_fd: int, dst: str, flags: int) -> None:
    """Linux's ``renameat2`` (which ``os`` lacks); OSError(ENOSYS) where libc has none."""
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    if _renameat2(src_fd, os.fsencode(src), dst_fd, os.fsencode(dst), flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), dst)


def allocate(fd: int, size: int) -> None:
    """Reserve ``size`` bytes of blocks for a new file (Linux's ``fallocate``, which ``os``
    lacks; not glibc's ``posix_fallocate``, which writes zeros where the file system cannot).
    Where the file system does not reserve, nothing is done; a full disk raises."""
    if _fallocate is None or size <= 0:
        return
    if _fallocate(fd, 0, 0, size) != 0:
        code = ctypes.get_errno()
        if code not in _NOT_ALLOCATED:
            raise OSError(code, os.strerror(code))


def exchange(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
    """Swap the files at two names in one atomic step (both must exist)."""
    renameat2(src_fd, src, dst_fd, dst, RENAME_EXCHANGE)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than it was given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def set_mode(fd: int, mode: int) -> None:
    """Give file ``fd`` these permission bits where its file system can hold them. FAT and
    exFAT refuse a mode they cannot represent (``EPERM``, unless mounted ``quiet``): the
    file keeps the one they give every file, and the write goes on."""
    try:
        os.fchmod(fd, mode)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP):
            raise


def write_temp(fd: int, name: str, data: bytes, mode: int = 0o644) -> tuple[str, int]:
    """Write ``data`` to a new temporary file beside ``name`` in folder ``fd``.

    Returns its name and its still open fd (nothing synced yet): the caller syncs, closes
    and renames it, alone (:func:`write_at`) or together with others (a group's files).
    """
    tmp = f"{TEMP_PREFIX}{name[:64]}-{secrets.token_hex(4)}"
    file_fd = os.open(tmp, _TEMP_FLAGS, mode, dir_fd=fd)
    try:
        write_all(file_fd, data)
        set_mode(file_fd, mode)  # the umask may have narrowed it
    except BaseException:
        os.close(file_fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=fd)
        raise
    return tmp, file_fd


def write_at(fd: int, name: str, data: bytes, mode: int = 0o644, *, sync: bool = True) -> None:
    """Replace ``name`` in folder ``fd`` atomically: temp file, fsync, rename, fsync folder."""
    tmp, file_fd = write_temp(fd, name, data, mode)
    try:
        try:
            if sync:
                os.fsync(file_fd)
        finally:
            os.close(file_fd)
        os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=fd)
        raise
    if sync:
        os.fsync(fd)


def remove(anchor: Path, parts: Sequence[str], name: str) -> None:
    """Unlink ``name`` if present, then drop the folders it leaves empty (as Git does).

    Each folder is removed by name from its parent's fd (``rmdir`` never follows a symlink),
    and each parent is fsynced after it lost an entry.
    """
    fds = _walk(anchor, parts, create=False)
    if fds is None:
        return
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fds[-1])
        os.fsync(fds[-1])
        for i in range(len(parts), 0, -1):
            try:
                os.rmdir(parts[i - 1], dir_fd=fds[i - 1])
            except OSError:
                break
            os.fsync(fds[i - 1])
    finally:
        _close(fds)


def remove_temps(fd: int) -> list[str]:
    """Delete this store's leftover temporary files in folder ``fd``; their names."""
    removed = []
    for name in os.listdir(fd):
        if name.startswith(TEMP_PREFIX):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
                removed.append(name)
    return removed


def files_under(fd: int, prefix: str) -> list[str]:
    """Every non-folder entry below folder ``fd`` as ``prefix/...`` (``.git`` skipped).

    Subfolders are entered by fd with ``O_NOFOLLOW``, so the listing never leaves the tree
    even if a folder is swapped for a symlink while it runs.
    """
    out: list[str] = []
    with os.scandir(fd) as entries:
        listed = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in listed:
        if not is_dir:
            out.append(f"{prefix}/{name}")
            continue
        if name.lower() == ".git":
            continue
        try:
            child = _step(fd, name)
        except (PathRejected, FileNotFoundError):
            continue
        try:
            out.extend(files_under(child, f"{prefix}/{name}"))
        finally:
            os.close(child)
    return out


_F_SETSIG = getattr(fcntl, "F_SETSIG", 10)
F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)


def lease(fd: int, kind: int) -> None:
    """Take a lease of ``kind`` (``fcntl.F_RDLCK``: no one else writes the file; ``F_WRLCK``:
    no one else has it open or mapped) on ``fd``'s file, held until released or ``fd`` is
    closed; an open that would break it waits for that meanwhile. Raises OSError where it
    cannot be had (``EAGAIN``: someone has the file open so)."""
    fcntl.fcntl(fd, _F_SETSIG, signal.SIGURG)  # (a lease break's signal, ignored)
    fcntl.fcntl(fd, F_SETLEASE, kind)


def alone(fd: int) -> bool:
    """Whether no one else has ``fd``'s file open or mapped (this process's other fds
    included), kept so until ``fd`` is closed (:func:`lease`). False where it cannot be
    told."""
    try:
        lease(fd, fcntl.F_WRLCK)
    except OSError:
        return False
    return True
