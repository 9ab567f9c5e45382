"""Concurrent agents and people on one workspace, through the daemon's socket."""

from __future__ import annotations

import os
import threading
import time

from tests.e2e.conftest import DaemonProcess

AGENTS = int(os.environ.get("MNOTE_CONCURRENT_AGENTS", "8"))
WRITES = int(os.environ.get("MNOTE_CONCURRENT_WRITES", "15"))


def call(client, tool: str, doc: str | None, args: dict, **extra) -> dict:
    body = client.envelope(tool, doc, args)
    body.update(extra)
    _, resp = client.request("POST", "/v1/tools/call", body)
    return resp


def test_same_base_revision_exactly_one_wins(daemon: DaemonProcess) -> None:
    owner = daemon.client()
    base = call(owner, "mnote.page.get", "plan.md", {})["result"]["revision"]
    results: list[dict] = []
    barrier = threading.Barrier(2)

    def agent(word: str) -> None:
        client = daemon.client()
        barrier.wait()
        results.append(
            call(
                client,
                "mnote.doc.markdown_edit",
                "plan.md",
                {"operations": [{"search": "Ship on Monday.", "replace": f"Ship on {word}."}]},
                baseRevision=base,
            )
        )

    threads = [threading.Thread(target=agent, args=(w,)) for w in ("Tuesday", "Wednesday")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    ok = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    assert len(ok) == 1 and len(failed) == 1
    assert failed[0]["error"]["code"] in ("mnote_tool_conflict", "mnote_markdown_edit_mismatch")
    if failed[0]["error"]["code"] == "mnote_tool_conflict":
        assert failed[0]["error"]["details"]["currentRevision"] == ok[0]["result"]["revision"]


def test_agent_write_and_editor_save_at_once_lose_nothing(daemon: DaemonProcess) -> None:
    """A person's save is never overwritten by mnoted, and every agent write stays in history."""
    client = daemon.client()
    path = daemon.workspace / "plan.md"
    acked = []
    for i in range(10):
        text = path.read_text()
        _first, rest = text.split("\n", 1)
        saved = f"# Plan{i}\n{rest}"

        def agent_write(i: int = i) -> None:
            resp = call(
                client, "mnote.page.save", "plan.md", {"content": [f"agent {i}"], "mode": "append"}
            )
            if resp["ok"]:
                acked.append(resp["audit"]["commandId"])

        t = threading.Thread(target=agent_write)
        t.start()
        tmp = path.with_name(".goutputstream-x")  # gedit's save: a temp file renamed over the page
        tmp.write_text(saved)
        tmp.replace(path)
        t.join(30)
    deadline = time.monotonic() + 20
    while daemon.git("status", "--porcelain") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert daemon.git("status", "--porcelain") == ""
    assert path.read_text().startswith("# Plan9\n")  # the person's last save stands
    history = daemon.git(
        "log", "-p", "--format=%(trailers:key=Mnote-Command-Id,valueonly,separator=)"
    )
    assert len(acked) == 10
    for i, command_id in enumerate(acked):
        assert command_id in history
        assert f"+agent {i}" in history


def test_many_agents_and_a_script_on_one_workspace(daemon: DaemonProcess) -> None:
    acked: list[tuple[str, str, str]] = []
    lock = threading.Lock()

    def agent(n: int) -> None:
        client = daemon.client()
        page = f"agents/a{n}.md"
        for w in range(WRITES):
            if w == 0:
                resp = call(
                    client, "mnote.page.create", None, {"path": page, "content": f"start {n}"}
                )
            else:
                resp = call(
                    client, "mnote.page.save", page, {"content": [f"w{n}-{w}"], "mode": "append"}
                )
            assert resp["ok"], resp["error"]
            with lock:
                acked.append((page, f"w{n}-{w}" if w else f"start {n}", resp["audit"]["commandId"]))

    def script() -> None:
        for k in range(WRITES):
            (daemon.workspace / "script").mkdir(exist_ok=True)
            (daemon.workspace / "script" / f"s{k % 3}.md").write_text(f"# Script {k}\n")
            time.sleep(0.02)

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(AGENTS)]
    threads.append(threading.Thread(target=script))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    deadline = time.monotonic() + 20
    while daemon.git("status", "--porcelain") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert daemon.git("status", "--porcelain") == ""
    ids = daemon.git(
        "log", "--format=%(trailers:key=Mnote-Command-Id,valueonly,separator=)"
    ).split()
    assert len(ids) == len(set(ids))
    for page, token, command_id in acked:
        assert command_id in ids
        assert token in (daemon.workspace / page).read_text()
    assert len(acked) == AGENTS * WRITES
    for k in range(3):
        name = f"script/s{k}.md"
        assert daemon.git("show", f"HEAD:{name}") == (daemon.workspace / name).read_text()
