"""Search and links through the daemon's socket: ranked hits, CJK substrings, grants,
read-your-writes, every link form, backlinks, moves that update links, a lost index."""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnoted.store import Workspace
from mnoted.store.search_index import INDEX_FILE
from mnoted.store.statedir import STATE_DIR
from tests.conftest import envelope
from tests.e2e.conftest import DaemonProcess, wait_for

CORPUS_ZH = Path("/work/shared/corpus/obsidian-help/zh/快速入门")

PAGES = {
    "notes/zebra.md": "# Zebra migration\n\nHerds cross the river every year.\n",
    "notes/safari.md": "# Safari diary\n\nWe saw one zebra near the camp.\n\n## Evening\n\n"
    "The lions were asleep. Quartzite rocks everywhere.\n",
    "notes/tagged.md": "---\ntags: [travel]\nstatus: done\n---\n# Tagged\n\nA zebra photo.\n",
    "notes/日本語.md": "# メモ\n\n東京タワーは高いです。\n",
    "secret/plan.md": "# Plan\n\nThe codeword is xylophonequartz.\n",
    "links/Target.md": "# Target\n\n## Part two\n\nA paragraph. ^para1\n",
    "links/source.md": "# Source\n\n"
    "Plain [[Target]], heading [[Target#Part two]], block [[Target^para1]], "
    "alias [[Target|the target]].\n\n"
    "An embed: ![[Target]]\n\n"
    "Markdown: [see](Target.md) and [missing](Nowhere.md) and [[Ghost]].\n\n"
    "`[[NotALink]]`\n",
    "links/other.md": "# Other\n\nAlso see [[Target]].\n",
    "secret/linker.md": "# Hidden linker\n\nPoints at [[Target]].\n",
}


def _workspace(base: Path, pages: dict[str, str], *, chinese: bool = False) -> Path:
    root = base / "notes"
    root.mkdir()
    for rel, text in pages.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    if chinese:  # used by path from the shared corpus, copied into the test's own folder
        shutil.copytree(CORPUS_ZH, root / "zh")
    Workspace.init(root).close()
    return root


@pytest.fixture(scope="module")
def d() -> Iterator[DaemonProcess]:
    with tempfile.TemporaryDirectory(prefix="ms") as tmp:
        base = Path(tmp)
        daemon = DaemonProcess(base, _workspace(base, PAGES, chinese=True))
        daemon.start()
        try:
            wait_complete(daemon)
            yield daemon
        finally:
            daemon.stop()


def call(d: DaemonProcess, tool: str, token: str | None = None, **fields: Any) -> dict[str, Any]:
    body = envelope(tool, **fields)
    if TOOLS_WRITE.get(tool):
        body.setdefault("idempotencyKey", f"k_{body['toolCallId']}")
        body.setdefault("dryRun", False)
    status, out = d.client(token).request("POST", "/v1/tools/call", body)
    assert status == 200, out
    return out  # type: ignore[no-any-return]


TOOLS_WRITE = {"mnote.page.move": True, "mnote.doc.markdown_edit": True}


def search(d: DaemonProcess, query: str, token: str | None = None, **args: Any) -> dict[str, Any]:
    out = call(d, "mnote.workspace.search", token, args={"query": query, **args})
    assert out["ok"], out
    return out["result"]  # type: ignore[no-any-return]


def paths(result: dict[str, Any]) -> list[str]:
    return [h["path"] for h in result["hits"]]


def wait_complete(d: DaemonProcess, timeout: float = 60) -> dict[str, Any]:
    return dict(
        wait_for(
            lambda: (result := search(d, "zebra"))["complete"] and result,
            "the index completed",
            timeout,
        )
    )


def _search_status(d: DaemonProcess) -> dict[str, Any]:
    status, body = d.client().request("GET", "/v1/workspaces")
    assert status == 200, body
    return body["workspaces"][0].get("search") or {}  # type: ignore[no-any-return]


def head(d: DaemonProcess) -> str:
    return d.git("rev-parse", "HEAD").strip()


def test_english_ranking_snippet_block_and_filters(d: DaemonProcess) -> None:
    result = search(d, "zebra")
    assert result["revision"] == head(d) and result["complete"]
    assert paths(result)[0] == "notes/zebra.md"  # the title hit above body mentions
    assert set(paths(result)) == {"notes/zebra.md", "notes/safari.md", "notes/tagged.md"}
    assert result["total"] == 3
    body_hit = next(h for h in result["hits"] if h["path"] == "notes/safari.md")
    assert "<mark>zebra</mark>" in body_hit["snippet"]
    assert body_hit["headingPath"] == ["Safari diary"] and body_hit["matchedIn"] == "body"
    block = call(d, "mnote.block.fetch", documentId=body_hit["documentId"],
                 args={"blockId": body_hit["blockId"]})  # fmt: skip
    assert block["ok"] and "one zebra near the camp" in json.dumps(block["result"])
    # heading path of a hit under a second-level heading; prefix terms; phrases
    lions = search(d, "quartz*")
    assert paths(lions) == ["notes/safari.md"]  # (the hidden folder's word is no prefix)
    assert lions["hits"][0]["headingPath"] == ["Safari diary", "Evening"]
    assert paths(search(d, '"saw one zebra"')) == ["notes/safari.md"]
    assert search(d, '"zebra saw one"')["hits"] == []
    # filters: tags, frontmatter, paths; paging with a cursor
    assert paths(search(d, "zebra", tags=["travel"])) == ["notes/tagged.md"]
    assert paths(search(d, "zebra", frontmatter={"status": "done"})) == ["notes/tagged.md"]
    assert search(d, "zebra", frontmatter={"status": "open"})["hits"] == []
    assert paths(search(d, "zebra", paths=["notes/s*.md"])) == ["notes/safari.md"]
    first = search(d, "zebra", limit=2)
    rest = search(d, "zebra", limit=2, cursor=first["nextCursor"])
    assert len(first["hits"]) == 2 and rest["nextCursor"] is None
    assert set(paths(first) + paths(rest)) == set(paths(result))
    bad = call(d, "mnote.workspace.search", args={"query": "zebra", "cursor": "nope"})
    assert bad["error"]["code"] == "mnote_tool_invalid_arguments"


def test_cli_search_and_links(d: DaemonProcess) -> None:
    out = d.cli("search", "zebra", "--limit", "2")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("notes/zebra.md") and "«Zebra» migration" in lines[1]
    assert "2 of 3 pages" in lines[-1] and "--cursor o2" in lines[-1]
    out = d.cli("search", "仓库", "--path", "zh/**")
    assert out.returncode == 0 and "«仓库»" in out.stdout
    links = d.cli("links", "links/source.md")
    assert links.returncode == 0, links.stderr
    assert "[[Ghost]]" in links.stdout and "(unresolved)" in links.stdout
    assert "-> links/Target.md" in links.stdout


def test_chinese_two_characters_and_phrases(d: DaemonProcess) -> None:
    two = search(d, "仓库")  # two characters: the trigram tokenizer finds nothing here
    assert paths(two)[0] == "zh/创建仓库.md"  # the title above the many body mentions
    assert two["total"] >= 5
    assert "<mark>仓库</mark>" in two["hits"][0]["snippet"]
    assert paths(search(d, "惯性")) == ["zh/链接笔记.md"]
    phrase = search(d, "运动定律是艾萨克")  # any longer substring, as one phrase
    assert paths(phrase) == ["zh/链接笔记.md"]
    assert "<mark>运动定律是艾萨克</mark>" in phrase["hits"][0]["snippet"]
    assert search(d, "定律艾萨")["hits"] == []  # the characters, but not in that order


def test_japanese_substrings(d: DaemonProcess) -> None:
    assert paths(search(d, "タワ")) == ["notes/日本語.md"]
    assert paths(search(d, "京タワー")) == ["notes/日本語.md"]
    assert search(d, "タワ京")["hits"] == []


def grant(d: DaemonProcess, actor: str, *globs: str, write: bool = False) -> str:
    scopes = ("page.read", "page.write") if write else ("page.read",)
    return d.agent_token(actor, *scopes, paths=globs)


def test_a_grant_hides_pages_from_hits_and_counts(d: DaemonProcess) -> None:
    assert paths(search(d, "xylophonequartz")) == ["secret/plan.md"]  # the owner sees it
    agent = grant(d, "scoped", "notes/**", "links/**")
    for query in ("xylophonequartz", "xylophone*", "codeword", "plan", "linker"):
        out = search(d, query, agent)
        assert out["hits"] == [] and out["total"] == 0, query
        assert "secret/" not in json.dumps(out)
    assert paths(search(d, "zebra", agent, paths=["secret/**"])) == []
    assert set(paths(search(d, "zebra", agent))) == {
        "notes/zebra.md", "notes/safari.md", "notes/tagged.md"}  # fmt: skip
    # backlinks from a page the agent may not read are never named
    links = call(d, "mnote.page.links", agent, documentId="links/Target.md")
    assert links["ok"], links
    assert {b["path"] for b in links["result"]["backlinks"]} == {
        "links/other.md", "links/source.md"}  # fmt: skip
    assert "secret" not in json.dumps(links)
    # its status counts the pages of its own index, not the workspace's
    status, body = d.client(agent).request("GET", "/v1/workspaces")
    assert status == 200, body
    mine = body["workspaces"][0]["search"]
    assert mine["state"] == "ready" and mine["pagesTotal"] < _search_status(d)["pagesTotal"]


def test_write_then_search_and_external_edit_then_search(d: DaemonProcess) -> None:
    wrote = call(d, "mnote.doc.markdown_edit", documentId="notes/zebra.md",
                 args={"operations": [{"search": "every year", "replace": "every year, "
                                       "watched by okapiwatchers"}]})  # fmt: skip
    assert wrote["ok"], wrote
    found = search(d, "okapiwatchers")  # at once: no wait for anything
    assert paths(found) == ["notes/zebra.md"]
    assert found["revision"] == wrote["result"]["revision"]
    (d.workspace / "notes" / "fresh.md").write_text("# Fresh\n\nA narwhalish visitor.\n")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if "notes/fresh.md" in d.git("ls-tree", "-r", "--name-only", "HEAD"):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the external edit was never committed")
    found = search(d, "narwhalish")
    assert paths(found) == ["notes/fresh.md"] and found["revision"] == head(d)


def test_every_link_form_and_backlinks(d: DaemonProcess) -> None:
    out = call(d, "mnote.page.links", documentId="links/source.md")
    assert out["ok"], out
    got = [(lk["raw"], lk["kind"], lk["path"]) for lk in out["result"]["outgoing"]]
    target = "links/Target.md"
    assert got == [
        ("[[Target]]", "wikilink", target),
        ("[[Target#Part two]]", "wikilink", target),
        ("[[Target^para1]]", "wikilink", target),
        ("[[Target|the target]]", "wikilink", target),
        ("![[Target]]", "embed", target),
        ("[see](Target.md)", "markdown", target),
        ("[missing](Nowhere.md)", "markdown", None),
        ("[[Ghost]]", "wikilink", None),
    ]
    by_raw = {lk["raw"]: lk for lk in out["result"]["outgoing"]}
    assert by_raw["[[Target#Part two]]"]["heading"] == "Part two"
    assert by_raw["[[Target^para1]]"]["block"] == "para1"
    assert by_raw["[[Target|the target]]"]["alias"] == "the target"
    assert by_raw["[[Ghost]]"]["resolved"] is False
    back = call(d, "mnote.page.links", documentId=target, args={"direction": "backlinks"})
    sources = sorted({b["path"] for b in back["result"]["backlinks"]})
    assert sources == ["links/other.md", "links/source.md", "secret/linker.md"]
    assert all(b["blockId"] for b in back["result"]["backlinks"])


def test_move_updates_links_in_one_commit(d: DaemonProcess) -> None:
    before = head(d)
    dry = call(d, "mnote.page.move", documentId="links/Target.md",
               args={"newPath": "archive/Goal.md"}, dryRun=True)  # fmt: skip
    assert dry["ok"], dry
    diff = dry["result"]["unifiedDiff"]
    assert "+Also see [[Goal]]." in diff and "[see](../archive/Goal.md)" in diff
    assert head(d) == before
    # an agent that may write links/** only: the hidden linker is counted, never named
    agent = grant(d, "mover", "links/**", "archive/**", write=True)
    moved = call(d, "mnote.page.move", agent, documentId="links/Target.md",
                 args={"newPath": "archive/Goal.md"})  # fmt: skip
    assert moved["ok"], moved
    report = moved["result"]["linkUpdates"]
    assert report["pages"] == ["links/other.md", "links/source.md"]
    assert report["notUpdated"] == 1 and "secret" not in json.dumps(moved)
    changed = d.git("show", "--name-status", "--format=", "HEAD").split("\n")
    assert d.git("rev-list", "--count", f"{before}..HEAD").strip() == "1"
    assert any(line.startswith("R") and "archive/Goal.md" in line for line in changed)
    assert "M\tlinks/other.md" in changed and "M\tlinks/source.md" in changed
    source = (d.workspace / "links" / "source.md").read_text()
    assert "[[Goal#Part two]]" in source and "[[Goal^para1]]" in source
    assert "[[Goal|the target]]" in source and "![[Goal]]" in source
    assert "[see](../archive/Goal.md)" in source and "[[Ghost]]" in source
    assert "[[Target]]" in (d.workspace / "secret" / "linker.md").read_text()
    back = call(d, "mnote.page.links", documentId="archive/Goal.md")
    assert {b["path"] for b in back["result"]["backlinks"]} == {"links/other.md", "links/source.md"}


def test_index_lost_or_killed_is_rebuilt(tmp_path: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="mk"))
    try:
        many = {
            f"bulk/n{i:04d}.md": f"# Note {i}\n\nfiller text {i} walrus{i % 7}\n"
            for i in range(600)
        }
        d = DaemonProcess(base, _workspace(base, {**many, **PAGES}))
        index = d.workspace / STATE_DIR / INDEX_FILE
        d.start()
        assert d.proc is not None
        deadline = time.monotonic() + 10  # killed once the first pass stored some pages
        while time.monotonic() < deadline:  # (or when it ended: the test holds either way)
            search_state = _search_status(d)
            if search_state.get("state") != "building" or search_state.get("pagesIndexed"):
                break
            time.sleep(0.01)
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait()
        d.start()
        status = d.cli("status")
        assert "search index" in status.stdout
        done = wait_complete(d)
        assert paths(done)[0] == "notes/zebra.md"
        assert search(d, "walrus3")["total"] == len([i for i in range(600) if i % 7 == 3])
        d.stop()
        index.unlink()
        d.start()
        assert wait_complete(d)["total"] == 3
        index.unlink()  # (while it runs: the next search notices and builds it again)
        assert wait_complete(d)["total"] == 3
        assert search(d, "walrus3")["total"] == 86
        d.stop()
        index.write_bytes(b"this is not a database")
        d.start()
        assert wait_complete(d)["total"] == 3
        assert "search index ready" in d.cli("status").stdout
        d.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
