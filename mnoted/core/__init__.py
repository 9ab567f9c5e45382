"""The pure core: Markdown pages, block ids, block commands and views. No I/O.

Everything here takes values and returns values: no files, no clock, no
randomness, no other mnoted layer. The store and the service feed it bytes.
"""

from mnoted.core.blocks import Block
from mnoted.core.commands import (
    BLOCK_COMMANDS,
    EditResult,
    apply_block_command,
    delete_block,
    indent_block,
    insert_block_after,
    move_block,
    outdent_block,
    replace_block,
    save,
    set_block_type,
    toggle_heading_collapse,
    update_options,
    update_title,
)
from mnoted.core.markdown_edit import markdown_edit
from mnoted.core.page import PAGE_OPTIONS, Page, parse_page
from mnoted.core.source import Source
from mnoted.core.views import build_context

__all__ = [
    "BLOCK_COMMANDS",
    "PAGE_OPTIONS",
    "Block",
    "EditResult",
    "Page",
    "Source",
    "apply_block_command",
    "build_context",
    "delete_block",
    "indent_block",
    "insert_block_after",
    "markdown_edit",
    "move_block",
    "outdent_block",
    "parse_page",
    "replace_block",
    "save",
    "set_block_type",
    "toggle_heading_collapse",
    "update_options",
    "update_title",
]
