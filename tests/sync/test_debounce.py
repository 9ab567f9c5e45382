"""The pure aggregator with a fake clock: timing rules and which paths each save dirties."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnoted.sync.debounce import DebounceConfig, Debouncer, EventKind, FsEvent, SettledBatch
from mnoted.sync.ignore import IgnoreRules

CFG = DebounceConfig(quiet_period=1.0, max_delay=5.0, close_timeout=3.0, coalesce=0.0)
C, M, CL, A, D, MV = (
    EventKind.CREATED,
    EventKind.MODIFIED,
    EventKind.CLOSED,
    EventKind.ATTRIB,
    EventKind.DELETED,
    EventKind.MOVED,
)


def ev(kind: EventKind, path: str, dest: str | None = None, *, is_dir: bool = False) -> FsEvent:
    return FsEvent(kind, path, dest, is_dir)


def make() -> Debouncer:
    return Debouncer(CFG, ignore=IgnoreRules())


def fold(*events: FsEvent) -> list[str]:
    """Feed events at t=0, settle at t=100; return the batch's paths (one batch)."""
    d = make()
    for e in events:
        d.add(e, 0.0)
    batch = d.due(100.0)
    assert d.pending_count == 0
    return [] if batch is None else list(batch.paths)


# -- timing -------------------------------------------------------------------


def test_settles_after_quiet_period_not_before() -> None:
    d = make()
    d.add(ev(CL, "a.md"), 10.0)
    assert d.next_deadline() == 11.0
    assert d.due(10.99) is None
    batch = d.due(11.0)
    assert batch is not None
    assert batch.paths == ("a.md",)
    assert (batch.first_event_at, batch.last_event_at, batch.settled_at) == (10.0, 10.0, 11.0)
    assert d.next_deadline() is None and d.due(50.0) is None


def test_each_event_restarts_the_quiet_period() -> None:
    d = make()
    for t in (0.0, 0.5, 1.2, 2.0):
        assert d.due(t) is None
        d.add(ev(CL, "a.md"), t)
    assert d.next_deadline() == 3.0
    assert d.due(2.99) is None
    assert d.due(3.0) is not None


def test_max_delay_bounds_a_continuous_stream_of_writes() -> None:
    d = make()
    settled_at: list[float] = []
    t = 0.0
    while t < 12.0:
        batch = d.due(t)
        if batch is not None:
            assert batch.paths == ("log.md",)
            settled_at.append(t)
        d.add(ev(M, "log.md"), t)
        d.add(ev(CL, "log.md"), t)
        t = round(t + 0.25, 2)
    # One settlement per max_delay window, although the path was never quiet.
    assert settled_at == [5.0, 10.0]


def test_open_writer_waits_for_close_then_settles_on_quiet() -> None:
    d = make()
    d.add(ev(M, "big.md"), 0.0)
    assert d.next_deadline() == 3.0  # close_timeout, not quiet_period
    assert d.due(2.0) is None
    d.add(ev(CL, "big.md"), 2.5)
    assert d.next_deadline() == 3.5
    assert d.due(3.5) is not None


def test_writer_that_never_closes_settles_after_close_timeout() -> None:
    d = make()
    d.add(ev(M, "a.md"), 0.0)
    assert d.due(2.9) is None
    assert d.due(3.0) is not None


def test_attrib_alone_uses_quiet_period() -> None:
    d = make()
    d.add(ev(A, "run.sh"), 0.0)
    assert d.next_deadline() == 1.0


def test_config_is_validated() -> None:
    with pytest.raises(ValueError):
        DebounceConfig(quiet_period=0)
    with pytest.raises(ValueError):
        DebounceConfig(quiet_period=2.0, max_delay=1.0)


def test_coalesce_lets_paths_due_shortly_after_ride_along() -> None:
    d = Debouncer(DebounceConfig(quiet_period=1.0, max_delay=5.0, coalesce=0.2))
    d.add(ev(CL, "a.md"), 0.0)
    d.add(ev(CL, "b.md"), 0.15)
    d.add(ev(CL, "c.md"), 0.5)
    wake = d.next_deadline()
    assert wake == 1.2
    batch = d.due(wake)
    assert batch is not None and list(batch.paths) == ["a.md", "b.md"]
    assert d.next_deadline() == 1.7


def test_paths_settle_independently() -> None:
    d = make()
    d.add(ev(CL, "a.md"), 0.0)
    d.add(ev(CL, "b.md"), 0.6)
    a = d.due(1.0)
    assert a is not None and list(a.paths) == ["a.md"]
    b = d.due(1.6)
    assert b is not None and list(b.paths) == ["b.md"]


def test_flush_and_take() -> None:
    d = make()
    d.add(ev(CL, "a.md"), 0.0)
    d.add(ev(CL, "b.md"), 0.0)
    assert d.is_pending("a.md")
    taken = d.take(["a.md", "nothing.md"], 0.1)
    assert taken is not None and list(taken.paths) == ["a.md"]
    assert not d.is_pending("a.md")
    flushed = d.flush(0.2)
    assert flushed is not None and list(flushed.paths) == ["b.md"]
    assert d.flush(0.3) is None


# -- folding: editor and tool patterns ----------------------------------------
# Each save dirties the synced paths it touched, and nothing else; the store decides
# what happened by content.


def test_in_place_write_twice_is_one_path() -> None:  # VS Code: truncate + write
    assert fold(ev(M, "x.md"), ev(M, "x.md"), ev(CL, "x.md")) == ["x.md"]


def test_vim_backupcopy_no() -> None:
    assert fold(
        ev(C, "4913"),
        ev(CL, "4913"),
        ev(D, "4913"),
        ev(MV, "x.md", "x.md~"),
        ev(C, "x.md"),
        ev(M, "x.md"),
        ev(CL, "x.md"),
        ev(A, "x.md"),
        ev(D, "x.md~"),
    ) == ["x.md"]


def test_vim_rename_aside_to_a_synced_name_dirties_both() -> None:
    # backupext=.bak: the aside name is not a temp name; the store finds x.md changed and
    # x.md.bak gone (nothing to do unless it tracked it)
    events = (ev(MV, "x.md", "x.md.bak"), ev(C, "x.md"), ev(CL, "x.md"), ev(D, "x.md.bak"))
    assert fold(*events) == ["x.md", "x.md.bak"]


def test_jetbrains_safe_write() -> None:
    assert fold(
        ev(C, "x.md___jb_tmp___"),
        ev(CL, "x.md___jb_tmp___"),
        ev(MV, "x.md", "x.md___jb_old___"),
        ev(MV, "x.md___jb_tmp___", "x.md"),
        ev(D, "x.md___jb_old___"),
    ) == ["x.md"]


def test_gedit_and_sed_replace_by_rename() -> None:
    for tmp in (".goutputstream-ABC123", "sedX1b2C3"):
        assert fold(ev(C, tmp), ev(CL, tmp), ev(MV, tmp, "x.md")) == ["x.md"]


def test_emacs_lock_autosave_backup() -> None:
    assert fold(
        ev(C, ".#x.md"),
        ev(C, "#x.md#"),
        ev(CL, "#x.md#"),
        ev(MV, "x.md", "x.md~"),
        ev(C, "x.md"),
        ev(CL, "x.md"),
        ev(D, "#x.md#"),
        ev(D, ".#x.md"),
    ) == ["x.md"]


def test_create_and_delete_dirty_the_path() -> None:
    assert fold(ev(C, "n.md"), ev(M, "n.md"), ev(CL, "n.md")) == ["n.md"]
    assert fold(ev(D, "n.md")) == ["n.md"]
    assert fold(ev(C, "n.md"), ev(CL, "n.md"), ev(D, "n.md")) == ["n.md"]


def test_renames_dirty_both_sides_in_order_of_first_event() -> None:
    assert fold(ev(MV, "a.md", "b.md")) == ["a.md", "b.md"]
    assert fold(ev(MV, "a.md", "b.md"), ev(MV, "b.md", "c.md")) == ["a.md", "b.md", "c.md"]
    assert fold(ev(MV, "a.md", "b.md"), ev(MV, "c.md", "a.md")) == ["a.md", "b.md", "c.md"]
    swap = (ev(MV, "a.md", "a.md~"), ev(MV, "b.md", "a.md"), ev(MV, "a.md~", "b.md"))
    assert fold(*swap) == ["a.md", "b.md"]


def test_a_rename_settles_with_its_partner() -> None:
    d = make()
    d.add(ev(MV, "a.md", "b.md"), 0.0)
    d.add(ev(C, "a.md"), 0.8)  # a new file at the origin, still being written
    assert d.due(1.0) is None  # b.md alone would be due; it waits for a.md
    batch = d.due(1.8)
    assert batch is not None and batch.paths == ("a.md", "b.md")
    # linked through a chain: all three together, taken together
    d.add(ev(MV, "a.md", "b.md"), 5.0)
    d.add(ev(MV, "b.md", "c.md"), 5.0)
    d.add(ev(CL, "x.md"), 5.0)
    taken = d.take(["c.md"], 5.1)
    assert taken is not None and taken.paths == ("a.md", "b.md", "c.md")
    assert d.is_pending("x.md") and not d.is_pending("a.md")


def test_delete_then_recreate_across_windows() -> None:
    d = make()
    d.add(ev(D, "a.md"), 0.0)
    first = d.due(1.0)
    d.add(ev(C, "a.md"), 2.0)
    second = d.due(3.0)
    assert first is not None and first.paths == ("a.md",)
    assert second is not None and second.paths == ("a.md",)


def test_ignored_paths_never_wake_the_debouncer() -> None:
    d = make()
    for name in (".git/index", ".git/objects/ab/cdef", ".mnote/state.json", "x.md.swp", "4913"):
        assert d.add(ev(CL, name), 0.0) is False
    assert d.add(ev(MV, "a~", "b~"), 0.0) is False
    assert d.add(ev(C, ".git", is_dir=True), 0.0) is False
    assert d.pending_count == 0 and d.next_deadline() is None


def test_gitignored_paths_are_dropped_and_gitignore_edits_rescan() -> None:
    rules = IgnoreRules(lambda p: p.startswith("build/") or p.endswith(".log"))
    d = Debouncer(CFG, ignore=rules)
    assert d.add(ev(CL, "build/out.md"), 0.0) is False
    assert d.add(ev(CL, "x.log"), 0.0) is False
    assert d.add(ev(CL, "notes/.gitignore"), 0.0) is True
    batch = d.due(5.0)
    assert batch is not None
    assert batch.paths == ("notes/.gitignore",)
    assert batch.rescan_dirs == ("notes",)


# -- folders ------------------------------------------------------------------


def test_folder_rename_dirties_each_file_and_rescans_both_sides() -> None:
    d = make()
    d.add(ev(MV, "d1", "d2", is_dir=True), 0.0)
    for name in ("a.md", "b.md"):
        d.add(ev(MV, f"d1/{name}", f"d2/{name}"), 0.0)
    batch = d.due(1.0)
    assert batch is not None
    assert batch.paths == ("d1/a.md", "d2/a.md", "d1/b.md", "d2/b.md")
    assert batch.rescan_dirs == ("d1", "d2")


def test_folder_rescan_waits_for_pending_files_below_it() -> None:
    d = make()
    d.add(ev(C, "d", is_dir=True), 0.0)
    d.add(ev(M, "d/slow.md"), 0.5)  # open writer: due at 3.5
    first = d.due(1.0)
    assert first is None
    deadline = d.next_deadline()
    assert deadline is not None and deadline > 1.0  # no busy loop while blocked
    batch = d.due(3.5)
    assert batch is not None
    assert batch.rescan_dirs == ("d",) and batch.paths == ("d/slow.md",)


def test_folder_delete_is_a_rescan() -> None:
    d = make()
    d.add(ev(D, "d/a.md"), 0.0)
    d.add(ev(D, "d", is_dir=True), 0.0)
    batch = d.due(1.0)
    assert batch is not None
    assert batch.paths == ("d/a.md",)
    assert batch.rescan_dirs == ("d",)


def test_burst_of_many_files_settles_in_one_batch() -> None:
    d = make()
    for i in range(1000):
        d.add(ev(C, f"f/{i:04}.md"), i * 0.0005)
        d.add(ev(CL, f"f/{i:04}.md"), i * 0.0005)
    batch = d.due(2.0)
    assert batch is not None and len(set(batch.paths)) == len(batch.paths) == 1000


def test_moved_event_needs_a_destination() -> None:
    with pytest.raises(ValueError):
        make().add(FsEvent(MV, "a.md"), 0.0)


# -- property: temp-file noise around one real path -----------------------------

REAL = "notes/x.md"
TEMPS = ("notes/x.md~", "notes/4913", "notes/.x.md.swp", "notes/x.md___jb_tmp___")

# One logical save of REAL, as editors do it; each leaves REAL existing.
SAVES: dict[str, list[FsEvent]] = {
    "in_place": [ev(M, REAL), ev(CL, REAL)],
    "truncate_twice": [ev(M, REAL), ev(M, REAL), ev(CL, REAL)],
    "attrib": [ev(A, REAL)],
    "replace": [ev(C, TEMPS[3]), ev(CL, TEMPS[3]), ev(MV, TEMPS[3], REAL)],
    "aside": [ev(MV, REAL, TEMPS[0]), ev(C, REAL), ev(CL, REAL), ev(D, TEMPS[0])],
}
NOISE = st.sampled_from(
    [ev(k, t) for k in (C, M, CL, A, D) for t in TEMPS]
    + [ev(MV, a, b) for a in TEMPS for b in TEMPS if a != b]
)
STEP = st.one_of(
    st.tuples(st.just("save"), st.sampled_from(sorted(SAVES)), st.integers(0, 1500)),
    st.tuples(st.just("noise"), NOISE, st.integers(0, 1500)),
)


def expected_windows(times: list[int], quiet: int, max_delay: int) -> int:
    """Reference model: how many times REAL settles given the times of its saves (ms)."""
    count, first, last = 0, None, None
    for t in times:
        if first is not None and (t >= last + quiet or t >= first + max_delay):
            count += 1
            first = None
        if first is None:
            first = t
        last = t
    return count + (first is not None)


@settings(max_examples=300, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=40))
def test_only_the_real_path_settles_once_per_quiet_window(steps: list[tuple]) -> None:
    quiet, max_delay = 1000, 4000  # milliseconds, integer to keep the model exact
    d = Debouncer(DebounceConfig(quiet, max_delay, quiet, coalesce=50), ignore=IgnoreRules())
    now = 0
    settled: list[SettledBatch] = []
    save_times: list[int] = []
    for what, payload, gap in steps:
        now += gap
        batch = d.due(now)
        if batch is not None:
            settled.append(batch)
        if what == "save":
            save_times.append(now)
            d.add_all(SAVES[payload], now)
        else:
            assert d.add(payload, now) is False
    while (deadline := d.next_deadline()) is not None:
        batch = d.due(deadline)
        if batch is not None:
            settled.append(batch)
    paths = [p for b in settled for p in b.paths]
    assert all(p == REAL for p in paths)
    assert all(not b.rescan_dirs for b in settled)
    assert len(paths) == expected_windows(save_times, quiet, max_delay)


# -- property: applying every batch as it settles keeps a store in step with the disk --

PATHS = ("a.md", "b.md", "d/c.md")
OP = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(PATHS)),
    st.tuples(st.just("delete"), st.sampled_from(PATHS)),
    st.tuples(st.just("rename"), st.sampled_from(PATHS), st.sampled_from(PATHS)),
    st.tuples(st.just("temp_replace"), st.sampled_from(PATHS)),
    st.tuples(st.just("rename_aside"), st.sampled_from(PATHS)),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(OP, st.integers(0, 1500)), min_size=1, max_size=30))
def test_applied_batches_never_lose_an_edit(steps: list[tuple[tuple[str, ...], int]]) -> None:
    """A toy store applies each batch by reading the (model) disk when it arrives.

    Whatever the editors did, once everything settled the store's tree equals the
    disk: no change was lost, and no temp name was ever reported.
    """
    disk: dict[str, int] = {p: i for i, p in enumerate(PATHS)}
    store = dict(disk)
    tokens = itertools.count(100)
    d = Debouncer(DebounceConfig(1000, 4000, 1000, coalesce=0), ignore=IgnoreRules())
    rules = IgnoreRules()

    def apply(batch: SettledBatch | None) -> None:
        if batch is None:
            return
        for path in batch.paths:
            assert not rules(path)
            if path in disk:
                store[path] = disk[path]
            else:
                store.pop(path, None)

    now = 0
    for op, gap in steps:
        now += gap
        apply(d.due(now))
        kind, path = op[0], op[1]
        if kind == "write":
            events = [ev(M, path), ev(CL, path)] if path in disk else [ev(C, path), ev(CL, path)]
            disk[path] = next(tokens)
        elif kind == "delete" and path in disk:
            events = [ev(D, path)]
            del disk[path]
        elif kind == "rename" and path in disk and op[2] != path:
            events = [ev(MV, path, op[2])]
            disk[op[2]] = disk.pop(path)
        elif kind == "temp_replace":
            tmp = path + "___jb_tmp___"
            events = [ev(C, tmp), ev(CL, tmp), ev(MV, tmp, path)]
            disk[path] = next(tokens)
        elif kind == "rename_aside" and path in disk:
            events = [ev(MV, path, path + "~"), ev(C, path), ev(CL, path), ev(D, path + "~")]
            disk[path] = next(tokens)
        else:
            continue
        d.add_all(events, now)
    while (deadline := d.next_deadline()) is not None:
        apply(d.due(deadline))
    assert d.pending_count == 0
    assert store == disk
