"""Answers of page reads kept for the daemon's event loop, valid while their page is unchanged.

A read of a cached 10 KB page cost 6-11 socket round trips: the call crossed to the
workspace's thread and back, the page was checked against HEAD, and 28 KB of blocks were
built, validated and encoded, every time. Tools declared ``cached`` (their answer depends
only on the caller, the arguments and one document as HEAD has it) keep their encoded
answer here, and the event loop answers the same call again without leaving its thread
while all of these still hold:

- the branch is where it was (:func:`mnoted.store.refs.stamp`: Git replaces a ref by
  renaming, so any commit, checkout or reset changes it);
- the page's file has the stat data it had when it was last hashed and found equal to
  HEAD, by a hash taken once the file had been quiet for a timestamp tick (the store's
  :mod:`~mnoted.store.statcache` rule), so an edit saved in an editor is never missed;
- the same caller (token, scopes, grants) asks with the same arguments, and the tool is
  still enabled.

An answer is kept only when it was computed on the branch itself, not on commits of a group
still waiting to land. Everything the envelope echoes (``toolCallId``, ``traceId``) comes
from the new call; the call is validated as every call is.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from mnoted.contract.envelope import wire_bytes
from mnoted.service.actors import Actor
from mnoted.store.statcache import Key

LIMIT = 512
BYTES = 64 << 20
"""Kept answers in all, by count and by size (a 1 MB page's answer is about 3 MB)."""


@dataclass(frozen=True)
class Answer:
    """One kept answer and what must still hold for it to be given again."""

    basis: tuple[object, Key]  # Workspace.read_basis: the refs stamp, the file's stat key
    path: str  # the page's file
    body: bytes  # '"result": ..., "audit": ...' of the envelope, as sent


def request_key(tool: str, workspace_id: str, document: str, args: Any) -> str:
    """What makes two calls of one caller the same question (the call's own ids left out)."""
    return json.dumps([tool, workspace_id, document, args], sort_keys=True, default=str)


def encode(result: dict[str, Any], audit: dict[str, Any]) -> bytes:
    return b'"result":%s,"audit":%s,"error":null' % (wire_bytes(result), wire_bytes(audit))


def envelope(tool: str, tool_call_id: str | None, trace_id: str | None, body: bytes) -> bytes:
    """The response envelope of a kept answer (the fields of ``ToolResponse``, in order)."""
    head = wire_bytes(
        {"ok": True, "toolName": tool, "toolCallId": tool_call_id, "traceId": trace_id}
    )
    return b"%s,%s}" % (head[:-1], body)


class ReadCache:
    """Kept answers by (actor, request key); written by workspace threads, read by the loop."""

    def __init__(self, limit: int = LIMIT, size: int = BYTES) -> None:
        self._answers: OrderedDict[tuple[Actor, str], Answer] = OrderedDict()
        self._limit, self._size = limit, size
        self._kept = 0  # characters of the kept bodies
        self._lock = threading.Lock()

    def get(self, actor: Actor, key: str) -> Answer | None:
        return self._answers.get((actor, key))

    def put(self, actor: Actor, key: str, answer: Answer) -> None:
        if len(answer.body) > self._size // 8:
            return  # a page that large is answered afresh each time
        with self._lock:
            old = self._answers.pop((actor, key), None)
            self._kept += len(answer.body) - (len(old.body) if old else 0)
            self._answers[(actor, key)] = answer
            while len(self._answers) > self._limit or self._kept > self._size:
                _, dropped = self._answers.popitem(last=False)
                self._kept -= len(dropped.body)
