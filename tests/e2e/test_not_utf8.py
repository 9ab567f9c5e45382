"""A page whose bytes are not UTF-8, read through every client: the project's client, the
CLI, the MCP bridge. The daemon sends such bytes as lone surrogates (``\\udcff``), which
pydantic's JSON parser and every UTF-8 writer refuse."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.e2e.conftest import DaemonProcess

LATIN1 = b"# Caf\xe9\n\nna\xefve \xff bytes, and \xe4\xb8\xad (UTF-8)\n"


def _page(daemon: DaemonProcess) -> str:
    (daemon.workspace / "latin.md").write_bytes(LATIN1)
    return "latin.md"


def test_the_client_reads_it(daemon: DaemonProcess) -> None:
    doc = _page(daemon)
    _status, answer = daemon.client().request(
        "POST",
        "/v1/tools/call",
        daemon.client().envelope("mnote.page.get", doc, {"includeBody": True}),
    )
    assert answer["ok"], answer
    assert answer["result"]["title"] == "Caf\udce9"
    assert answer["result"]["body"].encode("utf-8", "surrogateescape") == LATIN1.rstrip(b"\n")


def _mnote(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[bytes]:
    cli = [sys.executable, "-m", "mnoted.cli.main", "--socket", str(daemon.socket)]
    return subprocess.run([*cli, *args], env=daemon.env, capture_output=True, timeout=60)


def test_the_cli_prints_it(daemon: DaemonProcess) -> None:
    """As the file has them, for a person; escaped in JSON, which must stay UTF-8."""
    doc = _page(daemon)
    plain = _mnote(daemon, "page", "get", doc)
    assert plain.returncode == 0, plain.stderr
    assert b"Caf\xe9" in plain.stdout
    as_json = _mnote(daemon, "--json", "page", "get", doc)
    assert as_json.returncode == 0, as_json.stderr
    answer = json.loads(as_json.stdout.decode())  # (strict UTF-8)
    assert answer["ok"] and answer["result"]["title"] == "Caf\udce9"
    assert "中" in as_json.stdout.decode()


def test_the_mcp_bridge_answers_it(daemon: DaemonProcess) -> None:
    doc = _page(daemon)
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "mnoted.integrations.entry",
            "--socket",
            str(daemon.socket),
            "mcp",
            "--as-owner",
        ],
        env=daemon.env,
    )

    async def run() -> object:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await session.call_tool(
                "mnote_page_get", {"documentId": doc, "includeBody": True}
            )

    got = anyio.run(run)
    assert got.is_error is False, got
    answer = json.loads(got.content[0].text)
    assert answer["ok"] and answer["result"]["title"] == "Caf\udce9"
    assert "中" in got.content[0].text  # other text outside ASCII as it is
