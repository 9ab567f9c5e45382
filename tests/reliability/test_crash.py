"""SIGKILL the daemon at random moments under a mixed write load, restart, check everything.

An acknowledged write (the daemon answered ok) must be on disk and in HEAD's history with
its trailers, exactly once; nothing may be half-applied; `git fsck --strict` passes; the
working tree is clean once the daemon is idle; no temp or lock file of the daemon is left.
Runs a few rounds in CI; `MNOTE_CRASH_ROUNDS=200` digs deeper.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
import uuid

import pytest

from mnoted.client.client import Unreachable
from tests.e2e.conftest import DaemonProcess, fsck

ROUNDS = int(os.environ.get("MNOTE_CRASH_ROUNDS", "6"))
PAGES = [f"notes/p{i}.md" for i in range(4)]


def writer(daemon: DaemonProcess, acked: list[dict], stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    client = daemon.client()
    while not stop.is_set():
        page = rng.choice(PAGES)
        token = f"tok-{uuid.uuid4().hex[:12]}"
        kind = rng.random()
        if kind < 0.7:
            body = client.envelope("mnote.page.save", page, {"content": [token], "mode": "append"})
        else:
            body = client.envelope(
                "mnote.page.create", None, {"path": f"notes/new-{token}.md", "content": token}
            )
        try:
            _, resp = client.request("POST", "/v1/tools/call", body)
        except Unreachable:
            return
        except Exception:
            return
        if resp.get("ok") and resp["audit"]["effect"] == "write":
            acked.append(
                {
                    "token": token,
                    "commandId": resp["audit"]["commandId"],
                    "path": page if kind < 0.7 else f"notes/new-{token}.md",
                }
            )


def head_texts(daemon: DaemonProcess, paths: list[str]) -> dict[str, str]:
    """HEAD's text of each of ``paths`` ("" where HEAD has none), read by one `git cat-file
    --batch`: a `git show` for each acknowledged write made every round's check longer than
    the last, and the deeper runs longer than their time limit."""
    out = subprocess.run(
        ["git", "cat-file", "--batch"],
        cwd=daemon.workspace,
        input="".join(f"HEAD:{p}\n" for p in paths).encode(),
        capture_output=True,
        check=True,
    ).stdout
    texts, at = {}, 0
    for path in paths:
        end = out.index(b"\n", at)
        header, at = out[at:end].split(), end + 1
        if header[-1] == b"missing":
            texts[path] = ""
            continue
        size = int(header[2])
        texts[path], at = out[at : at + size].decode(), at + size + 1
    return texts


def check_invariants(daemon: DaemonProcess, acked: list[dict]) -> None:
    root = daemon.workspace
    log = daemon.git("log", "--format=%(trailers:key=Mnote-Command-Id,valueonly,separator=)")
    ids = [line for line in log.split("\n") if line]
    assert len(ids) == len(set(ids)), "a command was committed twice"
    head = head_texts(daemon, sorted({ack["path"] for ack in acked}))
    for ack in acked:
        assert ack["commandId"] in ids, f"acknowledged command {ack['commandId']} is not in HEAD"
        assert ack["token"] in (root / ack["path"]).read_text(), f"{ack['token']} lost from disk"
        assert ack["token"] in head[ack["path"]], f"{ack['token']} not in HEAD's {ack['path']}"
    checked = fsck(root)
    packs = sorted(p.name for p in (root / ".git/objects/pack").iterdir())
    assert checked.returncode == 0, f"git fsck: {checked.stdout}{checked.stderr}\npacks: {packs}"
    leftovers = [p for p in root.rglob("*") if p.name.startswith(".mnote-tmp-")]
    assert leftovers == []
    # lock tokens are the running daemon's; those of the processes killed before are gone
    assert daemon.proc is not None
    locks = root / ".git" / "mnote" / "locks"
    tokens = os.listdir(locks) if locks.is_dir() else []
    assert [n for n in tokens if f".{daemon.proc.pid}." not in n] == []
    assert (
        not (root / ".git" / "index.lock").exists() and not (root / ".git" / "HEAD.lock").exists()
    )


@pytest.mark.slow
@pytest.mark.timeout(300 + 10 * ROUNDS)  # ~2 s a round here (60 rounds: 125 s)
def test_sigkill_under_load_loses_nothing_acknowledged(daemon: DaemonProcess) -> None:
    rng = random.Random(1234)
    for page in PAGES:
        (daemon.workspace / page).parent.mkdir(exist_ok=True)
        (daemon.workspace / page).write_text(f"# {page}\n")
    acked: list[dict] = []
    for round_no in range(ROUNDS):
        stop = threading.Event()
        threads = [
            threading.Thread(target=writer, args=(daemon, acked, stop, round_no * 10 + k))
            for k in range(3)
        ]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.15, 0.8))
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait()
        stop.set()
        for t in threads:
            t.join(10)
        # A crash during recovery from a crash, now and then.
        if round_no % 3 == 2:
            daemon.start()
            daemon.proc.send_signal(signal.SIGKILL)
            daemon.proc.wait()
        daemon.start()
        daemon.wait_idle_clean()
        check_invariants(daemon, acked)
    assert len(acked) > ROUNDS  # the load really ran
