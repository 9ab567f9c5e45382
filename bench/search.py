"""Full-text search: query p50 through the executor beside `rg -l -F` (or `grep -rlF`) over
the same folder, the time of a full index pass, and a search right after a write.

The notes are the help corpus's pages (English and Chinese), cycled to the size asked, each
with a word of its own, in folders of 100. Then an agent granted ``mine/**`` (200 notes)
searches with and without a hidden folder of ``--hidden`` notes that match every query:
its own scope index beside the whole index filtered by its grant (the first slice's way).
With --basic-memory, basic-memory's search_notes on the same notes (bench/basicmemory.py).
Usage: python bench/search.py [--sizes 10000] [--hidden 10000] [--skip-sizes] [--basic-memory]
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

from mnoted.core.search_text import parse_query
from mnoted.service import Actor, Service
from mnoted.store import Workspace, search_index, search_queries

CORPUS = Path(os.environ.get("MNOTE_CORPUS", "/work/shared/corpus")) / "obsidian-help"
QUERIES = ["vault", "仓库", "sync settings", '"community plugins"', "templ*", "uniqueword4242"]
RUNS = 7


def _pages() -> list[str]:
    texts = [p.read_text(encoding="utf-8") for p in sorted(CORPUS.rglob("*.md"))]
    return [t for t in texts if t.strip()][:400]


def build(root: Path, size: int, folder: str = "f", first: int = 0) -> None:
    pages = _pages()
    for i in range(first, first + size):
        path = root / f"{folder}{i // 100:04d}" / f"note{i:06d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Note {i}\n\nuniqueword{i}\n\n" + pages[i % len(pages)])
    if folder != "f":
        return
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


def peer(size: int, root: Path, ours: dict[str, float]) -> None:
    """basic-memory's ``search_notes`` over the same folder, beside our p50 per query."""
    import basicmemory

    out = basicmemory.run(root, QUERIES)
    if isinstance(out, str):
        print(f"{size:>7} notes  basic-memory search_notes: not measured ({out})")
        return
    built = f"basic-memory {out['version']}: project add (index)"
    print(f"{size:>7} notes  {built:<46} {out['indexSeconds']:8.1f} s")
    theirs = out["queries"]
    assert isinstance(theirs, dict)
    for query in QUERIES:
        got = theirs[query]
        label = f"  {query!r}: ours / basic-memory ({got['hits']} hits)"
        row(size, label, ours[query], got["p50Ms"])
    row(size, "basic-memory search_notes p50 (page_size 20)",
        statistics.median(q["p50Ms"] for q in theirs.values()))  # fmt: skip


def bench(size: int, tmp: Path, basic_memory: bool = False) -> None:
    root = tmp / f"ws-{size}"
    build(root, size)
    ws = Workspace.init(root)
    try:
        os.sync()
        conn = search_index.connect(tmp / f"index-{size}.sqlite3")
        t0 = time.perf_counter()
        assert ws.head is not None
        reader = ws.commit_reader()
        search_index.sync_tree(conn, reader, ws.head)
        reader.close()
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
        per_query: dict[str, float] = {}
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
            per_query[query] = p50(mine)
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
        if basic_memory:
            peer(size, root, per_query)
    finally:
        search_index.forget(ws)
        ws.close()


def _agent_answers(service: Service, agent: Actor) -> tuple[list[float], list[object]]:
    """Each query's times and its answer (total, hits with scores) as the agent."""
    times: list[float] = []
    answers: list[object] = []
    warm = {"toolName": "mnote.workspace.search", "sessionId": "s", "runId": "r",
            "toolCallId": "w", "traceId": "w", "args": {"query": "warm"}}  # fmt: skip
    service.call(warm, agent)  # (the scope's first search builds its index: not timed)
    for n, query in enumerate(QUERIES * RUNS):
        env = {"toolName": "mnote.workspace.search", "sessionId": "s", "runId": "r",
               "toolCallId": f"a{n}", "traceId": f"a{n}", "args": {"query": query}}  # fmt: skip
        t0 = time.perf_counter()
        out = service.call(env, agent)
        times.append(time.perf_counter() - t0)
        assert out["ok"] and out["result"]["complete"], out
        if n < len(QUERIES):
            answers.append([out["result"]["total"], out["result"]["hits"]])
    return times, answers


def bench_hidden(hidden: int, tmp: Path) -> None:
    """An agent's query time, its scope's index beside the whole index filtered by grant,
    with no hidden notes and then with ``hidden`` notes matching every query."""
    root = tmp / "ws-hidden"
    build(root, 200)  # f0000/, f0001/: to be moved under mine/
    (root / "mine").mkdir()
    for sub in ("f0000", "f0001"):
        (root / sub).rename(root / "mine" / sub)
    quiet = {**os.environ, **GIT_ENV}
    git(root, quiet, "add", "-A")
    git(root, quiet, "commit", "-q", "-m", "mine")
    ws = Workspace.init(root)
    agent = Actor("bench-agent", "agent", grants=("mine/**",))
    try:
        service = Service()
        service.add(ws)
        rows: dict[str, float] = {}
        seen = []
        cases = (("no hidden notes", 0), (f"{hidden:,} hidden notes", hidden))
        mine = search_queries.Filters(visible_under=["mine/"])
        for label, count in cases:
            if count:
                build(root, count, folder="hidden/h", first=200)
                git(root, quiet, "add", "-A")
                git(root, quiet, "commit", "-q", "-m", "hidden")
                ws.refresh()
            index = search_index.of(ws)
            index.start()
            while index.building:
                time.sleep(0.05)
            times, answers = _agent_answers(service, agent)
            seen.append(answers)
            rows[f"agent search p50 (executor), {label}"] = p50(times)
            scope = search_index.scoped(ws, agent.grants, agent.may_access)
            for name, index_of, filters in (
                ("scope index", scope, search_queries.Filters()),
                ("whole index filtered", index, mine),
            ):
                conn, complete = index_of.current()
                assert conn is not None and complete
                sql: list[float] = []
                for query in QUERIES * RUNS:
                    parsed = parse_query(query)
                    assert parsed is not None
                    t0 = time.perf_counter()
                    search_queries.search(conn, parsed, filters, 20, 0)
                    sql.append(time.perf_counter() - t0)
                rows[f"  SQL only: {name}, {label}"] = p50(sql)
        for label, ms in rows.items():
            row(200, label, ms)
        same = "identical" if seen[0] == seen[1] else "DIFFERENT"
        print(f"{200:>7} notes  agent's answers, hidden or not: {same}")
    finally:
        search_index.forget(ws)
        ws.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="10000", help="comma-separated note counts")
    p.add_argument("--hidden", type=int, default=10000, help="hidden notes (0: skip)")
    p.add_argument("--skip-sizes", action="store_true", help="only the hidden-notes lines")
    p.add_argument(
        "--basic-memory",
        action="store_true",
        help="also basic-memory's search_notes on the same notes (installed into "
        "bench/.venv-peers; indexing 10,000 notes takes minutes)",
    )
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="mnote-search-") as tmp:
        if not args.skip_sizes:
            for size in (int(s) for s in args.sizes.split(",")):
                bench(size, Path(tmp), args.basic_memory)
        if args.hidden:
            bench_hidden(args.hidden, Path(tmp))


if __name__ == "__main__":
    main()
