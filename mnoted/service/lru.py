"""A map that forgets its least recently used entries past a count and a total weight.

Shared by the daemon's workspace threads (the parsed pages, the id lists kept in memory):
every access takes its lock. It keeps its newest entry whatever that weighs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Bounded(Generic[K, V]):
    """At most ``count`` entries and ``weight`` in all, as ``weigh`` counts an entry."""

    def __init__(self, count: int, weight: int, weigh: Callable[[V], int]) -> None:
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._count, self._weight, self._weigh = count, weight, weigh
        self._held = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._held -= self._weigh(old)
            self._entries[key] = value
            self._held += self._weigh(value)
            while len(self._entries) > 1 and (
                len(self._entries) > self._count or self._held > self._weight
            ):
                _, dropped = self._entries.popitem(last=False)
                self._held -= self._weigh(dropped)
