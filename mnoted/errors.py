"""The one exception hierarchy of mnoted, and the one place error codes live.

Every failure a caller can see is a :class:`MnoteError` carrying a wire ``code``
(from the seeds where they name one), a ``message`` and a ``hint`` that says
what to do next. Transports turn it into the ``error`` object of the response
envelope; nothing else maps exceptions to codes.

This module imports nothing from mnoted, so every layer (the pure core too)
may raise these errors.

    MnoteError
    ├── InvalidArguments          mnote_tool_invalid_arguments
    ├── NotFound                  mnote_tool_not_found
    │   └── BlockNotFound         mnote_block_not_found
    ├── InvalidTreeOperation      mnote_block_invalid_tree_operation
    ├── TargetOutOfScope          mnote_block_target_out_of_scope
    ├── EditMismatch              mnote_markdown_edit_mismatch
    ├── InvalidFrontmatter        mnote_page_invalid_frontmatter
    ├── UnsupportedOption         mnote_tool_unsupported_option
    ├── Conflict                  mnote_tool_conflict
    │   └── BaseChanged           (the same code; the executor plans the write again)
    ├── IdempotencyConflict       mnote_tool_idempotency_conflict
    ├── PermissionDenied          mnote_tool_permission_denied
    ├── UnknownTool               mnote_tool_unknown
    ├── ToolDisabled              mnote_tool_disabled
    ├── TooLarge                  mnote_tool_too_large
    ├── Timeout                   mnote_tool_timeout
    ├── Stale                     mnote_review_stale
    ├── InvalidTransition         mnote_review_invalid_transition
    ├── PathRejected              mnote_path_rejected
    ├── WorkspaceInvalid          mnote_workspace_invalid
    ├── LockBusy                  mnote_store_locked
    ├── StorageError              mnote_store_io_error
    └── InternalError             mnote_internal_error
"""

from __future__ import annotations

from typing import Any, ClassVar


class MnoteError(Exception):
    """Base of every error a caller can see; ``code`` is the wire error code."""

    code: ClassVar[str] = "mnote_internal_error"
    default_hint: ClassVar[str] = ""

    def __init__(self, message: str, *, hint: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint
        self.details: dict[str, Any] = details

    def to_dict(self) -> dict[str, Any]:
        """The ``error`` object of a response envelope."""
        out: dict[str, Any] = {"code": self.code, "message": self.message, "hint": self.hint}
        if self.details:
            out["details"] = self.details
        return out


class InvalidArguments(MnoteError):
    """The request or its arguments do not fit the tool's schema."""

    code = "mnote_tool_invalid_arguments"
    default_hint = "Check the tool's input schema in the manifest and send the call again."


class NotFound(MnoteError):
    """No such page, path or record (for agents, a hidden page answers as denied)."""

    code = "mnote_tool_not_found"
    default_hint = "List the workspace's pages to find the right documentId or path."


class BlockNotFound(NotFound):
    """The page has no block with that id."""

    code = "mnote_block_not_found"
    default_hint = "Fetch the page again: block ids are listed in its blocks."


class InvalidTreeOperation(MnoteError):
    """The block command would break the page's block tree, or is not possible there."""

    code = "mnote_block_invalid_tree_operation"
    default_hint = "Fetch the page's block tree and choose a target that keeps it valid."


class TargetOutOfScope(MnoteError):
    """The edit touches a block outside the run's allowedTargetBlockIds."""

    code = "mnote_block_target_out_of_scope"
    default_hint = "Only the blocks in allowedTargetBlockIds may be changed in this run."


class EditMismatch(MnoteError):
    """A markdown_edit search matched zero or several places."""

    code = "mnote_markdown_edit_mismatch"
    default_hint = "Make each search string longer so it matches exactly one place in the page."


class InvalidFrontmatter(MnoteError):
    """The page's frontmatter is invalid YAML or cannot be edited line by line."""

    code = "mnote_page_invalid_frontmatter"
    default_hint = "Fix the YAML between the '---' lines at the top of the file first."


class UnsupportedOption(MnoteError):
    """An option the tool does not support (never silently ignored)."""

    code = "mnote_tool_unsupported_option"
    default_hint = "Send only the options the manifest lists as supported."


class Conflict(MnoteError):
    """The page changed since the caller's base revision in what the write touches."""

    code = "mnote_tool_conflict"
    default_hint = "The page changed since you read it: fetch it again and redo the edit."


class BaseChanged(Conflict):
    """A file changed between the read a write was planned on and its commit.

    Raised by the store; the executor plans the write again on what is there now (a
    person's save in that instant), so a caller sees it only if that keeps happening.
    """


class IdempotencyConflict(MnoteError):
    """The idempotency key was already used for a different request."""

    code = "mnote_tool_idempotency_conflict"
    default_hint = "Use a new idempotencyKey for a different request."


class PermissionDenied(MnoteError):
    """The caller may not do this (token, scope, grant, workspace or protected page)."""

    code = "mnote_tool_permission_denied"
    default_hint = "Ask the workspace owner for a token with the needed scope and grant."


class UnknownTool(MnoteError):
    """No tool has that name."""

    code = "mnote_tool_unknown"
    default_hint = "List the tools with GET /v1/tools or `mnote tools`."


class ToolDisabled(MnoteError):
    """The workspace profile disables the tool."""

    code = "mnote_tool_disabled"
    default_hint = "The workspace profile disables this tool; the owner can enable it."


class TooLarge(MnoteError):
    """The request, file or work exceeds a configured limit."""

    code = "mnote_tool_too_large"
    default_hint = "Send a smaller request or edit the page in smaller steps."


class Timeout(MnoteError):
    """The call ran past the daemon's per-request time limit (it may still complete)."""

    code = "mnote_tool_timeout"
    default_hint = "Check mnote.doc.history before retrying: the write may have landed."


class Stale(MnoteError):
    """A review session's base changed before it was accepted."""

    code = "mnote_review_stale"
    default_hint = "The page changed since the proposal was made: retry to get a fresh preview."


class InvalidTransition(MnoteError):
    """The review session cannot take that action in its state."""

    code = "mnote_review_invalid_transition"
    default_hint = "Get the review session to see its state and allowed actions."


class PathRejected(MnoteError):
    """The path escapes the workspace, is internal, malformed, ignored, filtered, another
    repository's or read-only."""

    code = "mnote_path_rejected"
    default_hint = (
        "Use a relative path to a .md file inside the workspace, outside .git/ and .mnote/."
    )


class WorkspaceInvalid(MnoteError):
    """The folder is not a usable workspace (detached HEAD, mid-merge, bad config)."""

    code = "mnote_workspace_invalid"
    default_hint = "Fix the repository state with git (see the message), then try again."


class LockBusy(MnoteError):
    """A Git lock is held by another program and did not clear in time."""

    code = "mnote_store_locked"
    default_hint = "Another program holds a Git lock; wait for it to finish and try again."


class StorageError(MnoteError):
    """Reading or writing the disk failed."""

    code = "mnote_store_io_error"
    default_hint = "Check free disk space and permissions of the workspace, then try again."


class InternalError(MnoteError):
    """A bug in mnoted; the daemon log has the details."""

    code = "mnote_internal_error"
    default_hint = "This is a bug in mnoted; the daemon log has the details."


ALL_ERRORS: tuple[type[MnoteError], ...] = (
    InvalidArguments,
    NotFound,
    BlockNotFound,
    InvalidTreeOperation,
    TargetOutOfScope,
    EditMismatch,
    InvalidFrontmatter,
    UnsupportedOption,
    Conflict,
    IdempotencyConflict,
    PermissionDenied,
    UnknownTool,
    ToolDisabled,
    TooLarge,
    Timeout,
    Stale,
    InvalidTransition,
    PathRejected,
    WorkspaceInvalid,
    LockBusy,
    StorageError,
    InternalError,
)
