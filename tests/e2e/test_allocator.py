"""The daemon's process keeps glibc from holding freed memory (server.allocator)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# In a process of its own: glibc's threshold moves with what the process freed before.
PROBE = """
import sys
from mnoted.server.allocator import fix_thresholds
if sys.argv[1] == "fixed":
    assert fix_thresholds()
def anon_kb():
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("RssAnon")).split()[1])
merged = b"p" * (16 << 20)  # a merge's pack: mapped, then freed
del merged
before = anon_kb()
next_merge = b"i" * (12 << 20)  # the next merge's, freed while...
kept = b"k" * 1000  # ...something made after it lives on
del next_merge
print(anon_kb() - before)
"""


GLIBC_ONLY = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)


def probe_kb(script: str, mode: str) -> int:
    """What ``script`` prints, run in a fresh process with ``mode`` as its argument."""
    out = subprocess.run(
        [sys.executable, "-c", script, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


@GLIBC_ONLY
def test_a_freed_large_buffer_is_given_back() -> None:
    # glibc's own way: the 12 MB stay with the process
    assert probe_kb(PROBE, "default") >= 11 << 10
    assert probe_kb(PROBE, "fixed") < 1 << 10


TRIM_PROBE = """
import sys
from mnoted.server.allocator import fix_thresholds, give_back
assert fix_thresholds()
def anon_kb():
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("RssAnon")).split()[1])
made = [bytes(2000) for _ in range(40_000)]  # 80 MB of parsed pages, say
kept = made[::8]  # one in eight lives on, here and there on the heap
del made
before = anon_kb()
if sys.argv[1] == "give back":
    assert give_back()
print(before - anon_kb())
"""


@GLIBC_ONLY
def test_free_memory_between_live_objects_is_given_back() -> None:
    # glibc keeps the 70 MB freed under live objects
    assert probe_kb(TRIM_PROBE, "keep") < 2 << 10
    assert probe_kb(TRIM_PROBE, "give back") > 30 << 10
