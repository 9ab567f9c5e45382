"""Composition: what serves one workspace, wired together (:class:`Host`).

A host owns one workspace's :class:`~mnoted.service.Service` and the runner thread
that opens the store and does all its work in order (tool calls, the watcher's
batches, reconciliation, retention, Git housekeeping, the search index), plus the
workspace's remote sync (:mod:`mnoted.host.remote`, ``docs/remote.md``) and any
per-workspace companions started beside them (:class:`Companion`).
The daemon holds a map of hosts and decides which one a call is for.
"""

from mnoted.host.host import Companion, Host, HostShared
from mnoted.host.runner import RunnerConfig, WorkspaceRunner

__all__ = ["Companion", "Host", "HostShared", "RunnerConfig", "WorkspaceRunner"]
