"""``mnote search`` and ``mnote links``: shortcuts of the finding tools."""

from __future__ import annotations

import argparse
import json
from typing import Any


def _field(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError("use key=value (the value read as JSON if it is)")
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        parsed = value
    return key, parsed


def add_find_commands(sub: Any) -> None:
    """Add ``search`` and ``links`` to the command parser ``sub``."""
    s = sub.add_parser("search", help="full-text search (calls mnote.workspace.search)")
    s.add_argument("query", help='words, "a phrase", prefix*; 周刊 finds any 2+ character run')
    s.add_argument("--path", action="append", default=[], help="only pages matching this glob")
    s.add_argument("--tag", action="append", default=[], help="only pages with this tag")
    s.add_argument(
        "--field", action="append", default=[], type=_field, help="frontmatter key=value"
    )
    s.add_argument("--limit", type=int, default=20, help="at most this many hits (default 20)")
    s.add_argument("--cursor", help="nextCursor of a previous search, for the next hits")
    lk = sub.add_parser("links", help="a page's links and backlinks (calls mnote.page.links)")
    lk.add_argument("doc", help="documentId or workspace-relative path")
    lk.add_argument(
        "--direction",
        choices=["both", "outgoing", "backlinks"],
        default="both",
        help="links out of the page, links to it, or both (default: both)",
    )


def find_call(args: argparse.Namespace) -> tuple[str, str | None, dict[str, Any], bool]:
    """The (tool, document, arguments, dry run) of ``mnote search`` or ``mnote links``."""
    if args.cmd == "links":
        return "mnote.page.links", args.doc, {"direction": args.direction}, False
    body: dict[str, Any] = {"query": args.query, "limit": args.limit}
    if args.path:
        body["paths"] = args.path
    if args.tag:
        body["tags"] = args.tag
    if args.field:
        body["frontmatter"] = dict(args.field)
    if args.cursor:
        body["cursor"] = args.cursor
    return "mnote.workspace.search", None, body, False
