"""``docs/tools.md`` and ``docs/errors.md``, written from the declarations themselves.

Run ``python -m mnoted.contract.reference`` to rewrite both; a test fails when the
files in the repository differ from what the declarations say.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mnoted.contract.manifest import input_schema
from mnoted.contract.tools import TOOLS, ToolSpec
from mnoted.core.names import BLOCK_COMMANDS, BLOCK_FIELDS, block_command_signature
from mnoted.errors import ALL_ERRORS


def _type(prop: dict[str, Any]) -> str:
    if "anyOf" in prop:
        return " or ".join(_type(p) for p in prop["anyOf"] if p.get("type") != "null") or "null"
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    if "enum" in prop:
        return " \\| ".join(json.dumps(v) for v in prop["enum"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"array of {_type(prop.get('items', {}))}"
    return str(kind)


def tool_section(spec: ToolSpec) -> str:
    schema = input_schema(spec)
    required = set(schema["required"])
    ann = spec.annotations
    flags = [
        k for k in ("readonly", "destructive", "idempotent", "requiresApproval") if getattr(ann, k)
    ]
    lines = [
        f"## `{spec.name}`",
        "",
        spec.description,
        "",
        f"- scopes: {', '.join(f'`{s}`' for s in spec.scopes)}",
        f"- annotations: {', '.join(flags) or 'none'}; selectionEffect `{ann.selectionEffect}`",
        f"- commit subject: `{spec.command}`" if spec.command else "- reads only",
        f"- model-safe name: `{spec.safe_name}`",
        "",
        "| field | type | required | notes |",
        "| --- | --- | --- | --- |",
    ]
    for name, prop in schema["properties"].items():
        note = str(prop.get("description", "")).replace("|", "\\|")
        if "default" in prop:
            note = (note + f" (default {json.dumps(prop['default'])})").strip()
        lines.append(f"| `{name}` | {_type(prop)} | {'yes' if name in required else ''} | {note} |")
    return "\n".join(lines) + "\n"


def tools_markdown() -> str:
    head = [
        "# Tool reference",
        "",
        "Generated from `mnoted/contract/tools.py` by `python -m mnoted.contract.reference`;",
        "do not edit by hand. Every call uses the envelope of seed 000 (`docs/protocol.md`):",
        "arguments may be sent in `args` or next to the envelope fields, as the schemas below",
        "show them.",
        "",
        "| tool | scopes | writes |",
        "| --- | --- | --- |",
    ]
    for s in TOOLS.values():
        anchor = s.name.replace(".", "")
        head.append(
            f"| [`{s.name}`](#{anchor}) | {', '.join(s.scopes)} | {'yes' if s.writes else ''} |"
        )
    sections = [tool_section(s) for s in TOOLS.values()]
    return "\n".join(head) + "\n\n" + "\n".join([*sections, block_commands_section()])


def block_commands_section() -> str:
    """The ``BlockOp`` items of ``mnote.doc.apply_block_ops``: each command with its fields."""
    lines = [
        "## Block commands (`BlockOp`)",
        "",
        "Each item of `operations` is one command of seed 004 with the seed's field names; a",
        "field the command needs missing, or one it does not take, is refused with",
        "`mnote_tool_invalid_arguments` (`?`: optional).",
        "",
        "| command and fields | what it does |",
        "| --- | --- |",
    ]
    for name, spec in BLOCK_COMMANDS.items():
        lines.append(f"| `{block_command_signature(name)}` | {spec.summary} |")
    lines += ["", "| field | meaning |", "| --- | --- |"]
    for field, meaning in BLOCK_FIELDS.items():
        lines.append(f"| `{field}` | {meaning.replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"


def errors_markdown() -> str:
    lines = [
        "# Error codes",
        "",
        "Generated from `mnoted/errors.py` by `python -m mnoted.contract.reference`.",
        "Every failed call answers `ok: false` with `error: {code, message, hint}`;",
        "`details` carries machine-readable specifics where there are any.",
        "The daemon's log (logger `mnoted.calls`) names each call that failed with",
        "`mnote_internal_error` (with its traceback) or `mnote_store_io_error`, and, at",
        "info, each refused with `mnote_store_locked` or `mnote_workspace_invalid`: those",
        "are for the workspace's owner to fix. An error the caller caused is only its answer.",
        "",
        "| code | meaning | default hint |",
        "| --- | --- | --- |",
    ]
    for cls in ALL_ERRORS:
        doc = " ".join((cls.__doc__ or cls.__name__).strip().split("\n\n")[0].split())
        lines.append(f"| `{cls.code}` | {doc} | {cls.default_hint} |")
    return "\n".join(lines) + "\n"


def write(docs: Path) -> None:
    (docs / "tools.md").write_text(tools_markdown(), encoding="utf-8")
    (docs / "errors.md").write_text(errors_markdown(), encoding="utf-8")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "docs")
