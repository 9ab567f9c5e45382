"""Markdown source lines → block tree, with exact line spans and container prefixes.

markdown-it-py (CommonMark, plus tables, strikethrough and ``$$`` math) finds
the blocks; this module turns its tokens into :class:`Block` objects whose
spans index the original source lines. Lines markdown-it keeps no token for
(link reference definitions, footnote definitions) become ``definition``
blocks, so every non-blank line of a page belongs to some block. Obsidian
syntax (wikilinks, embeds, tags, callouts, block anchors) is plain text to the
parser and so passes through every edit untouched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.dollarmath import dollarmath_plugin

from mnoted.core.blocks import Block

_MD = (
    MarkdownIt("commonmark", {"html": True})
    .enable("table")
    .enable("strikethrough")
    .use(dollarmath_plugin, allow_labels=False, allow_space=True, allow_digits=True)
    # Blocks are all we need: inline parsing is two thirds of the cost, so skip it.
    .disable(["inline", "text_join"])
)

_ITEM_RE = re.compile(r"^( {0,3})([-*+]|\d{1,9}[.)])([ \t]+|$)")
_TASK_RE = re.compile(r"^\[([ xX])\](?:[ \t]+|$)")
_CALLOUT_RE = re.compile(r"^\[!([^\]\s]+)\]([+-]?)[ \t]*(.*)$")
_ANCHOR_RE = re.compile(r"(?:^|[ \t])\^([A-Za-z0-9][A-Za-z0-9-]*)[ \t]*$")
_DEFINITION_START = re.compile(r"^ {0,3}\[")
_LONE_ANCHOR_RE = re.compile(r"^\^([A-Za-z0-9][A-Za-z0-9-]*)[ \t]*$")


def strip_prefix(line: str, prefix: str) -> str:
    """``line`` without the container ``prefix`` (``>`` marks and list indentation).

    Lenient as CommonMark is: a ``>`` may be preceded by up to three spaces and
    followed by an optional space; a lazy continuation line keeps what it has.
    """
    i = 0
    n = len(line)
    k = 0
    while k < len(prefix):
        ch = prefix[k]
        if ch == ">":
            j = i
            while j < n and j - i < 3 and line[j] == " ":
                j += 1
            if j < n and line[j] == ">":
                i = j + 1
                if k + 1 < len(prefix) and prefix[k + 1] == " ":
                    if i < n and line[i] in " \t":
                        i += 1
                    k += 1
            else:
                return line[i:]
        elif i < n and line[i] == " ":
            i += 1
        elif i < n and line[i] == "\t":
            # A tab reaches the next multiple of four; count it as the rest of this indent.
            spaces = 4 - (i % 4)
            k += spaces - 1
            i += 1
        else:
            return line[i:]
        k += 1
    return line[i:]


def add_prefix(line: str, prefix: str) -> str:
    """``line`` written inside a container whose lines start with ``prefix``."""
    return prefix + line if line else prefix.rstrip(" ")


def tokens_of(text: str) -> list[Token]:
    return _MD.parse(text)


def parse_blocks(lines: Sequence[str], body_start: int = 0) -> list[Block]:
    """The block tree of ``lines``; lines before ``body_start`` (frontmatter) are skipped."""
    md_text = "\n".join(["" for _ in range(body_start)] + list(lines[body_start:]))
    tokens = tokens_of(md_text)
    builder = _Builder(lines)
    blocks = builder.build(tokens, 0, len(tokens), "")
    return builder.with_gaps(blocks, body_start, len(lines), "")


class _Builder:
    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = lines

    def stripped(self, start: int, end: int, prefix: str) -> str:
        return "\n".join(strip_prefix(self.lines[i], prefix) for i in range(start, end))

    def is_blank(self, i: int, prefix: str) -> bool:
        return not strip_prefix(self.lines[i], prefix).strip()

    def trim(self, start: int, end: int, prefix: str) -> int:
        """``end`` moved back over trailing blank lines (a block never ends on one)."""
        while end > start + 1 and self.is_blank(end - 1, prefix):
            end -= 1
        return end

    def build(self, tokens: list[Token], i: int, j: int, prefix: str) -> list[Block]:
        out: list[Block] = []
        while i < j:
            tok = tokens[i]
            if tok.nesting == 1:
                close = _matching_close(tokens, i)
                block = self.container(tokens, i, close, prefix)
                i = close + 1
            elif tok.nesting == 0 and tok.map is not None and tok.type != "inline":
                block = self.leaf(tok, prefix)
                i += 1
            else:
                i += 1
                continue
            if block is not None:
                out.append(block)
        _attach_lone_anchors(out)
        return out

    def with_gaps(self, blocks: list[Block], start: int, end: int, prefix: str) -> list[Block]:
        """``blocks`` plus ``definition`` blocks for non-blank lines no token covers."""
        covered = [False] * (end - start)
        for b in blocks:
            for k in range(max(b.start, start), min(b.end, end)):
                covered[k - start] = True
        gaps: list[Block] = []
        i = start
        while i < end:
            if covered[i - start] or self.is_blank(i, prefix):
                i += 1
                continue
            j = i + 1
            while (
                j < end
                and not covered[j - start]
                and not self.is_blank(j, prefix)
                and not _DEFINITION_START.match(strip_prefix(self.lines[j], prefix))
            ):
                j += 1
            text = self.stripped(i, j, prefix)
            kind = "footnote" if text.startswith("[^") else "reference"
            gaps.append(Block("definition", text, i, j, {"kind": kind}, outer_prefix=prefix))
            i = j
        if not gaps:
            return blocks
        return sorted([*blocks, *gaps], key=lambda b: b.start)

    def leaf(self, tok: Token, prefix: str) -> Block | None:
        assert tok.map is not None
        start, end = tok.map
        kind = tok.type
        if kind == "fence":
            info = tok.info.strip()
            props = {"language": info.split()[0] if info else "", "fenced": True}
            if info and info != props["language"]:
                props["info"] = info
            text = tok.content[:-1] if tok.content.endswith("\n") else tok.content
            return Block("code", text, start, end, props, outer_prefix=prefix)
        if kind == "code_block":
            end = self.trim(start, end, prefix)
            text = tok.content.rstrip("\n")
            return Block(
                "code", text, start, end, {"language": "", "fenced": False}, outer_prefix=prefix
            )
        if kind == "hr":
            return Block(
                "thematic_break", "", start, end, {"markup": tok.markup}, outer_prefix=prefix
            )
        if kind == "math_block":
            return Block("math", tok.content.strip("\n"), start, end, outer_prefix=prefix)
        if kind == "html_block":
            end = self.trim(start, end, prefix)
            return Block("html", self.stripped(start, end, prefix), start, end, outer_prefix=prefix)
        end = self.trim(start, end, prefix)
        return Block(kind, self.stripped(start, end, prefix), start, end, outer_prefix=prefix)

    def container(self, tokens: list[Token], i: int, close: int, prefix: str) -> Block | None:
        tok = tokens[i]
        if tok.map is None:
            return None
        start, end = tok.map
        kind = tok.type[: -len("_open")]
        if kind == "heading":
            level = int(tok.tag[1])
            props = {"level": level}
            if tok.markup in ("=", "-"):
                props["setext"] = True
            return Block("heading", tokens[i + 1].content, start, end, props, outer_prefix=prefix)
        if kind == "paragraph":
            end = self.trim(start, end, prefix)
            return Block("paragraph", tokens[i + 1].content, start, end, outer_prefix=prefix)
        if kind in ("bullet_list", "ordered_list"):
            return self.list_block(tokens, i, close, prefix)
        if kind == "list_item":
            return self.item(tokens, i, close, prefix)
        if kind == "blockquote":
            return self.quote(tokens, i, close, prefix)
        end = self.trim(start, end, prefix)
        kind = {"table": "table"}.get(kind, "html")
        return Block(kind, self.stripped(start, end, prefix), start, end, outer_prefix=prefix)

    def list_block(self, tokens: list[Token], i: int, close: int, prefix: str) -> Block:
        tok = tokens[i]
        assert tok.map is not None
        start = tok.map[0]
        ordered = tok.type == "ordered_list_open"
        items = self.build(tokens, i + 1, close, prefix)
        end = items[-1].end if items else self.trim(start, tok.map[1], prefix)
        props: dict[str, object] = {"ordered": ordered, "marker": tok.markup}
        if ordered:
            start_attr = tok.attrGet("start")
            props["start"] = int(start_attr) if start_attr is not None else 1
        props["tight"] = not any(
            t.type == "paragraph_open" and not t.hidden and t.level == tok.level + 2
            for t in tokens[i + 1 : close]
        )
        text = self.stripped(start, end, prefix)
        return Block("list", text, start, end, props, items, start, outer_prefix=prefix)

    def item(self, tokens: list[Token], i: int, close: int, prefix: str) -> Block:
        tok = tokens[i]
        assert tok.map is not None
        start = tok.map[0]
        first = strip_prefix(self.lines[start], prefix)
        m = _ITEM_RE.match(first)
        spacing = m.group(3) if m else " "
        marker_width = len(m.group(1)) + len(m.group(2)) if m else len(first) - len(first.lstrip())
        pad = len(spacing.expandtabs(4)) if spacing else 1
        content_col = marker_width + (pad if 1 <= pad <= 4 else 1)
        child_prefix = prefix + " " * content_col
        head_end = start + 1
        text = ""
        body_from = i + 1
        nxt = tokens[i + 1] if i + 1 < close else None
        if nxt is not None and nxt.type == "paragraph_open" and nxt.map and nxt.map[0] == start:
            text = tokens[i + 2].content
            head_end = self.trim(start, nxt.map[1], child_prefix)
            body_from = _matching_close(tokens, i + 1) + 1
        elif nxt is not None and nxt.map and nxt.map[0] == start:
            head_end = start  # the item's first line holds a child block (e.g. a fence)
        children = self.build(tokens, body_from, close, child_prefix)
        end = max([head_end, *(c.end for c in children)])
        children = self.with_gaps(children, head_end, end, child_prefix)
        props: dict[str, object] = {"marker": m.group(2) if m else tok.markup}
        kind = "list_item"
        task = _TASK_RE.match(text)
        if task:
            kind = "task_item"
            props["checked"] = task.group(1) != " "
            text = text[task.end() :]
        block = Block(kind, text, start, end, props, children, head_end, child_prefix, prefix)
        block.anchor = _anchor_of(text)
        return block

    def quote(self, tokens: list[Token], i: int, close: int, prefix: str) -> Block:
        tok = tokens[i]
        assert tok.map is not None
        start = tok.map[0]
        child_prefix = prefix + "> "
        children = self.build(tokens, i + 1, close, child_prefix)
        end = self.trim(start, tok.map[1], prefix)
        end = max([end, *(c.end for c in children)])
        first = children[0] if children else None
        callout = None
        if first is not None and first.type == "paragraph" and first.start == start:
            callout = _CALLOUT_RE.match(first.text.split("\n", 1)[0])
        if callout is None:
            children = self.with_gaps(children, start, end, child_prefix)
            text = self.stripped(start, end, child_prefix)
            return Block("quote", text, start, end, {}, children, start, child_prefix, prefix)
        assert first is not None
        rest = first.text.split("\n", 1)
        children = children[1:]
        if len(rest) > 1 and first.end > start + 1:
            body = Block("paragraph", rest[1], start + 1, first.end, outer_prefix=child_prefix)
            body.anchor = _anchor_of(body.text)
            children.insert(0, body)
        children = self.with_gaps(children, start + 1, end, child_prefix)
        props: dict[str, object] = {
            "calloutType": callout.group(1).lower(),
            "title": callout.group(3),
        }
        if callout.group(2):
            props["fold"] = callout.group(2)
        text = self.stripped(start + 1, end, child_prefix)
        return Block("callout", text, start, end, props, children, start + 1, child_prefix, prefix)


def _matching_close(tokens: list[Token], i: int) -> int:
    level = tokens[i].level
    for k in range(i + 1, len(tokens)):
        if tokens[k].level == level and tokens[k].nesting == -1:
            return k
    return len(tokens) - 1


def _anchor_of(text: str) -> str | None:
    last = text.rsplit("\n", 1)[-1]
    m = _ANCHOR_RE.search(last)
    return m.group(1) if m else None


def _attach_lone_anchors(blocks: list[Block]) -> None:
    """Give blocks their Obsidian ``^anchor``: at the end of their text, or alone just after."""
    for k, block in enumerate(blocks):
        if (
            block.type in ("paragraph", "heading", "list_item", "task_item")
            and block.anchor is None
        ):
            lone = _LONE_ANCHOR_RE.match(block.text) if block.type == "paragraph" else None
            if lone and k > 0 and blocks[k - 1].anchor is None:
                blocks[k - 1].anchor = lone.group(1)
            elif not lone:
                block.anchor = _anchor_of(block.text)
