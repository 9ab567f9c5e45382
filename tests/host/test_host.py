"""A host serves one workspace: its own service, its runner, and its companions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mnoted.host import Host, HostShared, RunnerConfig
from mnoted.service import Actor, Service
from mnoted.store import Workspace

GET = {
    "toolName": "mnote.page.get",
    "documentId": "a.md",
    "sessionId": "s",
    "runId": "r",
    "toolCallId": "c",
    "traceId": "t",
}


class Recorder:
    """A companion that notes what it saw of the workspace when started and stopped."""

    def __init__(self, host: Host, log: list[str]) -> None:
        self.host, self.log = host, log

    def start(self) -> None:
        self.log.append(f"start head={self._head()}")

    def stop(self) -> None:
        self.log.append(f"stop head={self._head()}")

    def _head(self) -> bool:
        """Whether the workspace answers on its own thread (open, its runner running)."""
        return self.host.submit(
            lambda: self.host.ws is not None and bool(self.host.ws.head)
        ).result(timeout=30)


def make_workspace(root: Path) -> None:
    Workspace.init(root).close()
    (root / "a.md").write_text("# A\n\nfirst\n")


def test_companions_run_while_the_workspace_is_open(tmp_path: Path) -> None:
    make_workspace(tmp_path / "ws")
    log: list[str] = []
    host = Host(
        tmp_path / "ws",
        RunnerConfig(watch=False),
        companions=[lambda h: Recorder(h, log)],
    )
    host.start()
    try:
        assert log == ["start head=True"]
        answer = json.loads(host.submit_call(GET, Actor.owner()).result(timeout=30))
        assert answer["ok"], answer
        assert answer["audit"]["workspaceId"] == host.workspace_id
    finally:
        host.stop()
    assert log == ["start head=True", "stop head=True"]
    assert host.companions == []


def test_each_workspace_has_its_own_service_sharing_the_caches(tmp_path: Path) -> None:
    """Two hosts of one daemon: each service serves its own workspace and refuses a call
    that names the other, while the page cache and the event bus are one."""
    shared = HostShared()
    hosts = []
    for name in ("a", "b"):
        make_workspace(tmp_path / name)
        host = Host(tmp_path / name, RunnerConfig(watch=False), shared=shared)
        host.start()
        hosts.append(host)
    a, b = hosts
    try:
        assert a.service is not b.service
        assert a.service.pages is b.service.pages and a.service.events is shared.events
        assert a.workspace_id != b.workspace_id
        other = {**GET, "workspaceId": b.workspace_id}
        answer = json.loads(a.submit_call(other, Actor.owner()).result(timeout=30))
        assert answer["error"]["code"] == "mnote_tool_permission_denied", answer
        mine = {**GET, "workspaceId": a.workspace_id}
        assert json.loads(a.submit_call(mine, Actor.owner()).result(timeout=30))["ok"]
        assert b.ws is not None
        with pytest.raises(ValueError):
            a.service.add(b.ws)  # one service, one workspace
    finally:
        for host in hosts:
            host.stop()


def test_a_service_serves_no_call_before_its_workspace(tmp_path: Path) -> None:
    answer = Service().call(GET, Actor.owner())
    assert not answer["ok"] and answer["error"]["code"] == "mnote_internal_error", answer
