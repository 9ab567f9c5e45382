"""Per-commit latency of the store, side by side with `git add FILE && git commit`.

For each workspace size (files spread over folders of 100, like a real notes tree) the script
builds a repository, adopts it with ``Workspace.init``, applies ``--commits`` one-file writes
(libgit2's gitdir fsync on, work-tree files fsynced) and times each ``apply``; then it times
the baseline an auto-commit script runs: write the file, ``git add FILE``, ``git commit`` as
subprocesses, in the same run on the same repository. Prints median and p99 in milliseconds,
the median time of the Git index refresh the idle writer makes after every 10 commits (not
part of a commit's latency), and the median of the commits that arrive just as the daemon
starts such a refresh on its thread of its own (one in 10; a write waited for the whole
refresh when it ran on the writer's thread).

    python bench/commit.py                      # 100, 10,000 and 100,000 files
    python bench/commit.py --sizes 100,1000 --commits 50
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mnoted.store import CommandMeta, Workspace, Write

GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def rel_path(i: int) -> str:
    """File ``i`` of the synthetic tree: folders of 100 files, 10 folders per parent."""
    return f"d{i // 1000:03d}/s{(i // 100) % 10}/note-{i}.md"


def write_note(root: Path, i: int) -> bytes:
    """Write file ``i`` of the tree below ``root``; its bytes."""
    path = root / rel_path(i)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = f"# Note {i}\n\nSome text of note {i}.\n".encode()
    path.write_bytes(data)
    return data


def build_repo(root: Path, size: int, env: dict[str, str]) -> None:
    for i in range(size):
        write_note(root, i)
    git(root, env, "init", "-q", "-b", "main")
    git(root, env, "add", "-A")
    git(root, env, "commit", "-q", "-m", "initial notes")


def git(root: Path, env: dict[str, str], *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], env=env, check=True)


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p99 * 1000


def bench_size(size: int, commits: int, tmp: Path, env: dict[str, str]) -> dict[str, float]:
    root = tmp / f"ws-{size}"
    t0 = time.perf_counter()
    build_repo(root, size, env)
    ws = Workspace.init(root)
    setup = time.perf_counter() - t0
    os.sync()  # let the fixture's writeback finish before anything is timed
    rng = random.Random(size)
    targets = [rel_path(rng.randrange(size)) for _ in range(commits)]
    ours: list[float] = []
    beside: list[float] = []
    refreshes: list[float] = []
    for n, path in enumerate(targets):
        data = f"# Note\n\nedited by the bench, step {n}\n".encode()
        meta = CommandMeta("page.body.save", actor="hermes", trace_id=f"bench_{n}")
        if n % 10 == 4:  # as the daemon does when a writer pauses or once a second
            ws.refresh_index_soon()
        start = time.perf_counter()
        ws.apply(meta, [Write(path, data)])
        (beside if n % 10 == 4 else ours).append(time.perf_counter() - start)
        if n % 10 == 9:  # the writer thread idles now and then: time the index refresh
            start = time.perf_counter()
            ws.idle()
            refreshes.append(time.perf_counter() - start)
    ws.close()
    os.sync()
    baseline: list[float] = []
    for n, path in enumerate(targets):
        start = time.perf_counter()
        (root / path).write_text(f"# Note\n\nedited by git, step {n}\n")
        git(root, env, "add", path)
        git(root, env, "commit", "-q", "-m", f"auto-commit {n}")
        baseline.append(time.perf_counter() - start)
    shutil.rmtree(root)
    ours_med, ours_p99 = quantiles(ours)
    base_med, base_p99 = quantiles(baseline)
    return {
        "setup_s": setup,
        "ours_med": ours_med,
        "ours_p99": ours_p99,
        "index_ms": statistics.median(refreshes) * 1000 if refreshes else 0.0,
        "beside_ms": statistics.median(beside) * 1000 if beside else 0.0,
        "base_med": base_med,
        "base_p99": base_p99,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="100,10000,100000", help="comma-separated file counts")
    parser.add_argument("--commits", type=int, default=100, help="commits timed per size")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    with tempfile.TemporaryDirectory(prefix="mnote-bench-") as tmp:
        env["HOME"] = tmp
        env.update(GIT_ENV)
        os.environ.clear()
        os.environ.update(env)
        version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
        print(
            f"git {version.split()[-1]}, python {sys.version.split()[0]}, "
            f"{args.commits} commits per size, times in ms"
        )
        header = (
            f"{'files':>8} | {'mnoted median':>13} | {'mnoted p99':>10} | "
            f"{'index refresh':>13} | {'beside a refresh':>16} | "
            f"{'git add+commit median':>21} | {'git p99':>8}"
        )
        print(header)
        print("-" * len(header))
        for size in sizes:
            r = bench_size(size, args.commits, Path(tmp), env)
            print(
                f"{size:>8} | {r['ours_med']:>13.2f} | {r['ours_p99']:>10.2f} | "
                f"{r['index_ms']:>13.1f} | {r['beside_ms']:>16.2f} | "
                f"{r['base_med']:>21.2f} | {r['base_p99']:>8.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
