"""The Git-backed workspace store: one command, one commit; commit hashes are revisions.

See ``docs/store.md`` for the on-disk layout, the commit format, the journal and the lock
policy. The service layer uses a workspace through :class:`WorkspaceApi` (which :class:`Workspace`
implements) and the value types below.
"""

from mnoted.store.api import WorkspaceApi
from mnoted.store.config import WorkspaceConfig
from mnoted.store.facades import BlockIds, Grants, Idempotency, IdEntries
from mnoted.store.maintenance import Maintainer, PackReport
from mnoted.store.model import (
    Change,
    CommandMeta,
    CommandRecord,
    CommitResult,
    Delete,
    DocRef,
    HistoryEntry,
    IdempotencyRecord,
    Identity,
    Move,
    Write,
)
from mnoted.store.paths import TEMP_PREFIX, check_new_name, is_internal, normalize
from mnoted.store.reviews import ReviewStore
from mnoted.store.template import template_files
from mnoted.store.workspace import Workspace

__all__ = [
    "TEMP_PREFIX",
    "BlockIds",
    "Change",
    "CommandMeta",
    "CommandRecord",
    "CommitResult",
    "Delete",
    "DocRef",
    "Grants",
    "HistoryEntry",
    "IdEntries",
    "Idempotency",
    "IdempotencyRecord",
    "Identity",
    "Maintainer",
    "Move",
    "PackReport",
    "ReviewStore",
    "Workspace",
    "WorkspaceApi",
    "WorkspaceConfig",
    "Write",
    "check_new_name",
    "is_internal",
    "normalize",
    "template_files",
]
