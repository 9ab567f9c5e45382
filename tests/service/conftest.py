"""The service tests' ``h``: a workspace holding PLAN and SECRET behind a real executor.

A module marked ``twin`` (``pytestmark = pytest.mark.twin``) runs on the store's in-memory
twin (``tests/service/memory.py``), but for its tests marked ``git``, which check what only
the real store does; every other module runs on a real Git workspace.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.harness import PLAN, SECRET, Harness
from tests.service.memory import memory_harness


@pytest.fixture
def h(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    if request.node.get_closest_marker("twin") and not request.node.get_closest_marker("git"):
        yield from memory_harness(tmp_path)
        return
    harness = Harness(tmp_path / "ws")
    harness.write_file("notes/plan.md", PLAN)
    harness.write_file("private/secret.md", SECRET)
    yield harness
    harness.ws.close()
