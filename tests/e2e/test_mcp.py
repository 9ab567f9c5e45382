"""The MCP bridge, driven by the MCP SDK's own client against a live daemon."""

from __future__ import annotations

import json
import re
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.e2e.conftest import DaemonProcess


async def _session_run(daemon: DaemonProcess, work) -> object:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mnoted.cli.main", "--socket", str(daemon.socket), "mcp"],
        env=daemon.env,
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await work(session)


def test_mcp_lists_tools_and_calls_a_read_and_a_write(daemon: DaemonProcess) -> None:
    async def work(session: ClientSession) -> dict:
        listed = await session.list_tools()
        names = {t.name: t for t in listed.tools}
        got = await session.call_tool("mnote_page_get", {"documentId": "plan.md"})
        wrote = await session.call_tool(
            "mnote.doc.markdown_edit",
            {
                "documentId": "plan.md",
                "dryRun": False,
                "operations": [{"search": "Monday", "replace": "Sunday"}],
            },
        )
        bad = await session.call_tool("mnote.page.get", {"documentId": "missing.md"})
        return {"names": names, "got": got, "wrote": wrote, "bad": bad}

    out = anyio.run(_session_run, daemon, work)
    names = out["names"]
    # listed under names model providers take ([A-Za-z0-9_-]{1,64}), titled canonically
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in names)
    assert names["mnote_page_get"].title == "mnote.page.get"
    assert names["mnote_page_get"].annotations.read_only_hint is True
    assert names["mnote_page_delete"].annotations.destructive_hint is True
    schema = names["mnote_doc_markdown_edit"].input_schema
    assert "operations" in schema["required"] and "dryRun" in schema["required"]
    assert "toolCallId" not in schema["required"]
    got = json.loads(out["got"].content[0].text)
    assert got["ok"] and got["result"]["title"] == "Plan"
    wrote = out["wrote"].structured_content
    assert wrote["ok"] and out["wrote"].is_error is False
    assert (
        daemon.git("log", "-1", "--format=%(trailers:key=Mnote-Command-Id,valueonly)").strip()
        == wrote["audit"]["commandId"]
    )
    assert "Sunday" in (daemon.workspace / "plan.md").read_text()
    assert out["bad"].is_error is True
