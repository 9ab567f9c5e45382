"""How ``mnote search`` and ``mnote links`` print their answers for a person."""

from __future__ import annotations

from typing import Any

from mnoted.core.search_text import MARK_CLOSE, MARK_OPEN

_BOLD_YELLOW = "\033[1;33m"
_DIM = "\033[2m"
_RESET = "\033[0m"


def highlighted(snippet: str, color: bool) -> str:
    """A snippet with its ``<mark>`` tags shown: in colour on a terminal, else «so»."""
    if color:
        return snippet.replace(MARK_OPEN, _BOLD_YELLOW).replace(MARK_CLOSE, _RESET)
    return snippet.replace(MARK_OPEN, "«").replace(MARK_CLOSE, "»")


def print_search(result: dict[str, Any], color: bool) -> None:
    hits = result.get("hits", [])
    for hit in hits:
        where = " > ".join(hit.get("headingPath") or [])
        name = f"{hit['path']}" + (f"  ({where})" if where else "")
        block = hit.get("blockId") or "-"
        print(f"{_DIM if color else ''}{name}  block {block}{_RESET if color else ''}")
        print(f"  {hit.get('title')}: {highlighted(hit.get('snippet', ''), color)}")
    shown = len(hits)
    total = result.get("total", shown)
    line = f"{shown} of {total} pages at {(result.get('revision') or '')[:12]}"
    if result.get("nextCursor"):
        line += f"; more with --cursor {result['nextCursor']}"
    print(line)
    for warning in result.get("warnings", []):
        print(f"warning: {warning}")


def print_links(result: dict[str, Any], color: bool) -> None:
    print(f"{result.get('path')}  ({result.get('documentId')})")
    if result.get("outgoing") is not None:
        print("links out:")
        for link in result["outgoing"]:
            target = link.get("path") or "(unresolved)"
            print(f"  {link['raw']:<40} -> {target}  line {link.get('line')}")
    if result.get("backlinks") is not None:
        print("linked from:")
        for link in result["backlinks"]:
            print(
                f"  {link['path']}  line {link.get('line')}  block {link.get('blockId')}  "
                f"{link['raw']}"
            )
        if not result.get("complete", True):
            print("  (the search index is still being built: some may be missing)")


PRINTERS = {"mnote.workspace.search": print_search, "mnote.page.links": print_links}
