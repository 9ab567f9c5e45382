"""Path safety: component-by-component checks, no string-prefix containment (CVE-2025-53110)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnoted.errors import PathRejected
from mnoted.store.paths import is_internal, normalize, resolve


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "/etc/passwd",
        "../x.md",
        "a/../../x.md",
        "a/..",
        ".git/config",
        "notes/.git/hooks/pre-commit",
        ".GIT/config",
        ".mnote/state/state.sqlite3",
        ".mnote/config.toml",
        "a\\b.md",
        "a\x00b.md",
        ".",
        "notes/.mnote-tmp-x",
        "caf\udce9.md",  # a file name in Latin-1, as os.listdir hands it over
    ],
)
def test_normalize_refuses(bad: str) -> None:
    with pytest.raises(PathRejected):
        normalize(bad)


def test_normalize_canonical_form() -> None:
    assert normalize("notes//./plan.md") == "notes/plan.md"
    assert normalize("notes/.mnote/x.md") == "notes/.mnote/x.md"  # only the top one is internal
    assert normalize(".mnote/config.toml", config_ok=True) == ".mnote/config.toml"
    assert is_internal(".git/index") and is_internal(".mnote/state/journal.json")
    assert not is_internal(".mnote/config.toml") and not is_internal("notes/a.md")


@given(st.lists(st.sampled_from(["a", "b", "..", ".", "", ".git", "x.md", "/"]), max_size=8))
def test_normalized_paths_never_climb(parts: list[str]) -> None:
    raw = "/".join(parts)
    try:
        rel = normalize(raw)
    except PathRejected:
        return
    assert not rel.startswith("/")
    assert ".." not in rel.split("/")
    assert ".git" not in rel.split("/")


def test_sibling_with_same_prefix_is_not_inside(tmp_path: Path) -> None:
    root = tmp_path / "allowed"
    evil = tmp_path / "allowed_evil"
    root.mkdir()
    evil.mkdir()
    (evil / "secret.md").write_text("secret")
    with pytest.raises(PathRejected):
        resolve(root, "../allowed_evil/secret.md")


def test_symlinks_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "x.md").write_text("outside")
    os.symlink(outside, root / "link")
    os.symlink(outside / "x.md", root / "file.md")
    os.symlink(root / "sub", root / "inner")
    (root / "sub").mkdir()
    for path in ("link/x.md", "link/new.md", "file.md", "inner/y.md"):
        with pytest.raises(PathRejected):
            resolve(root, path)


def test_hard_links_and_folders_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "secret.md"
    outside.write_text("secret")
    os.link(outside, root / "alias.md")
    (root / "dir").mkdir()
    (root / "file.md").write_text("x")
    with pytest.raises(PathRejected):
        resolve(root, "alias.md")
    with pytest.raises(PathRejected):
        resolve(root, "dir")
    with pytest.raises(PathRejected):
        resolve(root, "file.md/child.md")
    assert resolve(root, "new/deeper/page.md") == root / "new" / "deeper" / "page.md"
