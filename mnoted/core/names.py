"""Names the contract shares with the core, kept free of imports so light clients can load them."""

BLOCK_COMMANDS = (
    "insert_block_after",
    "replace_block",
    "delete_block",
    "move_block",
    "set_block_type",
    "indent_block",
    "outdent_block",
    "toggle_heading_collapse",
)
