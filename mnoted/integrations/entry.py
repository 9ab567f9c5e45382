"""The ``mnote`` command: the CLI (:mod:`mnoted.cli.main`) with the doors served from
this layer (``mnote mcp``), so the CLI itself never imports the integrations."""

from __future__ import annotations

import sys

from mnoted.cli.main import entry as cli_entry
from mnoted.client.client import Client


def _mcp(client: Client) -> int:
    from mnoted.integrations.mcp_server import main  # (the MCP SDK: loaded only for it)

    return main(client)


def entry() -> int:
    return cli_entry(doors={"mcp": _mcp})


if __name__ == "__main__":
    sys.exit(entry())
