"""The daemon's socket client and how to find the socket, shared by the doors (the
``mnote`` command, the MCP bridge, the Hermes plugin). Standard library and the wire
declarations only: a door loads it without the daemon's dependencies."""
