"""Large blobs written as loose objects by the store itself, stored rather than deflated.

libgit2 deflates every loose object at zlib level 1: ~20 ms for a 1 MB page on this kind
of machine, the largest part of an edit of it. A zlib stream may also hold the bytes as
they are ("stored" blocks, level 0), which every Git reader inflates at copy speed; the
object is then as large as the page until the maintenance thread packs it (compressed).
Small blobs keep going through libgit2, where compression costs little.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import zlib
from pathlib import Path

from mnoted.core.blob import blob_id

STORED_FROM = 64 * 1024
"""Blobs at least this large are written stored (uncompressed) by :func:`write_blob`."""


def write_blob(objects: Path, data: bytes) -> str:
    """Write ``data`` as a loose blob under ``objects`` (not synced); its id.

    The temporary name starts with ``tmp_obj_``, as Git's own, so ``git fsck`` ignores and
    ``git gc`` removes one a crash leaves behind.
    """
    oid = blob_id(data)
    folder = objects / oid[:2]
    target = folder / oid[2:]
    if target.exists():
        return oid
    folder.mkdir(exist_ok=True)
    tmp = folder / f"tmp_obj_mnote_{secrets.token_hex(6)}"
    body = zlib.compress(b"blob %d\0" % len(data) + data, 0)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.rename(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return oid
