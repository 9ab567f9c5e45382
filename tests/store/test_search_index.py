"""The search index is derived state: a pass killed at any batch is finished by the next,
and catching up from a tree diff gives the same index as a full pass."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pygit2
import pytest

from mnoted.store import search_index as si
from mnoted.store import search_queries
from mnoted.store.treediff import CommitReader

PAGES = 130


def _dump(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
    """The index's content, independent of row ids."""
    docs = conn.execute("SELECT path, blob, title, meta FROM docs ORDER BY path").fetchall()
    chunks = conn.execute(
        "SELECT d.path, c.line, c.kind, c.headings, c.text FROM chunks c"
        " JOIN docs d ON d.id = c.doc ORDER BY d.path, c.line"
    ).fetchall()
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab USING fts5vocab(main, pages_fts, instance)"
    )
    terms = conn.execute(
        "SELECT d.path, v.term, v.col, v.offset FROM temp.vocab v JOIN docs d ON d.id = v.doc"
        " ORDER BY 1, 2, 3, 4"
    ).fetchall()
    links = conn.execute(
        "SELECT d.path, l.key, l.line, l.raw FROM links l JOIN docs d ON d.id = l.doc"
        " ORDER BY 1, 3, 4"
    ).fetchall()
    assert terms
    return [*docs, *chunks, *terms, *links]


def _repo(root: Path) -> tuple[CommitReader, list[str]]:
    repo = pygit2.init_repository(str(root), initial_head="main")
    sig = pygit2.Signature("t", "t@example.com", 0, 0)
    commits = []
    for version in range(2):
        tb = repo.TreeBuilder()
        folder = repo.TreeBuilder()
        for i in range(PAGES):
            if version and i % 10 == 0:
                continue  # deleted in the second commit
            text = f"# Page {i}\n\nword{i} v{version if i % 3 == 0 else 0} [[Page {i + 1}]]\n"
            folder.insert(f"p{i:03d}.md", repo.create_blob(text.encode()), pygit2.GIT_FILEMODE_BLOB)
        if version:
            folder.insert("new.md", repo.create_blob(b"# New\n\nfresh\n"), pygit2.GIT_FILEMODE_BLOB)
        tb.insert("notes", folder.write(), pygit2.GIT_FILEMODE_TREE)
        tb.insert("image.png", repo.create_blob(b"\x89PNG"), pygit2.GIT_FILEMODE_BLOB)
        parents = commits[-1:]
        oid = repo.create_commit("refs/heads/main", sig, sig, f"v{version}", tb.write(), parents)
        commits.append(str(oid))
    return CommitReader(repo), commits


KILLED = """
import sys, pygit2
from pathlib import Path
from mnoted.store import faults, search_index as si
from mnoted.store.treediff import CommitReader
faults.arm("search-batch", 2)
conn = si.connect(Path(sys.argv[1]))
si.sync_tree(conn, CommitReader(pygit2.Repository(sys.argv[2])), sys.argv[3], batch=25)
"""


@pytest.mark.parametrize("killed", [True, False])
def test_a_killed_pass_is_finished_by_the_next(tmp_path: Path, killed: bool) -> None:
    root = tmp_path / "repo"
    reader, (first, second) = _repo(root)
    db = tmp_path / "index.sqlite3"
    if killed:
        run = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(KILLED), str(db), str(root), second],
            capture_output=True,
            text=True,
        )
        assert run.returncode == -9, run.stderr  # SIGKILLed after its third batch
        conn = si.connect(db)
        assert si.indexed_commit(conn) is None  # (incomplete: a query says so)
        assert search_queries.page_count(conn) == 75
    else:
        conn = si.connect(db)
        assert si.sync_tree(conn, reader, first)
        assert si.indexed_commit(conn) == first
        assert si.catch_up(conn, reader, first, second) > 0
    if killed:
        assert si.sync_tree(conn, reader, second)
    assert si.indexed_commit(conn) == second
    fresh = si.connect(tmp_path / "fresh.sqlite3")
    assert si.sync_tree(fresh, reader, second)
    assert _dump(conn) == _dump(fresh)
    assert search_queries.page_count(conn) == PAGES - PAGES // 10 + 1


def test_an_unusable_file_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite3"
    db.write_bytes(b"not a database at all" * 100)
    with pytest.raises(si.IndexDamaged):
        si.connect(db)
    si.remove(db)
    assert si.indexed_commit(si.connect(db)) is None
