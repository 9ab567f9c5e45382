"""What the index stores of a page, and how queries become FTS5 expressions."""

from __future__ import annotations

from mnoted.core.search_text import extract, index_text, parse_query, snippet


def test_cjk_runs_become_bigrams_and_queries_their_phrases() -> None:
    assert index_text("the 网络日志 blog") == "the  网络 络日 日志  blog"
    q = parse_query('周刊 "net log" pre* 者')
    assert q is not None
    assert q.match == '"周刊" AND "net log" AND "pre"* AND "者"*'
    assert parse_query("者周刊").match == '"者周 周刊"'  # type: ignore[union-attr]
    assert parse_query(' "" * ') is None
    assert parse_query('a"b').match == '"a b"'  # type: ignore[union-attr]  # (quotes escaped)


def test_extract_title_tags_chunks_and_links() -> None:
    page = extract(
        "---\ntags: [Work, '#x']\n---\n# Title\n\nText #inline and #123.\n\n"
        "## Sub\n\n```\n# not a heading\n[[no]]\n```\n\nSee [[Other]].\n",
        "a/p.md",
    )
    assert page.title == "Title" and page.tags == ["inline", "work", "x"]
    kinds = [(c.kind, c.headings, c.line) for c in page.chunks]
    assert kinds == [
        ("heading", (), 3),
        ("text", ("Title",), 5),
        ("heading", ("Title",), 7),
        ("text", ("Title", "Sub"), 9),
        ("text", ("Title", "Sub"), 14),
    ]
    assert [lk.target for lk in page.links] == ["Other"]
    assert extract("no heading", "x/Name.md").title == "Name"


def test_snippet_marks_every_match_in_a_window() -> None:
    marks = parse_query("zeb*").marks  # type: ignore[union-attr]
    text = "word " * 60 + "a Zebra and zebras here " + "tail " * 60
    out = snippet(text, marks)
    assert "<mark>Zebra</mark> and <mark>zebras</mark>" in out
    assert out.startswith("…") and out.endswith("…") and len(out) < 220
