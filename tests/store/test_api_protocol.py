"""The service depends on :class:`WorkspaceApi`, and :class:`Workspace` implements it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import mnoted
from mnoted.store import Workspace, WorkspaceApi

SERVICE = Path(mnoted.__file__).parent / "service"


def _members(cls: type) -> dict[str, object]:
    return {
        name: value
        for name, value in vars(cls).items()
        if not name.startswith("_") or name == "__call__"
    }


@pytest.mark.parametrize("name", sorted(_members(WorkspaceApi)))
def test_workspace_has_each_member_of_the_protocol_with_its_parameters(name: str) -> None:
    wanted = _members(WorkspaceApi)[name]
    if isinstance(wanted, property):
        # an attribute set in __init__, or a property
        source = inspect.getsource(Workspace.__init__)
        assert (
            f"self.{name} =" in source
            or f"self.{name}:" in source
            or isinstance(getattr(Workspace, name, None), property)
        ), name
        return
    assert callable(wanted)
    have = getattr(Workspace, name)
    want_params = list(inspect.signature(wanted).parameters.values())
    have_params = list(inspect.signature(have).parameters.values())
    assert [(p.name, p.kind) for p in want_params] == [(p.name, p.kind) for p in have_params]
    for w, h in zip(want_params, have_params, strict=True):
        # a default the protocol names exists in the class (the protocol may say `...`)
        assert (w.default is inspect.Parameter.empty) == (h.default is inspect.Parameter.empty)


def test_the_service_names_the_protocol_not_the_class() -> None:
    """What the service may call on a workspace is the protocol (mypy holds each use to it)."""
    found = []
    for path in sorted(SERVICE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mnoted.store"):
                found += [f"{path.name}: {a.name}" for a in node.names if a.name == "Workspace"]
    assert found == []
