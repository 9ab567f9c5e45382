"""One command, one commit: message and trailers (read back with the real git), authors,
incremental trees, the index agreeing with HEAD, external edits committed first."""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from pathlib import Path

import pygit2
import pytest

from mnoted.errors import (
    Conflict,
    InvalidArguments,
    NotFound,
    PathRejected,
    TooLarge,
    WorkspaceInvalid,
)
from mnoted.store import (
    CommandMeta,
    Delete,
    Identity,
    Move,
    Workspace,
    Write,
    dirfd,
    gitindex,
    indexkeeper,
)
from mnoted.store.indexkeeper import IndexKeeper
from mnoted.store.workspace import OBJECT_CACHE_BYTES
from tests.store.conftest import assert_clean, git

META = CommandMeta(
    "page.body.save",
    actor="hermes",
    command_id="page_body_save_1",
    trace_id="trace_1",
    tool="mnote.page.save",
    tool_call_id="call_123",
    run_id="run_123",
    session_id="mnote_doc_1_trace_1",
    idempotency_key="idem_123",
    request_hash="sha256:abc",
)


def commits(root: Path) -> list[str]:
    return git(root, "rev-list", "HEAD").split()


def test_trailers_are_real_git_trailers(ws: Workspace) -> None:
    result = ws.apply(META, [Write("notes/plan.md", b"# Plan\n")])
    root = ws.root
    fmt = "%(trailers:key=Mnote-Trace-Id,valueonly)"
    assert git(root, "log", "-1", f"--format={fmt}").strip() == "trace_1"
    assert git(root, "log", "-1", "--format=%s").strip() == "page.body.save: notes/plan.md"
    body = git(root, "log", "-1", "--format=%B")
    parsed = git(root, "interpret-trailers", "--parse", input_text=body)
    assert parsed.splitlines() == [
        "Mnote-Command-Id: page_body_save_1",
        "Mnote-Trace-Id: trace_1",
        "Mnote-Tool: mnote.page.save",
        "Mnote-Tool-Call-Id: call_123",
        "Mnote-Run-Id: run_123",
        "Mnote-Session-Id: mnote_doc_1_trace_1",
        "Mnote-Actor: hermes",
        "Mnote-Idempotency-Key: idem_123",
        "Mnote-Request-Hash: sha256:abc",
    ]
    assert git(root, "log", "-1", "--format=%an <%ae>|%cn <%ce>").strip() == (
        "hermes <hermes@mnote.local>|mnoted <mnoted@mnote.local>"
    )
    assert git(root, "log", "--grep=Mnote-Trace-Id: trace_1", "--format=%H").strip() == (
        result.commit
    )
    assert result.commit == ws.head == ws.revision_of("notes/plan.md")


def test_absent_trailers_are_left_out(ws: Workspace) -> None:
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("a.md", b"a\n")])
    body = git(ws.root, "log", "-1", "--format=%B")
    keys = [line.split(":")[0] for line in body.strip().splitlines()[2:]]
    assert keys == ["Mnote-Command-Id", "Mnote-Actor"]


def test_one_command_is_one_commit_and_status_is_clean(ws: Workspace) -> None:
    before = len(commits(ws.root))
    ws.apply(META, [Write("a.md", b"a\n"), Write("dir/b.md", b"b\n"), Write("dir/c/d.md", b"d")])
    assert len(commits(ws.root)) == before + 1
    ws.apply(CommandMeta("page.move", actor="hermes"), [Move("a.md", "dir/c/a.md")])
    ws.apply(CommandMeta("page.delete", actor="hermes"), [Delete("dir/b.md")])
    assert len(commits(ws.root)) == before + 3
    assert not (ws.root / "a.md").exists() and not (ws.root / "dir/b.md").exists()
    assert (ws.root / "dir/c/a.md").read_bytes() == b"a\n"
    ws.idle()
    assert_clean(ws.root)
    delete = CommandMeta("page.delete", actor="hermes")
    ws.apply(delete, [Delete("dir/c/a.md"), Delete("dir/c/d.md")])
    assert not (ws.root / "dir").exists()  # emptied folders go, as with git
    ws.idle()
    assert_clean(ws.root)


def test_the_git_index_is_written_into_the_one_it_replaced_unless_someone_reads_that(
    ws: Workspace,
) -> None:
    """Each landing puts a new Git index in place. The file it replaced is kept as the spare
    and written into at the next landing (only what changed since), unless someone still has
    it open (a ``git status`` begun before it was replaced): then a new file is written. The
    index is right after every write, and the spare goes when the workspace closes."""
    index, spare = ws.root / ".git" / "index", ws.root / ".git" / "mnote" / "index.spare"

    def write(n: int, path: str = "a.md") -> int:
        ws.apply(CommandMeta("page.save", actor="hermes"), [Write(path, f"# {n}\n".encode())])
        quiet = "--no-optional-locks"  # (a `git status` may write the index itself)
        assert git(ws.root, quiet, "diff", "--cached", "--name-status") == ""
        assert git(ws.root, quiet, "status", "--porcelain") == ""
        return index.stat().st_ino

    first = write(1)
    second = write(2, "dir/new.md")  # (an entry added: the parts after it shift)
    assert spare.stat().st_ino == first
    assert write(3) == first  # the spare, written again
    assert spare.stat().st_ino == second
    with spare.open("rb"):  # someone reading the index that was replaced
        fourth = write(4, "dir/other.md")
    assert fourth not in (first, second)
    assert write(5) == first  # (the spare the last landing kept)
    git(ws.root, "status")  # Git writes an index of its own: that one is the next spare
    by_git = index.stat().st_ino
    assert write(6) == fourth and spare.stat().st_ino == by_git
    assert write(7) == by_git
    ws.close()
    assert not spare.exists()


def test_an_index_someone_wrote_is_rewritten_only_where_it_lags_head(ws: Workspace) -> None:
    """A person's `git status` writes the index just after a landing set its entries: the
    store does not rewrite it then (its refresh would hold index.lock against their next
    command). An index written back with a landed entry reverted (a `git merge` that read
    it before the landing) is set right."""
    index = ws.root / ".git" / "index"
    meta = CommandMeta("page.save", actor="hermes")
    ws.apply(meta, [Write("a.md", b"# 1\n")])
    git(ws.root, "status")  # (writes an index of its own)
    written = index.stat()
    ws.idle()
    assert ws.git_index._pending_entries() == {}
    after = index.stat()
    assert (after.st_ino, after.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    before_landing = index.read_bytes()
    ws.apply(meta, [Write("a.md", b"# 2\n")])
    index.write_bytes(before_landing)  # the landed entry reverted
    assert git(ws.root, "diff", "--cached", "--name-only") == "a.md\n"
    ws.idle()
    assert git(ws.root, "diff", "--cached", "--name-only") == ""
    assert_clean(ws.root)


def test_only_trees_on_the_changed_path_are_rewritten(ws: Workspace) -> None:
    ws.apply(META, [Write(f"big/{i}.md", b"x%d" % i) for i in range(50)] + [Write("o/p.md", b"p")])
    repo = pygit2.Repository(str(ws.root))
    before = repo.head.peel(pygit2.Commit).tree
    ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("o/p.md", b"new")])
    after = pygit2.Repository(str(ws.root)).head.peel(pygit2.Commit).tree
    assert before["big"].id == after["big"].id
    assert before["o"].id != after["o"].id


def test_executable_bit_is_kept(ws: Workspace) -> None:
    script = ws.root / "run.sh"
    script.write_bytes(b"#!/bin/sh\n")
    os.chmod(script, 0o755)
    ws.commit_external(["run.sh"])
    ws.apply(CommandMeta("file.save", actor="hermes"), [Write("run.sh", b"#!/bin/sh\necho\n")])
    assert os.stat(script).st_mode & 0o111
    assert git(ws.root, "ls-tree", "HEAD", "run.sh").startswith("100755")
    ws.idle()
    assert_clean(ws.root)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o700, 0o664])
def test_a_replaced_files_permissions_are_kept(ws: Workspace, mode: int) -> None:
    """A note kept private (0600) stayed private only until an agent's first edit: the new
    file was written 0644, readable by every user of the machine. Its execute bits are the
    ones Git's mode gives (0700: executable for Git, so kept)."""
    page = ws.root / "diary.md"
    page.write_bytes(b"# Diary\n")
    os.chmod(page, mode)
    ws.commit_external(["diary.md"])
    for i in range(3):  # the old file taken back as a spare, then written over: mode still set
        ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("diary.md", b"v%d\n" % i)])
        ws.idle()
        assert stat.S_IMODE(page.stat().st_mode) == mode, oct(page.stat().st_mode)
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("new.md", b"# New\n")])
    assert stat.S_IMODE((ws.root / "new.md").stat().st_mode) == 0o644
    ws.idle()
    assert_clean(ws.root)


def test_a_write_lands_where_the_file_system_refuses_the_mode(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAT and exFAT give every file one mode and refuse another with EPERM (unless mounted
    `quiet`): setting a written file's mode would fail every write on such a disk. The file now
    keeps the mode its file system gives it."""
    refused: list[int] = []

    def fat_fchmod(fd: int, mode: int) -> None:
        refused.append(mode)
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "fchmod", fat_fchmod)
    for i in range(3):  # a new file, then the same page replaced (a spare, an exchange)
        ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("a.md", b"v%d\n" % i)])
    assert (ws.root / "a.md").read_bytes() == b"v2\n"
    assert refused.count(0o644) == 3  # (and 0o444 for the packs, refused as well)
    ws.idle()
    assert_clean(ws.root)


def test_a_read_only_file_is_neither_replaced_deleted_nor_moved(ws: Workspace) -> None:
    """`chmod a-w` keeps a note from edits; a write replaced it with a writable file."""
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("locked.md", b"# Locked\n")])
    page = ws.root / "locked.md"
    page.chmod(0o444)
    head = ws.head
    for change in (
        Write("locked.md", b"changed\n"),
        Delete("locked.md"),
        Move("locked.md", "m.md"),
    ):
        with pytest.raises(PathRejected, match=r"read-only on disk \(mode 0444\)"):
            ws.apply(CommandMeta("page.body.save", actor="hermes"), [change])
        with pytest.raises(PathRejected) as refused:
            ws.check_writable([change])
        assert refused.value.hint == "Make it writable (chmod u+w 'locked.md') for it to be edited."
    assert ws.head == head and page.read_bytes() == b"# Locked\n"
    assert stat.S_IMODE(page.stat().st_mode) == 0o444
    page.chmod(0o644)
    ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("locked.md", b"changed\n")])
    assert page.read_bytes() == b"changed\n"


def test_external_edit_is_committed_before_the_write(ws: Workspace) -> None:
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"v1\n")])
    git(ws.root, "config", "user.name", "Test User")
    git(ws.root, "config", "user.email", "user@example.com")
    (ws.root / "p.md").write_bytes(b"user edit\n")
    result = ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("p.md", b"v2\n")])
    assert result.external_commit is not None
    assert git(ws.root, "show", f"{result.external_commit}:p.md") == "user edit\n"
    author = git(
        ws.root,
        "log",
        "-1",
        "--format=%an <%ae>|%(trailers:key=Mnote-Actor,valueonly)",
        result.external_commit,
    )
    assert author.strip() == "Test User <user@example.com>|external"
    assert (ws.root / "p.md").read_bytes() == b"v2\n"
    assert git(ws.root, "rev-parse", "HEAD~1").strip() == result.external_commit


def test_the_check_reads_an_edited_file_once(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"v1\n")])
    (ws.root / "p.md").write_bytes(b"an edit made outside, longer\n")
    reads: list[str] = []
    read_at = dirfd.read_at

    def counted(fd: int, name: str) -> tuple[bytes, os.stat_result] | None:
        reads.append(name)
        return read_at(fd, name)

    monkeypatch.setattr(dirfd, "read_at", counted)
    assert ws.commit_external(["p.md"]) is not None
    assert reads == ["p.md"]  # (its stat data unknown to the cache: read once, not twice)


def test_base_blob_guards_against_lost_updates(ws: Workspace) -> None:
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"v1\n")])
    base = ws.blob_id("p.md")
    assert base is not None
    (ws.root / "p.md").write_bytes(b"user edit\n")
    head_before = ws.head
    with pytest.raises(Conflict):
        ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("p.md", b"v2", base)])
    assert ws.head != head_before  # the user's edit got committed, nothing else
    assert (ws.root / "p.md").read_bytes() == b"user edit\n"
    assert ws.read_head("p.md") == b"user edit\n"


def test_commit_external_and_identity(tmp_path: Path) -> None:
    with Workspace.init(tmp_path / "n", external_identity=Identity("Ann", "ann@x.org")) as ws:
        assert ws.commit_external(["Welcome.md"]) is None  # nothing changed
        (ws.root / "new.md").write_bytes(b"hello\n")
        (ws.root / "Welcome.md").unlink()
        (ws.root / "ignored.tmp").write_bytes(b"x")
        result = ws.commit_external(["new.md", "Welcome.md", "ignored.tmp", ".git/config", "../x"])
        assert result is not None and set(result.paths) == {"new.md", "Welcome.md"}
        assert git(ws.root, "log", "-1", "--format=%an").strip() == "Ann"
        assert ws.scan_changes() == []


def test_refusals(ws: Workspace) -> None:
    meta = CommandMeta("x", actor="hermes")
    for bad in ("../x.md", ".git/hooks/post-commit", ".mnote/config.toml", "/abs.md"):
        with pytest.raises(PathRejected):
            ws.apply(meta, [Write(bad, b"x")])
    with pytest.raises(NotFound):
        ws.apply(meta, [Delete("missing.md")])
    with pytest.raises(InvalidArguments):
        ws.apply(meta, [Write("a.md", b"1"), Write("a.md", b"2")])
    with pytest.raises(InvalidArguments):
        ws.apply(meta, [])
    with pytest.raises(TooLarge):
        ws.apply(meta, [Write("a.md", b"x" * (ws.config.max_file_bytes + 1))])
    with pytest.raises(Conflict):
        ws.apply(meta, [Write("b.md", b"b")]) and ws.apply(meta, [Move("Welcome.md", "b.md")])
    os.symlink("/etc", ws.root / "etc")
    with pytest.raises(PathRejected):
        ws.apply(meta, [Write("etc/passwd.md", b"x")])
    assert not list(ws.root.rglob(".mnote-tmp-*"))


def test_user_commits_are_noticed_and_the_branch_never_goes_back(ws: Workspace) -> None:
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"v1\n")])
    ws.idle()
    (ws.root / "q.md").write_text("user\n")
    git(ws.root, "add", "q.md")
    git(ws.root, "commit", "-qm", "user commit")
    user_head = git(ws.root, "rev-parse", "HEAD").strip()
    assert ws.refresh() is True
    assert ws.revision_of("q.md") == user_head
    result = ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("p.md", b"v2\n")])
    assert result.parent == user_head
    ws.idle()
    assert_clean(ws.root)


def test_a_commit_racing_ours_is_not_overwritten(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnoted.store import refs

    real = refs.lock_branch
    raced: list[str] = []

    def racing(*args: object, **kw: object) -> object:
        if not raced:  # the user commits between our read of HEAD and our ref update
            (ws.root / "race.md").write_text("race\n")
            git(ws.root, "add", "race.md")
            git(ws.root, "commit", "-qm", "racing user commit")
            raced.append(git(ws.root, "rev-parse", "HEAD").strip())
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(refs, "lock_branch", racing)
    result = ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"v1\n")])
    assert result.parent == raced[0]
    assert git(ws.root, "rev-list", "--count", f"{raced[0]}..HEAD").strip() == "1"
    ws.idle()
    assert_clean(ws.root)


def test_index_refresh_respects_a_user_index_change(ws: Workspace) -> None:
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"v1\n")])
    ws.idle()
    (ws.root / "staged.md").write_text("staged by the user\n")
    git(ws.root, "add", "staged.md")  # the user's own staged change must survive our refresh
    ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("p.md", b"v2\n")])
    ws.idle()
    assert git(ws.root, "status", "--porcelain").splitlines() == ["A  staged.md"]


def test_packed_refs_and_gc_by_the_user(ws: Workspace) -> None:
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"v1\n")])
    ws.idle()
    git(ws.root, "gc", "-q")  # packs refs and objects behind mnoted's back
    assert not (ws.gitdir / "refs/heads/main").exists()
    result = ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("p.md", b"v2\n")])
    assert git(ws.root, "rev-parse", "main").strip() == result.commit
    ws.idle()
    assert_clean(ws.root)


def test_no_commit_while_the_user_is_merging(ws: Workspace) -> None:
    root = ws.root
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"base\n")])
    ws.idle()
    git(root, "checkout", "-q", "-b", "side")
    (root / "p.md").write_text("side\n")
    git(root, "commit", "-qam", "side")
    git(root, "checkout", "-q", "main")
    (root / "p.md").write_text("main\n")
    git(root, "commit", "-qam", "main")
    git(root, "merge", "side", check=False)  # conflict: the user is mid-merge
    head = git(root, "rev-parse", "HEAD").strip()
    with pytest.raises(WorkspaceInvalid, match="merge"):
        ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("q.md", b"x")])
    assert git(root, "rev-parse", "HEAD").strip() == head
    git(root, "merge", "--abort")
    ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("q.md", b"x")])
    ws.idle()
    assert_clean(root)


@pytest.mark.parametrize(
    "change",
    [
        Write("scratch.tmp", b"new\n"),
        Write("private/new.md", b"# New\n"),
        Move("a.md", "private/a.md"),
    ],
    ids=["over-an-ignored-file", "new-in-an-ignored-folder", "move-into-it"],
)
def test_a_write_that_would_add_a_file_git_ignores_is_refused(
    ws: Workspace, change: Write | Move
) -> None:
    """Every write is a commit: one at a path Git ignores would put into history what
    .gitignore keeps out (an agent's page in a private folder, pushed with the rest)."""
    (ws.root / ".gitignore").write_text((ws.root / ".gitignore").read_text() + "private/\n")
    (ws.root / "a.md").write_text("# A\n")
    ws.commit_external([".gitignore", "a.md"])
    (ws.root / "scratch.tmp").write_bytes(b"precious\n")  # matches the template's "*.tmp"
    head = git(ws.root, "rev-parse", "HEAD")
    with pytest.raises(PathRejected, match="is ignored") as caught:
        ws.apply(CommandMeta("file.save", actor="hermes"), [change])
    where = (
        ".mnote/config.toml"
        if isinstance(change, Write) and change.path == "scratch.tmp"
        else ".gitignore"
    )
    assert where in caught.value.hint
    assert git(ws.root, "rev-parse", "HEAD") == head
    assert (ws.root / "scratch.tmp").read_bytes() == b"precious\n"
    assert not (ws.root / "private").exists() and (ws.root / "a.md").exists()
    # A file Git tracks is written, whatever .gitignore says of its path.
    git(ws.root, "add", "-f", "scratch.tmp")
    git(ws.root, "commit", "-q", "-m", "tracked on purpose")
    ws.apply(CommandMeta("file.save", actor="hermes"), [Write("scratch.tmp", b"new\n")])
    assert (ws.root / "scratch.tmp").read_bytes() == b"new\n"


def test_init_on_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(WorkspaceInvalid):
        Workspace.init(tmp_path / "file")


@pytest.mark.parametrize("step", ["journal-written", "ref-updated"])
@pytest.mark.parametrize("how", ["in place", "rename over", "delete"])
def test_a_save_while_the_command_lands_is_kept(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, step: str, how: str
) -> None:
    """The new file is written under a temporary name before the branch moves; a person's
    save or delete after the last check is kept, never overwritten, and committed right
    after; the command's change does not apply on it (the same line changed, or the file
    gone), so the command is a conflict naming its commit, which keeps its version."""
    from mnoted.store import faults

    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"v1\n")])
    page = ws.root / "p.md"
    real = faults.point

    def point(name: str) -> None:
        real(name)
        if name == step and page.exists() and page.read_bytes() == b"v1\n":
            if how == "in place":
                with page.open("r+b") as fh:  # saved in place, as VS Code does
                    fh.write(b"v1 and more\n")
            elif how == "rename over":
                tmp = ws.root / ".p.md.swp"
                tmp.write_bytes(b"person\n")
                tmp.replace(page)
            else:
                page.unlink()

    monkeypatch.setattr(faults, "point", point)
    with pytest.raises(Conflict) as caught:
        ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("p.md", b"v2\n")])
    monkeypatch.undo()
    theirs = {"in place": b"v1 and more\n", "rename over": b"person\n", "delete": None}[how]
    assert (page.read_bytes() if page.exists() else None) == theirs
    ours = caught.value.details["commit"]
    assert git(ws.root, "show", f"{ours}:p.md") == "v2\n"  # the command's commit
    head = git(ws.root, "rev-parse", "HEAD").strip()
    assert head != ours  # and the person's save (or delete) on top of it
    ws.idle()
    assert_clean(ws.root)
    assert not list(ws.root.rglob(".mnote-tmp-*"))


def test_the_index_refreshed_in_the_background_follows_head(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon refreshes the Git index on a thread of its own (60-100 ms at 100,000
    files that a write no longer waits for). A write landing meanwhile is not held up, and
    its path, set to the older blob by that refresh, stays pending and is set next time.
    (Landings whose entries are not set at once: an index the store does not patch.)"""
    monkeypatch.setattr(IndexKeeper, "prepare", lambda self, commit, paths: None)
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"v1\n")])
    ws.idle()
    ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("p.md", b"v2\n")])
    started, release = threading.Event(), threading.Event()
    refresh = gitindex.GitIndex.refresh

    def held_refresh(self: gitindex.GitIndex, *args: object, **kwargs: object) -> None:
        started.set()
        assert release.wait(10)
        refresh(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gitindex.GitIndex, "refresh", held_refresh)
    ws.refresh_index_soon()
    assert started.wait(10)
    # the refresh is under way, holding index.lock: the writer goes on
    third = ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("p.md", b"v3\n")])
    release.set()
    ws.refresh_index_soon()  # takes in the first refresh (if it ended), starts the next
    monkeypatch.setattr(gitindex.GitIndex, "refresh", refresh)
    ws.idle()
    assert (
        git(ws.root, "rev-parse", ":p.md").strip()
        == git(ws.root, "rev-parse", f"{third.commit}:p.md").strip()
    )
    assert_clean(ws.root)


def test_background_refreshes_take_a_bounded_share_of_the_time(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Git's index is rewritten whole (45-90 ms at 100,000 files). The daemon's writer asked
    for a refresh at every pause of 50 ms, and an agent writing every 60 ms had the index
    rewritten after each write, two thirds of the time. After a refresh that took ``t``,
    the next begins no sooner than ``t / INDEX_SHARE`` after it; ``idle()`` (the daemon's
    stop) still refreshes at once."""
    began: list[float] = []
    done = threading.Event()
    refresh = gitindex.GitIndex.refresh

    def slow_refresh(self: gitindex.GitIndex, *args: object, **kwargs: object) -> None:
        began.append(time.monotonic())
        time.sleep(0.2)
        refresh(self, *args, **kwargs)  # type: ignore[arg-type]
        done.set()

    monkeypatch.setattr(gitindex.GitIndex, "refresh", slow_refresh)
    monkeypatch.setattr(IndexKeeper, "prepare", lambda self, commit, paths: None)
    monkeypatch.setattr(indexkeeper, "INDEX_SHARE", 0.01)  # the next >= 20 s after the first
    clock = _SkippingClock()  # (moved past the gate, not waited out)
    monkeypatch.setattr(indexkeeper, "time", clock)
    keeper = ws.git_index

    def refreshed() -> None:
        """Until the refresh's job has returned (``done`` is set just before it does)."""
        assert done.wait(10)
        done.clear()
        deadline = time.monotonic() + 10
        while (job := keeper._job) is not None and not job[0].done():
            assert time.monotonic() < deadline, "the refresh's job never returned"
            time.sleep(0.01)

    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"v1\n")])
    ws.refresh_index_soon()
    refreshed()
    ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("p.md", b"v2\n")])
    ws.refresh_index_soon()  # takes the first in; too soon for the next
    assert keeper._job is None and keeper.next_refresh > clock.monotonic()
    assert len(began) == 1
    clock.skip(keeper.next_refresh - clock.monotonic() + 0.01)  # (the gate's time has come)
    ws.refresh_index_soon()
    refreshed()
    assert len(began) == 2
    ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("p.md", b"v3\n")])
    ws.refresh_index_soon()  # takes the second in; too soon again
    assert keeper._job is None and keeper.next_refresh > clock.monotonic()
    assert len(began) == 2
    ws.idle()  # waits for nothing
    assert len(began) == 3
    assert_clean(ws.root)


class _SkippingClock:
    """The ``time`` module, with a ``monotonic`` that a test moves forward at once."""

    def __init__(self) -> None:
        self._ahead = 0.0

    def skip(self, seconds: float) -> None:
        self._ahead += max(0.0, seconds)

    def monotonic(self) -> float:
        return time.monotonic() + self._ahead

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


def test_a_background_refresh_blocked_by_a_users_lock_is_retried(ws: Workspace) -> None:
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"v1\n")])
    lock = ws.gitdir / "index.lock"
    lock.write_text("a git command of the user's\n")
    ws.refresh_index_soon()  # does not wait for the lock: fails on its thread, logged
    ws.refresh_index_soon()
    lock.unlink()
    ws.idle()
    assert_clean(ws.root)


def test_old_trees_cached_by_libgit2_stay_within_a_bound(tmp_path: Path) -> None:
    """Every write makes new trees, and libgit2 keeps each one it reads in a cache it empties
    only at 256 MB: a daemon writing in a folder of 2,000 notes grew by ~20 MB a thousand
    writes and never gave it back. The store caps that cache (its current trees fit)."""
    root = tmp_path / "notes"
    Workspace.init(root).close()
    (root / "folder").mkdir()
    for i in range(2000):
        (root / "folder" / f"note-{i:04d}.md").write_text(f"# Note {i}\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "a big folder")
    with Workspace.open(root) as ws:
        for i in range(300):
            write = Write("folder/note-0001.md", b"%d\n" % i)
            ws.apply(CommandMeta("page.save", actor="a"), [write])
            assert ws.resolve("folder/note-0001.md") is not None  # (reads HEAD's trees)
        used, cap = pygit2.settings.cached_memory
        assert cap == OBJECT_CACHE_BYTES
        assert used <= cap
        assert ws.resolve("folder/note-1999.md") is not None
    assert_clean(root)
