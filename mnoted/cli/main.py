"""``mnote`` (also ``mnote-cli``) and ``mnoted``: the command line of mnoted.

Every tool call goes through the daemon's socket and prints what the tool answered:
a readable summary by default, exactly the response envelope with ``--json``.
Exit codes: 0 ok, 1 tool error, 2 usage, 3 daemon unreachable.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from mnoted.cli import remote_cmds
from mnoted.cli.find_commands import add_find_commands, find_call
from mnoted.cli.output import print_json, print_response, print_status, print_tools
from mnoted.client.client import Client, Unreachable
from mnoted.contract.tools import SCOPES, TOOLS, Format, PageSaveArgs, Scope
from mnoted.core.names import BLOCK_COMMANDS, BLOCK_FIELDS, block_command_signature
from mnoted.errors import MnoteError
from mnoted.locations import config_dir

if TYPE_CHECKING:
    from mnoted.store.tokens import TokenRecord

EXIT_OK, EXIT_TOOL, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

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
    _daemon_args(daemon)

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


def _daemon_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workspace", type=Path, action="append", default=[], help="workspace folder (repeatable)"
    )
    p.add_argument(
        "--config", type=Path, help="config file (default: ~/.config/mnoted/config.toml)"
    )
    p.add_argument("--socket", dest="daemon_socket", type=Path, help="socket path")
    p.add_argument("--listen", type=Path, action="append", default=[], help="a further socket path")


def _daemon(args: argparse.Namespace) -> int:
    from mnoted.server.daemon import DaemonConfig, run

    path = args.config or config_dir() / "config.toml"
    config = DaemonConfig.load(path)
    config.pinned = list(args.workspace)
    if args.daemon_socket:
        config.socket = args.daemon_socket
    config.listen = [*config.listen, *args.listen]
    return run(config)


def daemon_main() -> int:
    p = argparse.ArgumentParser(prog="mnoted", description="the mnoted daemon")
    _daemon_args(p)
    return _daemon(p.parse_args())


def _block_args(args: argparse.Namespace) -> dict[str, Any]:
    """The operation an ``mnote editor`` command stands for: its command's fields as given."""
    out: dict[str, Any] = {"command": args.editor_cmd}
    for key in BLOCK_COMMANDS[args.editor_cmd].fields:
        value = getattr(args, key)
        if key == "block" and value is not None:
            try:
                value = json.loads(value)
            except ValueError:
                value = {"type": "paragraph", "text": value}
        if value is not None:
            out[key] = value
    return out


def _text(value: str) -> str:
    return sys.stdin.read() if value == "-" else value


def tool_call(args: argparse.Namespace) -> tuple[str, str | None, dict[str, Any], bool]:
    """The (tool, document, arguments, dry run) a shortcut command stands for."""
    dry = bool(getattr(args, "dry_run", False))
    if args.cmd == "call":
        return args.tool, args.doc, args.args, dry
    if args.cmd == "editor":
        block_op: dict[str, Any] = {"operations": [_block_args(args)]}
        if args.snapshot:
            block_op["snapshot"] = True
        return "mnote.doc.apply_block_ops", args.doc, block_op, dry
    if args.cmd == "log":
        return "mnote.doc.history", args.page, {"limit": args.limit}, False
    if args.cmd == "review":
        if args.review_cmd == "list":
            listing: dict[str, Any] = {"states": args.state} if args.state else {}
            return "mnote.review.list", args.doc, listing, False
        if args.review_cmd == "show":
            return "mnote.review.get", None, {"sessionId": args.session_id}, False
        decision: dict[str, Any] = {"sessionId": args.session_id}
        if args.review_cmd == "reject" and args.reason:
            decision["reason"] = args.reason
        return f"mnote.review.{args.review_cmd}", None, decision, dry
    if args.cmd in ("search", "links"):
        return find_call(args)
    sub = args.page_cmd
    if sub == "get":
        return "mnote.page.get", args.doc, {}, False
    if sub == "save":
        return (
            "mnote.page.save",
            args.doc,
            {"content": [{"markdown": _text(args.markdown)}], "mode": args.mode},
            dry,
        )
    if sub == "title":
        return "mnote.page.update_title", args.doc, {"title": args.title}, dry
    if sub == "options":
        return "mnote.page.update_options", args.doc, {"options": dict(args.settings)}, dry
    if sub == "create":
        body: dict[str, Any] = {"path": args.path, "content": _text(args.markdown)}
        if args.title:
            body["title"] = args.title
        return "mnote.page.create", None, body, dry
    if sub == "list":
        listed: dict[str, Any] = {
            k: v for k, v in (("folder", args.folder), ("query", args.query)) if v
        }
        listed["limit"] = max(1, min(args.limit, LIST_PAGE))
        return "mnote.workspace.list", None, listed, False
    if sub == "fetch":
        fetch: dict[str, Any] = {"scope": args.scope, "format": args.format}
        if args.block_ids:
            fetch["blockIds"] = args.block_ids
        if args.query:
            fetch["query"] = args.query
        return "mnote.doc.fetch", args.doc, fetch, False
    if sub == "edit":
        ops = [{"search": s, "replace": r} for s, r in args.replace]
        return "mnote.doc.markdown_edit", args.doc, {"operations": ops}, dry
    raise SystemExit(f"mnote: unknown command {sub}")


def _init(args: argparse.Namespace) -> int:
    from mnoted.store import Workspace

    with Workspace.init(args.dir) as ws:
        print(f"workspace {ws.workspace_id} ready at {ws.root}")
        print(f"start serving it with:  mnoted --workspace {shlex.quote(str(ws.root))}")
    return EXIT_OK


def _grant(args: argparse.Namespace) -> int:
    from mnoted.store.config import CONFIG_PATH
    from mnoted.store.statedir import state_dir
    from mnoted.store.tokens import TokenStore

    root = args.workspace.expanduser().resolve()
    if not (root / CONFIG_PATH).is_file() or not (root / ".git").is_dir():
        print(
            f"mnote: {args.workspace} is not an mnoted workspace (run `mnote init` first)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    store = TokenStore(state_dir(root))
    if args.grant_cmd == "create":
        scopes = tuple(args.scope) or ("page.read",)
        now = time.time()
        expires = now + args.expires if args.expires else None
        token, record = store.create(args.actor, scopes, tuple(args.path), expires, now)
        if args.json:
            print_json({"token": token, **_token_json(record, now)})
        else:
            print(
                f"token for {record.actor_id} ({record.token_id}); "
                f"shown once, keep it secret:\n{token}"
            )
        return EXIT_OK
    if args.grant_cmd == "list":
        rows, now = store.list(), time.time()
        if args.json:
            print_json([_token_json(r, now) for r in rows])
            return EXIT_OK
        for r in rows:
            state = r.state(now)
            expiry = (
                time.strftime("%Y-%m-%d %H:%M", time.localtime(r.expires_at))
                if r.expires_at
                else "never"
            )
            print(
                f"{r.token_id}  {r.actor_id:<12} {state:<8} expires {expiry}  "
                f"scopes {','.join(r.scopes)}  paths {','.join(r.grants)}"
            )
        return EXIT_OK
    store.revoke(args.token_id)
    print(f"revoked {args.token_id}")
    return EXIT_OK


def _token_json(record: TokenRecord, now: float) -> dict[str, object]:
    """What ``grant create --json`` and ``grant list --json`` print of a token (not its hash)."""
    return {
        "tokenId": record.token_id,
        "actorId": record.actor_id,
        "scopes": list(record.scopes),
        "grants": list(record.grants),
        "expiresAt": record.expires_at,
        "createdAt": record.created_at,
        "state": record.state(now),
    }


def _install_service(args: argparse.Namespace) -> int:
    import shutil

    from mnoted.server.unit import install

    mnoted_bin = shutil.which("mnoted") or str(Path(sys.executable).with_name("mnoted"))
    done, ok = install(Path.home(), mnoted_bin, args.workspace, enable=not args.no_enable)
    for line in done:
        print(line, file=sys.stdout if ok else sys.stderr)
    return EXIT_OK if ok else EXIT_TOOL


def _workspace_here(client: Client) -> str | None:
    """The workspace the current folder is in, where the daemon serves several (one: it is
    the one called anyway), as `git` finds its repository; the innermost of nested ones."""
    status, body = client.request("GET", "/v1/workspaces")
    served = body.get("workspaces", []) if status == 200 else []
    if len(served) < 2:
        return None
    here = Path.cwd().resolve()
    inside = [
        (len(Path(ws["root"]).parts), ws["workspaceId"])
        for ws in served
        if ws.get("root") and here.is_relative_to(Path(ws["root"]))
    ]
    return max(inside)[1] if inside else None


LIST_PAGE = 1000
"""Pages asked for per call by `mnote page list` (the tool takes up to 10,000)."""


def _page_list(
    client: Client, listing: dict[str, Any], workspace: str | None, limit: int, every: bool
) -> dict[str, Any]:
    """``workspace.list`` called with each ``nextCursor`` in turn until ``limit`` pages are
    listed (all of them with ``every``); one answer holding them all, ``truncated`` if it
    stopped at the limit with more to come."""
    pages: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        want = LIST_PAGE if every else max(1, min(limit - len(pages), LIST_PAGE))
        call_args = {**listing, "limit": want, **({"cursor": cursor} if cursor else {})}
        response = client.call("mnote.workspace.list", None, call_args, False, workspace)
        if not response.get("ok"):
            return response
        result = response["result"]
        pages += result["pages"]
        cursor = result.get("nextCursor")
        if cursor is None or (not every and len(pages) >= limit):
            break
    result = {**result, "pages": pages, "truncated": cursor is not None}
    result.pop("nextCursor", None)
    if cursor is not None:
        result["nextCursor"] = cursor
    return {**response, "result": result}


def _workspace_log(client: Client, args: argparse.Namespace) -> int:
    status, body = client.request("GET", "/v1/workspaces")
    if status != 200:
        print_json(body)
        return EXIT_TOOL
    fmt = (
        "%h %an %s%n"
        "  command=%(trailers:key=Mnote-Command-Id,valueonly,separator=)"
        " trace=%(trailers:key=Mnote-Trace-Id,valueonly,separator=)"
    )
    for ws in body["workspaces"]:
        if ws["root"]:
            print(f"# {ws['workspaceId']} {ws['root']}")
            subprocess.run(
                ["git", "log", f"-{args.limit}", f"--format={fmt}"], cwd=ws["root"], check=False
            )
    return EXIT_OK


Door = Callable[[Client], int]
"""A command served by a layer above the CLI (``mnote mcp``: the MCP bridge), given the
socket's client; :mod:`mnoted.integrations.entry` passes them in."""


def main(argv: list[str] | None = None, doors: Mapping[str, Door] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.cmd == "init":
            return _init(args)
        if args.cmd == "daemon":
            return _daemon(args)
        if args.cmd == "grant":
            return _grant(args)
        if args.cmd == "install-service":
            return _install_service(args)
        if args.cmd == "remote":
            return remote_cmds.remote_command(args)
        if args.cmd == "mcp":
            door = (doors or {}).get("mcp")
            if door is None:  # (the `mnote` command is mnoted.integrations.entry)
                print("mnote mcp: run the `mnote` command for the MCP bridge", file=sys.stderr)
                return EXIT_USAGE
            token = os.environ.get("MNOTE_TOKEN")
            if not token and not args.as_owner:
                print(
                    "mnote mcp: set MNOTE_TOKEN to an agent's token (`mnote grant create`),\n"
                    "  or pass --as-owner to give the agent the owner's rights",
                    file=sys.stderr,
                )
                return EXIT_USAGE
            return door(Client(args.socket, token=token))
        client = Client(args.socket)
        if args.cmd == "status":
            _, health = client.request("GET", "/v1/health")
            status, body = client.request("GET", "/v1/workspaces")
            out = {"daemon": health, **(body if status == 200 else {"error": body.get("error")})}
            if args.json or status != 200:
                print_json(out)
            else:
                print_status(health, body["workspaces"])
                remote_cmds.print_remote_status(body["workspaces"])
            return EXIT_OK if status == 200 else EXIT_TOOL
        if args.cmd == "tools":
            _, body = client.request("GET", "/v1/tools")
            if args.json:
                print_json(body)
            else:
                print_tools(body)
            return EXIT_OK if "tools" in body else EXIT_TOOL
        if args.cmd == "sync":
            return remote_cmds.sync_command(
                client, args, args.workspace_id or _workspace_here(client)
            )
        if args.cmd == "log" and args.page is None:
            return _workspace_log(client, args)
        tool, doc, tool_args, dry = tool_call(args)
        base = getattr(args, "base", None)
        workspace = args.workspace_id or _workspace_here(client)
        header = {
            "traceId": getattr(args, "trace_id", None),
            "reason": getattr(args, "header_reason", None),
            "actorType": "cli",
        }
        if tool == "mnote.workspace.list" and args.cmd == "page":
            response = _page_list(client, tool_args, workspace, args.limit, args.all)
        else:
            response = client.call(tool, doc, tool_args, dry, workspace, base, header)
        if args.json:
            print_json(response)
        else:
            print_response(response, color=sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
        return EXIT_OK if response.get("ok") else EXIT_TOOL
    except Unreachable as exc:
        print(
            f"mnote: {exc}\n  start the daemon with `mnoted --workspace DIR` (or `make run`),\n"
            f"  or point --socket / MNOTED_SOCKET at the one that is running",
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE
    except MnoteError as exc:
        print(f"mnote: {exc.message}\n  hint: {exc.hint}", file=sys.stderr)
        return EXIT_TOOL


def entry(doors: Mapping[str, Door] | None = None) -> int:
    """Console entry point: ``main`` with a quiet exit when stdout is closed early (``| head``).
    A page's bytes that are not UTF-8 (lone surrogates in its text) are printed as they are."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="surrogateescape")
    try:
        return main(doors=doors)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(entry())
