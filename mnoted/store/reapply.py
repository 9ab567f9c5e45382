"""A landed change put back on a file a person saved over in the instant before its rename.

A landing checks its files once more just before the branch moves (``Workspace._land``), so
a save begun during its disk syncs lands nothing and the command is planned again on it. A
save that begins between that check and the rename (microseconds) still leaves the person's
file in place: it is committed as ``external``, and the command's change to it is applied
on top, three-way: base the blob before the command, ours the command's blob, theirs the
person's settled bytes. Markdown pages merge on blocks (:func:`mnoted.core.merge.merge_page`);
another file only where one side left it as it was. Nothing is written when the change does
not apply cleanly (the person's save stays, the command's version stays in its commit).
"""

from __future__ import annotations

from mnoted.core.merge import merge_page
from mnoted.store.indexer import is_document


def merged(
    path: str, base: bytes | None, ours: bytes | None, theirs: bytes | None
) -> tuple[bool, bytes | None]:
    """Whether the command's change (``base`` -> ``ours``) applies cleanly on ``theirs``,
    and the file it gives (None: no file). A removal on either side applies only where the
    other side left the file as it was (an edit is never dropped for a removal)."""
    if ours == theirs or theirs == base:
        return True, ours
    if ours == base:
        return True, theirs
    if ours is None or theirs is None or not is_document(path):
        return False, None
    result = merge_page(base, ours, theirs)
    return result.clean, result.data
