"""Block id lists kept in a real sidecar: a long page's as changes, read back exactly."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mnoted.service.idlists import LONG, IdLists
from mnoted.store import BlockIds
from mnoted.store.facades import BLOCK_IDS
from mnoted.store.sidecar import Sidecar


@contextmanager
def sidecar() -> Iterator[tuple[Sidecar, BlockIds]]:
    with tempfile.TemporaryDirectory() as d:
        side = Sidecar.open(Path(d) / "state.sqlite3", (BLOCK_IDS,))
        try:
            yield side, BlockIds(side, lambda: None)
        finally:
            side.close()


def keep(kv: BlockIds, lists: IdLists, doc: str, blob: str, ids: list[str]) -> None:
    kv.keep(lists.entries(kv, doc, blob, ids))


def read(kv: BlockIds, lists: IdLists, blob: str) -> list[str] | None:
    stored = kv.entry(blob)
    return None if stored is None else lists.read(kv, stored)


def records(side: Sidecar) -> list[str]:
    return [str(v) for (v,) in side.conn.execute("SELECT body FROM id_records")]


def put_record(side: Sidecar, key: str, body: str | None) -> None:
    """Damage a record by hand: rewrite it, or delete it (None)."""
    side.conn.execute("DELETE FROM id_records WHERE key = ?", (key,))
    if body is not None:
        side.conn.execute("INSERT INTO id_records (key, body) VALUES (?, ?)", (key, body))


_edit = st.tuples(
    st.sampled_from(["insert", "delete", "replace", "move"]),
    st.floats(0, 1),
    st.integers(0, 40),
)


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(LONG - 20, 700),
    edits=st.lists(st.tuples(_edit, st.integers(0, 5)), min_size=1, max_size=70),
)
def test_every_version_reads_back_exactly_from_a_fresh_start(
    size: int, edits: list[tuple[tuple[str, float, int], int]]
) -> None:
    """Any sequence of edits, blobs coming back (their entries rewritten, with records
    resting on their older ones), read back by a reader that remembers nothing."""
    fresh = (f"p_{n}" for n in itertools.count())
    ids = [next(fresh) for _ in range(size)]
    newest: dict[str, list[str]] = {}
    with sidecar() as (side, kv):
        writer = IdLists()
        for (kind, where, length), blob_no in edits:
            at = int(where * len(ids))
            if kind == "insert":
                ids = ids[:at] + [next(fresh) for _ in range(length)] + ids[at:]
            elif kind == "delete":
                ids = ids[:at] + ids[at + length :]
            elif kind == "replace":
                ids = ids[:at] + [next(fresh) for _ in range(length)] + ids[at + length :]
            else:
                moved = ids[at : at + length]
                rest = ids[:at] + ids[at + length :]
                ids = moved + rest
            blob = f"blob{blob_no}"
            side.begin()
            keep(kv, writer, "doc", blob, ids)
            side.commit()
            newest[blob] = ids
            assert read(kv, writer, blob) == ids
        reader = IdLists()
        for blob, expected in newest.items():
            assert read(kv, reader, blob) == expected


def test_a_long_page_is_kept_as_changes_with_a_whole_list_every_32() -> None:
    """100 versions of a 13,000-id page, one id changed in each: four whole lists, and
    changes of a few bytes (kept whole, they took 100 x 117 KB)."""
    ids = [f"p_{n:06x}" for n in range(13_000)]
    with sidecar() as (side, kv):
        lists = IdLists()
        for version in range(100):
            ids = [*ids[:5000], f"x_{version:06x}", *ids[5001:]]
            keep(kv, lists, "doc", f"blob{version}", ids)
        kept = records(side)
        assert sum(r.startswith("F ") for r in kept) == 4
        assert sum(len(r) for r in kept) < 5 * len("\n".join(ids))
        for version in (0, 31, 32, 50, 99):
            assert read(kv, IdLists(), f"blob{version}")[5000] == f"x_{version:06x}"


def test_a_content_that_comes_back_with_its_ids_adds_no_record() -> None:
    ids = [f"p_{n}" for n in range(LONG)]
    edited = [*ids[:-1], "p_new"]
    with sidecar() as (side, kv):
        lists = IdLists()
        for blob, version in [("a", ids), ("b", edited), ("a", ids), ("b", edited)]:
            keep(kv, lists, "doc", blob, version)
            assert kv.last_blob("doc") == blob
        assert len(records(side)) == 2
        keep(kv, lists, "doc", "a", edited)  # the same content given other ids: kept
        assert len(records(side)) == 3
        assert read(kv, IdLists(), "a") == edited


def test_a_short_page_keeps_its_list_whole_under_its_blob() -> None:
    with sidecar() as (side, kv):
        keep(kv, IdLists(), "doc", "b", ["h_1", "p_2"])
        assert kv.entry("b") == "h_1\np_2"
        assert kv.last_blob("doc") == "b"
        assert records(side) == []
        keep(kv, IdLists(), "doc", "empty", [])
        assert read(kv, IdLists(), "empty") == []


def test_a_record_that_is_gone_or_does_not_add_up_reads_as_missing() -> None:
    """A reader gets None (the page's ids are then carried over again), never a wrong list."""
    ids = [f"p_{n}" for n in range(LONG * 2)]
    with sidecar() as (side, kv):
        lists = IdLists()
        keep(kv, lists, "doc", "first", ids)
        keep(kv, lists, "doc", "second", ids[:-1])
        keep(kv, lists, "doc", "third", ids[:-2])
        first = kv.entry("first")[1:]
        second = kv.entry("second")[1:]
        assert kv.record(second).startswith(f"D {first} 1 ")
        record = kv.record(first)
        put_record(side, first, None)
        assert read(kv, IdLists(), "third") is None
        put_record(side, first, record.replace("F 512", "F 511"))
        assert read(kv, IdLists(), "third") is None
        put_record(side, first, "Z 1\np_0")
        assert read(kv, IdLists(), "second") is None
        put_record(side, first, record)
        put_record(side, second, f"D {first} 1 -1 0 511\n")
        assert read(kv, IdLists(), "third") is None
        put_record(side, second, f"D {first} 1 600 0 511\n")
        assert read(kv, IdLists(), "second") is None
        assert read(kv, IdLists(), "first") == ids
