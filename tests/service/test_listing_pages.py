"""``workspace.list`` is paged: bounded work per answer, a cursor to go on, nothing lost or
repeated, and no cursor that names a page hidden from the caller."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from mnoted.service import doc_tools
from tests.service.conftest import Harness

pytestmark = pytest.mark.twin


def many(h: Harness, n: int) -> list[str]:
    """``n`` new pages; every page's path, sorted (those of the template and fixture too)."""
    before = [p["path"] for p in h.call("mnote.workspace.list")["result"]["pages"]]
    paths = []
    for i in range(n):
        folder = "open" if i % 3 else "closed"
        path = f"{folder}/p{i:03d}.md"
        (h.root / folder).mkdir(exist_ok=True)
        (h.root / path).write_text(f"# Topic {i}\n\nText {i}.\n")
        paths.append(path)
    h.ws.commit_external(paths)
    return sorted([*before, *paths])


def every_page(h: Harness, actor: Any = None, **args: Any) -> tuple[list[str], list[str]]:
    """Paths listed by following nextCursor to the end, and the cursors seen."""
    paths: list[str] = []
    cursors: list[str] = []
    cursor = None
    for _ in range(1000):
        fields = {**args, **({"cursor": cursor} if cursor else {})}
        answer = h.call("mnote.workspace.list", actor, args=fields)
        assert answer["ok"], answer
        result = answer["result"]
        paths += [p["path"] for p in result["pages"]]
        cursor = result.get("nextCursor")
        assert result["truncated"] == (cursor is not None)
        if cursor is None:
            return paths, cursors
        cursors.append(cursor)
    raise AssertionError("the listing never ended")


def test_paging_lists_each_page_once(h: Harness) -> None:
    paths = many(h, 40)
    listed, cursors = every_page(h, limit=7)
    assert listed == paths
    assert len(cursors) == (len(paths) - 1) // 7


def test_a_query_is_paged_too(h: Harness) -> None:
    many(h, 40)
    listed, _ = every_page(h, query="topic 1", limit=3)
    wanted = [f"{'open' if i % 3 else 'closed'}/p{i:03d}.md" for i in [1, *range(10, 20)]]
    assert listed == sorted(wanted)


def test_work_per_answer_is_bounded(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no time to spare, each answer still looks at one page: the listing goes on."""
    paths = many(h, 12)
    monkeypatch.setattr(doc_tools, "LIST_SECONDS", -1.0)
    listed, cursors = every_page(h, limit=100)
    assert listed == paths
    assert len(cursors) == len(listed) - 1


def test_a_cursor_never_names_a_hidden_page(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    many(h, 30)
    agent = h.agent(grants=("open/**",))
    monkeypatch.setattr(doc_tools, "LIST_SECONDS", -1.0)
    listed, cursors = every_page(h, agent, limit=100)
    assert listed and all(p.startswith("open/") for p in listed)
    for cursor in cursors:
        named = base64.urlsafe_b64decode(cursor.removeprefix("c1.")).decode()
        assert named.startswith("open/"), named


def test_a_cursor_it_did_not_make_is_refused(h: Harness) -> None:
    for bad in ("nope", "c1.!!!", "c1." + base64.urlsafe_b64encode(b"\xff\xfe").decode()):
        answer = h.call("mnote.workspace.list", args={"cursor": bad})
        assert answer["error"]["code"] == "mnote_tool_invalid_arguments", answer
