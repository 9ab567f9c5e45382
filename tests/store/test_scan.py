"""The work-tree scan (``Workspace.scan_changes``): what the real ``git status`` reports, found
through folder fds from the index's stat data, hashing only what the stat cannot vouch for.

The property test builds random trees (committed by ``git`` itself, whose index carries stat
data, or by mnoted, whose index entries carry none), changes them the ways editors and shells
do (edits of the same size, deletes, new and ignored files, mode changes, symlinks, a file
turned into a folder, changes staged with ``git add``) and checks that the scan finds exactly
the paths ``git status --porcelain`` lists, and that the start-up pass, which asks the
``git`` command itself (``mnoted.sync.gitstatus``), finds the same.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnoted.errors import PathRejected
from mnoted.store import CommandMeta, Workspace, Write, indexstat, scan
from mnoted.store.paths import is_internal
from mnoted.store.statcache import StatCache
from mnoted.sync.gitstatus import changes_by_git
from mnoted.sync.ignore import is_temp
from tests.store.conftest import git

EXAMPLES = int(os.environ.get("MNOTE_SCAN_EXAMPLES", "25"))
FOLDERS = ["", "a/", "a/b/", "c/", "ign/"]
NAMES = ["x.md", "y.md", "z.txt", "n.log"]
CONTENTS = ["aaaa\n", "bbbb\n", "a longer note\n", ""]


def git_changed(root: Path) -> set[str]:
    """The paths `git status` lists (no rename pairing), mnoted's internal ones left out."""
    out = git(root, "status", "--porcelain", "-z", "--untracked-files=all", "--no-renames")
    paths = {item[3:] for item in out.split("\0") if item}
    return {p for p in paths if not is_internal(p)}


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        subprocess.run(["rm", "-rf", str(path)], check=True)
    path.write_text(text)


paths = st.builds(lambda f, n: f + n, st.sampled_from(FOLDERS), st.sampled_from(NAMES))
ops = st.one_of(
    st.tuples(st.just("edit"), paths, st.sampled_from(CONTENTS)),
    st.tuples(st.just("edit_same_mtime"), paths, st.sampled_from(CONTENTS)),
    st.tuples(st.just("delete"), paths, st.none()),
    st.tuples(st.just("chmod"), paths, st.none()),
    st.tuples(st.just("symlink"), paths, st.none()),
    st.tuples(st.just("folder_over"), paths, st.none()),
    st.tuples(st.just("stage"), paths, st.sampled_from(CONTENTS)),
)


def apply_op(root: Path, op: tuple[str, str, Any]) -> None:
    kind, rel, text = op
    path = root / rel
    if kind == "edit":
        write(root, rel, text)
    elif kind == "edit_same_mtime":
        if path.is_file() and not path.is_symlink():
            before = path.stat()
            path.write_text(text)
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    elif kind == "delete":
        if path.is_symlink() or path.is_file():
            path.unlink()
    elif kind == "chmod":
        if path.is_file() and not path.is_symlink():
            path.chmod(path.stat().st_mode ^ 0o111)
    elif kind == "symlink":
        write(root, rel, "")
        path.unlink()
        path.symlink_to("x.md")
    elif kind == "folder_over":
        write(root, rel, "")
        path.unlink()
        path.mkdir()
        (path / "inner.md").write_text("inside\n")
    elif kind == "stage":
        write(root, rel, text)
        git(root, "add", "-f", "--", rel)


@pytest.mark.slow
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    initial=st.dictionaries(paths, st.sampled_from(CONTENTS), min_size=1, max_size=10),
    git_made=st.booleans(),
    changes=st.lists(ops, max_size=8),
)
def test_scan_equals_git_status(
    initial: dict[str, str], git_made: bool, changes: list[tuple[str, str, Any]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "notes"
        Workspace.init(root).close()
        (root / ".gitignore").write_text((root / ".gitignore").read_text() + "*.log\nign/\n")
        for rel, text in initial.items():
            write(root, rel, text)
        if git_made:  # git's index entries carry stat data
            git(root, "add", "-A")
            git(root, "commit", "-q", "-m", "notes")
        with Workspace.open(root) as ws:
            if not git_made:  # mnoted's entries carry none
                ws.commit_external(ws.scan_changes())
                ws.idle()
            assert ws.scan_changes() == []
            assert git_changed(root) == set()
            for op in changes:
                apply_op(root, op)
            ours = ws.scan_changes()
            assert ws.scan_changes(whole_tree=changes_by_git) == ours  # the start-up pass's way
            assert set(ours) == git_changed(root)  # git status also refreshes the index
            assert set(ws.scan_changes()) == set(ours)
            assert set(ws.scan_changes(["a", "c", "x.md"])) == {
                p for p in ours if p == "x.md" or p.startswith(("a/", "c/", "x.md/"))
            }
            assert set(ws.scan_changes(shallow=["a"])) == {
                p for p in ours if p.startswith("a/") and "/" not in p[2:]
            }


def count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    hashed: list[str] = []
    real = scan._hash_at

    def counting(fd: int, name: str, st: os.stat_result) -> Any:
        hashed.append(name)
        return real(fd, name, st)

    monkeypatch.setattr(scan, "_hash_at", counting)
    return hashed


def test_only_files_whose_stat_differs_are_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "notes"
    Workspace.init(root).close()
    for i in range(50):
        write(root, f"d{i % 5}/n{i}.md", f"note {i}\n")
    old = time.time_ns() - 10 * 10**9  # older than the index written next: not racy
    for path in root.rglob("n*.md"):
        os.utime(path, ns=(old, old))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "notes")
    hashed = count_hashes(monkeypatch)
    with Workspace.open(root) as ws:
        # mnoted's own entries (template files) carry no stat data: hashed, once
        assert ws.scan_changes() == []
        first = sorted(hashed)
        assert not any(name.startswith("n") for name in first)
        hashed.clear()
        assert ws.scan_changes() == []
        assert all(name in first for name in hashed)
        hashed.clear()
        (root / "d1" / "n6.md").write_text("note X\n")  # same size: only content tells
        assert ws.scan_changes() == ["d1/n6.md"]
        assert hashed == ["n6.md"]
        hashed.clear()
        (root / "d2" / "n7.md").write_text("a different size\n")  # size alone tells
        assert ws.scan_changes() == ["d1/n6.md", "d2/n7.md"]
        assert "n7.md" not in hashed


def test_a_file_as_new_as_the_index_is_hashed_though_its_stat_matches(tmp_path: Path) -> None:
    """Racy Git: a write in the clock tick the index was written in leaves the stat alone."""
    root = tmp_path / "w"
    root.mkdir()
    (root / "a.md").write_text("after\n")
    st = os.lstat(root / "a.md")
    entry = (
        0o100644,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        st.st_ino & 0xFFFFFFFF,
        bytes.fromhex("0" * 40),  # what the index says: other content of the same size
    )

    def changed(index_mtime: int) -> set[str]:
        index = indexstat.IndexStat({"a.md": entry}, index_mtime)
        walk = scan.Walk(root, index, StatCache(), lambda _: False)
        walk.tree("")
        return walk.result()

    assert changed(st.st_mtime_ns) == {"a.md"}  # same tick as the index: hashed
    assert changed(st.st_mtime_ns + 1) == set()  # older than the index: the stat vouches


def test_a_folder_swapped_for_a_symlink_is_not_walked(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.md").write_text("SECRET\n")
    (outside / "evil.md").write_text("SECRET\n")
    Workspace.init(root).close()
    write(root, "sub/x.md", "mine\n")
    with Workspace.open(root) as ws:
        ws.commit_external(ws.scan_changes())
        ws.idle()
        os.rename(root / "sub", tmp_path / "aside")
        (root / "sub").symlink_to(outside)
        before = (outside / "evil.md").stat().st_atime_ns, outside.stat().st_atime_ns
        os.utime(outside / "evil.md", ns=(1, (outside / "evil.md").stat().st_mtime_ns))
        os.utime(outside, ns=(1, outside.stat().st_mtime_ns))
        assert before  # listing or reading the outside would move these atimes
        found = ws.scan_changes()
        assert set(found) == git_changed(root) == {"sub", "sub/x.md"}
        assert (outside / "evil.md").stat().st_atime_ns == 1
        assert outside.stat().st_atime_ns == 1


def test_index_versions_and_intent_to_add_parse_alike(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    git(root, "init", "-q")
    for i in range(30):
        write(root, f"f{i % 3}/deep/{'n' * (i + 1)}.md", f"{i}\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "x")
    write(root, "new.md", "new\n")
    git(root, "add", "-N", "new.md")  # an extended flag: version 3
    parsed = {}
    for version in ("3", "4", "2"):
        if version != "2":
            git(root, "update-index", "--index-version", version)
        else:
            git(root, "rm", "-q", "--cached", "new.md")
            git(root, "update-index", "--index-version", "2")
        parsed[version] = indexstat.load(root / ".git" / "index").entries
    assert parsed["3"] == parsed["4"]
    assert {k: v for k, v in parsed["3"].items() if k != "new.md"} == parsed["2"]
    assert len(parsed["2"]) == 30


def test_a_commit_made_elsewhere_is_seen_by_the_staged_check(ws: Workspace) -> None:
    root = ws.root
    ws.apply(CommandMeta("page.create", actor="t"), [Write("p.md", b"# P\n")])
    ws.idle()
    assert ws.scan_changes() == []
    write(root, "p.md", "# P staged\n")
    git(root, "add", "p.md")
    write(root, "p.md", "# P\n")  # back to HEAD on disk, the index still differs
    assert ws.scan_changes() == ["p.md"] and git_changed(root) == {"p.md"}
    git(root, "commit", "-q", "-m", "by git")
    assert ws.scan_changes() == ["p.md"] == sorted(git_changed(root))
    git(root, "checkout", "-q", "--", "p.md")
    assert ws.scan_changes() == []


def test_moved_from_names_the_committed_path_a_file_left(ws: Workspace) -> None:
    root = ws.root
    ws.apply(CommandMeta("page.create", actor="t"), [Write("a.md", b"# A\n")])
    ws.apply(CommandMeta("page.create", actor="t"), [Write("b.md", b"# A\n")])
    (root / "new").mkdir()
    os.rename(root / "a.md", root / "new" / "a.md")
    assert ws.moved_from(["new/a.md"]) == ["a.md"]  # b.md holds the same, but is still there
    (root / "new" / "a.md").write_text("# A, edited\n")
    assert ws.moved_from(["new/a.md"]) == []


def test_the_parsed_index_is_carried_over_mnoted_refreshes(ws: Workspace) -> None:
    """After mnoted refreshes index entries, the scan's parsed index is updated in place,
    not parsed again; it must say what the file says, and the scan what git status says."""
    from mnoted.store import Delete

    meta = CommandMeta("page.create", actor="t")
    ws.apply(meta, [Write("a/x.md", b"x\n"), Write("b/y.md", b"y\n"), Write("c.md", b"c\n")])
    ws.idle()
    assert ws.scan_changes() == []
    parsed = ws.external.index_cache
    ws.apply(meta, [Write("a/x.md", b"x2\n"), Delete("b/y.md"), Write("d/e/f.md", b"f\n")])
    ws.apply(meta, [Delete("c.md")])
    ws.apply(meta, [Write("c.md/inner.md", b"now a folder\n")])
    write(ws.root, "a/x.md", "edited outside\n")
    ws.idle()
    assert ws.external.index_cache is not None and parsed is not None
    assert ws.external.index_cache[1] is parsed[1]  # updated, not parsed again
    fresh = indexstat.load(ws.gitdir / "index")
    carried = ws.external.index_cache[1]
    assert {p: (e[0], e[5]) for p, e in carried.entries.items()} == {
        p: (e[0], e[5]) for p, e in fresh.entries.items()
    }
    assert ws.scan_changes() == ["a/x.md"] == sorted(git_changed(ws.root))


def test_a_smudged_entry_is_read_not_taken_for_a_size_change(tmp_path: Path) -> None:
    """Git writes size 0 for an entry that was racily clean when it wrote the index: the
    file must be compared by content (unchanged here), not reported for its size."""
    root = tmp_path / "w"
    root.mkdir()
    (root / "a.md").write_text("same\n")
    st = os.lstat(root / "a.md")
    oid = pygit2.hash(b"same\n").raw
    smudged = (0o100644, 0, st.st_mtime_ns, st.st_ctime_ns, st.st_ino & 0xFFFFFFFF, oid)
    index = indexstat.IndexStat({"a.md": smudged}, st.st_mtime_ns + 1)
    walk = scan.Walk(root, index, StatCache(), lambda _: False)
    walk.tree("")
    assert walk.result() == set()
    (root / "a.md").write_text("diff\n")
    walk = scan.Walk(root, index, StatCache(), lambda _: False)
    walk.tree("")
    assert walk.result() == {"a.md"}


def test_assume_unchanged_and_skip_worktree_entries_are_not_compared(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    Workspace.init(root).close()
    write(root, "a.md", "a\n")
    write(root, "b.md", "b\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "x")
    git(root, "update-index", "--assume-unchanged", "a.md")
    git(root, "update-index", "--skip-worktree", "b.md")
    write(root, "a.md", "a changed\n")
    write(root, "b.md", "b changed\n")
    with Workspace.open(root) as ws:
        assert ws.scan_changes() == [] and git_changed(root) == set()
        (root / "b.md").unlink()  # as a sparse checkout leaves it
        assert ws.scan_changes() == [] and git_changed(root) == set()


def test_a_submodule_and_a_nested_repository_are_not_ours(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    write(other, "o.md", "other\n")
    git(other, "add", "-A")
    git(other, "commit", "-q", "-m", "o")
    root = tmp_path / "notes"
    Workspace.init(root).close()
    git(root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(other), "sub")
    git(root, "commit", "-q", "-m", "submodule")
    nested = root / "nested"
    nested.mkdir()
    git(nested, "init", "-q")
    write(nested, "n.md", "not ours\n")
    write(root, "sub/o.md", "edited inside the submodule\n")
    with Workspace.open(root) as ws:
        assert ws.scan_changes() == []
        assert ws.scan_changes(whole_tree=changes_by_git) == []
        assert ws.scan_changes(["sub", "nested"]) == []
        with pytest.raises(PathRejected, match=r"another Git repository \(sub/\.git\)") as info:
            ws.apply(CommandMeta("page.create", actor="a"), [Write("sub/new.md", b"x")])
        assert "sub is a submodule" in info.value.hint
    assert git_changed(root) == {"sub", "nested/"}  # git lists both; mnoted commits neither


def test_a_nested_repositorys_files_are_neither_committed_nor_written(tmp_path: Path) -> None:
    """A repository cloned into the workspace: the watcher reports its files one by one.
    Each path was committed, the clone's history copied into the notes' (where `git add -A`
    adds nothing of it), and an agent could create pages in the other repository's work
    tree. A folder that HEAD tracks stays the notes' own, `.git` in it or not, as for Git."""
    root = tmp_path / "notes"
    Workspace.init(root).close()
    write(root, "kept/k.md", "tracked\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "kept")
    clone = root / "vendor" / "other"
    clone.mkdir(parents=True)
    git(clone, "init", "-q")
    write(clone, "o.md", "other\n")
    write(clone, "deep/x.md", "deeper\n")
    git(root / "kept", "init", "-q")  # a repository begun in a folder the notes track
    write(root, "kept/k.md", "edited\n")
    write(root, "kept/saved.md", "new beside it\n")  # `git add -A` adds it: kept/ is tracked
    inside = ["vendor/other/o.md", "vendor/other/deep/x.md"]
    with Workspace.open(root) as ws:
        assert ws.scan_changes([*inside, "vendor/other/deep"]) == []
        assert ws.scan_changes(["kept/k.md", "kept/saved.md"]) == ["kept/k.md", "kept/saved.md"]
        made = ws.commit_external([*inside, "kept/k.md", "kept/saved.md"])
        assert made is not None and made.paths == ("kept/k.md", "kept/saved.md")
        ws.apply(CommandMeta("page.create", actor="a"), [Write("kept/agent.md", b"# A\n")])
        with pytest.raises(PathRejected, match=r"another Git repository \(vendor/other/\.git\)"):
            ws.apply(CommandMeta("page.create", actor="a"), [Write("vendor/other/new.md", b"x")])
        with pytest.raises(PathRejected, match="another Git repository"):
            ws.check_writable([Write("vendor/other/deep/new.md", b"x")])
        ws.apply(CommandMeta("page.create", actor="a"), [Write("vendor/mine.md", b"# Mine\n")])
        ws.flush_index()
        assert ws.scan_changes() == []
    assert git(root, "ls-files", "vendor") == "vendor/mine.md\n"
    assert git(root, "ls-files", "kept").split() == ["kept/agent.md", "kept/k.md", "kept/saved.md"]
    assert not (clone / "new.md").exists()
    assert git_changed(root) == {"vendor/other/"}  # as git lists it: one entry, not ours


def test_editors_temp_files_are_passed_over_as_the_watcher_passes_them(tmp_path: Path) -> None:
    """The watcher never commits an editor's temp, swap or backup file; the start-up and
    periodic passes committed every one they met (Emacs' `#x.md#` while the note is open,
    Kate's swap file), so a note open in an editor put its swap file into history. A file
    HEAD has under such a name is still the notes' own."""
    root = tmp_path / "notes"
    Workspace.init(root).close()
    write(root, "old~", "committed before\n")
    git(root, "add", "-f", "old~")  # (the template's .gitignore has `*~`)
    git(root, "commit", "-q", "-m", "a backup someone committed")
    temps = ["#x.md#", "d/x.md.kate-swp", "sedAb12Cd", ".~lock.x.odt#", "d/x.md~"]
    for name in temps:
        write(root, name, "temp\n")
    write(root, "old~", "edited\n")
    write(root, "d/x.md", "# x\n")
    with Workspace.open(root) as ws:
        everything = ["#x.md#", ".~lock.x.odt#", "d/x.md", "d/x.md.kate-swp", "old~", "sedAb12Cd"]
        assert ws.scan_changes() == everything  # (`d/x.md~`: the template's .gitignore)
        ws.left_alone = is_temp
        assert ws.scan_changes() == ["d/x.md", "old~"]
        assert ws.scan_changes(whole_tree=changes_by_git) == ["d/x.md", "old~"]
        assert ws.scan_changes([*temps, "old~"]) == ["old~"]


def test_a_file_whose_name_is_not_utf8_is_left_alone(tmp_path: Path) -> None:
    """A file unpacked from an old archive, named in Latin-1: the walk raised
    UnicodeEncodeError on it (in Git's ignore lookup), and with it every change beside it
    went uncommitted."""
    with Workspace.init(tmp_path / "n") as ws:
        root = bytes(ws.root)
        for name in (b"caf\xe9.md", b"old\xff/note.md"):
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(b"# Caf\xe9\n")
        (ws.root / "plain.md").write_text("# Plain\n")
        changed = ws.scan_changes()
        assert set(changed) == {"plain.md"}, changed
        listed = changes_by_git(ws.root) or set()  # (what the start-up pass commits from)
        assert ws.commit_external(sorted(listed | set(changed))) is not None
        committed = git(ws.root, "ls-tree", "-r", "--name-only", "HEAD").split()
        assert "plain.md" in committed and not any("caf" in p or "old" in p for p in committed)


_PATHS = st.sampled_from(["a", "a/b", "a/b/c", "a/d", "a.md", "ab", "b", "b/c"])


@given(
    start=st.sets(_PATHS),
    steps=st.lists(st.dictionaries(_PATHS, st.none() | st.just((0o100644, b"\1" * 20)))),
    sorted_first=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_updates_keep_the_sorted_paths_in_step(
    start: set[str], steps: list[dict[str, tuple[int, bytes] | None]], sorted_first: bool
) -> None:
    """The carried index keeps its sorted paths across updates (added, removed, folders
    replaced by files) as a parse of the result would have them."""
    stat = indexstat.IndexStat({p: (0o100644, 0, 0, 0, 0, b"\0" * 20) for p in start}, 0)
    if sorted_first:  # (else the first update is the first to ask for them)
        assert stat.sorted_paths == sorted(start)
    for changes in steps:
        stat.update(changes)
        assert stat.sorted_paths == sorted(stat.entries)
        for folder in ("a", "a/b", "b"):
            assert list(stat.under(folder)) == sorted(
                p for p in stat.entries if p.startswith(folder + "/")
            )
