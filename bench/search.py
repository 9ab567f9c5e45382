"""Full-text search: query p50 through the executor beside `rg -l -F` (or `grep -rlF`) over
the same folder, the time of a full index pass, and a search right after a write.

The notes are the help corpus's pages (English and Chinese), cycled to the size asked, each
with a word of its own, in folders of 100. Usage: python bench/search.py [--sizes 10000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from commit import GIT_ENV, git

from mnoted.service import Actor, Service
from mnoted.store import Workspace, search_index

CORPUS = Path(os.environ.get("MNOTE_CORPUS", "/work/shared/corpus")) / "obsidian-help"
QUERIES = ["vault", "仓库", "sync settings", '"community plugins"', "templ*", "uniqueword4242"]
RUNS = 7


def _pages() -> list[str]:
    texts = [p.read_text(encoding="utf-8") for p in sorted(CORPUS.rglob("*.md"))]
    return [t for t in texts if t.strip()][:400]


def build(root: Path, size: int) -> None:
    pages = _pages()
    for i in range(size):
        path = root / f"f{i // 100:04d}" / f"note{i:06d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Note {i}\n\nuniqueword{i}\n\n" + pages[i % len(pages)])
    quiet = {**os.environ, **GIT_ENV, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "gc.auto"}
    quiet["GIT_CONFIG_VALUE_0"] = "0"
    git(root, quiet, "init", "-q", "-b", "main")
    git(root, quiet, "add", "-A")
    git(root, quiet, "commit", "-q", "-m", "notes")


def row(size: int, label: str, ms: float, beside: float | None = None) -> None:
    extra = f" / {beside:8.1f} ms" if beside is not None else ""
    print(f"{size:>7} notes  {label:<46} {ms:8.1f} ms{extra}")


def p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _baseline(root: Path) -> tuple[str, list[str]]:
    if shutil.which("rg"):
        return "rg -l -F", ["rg", "-l", "-F"]
    return "grep -rlF", ["grep", "-rlF", "--include=*.md"]


def bench(size: int, tmp: Path) -> None:
    root = tmp / f"ws-{size}"
    build(root, size)
    ws = Workspace.init(root)
    try:
        os.sync()
        conn = search_index.connect(tmp / f"index-{size}.sqlite3")
        t0 = time.perf_counter()
        assert ws.head is not None
        search_index.sync_tree(conn, search_index.pygit2.Repository(str(root)), ws.head)
        built = time.perf_counter() - t0
        conn.close()
        print(f"{size:>7} notes  {'full index pass':<46} {built:8.1f} s")
        service = Service()
        service.add(ws)
        owner = Actor.owner()
        index = search_index.of(ws)
        index.start()
        while index.building:
            time.sleep(0.05)

        def call(tool: str, n: int, **fields: object) -> dict[str, object]:
            env = {"toolName": tool, "sessionId": "s", "runId": "r", "toolCallId": f"c{n}",
                   "traceId": f"t{n}", **fields}  # fmt: skip
            out = service.call(env, owner)
            assert out["ok"], out
            return out

        label, cmd = _baseline(root)
        ours: list[float] = []
        theirs: list[float] = []
        n = 0
        for query in QUERIES:
            mine: list[float] = []
            for _ in range(RUNS):
                n += 1
                t0 = time.perf_counter()
                out = call("mnote.workspace.search", n, args={"query": query, "limit": 20})
                mine.append(time.perf_counter() - t0)
            other: list[float] = []
            for _ in range(3):
                t0 = time.perf_counter()
                subprocess.run([*cmd, query.strip('"*'), str(root)], capture_output=True)
                other.append(time.perf_counter() - t0)
            total = out["result"]["total"]  # type: ignore[index]
            row(size, f"  {query!r} ({total} pages): ours / {label}", p50(mine), p50(other))
            ours += mine
            theirs += other
        row(size, "mnote.workspace.search p50 (limit 20)", p50(ours))
        row(size, f"{label} p50", p50(theirs))
        print(f"{size:>7} notes  {'speed-up':<46} {p50(theirs) / p50(ours):8.1f} x")
        after: list[float] = []
        for i in range(5):
            n += 1
            edit = {"search": f"uniqueword{i}\n", "replace": f"uniqueword{i} fresh{i}\n"}
            call(
                "mnote.doc.markdown_edit",
                n,
                documentId=f"f0000/note{i:06d}.md",
                idempotencyKey=f"k{n}",
                dryRun=False,
                args={"operations": [edit]},
            )
            n += 1
            t0 = time.perf_counter()
            out = call("mnote.workspace.search", n, args={"query": f"fresh{i}"})
            after.append(time.perf_counter() - t0)
            assert out["result"]["total"] == 1, out  # type: ignore[index]
        row(size, "search right after a write (catch-up) p50", p50(after))
    finally:
        search_index.forget(ws)
        ws.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="10000", help="comma-separated note counts")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="mnote-search-") as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            bench(size, Path(tmp))


if __name__ == "__main__":
    main()
