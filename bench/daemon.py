"""The daemon end to end, over its socket, beside the floors it cannot beat.

Figures are median and p99 in milliseconds, each next to a reference measured in the same
run: the floors, measured raw by the bench itself (one round trip to the daemon's socket
with a bare HTTP request, one atomic file write with fsync, one incremental commit made
with libgit2 with its fsync on), and `git add FILE && git commit` as subprocesses (one at a
time beside one agent's write; as many at once as there are agents beside theirs). Where npm is
available, the same edit and read of the same 10 KB page through the MCP filesystem server
(`@modelcontextprotocol/server-filesystem` over MCP stdio, installed into a cache folder
outside the repository: see bench/mcpfs.py), timed before the daemon starts.

    python bench/daemon.py [--sizes 100,10000] [--writes 100] [--agents 32] [--no-mcp]
    python bench/daemon.py --sizes 100000    # 100,000 files: about 1.5-2 minutes
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pygit2
from commit import build_repo, quantiles
from core import build_page
from fixture import build_packed_repo, daemon_env
from mcpfs import Server, compare, install

from mnoted.client.client import Client, Unreachable
from mnoted.core.page import parse_page
from mnoted.store import Workspace
from mnoted.store.atomic import write_atomic
from mnoted.store.statedir import STATE_DIR


def timed(fn: Callable[[], object], n: int) -> tuple[float, float]:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return quantiles(samples)


def line(
    label: str,
    value: tuple[float, float],
    ref: tuple[float, float] | None = None,
    ref_label: str = "",
) -> None:
    text = f"  {label:<44} {value[0]:8.2f} ms (p99 {value[1]:8.2f})"
    if ref is not None:
        text += f"   {ref_label} {ref[0]:8.2f} ms  ratio {value[0] / ref[0]:6.2f}"
    print(text)


class Daemon:
    def __init__(
        self,
        root: Path,
        base: Path,
        env: dict[str, str],
        command: Sequence[str] = (sys.executable, "-m", "mnoted.cli.main"),
    ) -> None:
        """The daemon on ``root``, started by ``command`` (the CLI's arguments follow)."""
        self.sock = base / "b.sock"
        self.env = env
        self.proc = subprocess.Popen(
            [
                *command,
                "daemon",
                "--workspace",
                str(root),
                "--socket",
                str(self.sock),
            ],
            env=env,
            # `-m` looks in the working folder first: there, the package of whatever checkout
            # the bench was started in would run instead of the one PYTHONPATH names
            cwd=base,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        token_file = Path(env["XDG_CONFIG_HOME"]) / "mnoted" / "owner.token"
        while True:
            try:
                self.token = token_file.read_text().strip()
                if self.client().request("GET", "/v1/workspaces")[0] == 200:
                    break
            except (Unreachable, FileNotFoundError):
                time.sleep(0.02)

    def client(self) -> Client:
        return Client(self.sock, token=getattr(self, "token", None))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def search_ready(client: Client, limit: float = 1800.0) -> float:
    """Seconds until the search index's first pass over the workspace ended. The pass runs on
    a thread beside the writer (minutes at 100,000 notes) and shares the GIL with it: the
    figures below are of a daemon at rest, as it is once a workspace was indexed."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        listed = client.request("GET", "/v1/workspaces")[1]["workspaces"]
        states = [_search_state(entry) for entry in listed]
        if states and all(state in ("ready", "failed", "stopped") for state in states):
            break
        time.sleep(0.5)
    return time.monotonic() - started


def _search_state(value: Any) -> str | None:
    """The ``search.state`` anywhere in a workspace's status."""
    if isinstance(value, dict):
        found = value.get("search")
        if isinstance(found, dict) and isinstance(found.get("state"), str):
            return str(found["state"])
        for item in value.values():
            state = _search_state(item)
            if state is not None:
                return state
    return None


def workspace(base: Path, size: int, env: dict[str, str]) -> Path:
    root = base / f"ws{size}"
    build_packed_repo(root, size, env)
    # The baseline's repository: a clone of the same tree (the daemon owns the workspace).
    clone = ["git", "clone", "-q", str(root), str(base / f"git{size}")]
    subprocess.run(clone, env=env, check=True)
    (root / "page.md").write_bytes(build_page(10_000))
    (root / "big.md").write_bytes(build_page(1_000_000))
    Workspace.init(root).close()
    # Written back now, not 30 s later (the kernel's dirty expiry) under the timed calls: at
    # 100,000 files the two trees leave some 400 MB to write.
    os.sync()
    return root


def edit_body(client: Client, i: int, doc: str = "page.md") -> dict[str, Any]:
    # Alternate between two texts so the search always matches exactly once.
    a, b = (
        ("mnoted bench marker A", "mnoted bench marker B")
        if i % 2 == 0
        else ("mnoted bench marker B", "mnoted bench marker A")
    )
    return client.envelope(
        "mnote.doc.markdown_edit", doc, {"operations": [{"search": a, "replace": b}]}
    )


def raw_request(sock: Path, token: str, method: str, path: str, body: bytes = b"") -> bytes:
    """One request on a new connection, written and read by hand (no HTTP library, no JSON
    decoding): the answer's bytes once all of them arrived."""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: mnoted\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(str(sock))
        conn.sendall(head.encode() + body)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += conn.recv(65536)
        header, _, rest = buf.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in header.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += conn.recv(65536)
    return rest


class Floors:
    """The write floors, measured raw by the bench on a repository of their own: an atomic
    file write with fsync, and libgit2's incremental commit of one file with its own fsync
    of the git directory on (blob, root tree, commit, branch: the shape of the timed write,
    a page at the root), what a minimal durable commit costs."""

    def __init__(self, base: Path, env: dict[str, str]) -> None:
        self.root = base / "floor"
        build_repo(self.root, 100, env)
        self.repo = pygit2.Repository(str(self.root))
        self.sig = pygit2.Signature("bench", "bench@localhost")
        self.counter = iter(range(10**9))

    def atomic(self) -> None:
        write_atomic(self.root / "x.md", os.urandom(64))

    def commit(self) -> None:
        pygit2.settings.enable_fsync_gitdir(True)  # process-wide: only around this commit
        try:
            head = self.repo.head.peel(pygit2.Commit)
            blob = self.repo.create_blob(f"{next(self.counter)}\n".encode())
            tree = self.repo.TreeBuilder(head.tree)
            tree.insert("c.md", blob, pygit2.GIT_FILEMODE_BLOB)
            self.repo.create_commit(
                "refs/heads/main", self.sig, self.sig, "c", tree.write(), [head.id]
            )
        finally:
            pygit2.settings.enable_fsync_gitdir(False)


def sidecar_bytes(root: Path) -> int:
    """Bytes of the sidecar database's pages in use, as committed (its WAL read too)."""
    db = sqlite3.connect(f"file:{root / STATE_DIR / 'state.sqlite3'}?mode=ro", uri=True)
    try:
        pages, free, size = (
            db.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("page_count", "freelist_count", "page_size")
        )
    finally:
        db.close()
    return int((pages - free) * size)


def objects_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / ".git/objects").rglob("*") if p.is_file())


def paired(
    fns: Sequence[Callable[[], object]], n: int, block: int = 10
) -> list[tuple[float, float]]:
    """Each of ``fns`` timed ``n`` times, taking turns by blocks of ``block`` calls made back
    to back: every figure comes from the same stretch of the run, so a ratio between them
    holds while the machine's speed drifts, and each block runs as hot as a busy client's
    calls do (a pause between calls lets this VM's idle CPU make every call slower)."""
    samples: list[list[float]] = [[] for _ in fns]
    for start in range(0, n, block):
        for fn, out in zip(fns, samples, strict=True):
            for _ in range(min(block, n - start)):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
    return [quantiles(s) for s in samples]


def reads_per_second(daemon: Daemon, conns: int, seconds: float) -> float:
    done = [0]
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def reader() -> None:
        c = daemon.client()
        body = c.envelope("mnote.page.get", "page.md")
        while time.perf_counter() < stop:
            c.request("POST", "/v1/tools/call", body)
            with lock:
                done[0] += 1

    threads = [threading.Thread(target=reader) for _ in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0] / seconds


def git_at_once(root: Path, env: dict[str, str], agents: int, rounds: int) -> tuple[int, ...]:
    """What the agents' burst stands against: ``agents`` processes at once, each editing a
    file of its own and running `git add FILE && git commit`, ``rounds`` times over, in the
    baseline's clone. Returns the runs that failed (Git's `index.lock` is taken), the files
    left uncommitted, the commits that took another run's staged file with their own, and
    the runs."""
    folder = root / "agents"
    folder.mkdir(exist_ok=True)
    names = [f"agents/g{k}.md" for k in range(agents)]
    for name in names:
        (root / name).write_text("# Agent\n")
    subprocess.run(["git", "-C", str(root), "add", "agents"], env=env, check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", "agents"], env=env, check=True)
    start = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], env=env, check=True, capture_output=True
    ).stdout.strip()
    failed = 0
    for r in range(rounds):
        runs = []
        for k, name in enumerate(names):
            (root / name).write_text(f"# Agent\n\nround {r}\n")
            script = f"git add {name} && git commit -q -m 'g{k} round {r}'"
            runs.append(
                subprocess.Popen(
                    ["sh", "-c", script],
                    cwd=root,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        failed += sum(run.wait() != 0 for run in runs)
    status = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--", "agents"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    log = subprocess.run(
        [
            "git",
            "-C",
            str(root),
            "log",
            "--format=tformat:@",
            "--name-only",
            f"{start.decode()}..HEAD",
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    mixed = sum(len(c.split()) > 1 for c in log.split("@")[1:])
    return failed, len(status.splitlines()), mixed, agents * rounds


def bench_size(
    base: Path,
    size: int,
    env: dict[str, str],
    writes: int,
    floors: Floors,
    agents: int,
    mcp: Server | None,
) -> None:
    root = workspace(base, size, env)
    with (root / "page.md").open("a") as fh:
        fh.write("\nmnoted bench marker A\n")
    mcp_out: dict[str, list[float]] | None = None
    if mcp is not None:
        # The same edits and reads of the same page through the MCP filesystem server,
        # before the daemon starts (as a user without mnoted would run it, with no watcher
        # committing the server's edits behind it) and right before mnoted's own are timed.
        mcp_out = compare(mcp, root, "page.md", writes)
    daemon = Daemon(root, base, env)
    try:
        client = daemon.client()
        token = daemon.token
        took = search_ready(client)
        print(f"  search index's first pass, before the timed calls  {took:.1f} s")

        def health() -> bytes:
            return raw_request(daemon.sock, token, "GET", "/v1/health")

        counter = iter(range(10**9))
        # The timed write and the floors take turns (`paired`); the write's bodies are made
        # beforehand and sent and read raw, as the round trip is. The same edits through
        # the project's client take turns with them too: the reference of the comparisons
        # below.
        # Both swap the page's marker back and forth: by blocks of ten, each starting on an
        # even count, each finds the marker where the other left it.
        bodies = iter(
            [json.dumps(edit_body(client, next(counter))).encode() for _ in range(writes)]
        )
        answers: list[bytes] = []
        client_counter = iter(range(10**9))

        def write() -> None:
            body = edit_body(client, next(client_counter))
            resp = client.request("POST", "/v1/tools/call", body)[1]
            assert resp.get("ok"), resp

        w_raw, w, rtt, atomic, commit = paired(
            [
                lambda: answers.append(
                    raw_request(daemon.sock, token, "POST", "/v1/tools/call", next(bodies))
                ),
                write,
                health,
                floors.atomic,
                floors.commit,
            ],
            writes,
        )
        failed = [a for a in answers if not json.loads(a).get("ok")]
        assert not failed, failed[0]
        print(f"workspace of {size:,} files")
        line("socket round trip (GET /v1/health)", rtt)
        line("floor: atomic write + fsync", atomic)
        line("floor: incremental commit + fsync (libgit2)", commit)
        floor_sum = (rtt[0] + atomic[0] + commit[0], 0.0)
        line("durable agent write (markdown_edit, 10 KB)", w_raw, floor_sum, "floor sum")
        line("  the same through the project's client", w, floor_sum, "floor sum")
        time.sleep(1.0)  # the writer's idle work after writes (the Git index) is done
        git_samples = []
        git_root = base / f"git{size}"  # made by workspace()
        for k in range(min(writes, 30)):
            (git_root / "gitpage.md").write_text(f"edit {k}\n")
            t0 = time.perf_counter()
            subprocess.run(["git", "-C", str(git_root), "add", "gitpage.md"], env=env, check=True)
            subprocess.run(
                ["git", "-C", str(git_root), "commit", "-q", "-m", f"e{k}"], env=env, check=True
            )
            git_samples.append(time.perf_counter() - t0)
        line("baseline: git add FILE && git commit", quantiles(git_samples), w, "mnoted")
        reads: dict[str, tuple[float, float]] = {}
        for tool in ("mnote.page.get", "mnote.doc.fetch"):
            client.request("POST", "/v1/tools/call", client.envelope(tool, "page.md"))
            # Bodies made beforehand (each call has its own ids), sent and read raw, taking
            # turns with the round trip; then both through the project's client
            # (mnoted.client.client: a kept connection, the answer parsed by pydantic_core).
            bodies = iter(
                [json.dumps(client.envelope(tool, "page.md")).encode() for _ in range(writes)]
            )
            reads[tool], rt = paired(
                [
                    lambda bodies=bodies: raw_request(  # type: ignore[misc]
                        daemon.sock, token, "POST", "/v1/tools/call", next(bodies)
                    ),
                    health,
                ],
                writes,
            )
            line(f"read: {tool} (cached 10 KB page)", reads[tool], rt, "round trip")
            by_client, rt_client = paired(
                [
                    lambda tool=tool: client.request(  # type: ignore[misc]
                        "POST", "/v1/tools/call", client.envelope(tool, "page.md")
                    ),
                    lambda: client.request("GET", "/v1/health"),
                ],
                writes,
            )
            line("  the same through the project's client", by_client, rt_client, "round trip")
        get = reads["mnote.page.get"]
        fetch = reads["mnote.doc.fetch"]
        # The same read with new arguments each time: no kept answer, the call goes to the
        # workspace's thread (page parsed and cached there), as a first read does.
        budgets = iter(range(50_000, 10**9))
        computed = timed(
            lambda: client.request(
                "POST",
                "/v1/tools/call",
                client.envelope("mnote.doc.fetch", "page.md", {"budget": next(budgets)}),
            ),
            writes,
        )
        line("read: mnote.doc.fetch, answer not kept (client)", computed, rt_client, "round trip")
        for conns in (1, 8):
            rate = reads_per_second(daemon, conns, 2.0)
            print(f"  {'reads per second, ' + str(conns) + ' connection(s)':<44} {rate:8.0f}")
        # Page size: one block edit on a 1 MB page against the same on a 10 KB page.
        with (root / "big.md").open("a") as fh:
            fh.write("\nmnoted bench marker A\n")
        client.request("POST", "/v1/tools/call", client.envelope("mnote.page.get", "big.md"))
        big_counter = iter(range(10**9))
        # In turns with the 10 KB write, as the floors are: the write's figure from minutes
        # before would hold the disk's drift in the ratio. As many of each as of the other
        # writes: with 30 (three blocks each) six tries on one daemon gave 1.95-2.74, with
        # 100 four gave 2.27-2.47 (the 10 KB write's blocks after the 1 MB ones vary most).
        big, small = paired(
            [
                lambda: client.request(
                    "POST", "/v1/tools/call", edit_body(client, next(big_counter), "big.md")
                ),
                write,
            ],
            writes,
        )
        line("durable write on a 1 MB page", big, small, "10 KB page")
        # What a write of the 1 MB page leaves on disk beside its commit, against what it
        # adds to Git's objects (a loose object: the page compressed). Each of these writes
        # makes a text the page never had (the writes above swap two texts).
        marker = "mnoted bench marker " + "AB"[next(big_counter) % 2]
        steps = [marker, *(f"{marker} {k}" for k in range(1, 66))]  # 64 timed: two whole lists
        for k, (old, new) in enumerate(itertools.pairwise(steps)):
            if k == 1:  # (the first write's ids come from the texts swapped above)
                before = sidecar_bytes(root), objects_bytes(root)
            edit = {"operations": [{"search": old, "replace": new}]}
            body = client.envelope("mnote.doc.markdown_edit", "big.md", edit)
            answer = client.request("POST", "/v1/tools/call", body)[1]
            if not answer.get("ok"):
                raise SystemExit(f"a write of the 1 MB page failed: {answer}")
        side, objects = sidecar_bytes(root) - before[0], objects_bytes(root) - before[1]
        print(
            f"  {'1 MB page: sidecar growth per write':<44} {side / 64 / 1024:8.1f} KB"
            f"          Git objects {objects / 64 / 1024:8.1f} KB  ratio {side / objects:6.3f}"
        )
        # An editor's save of the 1 MB page (a paragraph typed in its middle, written to a
        # temporary file renamed over it) until a read answers with it: committed, its
        # block ids carried over; beside one parse of the same bytes in this process.
        data = (root / "big.md").read_bytes()
        at = data.index(b"\n\n", len(data) // 2) + 2
        edited = data[:at] + b"A paragraph typed in an editor.\n\n" + data[at:]
        t0 = time.perf_counter()
        parse_page(edited)
        parsed = time.perf_counter() - t0
        (root / ".big.md.swp").write_bytes(edited)
        t0 = time.perf_counter()
        os.replace(root / ".big.md.swp", root / "big.md")
        answer = client.request(
            "POST", "/v1/tools/call", client.envelope("mnote.page.get", "big.md")
        )[1]
        saved = time.perf_counter() - t0
        if not answer.get("ok") or "typed in an editor" not in json.dumps(answer["result"]):
            raise SystemExit(f"the editor's save was not read back: {str(answer)[:300]}")
        print(
            f"  {'1 MB page saved in an editor, read back':<44} {saved * 1000:8.0f} ms"
            f"               parse {parsed * 1000:8.0f} ms  ratio {saved / parsed:6.2f}"
        )
        if agents > 0:  # (--agents 0 skips them)
            # Many agents writing distinct pages at once.
            latencies: list[float] = []
            failures = [0]
            per_agent = max(30, writes // 3)  # a few seconds: one burst's ramp is a small part
            for k in range(agents):
                (root / f"agents/a{k}.md").parent.mkdir(exist_ok=True)
                (root / f"agents/a{k}.md").write_text("# Agent\n\nmnoted bench marker A\n")
            client.request("POST", "/v1/tools/call", client.envelope("mnote.workspace.list", None))
            time.sleep(1.0)

            def agent(k: int, first: int) -> None:
                c = daemon.client()
                for i in range(first, first + per_agent):
                    t0 = time.perf_counter()
                    body = edit_body(c, i, f"agents/a{k}.md")
                    resp = c.request("POST", "/v1/tools/call", body)[1]
                    latencies.append(time.perf_counter() - t0)
                    if not resp.get("ok"):
                        failures[0] += 1

            rates = []
            for burst in range(3):  # a burst lasts a second or two on a VM whose speed drifts
                t0 = time.perf_counter()
                threads = [
                    threading.Thread(target=agent, args=(k, burst * per_agent))
                    for k in range(agents)
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                rates.append(agents * per_agent / (time.perf_counter() - t0))
            print(
                f"  {f'{agents} agents, distinct pages: commits/s':<44} "
                f"{statistics.median(rates):8.0f}   p99 {quantiles(latencies)[1]:8.2f} ms"
                f"   failures {failures[0]}   (bursts {' / '.join(f'{r:.0f}' for r in rates)})"
            )
    finally:
        daemon.stop()
    if agents > 0:
        failed, left, mixed, attempts = git_at_once(base / f"git{size}", env, agents, 4)
        print(
            f"  {f'{agents} x git add FILE && git commit at once':<44} failed {failed} of "
            f"{attempts}   files left uncommitted {left}   commits holding another's file {mixed}"
        )
    if mcp_out is not None:
        mcp_edit, mcp_read = quantiles(mcp_out["edit"]), quantiles(mcp_out["read"])
        line("MCP fs server: edit_file (10 KB, no fsync)", mcp_edit)
        line("MCP fs server: read_text_file (10 KB)", mcp_read)
        line("durable agent write against MCP edit_file", w, mcp_edit, "MCP edit")
        line("mnote.page.get against MCP read_text_file", get, mcp_read, "MCP read")
        line("mnote.doc.fetch against MCP read_text_file", fetch, mcp_read, "MCP read")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,10000")
    parser.add_argument("--writes", type=int, default=100)
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument(
        "--no-mcp", action="store_true", help="skip the MCP filesystem server comparison"
    )
    args = parser.parse_args()
    mcp: Server | None = None
    if args.no_mcp:
        print("MCP filesystem server comparison skipped: --no-mcp")
    else:
        found = install()
        if isinstance(found, str):
            print(f"MCP filesystem server comparison skipped: {found}")
        else:
            mcp = found
            print(f"MCP filesystem server {found.version} ({found.entry})")
    with tempfile.TemporaryDirectory(prefix="mnd") as tmp:
        base = Path(tmp)
        env = daemon_env(base)
        floors = Floors(base, env)
        for size in (int(s) for s in args.sizes.split(",")):
            writes = args.writes + args.writes % 2  # even: see the marker's swaps
            bench_size(base, size, env, writes, floors, args.agents, mcp)


if __name__ == "__main__":
    main()
