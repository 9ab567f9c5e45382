"""A page's block ids at each blob, kept in the workspace database; a long page's as changes.

A short page's list is kept whole under its blob (table ``block_ids``, one id per line).
Kept whole at every version, a long page's list (an id per block) would grow the database by
as much per write, for ever, and cost each write the time to store it. A long page's list is
kept in a record of its own (table ``id_records``, the blob's entry holding ``@<key>``): the
whole list, or its change from the record of the document's previous version (how many ids
it keeps from that list's start and from its end, and the ids between). A record's key is
random and a record is never rewritten, so a change always rests on the list it was made
from, whatever later happens to the blob that list was kept for (its entry is rewritten when
its content comes back after other edits). A whole list every 32 records bounds what is read
to rebuild an old version's list; a record that cannot be read or does not add up is as good
as missing, and the ids are carried over again. A content that comes back with the ids it
had (an edit undone) adds no record.
"""

from __future__ import annotations

import json
import os

from mnoted.core.sequences import shared_ends
from mnoted.service.lru import Bounded
from mnoted.store import BlockIds, IdEntries

LONG = 256
"""Ids from which a page's list is kept in records (2.3 KB; shorter ones cost less whole)."""
_WHOLE_EVERY = 32
_KEPT = 32
_KEPT_IDS = 500_000  # ids of the lists kept in memory (their strings are the pages')


def _joined(ids: list[str]) -> str:
    return "\n".join(ids)


def _split(text: str, count: int) -> list[str]:
    return text.split("\n") if count else []


class IdLists:
    """Reads and writes the id lists; keeps the newest records' lists in memory (a write
    makes its change from the list of the version it edited, read a moment before). Shared
    by the workspaces' threads (record keys are random: they never meet)."""

    def __init__(self) -> None:
        self._kept: Bounded[str, tuple[int, list[str]]] = Bounded(
            _KEPT, _KEPT_IDS, lambda kept: len(kept[1])
        )

    def read(self, kv: BlockIds, stored: str) -> list[str] | None:
        """The ids of a blob's entry ``stored``; None if its record cannot be read."""
        if stored.startswith("@"):
            found = self._record(kv, stored[1:])
            return None if found is None else found[1]
        if stored.startswith("["):  # written as JSON by an earlier version
            ids: list[str] = json.loads(stored)
            return ids
        return _split(stored, len(stored))

    def entries(self, kv: BlockIds, document_id: str, blob: str, ids: list[str]) -> IdEntries:
        """The entries that keep ``ids`` as ``blob``'s, the document's newest."""
        if len(ids) < LONG:
            return IdEntries(document_id, blob, _joined(ids))
        stored = kv.entry(blob)
        if stored is not None and stored.startswith("@"):  # a content come back (an undo)
            kept = self._kept.get(stored[1:])
            if kept is not None and kept[1] == ids:
                return IdEntries(document_id, blob, None)
        depth, record = 0, ""
        base = self._base(kv, document_id)
        if base is not None and base[1] + 1 < _WHOLE_EVERY:
            key, base_depth, old = base
            start, end = shared_ends(ids, old)
            between = ids[start : len(ids) - end]
            if 2 * len(between) < len(ids):
                depth = base_depth + 1
                record = f"D {key} {depth} {start} {end} {len(ids)}\n{_joined(between)}"
        if not depth:
            record = f"F {len(ids)}\n{_joined(ids)}"
        key = os.urandom(8).hex()
        self._kept.put(key, (depth, ids))
        return IdEntries(document_id, blob, "@" + key, (key, record))

    def _base(self, kv: BlockIds, document_id: str) -> tuple[str, int, list[str]] | None:
        """The record of the document's newest version: its key, depth and ids."""
        last = kv.last_blob(document_id)
        stored = None if last is None else kv.entry(last)
        if stored is None or not stored.startswith("@"):
            return None
        found = self._record(kv, stored[1:])
        return None if found is None else (stored[1:], *found)

    def _record(self, kv: BlockIds, key: str, hops: int = 0) -> tuple[int, list[str]] | None:
        """A record's depth and ids, rebuilt from the records it rests on."""
        kept = self._kept.get(key)
        if kept is not None:
            return kept
        text = kv.record(key)
        if text is None or hops > _WHOLE_EVERY:
            return None
        head, _, body = text.partition("\n")
        fields = head.split(" ")
        try:
            if fields[0] == "F" and len(fields) == 2:
                depth, count = 0, int(fields[1])
                ids = _split(body, count)
            elif fields[0] == "D" and len(fields) == 6:
                depth, start, end, count = (int(f) for f in fields[2:])
                base = self._record(kv, fields[1], hops + 1)
                if base is None:
                    return None
                old = base[1]
                if min(start, end) < 0 or start + end > min(count, len(old)):
                    return None
                ids = old[:start] + _split(body, count - start - end) + old[len(old) - end :]
            else:
                return None
        except ValueError:
            return None
        if len(ids) != count:
            return None
        self._kept.put(key, (depth, ids))
        return depth, ids
