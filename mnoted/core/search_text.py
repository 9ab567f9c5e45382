"""What full-text search indexes of a page, and how a query becomes an FTS5 expression.

Pure. SQLite's ``unicode61`` tokenizer splits on spaces and punctuation, which suits
scripts that put spaces between words; Chinese and Japanese do not, and FTS5's
``trigram`` tokenizer cannot find a 2-character word (most Chinese words). So every run of
CJK characters is written to the index as its overlapping bigrams (``网络日志`` →
``网络 络日 日志``), and a query's CJK run becomes the phrase of its bigrams: any substring
of two or more characters is found, in order, and nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mnoted.core import frontmatter as fm
from mnoted.core.links import Link, parse_links
from mnoted.core.page import name_stem

CJK = (
    "\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f"
)
_CJK_RUN = re.compile(f"[{CJK}]+")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*#*[ \t]*$")
_INLINE_TAG = re.compile(r"(?<![\w#&/])#(\w[\w/-]*)")
_QUERY_TERM = re.compile(r'"([^"]*)"?|(\S+)')
MAX_CHUNK_CHARS = 4000


def index_text(text: str) -> str:
    """``text`` as the index stores it: CJK runs as overlapping bigrams, the rest as is."""

    def bigrams(m: re.Match[str]) -> str:
        run = m.group(0)
        if len(run) == 1:
            return f" {run} "
        return " " + " ".join(run[i : i + 2] for i in range(len(run) - 1)) + " "

    return _CJK_RUN.sub(bigrams, text)


@dataclass(frozen=True)
class Chunk:
    """A piece of a page's body the index ranks on its own: a heading line or a paragraph
    (lines separated by blank ones), with the headings it sits under."""

    line: int
    kind: str  # "heading" | "text"
    headings: tuple[str, ...]
    text: str


@dataclass
class Indexed:
    """What the index keeps of one page."""

    title: str
    meta: dict[str, Any]
    tags: list[str]
    chunks: list[Chunk]
    links: list[Link] = field(default_factory=list)


def _plain(value: Any) -> Any:
    """Frontmatter values as JSON can hold them (dates become strings)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _tag_list(value: Any) -> list[str]:
    if isinstance(value, str):
        items: list[Any] = re.split(r"[,\s]+", value)
    elif isinstance(value, list):
        items = value
    else:
        return []
    return [str(t).strip().lstrip("#").lower() for t in items if str(t).strip().lstrip("#")]


def extract(text: str, path: str) -> Indexed:
    """The title, frontmatter, tags, chunks and links of a page's text."""
    lines = text.split("\n")
    front = fm.find(lines)
    meta = _plain(front.data) if front is not None else {}
    start = front.end if front is not None else 0
    tags = _tag_list(meta.get("tags")) + _tag_list(meta.get("tag"))
    chunks: list[Chunk] = []
    stack: list[tuple[int, str]] = []
    para: list[str] = []
    para_line = start
    fence: str | None = None
    first_h1: str | None = None

    def flush() -> None:
        if para:
            body = "\n".join(para).strip()
            if body:
                chunks.append(
                    Chunk(para_line, "text", tuple(h for _, h in stack), body[:MAX_CHUNK_CHARS])
                )
            para.clear()

    for i in range(start, len(lines)):
        line = lines[i]
        m = _FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            para.append(line)
            continue
        if m:
            if not para:
                para_line = i
            fence = m.group(1)
            para.append(line)
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            level, title = len(heading.group(1)), (heading.group(2) or "").strip()
            while stack and stack[-1][0] >= level:
                stack.pop()
            chunks.append(Chunk(i, "heading", tuple(h for _, h in stack), title))
            stack.append((level, title))
            if level == 1 and first_h1 is None:
                first_h1 = title
            continue
        if not line.strip():
            flush()
            continue
        if not para:
            para_line = i
        tags.extend(t.lower() for t in _INLINE_TAG.findall(line) if not t.isdigit())
        para.append(line)
    flush()
    value = meta.get("title")
    if isinstance(value, str | int | float) and not isinstance(value, bool) and str(value).strip():
        title = str(value).strip()
    else:
        title = first_h1 if first_h1 else name_stem(path)
    return Indexed(title, meta, sorted(set(tags)), chunks, parse_links(text))


# -- queries ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """A parsed query: the FTS5 expression and the words to mark in snippets."""

    match: str
    marks: tuple[tuple[str, bool], ...]  # (lower-case text, is a prefix)


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def parse_query(raw: str) -> Query | None:
    """``raw`` as an FTS5 expression: words and ``"phrases"`` all required, ``word*`` a
    prefix; None when nothing searchable is left."""
    parts: list[str] = []
    marks: list[tuple[str, bool]] = []
    for m in _QUERY_TERM.finditer(raw):
        phrase, word = m.group(1), m.group(2)
        text = phrase if phrase is not None else word
        prefix = phrase is None and text.endswith("*")
        text = text.rstrip("*") if prefix else text
        tokens = [t for t in re.split(r"[^\w]+", index_text(text)) if t]
        if not tokens:
            continue
        expr = _quoted(" ".join(tokens))
        if prefix or (len(tokens) == 1 and len(tokens[0]) == 1 and _CJK_RUN.fullmatch(tokens[0])):
            expr += "*"
            prefix = True
        parts.append(expr)
        marks.append((text.strip().lower(), prefix))
    if not parts:
        return None
    return Query(" AND ".join(parts), tuple(marks))


_KIND_ORDER = {"title": 0, "heading": 1}


def best_chunk(chunks: Sequence[tuple[str, str]], marks: Sequence[tuple[str, bool]]) -> int | None:
    """Which piece (``(kind, text)``) of a matching page a hit points at: the one holding
    the most of the query's terms, then the title before headings before body, then the
    first; None if none holds one (a match across pieces)."""
    words = [word for word, _ in marks if word]
    best: tuple[int, int, int] | None = None
    for n, (kind, text) in enumerate(chunks):
        low = text.lower()
        held = sum(1 for word in words if word in low)
        if held == 0:
            continue
        key = (-held, _KIND_ORDER.get(kind, 2), n)
        if best is None or key < best:
            best = key
    return None if best is None else best[2]


MARK_OPEN = "<mark>"
MARK_CLOSE = "</mark>"


def _spans(text: str, marks: Sequence[tuple[str, bool]]) -> list[tuple[int, int]]:
    lower = text.lower()
    spans: list[tuple[int, int]] = []
    for word, prefix in marks:
        if not word:
            continue
        at = lower.find(word)
        while at >= 0:
            end = at + len(word)
            if prefix:
                while end < len(text) and (text[end].isalnum() or text[end] == "_"):
                    end += 1
            spans.append((at, end))
            at = lower.find(word, end)
    spans.sort()
    merged: list[tuple[int, int]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(e, merged[-1][1]))
        else:
            merged.append((s, e))
    return merged


def snippet(text: str, marks: Sequence[tuple[str, bool]], width: int = 160) -> str:
    """A window of ``text`` around its first match, each match between ``<mark>`` tags."""
    flat = " ".join(text.split())
    spans = _spans(flat, marks)
    if spans:
        first = spans[0][0]
        start = max(0, first - width // 3)
    else:
        start = 0
    end = min(len(flat), start + width)
    if start > 0:
        space = flat.rfind(" ", 0, start)
        start = space + 1 if space >= 0 and start - space < 20 else start
    out: list[str] = ["…" if start > 0 else ""]
    at = start
    for s, e in spans:
        if e <= start or s >= end:
            continue
        s, e = max(s, start), min(e, end)
        out.append(flat[at:s])
        out.append(MARK_OPEN + flat[s:e] + MARK_CLOSE)
        at = e
    out.append(flat[at:end])
    if end < len(flat):
        out.append("…")
    return "".join(out)
