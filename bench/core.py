"""Parse and edit times of the pure core on 10 KB, 100 KB and 1 MB pages.

Pages are built by concatenating notes of the shared corpus. Each figure is the
median (and p90) of repeated runs; beside it, in the same run, a baseline:
markdown-it-py's own full parse (inline included, as a renderer does), and for
edits a full re-parse of the edited bytes (what a tool without incremental
re-parsing does after every edit).

    python bench/core.py [--sizes 10000,100000,1000000] [--repeat N]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from markdown_it import MarkdownIt

from mnoted.core import commands as C
from mnoted.core import page_edits as P
from mnoted.core.markdown_edit import markdown_edit
from mnoted.core.page import Page, parse_page

_SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"
# Beside the repository, as the tests find it; else where MNOTE_CORPUS says (a clone elsewhere).
CORPUS = (
    (_SHARED if _SHARED.is_dir() else Path(os.environ.get("MNOTE_CORPUS", "/work/shared/corpus")))
    / "obsidian-help"
    / "en"
)


def build_page(size: int) -> bytes:
    out = bytearray()
    files = sorted(CORPUS.rglob("*.md"))
    if not files:
        raise SystemExit(f"no corpus pages in {CORPUS}: set MNOTE_CORPUS to the shared corpus")
    k = 0
    while len(out) < size:
        data = files[k % len(files)].read_bytes()
        if data.startswith(b"---"):
            data = data.split(b"---", 2)[-1]
        out += data.strip() + b"\n\n"
        k += 1
    return bytes(out[:size].rsplit(b"\n\n", 1)[0] + b"\n")


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.9))]


def row(label: str, ours: tuple[float, float], base: tuple[float, float] | None) -> None:
    text = f"  {label:<28} {ours[0]:9.2f} ms (p90 {ours[1]:8.2f})"
    if base is not None:
        text += f"   baseline {base[0]:9.2f} ms (p90 {base[1]:8.2f})   x{base[0] / ours[0]:6.1f}"
    print(text)


MARKER_EDIT = [{"search": "mnoted bench marker A", "replace": "mnoted bench marker B"}]


def _with_diff(page: Page, edits: list[dict[str, str]]) -> C.EditResult:
    result = markdown_edit(page, edits)
    assert result.diff
    return result


def bench_size(size: int, repeat: int, renderer: MarkdownIt) -> None:
    data = build_page(size)
    repeat = repeat or max(5, min(50, 2_000_000 // size))
    page = parse_page(data, "bench.md")
    mid = page.blocks[len(page.blocks) // 2]
    para = next(b for b in page.blocks[len(page.blocks) // 2 :] if b.type == "paragraph")
    print(
        f"page of {len(data):,} bytes, {len(page.source):,} lines, {len(page.block_ids()):,} blocks"
    )
    row(
        "parse (mnoted page)",
        timed(lambda: parse_page(data, "bench.md"), repeat),
        timed(lambda: renderer.parse(data.decode()), repeat),
    )
    marked = parse_page(data + b"\nmnoted bench marker A\n", "bench.md")
    spec = {"type": "paragraph", "text": "A paragraph an agent wrote."}
    words = para.text.split()
    search = " ".join(words[:4]) if len(words) >= 4 else para.text
    cases: list[tuple[str, Callable[[], C.EditResult]]] = [
        ("replace_block (middle)", lambda: C.replace_block(page, mid.id, spec)),
        ("insert_block_after (middle)", lambda: C.insert_block_after(page, spec, mid.id)),
        ("delete_block (middle)", lambda: C.delete_block(page, mid.id)),
        (
            "markdown_edit (one pair)",
            lambda: markdown_edit(page, [{"search": search, "replace": search.upper()}]),
        ),
        ("update_options", lambda: P.update_options(page, {"wideLayout": True})),
        # What the daemon's write bench sends: a line at the end, answered with its diff.
        ("markdown_edit, end + diff", lambda: _with_diff(marked, MARKER_EDIT)),
    ]
    for label, run in cases:
        try:
            edited = run().page.to_bytes()
        except Exception as exc:  # e.g. a search repeated in a page built from repeated notes
            print(f"  {label:<28} skipped: {exc}")
            continue
        row(
            label,
            timed(run, repeat),
            timed(functools.partial(parse_page, edited, "bench.md", previous=page), repeat),
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=0, help="runs per figure (default: by size)")
    args = parser.parse_args()
    renderer = MarkdownIt("commonmark").enable("table").enable("strikethrough")
    for size in (int(s) for s in args.sizes.split(",")):
        bench_size(size, args.repeat, renderer)


if __name__ == "__main__":
    main()
