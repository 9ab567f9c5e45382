"""The tree diff agrees with Git's own about which paths changed; renames pair sensibly."""

from __future__ import annotations

from pathlib import Path

import pygit2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnoted.store import treediff
from tests.store.conftest import git

NAMES = ["a.md", "b.md", "x/c.md", "x/y/d.md", "z/e.md", "x"]


def test_similarity() -> None:
    assert treediff.similarity(b"a\nb\n", b"a\nb\n") == 1.0
    assert treediff.similarity(b"a\nb\nc\nd\n", b"a\nb\nX\nY\n") == 0.5
    assert treediff.similarity(b"", b"x") == 0.0


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    before=st.dictionaries(st.sampled_from(NAMES), st.integers(0, 3), max_size=5),
    after=st.dictionaries(st.sampled_from(NAMES), st.integers(0, 3), max_size=5),
)
def test_changed_paths_match_git(
    tmp_path: Path, before: dict[str, int], after: dict[str, int]
) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)

    def tree(files: dict[str, int]) -> pygit2.Tree:
        index = pygit2.Index()
        for path, v in sorted(files.items()):
            if any(other.startswith(path + "/") for other in files):
                continue  # a file and a folder of the same name cannot coexist
            body = (f"shared line {path}\n" * 10 + f"version {v}\n").encode()
            index.add(pygit2.IndexEntry(path, repo.create_blob(body), pygit2.GIT_FILEMODE_BLOB))
        result = repo[index.write_tree(repo)]
        assert isinstance(result, pygit2.Tree)
        return result

    old, new = tree(before), tree(after)
    ours = treediff.diff(repo, old, new)
    out = git(
        tmp_path / "r", "diff-tree", "-r", "--no-renames", "--name-only", str(old.id), str(new.id)
    )
    flat: set[str] = set()
    for d in ours:
        flat.update(p for p in (d.old_path, d.new_path) if p is not None)
    assert sorted(flat) == sorted(out.split())
    for d in ours:
        if d.status == "R":
            assert d.old_path is not None and d.new_path is not None
            assert d.old_path not in {x.new_path for x in ours if x.status != "R"}
    # Given every path that may differ, the lookup answers as the walk does (or walks
    # itself, when a path is a folder on one side).
    named = [*before, *after, "never/there.md"]
    assert treediff.diff(repo, old, new, named) == ours
