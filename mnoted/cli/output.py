"""Human-readable output of tool responses: summaries, tables, coloured diffs."""

from __future__ import annotations

import sys
import unicodedata
from typing import Any

from mnoted.cli import find_output
from mnoted.contract.envelope import readable_json

_RED, _GREEN, _CYAN, _BOLD, _RESET = "\033[31m", "\033[32m", "\033[36m", "\033[1m", "\033[0m"


def pad(text: str, width: int) -> str:
    """``text`` padded to ``width`` terminal columns (a CJK character takes two)."""
    used = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
    return text + " " * max(0, width - used)


def colour_diff(diff: str, color: bool) -> str:
    if not color:
        return diff
    out = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            out.append(_BOLD + line + _RESET)
        elif line.startswith("+"):
            out.append(_GREEN + line + _RESET)
        elif line.startswith("-"):
            out.append(_RED + line + _RESET)
        elif line.startswith("@@"):
            out.append(_CYAN + line + _RESET)
        else:
            out.append(line)
    return "\n".join(out)


def print_response(response: dict[str, Any], color: bool = False) -> None:
    if not response.get("ok"):  # (on stderr, as a command's errors go; --json prints all)
        error = response.get("error") or {}
        print(f"error {error.get('code')}: {error.get('message')}", file=sys.stderr)
        if error.get("hint"):
            print(f"  hint: {error['hint']}", file=sys.stderr)
        if error.get("details"):
            details = readable_json(error["details"])[0]
            print(f"  details: {details}", file=sys.stderr)
        return
    result = response.get("result") or {}
    audit = response.get("audit") or {}
    tool = response.get("toolName", "")
    if tool in find_output.PRINTERS:
        find_output.PRINTERS[tool](result, color)
        return
    if result.get("schema") == "mnote.page_ai_review_session.v1":
        print_session(result, color)
        return
    if tool == "mnote.review.list":
        for item in result.get("sessions", []):
            source = (item.get("source") or {}).get("toolName", "")
            print(f"{item['sessionId']}  {item['state']:<13} {source:<26} {item.get('path') or ''}")
        return
    if "commandName" in result:
        state = "dry run" if result.get("dryRun") else audit.get("effect", "")
        state = "nothing written" if state == "none" else state
        print(f"{result['commandName']} ({state}) {result.get('path', '')}")
        if result.get("absolutePath"):  # a file grant: where to edit, and until when
            print(f"  file      {result['absolutePath']}")
            print(f"  grant     {result['grantId']} (until {result.get('expiresAt')})")
        if result.get("revision"):
            print(f"  revision  {result['revision']}")
        if audit.get("commandId"):
            print(f"  command   {audit['commandId']}")
        if result.get("changedBlockIds"):
            print(f"  changed   {', '.join(result['changedBlockIds'])}")
        for warning in result.get("warnings", []):
            print(f"  warning   {warning}")
        for block in result.get("snapshot") or []:  # (asked for: the changed blocks after)
            print(f"  snapshot  {block['id']} {block['type']}: {block['text']}")
        if result.get("unifiedDiff"):
            print(colour_diff(result["unifiedDiff"].rstrip("\n"), color))
        return
    if tool == "mnote.page.get":
        print(f"{result['title']}  ({result['path']}, {result['documentId']})")
        print(f"  revision {result['revision']}")
        for block in result.get("blocks", []):
            text = block["text"].replace("\n", " ")
            indent = "  " if block.get("parentId") else ""
            print(f"  {indent}{block['id']:<12} {block['type']:<14} {text[:70]}")
        return
    if tool == "mnote.workspace.list":
        for page in result.get("pages", []):
            print(f"{page['documentId']:<26} {pad(page['path'], 40)} {page['title']}")
        if result.get("truncated"):
            print(
                f"(stopped at {len(result.get('pages', []))} pages; more follow: "
                "mnote page list --all, or --limit N)",
                file=sys.stderr,
            )
        return
    if tool == "mnote.doc.history":
        for c in result.get("commits", []):
            who = c.get("author") or c.get("actor") or ""  # (the Git author's name)
            print(f"{c['commit'][:10]} {pad(who, 16)} {c['subject']}")
            if c.get("commandId") or c.get("traceId"):
                print(
                    f"           command={c.get('commandId') or ''} trace={c.get('traceId') or ''}"
                )
        return
    if tool == "mnote.doc.fetch" and result.get("markdown") is not None:
        print(result["markdown"])
        return
    print_json(result)


def print_json(value: object) -> None:
    """JSON for a person to read: indented, and names in any script as they are written
    (a workspace at ``~/笔记`` printed as ``\\u7b14\\u8bb0`` before)."""
    print(readable_json(value, indent=2)[0])


def print_tools(manifest: dict[str, Any]) -> None:
    tools = manifest.get("tools", [])
    width = max((len(t["name"]) for t in tools), default=10)
    for t in tools:
        enabled = (
            ""
            if t["availability"]["enabled"]
            else f"  [off: {t['availability']['unsupportedReason']}]"
        )
        kind = "read " if t["annotations"]["readonly"] else "write"
        print(f"{t['name']:<{width}}  {kind}  {t['description'][:70]}{enabled}")


def print_session(session: dict[str, Any], color: bool) -> None:
    """A review session: what it proposes, the blocks before and after, the diff."""
    state = session["state"] + (
        f" (dry run: would become {session['nextState']})" if session.get("nextState") else ""
    )
    print(f"{session['sessionId']}  {state}")
    source = session.get("source") or {}
    print(
        f"  proposed by {session.get('audit', {}).get('createdBy')} with {source.get('toolName')}"
        f" on {session.get('path') or session.get('documentId')}"
    )
    base = session.get("base") or {}
    if base.get("revision"):
        print(f"  base revision {base['revision']}")
    preview = session.get("preview") or {}
    if preview:
        flags = [f"risk {preview.get('risk', '?')}"] + (
            ["BLOCKED"] if preview.get("blocked") else []
        )
        print(f"  {', '.join(flags)}")
        for warning in preview.get("warnings", []):
            print(f"  warning: {warning}")
        for block in preview.get("changedBlocks", []):
            print(f"  [{block['op']}] {block['blockId']}")
            if "before" in block:
                print(
                    colour_diff(
                        "\n".join("-    " + ln for ln in block["before"].splitlines()), color
                    )
                )
            if "after" in block:
                print(
                    colour_diff(
                        "\n".join("+    " + ln for ln in block["after"].splitlines()), color
                    )
                )
        if preview.get("unifiedDiff"):
            print(colour_diff(preview["unifiedDiff"].rstrip("\n"), color))
    applied = session.get("applied")
    if applied:
        print(f"  applied as {applied.get('commit')} ({applied.get('commandId')})")
    if session.get("error"):
        print(f"  error: {session['error'].get('message')}")
    actions = session.get("actions") or {}
    allowed = [
        name
        for name, value in actions.items()
        if (value.get("allowed") if isinstance(value, dict) else value)
    ]
    if allowed:
        print(f"  next: mnote review {'|'.join(allowed)} {session['sessionId']}")


def print_status(health: dict[str, Any], workspaces: list[dict[str, Any]]) -> None:
    """`mnote status` for a person: the daemon, then each workspace's branch, watcher and
    what is not committed, with why."""
    up = health.get("uptimeSeconds")
    print(
        f"mnoted {health.get('version')} (pid {health.get('pid')}, up {up:.0f} s) "
        f"on {health.get('socket')}"
        if up is not None
        else f"mnoted: {health}"
    )
    for ws in workspaces:
        print(f"{ws['workspaceId']}  {ws.get('root') or ''}".rstrip())
        watcher = ws.get("watcher")
        if watcher is None:
            seen = "watcher off"
        else:
            seen = f"watcher {watcher['state']}"
            if watcher.get("watchCount") is not None:  # (none when it could not start)
                seen += f", {watcher['watchCount']:,} watches"
            if watcher.get("overflows"):
                seen += f", {watcher['overflows']} overflows (a full pass followed each)"
            if watcher.get("lastError"):
                seen += f"; last error: {watcher['lastError']}"
        refused = ws.get("refused")
        if refused is not None:
            print(f"  commits refused: {refused.get('message')}; {seen}")
            if refused.get("hint"):
                print(f"  hint: {refused['hint']}")
            continue
        if ws.get("busy"):
            print(f"  busy with a long commit; {seen} (ask again in a moment)")
            continue
        branch = (ws.get("branch") or "").removeprefix("refs/heads/")
        print(f"  branch {branch} at {(ws.get('head') or '')[:12]}; {seen}")
        search = ws.get("search")
        if search:
            print(
                f"  search index {search.get('state')}: {search.get('pagesIndexed', 0):,} of "
                f"{search.get('pagesTotal', 0):,} pages"
                + (f" ({search['error']})" if search.get("error") else "")
                + (
                    f"; tried again in {search['retryInSeconds']:g} s"
                    if search.get("retryInSeconds") is not None
                    else ""
                )
            )
        for warning in ws.get("stateWarnings") or []:
            print(f"  warning: {warning}")
        operation = ws.get("gitOperation")
        if operation:
            print(
                f"  in the middle of {operation['operation']}: reads go on, writes are "
                f"refused and edits wait to be committed until it ends; {operation['end']}"
            )
        count = ws.get("pendingChanges") or 0
        if not count:
            print("  everything on disk is committed")
            continue
        print(f"  {count} {'file' if count == 1 else 'files'} not committed:")
        listed = ws.get("uncommitted") or []
        for item in listed:
            why = item.get("reason") or "committed once the watcher sees it quiet"
            print(f"    {item['path']}: {why}")
        if count > len(listed):
            print(f"    ... and {count - len(listed)} more (`git status` lists them all)")
