"""``mnote remote add|list|remove`` (Git's own remote config) and ``mnote sync now``.

Remotes are the workspace repository's ``git remote`` entries, so ``git`` and mnoted agree
on them and the daemon picks a new one up at its next cycle. URLs are shown with any
password or token hidden.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mnoted.client.client import Client

EXIT_OK, EXIT_TOOL, EXIT_USAGE = 0, 1, 2


def add_parsers(sub: Any) -> None:
    remote = sub.add_parser("remote", help="Git remotes the workspace syncs with").add_subparsers(
        dest="remote_cmd", required=True, metavar="ACTION"
    )
    ra = remote.add_parser("add", help="add a remote (any URL git understands)")
    ra.add_argument("name", help="e.g. origin")
    ra.add_argument("url", help="e.g. git@host:notes.git, https://..., file:///path/repo.git")
    rl = remote.add_parser("list", help="the workspace's remotes")
    rr = remote.add_parser("remove", help="stop syncing with a remote (git remote remove)")
    rr.add_argument("name", help="the remote to remove")
    for p in (ra, rl, rr):
        p.add_argument(
            "--workspace", type=Path, default=Path("."), help="workspace folder (default: here)"
        )
    sync = sub.add_parser("sync", help="sync with the remotes").add_subparsers(
        dest="sync_cmd", required=True, metavar="ACTION"
    )
    now = sync.add_parser("now", help="fetch, merge and push now; print the sync status")
    now.add_argument(
        "--resume",
        action="store_true",
        help="after a rewritten remote stopped sync: merge the remote as it is now",
    )


def remote_command(args: argparse.Namespace) -> int:
    from mnoted.remote import git

    root = args.workspace.resolve()
    if not (root / ".git").exists():
        print(f"mnote: {root} is not a workspace (no .git folder)", file=sys.stderr)
        return EXIT_USAGE
    if args.remote_cmd == "list":
        listed = git.remotes(root)
        if args.json:
            print(json.dumps([{"name": n, "url": u} for n, u in listed.items()], indent=2))
        else:
            for name, url in listed.items():
                print(f"{name}\t{url}")
        return EXIT_OK
    name = git.check_name(args.name)
    if args.remote_cmd == "add":
        ran = git.run(root, "remote", "add", "--", name, args.url)
    else:
        ran = git.run(root, "remote", "remove", "--", name)
    if not ran.ok:
        print(f"mnote: {ran.err.strip()}", file=sys.stderr)
        return EXIT_TOOL
    return EXIT_OK


def sync_command(client: Client, args: argparse.Namespace, workspace: str | None) -> int:
    query = []
    if workspace:
        query.append(f"workspaceId={workspace}")
    if args.resume:
        query.append("resume=1")
    path = "/v1/sync" + ("?" + "&".join(query) if query else "")
    status, body = client.request("POST", path)
    if args.json or status != 200:
        print(json.dumps(body, indent=2))
    else:
        print("\n".join(remote_lines(body)))
    if status != 200:
        return EXIT_TOOL
    return EXIT_OK if not any(r.get("lastError") for r in body.get("remotes", [])) else EXIT_TOOL


def _ago(when: float | None, now: float) -> str:
    return "never" if not when else f"{max(0.0, now - when):.0f}s ago"


def remote_lines(status: dict[str, Any] | None) -> list[str]:
    """A workspace's remote status for people: one line per remote, then held versions."""
    import time

    if not status or not status.get("remotes"):
        return ["  remotes: none (mnote remote add NAME URL)"]
    now = time.time()
    out = []
    for r in status["remotes"]:
        ab = "" if r.get("ahead") is None else f" ahead {r['ahead']}, behind {r['behind']};"
        line = (
            f"  remote {r['name']} {r['url']}:{ab} fetched {_ago(r.get('lastFetch'), now)},"
            f" pushed {_ago(r.get('lastPush'), now)}"
        )
        out.append(line)
        if r.get("stopped"):
            out.append(f"    STOPPED: {r['stopped']}")
        elif r.get("lastError"):
            out.append(f"    last error: {r['lastError']}")
    held = status.get("held") or []
    if held:
        out.append(f"  held versions from merges: {len(held)} (mnote review list)")
        for h in held[-10:]:
            what = f"frontmatter {h['key']}" if h.get("key") else h.get("where", "body")
            out.append(f"    {h['path']} ({what}) session {h.get('sessionId') or '-'}")
    return out


def print_remote_status(workspaces: list[dict[str, Any]]) -> None:
    for ws in workspaces:
        if ws.get("remote") is not None:
            print(f"sync of {ws['workspaceId']}:")
            print("\n".join(remote_lines(ws["remote"])))
