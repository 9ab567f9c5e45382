"""Search and links in the executor: answers while the index is incomplete, grants that
are globs, and a move's link updates where the caller may not write."""

from __future__ import annotations

import errno
import time

from mnoted.store import faults, search_index
from tests.service.conftest import Harness


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
    search_index.of(h.ws, batch=10)
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
