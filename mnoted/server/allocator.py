"""The C allocator's handling of large buffers, set once for the daemon's process.

glibc's ``malloc`` serves a request of 128 KB or more with a mapping of its own, returned to
the system when freed, but raises that threshold to the size of each such buffer freed (up
to 32 MB), and the heap's trim threshold to twice that. The daemon's pack merges make
buffers of several MB on their thread; once one is freed, the next ones come from that
thread's heap, which keeps the space for good. Fixed thresholds keep every buffer over 8 MiB
in a mapping of its own, while a 1 MB page's text and its parse (strings of a few MB) stay
on the heap: a lower threshold would map and fault them in afresh at each write of a large
page (``bench/turns.py --page big.md`` compares).

What glibc frees inside its heaps it keeps, page by page, as long as something allocated
later lies above it (``mallinfo2`` counts it; ``bench/memory.py --idle`` shows the heap with
it given back). :func:`give_back` hands those pages back once writes stopped for a while.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable

MMAP_THRESHOLD = 8 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # glibc's own rule, kept
_M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
_M_MMAP_THRESHOLD = -3


def fix_thresholds() -> bool:
    """Set glibc's mmap and trim thresholds for good; False where there is no glibc
    ``mallopt`` (musl's ignores them, macOS has none) or the environment sets them already
    (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, which win)."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def give_back() -> bool:
    """Hand the free pages inside the C heaps back to the system (glibc's ``malloc_trim``);
    False where there is no such call. The daemon calls it after the maintenance that
    follows a stretch of writes, when nobody waits for it."""
    trim = _malloc_trim()
    return trim is not None and bool(trim(0))


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return trim
