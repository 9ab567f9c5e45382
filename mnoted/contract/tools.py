"""Every ``mnote.*`` tool, declared once: name, arguments, result, scopes, annotations.

The executor's checks (which envelope fields are required, which scope a call
needs, whether it writes), the manifest, the CLI, the MCP bridge, the Hermes
plugin and ``docs/tools.md`` are all derived from :data:`TOOLS`. There is no
second list anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from mnoted.core.names import BLOCK_COMMANDS, BLOCK_FIELDS, block_command_signature

# -- shared argument pieces -----------------------------------------------------
#
# Every model is strict: a boolean must be a JSON boolean, a number a JSON number, a string
# a JSON string ("showToc": "yes" is refused naming the field, never read as true).


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)


class BlockSpec(BaseModel):
    """A block to write: ``{type, text, props?, children?}`` or ``{markdown}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: str | None = Field(
        default=None,
        description="paragraph, heading, code, quote, callout, list, list_item, task_item, "
        "table, thematic_break, html, math",
    )
    text: str | None = Field(
        default=None, max_length=1_000_000, description="the block's text (inline Markdown)"
    )
    markdown: str | None = Field(
        default=None, max_length=1_000_000, description="raw Markdown, written as given"
    )
    props: dict[str, Any] | None = Field(
        default=None, description='the type\'s properties, e.g. {"level": 2} for a heading'
    )
    children: list[BlockSpec] | None = Field(
        default=None, description="blocks nested in this one (list items, a quote's blocks)"
    )
    id: str | None = Field(default=None, description="keep this existing block's id (page.save)")


class PageOptionsPatch(BaseModel):
    """Options to set; any other key is refused as unsupported, never ignored."""

    model_config = ConfigDict(
        extra="allow", strict=True, json_schema_extra={"additionalProperties": False}
    )

    wideLayout: bool | None = Field(default=None, description="show the page full width")
    smallText: bool | None = Field(default=None, description="show the page in smaller type")
    showToc: bool | None = Field(default=None, description="show a table of contents")
    protectEditing: bool | None = Field(
        default=None, description="true: only the owner may change the page"
    )


class EditPair(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    op: Literal["replace"] | None = Field(default=None, description='always "replace" (optional)')
    search: str = Field(
        min_length=1,
        max_length=1_000_000,
        description="text to find; it must occur exactly once in the page's Markdown",
    )
    replace: str = Field(max_length=1_000_000, description="the text that takes its place")


class BlockOp(BaseModel):
    """One block command, with the block editor contract's field names."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @field_validator("command")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in BLOCK_COMMANDS:
            raise ValueError(f"unknown block command {value!r}; one of {', '.join(BLOCK_COMMANDS)}")
        return value

    command: str = Field(
        description="; ".join(
            f"{block_command_signature(name)}: {spec.summary}"
            for name, spec in BLOCK_COMMANDS.items()
        ),
        json_schema_extra={"enum": list(BLOCK_COMMANDS)},
    )
    block_id: str | None = Field(default=None, description=BLOCK_FIELDS["block_id"])
    after_block_id: str | None = Field(default=None, description=BLOCK_FIELDS["after_block_id"])
    target_parent_id: str | None = Field(default=None, description=BLOCK_FIELDS["target_parent_id"])
    block: BlockSpec | str | None = Field(default=None, description=BLOCK_FIELDS["block"])
    block_type: str | None = Field(default=None, description=BLOCK_FIELDS["block_type"])
    props: dict[str, Any] | None = Field(default=None, description=BLOCK_FIELDS["props"])


_ALLOWED = (
    "ids of the only blocks this edit may change (from mnote.doc.fetch); "
    "a change to any other block is refused"
)
_REVIEW_ID = (
    "the review session's id: reviewSessionId in the answer of the call that proposed "
    "the edit, or sessionId in mnote.review.list"
)

# -- argument models, one per tool ----------------------------------------------


class PageGetArgs(_Args):
    includeBody: bool = Field(default=True, description="include a short summary of the body")
    includeOptions: bool = Field(default=True, description="include the page options")
    includeBlocks: bool = Field(default=True, description="include the blocks with their ids")


class PageSaveArgs(_Args):
    content: list[BlockSpec | str] = Field(
        max_length=10_000,
        description="the blocks to write, each {type, text} or {markdown}, or a Markdown string",
    )
    mode: Literal["replace", "append"] = Field(
        default="replace",
        description="replace: the body becomes content; append: content goes after the body",
    )


class PageUpdateTitleArgs(_Args):
    title: str = Field(min_length=1, max_length=500, description="the new title")


class PageUpdateOptionsArgs(_Args):
    options: PageOptionsPatch = Field(
        description="the options to set (true or false); the others stay as they are"
    )


class CreateSummaryArgs(_Args):
    summary: str = Field(min_length=1, max_length=200_000, description="the summary, in Markdown")


class CreateAiNoteArgs(_Args):
    content: str = Field(min_length=1, max_length=1_000_000, description="the note, in Markdown")
    title: str | None = Field(default=None, max_length=500, description="the note's title")


Scope = Literal["full", "outline", "block", "selection", "keyword"]
Format = Literal["markdown", "text", "page_xml", "json"]


class DocFetchArgs(_Args):
    scope: Scope = Field(
        default="full",
        description="full: the whole page; outline: the headings; block or selection: the "
        "blocks named in blockIds; keyword: the blocks that contain query",
    )
    format: Format = Field(default="markdown", description="how the blocks are written out")
    blockIds: list[str] | None = Field(
        default=None, max_length=1000, description="the blocks of scope block or selection"
    )
    query: str | None = Field(
        default=None, max_length=1000, description="the words to look for (scope keyword)"
    )
    budget: int | None = Field(
        default=None,
        ge=1,
        le=2_000_000,
        description="most characters to return; the rest comes with the next cursor",
    )
    cursor: str | None = Field(
        default=None, max_length=64, description="where to continue a truncated answer"
    )


class BlockFetchArgs(_Args):
    blockId: str = Field(min_length=1, max_length=256, description="the block's id")
    format: Format = Field(default="markdown", description="how the block is written out")


class MarkdownEditArgs(_Args):
    operations: list[EditPair] = Field(
        min_length=1, max_length=500, description="search/replace pairs, applied in order"
    )
    allowedTargetBlockIds: list[str] | None = Field(
        default=None, max_length=10_000, description=_ALLOWED
    )


class ApplyBlockOpsArgs(_Args):
    operations: list[BlockOp] = Field(
        min_length=1, max_length=500, description="block commands, applied in order"
    )
    allowedTargetBlockIds: list[str] | None = Field(
        default=None, max_length=10_000, description=_ALLOWED
    )
    snapshot: bool = Field(
        default=False,
        description="true: the answer also holds the changed blocks as they are after the "
        "change (snapshot)",
    )


class PageCreateArgs(_Args):
    path: str = Field(
        min_length=1,
        max_length=1024,
        description="workspace-relative path of the new .md file, e.g. notes/ideas.md",
    )
    content: str = Field(default="", max_length=10_000_000, description="Markdown body")
    title: str | None = Field(
        default=None, max_length=500, description="its title (kept in the frontmatter)"
    )


class PageDeleteArgs(_Args):
    pass


class PageMoveArgs(_Args):
    newPath: str = Field(
        min_length=1, max_length=1024, description="the page's new workspace-relative path"
    )


class WorkspaceListArgs(_Args):
    folder: str | None = Field(
        default=None, max_length=1024, description="only pages under this folder"
    )
    query: str | None = Field(
        default=None, max_length=1000, description="only pages whose path or title has this"
    )
    limit: int = Field(default=200, ge=1, le=10_000, description="most pages to list")
    cursor: str | None = Field(
        default=None,
        max_length=4096,
        description="the nextCursor of the previous answer: the listing goes on after it",
    )


class DocHistoryArgs(_Args):
    limit: int = Field(default=50, ge=1, le=1000, description="most commits to list")


class FileGrantArgs(_Args):
    ttlSeconds: int = Field(
        default=3600, ge=1, le=7 * 24 * 3600, description="seconds until the grant expires"
    )


class FileReleaseArgs(_Args):
    grantId: str = Field(
        min_length=1, max_length=128, description="grantId from mnote.file.grant's answer"
    )


class PlanUpdateArgs(_Args):
    """A proposal, exactly one of: search/replace ``operations``, ``blockOps``, ``fullContent``."""

    operations: list[EditPair] | None = Field(
        default=None, max_length=500, description="search/replace pairs, applied in order"
    )
    blockOps: list[BlockOp] | None = Field(
        default=None,
        max_length=500,
        description="block commands, as mnote.doc.apply_block_ops takes them",
    )
    fullContent: str | None = Field(
        default=None, max_length=10_000_000, description="the page's whole new Markdown"
    )
    allowedTargetBlockIds: list[str] | None = Field(
        default=None, max_length=10_000, description=_ALLOWED
    )
    reason: str | None = Field(
        default=None, max_length=2000, description="why, for the person who reviews it"
    )


class ReviewRef(_Args):
    sessionId: str = Field(min_length=1, max_length=128, description=_REVIEW_ID)


class ReviewRejectArgs(ReviewRef):
    reason: str | None = Field(
        default=None, max_length=2000, description="why, kept with the session"
    )


class ReviewListArgs(_Args):
    states: list[str] | None = Field(
        default=None,
        max_length=11,
        description="only sessions in these states, e.g. awaiting_user, applied, stale",
    )
    limit: int = Field(default=50, ge=1, le=1000, description="most sessions to list")


class RouteArgs(_Args):
    instruction: str = Field(
        min_length=1, max_length=10_000, description="the user's instruction, as written"
    )
    scope: Scope = Field(default="full", description="the part of the page it is about")
    blockIds: list[str] | None = Field(
        default=None, max_length=1000, description="the selected blocks, if any"
    )


# -- result models (what the manifest promises) ------------------------------------


class _Result(BaseModel):
    model_config = ConfigDict(extra="allow")


class BlockChange(BaseModel):
    """One changed block: ``op`` insert, update or delete, its text before and after."""

    model_config = ConfigDict(extra="allow")

    op: Literal["insert", "update", "delete"]
    blockId: str
    before: str | None = None
    after: str | None = None
    type: str | None = None


class WriteResult(_Result):
    commandName: str
    dryRun: bool
    revision: str | None = None
    changedBlockIds: list[str] = Field(default_factory=list)
    diff: list[BlockChange] = Field(default_factory=list)
    unifiedDiff: str = ""
    changedBlocks: list[BlockChange] = Field(default_factory=list)
    risk: Literal["low", "medium", "high"] = "low"
    blocked: bool = False
    rebased: bool = False
    warnings: list[str] = Field(default_factory=list)
    diffSummary: list[dict[str, Any]] | None = Field(
        default=None, description='page.save: seed 000\'s summary, [{"op": "append", "blocks": 1}]'
    )
    reviewSession: dict[str, Any] | None = Field(
        default=None,
        description="a dry run of markdown_edit/apply_block_ops: the review session it would make",
    )


class PageResult(_Result):
    documentId: str
    workspaceId: str
    path: str
    title: str
    revision: str | None
    pageOptions: dict[str, bool]
    bodySummary: str | None = None
    blocks: list[dict[str, Any]] | None = None


class ContextResult(_Result):
    schema_: str = Field(alias="schema")
    revision: str | None
    conflictDetectionKey: str
    allowedTargetBlockIds: list[str]
    blocks: list[dict[str, Any]]
    truncated: bool


class ListResult(_Result):
    pages: list[dict[str, Any]]
    truncated: bool = Field(description="more pages may follow: call again with nextCursor")
    nextCursor: str | None = Field(
        default=None, description="pass as cursor to go on; absent once the listing is whole"
    )


class HistoryResult(_Result):
    commits: list[dict[str, Any]]


class ReviewResult(_Result):
    schema_: str = Field(alias="schema")
    sessionId: str
    state: str


class ReviewListResult(_Result):
    sessions: list[dict[str, Any]]


class RouteResult(_Result):
    schema_: str = Field(alias="schema")
    intent: str
    confidence: float
    recommendedToolCall: dict[str, Any] | None
    risk: str
    requiresHermesRun: bool
    requiresReview: bool
    reason: str


class GrantResult(_Result):
    grantId: str
    path: str
    absolutePath: str
    revision: str | None
    expiresAt: str


# -- declarations -----------------------------------------------------------------------


class Annotations(BaseModel):
    """The manifest's annotations of a tool (seed 003 §5.2)."""

    readonly: bool
    destructive: bool = False
    idempotent: bool = False
    requiresApproval: bool = False
    approvalMode: Literal["none", "review", "required"] = "none"
    selectionEffect: Literal["none", "preserve", "destroy"] = "none"
    runtimeOwner: str = "hermes"
    writeOwner: str = "mnoted"


@dataclass(frozen=True)
class ToolSpec:
    """One tool's whole declaration."""

    name: str
    description: str
    args: type[BaseModel]
    result: type[BaseModel]
    scopes: tuple[str, ...]
    annotations: Annotations
    command: str | None = None
    needs_document: bool = True
    owner_only: bool = False  # (an agent's token never may: not offered to agents)
    optional_document: bool = False  # (a page narrows what it lists; none: the workspace)

    @property
    def writes(self) -> bool:
        return not self.annotations.readonly

    @property
    def required_fields(self) -> tuple[str, ...]:
        """Envelope fields a call must carry (seed 000 schemas)."""
        base = ["workspaceId", "sessionId", "runId", "toolCallId", "traceId"]
        if self.needs_document:
            base.insert(1, "documentId")
        if self.writes:
            base += ["idempotencyKey", "dryRun"]
        return tuple(base)

    @property
    def safe_name(self) -> str:
        """The name model providers accept (``[A-Za-z0-9_-]{1,64}``): dots become underscores."""
        return self.name.replace(".", "_")


READ = Annotations(readonly=True, idempotent=True, selectionEffect="preserve")


def _write(**kw: Any) -> Annotations:
    return Annotations(readonly=False, **kw)


_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "mnote.page.get",
        "Read a page: title, options, a short body summary and its blocks with ids.",
        PageGetArgs,
        PageResult,
        ("page.read",),
        READ,
    ),
    ToolSpec(
        "mnote.page.save",
        "Replace the page body with blocks, or append blocks at the end (coarse; prefer "
        "mnote.doc.markdown_edit for edits).",
        PageSaveArgs,
        WriteResult,
        ("page.write",),
        _write(
            destructive=True,
            idempotent=True,
            selectionEffect="destroy",
            requiresApproval=True,
            approvalMode="review",
        ),
        command="page.body.save",
    ),
    ToolSpec(
        "mnote.page.update_title",
        "Set the page title (frontmatter title, else the first H1).",
        PageUpdateTitleArgs,
        WriteResult,
        ("page.write",),
        _write(idempotent=True),
        command="page.head.updateTitle",
    ),
    ToolSpec(
        "mnote.page.update_options",
        "Set page options wideLayout, smallText, showToc, protectEditing (frontmatter keys).",
        PageUpdateOptionsArgs,
        WriteResult,
        ("page.write",),
        _write(idempotent=True),
        command="page.layout.updateOptions",
    ),
    ToolSpec(
        "mnote.artifact.create_summary",
        "Create or update the page's one AI summary (a Markdown note linked to the page).",
        CreateSummaryArgs,
        WriteResult,
        ("artifact.write",),
        _write(idempotent=True),
        command="artifact.summary.upsert",
    ),
    ToolSpec(
        "mnote.artifact.create_ai_note",
        "Create a new AI note linked to the page (a new note every call).",
        CreateAiNoteArgs,
        WriteResult,
        ("artifact.write",),
        _write(),
        command="artifact.aiNote.create",
    ),
    ToolSpec(
        "mnote.doc.fetch",
        "Frozen page context for an agent run: scope full/outline/block/selection/keyword, "
        "format markdown/text/page_xml/json, revision keys and allowedTargetBlockIds.",
        DocFetchArgs,
        ContextResult,
        ("page.read",),
        READ,
    ),
    ToolSpec(
        "mnote.block.fetch",
        "One block and its children, with its revisionRef.",
        BlockFetchArgs,
        ContextResult,
        ("page.read",),
        READ,
    ),
    ToolSpec(
        "mnote.doc.markdown_edit",
        "Apply search/replace pairs to the page's Markdown; each search must match exactly once. "
        "The main way to edit text.",
        MarkdownEditArgs,
        WriteResult,
        ("page.write",),
        _write(selectionEffect="preserve"),
        command="doc.markdownEdit",
    ),
    ToolSpec(
        "mnote.doc.apply_block_ops",
        "Apply block commands, in order, as one commit: "
        + ", ".join(block_command_signature(name) for name in BLOCK_COMMANDS)
        + ".",
        ApplyBlockOpsArgs,
        WriteResult,
        ("page.write",),
        _write(selectionEffect="destroy", requiresApproval=True, approvalMode="review"),
        command="doc.applyBlockOps",
    ),
    ToolSpec(
        "mnote.page.create",
        "Create a new page at a path; refuses to overwrite an existing file.",
        PageCreateArgs,
        WriteResult,
        ("page.write",),
        _write(idempotent=True),
        command="page.create",
        needs_document=False,
    ),
    ToolSpec(
        "mnote.page.delete",
        "Delete a page (recoverable from Git history).",
        PageDeleteArgs,
        WriteResult,
        ("page.write",),
        _write(destructive=True, idempotent=True, requiresApproval=True, approvalMode="review"),
        command="page.delete",
    ),
    ToolSpec(
        "mnote.page.move",
        "Move or rename a page; its documentId stays the same. Links to it in pages the caller"
        " may edit are updated in the same commit (shown in dryRun); others are counted.",
        PageMoveArgs,
        WriteResult,
        ("page.write",),
        _write(idempotent=True),
        command="page.move",
    ),
    ToolSpec(
        "mnote.workspace.list",
        "List the pages the caller may read: id, path, title, revision; filter by folder or text."
        " Paged: each answer does a bounded amount of work and, if more may follow, gives a"
        " nextCursor to pass as cursor.",
        WorkspaceListArgs,
        ListResult,
        ("page.read",),
        READ,
        needs_document=False,
    ),
    ToolSpec(
        "mnote.doc.history",
        "A page's commits, newest first: subject, time, Git author, and for mnoted's own"
        " commits their command, trace and actor.",
        DocHistoryArgs,
        HistoryResult,
        ("page.read",),
        READ,
    ),
    ToolSpec(
        "mnote.file.grant",
        "Get a private copy of a page (its absolute path) to edit with your own file tools; "
        "release it to commit.",
        FileGrantArgs,
        GrantResult,
        ("page.write",),
        _write(idempotent=True),
        command="file.grant",
    ),
    ToolSpec(
        "mnote.file.release",
        "Commit your edits of a granted copy, merged on blocks with what changed since the "
        "grant (else a conflict).",
        FileReleaseArgs,
        WriteResult,
        ("page.write",),
        _write(),
        command="file.release",
    ),
)

_REVIEW_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "mnote.page_ai.context",
        "Freeze the page context of an agent run: the same run always gets the context it "
        "froze first, whatever the selection does later.",
        DocFetchArgs,
        ContextResult,
        ("page.read",),
        READ,
    ),
    ToolSpec(
        "mnote.doc.plan_update",
        "Propose an edit for a person to review: search/replace operations, block ops or the "
        "full content. Creates a review session with a dry-run preview; writes nothing.",
        PlanUpdateArgs,
        ReviewResult,
        ("page.write",),
        _write(requiresApproval=True, approvalMode="required", selectionEffect="preserve"),
        command="review.propose",
    ),
    ToolSpec(
        "mnote.page_ai.route",
        "Route a user's instruction: a recommended tool call for low-ambiguity edits, or "
        "else that an agent run is needed (requiresHermesRun: true) and why. Deterministic; "
        "writes nothing.",
        RouteArgs,
        RouteResult,
        ("page.read",),
        READ,
    ),
    ToolSpec(
        "mnote.review.get",
        "A review session: base, proposal, preview (changed blocks before/after, diff), state.",
        ReviewRef,
        ReviewResult,
        ("page.read",),
        READ,
        needs_document=False,
    ),
    ToolSpec(
        "mnote.review.list",
        "Review sessions, newest first (of the page given, else of the workspace).",
        ReviewListArgs,
        ReviewListResult,
        ("page.read",),
        READ,
        needs_document=False,
        optional_document=True,
    ),
    ToolSpec(
        "mnote.review.accept",
        "Accept a proposal: applied as one commit if the page is as it was previewed, "
        "else the session goes stale and nothing is written. Owner only.",
        ReviewRef,
        ReviewResult,
        ("page.write",),
        _write(idempotent=True),
        command="review.accept",
        needs_document=False,
        owner_only=True,
    ),
    ToolSpec(
        "mnote.review.reject",
        "Reject a proposal; nothing is written.",
        ReviewRejectArgs,
        ReviewResult,
        ("page.write",),
        _write(),
        command="review.reject",
        needs_document=False,
        owner_only=True,
    ),
    ToolSpec(
        "mnote.review.retry",
        "Make a fresh preview of a proposal on the page as it is now (needs a new toolCallId).",
        ReviewRef,
        ReviewResult,
        ("page.write",),
        _write(),
        command="review.retry",
        needs_document=False,
    ),
    ToolSpec(
        "mnote.review.abort",
        "Abort a review session; nothing is written.",
        ReviewRef,
        ReviewResult,
        ("page.write",),
        _write(),
        command="review.abort",
        needs_document=False,
    ),
)

# -- finding: full-text search and the link graph (service.search_tools, service.link_tools) --


class WorkspaceSearchArgs(_Args):
    query: str = Field(
        min_length=1,
        max_length=1000,
        description='words (all required), "a phrase", prefix*; Chinese and Japanese by any'
        " substring of two or more characters",
    )
    paths: list[str] | None = Field(
        default=None,
        max_length=100,
        description="only pages matching one of these globs, as grants read them (notes/**)",
    )
    tags: list[str] | None = Field(
        default=None, max_length=50, description="only pages with every one of these tags"
    )
    frontmatter: dict[str, StrictBool | int | float | str] | None = Field(
        default=None,
        max_length=20,
        description="only pages whose frontmatter field equals the value (or lists it)",
    )
    limit: int = Field(default=20, ge=1, le=200, description="most hits to return")
    cursor: str | None = Field(default=None, max_length=64, description="nextCursor of an answer")


class PageLinksArgs(_Args):
    direction: Literal["both", "outgoing", "backlinks"] = Field(
        default="both",
        description="outgoing: the links in this page; backlinks: the pages linking here",
    )


class SearchResult(_Result):
    revision: str | None = Field(description="the commit the index reflected for this answer")
    complete: bool = Field(description="false while the first full index is still being built")
    total: int
    hits: list[dict[str, Any]]
    nextCursor: str | None = None
    index: dict[str, Any] = Field(default_factory=dict)


class LinksResult(_Result):
    documentId: str
    path: str
    revision: str | None
    outgoing: list[dict[str, Any]] | None = None
    backlinks: list[dict[str, Any]] | None = None
    complete: bool = True


_FIND_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "mnote.workspace.search",
        "Full-text search of the pages the caller may read, best first: each hit names its "
        "page, block and heading path with a marked snippet. Filters: paths, tags, "
        "frontmatter fields.",
        WorkspaceSearchArgs,
        SearchResult,
        ("page.read",),
        READ,
        needs_document=False,
    ),
    ToolSpec(
        "mnote.page.links",
        "A page's outgoing links (wikilinks, embeds, Markdown links; resolved or not) and "
        "its backlinks (the linking page and block).",
        PageLinksArgs,
        LinksResult,
        ("page.read",),
        READ,
    ),
)

TOOLS: dict[str, ToolSpec] = {spec.name: spec for spec in (*_SPECS, *_REVIEW_SPECS, *_FIND_SPECS)}
BY_SAFE_NAME: dict[str, ToolSpec] = {spec.safe_name: spec for spec in TOOLS.values()}
SCOPES: tuple[str, ...] = ("page.read", "page.write", "artifact.write")


def lookup(name: str) -> ToolSpec | None:
    """A tool by its canonical (``mnote.page.get``) or safe (``mnote_page_get``) name."""
    return TOOLS.get(name) or BY_SAFE_NAME.get(name)
