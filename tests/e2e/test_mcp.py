"""The MCP bridge, driven by the MCP SDK's own client against a live daemon, set up as the
README's MCP section says: ``mnote mcp`` started by the host with the SDK's default
environment (no ``XDG_RUNTIME_DIR``, no ``MNOTED_SOCKET``) plus ``MNOTE_TOKEN``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client

from mnoted.contract.tools import TOOLS
from mnoted.locations import default_socket_path
from tests.e2e.conftest import DaemonProcess, running_daemon
from tests.e2e.every_tool import drive, report

MNOTE = Path(sys.executable).parent / "mnote"  # the console script pip installed
README = Path(__file__).resolve().parents[2] / "README.md"


def readme_mcp_config() -> dict[str, Any]:
    """The MCP host configuration the README gives (its first ``json`` block under MCP)."""
    text = README.read_text(encoding="utf-8").split("### MCP\n", 1)[1]
    block = re.search(r"```json\n(.*?)```", text, re.S)
    assert block is not None, "the README's MCP section has no json configuration"
    return dict(json.loads(block.group(1))["mcpServers"]["mnote"])


def host_params(daemon: DaemonProcess, token: str | None, mnote: Path = MNOTE) -> Any:
    """What an SDK-based host starts: the README's command, the SDK's default environment,
    HOME the user's, and the configuration's ``env`` with the token filled in."""
    config = readme_mcp_config()
    assert config["command"] == "mnote" and config["args"] == ["mcp"], config
    env = {**get_default_environment(), "HOME": daemon.env["HOME"]}
    for key, value in config.get("env", {}).items():
        if token is not None:
            env[key] = token if key == "MNOTE_TOKEN" else value
    return StdioServerParameters(command=str(mnote), args=config["args"], env=env)


def every_tool(daemon: DaemonProcess, token: str | None, mnote: Path = MNOTE) -> dict[str, Any]:
    """List the tools through the bridge, then drive every one listed (the driver runs in a
    thread; each of its calls goes through the SDK client on the event loop)."""

    async def work() -> dict[str, Any]:
        params = host_params(daemon, token, mnote)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = [wire(t) for t in (await session.list_tools()).tools]
            schemas = {t["name"]: t["inputSchema"] for t in listed}
            raw: dict[str, Any] = {}

            def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
                result = wire(anyio.from_thread.run(session.call_tool, name, arguments))
                raw[name] = result
                answer = json.loads(result["content"][0]["text"])
                assert result.get("isError") is (not answer["ok"]), (name, answer)
                return dict(answer)

            results = await anyio.to_thread.run_sync(drive, call, schemas)
            return {"tools": listed, "results": results, "raw": raw}

    return anyio.run(work)


@pytest.fixture
def desktop_daemon() -> Iterator[DaemonProcess]:
    """A daemon listening where `make run` and the systemd unit put it: the default socket
    under ``$XDG_RUNTIME_DIR``, which an MCP host's environment does not carry."""

    def default_socket(d: DaemonProcess) -> None:
        d.socket = default_socket_path({"XDG_RUNTIME_DIR": d.env["XDG_RUNTIME_DIR"]})
        d.env.pop("MNOTED_SOCKET")

    with running_daemon(setup=default_socket) as d:
        yield d


def test_every_tool_is_usable_through_the_mcp_sdk_as_the_readme_sets_it_up(
    desktop_daemon: DaemonProcess,
) -> None:
    daemon = desktop_daemon
    out = every_tool(daemon, daemon.owner_token())
    tools = {t["name"]: t for t in out["tools"]}
    offered = sorted(tools)
    assert len(offered) == len(TOOLS), offered
    assert report(out["results"], offered) == f"{len(offered)}/{len(offered)} usable"
    # listed under names model providers take ([A-Za-z0-9_-]{1,64}), titled canonically
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in offered)
    assert tools["mnote_page_get"]["title"] == "mnote.page.get"
    assert tools["mnote_page_get"]["annotations"]["readOnlyHint"] is True
    assert tools["mnote_page_delete"]["annotations"]["destructiveHint"] is True
    # what the model fills in: the tool's arguments, the page, the write flags; no ids
    edit = tools["mnote_doc_markdown_edit"]["inputSchema"]
    assert set(edit["properties"]) == {
        "documentId",
        "operations",
        "allowedTargetBlockIds",
        "dryRun",
        "baseRevision",
    }
    assert edit["required"] == ["documentId", "operations"]
    assert set(tools["mnote_review_get"]["inputSchema"]["properties"]) == {"sessionId"}
    for tool in out["tools"]:
        for name, prop in tool["inputSchema"]["properties"].items():
            assert prop.get("description"), f"{tool['name']}.{name} has no description"
    # the review accepted through the bridge: one commit, made in the bridge's session
    accepted = out["results"]["mnote_review_accept"]["result"]
    trailers = daemon.git(
        "log",
        "-1",
        "--format=%(trailers:key=Mnote-Review-Session,valueonly)|"
        "%(trailers:key=Mnote-Session-Id,valueonly)",
        accepted["applied"]["commit"],
    ).strip()
    assert re.fullmatch(rf"{accepted['sessionId']}\s*\|mcp_\w+", trailers), trailers
    (page,) = (daemon.workspace / "agent").glob("plan-*.md")
    assert "- first" in page.read_text() and "Sunday" in page.read_text()
    assert out["raw"]["mnote_page_get"]["structuredContent"]["ok"] is True


def test_an_agent_token_is_offered_only_what_it_may_use(daemon: DaemonProcess) -> None:
    token = daemon.agent_token("claude", "page.write")
    out = every_tool(daemon, token)
    offered = sorted(t["name"] for t in out["tools"])
    assert "mnote_review_accept" not in offered and "mnote_review_reject" not in offered
    assert "mnote_artifact_create_summary" not in offered  # (needs artifact.write)
    assert "mnote_page_create" in offered
    assert report(out["results"], offered) == f"{len(offered)}/{len(offered)} usable"
    author = daemon.git("log", "-1", "--format=%an").strip()
    assert author == "claude"


def test_the_bridge_needs_a_token_or_an_explicit_owner_flag(daemon: DaemonProcess) -> None:
    params = host_params(daemon, None)
    refused = subprocess.run(
        [params.command, *params.args], env=params.env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2 and "MNOTE_TOKEN" in refused.stderr
    assert "owner.token" not in refused.stderr + refused.stdout

    async def start() -> Any:
        as_owner = StdioServerParameters(
            command=params.command, args=["mcp", "--as-owner"], env=params.env
        )
        async with stdio_client(as_owner) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await session.list_tools()

    assert len(anyio.run(start).tools) == len(TOOLS)


def wire(value: Any) -> dict[str, Any]:
    """An SDK object in its wire (camelCase) form: the same under mcp 1.x and 2.x."""
    return dict(value.model_dump(mode="json", by_alias=True, exclude_none=True))


def test_a_retried_call_with_the_hosts_call_id_is_written_once(daemon: DaemonProcess) -> None:
    token = daemon.agent_token("claude", "page.write")
    edit = {"documentId": "plan.md", "operations": [{"search": "Monday", "replace": "Friday"}]}

    async def work() -> list[dict[str, Any]]:
        params = host_params(daemon, token)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            out = []
            for _ in range(2):  # the host retries the call it sent: same id, same arguments
                result = await session.call_tool(
                    "mnote_doc_markdown_edit", edit, meta={"toolCallId": "toolu_01"}
                )
                out.append(json.loads(wire(result)["content"][0]["text"]))
            return out

    head = daemon.git("rev-parse", "HEAD").strip()
    first, again = anyio.run(work)
    assert first["ok"] and again["ok"], (first, again)
    assert again["audit"]["replayed"] is True
    assert again["audit"]["commandId"] == first["audit"]["commandId"]
    assert daemon.git("rev-list", "--count", f"{head}..HEAD").strip() == "1"


def test_a_boolean_given_as_text_is_refused_through_the_bridge(daemon: DaemonProcess) -> None:
    token = daemon.agent_token("claude", "page.write")

    async def work() -> list[dict[str, Any]]:
        params = host_params(daemon, token)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            calls = [
                (
                    "mnote_page_update_title",
                    {"documentId": "plan.md", "title": "X", "dryRun": "no"},
                ),
                (
                    "mnote_page_update_options",
                    {"documentId": "plan.md", "options": {"showToc": "yes"}},
                ),
            ]
            out = []
            for name, arguments in calls:
                result = await session.call_tool(name, arguments)
                out.append(json.loads(wire(result)["content"][0]["text"]))
            return out

    head = daemon.git("rev-parse", "HEAD").strip()
    title, options = anyio.run(work)
    assert title["error"]["code"] == "mnote_tool_invalid_arguments"
    assert title["error"]["message"].startswith("dryRun:")
    assert options["error"]["code"] == "mnote_tool_invalid_arguments"
    assert options["error"]["message"].startswith("options.showToc:")
    assert daemon.git("rev-parse", "HEAD").strip() == head
