"""The wire: envelopes, results, error shape, tool declarations and the manifest.

Pydantic models only; no I/O. Each tool is declared once in
:mod:`mnoted.contract.tools`, and everything else (the executor's checks, the
manifest, the CLI, the MCP bridge, the docs) is derived from that declaration.
"""
