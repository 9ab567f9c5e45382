"""basic-memory's ``search_notes`` as a comparison for bench/search.py.

basic-memory (an MCP server of Markdown notes indexed in SQLite FTS5) needs Python 3.12 or
newer, so it is installed with pip into a virtualenv of its own, `bench/.venv-peers/
basic-memory` (never a dependency of mnoted), made with the first `python3.13` or
`python3.12` found (or `$MNOTE_PEER_PYTHON`). Its state (config, SQLite index) lives in a
temporary folder (`BASIC_MEMORY_CONFIG_DIR`), never in the user's home.

Run by bench/search.py as `python bench/basicmemory.py FOLDER QUERY...` with that venv's
Python: the notes folder is added as a project and indexed (`basic-memory project add`,
timed), then each query is passed to the `search_notes` tool function in one asyncio loop
(`page_size` 20, `search_type` "text": keyword search; semantic search needs embedding
models this machine cannot download), 7 runs a query; it prints one JSON object.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PACKAGE = "basic-memory==0.24.1"
VENV = Path(
    os.environ.get("MNOTE_PEER_VENV")
    or Path(__file__).resolve().parent / ".venv-peers" / "basic-memory"
)
"""The peer's virtualenv (``$MNOTE_PEER_VENV``: one made before, reused as it is)."""
RUNS = 7


def install() -> Path | str:
    """The peer's Python, installed into :data:`VENV` if it is not there yet; or why not."""
    python = VENV / "bin" / "python"
    if (VENV / "bin" / "basic-memory").exists():
        return python
    base = os.environ.get("MNOTE_PEER_PYTHON") or shutil.which("python3.13")
    base = base or shutil.which("python3.12")
    if base is None:
        return "no Python 3.12 or newer on this machine (basic-memory requires it)"
    try:
        subprocess.run([base, "-m", "venv", str(VENV)], check=True, capture_output=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", PACKAGE],
            check=True,
            capture_output=True,
            text=True,
            timeout=1200,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        shutil.rmtree(VENV, ignore_errors=True)
        detail = getattr(exc, "stderr", "") or str(exc)
        return f"pip install {PACKAGE} failed: {str(detail).strip().splitlines()[-1:]}"
    return python


def run(folder: Path, queries: list[str], timeout: float = 3600) -> dict[str, object] | str:
    """Index ``folder`` with basic-memory and time ``search_notes``; or why it could not."""
    python = install()
    if isinstance(python, str):
        return python
    try:
        out = subprocess.run(
            [str(python), __file__, str(folder), *queries],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"basic-memory did not finish within {timeout:.0f} s"
    if out.returncode != 0:
        return f"basic-memory failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}"
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _peer(folder: Path, queries: list[str]) -> None:
    """In the peer's venv: index ``folder`` as a project, then time each query."""
    import asyncio
    from importlib.metadata import version

    state = Path(tempfile.mkdtemp(prefix="mnote-bm-"))
    os.environ["BASIC_MEMORY_CONFIG_DIR"] = str(state)
    os.environ.setdefault("BASIC_MEMORY_TELEMETRY_ENABLED", "false")
    os.environ.setdefault("BASIC_MEMORY_LOG_LEVEL", "WARNING")  # (no log line a query)
    from loguru import logger  # type: ignore[import-not-found]

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    try:
        cli = Path(sys.executable).parent / "basic-memory"
        t0 = time.perf_counter()
        subprocess.run(
            [str(cli), "project", "add", "bench", str(folder), "--default"],
            check=True,
            capture_output=True,
            env=os.environ,
        )
        indexed = time.perf_counter() - t0
        from basic_memory.mcp.tools import search_notes  # type: ignore[import-not-found]

        async def timed() -> dict[str, object]:
            rows: dict[str, object] = {}
            for query in queries:
                samples, total = [], 0
                for _ in range(RUNS):
                    t = time.perf_counter()
                    result = await search_notes(
                        query=query, project="bench", search_type="text",
                        output_format="json", page_size=20,
                    )  # fmt: skip
                    samples.append(time.perf_counter() - t)
                    if isinstance(result, dict):
                        total = len(result.get("results") or [])
                rows[query] = {"p50Ms": statistics.median(samples) * 1000, "hits": total}
            return rows

        queries_out = asyncio.run(timed())
        answer = {"version": version("basic-memory"), "indexSeconds": indexed}
        print(json.dumps({**answer, "queries": queries_out}))
    finally:
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    _peer(Path(sys.argv[1]), sys.argv[2:])
