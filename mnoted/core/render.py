"""Block specs → Markdown lines, for text that commands write into a page.

A block spec is what agents send: ``{"type", "text", "props"?, "children"?}``,
or ``{"markdown": "..."}`` for raw Markdown written as given. Lines come back
without container prefixes; the caller places them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mnoted.errors import InvalidArguments

WRITABLE_TYPES = (
    "paragraph",
    "heading",
    "code",
    "quote",
    "callout",
    "list",
    "list_item",
    "task_item",
    "table",
    "thematic_break",
    "html",
    "math",
    "definition",
)
_FENCE_RUN = re.compile(r"`{3,}")


def spec_type(spec: Mapping[str, Any]) -> str:
    if "markdown" in spec and "type" not in spec:
        return "markdown"
    kind = spec.get("type", "paragraph")
    if kind not in WRITABLE_TYPES:
        raise InvalidArguments(
            f"unknown block type {kind!r}",
            hint=f"Use one of: {', '.join(WRITABLE_TYPES)}, or send {{'markdown': '...'}}.",
        )
    return str(kind)


def _text(spec: Mapping[str, Any]) -> str:
    value = spec.get("text", spec.get("markdown", ""))
    if not isinstance(value, str):
        raise InvalidArguments("block text must be a string")
    return value.replace("\r\n", "\n").replace("\r", "\n")


def _props(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    props = spec.get("props") or {}
    if not isinstance(props, Mapping):
        raise InvalidArguments("block props must be an object")
    return props


def item_marker(props: Mapping[str, Any], default: str = "-") -> str:
    marker = str(props.get("marker", default))
    return marker if re.fullmatch(r"[-*+]|\d{1,9}[.)]", marker) else default


def render_item(spec: Mapping[str, Any], marker: str) -> list[str]:
    """A list item: marker line, continuation lines and children, indented to its content."""
    kind = spec_type(spec)
    props = _props(spec)
    text = _text(spec)
    box = ""
    if kind == "task_item":
        box = "[x] " if props.get("checked") else "[ ] "
    lines = text.split("\n") if text else [""]
    pad = " " * (len(marker) + 1)
    out = [f"{marker} {box}{lines[0]}".rstrip() if not lines[0] else f"{marker} {box}{lines[0]}"]
    out += [pad + ln if ln else "" for ln in lines[1:]]
    nested = marker if marker in ("-", "*", "+") else "-"
    for child in spec.get("children") or []:
        if spec_type(child) not in ("list_item", "task_item"):
            out.append("")  # a paragraph right under the marker line would merge into it
        out += [pad + ln if ln else "" for ln in render(child, marker_hint=nested)]
    return out


def render(spec: Mapping[str, Any], *, marker_hint: str = "-") -> list[str]:
    """Markdown lines for one block spec (an item gets ``marker_hint``'s style)."""
    if not isinstance(spec, Mapping):
        raise InvalidArguments(
            "a block must be an object like {'type': 'paragraph', 'text': '...'}"
        )
    kind = spec_type(spec)
    text = _text(spec)
    props = _props(spec)
    if kind == "markdown":
        if not text.strip():
            raise InvalidArguments("markdown must not be empty")
        return text.rstrip("\n").split("\n")
    if kind == "paragraph":
        if not text.strip():
            raise InvalidArguments(
                "a paragraph needs text", hint="Use delete_block to remove a block."
            )
        return [ln.rstrip() if not ln.strip() else ln for ln in text.split("\n")]
    if kind == "heading":
        level = props.get("level", 1)
        if not isinstance(level, int) or isinstance(level, bool) or not 1 <= level <= 6:
            raise InvalidArguments("heading level must be an integer from 1 to 6")
        return [("#" * level + " " + " ".join(text.split("\n"))).rstrip()]
    if kind == "code":
        language = str(props.get("language", "") or "")
        if "\n" in language or "`" in language:
            raise InvalidArguments("code language must be one word without backticks")
        longest = max((len(m) for m in _FENCE_RUN.findall(text)), default=2)
        fence = "`" * max(3, longest + 1)
        return [fence + language, *text.split("\n"), fence]
    if kind == "math":
        return ["$$", *text.split("\n"), "$$"]
    if kind in ("quote", "callout"):
        body = text.split("\n") if text else []
        head: list[str] = []
        if kind == "callout":
            callout = str(props.get("calloutType", "note"))
            fold = str(props.get("fold", "")) if props.get("fold") in ("+", "-") else ""
            title = str(props.get("title", ""))
            head = [f"[!{callout}]{fold} {title}".rstrip()]
        elif not body:
            raise InvalidArguments("a quote needs text")
        return [("> " + ln) if ln else ">" for ln in [*head, *body]]
    if kind in ("list_item", "task_item"):
        return render_item(spec, marker_hint)
    if kind == "list":
        children = spec.get("children")
        if children:
            ordered = bool(props.get("ordered", False))
            start = int(props.get("start", 1) or 1)
            out: list[str] = []
            for n, child in enumerate(children):
                child = dict(child)
                child.setdefault("type", "list_item")
                if spec_type(child) not in ("list_item", "task_item"):
                    raise InvalidArguments("a list's children must be list items")
                delimiter = ")" if props.get("marker") == ")" else "."
                marker = f"{start + n}{delimiter}" if ordered else str(props.get("marker", "-"))
                out += render_item(child, marker)
            return out
        if not text.strip():
            raise InvalidArguments("a list needs items (children) or Markdown text")
        return text.split("\n")
    if kind == "thematic_break":
        return ["---"]
    if not text.strip():
        raise InvalidArguments(f"a {kind} block needs text")
    return text.rstrip("\n").split("\n")
