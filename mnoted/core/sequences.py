"""How much two long sequences share at their start or at their end, compared in C.

A page's versions share almost all their lines (and block ids): a chunk of items at a time
is compared as one slice (the comparison runs in C, and items a change left alone are the
very same objects), the chunk shrinking inside the first one that differs. A one-line edit
of a 1 MB page costs about one pass over its 23,500 lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def shared(
    a: Sequence[Any], b: Sequence[Any], limit: int, *, forward: bool = True, start: int = 0
) -> int:
    """Items equal from the start (or, not ``forward``, the end) of both, at most ``limit``;
    the first ``start`` of them are known equal."""
    na, nb = len(a), len(b)

    def same(k: int, size: int) -> bool:  # the ``size`` items after the first ``k`` agree
        if forward:
            return a[k : k + size] == b[k : k + size]
        return a[na - k - size : na - k] == b[nb - k - size : nb - k]

    k, chunk = start, 1024
    while k < limit:
        size = min(chunk, limit - k)
        if same(k, size):
            k += size
        elif size == 1:
            break
        else:
            chunk = max(1, size // 16)
    return k


def shared_ends(a: Sequence[Any], b: Sequence[Any]) -> tuple[int, int]:
    """How many items ``a`` and ``b`` share at their start, then at their end (the two
    never overlap)."""
    n = min(len(a), len(b))
    head = shared(a, b, n)
    return head, shared(a, b, n - head, forward=False)
