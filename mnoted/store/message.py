"""Commit messages: a readable subject, then Git trailers that tools can parse.

``git log --format='%(trailers:key=Mnote-Trace-Id,valueonly)'`` and ``git interpret-trailers
--parse`` read them; :func:`parse_trailers` reads them back the same way when the sidecar is
rebuilt from history.
"""

from __future__ import annotations

import re

from mnoted.store.model import CommandMeta, Identity

COMMAND_ID = "Mnote-Command-Id"
TRACE_ID = "Mnote-Trace-Id"
TOOL = "Mnote-Tool"
TOOL_CALL_ID = "Mnote-Tool-Call-Id"
RUN_ID = "Mnote-Run-Id"
SESSION_ID = "Mnote-Session-Id"
ACTOR = "Mnote-Actor"
IDEMPOTENCY_KEY = "Mnote-Idempotency-Key"
REQUEST_HASH = "Mnote-Request-Hash"
# seed 004's header (service.provenance)
REQUEST_ID = "Mnote-Request-Id"
ACTOR_TYPE = "Mnote-Actor-Type"
REASON = "Mnote-Reason"
ON_BEHALF_OF = "Mnote-On-Behalf-Of"
TARGET_BLOCK_ID = "Mnote-Target-Block-Id"
ACCEPTED_BY = "Mnote-Accepted-By"
REAPPLIES = "Mnote-Reapplies"
"""On a command's second commit: its first, whose change it puts back on a person's save
that raced the landing (``docs/store.md``, settled files)."""

_TRAILER = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]*): ?(.*)$")
_MAX_SUBJECT_PATHS = 3


def key_owner(trailers: dict[str, str]) -> str:
    """Who sent a command's idempotency key: who accepted a review session, else its actor.

    Keys belong to the actor that sent them (``docs/protocol.md``): two actors may use the
    same key, and neither learns of the other's commands through it.
    """
    return trailers.get(ACCEPTED_BY) or trailers.get(ACTOR) or ""


def meta_key_owner(meta: CommandMeta) -> str:
    """:func:`key_owner` of the commit ``meta`` is about to make."""
    return key_owner({**dict(meta.extra), ACTOR: meta.actor})


def _clean(value: str) -> str:
    return " ".join(value.split())


def signature_name(value: str) -> str:
    """``value`` as a Git author line can hold it: one line, printable, no angle brackets
    (a newline in an agent's name made a commit without an author's email, which
    ``git fsck --strict`` refuses)."""
    return _clean("".join(c if c.isprintable() and c not in "<>" else " " for c in value))


def subject(command: str, paths: list[str]) -> str:
    """``page.body.save: notes/plan.md`` (several paths are listed, long lists shortened)."""
    shown = ", ".join(paths[:_MAX_SUBJECT_PATHS])
    more = len(paths) - _MAX_SUBJECT_PATHS
    if more > 0:
        shown += f" (+{more} more)"
    return _clean(f"{command}: {shown}" if shown else command)


def trailers_of(meta: CommandMeta) -> list[tuple[str, str]]:
    """The trailers for ``meta``, in a fixed order, leaving out absent values."""
    pairs = [
        (COMMAND_ID, meta.command_id),
        (TRACE_ID, meta.trace_id),
        (TOOL, meta.tool),
        (TOOL_CALL_ID, meta.tool_call_id),
        (RUN_ID, meta.run_id),
        (SESSION_ID, meta.session_id),
        (ACTOR, meta.actor),
        (IDEMPOTENCY_KEY, meta.idempotency_key),
        (REQUEST_HASH, meta.request_hash),
        *((k, v) for k, v in meta.extra if k.startswith("Mnote-") and _TRAILER.match(f"{k}: x")),
    ]
    return [(k, _clean(v)) for k, v in pairs if v and _clean(v)]


def format_message(meta: CommandMeta, paths: list[str]) -> str:
    """The full commit message: subject, blank line, trailer block, final newline."""
    trailers = "\n".join(f"{k}: {v}" for k, v in trailers_of(meta))
    return f"{subject(meta.command, paths)}\n\n{trailers}\n"


def parse_trailers(message: str) -> dict[str, str]:
    """The trailers of the message's last paragraph (empty if it is not a trailer block)."""
    paragraphs = [p for p in message.strip().split("\n\n") if p.strip()]
    if len(paragraphs) < 2:
        return {}
    out: dict[str, str] = {}
    for line in paragraphs[-1].splitlines():
        m = _TRAILER.match(line)
        if m is None:
            return {}
        out.setdefault(m.group(1), m.group(2).strip())
    return out


_FIELDS = {
    COMMAND_ID: "command_id",
    TRACE_ID: "trace_id",
    TOOL: "tool",
    TOOL_CALL_ID: "tool_call_id",
    RUN_ID: "run_id",
    SESSION_ID: "session_id",
    IDEMPOTENCY_KEY: "idempotency_key",
    REQUEST_HASH: "request_hash",
}


def meta_of(text: str, author: Identity) -> CommandMeta:
    """The metadata a commit's message and author were made from (:func:`format_message`'s
    inverse): a commit that carries on a command has its subject verb, trailers and author."""
    trailers = parse_trailers(text)
    command = text.split("\n", 1)[0].split(": ", 1)[0].strip() or "external.edit"
    known = {field: trailers[key] for key, field in _FIELDS.items() if key in trailers}
    extra = tuple(
        (k, v)
        for k, v in trailers.items()
        if k.startswith("Mnote-") and k not in _FIELDS and k != ACTOR
    )
    return CommandMeta(
        command, trailers.get(ACTOR, author.name), author=author, extra=extra, **known
    )
