"""Shared test fixtures: the corpus, an environment that no user setting leaks into, and
the envelope of a tool call."""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# CI runs the default profile; `pytest --hypothesis-profile=long` digs deeper.
settings.register_profile("default", max_examples=150, deadline=None)
settings.register_profile("long", max_examples=3000, deadline=None)
settings.load_profile("default")

REPO = Path(__file__).resolve().parent.parent
CORPUS = (REPO / ".." / "shared" / "corpus").resolve()
if not CORPUS.is_dir():
    CORPUS = Path(os.environ.get("MNOTE_CORPUS", "/work/shared/corpus"))


_call_numbers = itertools.count(1)


def envelope(tool: str, **fields: Any) -> dict[str, Any]:
    """A tool call as a client sends it: seed 000's ids present, each call's its own, and
    the rest as given (a field given overrides the id of that name)."""
    n = next(_call_numbers)
    out: dict[str, Any] = {
        "toolName": tool,
        "sessionId": f"session_{n}",
        "runId": f"run_{n}",
        "toolCallId": f"call_{n}",
        "traceId": f"trace_{n}",
    }
    out.update(fields)
    return out


def corpus_files() -> list[Path]:
    root = CORPUS / "obsidian-help"
    return sorted(root.rglob("*.md"))


def commonmark_examples() -> list[dict[str, object]]:
    with (CORPUS / "commonmark-spec.json").open(encoding="utf-8") as fh:
        return list(json.load(fh))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a test marked ``slow`` run first, each file's tests in their own order.

    `make test` hands whole files to two workers in this order: the long files started
    first leave the short ones to fill in at the end, not one long file running alone.
    """
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)


needs_proc = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux's /proc")
"""For tests that read what the process maps or holds open (:func:`deleted_packs_held`)."""


def deleted_packs_held(folder: Path) -> list[str]:
    """Files of ``folder`` this process maps or holds open whose names are gone (an
    earlier test's repository, not yet collected, may still hold its own)."""
    held = [
        line.split()[-2]
        for line in Path("/proc/self/maps").read_text().splitlines()
        if f"{folder}/" in line and line.endswith("(deleted)")
    ]
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(f"{folder}/") and target.endswith("(deleted)"):
                held.append(target)
    return held


@pytest.fixture
def collector_off() -> Iterator[None]:
    """Python's cycle collector off, as seldom as the daemon's raised thresholds make it
    run: what only the collector would free stays."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture(autouse=True)
def clean_environment(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """No GIT_* variable, HOME or XDG directory of the machine reaches a test."""
    home = tmp_path_factory.mktemp("home")
    for key in list(os.environ):
        if key.startswith("GIT_") or key.startswith("XDG_"):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home / "run"))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test User")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "test@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test User")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "test@example.com")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    yield
