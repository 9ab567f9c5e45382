"""Queries over the search and link index (:mod:`mnoted.store.search_index`).

Ranked full-text search with the filters of who may see a page, path globs, tags and
frontmatter fields applied inside the query (so counts and pages agree), the pages that
link to a name, and the number of pages indexed. Read-only: nothing here writes.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mnoted.core.search_text import Query, best_chunk

WEIGHTS = (10.0, 4.0, 1.0)
"""BM25 weights of the title, heading and body columns."""


@dataclass(frozen=True)
class Hit:
    path: str
    blob: str
    title: str
    line: int
    kind: str
    headings: list[str]
    text: str
    score: float
    """BM25 (higher is better) over the pages of the index searched."""


@dataclass(frozen=True)
class Filters:
    """What narrows a search: who may see a page, path globs, tags, frontmatter fields."""

    visible: Callable[[str], bool] | None = None
    visible_under: Sequence[str] | None = None  # folders ("notes/"), as `visible` when it is so
    paths: Callable[[str], bool] | None = None
    tags: Sequence[str] = ()
    fields: Sequence[tuple[str, Any]] = ()


def _where(filters: Filters, conn: sqlite3.Connection) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if filters.visible is not None:
        conn.create_function("mnote_visible", 1, filters.visible, deterministic=True)
        clauses.append("mnote_visible(d.path)")
    if filters.visible_under is not None:
        ranges = []
        for folder in filters.visible_under:
            ranges.append("(d.path >= ? AND d.path < ?)")
            params += [folder, folder[:-1] + chr(ord(folder[-1]) + 1)]
        clauses.append("(" + (" OR ".join(ranges) or "0") + ")")
    if filters.paths is not None:
        conn.create_function("mnote_paths", 1, filters.paths, deterministic=True)
        clauses.append("mnote_paths(d.path)")
    for tag in filters.tags:
        clauses.append("EXISTS (SELECT 1 FROM tags t WHERE t.doc = d.id AND t.tag = ?)")
        params.append(tag.lstrip("#").lower())
    for key, value in filters.fields:
        clauses.append("EXISTS (SELECT 1 FROM json_each(d.meta, ?) j WHERE j.value = ?)")
        params.append('$."' + key.replace('"', '\\"') + '"')
        params.append(int(value) if isinstance(value, bool) else value)
    return (" AND " + " AND ".join(clauses)) if clauses else "", params


def search(
    conn: sqlite3.Connection, query: Query, filters: Filters, limit: int, offset: int
) -> tuple[int, list[Hit]]:
    """The pages matching ``query`` that pass ``filters``, best first, each with the piece
    that matches it best; and how many there are in all."""
    where, params = _where(filters, conn)
    sql = f"""
        WITH m AS MATERIALIZED (
            SELECT rowid AS doc, bm25(pages_fts, ?, ?, ?) AS score
            FROM pages_fts WHERE pages_fts MATCH ?
        )
        SELECT d.id, d.path, d.title, d.blob, count(*) OVER (), m.score
        FROM m JOIN docs d ON d.id = m.doc
        WHERE 1{where}
        ORDER BY m.score, d.path LIMIT ? OFFSET ?
    """
    rows = conn.execute(sql, [*WEIGHTS, query.match, *params, limit, offset]).fetchall()
    total = rows[0][4] if rows else 0
    if not rows and offset:
        total = conn.execute(
            f"""SELECT count(*) FROM pages_fts f JOIN docs d ON d.id = f.rowid
            WHERE pages_fts MATCH ?{where}""",
            [query.match, *params],
        ).fetchone()[0]
    pieces: dict[int, list[tuple[int, str, str, str]]] = {row[0]: [] for row in rows}
    if pieces:
        marks = ",".join("?" * len(pieces))
        for doc, line, kind, headings, text in conn.execute(
            f"SELECT doc, line, kind, headings, text FROM chunks WHERE doc IN ({marks})"
            " ORDER BY id",
            list(pieces),
        ):
            pieces[doc].append((line, kind, headings, text))
    hits = []
    for doc, path, title, blob, _, score in rows:
        found = pieces[doc]
        at = best_chunk([(kind, text) for _, kind, _, text in found], query.marks)
        line, kind, headings, text = found[at] if at is not None else (-1, "title", "[]", title)
        hits.append(Hit(path, blob, title, line, kind, json.loads(headings), text, -score))
    return int(total), hits


def linking_pages(conn: sqlite3.Connection, keys: Sequence[str]) -> list[str]:
    """Paths of the pages with a link whose name is one of ``keys`` (lower-case stems)."""
    if not keys:
        return []
    marks = ",".join("?" * len(keys))
    rows = conn.execute(
        f"SELECT DISTINCT d.path FROM links l JOIN docs d ON d.id = l.doc WHERE l.key IN ({marks})"
        " ORDER BY d.path",
        list(keys),
    ).fetchall()
    return [r[0] for r in rows]


def page_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM docs").fetchone()[0])
