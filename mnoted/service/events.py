"""Events the service publishes (commits, external edits, review changes) for the event stream."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

Listener = Callable[[dict[str, Any]], None]


class EventBus:
    """Fan-out of events to listeners; a failing listener never stops the others."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()
        self._seq = itertools.count(1)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def publish(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"id": next(self._seq), "type": kind, "time": time.time(), **fields}
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                continue
        return event
