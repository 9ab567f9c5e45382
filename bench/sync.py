"""Sync through a Git remote: a write's trip from one device to another, and the cost of
merging many incoming commits, beside ``git pull`` of the same commits.

1. Two daemons on clones of one bare ``file://`` remote; an agent's write on the first,
   timed until the second device's file has it (fetch interval and push delay given).
2. ``N`` incoming commits (one page edited each, of a 200-page workspace) merged into a
   workspace with one local commit of its own: ``git fetch`` + the merge commit + its landing
   (files, index, sidecar), beside ``git pull --no-rebase`` of the same commits in a plain
   clone at the same commit. Then the same with the local commit touching pages the
   incoming commits also edit (other blocks): mnoted merges them; ``git pull`` may stop.

    python bench/sync.py [--commits 100,1000] [--writes 10] [--interval 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fixture import daemon_env

from mnoted.remote import git
from mnoted.remote.merging import plan_merge
from mnoted.store import CommandMeta, Workspace, Write

PAGES = 200


def sh(cwd: Path, *args: str, env: dict[str, str], check: bool = True) -> str:
    return subprocess.run(
        list(args), cwd=cwd, env=env, check=check, capture_output=True, text=True
    ).stdout


def page_text(i: int) -> str:
    paras = "\n\n".join(f"Paragraph {k} of page {i}: some words to merge." for k in range(8))
    return f"# Page {i}\n\n{paras}\n"


def write(ws: Workspace, path: str, data: str) -> None:
    ws.apply(CommandMeta("bench.write", actor="owner"), [Write(path, data.encode())])


def edit_para(text: str, k: int, tag: str) -> str:
    return text.replace(f"Paragraph {k} of", f"Paragraph {k} ({tag}) of", 1)


def merge_cost(
    tmp: Path, n: int, env: dict[str, str], overlap: bool, history: int = 0
) -> dict[str, object]:
    base = tmp / f"merge-{n}-{int(overlap)}-{history}"
    bare = base / "remote.git"
    base.mkdir()
    sh(base, "git", "init", "-q", "--bare", "-b", "main", str(bare), env=env)
    origin = Workspace.init(base / "origin")
    for i in range(PAGES):
        (origin.root / f"p{i:03}.md").write_text(page_text(i))
    origin.commit_external([f"p{i:03}.md" for i in range(PAGES)])
    for c in range(history):  # shared history both devices have before they part
        path = f"p{c % PAGES:03}.md"
        text = (origin.root / path).read_text()
        write(origin, path, text.rstrip("\n") + f"\n\nolder line {c}\n")
    sh(origin.root, "git", "remote", "add", "origin", bare.as_uri(), env=env)
    sh(origin.root, "git", "push", "-q", "origin", "main", env=env)
    sh(base, "git", "clone", "-q", bare.as_uri(), "ours", env=env)
    sh(base, "git", "clone", "-q", bare.as_uri(), "plain", env=env)
    rng = random.Random(n)
    for c in range(n):  # the incoming commits, made on the other device
        i = 0 if overlap and c % 10 == 0 else rng.randrange(PAGES)
        path = f"p{i:03}.md"
        text = (origin.root / path).read_text()
        write(origin, path, text.rstrip("\n") + f"\n\nline {c} from the desktop\n")
    sh(origin.root, "git", "push", "-q", "origin", "main", env=env)
    t_r = time.perf_counter()
    origin.rebuild()  # what a fast-forward over the other's merge costs with this history
    t_rebuild = time.perf_counter() - t_r
    origin.close()
    local = "p000.md" if overlap else "local.md"
    for where in ("ours", "plain"):
        root = base / where
        old = (root / local).read_text() if (root / local).exists() else ""
        new = edit_para(old, 3, "laptop") if old else "# Local\n"
        (root / local).write_text(new)
        sh(root, "git", "add", local, env=env)
        sh(root, "git", "commit", "-qm", "local edit", env=env)
    ws = Workspace.open(base / "ours")
    t0 = time.perf_counter()
    theirs, ran = git.fetch(ws.root, "origin", "main")
    t_fetch = time.perf_counter() - t0
    assert ran.ok and theirs is not None, ran.err
    import pygit2

    t1 = time.perf_counter()
    repo = pygit2.Repository(str(ws.root))
    plan = plan_merge(repo, ws.head, theirs, host="desktop", source="origin")
    assert plan.commit is not None
    landed = ws.land_commit(plan.commit, expect=ws.head, command_id="bench_merge")
    assert landed is not None
    ws.idle()
    t_merge = time.perf_counter() - t1
    sh(ws.root, "git", "push", "-q", "origin", "HEAD:main", env=env)
    ws.close()
    # the other device fast-forwards over that merge: the merge's first parent is the head
    # it pushed, so only the merge is indexed (it rebuilt when the first parent was ours)
    other = Workspace.open(base / "origin")
    back, ran = git.fetch(other.root, "origin", "main")
    assert ran.ok and back is not None, ran.err
    t3 = time.perf_counter()
    landed = other.land_commit(back, expect=other.head, command_id="bench_ff")
    assert landed is not None
    other.idle()
    t_ff = time.perf_counter() - t3
    other.close()
    t2 = time.perf_counter()
    pull = subprocess.run(
        ["git", "pull", "-q", "--no-rebase", "--no-edit", "origin", "main"],
        cwd=base / "plain",
        env=env,
        capture_output=True,
        text=True,
    )
    t_pull = time.perf_counter() - t2
    return {
        "fetch_ms": t_fetch * 1000,
        "merge_land_ms": t_merge * 1000,
        "ff_ms": t_ff * 1000,
        "rebuild_ms": t_rebuild * 1000,
        "git_pull_ms": t_pull * 1000,
        "git_pull_ok": pull.returncode == 0,
        "pages_merged": len(plan.merged),
        "held": len(plan.held),
    }


def latency(tmp: Path, writes: int, interval: float, env: dict[str, str]) -> list[float]:
    from tests.e2e.conftest import DaemonProcess

    base = tmp / "latency"
    base.mkdir()
    bare = base / "remote.git"
    sh(base, "git", "init", "-q", "--bare", "-b", "main", str(bare), env=env)
    a_ws = base / "a" / "notes"
    Workspace.init(a_ws).close()
    (a_ws / "plan.md").write_text("# Plan\n\nstart\n")
    sync_env = {"MNOTE_SYNC_INTERVAL": str(interval), "MNOTE_SYNC_PUSH_DELAY": "0.1"}
    a = DaemonProcess(base / "a", a_ws)
    a.env.update(sync_env, MNOTED_LOG="warning")
    a.start()
    b = None
    try:
        sh(a_ws, "git", "remote", "add", "origin", bare.as_uri(), env=env)
        assert a.cli("sync", "now").returncode == 0
        b_ws = base / "b" / "notes"
        sh(base, "git", "clone", "-q", bare.as_uri(), str(b_ws), env=env)
        Workspace.init(b_ws).close()
        b = DaemonProcess(base / "b", b_ws)
        b.env.update(sync_env, MNOTED_LOG="warning")
        b.start()
        out = []
        for k in range(writes):
            marker = f"write {k}"
            t0 = time.perf_counter()
            answer = a.client().call(
                "mnote.doc.markdown_edit",
                "plan.md",
                {
                    "operations": [
                        {"search": "start" if k == 0 else f"write {k - 1}", "replace": marker}
                    ]
                },
            )
            assert answer["ok"], answer
            deadline = time.monotonic() + 60
            while marker not in (b_ws / "plan.md").read_text():
                if time.monotonic() > deadline:
                    raise SystemExit("a write never arrived")
                time.sleep(0.005)
            out.append(time.perf_counter() - t0)
            time.sleep(interval * random.random())
        return out
    finally:
        a.stop()
        if b is not None:
            b.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", default="100,1000")
    ap.add_argument("--writes", type=int, default=10)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--history", default="0", help="shared commits before the devices part")
    ap.add_argument("--no-latency", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mnsync") as tmp:
        base = Path(tmp)
        env = daemon_env(base / "home")
        os.environ.update({k: v for k, v in env.items() if k.startswith("GIT_")})
        if not args.no_latency:
            times = latency(base, args.writes, args.interval, env)
            print(
                f"write on one device -> file on the other (fetch every {args.interval:g} s, "
                f"push after 0.1 s): median {statistics.median(times) * 1000:.0f} ms, "
                f"max {max(times) * 1000:.0f} ms ({len(times)} writes)"
            )
        for h in (int(x) for x in args.history.split(",")):
            for n in (int(x) for x in args.commits.split(",")):
                for overlap in (False, True):
                    r = merge_cost(base, n, env, overlap, h)
                    kind = "same pages, other blocks" if overlap else "disjoint pages"
                    print(
                        f"{h} shared, {n} incoming commits ({kind}): "
                        f"git fetch {r['fetch_ms']:.0f} ms; "
                        f"merge + landing {r['merge_land_ms']:.0f} ms "
                        f"({r['pages_merged']} pages merged on blocks, {r['held']} held); "
                        f"the other device's fast-forward over it {r['ff_ms']:.0f} ms "
                        f"(a sidecar rebuild along {h + n + 2} commits: {r['rebuild_ms']:.0f} ms); "
                        f"baseline git pull {r['git_pull_ms']:.0f} ms "
                        f"({'merged' if r['git_pull_ok'] else 'stopped at a conflict'})"
                    )
        print(json.dumps({"done": True}))


if __name__ == "__main__":
    main()
