"""The tree diff agrees with Git's own about which paths changed; renames pair sensibly."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnoted.store import treediff, trees
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
    # The files that differ, unpaired (what the search index reads): the same paths, each
    # with its blob in the new tree; from nothing, every file of the new tree.
    changed = dict(treediff.changed_files(repo, old, new))
    assert sorted(changed) == sorted(out.split())
    assert all(blob == _blob_at(new, path) for path, blob in changed.items())
    listed = git(tmp_path / "r", "ls-tree", "-r", "--name-only", str(new.id)).split()
    assert sorted(p for p, _ in treediff.changed_files(repo, None, new)) == sorted(listed)


def _blob_at(tree: pygit2.Tree, path: str) -> str | None:
    entry = trees.object_at(tree, path)
    return str(entry.id) if isinstance(entry, pygit2.Blob) else None


def test_changed_files_name_regular_files_only(tmp_path: Path) -> None:
    """A file that became a symbolic link is gone (None); a mode change alone is no change;
    the reader answers KeyError for a commit the repository lacks."""
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)

    def commit(files: dict[str, tuple[bytes, int]]) -> str:
        index = pygit2.Index()
        for path, (body, mode) in files.items():
            index.add(pygit2.IndexEntry(path, repo.create_blob(body), mode))
        sig = pygit2.Signature("t", "t@example.com", 0, 0)
        return str(repo.create_commit(None, sig, sig, "c", index.write_tree(repo), []))

    blob, link, exe = pygit2.GIT_FILEMODE_BLOB, pygit2.GIT_FILEMODE_LINK, 0o100755
    old = commit({"a.md": (b"a", blob), "b.md": (b"b", blob), "c.md": (b"x", link)})
    new = commit({"a.md": (b"elsewhere", link), "b.md": (b"b", exe), "c.md": (b"c", blob)})
    reader = treediff.CommitReader(repo)
    assert sorted(reader.files_changed(old, new)) == [("a.md", None), ("c.md", _id(repo, b"c"))]
    assert sorted(reader.files_changed(None, old)) == [
        ("a.md", _id(repo, b"a")),
        ("b.md", _id(repo, b"b")),
    ]
    assert reader.read_blob(_id(repo, b"b")) == b"b" and reader.read_blob("0" * 40) is None
    with pytest.raises(KeyError):
        reader.files_changed(old, "1" * 40)


def _id(repo: pygit2.Repository, body: bytes) -> str:
    return str(pygit2.hash(body))
