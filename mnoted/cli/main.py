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
from typing import TYPE_CHECKING, Any

from mnoted.cli import remote_cmds
from mnoted.cli.find_commands import find_call
from mnoted.cli.output import print_json, print_response, print_status, print_tools
from mnoted.cli.parser import daemon_args, parser
from mnoted.client.client import Client, Unreachable
from mnoted.core.names import BLOCK_COMMANDS
from mnoted.errors import MnoteError
from mnoted.locations import config_dir

if TYPE_CHECKING:
    from mnoted.store.tokens import TokenRecord

EXIT_OK, EXIT_TOOL, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


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
    daemon_args(p)
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
    status, body = client.request("GET", "/v1/workspaces?brief=true")
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
    status, body = client.request("GET", "/v1/workspaces?brief=true")
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
