"""The daemon and memory benchmarks run end to end at their smallest size (figures are never
asserted).

`make bench` is not run by CI; this keeps the benchmark whose figures `docs/performance.md`
quotes from breaking unseen: its daemon, floors, paired timings, reads, 1 MB page and
concurrent agents (and the same with Git) all run once, and every line it prints is there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.steps import STEPS
from tests.conftest import CORPUS

ROOT = Path(__file__).resolve().parent.parent


def run_bench(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``script`` run as `make bench` runs it, its files below ``tmp_path``; it must succeed."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "MNOTE_CORPUS": str(CORPUS)}
    out = subprocess.run(
        [sys.executable, script, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.mark.slow
def test_the_daemon_benchmark_runs(tmp_path: Path) -> None:
    smallest = ["--sizes", "100", "--writes", "3", "--agents", "2", "--no-mcp"]
    out = run_bench(tmp_path, "bench/daemon.py", *smallest)
    for label in (
        "search index's first pass, before the timed calls",
        "floor: atomic write + fsync",
        "floor: incremental commit + fsync (libgit2)",
        "durable agent write (markdown_edit, 10 KB)",
        "the same through the project's client",
        "baseline: git add FILE && git commit",
        "read: mnote.page.get (cached 10 KB page)",
        "durable write on a 1 MB page",
        "1 MB page: sidecar growth per write",
        "1 MB page saved in an editor, read back",
        "2 agents, distinct pages: commits/s",
        "2 x git add FILE && git commit at once",
    ):
        assert label in out.stdout, (label, out.stdout)
    assert "failures 0" in out.stdout


@pytest.mark.slow
def test_the_steps_benchmark_times_every_step(tmp_path: Path) -> None:
    out = run_bench(tmp_path, "bench/steps.py", "--size", "100", "--writes", "3")
    assert "100 files, 3 writes: through the client median" in out.stdout, out.stdout
    timed = {line.split()[0] for line in out.stdout.splitlines()[2:]}
    assert timed == {step.partition(":")[2] for step in STEPS}, out.stdout


@pytest.mark.slow
def test_the_memory_benchmark_runs(tmp_path: Path) -> None:
    out = run_bench(tmp_path, "bench/memory.py", "--files", "100", "--writes", "6", "--every", "3")
    assert "when ready" in out.stdout and "after 6 writes" in out.stdout, out.stdout


# The 1 MB page takes the same path with a bigger page: `MNOTE_BENCH_BIG_PAGE=1` runs it too.
PAGES = ["page.md", "big.md"] if os.environ.get("MNOTE_BENCH_BIG_PAGE") == "1" else ["page.md"]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_the_benchmark_of_two_versions_in_turns_runs(tmp_path: Path, page: str) -> None:
    args = ("--before", ".", "--after", ".", "--writes", "10", "--page", page)
    out = run_bench(tmp_path, "bench/turns.py", *args)
    assert "before first:" in out.stdout and "after first:" in out.stdout, out.stdout
    assert "taken out:" in out.stdout, out.stdout


@pytest.mark.slow
def test_the_search_benchmark_runs(tmp_path: Path) -> None:
    out = run_bench(tmp_path, "bench/search.py", "--sizes", "100", "--hidden", "300")
    for label in (
        "full index pass",
        "mnote.workspace.search p50 (limit 20)",
        "speed-up",
        "search right after a write (catch-up) p50",
        "300 hidden notes",
        "agent's answers, hidden or not: identical",
    ):
        assert label in out.stdout, (label, out.stdout)
