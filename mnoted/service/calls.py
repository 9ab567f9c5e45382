"""One call as handlers see it, the plan a write handler returns, and the handler registry.

Handlers (one module per tool family) register here with :func:`handles` and compute only
what a call reads or plans to write; the pipeline that runs them is
:mod:`mnoted.service.executor` (admission, reads) and :mod:`mnoted.service.writes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from mnoted.contract.envelope import ToolRequest
from mnoted.contract.manifest import held_for_approval
from mnoted.contract.tools import TOOLS, ToolSpec
from mnoted.core.commands import EditResult
from mnoted.core.views import build_context
from mnoted.errors import InvalidArguments, MnoteError, NotFound, PathRejected, PermissionDenied
from mnoted.service import provenance, visibility
from mnoted.service.actors import Actor
from mnoted.service.pages import LoadedPage
from mnoted.store import Change, DocRef, Move, WorkspaceApi, Write
from mnoted.store.paths import normalize

if TYPE_CHECKING:
    from mnoted.service.executor import Service


def hidden(ref: str, actor: Actor) -> MnoteError:
    """The one answer for a page that is missing or that the caller may not see."""
    if actor.is_owner:
        return NotFound(f"no page {ref!r} in this workspace", ref=ref)
    return PermissionDenied(
        f"no page {ref!r} is available to you",
        hint="Check the documentId, or ask the owner for a grant that covers the page.",
    )


def block_diff(edit: EditResult) -> list[dict[str, Any]]:
    """Per changed block: what it was and what it becomes (the seed's ``diff`` array)."""
    out = []
    for ident in edit.changed_block_ids:
        old = edit.before.index.get(ident)
        new = edit.page.index.get(ident)
        op = "update" if old and new else ("insert" if new else "delete")
        entry: dict[str, Any] = {"op": op, "blockId": ident}
        if old is not None:
            entry["before"] = old.text
        if new is not None:
            entry["after"] = new.text
            entry["type"] = new.type
        out.append(entry)
    return out


@dataclass
class WritePlan:
    """What a write tool would do: the changes to commit and the result to report."""

    command: str
    changes: list[Change]
    result: dict[str, Any]
    loaded: LoadedPage | None = None
    edit: EditResult | None = None
    document: DocRef | None = None
    after_commit: Callable[[WorkspaceApi, str], dict[str, Any]] | None = None
    # Paths whose bytes on disk are the change (a file grant's release), committed as is.
    from_disk: list[str] = field(default_factory=list)

    @cached_property
    def diff(self) -> list[dict[str, Any]]:
        """:func:`block_diff` of the plan's edit (none without one), made once per plan:
        the answer, its preview and a review session all show this one list."""
        return block_diff(self.edit) if self.edit is not None else []

    @cached_property
    def paths(self) -> list[str]:
        """Every path the plan touches: its page, and each change's paths."""
        paths = {self.document.path} if self.document is not None else set()
        for change in self.changes:
            if isinstance(change, Move):
                paths.update((change.old, change.new))
            else:
                paths.add(change.path)
        paths.update(self.from_disk)
        return sorted(paths)


@dataclass
class Call:
    """One call as handlers see it."""

    spec: ToolSpec
    request: ToolRequest
    args: Any
    actor: Actor
    ws: WorkspaceApi
    service: Service
    now: float
    loaded: list[LoadedPage] = field(default_factory=list)  # the pages it read, in order
    kept: bytes | None = None  # a write's answer as encoded for its idempotency record
    # Each path's visibility to the caller, decided once per call.
    _seen: dict[str, bool] = field(default_factory=dict, repr=False)
    _authorized: set[str] = field(default_factory=set, repr=False)

    def load(self, ref: str | None = None) -> LoadedPage:
        """The call's document (or ``ref``), checked against the caller's grants first."""
        target = ref if ref is not None else self.document_ref
        self.authorize(target)
        try:
            loaded = self.service.pages.load(self.ws, target)
        except NotFound:
            raise hidden(target, self.actor) from None
        except PathRejected as exc:  # (said only to a caller who may see the path)
            if not self.actor.may_access(str(exc.details.get("path", target))):
                raise hidden(target, self.actor) from None
            raise
        if not self.may_see(loaded.path):
            raise hidden(target, self.actor)
        self.loaded.append(loaded)
        return loaded

    def may_see(self, path: str) -> bool:
        """Whether the caller may learn anything of ``path`` (:mod:`.visibility`)."""
        seen = self._seen.get(path)
        if seen is None:
            seen = self._seen[path] = visibility.may_see(self.actor, self.ws, path)
        return seen

    def visible_session(self, session: Mapping[str, Any]) -> bool:
        """Whether the caller sees a review session: a grant on every path it touches."""
        return all(self.may_see(p) for p in visibility.session_paths(session))

    def authorize(self, ref: str) -> None:
        """Refuse, as :func:`hidden`, a page ``ref`` outside the caller's grants.

        Decided from the request and the registry of paths alone (a documentId is looked up
        to its path), before any cache, stored answer, file or parse of the page: a hidden
        page costs what a missing one costs, and says what it says.
        """
        if self.actor.is_owner or ref in self._authorized:
            return
        path = target_path(self.ws, ref)
        if path is None or not self.may_see(path):
            raise hidden(ref, self.actor)
        self._authorized.add(ref)

    def authorize_request(self) -> None:
        """:meth:`authorize` every page the request names (its document, a new path)."""
        if self.actor.is_owner:
            return
        ref = self.request.documentId or self.request.path
        if ref is not None:
            self.authorize(ref)
        for name in ("path", "newPath"):
            value = getattr(self.args, name, None)
            if isinstance(value, str):
                self.authorize(value)

    @cached_property
    def wire_args(self) -> dict[str, Any]:
        """The arguments as JSON values, those not given left out (hashed, recorded)."""
        return dict(self.args.model_dump(mode="json", exclude_none=True))

    @cached_property
    def header(self) -> dict[str, Any]:
        """The call's seed-004 header (:func:`.provenance.header`), made once: its audit,
        its commit's trailers and a review session's request all carry this one."""
        return provenance.header(self)

    @cached_property
    def targets(self) -> list[str]:
        """The blocks the call's block commands name (:func:`.provenance.target_blocks`)."""
        return provenance.target_blocks(self)

    @cached_property
    def held(self) -> bool:
        """Whether the caller's writes with this tool wait for a person (the one rule:
        :func:`mnoted.contract.manifest.held_for_approval`)."""
        return approval_required(self.actor, self.ws, self.spec)

    def may_edit(self, loaded: LoadedPage) -> bool:
        """Whether the caller may change this page (``protectEditing`` stops agents)."""
        return self.actor.is_owner or not loaded.page.options["protectEditing"]

    @property
    def document_ref(self) -> str:
        ref = self.request.documentId or self.request.path
        if ref is None:
            raise InvalidArguments("documentId (or path) is required")
        return ref


Handler = Callable[[Call], dict[str, Any] | WritePlan]  # a dict: a review session
HANDLERS: dict[str, Handler] = {}
STORE_ONLY: set[str] = set()
"""Tools whose every effect is in the workspace store, so their calls can land in a group."""
CACHED: set[str] = set()
"""Reads whose answer may be given again while their page is unchanged (service.readcache)."""


def handles(
    name: str, *, store_only: bool = False, cached: bool = False
) -> Callable[[Handler], Handler]:
    """Register the handler of a declared tool (one handler per declaration).

    ``store_only``: the handler reads and writes nothing but the workspace store (Git, the
    sidecar), so a call can be staged with others and answered once the group is durable
    (:meth:`Service.groupable`). ``cached``: a read whose answer depends only on the
    caller, the arguments and the one page it loads as HEAD has it, so the same call can
    be answered again from :mod:`mnoted.service.readcache` while that page is unchanged.
    """
    if name not in TOOLS:
        raise KeyError(f"{name} is not a declared tool")

    def register(fn: Handler) -> Handler:
        if name in HANDLERS:
            raise KeyError(f"{name} already has a handler")
        HANDLERS[name] = fn
        if store_only:
            STORE_ONLY.add(name)
        if cached:
            if TOOLS[name].writes:
                raise KeyError(f"{name} writes: its answers cannot be kept")
            CACHED.add(name)
        return fn

    return register


def approval_required(actor: Actor, ws: WorkspaceApi, spec: ToolSpec) -> bool:
    """Whether ``actor``'s writes with ``spec`` wait for a person (the approval mode)."""
    return held_for_approval(spec, ws.config.approval_mode, owner=actor.is_owner)


def context_of(call: Call, loaded: LoadedPage, **view: Any) -> dict[str, Any]:
    """The page's context view for this caller (its ids, its revision, what it may edit)."""
    return build_context(
        loaded.page,
        document_id=loaded.doc.document_id,
        revision=loaded.revision,
        workspace_id=call.ws.workspace_id,
        editable=call.may_edit(loaded),
        blob=loaded.blob,
        **view,
    )


def target_path(ws: WorkspaceApi, ref: str) -> str | None:
    """The workspace path a page reference names (its documentId's path, or the path
    itself), from the registry alone; None if it names none."""
    try:
        return ws.resolve(ref).path
    except NotFound:
        pass
    try:
        return normalize(ref)
    except PathRejected as exc:  # (refused later, in the same words, if the grant covers it)
        return str(exc.details.get("path", ref))


def page_write(call: Call, loaded: LoadedPage, edit: EditResult, **extra: Any) -> WritePlan:
    """The plan of an edit to one existing page (a write of its new bytes)."""
    changes: list[Change] = []
    if edit.changed:
        changes.append(Write(loaded.path, edit.page.to_bytes(), base_blob=loaded.blob))
    return WritePlan(
        command=call.spec.command or call.spec.name,
        changes=changes,
        result={"documentId": loaded.doc.document_id, "path": loaded.path, **extra},
        loaded=loaded,
        edit=edit,
        document=loaded.doc,
    )
