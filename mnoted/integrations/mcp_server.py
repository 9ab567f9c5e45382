"""``mnote mcp``: a stdio MCP server exposing the caller's ``mnote.*`` tools.

It lists the tools of the daemon's manifest that the caller's token may use (enabled
ones only) under their model-safe names (``mnote_page_get``; a call may use either name),
with the schema a model fills in (:func:`~mnoted.integrations.tooling.agent_schema`) and
annotations mapped to MCP's hints, and forwards each call to the daemon over its socket
in the nested form. The daemon does every check; this bridge only translates.

It runs on the MCP SDK's 1.x server API (``mcp`` 1.26, which hermes-agent pins) and on
its 2.x API alike: the types are built from their wire (camelCase) form, which both
accept, and the handlers are attached the way the installed version takes them.
"""

from __future__ import annotations

import inspect
import uuid
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from mnoted import __version__
from mnoted.client.client import Client
from mnoted.contract.envelope import readable_json
from mnoted.contract.tools import lookup
from mnoted.integrations.tooling import agent_schema, call_body

INSTRUCTIONS = (
    "Markdown notes in a Git workspace. Read with mnote_page_get or mnote_doc_fetch; edit "
    "text with mnote_doc_markdown_edit (dryRun true first to see the diff)."
)
_NEW_API = "on_call_tool" in inspect.signature(Server.__init__).parameters


def mcp_tools(manifest: dict[str, Any]) -> list[types.Tool]:
    out = []
    for entry in manifest.get("tools", []):
        spec = lookup(entry["name"])
        if spec is None or not entry["availability"]["enabled"]:
            continue
        ann = entry["annotations"]
        out.append(
            types.Tool.model_validate(
                {
                    # the model-safe name: model providers refuse dots in a tool's name, and
                    # not every MCP client rewrites them (the title keeps the canonical one)
                    "name": spec.safe_name,
                    "title": spec.name,
                    "description": spec.description,
                    "inputSchema": agent_schema(spec),
                    "annotations": {
                        "title": spec.name,
                        "readOnlyHint": ann["readonly"],
                        "destructiveHint": ann["destructive"],
                        "idempotentHint": ann["idempotent"],
                        "openWorldHint": False,
                    },
                }
            )
        )
    return out


def _runtime_call_id(meta: Any) -> str | None:
    """The host's own id of a tool call, where it sends one in the request's ``_meta``."""
    if meta is None:
        return None
    fields = meta if isinstance(meta, dict) else (getattr(meta, "model_extra", None) or {})
    for name in ("toolCallId", "tool_call_id", "callId"):
        value = fields.get(name)
        if isinstance(value, str) and 0 < len(value) <= 200:
            return value
    return None


class Bridge:
    """The two things the bridge does, whatever the SDK's API: list tools, call one."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.session = f"mcp_{uuid.uuid4().hex[:12]}"

    async def list_tools(self) -> list[types.Tool]:
        status, manifest = await anyio.to_thread.run_sync(self.client.request, "GET", "/v1/tools")
        if status != 200:
            raise RuntimeError(f"the daemon refused to list tools: {manifest.get('error')}")
        return mcp_tools(manifest)

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None, meta: Any = None
    ) -> types.CallToolResult:
        spec = lookup(name)
        given = dict(arguments or {})
        if spec is None:
            body: dict[str, Any] = {"toolName": name, "args": given}
        else:
            body = call_body(spec, given, session=self.session, tool_call_id=_runtime_call_id(meta))
        _status, response = await anyio.to_thread.run_sync(
            self.client.request, "POST", "/v1/tools/call", body
        )
        text, escaped = readable_json(response)
        return types.CallToolResult.model_validate(
            {
                "content": [{"type": "text", "text": text}],
                # (the SDK's encoder refuses lone surrogates: then the text alone carries it)
                "structuredContent": None if escaped else response,
                "isError": not response.get("ok", False),
            }
        )


def build_server(client: Client) -> Server[Any]:
    bridge = Bridge(client)
    if _NEW_API:

        async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=await bridge.list_tools())

        async def on_call_tool(ctx: Any, params: Any) -> types.CallToolResult:
            return await bridge.call_tool(params.name, params.arguments, params.meta)

        return Server(
            "mnoted",
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
        )
    server: Any = Server("mnoted", version=__version__, instructions=INSTRUCTIONS)

    @server.list_tools()  # type: ignore[untyped-decorator,unused-ignore]
    async def list_tools() -> list[types.Tool]:
        return await bridge.list_tools()

    # the daemon checks the arguments and says what is wrong in its own error
    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator,unused-ignore]
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        meta = getattr(server.request_context, "meta", None)
        return await bridge.call_tool(name, arguments, meta)

    return server  # type: ignore[no-any-return]


async def serve(client: Client) -> None:
    server = build_server(client)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main(client: Client) -> int:
    anyio.run(serve, client)
    return 0
