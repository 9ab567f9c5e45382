"""Time from `mnoted` starting to serving, for workspaces of 10,000 and 100,000 pages.

Side by side in the same run: `git status` on the same repository (what any tool that
checks the working tree at start pays), and parsing every page (what a daemon that
builds its page index at start would pay). The daemon parses nothing at start; it
reconciles the working tree with HEAD (asking `git status`) and serves. Memory is the
daemon's resident set (`VmRSS`) and its peak (`VmHWM`) from /proc/<pid>/status, read once
it answers, again after it has idled for `--settle` seconds (the writer's first index
refresh runs then), and once a page saved as an editor saves it is committed (the daemon
then holds the Git index parsed). mnoted's modules are compiled to bytecode first, as an
install leaves them: a Python started with PYTHONDONTWRITEBYTECODE would otherwise compile
them again at every start (0.2-0.3 s here).
The watcher's state and watch count are printed beside them: with a low
`fs.inotify.max_user_watches` the watcher stops adding watches at the limit (state
`degraded`), and the figures then leave out part of its set-up.

    python bench/startup.py [--sizes 10000,100000] [--settle 2]
"""

from __future__ import annotations

import argparse
import compileall
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commit import rel_path
from fixture import build_packed_repo, daemon_env, status_mb

import mnoted
from mnoted.client.client import Client, Unreachable
from mnoted.core.page import parse_page
from mnoted.store import Workspace


def memory_mb(pid: int) -> tuple[float, float]:
    """Resident set and its peak, in MB (VmRSS and VmHWM of /proc/<pid>/status)."""
    rss, peak = status_mb(pid, "VmRSS", "VmHWM")
    return rss, peak


class Start:
    """One start of the daemon: seconds until ready; memory when ready, once settled, and
    once an edit made in an editor is committed (the first pass over part of the tree
    parses the Git index, which the start-up pass leaves to the ``git`` command)."""

    def __init__(
        self,
        seconds: float,
        ready: tuple[float, float],
        settled: tuple[float, float],
        edited: tuple[float, float],
        watcher: dict[str, Any],
    ) -> None:
        self.seconds = seconds
        self.ready = ready
        self.settled = settled
        self.edited = edited
        self.watcher = watcher


def edit_and_wait(client: Client, page: Path, timeout: float = 30.0) -> None:
    """Save ``page`` as an editor would and wait for the daemon to commit it."""
    page.write_text(page.read_text() + "one more line\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = client.request("GET", "/v1/workspaces")
        if status == 200 and body["workspaces"][0]["externalCommits"] > 0:
            return
        time.sleep(0.05)
    raise RuntimeError(f"the edit of {page} was not committed within {timeout:g} s")


def time_daemon(root: Path, base: Path, env: dict[str, str], settle: float, page: Path) -> Start:
    sock = base / "s.sock"
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mnoted.cli.main",
            "daemon",
            "--workspace",
            str(root),
            "--socket",
            str(sock),
        ],
        env=env,
        cwd=base,  # `-m` looks in the working folder first: not in a source tree
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        token_dir = Path(env["XDG_CONFIG_HOME"]) / "mnoted"
        while True:
            try:
                token = (token_dir / "owner.token").read_text().strip()
                client = Client(sock, token=token)
                status, body = client.request("GET", "/v1/workspaces")
                if status == 200:
                    seconds = time.perf_counter() - t0
                    ready = memory_mb(proc.pid)
                    time.sleep(settle)
                    settled = memory_mb(proc.pid)
                    watcher = body["workspaces"][0]["watcher"] or {}
                    edit_and_wait(client, page)
                    return Start(seconds, ready, settled, memory_mb(proc.pid), watcher)
            except (Unreachable, FileNotFoundError):
                pass
            if proc.poll() is not None:
                raise RuntimeError("daemon exited")
            time.sleep(0.01)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument(
        "--settle", type=float, default=2.0, help="seconds idle before the second memory reading"
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="another mnoted source tree (a `git worktree` of an earlier commit): its daemon "
        "and this one's are started in turns on the same repository, --rounds times each",
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    here = Path(mnoted.__file__).parent
    compileall.compile_dir(here, quiet=1)
    if args.against is not None:
        compileall.compile_dir(args.against / "mnoted", quiet=1)
    limit = Path("/proc/sys/fs/inotify/max_user_watches")
    if limit.exists():
        print(f"fs.inotify.max_user_watches = {int(limit.read_text()):,}")
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="mnb") as tmp:
            base = Path(tmp)
            root = base / "notes"
            env = daemon_env(base)
            build_packed_repo(root, size, env)
            Workspace.init(root).close()
            page = root / rel_path(0)
            if args.against is not None:
                trees = {"this": here.parent, "against": args.against}
                compare(root, base, env, page, trees, size, args.rounds)
                continue
            cold = time_daemon(root, base, env, args.settle, page)
            warm = time_daemon(root, base, env, args.settle, page)
            t0 = time.perf_counter()
            subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain"],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            status = time.perf_counter() - t0
            t0 = time.perf_counter()
            for path in root.rglob("*.md"):
                parse_page(path.read_bytes(), path.name)
            parse_all = time.perf_counter() - t0
            print(
                f"{size:>7,} pages: daemon ready {cold.seconds:6.2f} s first start, "
                f"{warm.seconds:6.2f} s next start | git status {status:6.2f} s | "
                f"parse every page {parse_all:6.2f} s"
            )
            for name, start in (("first start", cold), ("next start", warm)):
                print(
                    f"{'':>14}memory, {name + ':':<12} RSS {start.ready[0]:6.1f} MB "
                    f"(peak {start.ready[1]:6.1f}) when ready, RSS {start.settled[0]:6.1f} MB "
                    f"(peak {start.settled[1]:6.1f}) {args.settle:g} s later, RSS "
                    f"{start.edited[0]:6.1f} MB (peak {start.edited[1]:6.1f}) after an edit | "
                    f"watcher {start.watcher.get('state')}, "
                    f"{start.watcher.get('watchCount', 0):,} watches"
                )


def compare(
    root: Path,
    base: Path,
    env: dict[str, str],
    page: Path,
    trees: dict[str, Path],
    size: int,
    rounds: int,
) -> None:
    """Two source trees' daemons started in turns: seconds to ready and RSS when ready."""
    print(f"{size:>7,} pages, daemons started in turns:")
    seen: dict[str, list[Start]] = {name: [] for name in trees}
    for _ in range(rounds):
        for name, tree in trees.items():
            tree_env = {**env, "PYTHONPATH": str(tree)}
            seen[name].append(time_daemon(root, base, tree_env, 0.0, page))
    for name, starts in seen.items():
        times = ", ".join(f"{s.seconds:.2f}" for s in starts)
        memory = ", ".join(f"{s.ready[0]:.0f}" for s in starts)
        print(f"  {name:<8} {trees[name]!s:<28} ready {times} s | RSS {memory} MB")


if __name__ == "__main__":
    main()
