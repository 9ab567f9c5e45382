"""Nothing a command does stays in memory for good: a daemon serves agents for weeks.

Commands, reads and editor saves run again and again on notes in folders; any place that
allocates an object per call which then lives on is a leak, however small (pygit2 kept a
reference to every path string it was handed: ~60 bytes a lookup, a daemon's heap growing
by ~1 MB every thousand writes). tracemalloc counts, by where it was made, each object
still alive after the calls: a bounded cache holds at most its bound, a leak one object or
more per call. The counts are taken with the workspace at rest (its index refreshed, its
upkeep done): work a background thread has not done yet is not a leak. A leak grows in each
of two windows of ``CYCLES`` calls; what fills up and then levels off (a cache reaching its
bound, what SQLite keeps) grows in the first only, however loaded the machine.
`MNOTE_LEAK_CYCLES=2000` looks for slower leaks. On the real store: its leaks are the ones
looked for (pygit2, SQLite, the files it reads).
"""

from __future__ import annotations

import gc
import inspect
import os
import tracemalloc

import pytest

from mnoted.store import paths
from tests.service.conftest import PLAN, Harness

WARM = 40
CYCLES = int(os.environ.get("MNOTE_LEAK_CYCLES", "80"))  # calls in each window


@pytest.mark.slow
def test_repeated_commands_keep_nothing_alive(h: Harness) -> None:
    for i in range(3):
        h.write_file(f"notes/sub/p{i}.md", PLAN + "\nmarker A\n")
    h.write_file("notes/sub/edited.md", "# Edited in an editor\n")
    markers = ["A", "A", "A"]

    def cycle(k: int) -> None:
        # A daemon serving more paths than the normalised-path cache holds: every call
        # hands new string objects to the store, as most calls then do.
        paths._normalized.cache_clear()
        i = k % 3
        old, markers[i] = markers[i], "B" if markers[i] == "A" else "A"
        edit = {"operations": [{"search": f"marker {old}", "replace": f"marker {markers[i]}"}]}
        assert h.write("mnote.doc.markdown_edit", documentId=f"notes/sub/p{i}.md", args=edit)["ok"]
        assert h.call("mnote.doc.fetch", documentId=f"notes/sub/p{(k + 1) % 3}.md", args={})["ok"]
        assert h.call("mnote.page.get", documentId=f"notes/sub/p{(k + 2) % 3}.md", args={})["ok"]
        h.write_file("notes/sub/edited.md", f"# Edited in an editor\n\nsave {k % 2}\n")

    for k in range(WARM):
        cycle(k)
    h.ws.idle()
    gc.collect()
    tracemalloc.start(8)
    try:
        snapshots = [tracemalloc.take_snapshot()]
        for window in range(2):
            for k in range(WARM + window * CYCLES, WARM + (window + 1) * CYCLES):
                cycle(k)
            h.ws.idle()
            gc.collect()
            snapshots.append(tracemalloc.take_snapshot())
    finally:
        tracemalloc.stop()
    # Not counted: the checkpointer's work, which follows the clock (a pass every half
    # second), not the calls, and the test's own file writes (an editor's saves); what
    # SQLite and `io.open` keep for them levels off (up to ~140 blocks here, whether after
    # 200 calls or 2,000), yet could pass a bound of CYCLES // 2 on a loaded machine.
    not_calls = [
        tracemalloc.Filter(False, inspect.getsourcefile(Harness) or "", _saves_line(), True),
    ]
    first, middle, last = (s.filter_traces(not_calls) for s in snapshots)
    grew_first = {
        stat.traceback
        for stat in middle.compare_to(first, "traceback")
        if stat.count_diff >= CYCLES // 2
    }
    grown = [
        stat
        for stat in last.compare_to(middle, "traceback")
        if stat.count_diff >= CYCLES // 2 and stat.traceback in grew_first
    ]
    assert not grown, "objects kept alive by every call or two:\n" + "\n\n".join(
        f"+{stat.count_diff} objects, +{stat.size_diff} bytes, made at\n"
        + "\n".join(stat.traceback.format())
        for stat in grown
    )


def _saves_line() -> int:
    """The line of :meth:`Harness.write_file` that writes the file, as an editor would."""
    lines, first = inspect.getsourcelines(Harness.write_file)
    return first + next(i for i, line in enumerate(lines) if ".write_text(" in line)
