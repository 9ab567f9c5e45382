"""Git's content id of bytes, the key the store, the watcher and the page cache agree on."""

from __future__ import annotations

import hashlib


def blob_id(data: bytes) -> str:
    """Git's blob id of ``data`` (what ``pygit2.hash(data)`` returns, as hex).

    OpenSSL's SHA-1 through ``hashlib``: cheaper than libgit2's collision-detecting one,
    and it lets other threads run while it hashes.
    """
    digest = hashlib.sha1(b"blob %d\0" % len(data), usedforsecurity=False)
    digest.update(data)
    return digest.hexdigest()
