"""The C allocator's handling of large buffers, set once for the daemon's process.

glibc's ``malloc`` serves a request of 128 KB or more with a mapping of its own, returned to
the system when freed, but raises that threshold to the size of each such buffer freed (up
to 32 MB), and the heap's trim threshold to twice that. The daemon's pack merges make
buffers of several MB on their thread; once one is freed, the next ones come from that
thread's heap, which keeps the space: the daemon held ~15 MB more after 12,000 writes, for
good (``docs/performance.md``, *Daemon: memory*). Fixed thresholds keep every buffer over
8 MiB in a mapping of its own, while a 1 MB page's text and its parse (2-4 MB strings)
stay on the heap as before: measured in turns, writes of 10 KB and 1 MB pages took as long
either way.
"""

from __future__ import annotations

import ctypes
import os

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
