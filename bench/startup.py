"""Time from `mnoted` starting to serving, for workspaces of 10,000 and 100,000 pages.

Side by side in the same run: `git status` on the same repository (what any tool that
checks the working tree at start pays), and parsing every page (what a daemon that
builds its page index at start would pay). The daemon parses nothing at start; it
reconciles the working tree with HEAD and serves.

    python bench/startup.py [--sizes 10000,100000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commit import GIT_ENV, build_repo

from mnoted.cli.client import Client, Unreachable
from mnoted.core.page import parse_page
from mnoted.store import Workspace


def time_daemon(root: Path, base: Path, env: dict[str, str]) -> float:
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
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        token_dir = Path(env["XDG_CONFIG_HOME"]) / "mnoted"
        while True:
            try:
                token = (token_dir / "owner.token").read_text().strip()
                status, _ = Client(sock, token=token).request("GET", "/v1/workspaces")
                if status == 200:
                    return time.perf_counter() - t0
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
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="mnb") as tmp:
            base = Path(tmp)
            root = base / "notes"
            env = {
                **os.environ,
                **GIT_ENV,
                "HOME": str(base),
                "XDG_CONFIG_HOME": str(base / "cfg"),
                "XDG_RUNTIME_DIR": str(base / "run"),
                "MNOTED_LOG": "warning",
            }
            build_repo(root, size, env)
            Workspace.init(root).close()
            cold = time_daemon(root, base, env)
            warm = time_daemon(root, base, env)
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
                f"{size:>7,} pages: daemon ready {cold:6.2f} s first start, "
                f"{warm:6.2f} s next start | git status {status:6.2f} s | "
                f"parse every page {parse_all:6.2f} s"
            )


if __name__ == "__main__":
    main()
