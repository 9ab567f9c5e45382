"""Trees built from kept builders are the trees built afresh, whatever came before."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnoted.errors import PathRejected
from mnoted.store import trees

NAMES = ["a.md", "x/c.md", "x/y/d.md", "x/y/e.md", "z/f.md", "x", "x/y"]
CHANGES = st.dictionaries(st.sampled_from(NAMES), st.none() | st.integers(0, 3), max_size=4)


def files_of(repo: pygit2.Repository, tree_id: pygit2.Oid | None) -> dict[str, bytes]:
    if tree_id is None:
        return {}
    out: dict[str, bytes] = {}

    def walk(tree: pygit2.Tree, prefix: str) -> None:
        for entry in tree:
            obj = repo[entry.id]
            if isinstance(obj, pygit2.Tree):
                walk(obj, prefix + entry.name + "/")
            else:
                assert isinstance(obj, pygit2.Blob)
                out[prefix + entry.name] = obj.data

    tree = repo[tree_id]
    assert isinstance(tree, pygit2.Tree)
    walk(tree, "")
    return out


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(CHANGES, min_size=1, max_size=12), limit=st.integers(0, 4))
def test_kept_builders_build_what_fresh_ones_do(
    tmp_path: Path, steps: list[dict[str, int | None]], limit: int
) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    blobs = [repo.create_blob(f"version {v}\n".encode()) for v in range(4)]
    builders = trees.Builders(limit)  # a small cache: builders are dropped and taken again
    base: pygit2.Oid | None = None
    for step in steps:
        entries = {p: None if v is None else (blobs[v], trees.FILE) for p, v in step.items()}
        try:
            fresh = trees.build(repo, base, entries)
        except PathRejected:
            with pytest.raises(PathRejected):  # (builders changed half-way are not kept)
                trees.build(repo, base, entries, builders)
            continue
        kept = trees.build(repo, base, entries, builders)
        assert kept == fresh
        expected = files_of(repo, base)
        for path, v in step.items():
            if v is None:
                expected.pop(path, None)
            else:
                expected[path] = f"version {v}\n".encode()
        assert files_of(repo, kept) == expected
        base = kept
