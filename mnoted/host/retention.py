"""How long the workspace's own records outlive the writes they describe.

A write keeps its answer beside its commit, to replay a retry; a write held for review keeps
its session with the preview (both in ``.git/mnote/state/state.sqlite3``). Kept for ever,
they outgrow the notes' history. Git keeps the writes themselves; these go once nobody can
need them. What is still open (a proposal awaiting its review, a stale or failed one that
can be retried) stays however old it is.
"""

from __future__ import annotations

import logging

from mnoted.service.executor import Service
from mnoted.service.review_sessions import FINISHED, store_of
from mnoted.store import Workspace

log = logging.getLogger(__name__)

DAY = 86_400.0
ANSWER_DAYS = 7
"""An idempotency key's stored answer. A retry comes seconds or minutes after its call; a
later one is still recognized, and answered from its commit (revision, command id)."""
SESSION_DAYS = 30
"""A review session applied, rejected or aborted: ``mnote review list`` shows a month."""
CONTEXT_DAYS = 7
"""A page context frozen for an agent run: a run lasts minutes, a long one hours."""


def forget_old(service: Service, ws: Workspace) -> int:
    """Drop the workspace's records past their time (on its own thread); how many went."""
    now = service.clock()
    answers = ws.idempotency.forget_results(now - ANSWER_DAYS * DAY)
    records = store_of(service, ws).forget(
        FINISHED, now - SESSION_DAYS * DAY, now - CONTEXT_DAYS * DAY
    )
    if answers or records:
        log.info("forgot %d stored answers and %d review records past their time", answers, records)
    return answers + records
