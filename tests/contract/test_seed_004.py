"""Seed 004 (block editor AI/CLI tool contract v0), section by section, through the socket:
the input header kept in the audit and the commit (§4, §6), the CLI aligned (§7)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.contract.conftest import PLAN, call, started, trailers, write
from tests.e2e.conftest import DaemonProcess

FILES = {"header.md": PLAN, "cli.md": PLAN, "named.md": PLAN}


@pytest.fixture(scope="module")
def d() -> Iterator[DaemonProcess]:
    yield from started(FILES, workspaces=2)  # (§4's workspace_id: a daemon serving two)


def _ids(d: DaemonProcess, page: str, workspace_id: str) -> dict[str, str]:
    got = call(d.client(), "mnote.page.get", documentId=page, workspaceId=workspace_id)
    assert got["ok"], got["error"]
    return {b.get("text", ""): b["id"] for b in got["result"]["blocks"]}


@pytest.fixture(scope="module")
def workspace_id(d: DaemonProcess) -> str:
    _, body = d.client().request("GET", "/v1/workspaces")
    return next(str(w["workspaceId"]) for w in body["workspaces"] if w["root"].endswith("notes"))


def test_s4_input_header_is_kept_in_audit_and_commit_trailers(
    d: DaemonProcess, workspace_id: str
) -> None:
    """§4's header in its own names (``document_id``, ``request_id``, ``actor_type``,
    ``reason``); §6 lists what each command records."""
    target = _ids(d, "header.md", workspace_id)["Ship on Monday."]
    resp = write(
        d.client(),
        "mnote.doc.apply_block_ops",
        workspace_id=workspace_id,
        document_id="header.md",
        request_id="req_42",
        actor_type="AI",
        reason="the date moved",
        operations=[{"command": "replace_block", "block_id": target, "block": "Ship on Tuesday."}],
    )
    assert resp["ok"], resp["error"]
    audit = resp["audit"]
    assert (audit["requestId"], audit["actorType"], audit["reason"]) == (
        "req_42",
        "AI",
        "the date moved",
    )
    assert audit["targetBlockId"] == target and audit["changedBlockIds"] == [target]
    assert audit["commandName"] and audit["documentId"] and audit["actorId"] == "owner"
    kept = trailers(d, resp["result"]["revision"])
    assert kept["Mnote-Request-Id"] == ["req_42"]
    assert kept["Mnote-Actor-Type"] == ["AI"]
    assert kept["Mnote-Reason"] == ["the date moved"]
    assert kept["Mnote-Target-Block-Id"] == [target]
    assert kept["Mnote-Trace-Id"] == [resp["traceId"]]


def test_s4_workspace_id_names_the_workspace(d: DaemonProcess, workspace_id: str) -> None:
    """With several workspaces served, ``workspace_id`` alone names one, as ``workspaceId``."""
    unnamed = call(d.client(), "mnote.page.get", documentId="named.md")
    assert unnamed["error"]["code"] == "mnote_tool_invalid_arguments"
    named = call(d.client(), "mnote.page.get", workspace_id=workspace_id, document_id="named.md")
    assert named["ok"], named["error"]
    assert named["result"]["workspaceId"] == workspace_id
    assert named["audit"]["workspaceId"] == workspace_id


def test_s7_cli_in_a_workspace_folder_calls_that_workspace(
    d: DaemonProcess, workspace_id: str
) -> None:
    """Without ``--workspace-id`` the CLI calls the workspace the current folder is in,
    found from the brief listing (ids and roots only, no workspace's thread asked)."""
    _, full = d.client().request("GET", "/v1/workspaces")
    status, brief = d.client().request("GET", "/v1/workspaces?brief=true")
    assert status == 200
    assert brief["workspaces"] == [
        {"workspaceId": w["workspaceId"], "root": w["root"]} for w in full["workspaces"]
    ]
    agent = d.agent_token("brief_reader", "page.read")
    [mine] = d.client(agent).request("GET", "/v1/workspaces?brief=true")[1]["workspaces"]
    assert mine == {"workspaceId": workspace_id, "root": None}
    here = d.workspace / "sub"
    here.mkdir(exist_ok=True)
    cli = [sys.executable, "-m", "mnoted.cli.main", "--socket", str(d.socket)]
    ran = subprocess.run(
        [*cli, "--json", "page", "get", "named.md"],
        env=d.env,
        cwd=here,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["result"]["workspaceId"] == workspace_id


def test_s7_cli_takes_reason_and_trace_id(d: DaemonProcess, workspace_id: str) -> None:
    target = _ids(d, "cli.md", workspace_id)["Test on Friday."]
    ran = d.cli(
        "--json",
        "--workspace-id",
        workspace_id,
        "editor",
        "replace_block",
        "cli.md",
        "--block-id",
        target,
        "--block",
        "Test on Saturday.",
        "--reason",
        "the lab is closed",
        "--trace-id",
        "trace_cli_1",
    )
    assert ran.returncode == 0, ran.stderr
    resp = json.loads(ran.stdout)
    assert resp["traceId"] == "trace_cli_1"
    assert resp["audit"]["reason"] == "the lab is closed"
    assert resp["audit"]["actorType"] == "cli"
    kept = trailers(d, resp["result"]["revision"])
    assert kept["Mnote-Trace-Id"] == ["trace_cli_1"]
    assert kept["Mnote-Reason"] == ["the lab is closed"]
    assert "Test on Saturday." in (d.workspace / "cli.md").read_text()
