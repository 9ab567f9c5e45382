"""The argument parser of ``mnote``: every command, its flags and their help.

Shortcut commands take their help from the tools they call (``contract/tools.py``), and
editor commands their fields from the block commands' names (``core/names.py``), so the
help says what the declarations say. Parsing only: what a command does is in
:mod:`mnoted.cli.main`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, get_args

from mnoted.cli import remote_cmds
from mnoted.cli.find_commands import add_find_commands
from mnoted.contract.tools import SCOPES, TOOLS, Format, PageSaveArgs, Scope
from mnoted.core.names import BLOCK_COMMANDS, BLOCK_FIELDS, block_command_signature

_DOC = "the page: its workspace-relative path or its documentId"
_DRY_RUN = "show what would change, write nothing"
_BLOCK_OPTION_HELP = {
    "block": 'the new block as JSON ({"type": "heading", "text": "Plan", "props": {"level": 2}}), '
    "or plain text for a paragraph",
    "props": BLOCK_FIELDS["props"] + " (JSON; '-' reads stdin)",
}


def _calls(tool: str) -> str:
    """A shortcut's help: what its tool's declaration says, and the tool's name."""
    return f"{TOOLS[tool].description} ({tool})"


def _json_arg(text: str) -> Any:
    if text == "-":
        text = sys.stdin.read()
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None


def _setting(text: str) -> tuple[str, bool]:
    key, sep, value = text.partition("=")
    if not key or not sep or value.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r}: use key=true or key=false")
    return key, value.lower() == "true"


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError("use seconds or 30m, 12h, 7d") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mnote", description="mnoted's command line")
    p.add_argument(
        "--socket",
        type=Path,
        help="daemon socket (default: $MNOTED_SOCKET, $XDG_RUNTIME_DIR/mnoted/mnoted.sock, or "
        "the path the daemon recorded in ~/.config/mnoted/socket-path)",
    )
    p.add_argument("--json", action="store_true", help="print the response envelope exactly")
    p.add_argument(
        "--workspace-id",
        help="workspace to call when the daemon serves several (default: the one the current "
        "folder is in)",
    )
    _header_flags(p, argparse.SUPPRESS)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    init = sub.add_parser(
        "init", help="make a folder an mnoted workspace (adopts an existing repo)"
    )
    init.add_argument("dir", type=Path, help="the folder (created if missing)")

    daemon = sub.add_parser("daemon", help="run the daemon in the foreground (same as mnoted)")
    daemon_args(daemon)

    sub.add_parser("status", help="daemon, workspaces, watcher health, pending changes")
    sub.add_parser("tools", help="the tool manifest")
    mcp = sub.add_parser(
        "mcp",
        help="serve the tools of the agent's token ($MNOTE_TOKEN) as a stdio MCP server",
    )
    mcp.add_argument(
        "--as-owner",
        action="store_true",
        help="without MNOTE_TOKEN, act as the owner (every tool, review.accept included)",
    )
    svc = sub.add_parser("install-service", help="install the systemd user unit")
    svc.add_argument(
        "--workspace", type=Path, action="append", default=[], help="workspace folder (repeatable)"
    )
    svc.add_argument("--no-enable", action="store_true", help="write the unit, do not start it")

    call = sub.add_parser("call", help="call any tool")
    call.add_argument("tool", help="e.g. mnote.page.get")
    call.add_argument("--doc", help="documentId or path")
    call.add_argument(
        "--args", type=_json_arg, default={}, help="arguments as JSON ('-' reads stdin)"
    )
    _write_flags(call)

    page = sub.add_parser("page", help="page shortcuts").add_subparsers(
        dest="page_cmd", required=True, metavar="COMMAND"
    )
    g = page.add_parser("get", help=_calls("mnote.page.get"))
    g.add_argument("doc", help=_DOC)
    s = page.add_parser("save", help=_calls("mnote.page.save"))
    s.add_argument("doc", help=_DOC)
    s.add_argument("--markdown", required=True, help="Markdown to write ('-' reads stdin)")
    s.add_argument(
        "--mode",
        choices=["replace", "append"],
        default=PageSaveArgs.model_fields["mode"].default,
        help="replace the body, or append to it (default: %(default)s, as the tool's)",
    )
    _write_flags(s)
    t = page.add_parser("title", help=_calls("mnote.page.update_title"))
    t.add_argument("doc", help=_DOC)
    t.add_argument("title", help="the new title")
    _write_flags(t)
    o = page.add_parser("options", help=_calls("mnote.page.update_options"))
    o.add_argument("doc", help=_DOC)
    o.add_argument("settings", nargs="+", type=_setting, help="wideLayout=true showToc=false ...")
    _write_flags(o)
    c = page.add_parser("create", help=_calls("mnote.page.create"))
    c.add_argument("path", help="workspace-relative path of the new page, e.g. notes/plan.md")
    c.add_argument("--markdown", default="", help="its Markdown ('-' reads stdin)")
    c.add_argument("--title", help="its title (kept in the frontmatter)")
    c.add_argument("--dry-run", action="store_true", help=_DRY_RUN)
    ls = page.add_parser("list", help=_calls("mnote.workspace.list"))
    ls.add_argument("--folder", help="only pages under this folder")
    ls.add_argument("--query", help="only pages whose path or title contains this")
    ls.add_argument(
        "--limit", type=int, default=200, help="list at most this many pages (default: 200)"
    )
    ls.add_argument("--all", action="store_true", help="every page, however many (paged)")
    f = page.add_parser("fetch", help=_calls("mnote.doc.fetch"))
    f.add_argument("doc", help=_DOC)
    f.add_argument(
        "--scope",
        choices=get_args(Scope),
        default="full",
        help="how much of the page (default: full)",
    )
    f.add_argument(
        "--format", choices=get_args(Format), default="markdown", help="(default: markdown)"
    )
    f.add_argument("--block-ids", nargs="*", help="the blocks of scope block or selection")
    f.add_argument("--query", help="the words of scope keyword")
    e = page.add_parser("edit", help=_calls("mnote.doc.markdown_edit"))
    e.add_argument("doc", help=_DOC)
    e.add_argument(
        "--replace",
        nargs=2,
        action="append",
        metavar=("SEARCH", "REPLACE"),
        required=True,
        help="text to find (exactly once in the page) and its replacement",
    )
    _write_flags(e)

    add_find_commands(sub)

    editor = sub.add_parser("editor", help="block commands (seed 004 field names)")
    esub = editor.add_subparsers(dest="editor_cmd", required=True, metavar="COMMAND")
    for name, spec in BLOCK_COMMANDS.items():
        cmd = esub.add_parser(
            name,
            help=spec.summary,
            description=f"{spec.summary[0].upper()}{spec.summary[1:]}: "
            f"mnote.doc.apply_block_ops with {block_command_signature(name)}.",
        )
        cmd.add_argument("doc", help=_DOC)
        for field in spec.fields:
            cmd.add_argument(
                f"--{field.replace('_', '-')}",
                required=field in spec.required,
                type=_json_arg if field == "props" else str,
                help=_BLOCK_OPTION_HELP.get(field, BLOCK_FIELDS[field]),
            )
        cmd.add_argument(
            "--snapshot",
            action="store_true",
            help="also print the changed blocks as they are after the change",
        )
        _write_flags(cmd)

    review = sub.add_parser("review", help="review sessions").add_subparsers(
        dest="review_cmd", required=True, metavar="COMMAND"
    )
    rl = review.add_parser("list", help=_calls("mnote.review.list"))
    rl.add_argument("--doc", help="only the sessions of this page (default: the workspace's)")
    rl.add_argument(
        "--state", action="append", default=[], help="only sessions in this state (repeatable)"
    )
    for name, tool in (
        ("show", "mnote.review.get"),
        *((name, f"mnote.review.{name}") for name in ("accept", "reject", "retry", "abort")),
    ):
        r = review.add_parser(name, help=_calls(tool))
        r.add_argument("session_id", help="as `mnote review list` shows it")
        if name != "show":
            r.add_argument("--dry-run", action="store_true", help=_DRY_RUN)
        if name == "reject":
            r.add_argument("--reason", help="why, kept with the session")

    log = sub.add_parser(
        "log", help="a page's commits with their command and trace ids, or every workspace's"
    )
    log.add_argument("page", nargs="?", help=_DOC + " (default: git log of each workspace)")
    log.add_argument("--limit", type=int, default=20, help="at most this many commits")

    grant = sub.add_parser("grant", help="agent tokens").add_subparsers(
        dest="grant_cmd", required=True, metavar="COMMAND"
    )
    gc = grant.add_parser("create", help="make a token for an agent; prints it once")
    gc.add_argument("--workspace", type=Path, required=True, help="workspace folder")
    gc.add_argument("--actor", required=True, help="the agent's actor id, e.g. hermes")
    gc.add_argument(
        "--scope",
        action="append",
        default=[],
        choices=SCOPES,
        help="what it may do (repeatable; default: page.read)",
    )
    gc.add_argument(
        "--path", action="append", default=[], help="path glob, e.g. 'notes/**' (default: all)"
    )
    gc.add_argument("--expires", type=_duration, help="lifetime, e.g. 12h or 7d (default: none)")
    gl = grant.add_parser("list", help="the workspace's agent tokens (not their secrets)")
    gl.add_argument("--workspace", type=Path, required=True, help="workspace folder")
    gr = grant.add_parser("revoke", help="revoke a token at once")
    gr.add_argument("--workspace", type=Path, required=True, help="workspace folder")
    gr.add_argument("token_id", help="as `mnote grant list` shows it")
    remote_cmds.add_parsers(sub)
    _json_anywhere(p)
    return p


def _header_flags(p: argparse.ArgumentParser, help_default: Any = None) -> None:
    """Seed 004's header: ``--reason`` and ``--trace-id``, kept in the audit and the
    commit's trailers (before the command or after it: the later one wins)."""
    p.add_argument(
        "--reason",
        dest="header_reason",
        default=help_default,
        help="why this change is made (kept in the commit's Mnote-Reason trailer)",
    )
    p.add_argument(
        "--trace-id",
        dest="trace_id",
        default=help_default,
        help="the trace this call belongs to (default: one made up)",
    )


def _write_flags(p: argparse.ArgumentParser) -> None:
    _header_flags(p, argparse.SUPPRESS)
    p.add_argument("--dry-run", action="store_true", help=_DRY_RUN)
    p.add_argument(
        "--base",
        metavar="REVISION",
        help="the page's revision this write is based on: refused with mnote_tool_conflict "
        "if a block it touches changed since (other changes are carried over)",
    )


def _json_anywhere(p: argparse.ArgumentParser) -> None:
    """Take ``--json`` after the command too (``mnote log x.md --json``), not only before."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.add_argument(
                    "--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
                )
                _json_anywhere(child)


def daemon_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workspace", type=Path, action="append", default=[], help="workspace folder (repeatable)"
    )
    p.add_argument(
        "--config", type=Path, help="config file (default: ~/.config/mnoted/config.toml)"
    )
    p.add_argument("--socket", dest="daemon_socket", type=Path, help="socket path")
    p.add_argument("--listen", type=Path, action="append", default=[], help="a further socket path")
