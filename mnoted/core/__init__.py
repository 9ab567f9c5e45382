"""The pure core: Markdown pages, block ids, block commands and views. No I/O.

Everything here takes values and returns values: no files, no clock, no
randomness, no other mnoted layer. The store and the service feed it bytes.
Names load on first use, so a light client importing ``mnoted.core.names`` does not
pull in the parser.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Block": "blocks",
    "blob_id": "blob",
    "BLOCK_COMMANDS": "names",
    "EditResult": "commands",
    "apply_block_command": "commands",
    "delete_block": "commands",
    "indent_block": "commands",
    "insert_block_after": "commands",
    "move_block": "commands",
    "outdent_block": "commands",
    "replace_block": "commands",
    "save": "commands",
    "set_block_type": "commands",
    "toggle_heading_collapse": "commands",
    "update_options": "commands",
    "update_title": "commands",
    "markdown_edit": "markdown_edit",
    "PAGE_OPTIONS": "page",
    "Page": "page",
    "parse_page": "page",
    "Source": "source",
    "build_context": "views",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mnoted.core' has no attribute {name!r}")
    return getattr(importlib.import_module(f"mnoted.core.{module}"), name)
