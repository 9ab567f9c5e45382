"""Handlers of the ``mnote.page.*`` tools (seed 000 and the page lifecycle)."""

from __future__ import annotations

from typing import Any

from mnoted.core import page_edits as P
from mnoted.core.page import parse_page
from mnoted.errors import InvalidArguments
from mnoted.service.artifacts import artifacts_of
from mnoted.service.calls import Call, WritePlan, handles, hidden, page_write
from mnoted.service.link_tools import plan_link_updates
from mnoted.store import Delete, Move, Write, check_new_name

SUMMARY_CHARS = 280


def _blocks_flat(page: Any) -> list[dict[str, Any]]:
    out = []
    for top in page.blocks:
        stack = [(top, None)]
        while stack:
            block, parent = stack.pop()
            entry = block.to_dict(children=False)
            if parent is not None:
                entry["parentId"] = parent
            out.append(entry)
            stack.extend((c, block.id) for c in reversed(block.children))
    return out


def body_summary(page: Any) -> str:
    for block in page.walk():
        if block.type in ("paragraph", "list_item", "task_item") and block.text.strip():
            text = " ".join(block.text.split())
            return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"
    return ""


@handles("mnote.page.get", store_only=True, cached=True)
def page_get(call: Call) -> dict[str, Any]:
    loaded = call.load()
    page = loaded.page
    result: dict[str, Any] = {
        "documentId": loaded.doc.document_id,
        "workspaceId": call.ws.workspace_id,
        "path": loaded.path,
        "title": page.title,
        "revision": loaded.revision,
        "bodySummary": body_summary(page),
    }
    if call.args.includeOptions:
        result["pageOptions"] = page.options
    if call.args.includeBody:
        result["body"] = page.source.segment(page.body_start, len(page.source))
        result["frontmatter"] = page.meta
    if call.args.includeBlocks:
        result["blocks"] = _blocks_flat(page)
    result["artifacts"] = artifacts_of(call, loaded.doc.document_id)
    if page.warnings:
        result["warnings"] = page.warnings
    return result


def _spec(item: Any) -> Any:
    return item if isinstance(item, str) else item.model_dump(exclude_none=True)


@handles("mnote.page.save", store_only=True)
def page_save(call: Call) -> WritePlan:
    loaded = call.load()
    content = [_spec(b) for b in call.args.content]
    edit = P.save(loaded.page, content, call.args.mode)
    return page_write(call, loaded, edit, mode=call.args.mode)


@handles("mnote.page.update_title", store_only=True)
def page_update_title(call: Call) -> WritePlan:
    loaded = call.load()
    edit = P.update_title(loaded.page, call.args.title)
    return page_write(call, loaded, edit, title=edit.page.title)


@handles("mnote.page.update_options", store_only=True)
def page_update_options(call: Call) -> WritePlan:
    loaded = call.load()
    options = {
        **call.args.options.model_dump(exclude_none=True),
        **(call.args.options.model_extra or {}),
    }
    edit = P.update_options(loaded.page, options)
    return page_write(call, loaded, edit, **edit.details)


def _new_path(raw: str) -> str:
    path = check_new_name(raw)
    if not path.lower().endswith(".md"):
        raise InvalidArguments(f"{raw!r} is not a Markdown path", hint="Page paths end in .md.")
    return path


@handles("mnote.page.create", store_only=True)
def page_create(call: Call) -> WritePlan:
    path = _new_path(call.args.path)
    if not call.may_see(path):
        raise hidden(path, call.actor)
    if call.ws.read_disk(path) is not None or call.ws.blob_id(path) is not None:
        raise InvalidArguments(
            f"{path} already exists", hint="Pick another path, or edit the existing page."
        )
    body = call.args.content
    title = call.args.title
    if title and parse_page(body, path).title_and_source[1] != "heading":
        body = f"# {title}\n\n{body}" if body.strip() else f"# {title}\n"
    if body and not body.endswith("\n"):
        body += "\n"
    data = body.encode("utf-8")
    page = parse_page(data, path)

    def after(ws: Any, commit: str) -> dict[str, Any]:
        doc = ws.resolve(path)
        blob = ws.blob_id(path)
        if blob is not None:
            call.service.pages.remember_ids(ws, doc, blob, page)
        return {"documentId": doc.document_id}

    return WritePlan(
        command=call.spec.command or "page.create",
        changes=[Write(path, data)],
        result={"path": path, "title": page.title, "changedBlockIds": page.block_ids()},
        after_commit=after,
    )


@handles("mnote.page.delete", store_only=True)
def page_delete(call: Call) -> WritePlan:
    loaded = call.load()
    return WritePlan(
        command=call.spec.command or "page.delete",
        changes=[Delete(loaded.path, base_blob=loaded.blob)],
        result={"documentId": loaded.doc.document_id, "path": loaded.path},
        loaded=loaded,
        document=loaded.doc,
    )


@handles("mnote.page.move", store_only=True)
def page_move(call: Call) -> WritePlan:
    loaded = call.load()
    target = _new_path(call.args.newPath)
    if not call.may_see(target):
        raise hidden(target, call.actor)
    if target == loaded.path:
        raise InvalidArguments("the page is already at that path")
    if call.ws.read_disk(target) is not None or call.ws.blob_id(target) is not None:
        raise InvalidArguments(f"{target} already exists", hint="Pick a free path.")
    links = plan_link_updates(call, loaded, target)
    return WritePlan(
        command=call.spec.command or "page.move",
        changes=[
            Move(loaded.path, target, data=links.moved_data, base_blob=loaded.blob),
            *links.writes,
        ],
        result={
            "documentId": loaded.doc.document_id,
            "path": target,
            "oldPath": loaded.path,
            "linkUpdates": links.report(),
            "unifiedDiff": links.diff,
            "warnings": links.warnings,
        },
        loaded=loaded,
        document=loaded.doc,
    )
