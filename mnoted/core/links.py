"""Links between pages: parsing, resolution as Obsidian resolves them, rewriting on a move.

Pure: a page's text in, :class:`Link` values out; resolution takes the workspace's page
paths as a :class:`PathIndex`. The rules are written out in ``docs/links.md``.
"""

from __future__ import annotations

import posixpath
import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote

_WIKI = re.compile(r"(!?)\[\[([^\[\]\n]+?)\]\]")
_MD = re.compile(
    r"(!?)\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]\(\s*(<[^<>\n]+>|[^()\s]+)(\s+\"[^\"\n]*\")?\s*\)"
)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_NEWLINE = re.compile("\n")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
PAGE_SUFFIXES = (".md", ".markdown")


@dataclass(frozen=True)
class Link:
    """One link in a page. ``start:end`` are character offsets of the whole link in the
    page's text, ``line`` its 0-based line; ``target`` is the path part as written (Markdown
    links percent-decoded), empty for a link to a heading of the same page."""

    kind: str  # "wikilink" | "markdown"
    embed: bool
    target: str
    heading: str | None
    block: str | None
    alias: str | None
    line: int
    start: int
    end: int
    raw: str
    angle: bool = False  # a Markdown link written <with spaces>

    @property
    def key(self) -> str:
        """The lower-case name (file stem) the link points at: how backlinks are found."""
        return name_key(self.target)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "kind": "embed" if self.embed else self.kind,
            "syntax": self.kind,
            "target": self.target,
            "line": self.line + 1,
            "raw": self.raw,
        }
        for name in ("heading", "block", "alias"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


def name_key(target: str) -> str:
    """``notes/Plan.md`` → ``plan``: the lower-case stem of a path or link target."""
    base = target.rsplit("/", 1)[-1]
    lower = base.lower()
    for suffix in PAGE_SUFFIXES:
        if lower.endswith(suffix):
            return lower[: -len(suffix)]
    return lower


def _masked(text: str) -> str:
    """``text`` with fenced code blocks and inline code spans blanked (same offsets)."""
    out: list[str] = []
    fence: str | None = None
    for line in text.splitlines(keepends=True):
        m = _FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append(" " * len(line.rstrip("\n")) + ("\n" if line.endswith("\n") else ""))
            continue
        if m:
            fence = m.group(1)
            out.append(" " * len(line.rstrip("\n")) + ("\n" if line.endswith("\n") else ""))
            continue
        out.append(_CODE_SPAN.sub(lambda c: " " * len(c.group(0)), line))
    return "".join(out)


def _wiki(m: re.Match[str], line: int) -> Link:
    inner = m.group(2)
    alias = None
    bar = re.search(r"\\?\|", inner)
    if bar:
        inner, alias = inner[: bar.start()], inner[bar.end() :]
    heading: str | None = None
    block: str | None = None
    target = inner
    if "#" in target:
        target, after = target.split("#", 1)
        if after.startswith("^"):
            block = after[1:]
        else:
            heading = after
    elif "^" in target:
        target, block = target.split("^", 1)
    return Link(
        "wikilink",
        bool(m.group(1)),
        target.strip(),
        heading.strip() if heading is not None else None,
        block.strip() if block is not None else None,
        alias,
        line,
        m.start(),
        m.end(),
        m.group(0),
    )


def _markdown(m: re.Match[str], line: int) -> Link | None:
    dest = m.group(3)
    angle = dest.startswith("<")
    if angle:
        dest = dest[1:-1]
    if _SCHEME.match(dest) or dest.startswith("//"):
        return None
    path, _, anchor = dest.partition("#")
    path = unquote(path)
    if not path.lower().endswith(PAGE_SUFFIXES):
        return None
    heading = block = None
    if anchor:
        anchor = unquote(anchor)
        if anchor.startswith("^"):
            block = anchor[1:]
        else:
            heading = anchor
    return Link(
        "markdown",
        bool(m.group(1)),
        path,
        heading,
        block,
        m.group(2),
        line,
        m.start(),
        m.end(),
        m.group(0),
        angle,
    )


def parse_links(text: str) -> list[Link]:
    """Every wikilink, embed and Markdown link to a page in ``text``, in order; none inside
    code blocks or code spans."""
    masked = _masked(text)
    starts = [0]
    starts.extend(m.end() for m in _NEWLINE.finditer(masked))
    found: list[Link] = []

    for m in _WIKI.finditer(masked):
        real = _WIKI.fullmatch(text, m.start(), m.end())
        if real is not None:
            found.append(_wiki(real, bisect_right(starts, m.start()) - 1))
    taken = [(lk.start, lk.end) for lk in found]
    for m in _MD.finditer(masked):
        if any(s < m.end() and m.start() < e for s, e in taken):
            continue
        real = _MD.fullmatch(text, m.start(), m.end())
        if real is None:
            continue
        link = _markdown(real, bisect_right(starts, m.start()) - 1)
        if link is not None:
            found.append(link)
    return sorted(found, key=lambda lk: lk.start)


# -- resolution -------------------------------------------------------------------------


class PathIndex:
    """The workspace's page paths, looked up by lower-case path and by name."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.by_path: dict[str, str] = {}
        self.by_name: dict[str, list[str]] = {}
        for path in paths:
            self.by_path[path.lower()] = path
            self.by_name.setdefault(name_key(path), []).append(path)

    def named(self, key: str) -> list[str]:
        return self.by_name.get(key, [])


def _folder(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def _with_suffix(target: str) -> str:
    return target if target.lower().endswith(PAGE_SUFFIXES) else target + ".md"


def _closest(source: str, candidates: Sequence[str]) -> str | None:
    if not candidates:
        return None
    folder = _folder(source)
    return min(candidates, key=lambda p: (_folder(p) != folder, p.count("/"), p))


def resolve(link: Link, source: str, index: PathIndex) -> str | None:
    """The page ``link`` in page ``source`` points at, or None (unresolved)."""
    target = link.target.strip()
    if not target:
        return source
    if link.kind == "markdown":
        if target.startswith("/"):
            joined = target.lstrip("/")
        else:
            joined = posixpath.normpath(posixpath.join(_folder(source), target))
        if joined.startswith("../") or joined == "..":
            return None
        found = index.by_path.get(joined.lower())
        return found if found is not None else index.by_path.get(target.lstrip("/").lower())
    wanted = _with_suffix(target.lstrip("/")).lower()
    if "/" in wanted:
        found = index.by_path.get(wanted)
        if found is not None:
            return found
    if target.startswith(("./", "../")):
        rel = posixpath.normpath(posixpath.join(_folder(source), _with_suffix(target)))
        return index.by_path.get(rel.lower())
    candidates = [
        p for p in index.named(name_key(wanted)) if ("/" + p.lower()).endswith("/" + wanted)
    ]
    return _closest(source, candidates)


# -- rewriting after a move -------------------------------------------------------------


def wikilink_target(new_path: str, index: PathIndex, *, keep_suffix: bool) -> str:
    """The shortest way to name ``new_path`` in a wikilink that still resolves to it from
    anywhere: its name when no other page has it, else its whole path."""
    stem = new_path.rsplit("/", 1)[-1]
    if not keep_suffix and stem.lower().endswith(PAGE_SUFFIXES):
        stem = stem.rsplit(".", 1)[0]
    if len(index.named(name_key(new_path))) <= 1:
        return stem
    full = new_path
    if not keep_suffix and full.lower().endswith(PAGE_SUFFIXES):
        full = full.rsplit(".", 1)[0]
    return full


def relative_path(source: str, target: str) -> str:
    """``target`` as a path relative to the folder of page ``source``."""
    return posixpath.relpath(target, _folder(source) or ".")


def rewritten(link: Link, source: str, new_path: str, index: PathIndex) -> str:
    """The text of ``link`` (in page ``source``) pointing at ``new_path`` instead."""
    if link.kind == "wikilink":
        name = wikilink_target(
            new_path, index, keep_suffix=link.target.lower().endswith(PAGE_SUFFIXES)
        )
        inner = name
        if link.heading is not None:
            inner += "#" + link.heading
        if link.block is not None:
            inner += "#^" + link.block if "#^" in link.raw else "^" + link.block
        if link.alias is not None:
            inner += ("\\|" if "\\|" in link.raw else "|") + link.alias
        return ("!" if link.embed else "") + "[[" + inner + "]]"
    rel = relative_path(source, new_path)
    dest = rel if link.angle else quote(rel, safe="/._-~")
    anchor = ""
    if link.heading is not None:
        anchor = "#" + (link.heading if link.angle else quote(link.heading, safe=""))
    elif link.block is not None:
        anchor = "#^" + link.block
    dest = f"<{dest}{anchor}>" if link.angle else dest + anchor
    m = _MD.fullmatch(link.raw)
    title = (m.group(4) or "") if m else ""
    return f"{'!' if link.embed else ''}[{link.alias or ''}]({dest}{title})"


def replace_links(text: str, replacements: Sequence[tuple[Link, str]]) -> str:
    """``text`` with each link's span replaced by its new text."""
    out: list[str] = []
    at = 0
    for link, new in sorted(replacements, key=lambda r: r[0].start):
        out.append(text[at : link.start])
        out.append(new)
        at = link.end
    out.append(text[at:])
    return "".join(out)
