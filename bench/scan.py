"""The work-tree scan (`Workspace.scan_changes`) beside libgit2's status, in the same run.

Ten notes per folder (100 top folders of subfolders), committed by `git` so the index
carries stat data, then adopted with `Workspace.init`. Each round times, in turn:
libgit2's `repo.status(untracked_files="all")` (what `scan_changes` used to run), the
scan's first pass on a new `Workspace` (it parses `.git/index` and diffs it against
HEAD), its next pass (the parsed index is kept), and the bare floor of the walk (scandir
through folder fds plus one `fstatat` per file, nothing compared). Nothing changed on
disk: every figure is the cost of finding that nothing changed.

    python bench/scan.py [--sizes 10000,100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pygit2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commit import GIT_ENV

from mnoted.store import Workspace

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def build(root: Path, files: int, env: dict[str, str]) -> None:
    folders = files // 10
    for i in range(files):
        folder = root / f"t{i % 100:02d}" / f"f{(i // 100) % (folders // 100):04d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nSome text of note {i}.\n")
    quiet = {**env, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "gc.auto"}
    quiet["GIT_CONFIG_VALUE_0"] = "0"
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "notes"]):
        subprocess.run(["git", "-C", str(root), *args], env=quiet, check=True)
    Workspace.init(root).close()


def floor(root: Path) -> int:
    """scandir + one fstatat per file through folder fds: the least a Python walk costs."""

    def walk(fd: int) -> int:
        count = 0
        folders = []
        with os.scandir(fd) as listing:
            for item in listing:
                if item.is_dir(follow_symlinks=False):
                    if item.name != ".git":
                        folders.append(item.name)
                else:
                    item.stat(follow_symlinks=False)
                    count += 1
        for name in folders:
            child = os.open(name, _DIR, dir_fd=fd)
            try:
                count += walk(child)
            finally:
                os.close(child)
        return count

    fd = os.open(root, _DIR)
    try:
        return walk(fd)
    finally:
        os.close(fd)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="mnscan") as tmp:
            root = Path(tmp) / "notes"
            env = {**os.environ, **GIT_ENV, "HOME": tmp}
            build(root, size, env)
            samples: dict[str, list[float]] = {}
            for _ in range(args.rounds):
                repo = pygit2.Repository(str(root))
                samples.setdefault("libgit2 status", []).append(
                    timed(lambda r=repo: r.status(untracked_files="all"))  # type: ignore[misc]
                )
                repo.free()
                with Workspace.open(root) as ws:
                    for label in ("scan, first pass", "scan, next pass"):
                        samples.setdefault(label, []).append(timed(ws.scan_changes))
                samples.setdefault("floor: scandir + fstatat", []).append(
                    timed(lambda r=root: floor(r))  # type: ignore[misc]
                )
            folders = size // 10
            print(f"{size:,} files in {folders:,} folders ({args.rounds} rounds), seconds:")
            for label, values in samples.items():
                print(
                    f"  {label:<26} median {statistics.median(values):6.3f}"
                    f"  min {min(values):6.3f}  max {max(values):6.3f}"
                )


if __name__ == "__main__":
    main()
