"""A person's save between a write's read and its commit: kept, and the write planned again.

On the real store: each commit made is read back with ``git show`` and ``git log``."""

from __future__ import annotations

from typing import Any

import pytest

from mnoted.store import Workspace
from tests.service.conftest import Harness


def _save_once_before_apply(
    monkeypatch: pytest.MonkeyPatch, h: Harness, saves: list[tuple[str, str]]
) -> None:
    """Write each ``(old, new)`` into plan.md, as an editor would, just before an apply."""
    real = Workspace.apply

    def apply(self: Workspace, *args: Any, **kwargs: Any) -> Any:
        if saves:
            old, new = saves.pop(0)
            path = h.root / "notes" / "plan.md"
            path.write_text(path.read_text().replace(old, new))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Workspace, "apply", apply)


def _monday_to_friday(h: Harness) -> dict[str, Any]:
    return h.write(
        "mnote.doc.markdown_edit",
        documentId="notes/plan.md",
        args={"operations": [{"search": "Monday", "replace": "Friday"}]},
    )


def test_a_save_during_a_write_is_kept_and_the_write_applies_on_it(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    _save_once_before_apply(monkeypatch, h, [("Budget risk", "Schedule risk")])
    done = _monday_to_friday(h)
    assert done["ok"], done
    text = h.git("show", "HEAD:notes/plan.md")
    assert "Schedule risk" in text and "Friday" in text  # the person's save and the edit
    subjects = h.git("log", "-2", "--format=%s").splitlines()
    assert subjects[1].startswith("external.edit")  # the save, committed first as theirs
    assert (h.root / "notes" / "plan.md").read_text() == text


def test_an_edit_the_save_made_impossible_is_refused_not_forced(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    _save_once_before_apply(monkeypatch, h, [("Monday", "Tuesday")])
    done = _monday_to_friday(h)
    assert not done["ok"] and done["error"]["code"] == "mnote_markdown_edit_mismatch"
    assert "Tuesday" in h.git("show", "HEAD:notes/plan.md")


def test_a_page_that_keeps_changing_ends_in_a_conflict(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    saves = [("Budget risk is high", f"Budget risk is high{'!' * n}") for n in range(1, 6)]
    saves = [(f"Budget risk is high{'!' * (n - 1)}", new) for n, (_, new) in enumerate(saves, 1)]
    _save_once_before_apply(monkeypatch, h, saves)
    done = _monday_to_friday(h)
    assert not done["ok"] and done["error"]["code"] == "mnote_tool_conflict"
    assert "high!!!" in h.git("show", "HEAD:notes/plan.md")  # every save it saw was kept
