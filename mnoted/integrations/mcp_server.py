"""``mnote mcp``: a stdio MCP server exposing the caller's ``mnote.*`` tools.

It lists the tools of the daemon's manifest (enabled ones only, for the caller's token)
under their model-safe names (``mnote_page_get``; a call may use either name), with their
JSON Schemas and annotations mapped to MCP's hints, and forwards each call to the daemon
over its socket. The daemon does every check; this bridge only translates.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from mnoted import __version__
from mnoted.cli.client import Client
from mnoted.contract.envelope import readable_json
from mnoted.contract.tools import lookup
from mnoted.integrations.tooling import agent_schema, split_arguments


def mcp_tools(manifest: dict[str, Any]) -> list[types.Tool]:
    out = []
    for entry in manifest.get("tools", []):
        spec = lookup(entry["name"])
        if spec is None or not entry["availability"]["enabled"]:
            continue
        ann = entry["annotations"]
        out.append(
            types.Tool(
                # the model-safe name: model providers refuse dots in a tool's name, and
                # not every MCP client rewrites them (the title keeps the canonical one)
                name=spec.safe_name,
                title=spec.name,
                description=spec.description,
                input_schema=agent_schema(spec),
                annotations=types.ToolAnnotations(
                    title=spec.name,
                    read_only_hint=ann["readonly"],
                    destructive_hint=ann["destructive"],
                    idempotent_hint=ann["idempotent"],
                    open_world_hint=False,
                ),
            )
        )
    return out


def build_server(client: Client) -> Server[Any]:
    session = f"mcp_{uuid.uuid4().hex[:12]}"

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        status, manifest = await anyio.to_thread.run_sync(client.request, "GET", "/v1/tools")
        if status != 200:
            raise RuntimeError(f"the daemon refused to list tools: {manifest.get('error')}")
        return types.ListToolsResult(tools=mcp_tools(manifest))

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        spec = lookup(params.name)
        arguments = dict(params.arguments or {})
        call_id = uuid.uuid4().hex[:16]
        if spec is None:
            body: dict[str, Any] = {"toolName": params.name, **arguments}
        else:
            envelope, args = split_arguments(spec, arguments)
            body = {
                "toolName": spec.name,
                "sessionId": session,
                "runId": f"run_{call_id}",
                "toolCallId": f"call_{call_id}",
                "traceId": f"trace_{call_id}",
                **({"idempotencyKey": f"idem_{call_id}"} if spec.writes else {}),
                **envelope,
                "args": args,
            }
        _status, response = await anyio.to_thread.run_sync(
            client.request, "POST", "/v1/tools/call", body
        )
        text, escaped = readable_json(response)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            # (the SDK's encoder refuses lone surrogates: then the text alone carries it)
            structured_content=None if escaped else response,
            is_error=not response.get("ok", False),
        )

    return Server(
        "mnoted",
        version=__version__,
        instructions="Markdown notes in a Git workspace. Read with mnote_page_get or "
        "mnote_doc_fetch; edit text with mnote_doc_markdown_edit (dryRun true first to see "
        "the diff).",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve(client: Client) -> None:
    server = build_server(client)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main(client: Client) -> int:
    anyio.run(serve, client)
    return 0
