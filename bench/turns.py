"""Two versions of the daemon taking turns: is a change to the write path faster or slower?

A daemon from each checkout (``--before``, ``--after``: folders holding a ``mnoted``
package, e.g. ``git worktree add /tmp/before <commit>``) serves a workspace of its own
(``--files``, 100 by default); one client sends single `markdown_edit` writes of the
bench's 10 KB page (``--page big.md``: its 1 MB one), raw, on new connections, ten to one
daemon, then ten to the other.
Both orders are run, since the one taking the second turn has an edge (about 2% on this
project's machine); the ratio with that edge taken out is the square root of the two
orders' ratios.

    python bench/turns.py --before /tmp/before --after . [--writes 1500] [--page big.md]
        [--files 100000]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commit import quantiles
from daemon import Daemon, edit_body, raw_request, workspace
from fixture import daemon_env


def start(tree: Path, base: Path, writes: int, page: str, files: int) -> tuple[Daemon, list[bytes]]:
    env = {**daemon_env(base), "PYTHONPATH": str(tree.resolve())}
    root = workspace(base, files, env)
    with (root / page).open("a") as fh:
        fh.write("\nmnoted bench marker A\n")
    daemon = Daemon(root, base, env)
    client = daemon.client()
    return daemon, [json.dumps(edit_body(client, i, page)).encode() for i in range(writes + 100)]


def one_order(
    first: Path, second: Path, writes: int, page: str, files: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Median and p99 ms of a write by each daemon, ``first`` taking the first turn of each
    pair."""
    with tempfile.TemporaryDirectory() as tmp:
        pair = [
            start(tree, Path(tmp) / f"d{i}", writes, page, files)
            for i, tree in enumerate((first, second))
        ]
        try:
            for daemon, bodies in pair:  # warmed up, not timed
                for body in bodies[:100]:
                    raw_request(daemon.sock, daemon.token, "POST", "/v1/tools/call", body)
            times: list[list[float]] = [[], []]
            for start_at in range(100, 100 + writes, 10):
                for (daemon, bodies), out in zip(pair, times, strict=True):
                    for body in bodies[start_at : start_at + 10]:
                        t0 = time.perf_counter()
                        answer = raw_request(
                            daemon.sock, daemon.token, "POST", "/v1/tools/call", body
                        )
                        out.append(time.perf_counter() - t0)
                        if b'"ok":true' not in answer:
                            raise SystemExit(f"a write failed: {answer[:300]!r}")
        finally:
            for daemon, _ in pair:
                daemon.stop()
    return quantiles(times[0]), quantiles(times[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--writes", type=int, default=1500)
    parser.add_argument(
        "--page", choices=("page.md", "big.md"), default="page.md", help="10 KB or 1 MB"
    )
    parser.add_argument("--files", type=int, default=100, help="notes in each workspace")
    args = parser.parse_args()
    run = (args.writes, args.page, args.files)
    (before_1, b99_1), (after_2, a99_2) = one_order(args.before, args.after, *run)
    print(
        f"before first: before {before_1:.3f} ms (p99 {b99_1:.2f}), after {after_2:.3f} ms"
        f" (p99 {a99_2:.2f}), ratio {after_2 / before_1:.3f}"
    )
    (after_1, a99_1), (before_2, b99_2) = one_order(args.after, args.before, *run)
    print(
        f"after first:  after {after_1:.3f} ms (p99 {a99_1:.2f}), before {before_2:.3f} ms"
        f" (p99 {b99_2:.2f}), ratio {after_1 / before_2:.3f}"
    )
    edge = math.sqrt((after_2 / before_1) * (before_2 / after_1))
    fair = math.sqrt((after_2 / before_1) / (before_2 / after_1))
    print(f"after / before, the second turn's edge ({edge:.3f}) taken out: {fair:.3f}")


if __name__ == "__main__":
    main()
