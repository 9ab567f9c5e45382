"""The MCP filesystem server as a comparison for bench/daemon.py.

`@modelcontextprotocol/server-filesystem` is what a user would otherwise give an agent to
edit notes: an MCP stdio server whose `edit_file` writes a temporary file and renames it
over the original (no fsync, no history). It is installed with npm into a cache folder
outside the repository (`~/.cache/mnoted-bench/node`, or under `$XDG_CACHE_HOME`), once,
and driven with the `mcp` SDK's stdio client, one asyncio loop per comparison.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

PACKAGE = "@modelcontextprotocol/server-filesystem"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mnoted-bench" / "node"
PACKAGE_DIR = CACHE / "node_modules" / "@modelcontextprotocol" / "server-filesystem"


class Server:
    """An installed server: the node binary, its entry script and its version."""

    def __init__(self, node: str, entry: Path, version: str) -> None:
        self.node = node
        self.entry = entry
        self.version = version


def install() -> Server | str:
    """The server, installed into the cache folder if it is not there yet; or why not."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        return "npm or node not found on PATH"
    manifest = PACKAGE_DIR / "package.json"
    if not manifest.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(
                [npm, "install", "--prefix", str(CACHE), "--no-audit", "--no-fund", PACKAGE],
                capture_output=True,
                text=True,
                timeout=600,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"npm install {PACKAGE} failed: {exc}"
        if done.returncode != 0 or not manifest.exists():
            errors = [r for r in done.stderr.splitlines() if r.startswith("npm error code")]
            why = (errors or done.stderr.strip().splitlines() or ["no output"])[0]
            return f"npm install {PACKAGE} failed (exit {done.returncode}): {why}"
    meta = json.loads(manifest.read_text())
    bin_field = meta.get("bin", {})
    script = bin_field if isinstance(bin_field, str) else next(iter(bin_field.values()), "")
    entry = PACKAGE_DIR / script
    if not script or not entry.exists():
        return f"{PACKAGE} installed without its entry script ({manifest})"
    return Server(node, entry, meta.get("version", "?"))


def compare(
    server: Server, root: Path, doc: str, calls: int, warmup: int = 5
) -> dict[str, list[float]]:
    """Per-call seconds of `edit_file` and `read_text_file` on `root/doc`.

    The edit is the daemon bench's: swap "mnoted bench marker A" and "... B" (the file
    holds exactly one of them); the page is left holding the marker it held before. Each
    figure is one `call_tool` round trip, timed on the client, after `warmup` untimed
    calls of the same tool.
    """
    return asyncio.run(_compare(server, root, doc, calls, warmup))


async def _compare(
    server: Server, root: Path, doc: str, calls: int, warmup: int
) -> dict[str, list[float]]:
    path = str(root / doc)
    marker = "mnoted bench marker "
    text = (root / doc).read_text()
    start = "A" if marker + "A" in text else "B"
    state = [start]
    if marker + state[0] not in text:
        raise RuntimeError(f"{path} holds no bench marker")
    params = StdioServerParameters(command=server.node, args=[str(server.entry), str(root)])

    async def edit() -> None:
        old = state[0]
        new = "B" if old == "A" else "A"
        result = await session.call_tool(
            "edit_file",
            {"path": path, "edits": [{"oldText": marker + old, "newText": marker + new}]},
        )
        if result.is_error:
            raise RuntimeError(f"edit_file failed: {result.content}")
        state[0] = new

    async def read() -> None:
        result = await session.call_tool("read_text_file", {"path": path})
        if result.is_error:
            raise RuntimeError(f"read_text_file failed: {result.content}")

    async def timed(fn: Callable[[], Awaitable[object]]) -> list[float]:
        for _ in range(warmup):
            await fn()
        samples = []
        for _ in range(calls):
            t0 = time.perf_counter()
            await fn()
            samples.append(time.perf_counter() - t0)
        return samples

    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read_stream, write_stream),
            ClientSession(read_stream, write_stream) as session,
        ):
            await session.initialize()
            await session.list_tools()  # as an agent's client does; caches output schemas
            out = {"edit": await timed(edit), "read": await timed(read)}
            if state[0] != start:
                await edit()
            return out
