"""The generated reference docs match the declarations they are generated from."""

from __future__ import annotations

from pathlib import Path

from mnoted.contract.reference import errors_markdown, tools_markdown

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_tools_reference_is_current() -> None:
    assert (DOCS / "tools.md").read_text(encoding="utf-8") == tools_markdown(), (
        "docs/tools.md is stale: run `python -m mnoted.contract.reference`"
    )


def test_errors_reference_is_current() -> None:
    assert (DOCS / "errors.md").read_text(encoding="utf-8") == errors_markdown(), (
        "docs/errors.md is stale: run `python -m mnoted.contract.reference`"
    )
