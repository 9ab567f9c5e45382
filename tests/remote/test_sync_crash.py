"""SIGKILL at each step of a sync (fetch, merge objects, the landing's journal, branch and
files, after landing, after pushing): reopened, the workspace converges with the other
device, nothing is lost, Git is consistent."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.remote.test_sync import Device, run_git, settle

ROOT = Path(__file__).resolve().parents[2]
STEPS = (
    "sync-fetched",
    "sync-merge-written",
    "journal-written",
    "ref-updated",
    "files-written",
    "sync-landed",
    "sync-pushed",
)


@pytest.mark.slow
def test_kill_at_each_sync_step(tmp_path: Path) -> None:
    bare = tmp_path / "remote.git"
    run_git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    a_root, b_root = tmp_path / "a", tmp_path / "b"
    a = Device(a_root, "laptop")
    a.write("plan.md", "# Plan\n\n" + "".join(f"para {k}\n\n" for k in range(2 * len(STEPS))))
    a.write("same.md", "# Same\n\n" + "".join(f"line {k}\n\n" for k in range(len(STEPS))))
    run_git(a_root, "remote", "add", "origin", bare.as_uri())
    assert a.sync.cycle()
    a.ws.close()
    run_git(tmp_path, "clone", "-q", bare.as_uri(), str(b_root))
    b = Device(b_root, "desktop")
    try:
        for i, step in enumerate(STEPS):
            b.write(f"b{i}.md", f"# B{i}\n")
            b.write("plan.md", b.read("plan.md").replace(f"para {2 * i}\n", f"para {2 * i} b\n"))
            b.write("same.md", b.read("same.md").replace(f"line {i}\n", f"line {i} from b\n"))
            assert b.sync.cycle()
            a = Device(a_root, "laptop")
            a.write("same.md", a.read("same.md").replace(f"line {i}\n", f"line {i} from a\n"))
            a.write(f"a{i}.md", f"# A{i}\n")
            a.write(
                "plan.md", a.read("plan.md").replace(f"para {2 * i + 1}\n", f"para {2 * i + 1} a\n")
            )
            a.ws.close()
            child = subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "tests" / "remote" / "crash_sync.py"),
                    str(a_root),
                    step,
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert child.returncode == -signal.SIGKILL, (step, child.stdout, child.stderr[-2000:])
            a = Device(a_root, "laptop")  # recovery on open
            try:
                settle(a, b)
                assert a.tree() == b.tree(), step
                text = a.read("plan.md")
                for k in range(i + 1):
                    assert f"para {2 * k} b\n" in text and f"para {2 * k + 1} a\n" in text, step
                    assert (a_root / f"a{k}.md").exists() and (a_root / f"b{k}.md").exists()
                # the same line edited on both: one version in the page, the other held
                held = a.sync.status()["held"] + b.sync.status()["held"]
                page = a.read("same.md")
                for k in range(i + 1):
                    other = f"line {k} from b" if f"line {k} from a" in page else f"line {k} from a"
                    assert f"line {k} from" in page, step
                    assert any(other in h["theirs"] for h in _raw_held(a, b)), (step, held)
                a.ws.idle()
                assert run_git(a_root, "status", "--porcelain") == "", step
                fsck = subprocess.run(
                    ["git", "fsck", "--strict"], cwd=a_root, capture_output=True, text=True
                )
                assert fsck.returncode == 0, (step, fsck.stderr)
            finally:
                a.ws.close()
    finally:
        b.ws.close()


def _raw_held(*devices: Device) -> list[dict[str, str]]:
    """Held versions with their text, as kept in each device's sync state (not pending)."""
    out = []
    for d in devices:
        state = d.sync._state["held"]  # (the status leaves the texts out)
        out += [h for h in state if not h.get("pending")]
    return out
