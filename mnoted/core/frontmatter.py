"""YAML frontmatter: found, parsed, and edited one top-level key at a time.

Frontmatter is the YAML between a ``---`` line at the very top of a file and the
next ``---`` (or ``...``) line. It is kept verbatim; an edit rewrites only the
lines of the keys it changes, so comments, key order, quoting and every other
key stay as the user wrote them. Invalid YAML never stops a page from being
read: it is reported, and writes to it are refused.

Frontmatter is untrusted input: a few hundred bytes of nested aliases stand for
billions of nodes once walked or encoded, and deep nesting exhausts the stack. Both
are measured while the YAML is composed (before any value is built) and refused
past :data:`MAX_NODES` expanded nodes or :data:`MAX_DEPTH` levels; the page then
reads with its frontmatter kept as bytes and a warning, like invalid YAML.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from mnoted.errors import InvalidFrontmatter

_KEY_RE = re.compile(r"""^(?P<key>"[^"]*"|'[^']*'|[^\s#'"\-?:][^:#]*?)\s*:(?:\s|$)""")
_FENCE_OPEN = "---"
_FENCE_CLOSE = ("---", "...")


MAX_DEPTH = 64
"""Nesting levels of frontmatter YAML composed before it is refused as too deep."""
MAX_NODES = 20_000
"""Nodes frontmatter YAML may stand for once its aliases are expanded."""


class FrontmatterTooComplex(yaml.YAMLError):
    """The YAML is over :data:`MAX_DEPTH` or :data:`MAX_NODES` (found while composing)."""


class _Loader(yaml.SafeLoader):
    """Safe loader that keeps dates and times as the strings the user wrote, and counts
    what it composes: each node's size with its aliases expanded, and the depth."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) -> nodes it stands for, expanded

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise FrontmatterTooComplex(f"nested deeper than {MAX_DEPTH} levels")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        size = self._sizes.get(id(node))
        if size is None:  # (an alias's node was counted where it was anchored)
            if isinstance(node, yaml.SequenceNode):
                size = 1 + sum(self._sizes.get(id(n), 1) for n in node.value)
            elif isinstance(node, yaml.MappingNode):
                size = 1 + sum(
                    self._sizes.get(id(k), 1) + self._sizes.get(id(v), 1) for k, v in node.value
                )
            else:
                size = 1
            self._sizes[id(node)] = size
        if size > MAX_NODES:
            raise FrontmatterTooComplex(f"stands for more than {MAX_NODES} values")
        return node


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class DeleteKey:
    """Sentinel value for :func:`edit_keys`: remove the key."""


DELETE = DeleteKey()


@dataclass(frozen=True)
class Frontmatter:
    """The frontmatter block: lines ``start:end`` of the file (fences included)."""

    start: int
    end: int
    raw: str
    data: dict[str, Any]
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None


def parse_yaml(raw: str) -> tuple[dict[str, Any], str | None]:
    """Parsed mapping and an error message (empty mapping when invalid)."""
    try:
        value = yaml.load(raw, Loader=_Loader)
    except FrontmatterTooComplex as exc:
        return {}, f"frontmatter too complex to read: {exc}"
    except yaml.YAMLError as exc:
        return {}, f"invalid YAML: {str(exc).splitlines()[0]}"
    except RecursionError:  # (the composer is bounded; this guards the rest of PyYAML)
        return {}, "frontmatter too complex to read: nested too deep"
    if value is None:
        return {}, None
    if not isinstance(value, dict):
        return {}, f"frontmatter is a {type(value).__name__}, not a mapping"
    return {str(k): v for k, v in value.items()}, None


def find(lines: Sequence[str]) -> Frontmatter | None:
    """The frontmatter at the top of ``lines``, if the file has one."""
    if not lines or lines[0].rstrip(" \t") != _FENCE_OPEN:
        return None
    for i in range(1, len(lines)):
        if lines[i].rstrip(" \t") in _FENCE_CLOSE:
            raw = "\n".join(lines[1:i])
            data, error = parse_yaml(raw)
            return Frontmatter(0, i + 1, raw, data, error)
    return None


def document_id(data: bytes | str) -> str | None:
    """The ``id`` a file's frontmatter pins, if any (cheap: reads only the top)."""
    from mnoted.core.source import Source

    fm = find(Source.from_data(data[:65536]).lines)
    if fm is None or not fm.valid:
        return None
    value = fm.data.get("id")
    if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
        return str(value).strip()
    return None


def render_value(key: str, value: Any) -> list[str]:
    """YAML lines for one top-level ``key: value``."""
    dumped = yaml.safe_dump(
        {key: value},
        default_flow_style=False,
        allow_unicode=True,
        sort_keys=False,
        width=1 << 30,
    )
    return dumped.rstrip("\n").split("\n")


def _key_spans(body: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Each top-level key's line span within the frontmatter body."""
    spans: dict[str, tuple[int, int]] = {}
    current: str | None = None
    start = 0
    for i, line in enumerate(body):
        m = _KEY_RE.match(line)
        ends_current = m is not None or (line.startswith("#") and current is not None)
        if ends_current and current is not None:
            spans[current] = (start, i)
            current = None
        if m is not None:
            key = m.group("key")
            if key[:1] in "\"'":
                key = key[1:-1]
            current, start = key, i
    if current is not None:
        end = len(body)
        while end > start + 1 and not body[end - 1].strip():
            end -= 1
        spans[current] = (start, end)
    return spans


def edit_keys(lines: Sequence[str], updates: Mapping[str, Any]) -> tuple[int, int, list[str]]:
    """Lines that replace the frontmatter (or create one) with ``updates`` applied.

    Returns ``(start, end, new_lines)``: replace ``lines[start:end]`` with ``new_lines``.
    Only the changed keys' lines differ; new keys go at the end. A page without
    frontmatter gets a minimal block. Invalid frontmatter is refused untouched.
    """
    fm = find(lines)
    if fm is None:
        new_keys = [ln for k, v in updates.items() if v is not DELETE for ln in render_value(k, v)]
        if not new_keys:
            return 0, 0, []
        return 0, 0, [_FENCE_OPEN, *new_keys, _FENCE_OPEN]
    if not fm.valid:
        raise InvalidFrontmatter(f"the page's frontmatter cannot be changed: {fm.error}")
    body = list(lines[fm.start + 1 : fm.end - 1])
    spans = _key_spans(body)
    expected = dict(fm.data)
    # Apply from the bottom up so earlier spans stay valid.
    existing = sorted(
        ((spans[k], k) for k in updates if k in spans), key=lambda item: item[0][0], reverse=True
    )
    for (s, e), key in existing:
        value = updates[key]
        body[s:e] = [] if value is DELETE else render_value(key, value)
    appended = [
        ln
        for k, v in updates.items()
        if k not in spans and v is not DELETE
        for ln in render_value(k, v)
    ]
    if appended:
        insert_at = len(body)
        while insert_at > 0 and not body[insert_at - 1].strip():
            insert_at -= 1
        body[insert_at:insert_at] = appended
    for key, value in updates.items():
        if value is DELETE:
            expected.pop(key, None)
        else:
            expected[key] = value
    check, error = parse_yaml("\n".join(body))
    if error is not None or check != expected:
        raise InvalidFrontmatter(
            "the frontmatter is written in a form mnoted cannot edit line by line",
            hint="Edit these keys in an editor, or write the frontmatter as 'key: value' lines.",
        )
    closing = lines[fm.end - 1]
    return fm.start, fm.end, [lines[fm.start], *body, closing]
