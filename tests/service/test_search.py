"""Search and links in the executor: answers while the index is incomplete, grants that
are globs, and a move's link updates where the caller may not write."""

from __future__ import annotations

import errno
import json
import time

import pytest

from mnoted.store import faults, search_index, search_queries
from tests.service.conftest import Harness

pytestmark = pytest.mark.twin


def _search(h: Harness, query: str, actor=None, **args):  # type: ignore[no-untyped-def]
    out = h.call("mnote.workspace.search", actor, args={"query": query, **args})
    assert out["ok"], out
    return out["result"]


def _complete(h: Harness, query: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        result = _search(h, query)
        if result["complete"]:
            return result
        time.sleep(0.02)
    raise AssertionError("the index never completed")


def test_an_incomplete_index_answers_what_it_has_and_says_so(h: Harness) -> None:
    for i in range(30):
        h.write_file(f"bulk/n{i:02d}.md", f"# Bulk {i}\n\npenguin {i}\n")
    now = [0.0]
    search_index.of(h.ws, batch=10, clock=lambda: now[0])
    faults.arm_error("search-batch", errno.EIO, times=-1)  # every pass fails after a batch
    try:
        first = _search(h, "penguin")
        deadline = time.monotonic() + 30
        while search_index.of(h.ws).building and time.monotonic() < deadline:
            time.sleep(0.01)
        partial = _search(h, "penguin")
        assert not first["complete"] and not partial["complete"]
        assert 0 < partial["total"] < 30
        assert "still being built" in partial["warnings"][0]
        assert partial["index"]["pagesIndexed"] < partial["index"]["pagesTotal"]
    finally:
        faults.disarm()
    now[0] += search_index.RETRY_MAX  # (the failure's back-off is over)
    done = _complete(h, "penguin")
    assert done["total"] == 30 and "warnings" not in done
    assert done["revision"] == h.head()


def test_a_grant_of_globs_filters_hits(h: Harness) -> None:
    h.write_file("notes/pear.md", "# Pear\n\nfruitbowl\n")
    h.write_file("notes/apple.md", "# Apple\n\nfruitbowl\n")
    _complete(h, "fruitbowl")
    agent = h.agent(grants=("notes/p*.md",))
    out = _search(h, "fruitbowl", agent)
    assert [hit["path"] for hit in out["hits"]] == ["notes/pear.md"] and out["total"] == 1


@pytest.mark.git  # (one commit's paths, read with git show)
def test_a_move_counts_the_links_it_may_not_update(h: Harness) -> None:
    body = "".join(f"Line {i} of the target page.\n" for i in range(8))
    h.write_file("notes/target.md", f"# Target\n\n{body}\nSee [up](../index.md).\n")
    h.write_file("notes/short.md", "# Short\n\n[up](../index.md)\n")
    h.write_file("index.md", "# Index\n\n[[target]] and [t](notes/target.md)\n")
    h.write_file("notes/locked.md", "---\nprotectEditing: true\n---\n# Locked\n\n[[target]]\n")
    agent = h.agent(grants=("**",))
    before = h.doc("notes/target.md")
    out = h.write(
        "mnote.page.move",
        agent,
        documentId="notes/target.md",
        args={"newPath": "deep/er/Target.md"},
    )
    assert out["ok"], out
    assert out["result"]["linkUpdates"] == {"pages": ["index.md"], "links": 3, "notUpdated": 1}
    assert (h.root / "index.md").read_text() == (
        "# Index\n\n[[Target]] and [t](deep/er/Target.md)\n"
    )
    # the moved page's own relative link still points where it did
    assert "[up](../../index.md)" in (h.root / "deep/er/Target.md").read_text()
    assert "[[target]]" in (h.root / "notes/locked.md").read_text()
    changed = h.git("show", "--name-status", "--format=", "HEAD").split()
    assert {"index.md", "notes/target.md", "deep/er/Target.md"} <= set(changed)  # one commit
    assert h.doc("deep/er/Target.md") == before == out["result"]["documentId"]
    # a short page's own links are left: rewritten, Git would not see its move as a rename
    short = h.doc("notes/short.md")
    out = h.write("mnote.page.move", documentId=short, args={"newPath": "a/b/short.md"})
    assert out["ok"] and "left as they are" in out["result"]["warnings"][0]
    assert h.doc("a/b/short.md") == short


def _bulk(h: Harness, pages: dict[str, str]) -> None:
    for rel, text in pages.items():
        (h.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (h.root / rel).write_text(text, encoding="utf-8")
    h.ws.commit_external(sorted(pages))


def test_an_agents_answers_do_not_depend_on_hidden_pages(h: Harness) -> None:
    _bulk(h, {
        "notes/otter.md": "# Otter\n\nThe otter swims in the river.\n",
        "notes/river.md": "# River\n\nAn otter, then another otter, by the river bank.\n",
        "notes/bank.md": "# Bank\n\n## Otter facts\n\nriver life: otter and heron\n",
        "notes/zh.md": "# 水獭\n\n水獭在河里游泳。otter\n",
    })  # fmt: skip
    agent = h.agent(grants=("notes/**",))
    queries = [("otter", {}), ("river otter", {}), ("水獭", {}), ("otter", {"limit": 2})]

    def answers() -> list[dict[str, object]]:
        out = []
        for query, extra in queries:
            result = _search(h, query, agent, **extra)
            assert result["complete"], result
            out.append({k: result[k] for k in ("hits", "total", "nextCursor", "index")})
        return out

    before = answers()
    assert before[0]["hits"][0]["path"] == "notes/otter.md"  # type: ignore[index]
    assert all(hit["score"] > 0 for hit in before[0]["hits"])  # type: ignore[attr-defined]
    _bulk(h, {
        f"secret/s{i:03d}.md": f"# Otter {i}\n\n## River otter\n\notter river 水獭 otter {i}\n"
        for i in range(120)
    })  # fmt: skip
    assert _complete(h, "otter")["total"] == 124  # (the owner sees them)
    assert answers() == before  # hits, order, scores, snippets, total, cursor, index size
    scope = search_index.scoped(h.ws, agent.grants, agent.may_access)
    conn, _ = scope.current()
    assert conn is not None and search_queries.page_count(conn) == 5  # (hidden pages never stored)
    # a page moved into the grant is found, one moved out of it is gone
    (h.root / "secret/s000.md").rename(h.root / "notes/s000.md")
    (h.root / "notes/bank.md").rename(h.root / "secret/bank.md")
    h.ws.commit_external(["secret/s000.md", "notes/s000.md", "notes/bank.md", "secret/bank.md"])
    found = {hit["path"] for hit in _search(h, "otter", agent)["hits"]}
    assert found == {"notes/otter.md", "notes/river.md", "notes/zh.md", "notes/s000.md"}
    search_index.forget(h.ws)


def test_scope_indexes_are_bounded_and_rebuilt(h: Harness, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(search_index, "MAX_SCOPES", 2)
    _bulk(h, {f"f{i}/p.md": f"# P{i}\n\nmarmot {i}\n" for i in range(3)})
    agents = [h.agent(f"a{i}", grants=(f"f{i}/**",)) for i in range(3)]
    files = []
    for i, agent in enumerate(agents):
        assert [x["path"] for x in _search(h, "marmot", agent)["hits"]] == [f"f{i}/p.md"]
        files.append(search_index.scoped(h.ws, agent.grants, agent.may_access).path)
    assert not files[0].exists() and files[1].exists() and files[2].exists()  # (evicted)
    assert len(search_index.scopes_of(h.ws)) == 2
    files[2].write_bytes(b"not a database at all")  # damaged: rebuilt from Git
    assert _search(h, "marmot", agents[2])["total"] == 1
    assert _search(h, "marmot", agents[0])["total"] == 1  # (evicted: made again)
    # same grants in another order, repeated: the same scope
    again = h.agent("b", grants=("f1/**", "f0/**", "f1/**"))
    assert _search(h, "marmot", again)["total"] == 2
    search_index.forget(h.ws)


def test_a_failing_pass_backs_off_and_says_so(h: Harness) -> None:
    now = [1000.0]
    _bulk(h, {f"bulk/n{i:02d}.md": f"# Bulk {i}\n\nbadger\n" for i in range(10)})
    index = search_index.of(h.ws, batch=1, clock=lambda: now[0])  # (every pass fails)
    assert index.status()["state"] == "pending"  # (no pass has run: not "ready")
    faults.arm_error("search-batch", errno.EIO, times=-1)
    try:
        _search(h, "plan")
        deadline = time.monotonic() + 30
        while index.building and time.monotonic() < deadline:
            time.sleep(0.01)
        status = index.status()
        assert status["state"] == "failed" and "Errno" in status["error"]
        assert status["retryInSeconds"] == search_index.RETRY_FIRST
        for _ in range(5):  # searches meanwhile start no pass
            assert not _search(h, "plan")["complete"]
            assert not index.building and index.failures == 1
        now[0] += search_index.RETRY_FIRST
        _search(h, "plan")  # tried again, failing again: twice as long to wait
        while index.building and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (
            index.failures == 2 and index.status()["retryInSeconds"] == 2 * search_index.RETRY_FIRST
        )
    finally:
        faults.disarm()
    now[0] += 2 * search_index.RETRY_FIRST
    assert _complete(h, "plan")["complete"]
    assert index.status()["state"] == "ready" and index.failures == 0


def test_a_stopped_pass_says_stopped(h: Harness) -> None:
    _bulk(h, {f"bulk/n{i:02d}.md": f"# Bulk {i}\n\nbeaver\n" for i in range(30)})
    index = search_index.of(h.ws, batch=5)
    index._progress = lambda done, total: index._stop.set()  # type: ignore[method-assign]
    assert index.start()  # stopped before its first batch, as at shutdown
    index._thread.join(10)  # type: ignore[union-attr]
    assert index.status()["state"] == "stopped"
    del index._progress  # (the next pass runs to its end)
    assert _complete(h, "beaver")["total"] == 30
    assert index.status()["state"] == "ready"


def test_status_shows_a_failed_pass_and_its_retry(capsys) -> None:  # type: ignore[no-untyped-def]
    from mnoted.cli.output import print_status

    search = {"state": "failed", "pagesIndexed": 3, "pagesTotal": 9,
              "error": "OSError: disk", "retryInSeconds": 4.0}  # fmt: skip
    health = {"version": "x", "pid": 1, "uptimeSeconds": 1.0, "socket": "s"}
    print_status(health, [{"workspaceId": "w", "watcher": None, "head": "a", "search": search}])
    out = capsys.readouterr().out
    assert "search index failed: 3 of 9 pages (OSError: disk); tried again in 4 s" in out


def test_an_agent_finds_no_artifact_of_a_hidden_page(h: Harness) -> None:
    """A summary of a page the agent may not see is hidden from it (its text names the page);
    an agent's own index holds no artifact, so its search cannot carry one."""
    h.write_file("secret/plan.md", "# Plan\n\nquietmoon\n")
    h.write_file("notes/open.md", "# Open\n\nquietmoon too\n")
    made = h.write(
        "mnote.artifact.create_summary",
        documentId="secret/plan.md",
        summary="The quietmoon plan, in short.",
    )
    assert made["ok"], made
    assert "ai/" in json.dumps(_complete(h, "quietmoon"))  # (the owner finds the summary)
    agent = h.agent(grants=("notes/**", "ai/**"))
    out = _search(h, "quietmoon", agent)
    assert [hit["path"] for hit in out["hits"]] == ["notes/open.md"] and out["total"] == 1
