"""File grants: the local-first path for agents that edit files with their own tools.

``mnote.file.grant`` hands an agent a private copy of a page, as committed at the granted
revision, under ``.mnote/grants/<grantId>/`` (folder 0700, file 0600): the watcher never
commits it, and a person's edits to the page itself stay theirs. ``mnote.file.release``
brings the copy back as one commit of the agent's: as is, if nobody committed the page
since the grant; merged on top-level blocks with what was committed meanwhile
(:mod:`mnoted.core.merge`) where the two changed different blocks; else
``mnote_tool_conflict``, nothing written, the grant and its copy kept. A release that
lands closes the grant and removes its copy.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Any

from mnoted.core.diffs import EditResult, changed_ids
from mnoted.core.merge import merge_page
from mnoted.core.page import parse_page
from mnoted.errors import Conflict, NotFound, PathRejected, PermissionDenied
from mnoted.service.actors import utc_iso
from mnoted.service.calls import Call, WritePlan, approval_required, handles, hidden
from mnoted.store import Change, CommandMeta, WorkspaceApi, Write

COPIES = (".mnote", "grants")
"""Where grants' private copies live: not watched, not committed, ignored by Git."""


def _refuse_unreviewed(call: Call) -> None:
    """A grant made before private copies released the page in place (the bytes on disk),
    which cannot be held as a proposal: refused where the caller's writes wait for a
    person. (A private copy's release becomes a review session there, as any write.)"""
    if approval_required(call.actor, call.ws, call.spec):
        raise PermissionDenied(
            f"{call.spec.name} is not available while your writes wait for approval "
            f"(approvalMode {call.ws.config.approval_mode!r})",
            hint="Propose the change with mnote.doc.plan_update or a write tool: it becomes "
            "a review session the owner accepts.",
        )


@handles("mnote.file.grant")
def file_grant(call: Call) -> WritePlan:
    """Every check comes before the grant is kept: a refused grant leaves nothing behind."""
    loaded = call.load()
    if not call.may_edit(loaded):
        raise PermissionDenied(
            f"{loaded.path} is protected (protectEditing); only the owner may change it",
            hint="Ask the owner to turn protectEditing off, or propose the change for review.",
        )
    base = call.request.baseRevision
    if base is not None and base != loaded.revision:
        raise Conflict(
            f"{loaded.path} changed since revision {base[:12]}; it is now at "
            f"{loaded.revision[:12]}, and a grant hands over the whole file",
            hint="Fetch the page again and ask for the grant on its current revision.",
            currentRevision=loaded.revision,
            baseRevision=base,
        )
    grant_id = "grant_" + secrets.token_hex(8)
    expires = call.now + call.args.ttlSeconds
    copy = _copy_path(call.ws, grant_id, loaded.path)
    record = {
        "grantId": grant_id,
        "documentId": loaded.doc.document_id,
        "path": loaded.path,
        "copy": str(copy),
        "revision": loaded.revision,
        "blob": loaded.blob,
        "originBlob": loaded.blob,
        "actorId": call.actor.actor_id,
        "traceId": call.request.traceId,
        "sessionId": call.request.sessionId,
        "runId": call.request.runId,
        "expiresAt": expires,
    }
    if not call.request.dryRun:
        _sweep(call.ws, call.now)
        _write_copy(copy, call.ws.read_blob(loaded.blob) or b"")
        call.ws.grants.put(grant_id, json.dumps(record))
    plan = WritePlan(
        command=call.spec.command or "file.grant",
        changes=[],
        result={
            "grantId": grant_id,
            "documentId": loaded.doc.document_id,
            "path": loaded.path,
            "absolutePath": str(copy),
            "revision": loaded.revision,
            "expiresAt": utc_iso(expires),
        },
        loaded=loaded,
        document=loaded.doc,
    )
    return plan


def _copies_dir(ws: WorkspaceApi) -> Path:
    return ws.root.joinpath(*COPIES)


def _copy_path(ws: WorkspaceApi, grant_id: str, path: str) -> Path:
    """A grant's private copy: the page's own file name, in the grant's folder."""
    return _copies_dir(ws) / grant_id / path.rsplit("/", 1)[-1]


def _safe_folder(folder: Path, mode: int) -> None:
    """``folder`` made (``mode``) or found as a real folder, never through a symlink."""
    try:
        os.mkdir(folder, mode)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            raise PathRejected(f"{folder} is not a folder", path=str(folder)) from None


def _write_copy(copy: Path, data: bytes) -> None:
    """Write a grant's copy (0600) in its own folder (0700), with a ``.gitignore`` that
    keeps every copy out of ``git status``."""
    base = copy.parent.parent
    _safe_folder(base.parent, 0o755)
    _safe_folder(base, 0o700)
    ignore = base / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# mnoted: private copies of file grants\n*\n")
    _safe_folder(copy.parent, 0o700)
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _read_copy(grant: dict[str, Any]) -> bytes | None:
    try:
        fd = os.open(grant["copy"], os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _remove_copy(ws: WorkspaceApi, grant_id: str) -> None:
    folder = _copies_dir(ws) / grant_id
    if folder.is_dir() and not folder.is_symlink():
        shutil.rmtree(folder, ignore_errors=True)


def _sweep(ws: WorkspaceApi, now: float) -> None:
    """Close the grants that expired: their records and their copies."""
    folder = _copies_dir(ws)
    try:
        names = [n for n in os.listdir(folder) if n.startswith("grant_")]
    except OSError:
        return
    for name in names:
        grant = read_grant(ws, name)
        if grant is None or grant["expiresAt"] <= now:
            ws.grants.delete(name)
            _remove_copy(ws, name)


def grant_meta(grant: dict[str, Any]) -> CommandMeta:
    """Commit metadata for edits made under ``grant``: its holder, its trace ids."""
    return CommandMeta(
        "file.edit",
        actor=grant["actorId"],
        trace_id=grant.get("traceId"),
        run_id=grant.get("runId"),
        session_id=grant.get("sessionId"),
    )


def read_grant(ws: WorkspaceApi, grant_id: str | None) -> dict[str, Any] | None:
    """A grant as it was recorded (expired or not), or None."""
    raw = ws.grants.get(grant_id) if grant_id else None
    return dict(json.loads(raw)) if raw else None


def active_grant(call: Call, grant_id: str) -> dict[str, Any]:
    grant = read_grant(call.ws, grant_id)
    if grant is None or (grant["actorId"] != call.actor.actor_id and not call.actor.is_owner):
        raise NotFound(
            f"no open grant {grant_id!r}", hint="Ask for a new grant with mnote.file.grant."
        )
    if grant["expiresAt"] <= call.now:
        raise PermissionDenied(f"grant {grant_id} has expired", hint="Ask for a new grant.")
    return grant


@handles("mnote.file.release")
def file_release(call: Call) -> WritePlan:
    grant = active_grant(call, call.args.grantId)
    if "copy" not in grant:
        return _release_in_place(call, grant)
    loaded = call.load(grant["documentId"])  # (the person's pending edit committed first)
    ws, doc = call.ws, loaded.doc
    theirs_data = _read_copy(grant)
    origin_data = ws.read_blob(grant["originBlob"])
    if theirs_data is None or origin_data is None:
        raise NotFound(
            f"the private copy of grant {grant['grantId']} is gone",
            hint="Ask for a new grant with mnote.file.grant.",
        )
    current = loaded.page
    if loaded.blob == grant["originBlob"]:
        data: bytes | None = theirs_data
    else:
        current_data = ws.read_blob(loaded.blob)
        merged = merge_page(origin_data, current_data, theirs_data) if current_data else None
        data = merged.data if merged is not None and merged.clean else None
    if data is None:
        raise Conflict(
            f"{doc.path} was changed since the grant in the blocks your copy changes; "
            "nothing was written",
            hint="Read the page again (mnote.page.get), redo the edit on it, or ask for a "
            "new grant; your copy is kept until the grant expires.",
            grantedRevision=grant["revision"],
            currentRevision=loaded.revision,
        )
    after = parse_page(data, doc.path, previous=current)
    edit = EditResult("file.release", after, current, changed_ids(current, after))
    changes: list[Change] = []
    if data != ws.read_head(doc.path):
        changes.append(Write(doc.path, data, base_blob=loaded.blob))
    grant_id = call.args.grantId

    def close(ws: WorkspaceApi, commit: str) -> dict[str, Any]:
        ws.grants.delete(grant_id)
        _remove_copy(ws, grant_id)
        return {}

    if not changes and not call.request.dryRun:
        close(ws, loaded.revision)
    merged = loaded.blob != grant["originBlob"]
    return WritePlan(
        command=call.spec.command or "file.release",
        changes=changes,
        result={
            "documentId": doc.document_id,
            "path": doc.path,
            "grantId": grant_id,
            "grantedRevision": grant["revision"],
            "merged": merged and bool(changes),
            "revision": loaded.revision,
        },
        loaded=loaded,
        edit=edit,
        document=doc,
        after_commit=close,
    )


def _release_in_place(call: Call, grant: dict[str, Any]) -> WritePlan:
    """The release of a grant made before private copies (it handed out the page itself)."""
    _refuse_unreviewed(call)
    ws = call.ws
    doc = ws.resolve(grant["documentId"])
    if not call.may_see(doc.path):
        raise hidden(grant["documentId"], call.actor)
    head_blob = ws.blob_id(doc.path)
    if head_blob != grant["blob"]:
        raise Conflict(
            f"{doc.path} was committed by someone else after the grant; "
            "your edit was not committed",
            hint="Read the page again (mnote.page.get), merge your change into the file, "
            "and ask for a new grant to release it.",
            grantedRevision=grant["revision"],
            currentRevision=ws.revision_of(doc.path),
        )
    data = ws.read_disk(doc.path)
    head_data = ws.read_head(doc.path)
    origin_data = ws.read_blob(grant["originBlob"])
    if data is None or head_data is None or head_blob is None or origin_data is None:
        raise NotFound(f"{doc.path} is gone", hint="The file was deleted during the grant.")
    before = call.service.pages.page_for(ws, doc, grant["originBlob"], origin_data)
    current = call.service.pages.page_for(ws, doc, head_blob, head_data)
    after = parse_page(data, doc.path, previous=current)
    edit = EditResult("file.release", after, before, changed_ids(before, after))
    if not call.request.dryRun:
        ws.grants.delete(call.args.grantId)
        if ws.grants.by_path(doc.path) == call.args.grantId:
            ws.grants.drop_path(doc.path)
    result = {
        "documentId": doc.document_id,
        "path": doc.path,
        "grantId": call.args.grantId,
        "grantedRevision": grant["revision"],
        "revision": ws.revision_of(doc.path),
    }
    if data == head_data and head_blob != grant["originBlob"]:
        # The watcher committed the holder's edits for the grant already: the release
        # answers the command that holds them (seed 000 §5: commandId traces the write).
        latest = ws.history(doc.path, limit=1)
        if latest and latest[0].command_id:
            result["commandId"] = latest[0].command_id
    return WritePlan(
        command=call.spec.command or "file.release",
        changes=[],
        from_disk=[doc.path] if data != head_data else [],
        result=result,
        edit=edit,
        document=doc,
    )
