"""Handlers of the ``mnote.doc.*``, ``mnote.block.*`` and ``mnote.workspace.*`` tools (seed 003)."""

from __future__ import annotations

import base64
import bisect
import itertools
import time
from typing import Any

from mnoted.core import commands as C
from mnoted.core.markdown_edit import markdown_edit
from mnoted.errors import InvalidArguments, TargetOutOfScope
from mnoted.service.calls import Call, WritePlan, context_of, handles, page_write
from mnoted.service.pages import LoadedPage
from mnoted.service.review_sessions import frozen_selection
from mnoted.store import message


@handles("mnote.doc.fetch", store_only=True, cached=True)
def doc_fetch(call: Call) -> dict[str, Any]:
    loaded = call.load()
    args = call.args
    context = context_of(
        call,
        loaded,
        scope=args.scope,
        fmt=args.format,
        block_ids=args.blockIds,
        query=args.query,
        budget=args.budget,
        cursor=args.cursor,
    )
    return {**context, "path": loaded.path}


@handles("mnote.block.fetch", store_only=True, cached=True)
def block_fetch(call: Call) -> dict[str, Any]:
    loaded = call.load()
    context = context_of(
        call, loaded, scope="block", fmt=call.args.format, block_ids=[call.args.blockId]
    )
    return {**context, "path": loaded.path}


def _check_scope(allowed: list[str] | None, ids: list[str | None]) -> None:
    if allowed is None:
        return
    outside = [i for i in ids if i is not None and i not in allowed]
    if outside:
        raise TargetOutOfScope(
            f"block {outside[0]!r} is outside allowedTargetBlockIds",
            blockIds=outside,
            allowedTargetBlockIds=allowed,
        )


def allowed_targets(call: Call, loaded: LoadedPage) -> list[str] | None:
    """The blocks this write may change: those the call names, within the selection its
    run froze with ``mnote.page_ai.context`` (which applies without being sent again)."""
    given = call.args.allowedTargetBlockIds
    frozen = frozen_selection(call, loaded.doc.document_id)
    if frozen is None:
        return list(given) if given is not None else None
    if given is None:
        return frozen
    return [i for i in given if i in frozen]


@handles("mnote.doc.markdown_edit", store_only=True)
def doc_markdown_edit(call: Call) -> WritePlan:
    loaded = call.load()
    edits = [op.model_dump(exclude_none=True) for op in call.args.operations]
    edit = markdown_edit(loaded.page, edits, allowed_targets(call, loaded))
    return page_write(call, loaded, edit, editsApplied=len(edits))


@handles("mnote.doc.apply_block_ops", store_only=True)
def doc_apply_block_ops(call: Call) -> WritePlan:
    loaded = call.load()
    allowed = allowed_targets(call, loaded)
    page = loaded.page
    results = []
    inserted: list[str] = []
    for n, op in enumerate(call.args.operations):
        fields = op.model_dump(exclude_none=True)
        name = fields.pop("command")
        targets = [
            fields.get("block_id"),
            fields.get("after_block_id"),
            fields.get("target_parent_id"),
        ]
        # Blocks this run inserted itself may be targeted by its later operations.
        _check_scope(None if allowed is None else [*allowed, *inserted], targets)
        block = fields.get("block")
        if isinstance(block, dict):
            fields["block"] = {k: v for k, v in block.items() if v is not None}
        try:
            result = C.apply_block_command(page, name, fields)
        except InvalidArguments as exc:
            raise InvalidArguments(
                f"operation {n} ({name}): {exc.message}", hint=exc.hint
            ) from None
        if "insertedBlockId" in result.details:
            inserted.append(result.details["insertedBlockId"])
        results.append(
            {"command": name, **result.details, "changedBlockIds": result.changed_block_ids}
        )
        page = result.page
    touched = [i for r in results for i in r["changedBlockIds"]]
    edit = C.EditResult(
        "apply_block_ops", page, loaded.page, C.changed_ids(loaded.page, page, touched)
    )
    return page_write(call, loaded, edit, operations=results, **_block_header(call, loaded, edit))


def _block_header(call: Call, loaded: LoadedPage, edit: C.EditResult) -> dict[str, Any]:
    """The block editor contract's result header (seed 004 §4): ``document_id``,
    ``applied_command``, ``changed_block_ids``, ``audit``, and with ``snapshot: true`` the
    changed blocks as they are after the change (``revision`` is the result's own)."""
    applied = "+".join(op.command for op in call.args.operations)
    changed = list(edit.changed_block_ids)
    said = call.header  # (the answer's audit and the commit's trailers say the same)
    header: dict[str, Any] = {
        "document_id": loaded.doc.document_id,
        "applied_command": applied,
        "changed_block_ids": changed,
        "audit": {
            "actor_id": call.actor.actor_id,
            "actor_type": said["actorType"],
            "document_id": loaded.doc.document_id,
            "command_name": applied,
            "target_block_id": said["targetBlockId"],
            "changed_block_ids": changed,
            "reason": said["reason"],
        },
    }
    if call.args.snapshot:
        header["snapshot"] = [
            {"id": ident, "type": block.type, "text": block.text}
            for ident in changed
            if (block := edit.page.index.get(ident)) is not None
        ]
    return header


LIST_SECONDS = 0.25
"""Work one ``workspace.list`` answer does at most (each uncached page it lists or matches
is read and parsed): the rest is the next page's, through ``nextCursor``. The workspace's
other callers wait this long behind a listing at most, whatever its size."""


@handles("mnote.workspace.list", store_only=True)
def workspace_list(call: Call) -> dict[str, Any]:
    """One page of the listing, in path order, from after ``cursor``.

    The cursor is the path of the last page this caller may read that the answer looked
    at: it never names a page hidden from the caller, and it always moves on."""
    ws = call.ws
    args = call.args
    folder = (args.folder or "").strip("/")
    needle = (args.query or "").casefold()
    after = _cursor_path(args.cursor) if args.cursor else None
    entries = ws.listing(under=f"{folder}/" if folder else "")
    start = 0 if after is None else bisect.bisect_right([e[0].path for e in entries], after)
    pages: list[dict[str, Any]] = []
    deadline = time.monotonic() + LIST_SECONDS
    last_seen: str | None = None
    more = False
    for doc, blob, revision in itertools.islice(entries, start, None):
        if not call.may_see(doc.path) or ws.filter_of(doc.path):
            continue  # (a filtered page's blob is not its text: it is not served)
        if len(pages) >= args.limit or (last_seen is not None and time.monotonic() > deadline):
            more = True
            break
        last_seen = doc.path
        page = call.service.pages.at_blob(ws, doc, blob)
        if page is None:
            continue
        if needle and needle not in doc.path.casefold() and needle not in page.title.casefold():
            continue
        pages.append(
            {
                "documentId": doc.document_id,
                "path": doc.path,
                "title": page.title,
                "revision": revision,
            }
        )
    result: dict[str, Any] = {"workspaceId": ws.workspace_id, "pages": pages, "truncated": more}
    if more and last_seen is not None:
        result["nextCursor"] = _CURSOR + base64.urlsafe_b64encode(last_seen.encode("utf-8")).decode(
            "ascii"
        )
    return result


_CURSOR = "c1."


def _cursor_path(cursor: str) -> str:
    try:
        if not cursor.startswith(_CURSOR):
            raise ValueError(cursor)
        raw = base64.b64decode(cursor[len(_CURSOR) :], altchars=b"-_", validate=True)
        path = raw.decode("utf-8")
        if not path:
            raise ValueError(cursor)
        return path
    except (ValueError, UnicodeError):
        raise InvalidArguments(
            "cursor is not one mnote.workspace.list returned",
            hint="Pass the nextCursor of the previous answer as it was, or no cursor to start.",
        ) from None


def _subject_for(call: Call, commit: str, subject: str, command_id: str | None) -> str:
    """A commit's subject as the caller may read it: as written if the caller sees every
    file the commit changed; else mnoted's verb and the files it sees (a person's own
    words may name anything, so they are not shown)."""
    if call.actor.is_owner:
        return subject
    paths = call.ws.paths_of_commit(commit)
    shown = [p for p in paths if call.may_see(p)]
    if len(shown) == len(paths):
        return subject
    verb = subject.split(":", 1)[0] if command_id and ":" in subject else "change"
    return message.subject(verb, shown)


@handles("mnote.doc.history", store_only=True)
def doc_history(call: Call) -> dict[str, Any]:
    loaded = call.load()
    entries = call.ws.history(loaded.doc.document_id, limit=call.args.limit)
    commits = []
    for e in entries:
        item: dict[str, Any] = {
            "commit": e.commit,
            "path": e.path if call.may_see(e.path) else None,
            "status": e.status,
            "commandId": e.command_id,
            "actor": e.actor,
            "subject": _subject_for(call, e.commit, e.subject, e.command_id),
            "time": e.time,
            "author": e.author,
        }
        if e.old_path:
            item["oldPath"] = e.old_path if call.may_see(e.old_path) else None
        if e.command_id:
            found = call.ws.find_command(command_id=e.command_id)
            if found:
                item["traceId"] = found[0].trace_id
                item["tool"] = found[0].trailers.get("Mnote-Tool")
                item["toolCallId"] = found[0].trailers.get("Mnote-Tool-Call-Id")
        commits.append(item)
    return {"documentId": loaded.doc.document_id, "path": loaded.path, "commits": commits}
