"""Two daemons on clones of one bare ``file://`` remote: writes travel, edits merge, no
version is lost, ids agree, an unreachable remote and a SIGKILL mid-sync are survived.

``MNOTE_SYNC_ROUNDS`` sets the rounds of random concurrent edits (default 3; 50 for a deep
run).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnoted.store import Workspace
from tests.e2e.conftest import DaemonProcess, fsck, wait_for

ROUNDS = int(os.environ.get("MNOTE_SYNC_ROUNDS", "3"))
SYNC_ENV = {"MNOTE_SYNC_INTERVAL": "0.15", "MNOTE_SYNC_PUSH_DELAY": "0.05"}


def run_git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env
    ).stdout


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def call(d: DaemonProcess, tool: str, doc: str | None, **args: Any) -> dict[str, Any]:
    answer = d.client().call(tool, doc, args)
    assert answer["ok"], answer
    result: dict[str, Any] = answer["result"]
    return result


class Pair:
    def __init__(self, base: Path) -> None:
        self.bare = base / "remote.git"
        run_git(base, "init", "-q", "--bare", "-b", "main", str(self.bare))
        a_ws = base / "a" / "notes"
        Workspace.init(a_ws).close()
        (a_ws / "plan.md").write_text("# Plan\n\nShip on Monday.\n\n- one\n- two\n")
        self.a = self._daemon(base / "a", a_ws, "laptop")
        assert (
            self.a.cli(
                "remote", "add", "origin", self.bare.as_uri(), "--workspace", str(a_ws)
            ).returncode
            == 0
        )
        out = self.a.cli("sync", "now")
        assert out.returncode == 0, out.stdout + out.stderr
        b_ws = base / "b" / "notes"
        run_git(base, "clone", "-q", self.bare.as_uri(), str(b_ws))
        Workspace.init(b_ws).close()
        self.b = self._daemon(base / "b", b_ws, "desktop")

    def _daemon(self, base: Path, ws: Path, host: str) -> DaemonProcess:
        d = DaemonProcess(base, ws)
        d.env.update(SYNC_ENV, MNOTE_SYNC_HOST=host)
        d.start()
        return d

    def both(self) -> tuple[DaemonProcess, DaemonProcess]:
        return self.a, self.b

    def converged(self) -> bool:
        a, b = self.a, self.b
        heads = {d.git("rev-parse", "HEAD").strip() for d in (a, b)}
        remote = run_git(self.bare, "rev-parse", "main").strip()
        return len(heads) == 1 and remote in heads and tree(a.workspace) == tree(b.workspace)

    def settle(self, timeout: float = 30.0) -> None:
        wait_for(self.converged, "both devices at one head and one tree", timeout)

    def held(self) -> list[dict[str, Any]]:
        out = []
        for d in self.both():
            status = json.loads(d.cli("--json", "status").stdout)
            out += status["workspaces"][0]["remote"]["held"]
        return out

    def close(self) -> None:
        for d in self.both():
            if d.proc is not None and d.proc.poll() is None:
                d.stop()


@pytest.fixture
def pair() -> Iterator[Pair]:
    with tempfile.TemporaryDirectory(prefix="mn") as tmp:
        p = Pair(Path(tmp))
        try:
            yield p
        finally:
            p.close()


def test_writes_travel_merge_and_keep_both_versions(pair: Pair) -> None:
    a, b = pair.both()
    wait_for(lambda: (b.workspace / "plan.md").exists(), "the clone served")
    # an agent's write on a and an editor's save on b each reach the other
    call(
        a,
        "mnote.doc.markdown_edit",
        "plan.md",
        operations=[{"search": "Monday", "replace": "Tuesday"}],
    )
    (b.workspace / "ideas.md").write_text("# Ideas\n\nfrom the desktop editor\n")
    pair.settle()
    assert "Tuesday" in (b.workspace / "plan.md").read_text()
    assert (a.workspace / "ideas.md").read_text() == "# Ideas\n\nfrom the desktop editor\n"
    # the same page and blocks have the same ids on both
    pages = [call(d, "mnote.page.get", "ideas.md") for d in (a, b)]
    assert pages[0]["documentId"] == pages[1]["documentId"]
    assert [x["id"] for x in pages[0]["blocks"]] == [x["id"] for x in pages[1]["blocks"]]
    # disjoint edits of one page merge; the same block edited on both keeps both versions
    call(
        a,
        "mnote.doc.markdown_edit",
        "plan.md",
        operations=[{"search": "- one", "replace": "- one (laptop)"}],
    )
    (b.workspace / "plan.md").write_text(
        (b.workspace / "plan.md").read_text().replace("- two", "- two (desktop)")
    )
    pair.settle()
    text = (a.workspace / "plan.md").read_text()
    assert "- one (laptop)" in text and "- two (desktop)" in text
    call(
        a,
        "mnote.doc.markdown_edit",
        "ideas.md",
        operations=[{"search": "from the desktop editor", "replace": "laptop words"}],
    )
    (b.workspace / "ideas.md").write_text("# Ideas\n\ndesktop words\n")
    pair.settle()
    wait_for(pair.held, "a held version in the status")
    text = (a.workspace / "ideas.md").read_text()
    held = pair.held()
    assert len(held) == 1 and held[0]["path"] == "ideas.md", held
    holder = a if held[0]["sessionId"] and _has_session(a, held[0]["sessionId"]) else b
    session = call(holder, "mnote.review.get", None, sessionId=held[0]["sessionId"])
    assert session["state"] == "awaiting_user", session
    proposal = json.dumps(session["proposal"])
    assert ("laptop words" in text and "desktop words" in proposal) or (
        "desktop words" in text and "laptop words" in proposal
    )
    assert "<<<<<<<" not in text
    human = holder.cli("status").stdout
    assert "held versions from merges: 1" in human and "remote origin" in human
    # accepting the held version puts it in the page, on both devices; it leaves the list
    call(holder, "mnote.review.accept", None, sessionId=held[0]["sessionId"])
    kept_before = "laptop words" if "laptop words" in text else "desktop words"
    other = "desktop words" if kept_before == "laptop words" else "laptop words"
    pair.settle()
    assert other in (a.workspace / "ideas.md").read_text()
    assert other in (b.workspace / "ideas.md").read_text()
    wait_for(lambda: not pair.held(), "the decided version gone from the status")
    assert fsck(a.workspace).returncode == 0


def _has_session(d: DaemonProcess, sid: str) -> bool:
    out = json.loads(d.cli("--json", "review", "list").stdout)
    return any(s["sessionId"] == sid for s in out["result"]["sessions"])


WORDS = ["alpha", "beta", "gamma", "delta", "omega"]


def test_random_concurrent_edits_lose_nothing(pair: Pair) -> None:
    rng = random.Random(45)
    a, b = pair.both()
    pair.settle()
    written: list[str] = []
    for n in range(ROUNDS):
        for side, d in (("a", a), ("b", b)):
            edit_at_random(rng, d, side, n, written)
        pair.settle(timeout=45)
    nothing_lost_and_ids_agree([a, b], written)


def edit_at_random(
    rng: random.Random, d: DaemonProcess, side: str, n: int, written: list[str]
) -> None:
    """One to three edits on ``d``: a block changed or added, by an editor's save or an
    agent's call; each carries a token recorded in ``written``. The agent edits by search
    and replace, so a version the sync landed meanwhile is edited, never overwritten (a
    whole-page replace from a stale read would drop what arrived: the caller's loss)."""
    for k in range(rng.randint(1, 3)):
        token = f"tok-{side}-{n}-{k}"
        written.append(token)
        page = rng.choice(["plan.md", "log.md", f"{side}-{n % 2}.md"])
        change = rng.random() < 0.5
        editor = rng.random() < 0.5
        word = rng.choice(WORDS)
        for _ in range(20):
            path = d.workspace / page
            old = path.read_text() if path.exists() else f"# {page}\n"
            blocks = old.rstrip("\n").split("\n\n")
            i = rng.randrange(1, len(blocks)) if change and len(blocks) > 1 else None
            if i is not None:
                search, replace = blocks[i], blocks[i] + f" {token}"
            else:
                search = blocks[-1]
                replace = f"{blocks[-1]}\n\n{word} {token}"
            if editor:
                new = old.replace(search, replace, 1) if path.exists() else f"{replace}\n"
                path.write_text(new)  # an editor's save
                break
            if path.exists():
                answer = d.client().call(
                    "mnote.doc.markdown_edit",
                    page,
                    {"operations": [{"search": search, "replace": replace}]},
                )
            else:
                answer = d.client().call(
                    "mnote.page.create", None, {"path": page, "content": f"{replace}\n"}
                )
            if answer["ok"]:
                break
            time.sleep(0.05)  # (the page changed under the read, or appeared: read again)
        else:
            raise AssertionError(f"{token} could not be written: {answer}")


def nothing_lost_and_ids_agree(devices: list[DaemonProcess], written: list[str]) -> None:
    """Every token is in a page or a held version (a review session); every page and block
    has one id on all devices."""
    everything = "".join(t.decode("utf-8", "replace") for t in tree(devices[0].workspace).values())
    held = json.dumps([_sessions(d) for d in devices])
    lost = [t for t in written if t not in everything and t not in held]
    assert lost == []
    listed = [
        {p["path"]: p["documentId"] for p in call(d, "mnote.workspace.list", None)["pages"]}
        for d in devices
    ]
    differ = {
        p: [ids.get(p) for ids in listed]
        for p in set().union(*listed)
        if len({ids.get(p) for ids in listed}) > 1
    }
    assert differ == {}
    for path in listed[0]:
        blocks = [[x["id"] for x in call(d, "mnote.page.get", path)["blocks"]] for d in devices]
        assert all(ids == blocks[0] for ids in blocks), (path, blocks)


HTTP_ROUNDS = int(os.environ.get("MNOTE_SYNC_HTTP_ROUNDS", "2"))


@pytest.mark.slow
def test_three_daemons_over_smart_http() -> None:
    """Three daemons sync through ``git http-backend`` (Git's smart HTTP behind a localhost
    server): random concurrent edits on all three (``MNOTE_SYNC_HTTP_ROUNDS`` rounds) end
    on one head and one tree, nothing lost, one id per page and block everywhere."""
    from tests.e2e import githttp

    rng = random.Random(4545)
    with tempfile.TemporaryDirectory(prefix="mn") as tmp:
        base = Path(tmp)
        served = base / "srv"
        served.mkdir()
        bare = githttp.bare(served, "notes.git")
        server, root = githttp.serve(served)
        url = root + "notes.git"
        env = dict(SYNC_ENV, no_proxy="127.0.0.1,localhost", NO_PROXY="127.0.0.1,localhost")
        devices: list[DaemonProcess] = []
        try:
            for n, host in enumerate(("laptop", "desktop", "server")):
                ws = base / host / "notes"
                if n == 0:
                    Workspace.init(ws).close()
                    (ws / "plan.md").write_text("# Plan\n\nShip on Monday.\n\n- one\n- two\n")
                else:
                    run_git(base, "clone", "-q", url, str(ws))
                    Workspace.init(ws).close()
                d = DaemonProcess(base / host, ws)
                d.env.update(env, MNOTE_SYNC_HOST=host)
                d.start()
                devices.append(d)
                if n == 0:
                    added = d.cli("remote", "add", "origin", url, "--workspace", str(ws))
                    assert added.returncode == 0, added.stderr
                    out = d.cli("sync", "now")
                    assert out.returncode == 0, out.stdout + out.stderr

            def converged() -> bool:
                heads = {d.git("rev-parse", "HEAD").strip() for d in devices}
                remote = run_git(bare, "rev-parse", "main").strip()
                trees = [tree(d.workspace) for d in devices]
                return heads == {remote} and all(t == trees[0] for t in trees)

            written: list[str] = []
            for n in range(HTTP_ROUNDS):
                for side, d in zip("abc", devices, strict=True):
                    edit_at_random(rng, d, side, n, written)
                wait_for(converged, "three devices at one head and one tree", 60)
            nothing_lost_and_ids_agree(devices, written)
            status = json.loads(devices[2].cli("--json", "status").stdout)
            remote = status["workspaces"][0]["remote"]["remotes"][0]
            assert remote["url"] == url and remote["lastError"] is None
        finally:
            for d in devices:
                if d.proc is not None and d.proc.poll() is None:
                    d.stop()
            server.shutdown()


def _sessions(d: DaemonProcess) -> list[Any]:
    """The review sessions of ``d``, each with its proposal (a held version's text): all of
    them (a deep run holds more than a listing's default 50)."""
    listed = call(d, "mnote.review.list", None, limit=1000)["sessions"]
    return [call(d, "mnote.review.get", None, sessionId=s["sessionId"]) for s in listed]


class Events:
    """The types of the events a daemon streams on /v1/events, collected on a thread."""

    def __init__(self, d: DaemonProcess) -> None:
        import socket
        import threading

        self.types: list[str] = []
        self.ready = threading.Event()
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(d.socket))
        self.sock.sendall(
            f"GET /v1/events HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {d.owner_token()}\r\n\r\n".encode()
        )
        threading.Thread(target=self._listen, daemon=True).start()
        assert self.ready.wait(10)

    def _listen(self) -> None:
        buf = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            if b": connected" in buf:
                self.ready.set()
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.startswith(b"event: "):
                    self.types.append(line[7:].decode())


def test_remote_away_and_back(pair: Pair) -> None:
    a, b = pair.both()
    pair.settle()
    events = Events(a)
    away = pair.bare.with_name("away.git")
    pair.bare.rename(away)
    call(
        a,
        "mnote.doc.markdown_edit",
        "plan.md",
        operations=[{"search": "Monday", "replace": "Sunday"}],
    )
    wait_for(
        lambda: json.loads(a.cli("--json", "status").stdout)["workspaces"][0]["remote"]["remotes"][
            0
        ]["lastError"],
        "the error in the status",
    )
    # local writes go on while the remote is away
    call(
        a,
        "mnote.doc.markdown_edit",
        "plan.md",
        operations=[{"search": "- one", "replace": "- uno"}],
    )
    away.rename(pair.bare)
    pair.settle(timeout=45)
    assert "Sunday" in (b.workspace / "plan.md").read_text()
    assert "- uno" in (b.workspace / "plan.md").read_text()
    # the status went out as events too: the failure, then the push once it was back
    seen = events.types
    assert "sync.error" in seen and "sync.pushed" in seen[seen.index("sync.error") :], seen
    events.sock.close()


def test_sigkill_during_sync_converges_after_restart(pair: Pair) -> None:
    a, b = pair.both()
    pair.settle()
    for i in range(3):
        (b.workspace / f"from-b-{i}.md").write_text(f"# B{i}\n\nbody {i}\n")
        (a.workspace / f"from-a-{i}.md").write_text(f"# A{i}\n\nbody {i}\n")
        time.sleep(0.2 + 0.15 * i)
        assert a.proc is not None
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        a.start()
    pair.settle(timeout=45)
    names = set(tree(b.workspace))
    assert {f"from-a-{i}.md" for i in range(3)} <= names
    assert {f"from-b-{i}.md" for i in range(3)} <= names
    a.wait_idle_clean()
    assert fsck(a.workspace).returncode == 0
