"""The one ignore predicate: internal folders, editor temp names, .gitignore with a cache."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from mnoted.sync.ignore import IgnoreReason, IgnoreRules, is_internal, temp_pattern


@pytest.mark.parametrize(
    "name",
    [
        ".mnote-tmp-3f2a",
        "x.md~",
        "x.md.~1~",
        ".x.md.swp",
        ".x.md.swo",
        ".x.md.swpx",
        "#x.md#",
        ".#x.md",
        "x.md___jb_tmp___",
        "x.md___jb_old___",
        ".goutputstream-4XZ2K0",
        "sedAb12Cd",
        ".x.md.kate-swp",
        ".~lock.x.odt#",
        "4913",
        "5036",
        "5159",
    ],
)
def test_editor_temp_names_are_ignored(name: str) -> None:
    assert temp_pattern(name) is not None
    assert IgnoreRules().reason(f"notes/{name}") is IgnoreReason.TEMP


@pytest.mark.parametrize(
    "name", ["x.md", "4914", "2024", "sed.md", "sedimentary", "notes#1.md", "a~b.md", ".gitignore"]
)
def test_real_names_are_kept(name: str) -> None:
    assert temp_pattern(name) is None
    assert not IgnoreRules()(f"notes/{name}")


def test_internal_folders_at_any_depth() -> None:
    rules = IgnoreRules()
    for path in (".git", ".git/index", ".mnote/ids.json", "sub/.git/HEAD"):
        assert is_internal(path)
        assert rules.reason(path) is IgnoreReason.INTERNAL
    assert not is_internal("gitnotes/x.md") and not is_internal(".github/x.md")


def test_temp_patterns_do_not_apply_to_folders() -> None:
    assert not IgnoreRules()("drafts~", is_dir=True)


def test_gitignore_through_pygit2_with_cache_and_invalidation(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path))
    (tmp_path / ".gitignore").write_text("build/\n*.log\n")
    calls: list[str] = []

    def is_ignored(path: str) -> bool:
        calls.append(path)
        return bool(repo.path_is_ignored(path))

    rules = IgnoreRules(is_ignored)
    assert rules.reason("build/out.md") is IgnoreReason.GITIGNORED
    assert rules.reason("build", is_dir=True) is IgnoreReason.GITIGNORED
    assert rules("a/b.log") and not rules("a/b.md")
    assert not rules(".gitignore")  # the rules file itself is committed
    n = len(calls)
    assert rules("a/b.log") and len(calls) == n  # cached
    (tmp_path / ".gitignore").write_text("")
    rules.invalidate()
    assert not rules("a/b.log")


def test_cache_is_bounded_and_errors_mean_not_ignored() -> None:
    rules = IgnoreRules(lambda p: p.endswith(".tmp.md"), cache_size=2)
    for i in range(5):
        rules(f"{i}.tmp.md")
    assert len(rules._cache) == 2

    def boom(path: str) -> bool:
        raise RuntimeError("repository gone")

    failing = IgnoreRules(boom)
    assert not failing("x.md") and failing.gitignore_errors == 1


def test_a_tracked_path_is_synced_though_a_pattern_matches_it() -> None:
    """Git's rule: ignore patterns are for untracked paths. Asked afresh each time, since a
    commit can make a path tracked."""
    tracked = {"drafts/kept.md", "drafts/"}
    asked: list[str] = []

    def is_tracked(path: str) -> bool:
        asked.append(path)
        return path in tracked

    rules = IgnoreRules(lambda p: p.startswith("drafts"), is_tracked)
    assert not rules("drafts/kept.md")
    assert not rules("drafts", is_dir=True)  # a folder holding tracked files is watched
    assert rules.reason("drafts/new.md") is IgnoreReason.GITIGNORED
    tracked.add("drafts/new.md")  # committed meanwhile (`git add -f`, or an agent's write)
    assert not rules("drafts/new.md")
    assert asked.count("drafts/new.md") == 2
    assert not rules("notes/a.md") and "notes/a.md" not in asked  # no pattern: not asked

    def boom(path: str) -> bool:
        raise RuntimeError("repository gone")

    failing = IgnoreRules(lambda p: True, boom)
    assert not failing("x.md") and failing.gitignore_errors == 1


def test_a_name_that_is_not_utf8_is_left_alone_and_a_utf8_one_kept() -> None:
    rules = IgnoreRules(lambda path: path.encode("utf-8") == b"never")  # (raises on surrogates)
    assert rules.reason("old/caf\udce9.md") is IgnoreReason.NOT_UTF8
    assert rules.reason("caf\udce9/", is_dir=True) is IgnoreReason.NOT_UTF8
    assert rules.reason("笔记/café.md") is None and rules.gitignore_errors == 0
