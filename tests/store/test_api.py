"""Pin the store's public surface and its layer boundary."""

from __future__ import annotations

import ast
from pathlib import Path

import mnoted.store

STORE = Path(mnoted.store.__file__).parent


def test_public_api_is_pinned() -> None:
    assert sorted(mnoted.store.__all__) == sorted(
        [
            "TEMP_PREFIX",
            "BlockIds",
            "Change",
            "CommandMeta",
            "CommandRecord",
            "CommitResult",
            "Delete",
            "DocRef",
            "HistoryEntry",
            "Grants",
            "IdEntries",
            "Idempotency",
            "IdempotencyRecord",
            "Identity",
            "Maintainer",
            "Move",
            "PackReport",
            "ReviewStore",
            "Workspace",
            "WorkspaceApi",
            "WorkspaceConfig",
            "Write",
            "check_new_name",
            "is_internal",
            "normalize",
            "template_files",
        ]
    )
    for name in mnoted.store.__all__:
        assert hasattr(mnoted.store, name)


def test_store_imports_only_core_and_errors() -> None:
    """The store may use mnoted.core and mnoted.errors, no other layer, and never `git`."""
    for path in STORE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("mnoted")
            ):
                assert node.module.startswith(("mnoted.store", "mnoted.core", "mnoted.errors")), (
                    f"{path.name} imports {node.module}"
                )
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name != "subprocess", f"{path.name} runs subprocesses"
