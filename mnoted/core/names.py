"""Names the contract shares with the core, kept free of the project's imports so light
clients can load them.

The block commands of seed 004 are declared here once, with the fields each takes: the
core checks a command's fields against them, the tool's schema and ``docs/tools.md``
describe them, and ``mnote editor <command>`` offers exactly them as options.
"""

from typing import NamedTuple


class BlockCommand(NamedTuple):
    """What a block command does and the fields it takes (seed 004's names)."""

    summary: str
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()

    @property
    def fields(self) -> tuple[str, ...]:
        return self.required + self.optional


BLOCK_FIELDS = {
    "block_id": "id of the block the command acts on",
    "after_block_id": "id of the block to place it right after; without it, first among its "
    "new siblings (an insert: first on the page)",
    "target_parent_id": "id of the block to move it into (a list, list item, quote or callout); "
    "without it, the parent of after_block_id, or the page's top level",
    "block": "the new block: {type, text, props, children}, or a string of Markdown",
    "block_type": "the new type: paragraph, heading, code, math, quote or callout; list_item or "
    "task_item for an item; list for a list (ordered or not, by props)",
    "props": 'the new type\'s properties, e.g. {"level": 2} for a heading, {"ordered": true} '
    "for a list",
}

BLOCK_COMMANDS = {
    "insert_block_after": BlockCommand(
        "insert a new block after another, or first on the page", ("block",), ("after_block_id",)
    ),
    "replace_block": BlockCommand(
        "replace a block's content, keeping its id", ("block_id", "block")
    ),
    "delete_block": BlockCommand("delete a block with its children", ("block_id",)),
    "move_block": BlockCommand(
        "move a block with its children", ("block_id",), ("target_parent_id", "after_block_id")
    ),
    "set_block_type": BlockCommand(
        "change a block's type, keeping its text and id", ("block_id", "block_type"), ("props",)
    ),
    "indent_block": BlockCommand("nest a block under the list item before it", ("block_id",)),
    "outdent_block": BlockCommand(
        "move a block out of its container, to just after it", ("block_id",)
    ),
    "toggle_heading_collapse": BlockCommand(
        "collapse or expand a heading (the state is kept in the page's frontmatter)",
        ("block_id",),
    ),
}


def block_command_signature(name: str) -> str:
    """``move_block(block_id, target_parent_id?, after_block_id?)``: a command as the seed
    writes its inputs."""
    spec = BLOCK_COMMANDS[name]
    return f"{name}({', '.join([*spec.required, *(f'{f}?' for f in spec.optional)])})"
