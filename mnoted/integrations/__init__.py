"""Doors for agent runtimes (MCP, Hermes), both made from the one tool manifest."""
