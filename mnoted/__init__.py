"""mnoted: a local-first home for Markdown notes that people and AI agents edit together."""

__version__ = "0.1.0"
