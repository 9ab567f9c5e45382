"""Each editor's real save sequence, on a real inotify watcher: its paths settled once per save.

The file operations below are the system calls those editors make (as seen
with strace): creat/write/close, rename, unlink, symlink for Emacs' lock,
ftruncate for VS Code. Nothing is faked but the editors themselves.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from mnoted.store import dirfd
from mnoted.sync.debounce import DebounceConfig
from mnoted.sync.ignore import IgnoreRules
from mnoted.sync.own_writes import blob_id
from tests.sync.conftest import QUIET

if TYPE_CHECKING:
    from conftest import QuietFn, RecordingSink, WatcherFactory

    from mnoted.sync.watcher import Watcher


def write(path: Path, data: bytes, flags: int = os.O_CREAT | os.O_TRUNC) -> None:
    fd = os.open(path, os.O_WRONLY | flags, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def vim_nowritebackup_probe(d: Path) -> None:
    probe = d / "4913"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    os.close(fd)
    os.unlink(probe)


def vim_backupcopy_no(root: Path, _: Path) -> None:
    write(root / ".x.md.swp", b"swap 1")  # the swap file is written while editing
    vim_nowritebackup_probe(root)
    os.rename(root / "x.md", root / "x.md~")
    write(root / "x.md", b"# x\nedited in vim\n")
    os.chmod(root / "x.md", 0o644)
    os.unlink(root / "x.md~")
    write(root / ".x.md.swp", b"swap 2")


def vim_backupcopy_yes(root: Path, _: Path) -> None:
    vim_nowritebackup_probe(root)
    shutil.copyfile(root / "x.md", root / "x.md~")
    write(root / "x.md", b"# x\nedited in vim (backupcopy=yes)\n", os.O_TRUNC)
    os.unlink(root / "x.md~")


def jetbrains(root: Path, _: Path) -> None:
    write(root / "x.md___jb_tmp___", b"# x\nedited in IntelliJ\n")
    os.rename(root / "x.md", root / "x.md___jb_old___")
    os.rename(root / "x.md___jb_tmp___", root / "x.md")
    os.unlink(root / "x.md___jb_old___")


def gedit(root: Path, _: Path) -> None:
    write(root / ".goutputstream-8KZ2V1", b"# x\nedited in gedit\n")
    os.rename(root / ".goutputstream-8KZ2V1", root / "x.md")


def emacs(root: Path, _: Path) -> None:
    os.symlink("tester@host.4242:1700000000", root / ".#x.md")  # lock, a dangling link
    write(root / "#x.md#", b"auto-save")
    os.rename(root / "x.md", root / "x.md~")  # first save of the session keeps a backup
    write(root / "x.md", b"# x\nedited in emacs\n")
    os.unlink(root / "#x.md#")
    os.unlink(root / ".#x.md")


def vscode(root: Path, _: Path) -> None:
    fd = os.open(root / "x.md", os.O_WRONLY)
    try:
        os.ftruncate(fd, 0)  # first IN_MODIFY
        os.write(fd, b"# x\nedited in VS Code\n")  # second IN_MODIFY
    finally:
        os.close(fd)


def sed_i(root: Path, _: Path) -> None:
    fd = os.open(root / "sedQ7a9Zk", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"# x\nedited with sed\n")
    os.fchmod(fd, 0o644)
    os.close(fd)
    os.rename(root / "sedQ7a9Zk", root / "x.md")


def sed_i_real(root: Path, _: Path) -> None:
    subprocess.run(["sed", "-i", "s/original/changed by GNU sed/", str(root / "x.md")], check=True)


def cp_new(root: Path, outside: Path) -> None:
    shutil.copyfile(outside, root / "copy.md")


def cp_over(root: Path, outside: Path) -> None:
    shutil.copyfile(outside, root / "x.md")


def mv_within(root: Path, _: Path) -> None:
    os.rename(root / "x.md", root / "y.md")


def mv_across(root: Path, _: Path) -> None:
    os.rename(root / "d1" / "a.md", root / "d2" / "a.md")


def mv_in_from_outside(root: Path, outside: Path) -> None:
    os.rename(outside, root / "arrived.md")


def mv_out(root: Path, outside: Path) -> None:
    os.rename(root / "x.md", outside.parent / "left.md")


def delete(root: Path, _: Path) -> None:
    os.unlink(root / "x.md")


def delete_recreate(root: Path, _: Path) -> None:
    os.unlink(root / "x.md")
    write(root / "x.md", b"# x\nrecreated\n")


def folder_rename(root: Path, _: Path) -> None:
    os.rename(root / "d1", root / "renamed")


def mnoted_unregistered_atomic_write(root: Path, _: Path) -> None:
    write(root / ".mnote-tmp-5f1c", b"# x\nwritten by another mnoted\n")
    os.replace(root / ".mnote-tmp-5f1c", root / "x.md")


def mnoted_abandoned_temp_file(root: Path, _: Path) -> None:
    write(root / ".mnote-tmp-x.md-0bad", b"# x\na write that failed\n")
    os.unlink(root / ".mnote-tmp-x.md-0bad")


def mnoted_temp_file_moved_in(root: Path, outside: Path) -> None:
    os.rename(outside, root / ".mnote-tmp-x.md-1a2b")  # made elsewhere, then put in place
    os.rename(root / ".mnote-tmp-x.md-1a2b", root / "x.md")


def git_commit(root: Path, _: Path) -> None:
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "by git"], check=True)
    subprocess.run(["git", "-C", str(root), "gc", "-q"], check=True)


@dataclass(frozen=True)
class Case:
    act: Callable[[Path, Path], None]
    expected: list[str]


CASES: dict[str, Case] = {
    "vim_backupcopy_no": Case(vim_backupcopy_no, ["x.md"]),
    "vim_backupcopy_yes": Case(vim_backupcopy_yes, ["x.md"]),
    "jetbrains": Case(jetbrains, ["x.md"]),
    "gedit": Case(gedit, ["x.md"]),
    "emacs": Case(emacs, ["x.md"]),
    "vscode": Case(vscode, ["x.md"]),
    "sed_i": Case(sed_i, ["x.md"]),
    "sed_i_gnu": Case(sed_i_real, ["x.md"]),
    "cp_new": Case(cp_new, ["copy.md"]),
    "cp_over": Case(cp_over, ["x.md"]),
    "mv_within": Case(mv_within, ["x.md", "y.md"]),
    "mv_across": Case(mv_across, ["d1/a.md", "d2/a.md"]),
    "mv_in": Case(mv_in_from_outside, ["arrived.md"]),
    "mv_out": Case(mv_out, ["x.md"]),
    "delete": Case(delete, ["x.md"]),
    "delete_recreate": Case(delete_recreate, ["x.md"]),
    "folder_rename": Case(
        folder_rename, ["d1/a.md", "d1/sub/b.md", "renamed/a.md", "renamed/sub/b.md"]
    ),
    "atomic_write": Case(mnoted_unregistered_atomic_write, ["x.md"]),
    "abandoned_temp_file": Case(mnoted_abandoned_temp_file, []),
    "temp_file_moved_in": Case(mnoted_temp_file_moved_in, ["x.md"]),
    "git_commit": Case(git_commit, []),
}


def seed(root: Path) -> None:
    (root / "x.md").write_text("# x\noriginal\n")
    for d in ("d1", "d2", "d1/sub"):
        (root / d).mkdir()
    (root / "d1" / "a.md").write_text("a\n")
    (root / "d1" / "sub" / "b.md").write_text("b\n")


def delivered(sink: RecordingSink) -> list[str]:
    return sorted(sink.paths)


def assert_no_temp_names(sink: RecordingSink) -> None:
    rules = IgnoreRules()
    for path in sink.paths:
        assert not rules(path), f"temp or internal path delivered: {path}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_save_settles_its_paths_once(
    name: str,
    workspace: Path,
    tmp_path: Path,
    make_watcher: WatcherFactory,
    sink: RecordingSink,
    quiet: QuietFn,
) -> None:
    case = CASES[name]
    seed(workspace)
    outside = tmp_path / "outside.md"
    outside.write_text("# from outside\n")
    watcher = make_watcher()
    case.act(workspace, outside)
    if case.expected:
        assert sink.wait(lambda s: len(s.paths) >= len(case.expected)), delivered(sink)
    quiet(watcher)
    assert delivered(sink) == sorted(case.expected)
    assert_no_temp_names(sink)
    # The one change carries the final content: what the store reads when it gets the
    # batch is what is on disk once the editor is done (None: the path is gone).
    for path, data in sink.read_at_delivery:
        final = (workspace / path).read_bytes() if (workspace / path).exists() else None
        assert data == final, path
    if name == "folder_rename":
        assert set(sink.batches[-1].rescan_dirs) >= {"d1", "renamed"}
    health = watcher.health()
    assert health.state == "running" and health.overflows == 0


def test_two_saves_in_separate_windows_are_two_changes(
    workspace: Path, make_watcher: WatcherFactory, sink: RecordingSink, quiet: QuietFn
) -> None:
    seed(workspace)
    watcher = make_watcher()
    vscode(workspace, workspace)
    assert sink.wait(lambda s: len(s.paths) == 1)
    jetbrains(workspace, workspace)
    assert sink.wait(lambda s: len(s.paths) == 2)
    quiet(watcher)
    assert delivered(sink) == ["x.md", "x.md"]


def test_burst_of_1000_files(
    workspace: Path, make_watcher: WatcherFactory, sink: RecordingSink, quiet: QuietFn
) -> None:
    for i in range(10):
        (workspace / f"f{i}").mkdir()
    watcher = make_watcher()
    for i in range(1000):
        write(workspace / f"f{i % 10}" / f"note{i:04}.md", b"burst %d\n" % i)
    assert sink.wait(lambda s: len(s.paths) >= 1000, timeout=20)
    quiet(watcher)
    assert len(sink.paths) == len(set(sink.paths)) == 1000
    assert watcher.health().overflows == 0


def assert_own_rename_dropped(
    workspace: Path, watcher: Watcher, sink: RecordingSink, quiet: QuietFn, temp: Path
) -> None:
    """The store writes x.md in ``temp`` and renames it into place: dropped, and counted."""
    data = b"# x\nwritten by mnoted\n"
    watcher.own_writes.expect("x.md", blob_id(data))
    write(temp, data)
    os.replace(temp, workspace / "x.md")
    quiet(watcher)
    assert sink.paths == []
    assert watcher.health().own_writes_dropped == 1


def test_own_atomic_write_is_dropped_early(
    workspace: Path, make_watcher: WatcherFactory, sink: RecordingSink, quiet: QuietFn
) -> None:
    seed(workspace)
    watcher = make_watcher()
    assert_own_rename_dropped(workspace, watcher, sink, quiet, workspace / ".mnote-tmp-a1b2")
    # A person's edit afterwards is not mistaken for mnoted's.
    write(workspace / "x.md", b"# x\nperson\n")
    assert sink.wait(lambda s: len(s.paths) == 1)
    assert delivered(sink) == ["x.md"]


def test_gitignored_files_never_reach_the_sink(
    workspace: Path, make_watcher: WatcherFactory, sink: RecordingSink, quiet: QuietFn
) -> None:
    import pygit2

    (workspace / ".gitignore").write_text("build/\n*.log\n")
    (workspace / "build").mkdir()
    repo = pygit2.Repository(str(workspace))
    watcher = make_watcher(ignore=IgnoreRules(lambda p: bool(repo.path_is_ignored(p))))
    write(workspace / "build" / "out.md", b"generated")
    write(workspace / "debug.log", b"noise")
    write(workspace / "kept.md", b"kept")
    assert sink.wait(lambda s: len(s.paths) >= 1)
    quiet(watcher)
    assert delivered(sink) == ["kept.md"]


def test_new_nested_folders_written_at_once(
    workspace: Path, make_watcher: WatcherFactory, sink: RecordingSink, quiet: QuietFn
) -> None:
    # mkdir -p then write at once: files may land before their folder's watch exists;
    # the reader reports what it finds when it adds the watch, and the folder is rescanned.
    watcher = make_watcher()
    os.makedirs(workspace / "a" / "b" / "c")
    for d in ("a", "a/b", "a/b/c"):
        write(workspace / d / "n.md", d.encode())
    assert sink.wait(lambda s: len(s.paths) >= 3)
    quiet(watcher)
    assert delivered(sink) == ["a/b/c/n.md", "a/b/n.md", "a/n.md"]
    rescans = {d for b in sink.batches for d in b.rescan_dirs}
    assert "a" in rescans


def test_folder_moved_in_and_out_of_the_workspace(
    workspace: Path,
    tmp_path: Path,
    make_watcher: WatcherFactory,
    sink: RecordingSink,
    quiet: QuietFn,
) -> None:
    seed(workspace)
    incoming = tmp_path / "incoming"
    (incoming / "sub").mkdir(parents=True)
    (incoming / "i.md").write_text("i")
    (incoming / "sub" / "j.md").write_text("j")
    watcher = make_watcher()
    os.rename(incoming, workspace / "incoming")
    os.rename(workspace / "d1", tmp_path / "gone")
    assert sink.wait(lambda s: len(s.paths) >= 2)
    quiet(watcher)
    # Moved in: every file is reported. Moved out: inotify reports only the folder, so
    # the store learns of its files from the rescan.
    assert delivered(sink) == ["incoming/i.md", "incoming/sub/j.md"]
    rescans = {d for b in sink.batches for d in b.rescan_dirs}
    assert {"incoming", "d1"} <= rescans


def test_slow_writer_is_not_settled_half_way(
    workspace: Path, make_watcher: WatcherFactory, sink: RecordingSink, quiet: QuietFn
) -> None:
    # A writer pausing longer than the quiet period (0.15 s) while the file is open:
    # without IN_CLOSE_WRITE in the event set the first half would settle on its own. (A
    # close timeout of seconds: a loaded machine may stretch the pause well past 0.3 s.)
    seed(workspace)
    watcher = make_watcher(debounce=DebounceConfig(QUIET, 10.0, 5.0))
    with open(workspace / "x.md", "wb", buffering=0) as f:
        f.write(b"# x\nfirst half\n")
        time.sleep(0.3)
        f.write(b"second half\n")
    assert sink.wait(lambda s: len(s.paths) >= 1)
    quiet(watcher)
    assert delivered(sink) == ["x.md"]
    assert sink.read_at_delivery == [("x.md", b"# x\nfirst half\nsecond half\n")]


def test_own_write_from_a_spare_file_is_dropped_early(
    workspace: Path, make_watcher: WatcherFactory, sink: RecordingSink, quiet: QuietFn
) -> None:
    """The store writes most files in a spare made in its state folder (in .git: not watched) and
    renames it into place: the page's folder sees only the IN_MOVED_TO."""
    seed(workspace)
    spares = workspace / ".git" / "mnote" / "state" / "spares"
    spares.mkdir(parents=True)
    watcher = make_watcher()
    assert_own_rename_dropped(workspace, watcher, sink, quiet, spares / "spare-1-1")
    # Content other than the store said it wrote is an edit like any other.
    write(spares / "spare-1-2", b"# x\nnot what mnoted wrote\n")
    os.replace(spares / "spare-1-2", workspace / "x.md")
    assert sink.wait(lambda s: len(s.paths) == 1)
    assert delivered(sink) == ["x.md"]  # moved in: the store compares


def exchange(a: Path, b: Path) -> None:
    """Swap two files as the store puts a spare in place of a page's old file (the page
    first)."""
    fa, fb = os.open(a.parent, os.O_RDONLY), os.open(b.parent, os.O_RDONLY)
    try:
        dirfd.exchange(fa, a.name, fb, b.name)
    finally:
        os.close(fa)
        os.close(fb)


def test_own_write_exchanged_with_the_old_file_is_dropped_early(
    workspace: Path, make_watcher: WatcherFactory, sink: RecordingSink, quiet: QuietFn
) -> None:
    """A spare exchanged with the page's old file (``renameat2(RENAME_EXCHANGE)``) moves the
    old file out and the new one in: the page's folder sees an IN_MOVED_FROM and then an
    IN_MOVED_TO of the same name, both dropped while the name holds the store's bytes."""
    seed(workspace)
    spares = workspace / ".git" / "mnote" / "state" / "spares"
    spares.mkdir(parents=True)
    watcher = make_watcher()
    data = b"# x\nwritten by mnoted\n"
    watcher.own_writes.expect("x.md", blob_id(data))
    write(spares / "spare-1-1", data)
    seen = watcher.health().events_seen
    reads: list[str] = []
    read = watcher._read_blob
    watcher._read_blob = lambda rel: reads.append(rel) or read(rel)
    exchange(workspace / "x.md", spares / "spare-1-1")
    quiet(watcher)
    assert sink.paths == []
    health = watcher.health()
    assert health.own_writes_dropped == 2
    assert health.events_seen == seen  # neither half reached the debouncer
    assert reads == ["x.md"]  # the second half found the file the first one read
    # The same exchange with bytes the store did not write is an edit: the page changed.
    write(spares / "spare-1-1", b"# x\nnot what mnoted wrote\n")
    exchange(workspace / "x.md", spares / "spare-1-1")
    assert sink.wait(lambda s: len(s.paths) >= 1)
    quiet(watcher)
    assert set(sink.paths) == {"x.md"}
