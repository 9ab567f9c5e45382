"""Narrow handles the service layer uses for idempotency records and its sidecar cache."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from mnoted.errors import IdempotencyConflict, NotFound
from mnoted.store.model import IdempotencyRecord, scoped_key
from mnoted.store.sidecar import Sidecar


class Idempotency:
    """Idempotency records: (actor, key) → request fingerprint, commit and (when stored) result.

    A key belongs to the actor that sent it: another actor's records are never found, so
    nothing in an answer reveals them and two agents picking the same key do not collide.
    """

    def __init__(self, side: Sidecar, before: Callable[[], object]) -> None:
        self._side = side
        self._before = before  # checks the calling thread and catches up with HEAD

    def lookup(self, key: str, actor: str) -> IdempotencyRecord | None:
        self._before()
        rec = self._side.idempotency(scoped_key(actor, key))
        return None if rec is None else replace(rec, key=key)

    def check(self, key: str, request_hash: str | None, actor: str) -> IdempotencyRecord | None:
        """``actor``'s record for the same request, None if new; a different request raises."""
        rec = self.lookup(key, actor)
        if rec is not None and rec.request_hash != request_hash:
            raise IdempotencyConflict(
                f"idempotency key {key!r} was already used for a different request",
                key=key,
                commit=rec.commit,
            )
        return rec

    def forget_results(self, before: float) -> int:
        """Drop the stored answers of commands committed before ``before`` (Unix time)."""
        self._before()
        return self._side.forget_results(int(before))

    def record(self, key: str, request_hash: str | None, result_json: str, actor: str) -> None:
        """Store the result to replay for ``actor``'s ``key`` (its command is committed)."""
        self._before()
        if self._side.set_result(scoped_key(actor, key), request_hash, result_json):
            return
        if self.check(key, request_hash, actor) is None:  # (a different request raises)
            raise NotFound(f"no committed command has idempotency key {key!r}", key=key)


class KeyValue:
    """A small cache other layers keep in the sidecar (e.g. block ids per blob id).

    Its content must be derivable (it is kept, not recomputed, by :meth:`Workspace.rebuild`).
    """

    def __init__(self, side: Sidecar, before: Callable[[], object]) -> None:
        self._side = side
        self._before = before  # checks the calling thread

    def get(self, namespace: str, key: str) -> str | None:
        self._before()
        return self._side.kv_get(namespace, key)

    def put(self, namespace: str, key: str, value: str) -> None:
        self._before()
        self._side.kv_put(namespace, key, value)

    def put_many(self, items: Sequence[tuple[str, str, str]]) -> None:
        """:meth:`put` of several ``(namespace, key, value)`` at once (one statement)."""
        self._before()
        self._side.kv_put_many(items)

    def delete(self, namespace: str, key: str) -> None:
        self._before()
        self._side.kv_delete(namespace, key)
