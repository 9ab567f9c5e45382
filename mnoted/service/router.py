"""The command router (seed 003 §5.3): an instruction in, a recommended tool call out.

No model, no second agent runtime: a handful of patterns for low-ambiguity edits in
Chinese and English ("replace 「A」 with 「B」", "把「A」改成「B」", delete, append after a
heading, rename the title, turn a block into a list or heading, move a block after
another). A call is recommended only when its target is found exactly once among the
blocks the run may change and the tool is enabled; anything else is handed to a Hermes
run with the reason. Executing the recommendation goes through the same executor, audit
and review rules as any other call.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mnoted.contract.tools import TOOLS
from mnoted.core.blocks import Block
from mnoted.core.page import Page
from mnoted.service.calls import Call, approval_required, context_of, handles

SCHEMA = "mnote.page_ai_command_route.v1"

_Q = r"[「『“\"'‘]([^」』”\"'’]+)[」』”\"'’]"  # a quoted target, CJK or Latin quotes
_TYPES = {
    "列表": "list",
    "清单": "list",
    "list": "list",
    "bullet list": "list",
    "bullets": "list",
    "标题": "heading",
    "heading": "heading",
    "title": "heading",
    "header": "heading",
    "引用": "quote",
    "quote": "quote",
    "blockquote": "quote",
    "代码": "code",
    "代码块": "code",
    "code": "code",
    "code block": "code",
    "段落": "paragraph",
    "paragraph": "paragraph",
    "text": "paragraph",
}


@dataclass(frozen=True)
class Pattern:
    intent: str
    regex: re.Pattern[str]


def _p(intent: str, *forms: str) -> list[Pattern]:
    return [Pattern(intent, re.compile(f.replace("Q", _Q), re.IGNORECASE)) for f in forms]


PATTERNS: list[Pattern] = [
    *_p(
        "replace_text",
        r"^\s*(?:请)?(?:把|将)\s*Q\s*(?:替换为|替换成|改成|改为|换成)\s*Q\s*[。.!！]?\s*$",
        r"^\s*(?:please\s+)?(?:replace|change|swap)\s+Q\s+(?:with|to|by|into)\s+Q\s*[.!]?\s*$",
    ),
    *_p(
        "delete_text",
        r"^\s*(?:请)?(?:删除|删掉|去掉|移除)\s*Q\s*[。.!！]?\s*$",
        r"^\s*(?:please\s+)?(?:delete|remove|drop)\s+Q\s*[.!]?\s*$",
    ),
    *_p(
        "append_after_heading",
        r"^\s*(?:请)?在(?:标题)?\s*Q\s*(?:后面|之后|下面|下方)(?:添加|加上|追加|插入)(?:一段|段落)?\s*[:：]?\s*Q\s*[。.!！]?\s*$",
        r"^\s*(?:please\s+)?(?:append|add|insert)\s+(?:a\s+paragraph\s+)?Q\s+(?:after|under|below)\s+(?:the\s+)?(?:heading\s+|section\s+)?Q\s*[.!]?\s*$",
    ),
    *_p(
        "rename_title",
        r"^\s*(?:请)?(?:把|将)?(?:页面)?标题(?:改为|改成|重命名为|设为)\s*Q\s*[。.!！]?\s*$",
        r"^\s*(?:please\s+)?(?:rename|retitle)\s+(?:the\s+)?(?:page|title|page\s+title)\s+(?:to|as)\s+Q\s*[.!]?\s*$",
        r"^\s*(?:please\s+)?set\s+(?:the\s+)?(?:page\s+)?title\s+to\s+Q\s*[.!]?\s*$",
    ),
    *_p(
        "set_block_type",
        r"^\s*(?:请)?(?:把|将)\s*Q\s*(?:变成|改成|转成|转换为|设为)\s*(列表|清单|标题|引用|代码块|代码|段落)\s*[。.!！]?\s*$",
        r"^\s*(?:please\s+)?(?:turn|convert|make|change)\s+Q\s+(?:into|to)?\s*(?:a|an)?\s*"
        r"(bullet list|list|bullets|heading|header|title|quote|blockquote|code block|code|paragraph"
        r"|text)\s*[.!]?\s*$",
    ),
    *_p(
        "move_block",
        r"^\s*(?:请)?(?:把|将)\s*Q\s*(?:移到|移动到|挪到)\s*Q\s*(?:后面|之后|下面)\s*[。.!！]?\s*$",
        r"^\s*(?:please\s+)?move\s+Q\s+(?:to\s+)?(?:after|below|under)\s+Q\s*[.!]?\s*$",
    ),
]


@dataclass
class Route:
    intent: str
    confidence: float
    call: dict[str, Any] | None
    risk: str
    reason: str

    def to_dict(self, requires_review: bool) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "intent": self.intent,
            "confidence": self.confidence,
            "recommendedToolCall": self.call,
            "risk": self.risk,
            "requiresHermesRun": self.call is None,
            "requiresReview": requires_review if self.call is not None else False,
            "reason": self.reason,
        }


def _hermes(intent: str, reason: str) -> Route:
    return Route(intent, 0.0, None, "unknown", reason)


def _blocks_with(page: Page, allowed: set[str], needle: str) -> list[Block]:
    return [
        b
        for b in page.walk()
        if b.id in allowed and needle in b.text and b.type not in ("list", "quote")
    ]


def _exact_block(page: Page, allowed: set[str], text: str) -> list[Block]:
    return [b for b in page.walk() if b.id in allowed and b.text.strip() == text.strip()]


def _once(page: Page, allowed: set[str], needle: str) -> tuple[Block | None, str]:
    """The one allowed block holding ``needle`` (which must occur once in the page)."""
    count = page.source.normalized.count(needle)
    if count == 0:
        return None, f"「{needle}」 is not on the page"
    if count > 1:
        return (
            None,
            f"「{needle}」 occurs {count} times on the page; which one is meant is ambiguous",
        )
    hits = _blocks_with(page, allowed, needle)
    if not hits:
        return None, f"「{needle}」 is outside the blocks this run may change"
    return hits[-1], ""


def _block_named(page: Page, allowed: set[str], name: str) -> tuple[Block | None, str]:
    exact = _exact_block(page, allowed, name)
    if len(exact) == 1:
        return exact[0], ""
    if len(exact) > 1:
        return None, f"{len(exact)} blocks read 「{name}」; which one is meant is ambiguous"
    hits = _blocks_with(page, allowed, name)
    innermost = [
        b for b in hits if not any(c.id in {h.id for h in hits} for c in b.walk() if c.id != b.id)
    ]
    if len(innermost) == 1:
        return innermost[0], ""
    if not innermost:
        return None, f"no block the run may change mentions 「{name}」"
    return None, f"{len(innermost)} blocks mention 「{name}」; which one is meant is ambiguous"


def route(instruction: str, page: Page, document_id: str, allowed: list[str]) -> Route:
    """The recommendation for ``instruction`` on ``page`` (the run may change ``allowed``)."""
    allowed_set = set(allowed)
    for pattern in PATTERNS:
        m = pattern.regex.match(instruction.strip())
        if m is None:
            continue
        handler = _HANDLERS[pattern.intent]
        return handler(page, document_id, allowed_set, allowed, m.groups())
    return _hermes(
        "complex", "not a low-ambiguity edit the router recognises; a model should plan it"
    )


def _edit_call(document_id: str, allowed: list[str], search: str, replace: str) -> dict[str, Any]:
    return {
        "toolName": "mnote.doc.markdown_edit",
        "documentId": document_id,
        "args": {
            "operations": [{"search": search, "replace": replace}],
            "allowedTargetBlockIds": allowed,
        },
    }


def _ops_call(document_id: str, allowed: list[str], ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "toolName": "mnote.doc.apply_block_ops",
        "documentId": document_id,
        "args": {"operations": ops, "allowedTargetBlockIds": allowed},
    }


def _replace(
    page: Page, doc: str, allowed: set[str], ids: list[str], groups: tuple[str, ...]
) -> Route:
    search, replacement = groups
    block, why = _once(page, allowed, search)
    if block is None:
        return _hermes("replace_text", why)
    return Route(
        "replace_text",
        0.94,
        _edit_call(doc, ids, search, replacement),
        "low",
        f"exact replacement, 「{search}」 found once in block {block.id}",
    )


def _delete(
    page: Page, doc: str, allowed: set[str], ids: list[str], groups: tuple[str, ...]
) -> Route:
    (target,) = groups
    whole = _exact_block(page, allowed, target)
    if len(whole) == 1 and page.source.normalized.count(target) == 1:
        return Route(
            "delete_block",
            0.9,
            _ops_call(doc, ids, [{"command": "delete_block", "block_id": whole[0].id}]),
            "medium",
            f"「{target}」 is the whole of block {whole[0].id}",
        )
    block, why = _once(page, allowed, target)
    if block is None:
        return _hermes("delete_text", why)
    return Route(
        "delete_text",
        0.9,
        _edit_call(doc, ids, target, ""),
        "low",
        f"「{target}」 found once in block {block.id}; removed from it",
    )


def _append(
    page: Page, doc: str, allowed: set[str], ids: list[str], groups: tuple[str, ...]
) -> Route:
    # Chinese names the heading first and English the new text first: the heading is
    # whichever of the two quoted parts is the text of a heading on the page.
    named = [g for g in groups if _headings(page, g)]
    if len(named) != 1:
        return _hermes(
            "append_after_heading",
            "no heading on the page reads like either quoted text"
            if not named
            else "both quoted texts are headings; which one is meant is ambiguous",
        )
    heading_name = named[0]
    text = groups[1] if groups[0] == heading_name else groups[0]
    heads = _headings(page, heading_name)
    if len(heads) != 1:
        return _hermes("append_after_heading", f"{len(heads)} headings read 「{heading_name}」")
    head = heads[0]
    if head.id not in allowed:
        return _hermes(
            "append_after_heading",
            f"heading 「{heading_name}」 is outside the blocks this run may change",
        )
    op = {
        "command": "insert_block_after",
        "after_block_id": head.id,
        "block": {"type": "paragraph", "text": text},
    }
    return Route(
        "append_after_heading",
        0.9,
        _ops_call(doc, ids, [op]),
        "low",
        f"a new paragraph right after heading {head.id}",
    )


def _headings(page: Page, name: str) -> list[Block]:
    return [b for b in page.walk() if b.type == "heading" and b.text.strip() == name.strip()]


def _title(
    page: Page, doc: str, allowed: set[str], ids: list[str], groups: tuple[str, ...]
) -> Route:
    (title,) = groups
    if "\n" in title or not title.strip():
        return _hermes("rename_title", "a title is one non-empty line")
    call = {
        "toolName": "mnote.page.update_title",
        "documentId": doc,
        "args": {"title": title.strip()},
    }
    return Route("rename_title", 0.95, call, "low", "the page title is set as given")


def _set_type(
    page: Page, doc: str, allowed: set[str], ids: list[str], groups: tuple[str, ...]
) -> Route:
    name, kind_word = groups
    kind = _TYPES.get(kind_word.lower().strip())
    block, why = _block_named(page, allowed, name)
    if block is None or kind is None:
        return _hermes("set_block_type", why or f"unknown block type {kind_word!r}")
    if block.type in ("list_item", "task_item", "list", "table", "callout"):
        return _hermes(
            "set_block_type", f"block {block.id} is a {block.type}; converting it needs a model"
        )
    if kind == "list":
        items = [ln.strip() for ln in block.text.split("\n") if ln.strip()]
        spec = {"type": "list", "children": [{"type": "list_item", "text": t} for t in items]}
        op = {"command": "replace_block", "block_id": block.id, "block": spec}
    else:
        props = {"level": 2} if kind == "heading" else {}
        op = {"command": "set_block_type", "block_id": block.id, "block_type": kind, "props": props}
    return Route(
        "set_block_type",
        0.88,
        _ops_call(doc, ids, [op]),
        "medium",
        f"block {block.id} becomes a {kind}",
    )


def _move(
    page: Page, doc: str, allowed: set[str], ids: list[str], groups: tuple[str, ...]
) -> Route:
    what, where = groups
    block, why = _block_named(page, allowed, what)
    if block is None:
        return _hermes("move_block", why)
    target, why = _block_named(page, set(page.block_ids()), where)
    if target is None:
        return _hermes("move_block", why)
    if target.id == block.id:
        return _hermes("move_block", "a block cannot move after itself")
    op = {"command": "move_block", "block_id": block.id, "after_block_id": target.id}
    return Route(
        "move_block",
        0.86,
        _ops_call(doc, ids, [op]),
        "medium",
        f"block {block.id} moves after block {target.id}",
    )


_HANDLERS: dict[str, Callable[[Page, str, set[str], list[str], tuple[str, ...]], Route]] = {
    "replace_text": _replace,
    "delete_text": _delete,
    "append_after_heading": _append,
    "rename_title": _title,
    "set_block_type": _set_type,
    "move_block": _move,
}


@handles("mnote.page_ai.route")
def page_ai_route(call: Call) -> dict[str, Any]:
    loaded = call.load()
    context = context_of(
        call,
        loaded,
        scope=call.args.scope,
        fmt="json",
        block_ids=call.args.blockIds,
        budget=10_000_000,
    )
    allowed = context["allowedTargetBlockIds"]
    result = route(call.args.instruction, loaded.page, loaded.doc.document_id, allowed)
    if result.call is not None:
        tool = result.call["toolName"]
        if tool in call.ws.config.disabled_tools:
            result = _hermes(result.intent, f"{tool} is disabled in this workspace's profile")
        elif not call.may_edit(loaded):
            result = _hermes(result.intent, "the page is protected (protectEditing)")
    requires_review = result.call is not None and approval_required(
        call.actor, call.ws, TOOLS[result.call["toolName"]]
    )
    out = result.to_dict(requires_review)
    out.update(
        {
            "documentId": loaded.doc.document_id,
            "revision": loaded.revision,
            "conflictDetectionKey": context["conflictDetectionKey"],
        }
    )
    return out
