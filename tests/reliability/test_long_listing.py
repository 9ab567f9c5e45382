"""A caller listing a big workspace with a query holds up no one: each answer is bounded and
paged, and another caller's reads and writes go on beside it."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from tests.e2e.conftest import running_daemon

PAGES = int(os.environ.get("MNOTE_LISTING_PAGES", "500"))


def page(i: int) -> str:
    """About 8 KB of Markdown that takes its time to parse (lists, links, emphasis)."""
    items = "".join(f"- item *{j}* of [page {i}](p{j}.md) with `code {j}`\n" for j in range(60))
    prose = f"Paragraph {i} with **bold**, _italic_ and a [link](https://example.org/{i}).\n\n"
    return f"# Page {i}\n\n" + prose * 20 + "## List\n\n" + items


def _committed_pages(root: Path) -> None:
    """The pages, committed with ``git`` before the daemon starts (a checkout of them)."""
    for i in range(PAGES):
        folder = root / f"d{i // 200:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"p{i:05d}.md").write_text(page(i))
    (root / "plan.md").write_text("# Plan\n\nShip.\n")
    for args in (["add", "-A"], ["commit", "-qm", "pages"]):  # (as the test's environment is)
        subprocess.run(["git", *args], cwd=root, check=True)


def test_a_long_listing_beside_reads_and_writes() -> None:
    with running_daemon(_committed_pages) as d:
        lister = d.client(d.owner_token())
        writer = d.client(d.owner_token())
        answers: list[bool] = []  # each listing answer: whether a pass goes on after it
        passes = [0]
        stop = threading.Event()
        failed: list[object] = []

        def list_forever() -> None:
            cursor = None
            while not stop.is_set():
                args = {"query": "no page has this", "limit": 10_000}
                if cursor:
                    args["cursor"] = cursor
                answer = lister.call("mnote.workspace.list", None, args)
                if not answer["ok"]:
                    failed.append(answer)
                    return
                cursor = answer["result"].get("nextCursor")
                answers.append(cursor is not None)
                if cursor is None:
                    passes[0] += 1

        thread = threading.Thread(target=list_forever)
        thread.start()
        try:
            while not answers and not failed:  # (the listing has begun)
                time.sleep(0.01)
            first_pair_in_first_pass = None
            for i in range(10):
                got = writer.call("mnote.page.get", "plan.md")
                saved = writer.call("mnote.page.save", "plan.md", {"content": [f"Ship, take {i}."]})
                assert got["ok"] and saved["ok"], (got, saved)
                if first_pair_in_first_pass is None:
                    first_pair_in_first_pass = passes[0] == 0
            deadline = time.monotonic() + 120  # (a hang guard, not a budget)
            while passes[0] < 1 and not failed and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            stop.set()
            thread.join()
        assert not failed, failed
        assert passes[0] >= 1, f"no whole pass in {len(answers)} answers"
        first_pass = answers.index(False) + 1
        # each answer is a bounded slice: the first pass (nothing cached) took several
        assert first_pass >= 3, f"the first pass was {first_pass} answer(s)"
        # the other caller was answered between slices, not after the whole pass
        assert first_pair_in_first_pass, "the first get and save waited for a whole pass"
