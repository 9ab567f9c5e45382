"""Files ``.gitattributes`` sends through a clean filter (Git LFS, git-crypt): committed as
``git add`` stores them, never written by mnoted.

The filter here is rot13 (``tr``), a stand-in for git-crypt: the blob must be the filter's
output, the work tree keeps the text, and ``git status`` agrees with HEAD.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnoted.errors import PathRejected, StorageError
from mnoted.store import CommandMeta, Delete, Move, Workspace, Write
from mnoted.sync.gitclean import git_clean
from tests.store.conftest import assert_clean, git

ROT13 = "tr A-Za-z N-ZA-Mn-za-m"


def rot13(text: str) -> str:
    return text.translate(
        str.maketrans(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
            "NOPQRSTUVWXYZABCDEFGHIJKLMnopqrstuvwxyzabcdefghijklm",
        )
    )


@pytest.fixture
def filtered(ws: Workspace) -> Workspace:
    """``secret/`` goes through the ``rot`` filter, configured as git-crypt configures its own."""
    git(ws.root, "config", "filter.rot.clean", ROT13)
    git(ws.root, "config", "filter.rot.smudge", ROT13)
    (ws.root / ".gitattributes").write_text("secret/** filter=rot\n")
    ws.commit_external([".gitattributes"])
    ws.clean_filter = git_clean(ws.root)  # (as the daemon sets it)
    return ws


def head_text(root: Path, path: str) -> str:
    return git(root, "show", f"HEAD:{path}")


def test_an_edit_of_a_filtered_file_is_committed_as_git_add_stores_it(filtered: Workspace) -> None:
    ws = filtered
    (ws.root / "secret").mkdir()
    (ws.root / "secret" / "plan.md").write_text("# Plan\n\nMeet Alice.\n")
    (ws.root / "open.md").write_text("# Open\n")
    result = ws.commit_external(["secret/plan.md", "open.md"])
    assert result is not None
    assert head_text(ws.root, "secret/plan.md") == rot13("# Plan\n\nMeet Alice.\n")
    assert head_text(ws.root, "open.md") == "# Open\n"  # (no filter there)
    assert (ws.root / "secret" / "plan.md").read_text() == "# Plan\n\nMeet Alice.\n"
    # Unchanged since: no second commit, whether the stat cache or a read decides.
    assert ws.commit_external(["secret/plan.md"]) is None
    assert ws.commit_external(sorted(ws.scan_changes())) is None
    ws.flush_index()
    assert_clean(ws.root)
    # An edit is committed through the filter again.
    (ws.root / "secret" / "plan.md").write_text("# Plan\n\nMeet Bob.\n")
    assert ws.commit_external(["secret/plan.md"]) is not None
    assert head_text(ws.root, "secret/plan.md") == rot13("# Plan\n\nMeet Bob.\n")
    ws.flush_index()
    assert_clean(ws.root)


def test_a_file_the_user_committed_through_the_filter_is_not_committed_again(
    filtered: Workspace,
) -> None:
    ws = filtered
    (ws.root / "secret").mkdir()
    (ws.root / "secret" / "key.md").write_text("hunter2\n")
    git(ws.root, "add", "secret/key.md")
    git(ws.root, "commit", "-q", "-m", "the user's own commit")
    head = git(ws.root, "rev-parse", "HEAD").strip()
    assert ws.commit_external(["secret/key.md"]) is None
    assert git(ws.root, "rev-parse", "HEAD").strip() == head


def test_a_filter_attribute_without_a_configured_driver_is_ignored_as_git_ignores_it(
    ws: Workspace,
) -> None:
    (ws.root / ".gitattributes").write_text("*.md filter=nowhere\n")
    (ws.root / "a.md").write_text("plain\n")
    assert ws.commit_external([".gitattributes", "a.md"]) is not None
    assert head_text(ws.root, "a.md") == "plain\n"
    ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("a.md", b"written\n")])
    assert (ws.root / "a.md").read_text() == "written\n"


@pytest.mark.parametrize(
    "change",
    [
        Write("secret/new.md", b"# New\n"),
        Write("secret/plan.md", b"# Plan\n\nChanged.\n"),
        Move("secret/plan.md", "out.md"),
        Move("open.md", "secret/open.md"),
    ],
    ids=["create", "write", "move-out", "move-in"],
)
def test_the_store_writes_no_bytes_at_a_filtered_path(filtered: Workspace, change) -> None:
    ws = filtered
    (ws.root / "secret").mkdir()
    (ws.root / "secret" / "plan.md").write_text("# Plan\n")
    (ws.root / "open.md").write_text("# Open\n")
    ws.commit_external(["secret/plan.md", "open.md"])
    head = git(ws.root, "rev-parse", "HEAD").strip()
    with pytest.raises(PathRejected) as caught:
        ws.apply(CommandMeta("page.body.save", actor="hermes"), [change])
    assert caught.value.details["filter"] == "rot" and "editor" in caught.value.hint
    assert git(ws.root, "rev-parse", "HEAD").strip() == head
    assert sorted(p.name for p in (ws.root / "secret").iterdir()) == ["plan.md"]
    assert (ws.root / "secret" / "plan.md").read_text() == "# Plan\n"
    # A delete writes no bytes: it is allowed.
    ws.apply(CommandMeta("page.delete", actor="hermes"), [Delete("secret/plan.md")])
    assert not (ws.root / "secret" / "plan.md").exists()
    ws.flush_index()
    assert_clean(ws.root)


def test_a_process_that_cannot_run_filters_commits_nothing_from_a_filtered_path(
    filtered: Workspace,
) -> None:
    ws = filtered
    ws.clean_filter = None
    (ws.root / "secret").mkdir()
    (ws.root / "secret" / "plan.md").write_text("# Plan\n")
    head = git(ws.root, "rev-parse", "HEAD").strip()
    with pytest.raises(StorageError, match="cannot run"):
        ws.commit_external(["secret/plan.md"])
    assert git(ws.root, "rev-parse", "HEAD").strip() == head


def test_a_failing_filter_commits_nothing_and_says_which_file(filtered: Workspace) -> None:
    ws = filtered
    git(ws.root, "config", "filter.rot.clean", "false")
    git(ws.root, "config", "filter.rot.required", "true")
    (ws.root / "secret").mkdir()
    (ws.root / "secret" / "plan.md").write_text("# Plan\n")
    head = git(ws.root, "rev-parse", "HEAD").strip()
    with pytest.raises(StorageError, match=r"secret/plan\.md"):
        ws.commit_external(["secret/plan.md"])
    assert git(ws.root, "rev-parse", "HEAD").strip() == head


def test_a_crlf_file_is_committed_with_the_line_endings_git_add_stores(ws: Workspace) -> None:
    (ws.root / ".gitattributes").write_text("*.md text eol=lf\n")
    (ws.root / "win.md").write_bytes(b"one\r\ntwo\r\n")
    assert ws.commit_external([".gitattributes", "win.md"]) is not None
    assert git(ws.root, "cat-file", "-p", "HEAD:win.md") == "one\ntwo\n"
    assert (ws.root / "win.md").read_bytes() == b"one\r\ntwo\r\n"  # (the file stays as saved)
    assert ws.commit_external(["win.md"]) is None
    ws.flush_index()
    assert_clean(ws.root)
    # The person's own commit of the file is not answered by a commit of its CRLF.
    (ws.root / "win.md").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    git(ws.root, "add", "win.md")
    git(ws.root, "commit", "-q", "-m", "mine")
    assert ws.commit_external(["win.md"]) is None
    assert git(ws.root, "log", "-1", "--format=%s") == "mine\n"


LINE_ATTRIBUTES = ["", "* text=auto\n", "* text eol=lf\n", "* text eol=crlf\n", "* -text\n"]
LINE_EXAMPLES = int(os.environ.get("MNOTE_LINE_EXAMPLES", "20"))
"""Cases per line-ending property (each runs Git a few times); 200 digs deeper."""


def line_cases(test: Callable[..., None]) -> Callable[..., None]:
    """The cases of the line-ending property tests: ``.gitattributes``, ``core.autocrlf``,
    and the contents the file gets in turn."""
    contents = st.lists(
        st.lists(
            st.sampled_from([b"a", b"\r\n", b"\n", b"\r", b"\x00", b"\xc3\xa9"]), max_size=8
        ).map(b"".join),
        min_size=1,
        max_size=3,
    )
    cases = given(
        attributes=st.sampled_from(LINE_ATTRIBUTES),
        autocrlf=st.sampled_from([None, "input", "true"]),
        contents=contents,
    )
    return settings(max_examples=LINE_EXAMPLES, deadline=None)(cases(test))


@contextlib.contextmanager
def line_endings(attributes: str, autocrlf: str | None) -> Iterator[Workspace]:
    """A fresh workspace with ``attributes`` committed and ``core.autocrlf`` set, running
    Git's filters as the daemon runs them."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "n"
        git(Path(tmp), "init", "-q", str(root))
        if autocrlf is not None:  # (libgit2 reads core.autocrlf when the repository opens)
            git(root, "config", "core.autocrlf", autocrlf)
        with Workspace.init(root) as ws:
            ws.clean_filter = git_clean(ws.root)  # (as the daemon sets it)
            (ws.root / ".gitattributes").write_text(attributes)
            ws.commit_external([".gitattributes"])
            yield ws


@pytest.mark.slow
@line_cases
def test_every_blob_committed_from_the_disk_is_the_one_git_add_makes(
    attributes: str, autocrlf: str | None, contents: list[bytes]
) -> None:
    with line_endings(attributes, autocrlf) as ws:
        for data in contents:  # one file edited in turn: the index has its last version
            (ws.root / "f.md").write_bytes(data)
            ws.commit_external(["f.md"])
            ws.flush_index()
            wanted = git(ws.root, "hash-object", "--path=f.md", "--stdin", input_bytes=data)
            assert ws.blob_id("f.md") == wanted.strip(), (attributes, autocrlf, data)
            # Git sees no difference in content. (`git status` may still list a file with
            # mixed line endings under core.autocrlf whose index entry has no stat data,
            # with an empty diff: Git's own quirk, docs/store.md.)
            assert git(ws.root, "diff", "--stat", "--", "f.md") == ""


@line_cases
def test_a_written_file_is_stored_as_git_add_stores_it_and_left_as_a_checkout_leaves_it(
    attributes: str, autocrlf: str | None, contents: list[bytes]
) -> None:
    """An agent's edit of a file a checkout wrote with CRLF (`eol=crlf`, `core.autocrlf=true`)
    turned the whole file to LF on disk; an agent that sent CRLF where Git stores LF left
    the file modified for `git status` for good."""
    with line_endings(attributes, autocrlf) as ws:
        for data in contents:
            ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("f.md", data)])
            ws.flush_index()
            wanted = git(ws.root, "hash-object", "--path=f.md", "--stdin", input_bytes=data)
            assert ws.blob_id("f.md") == wanted.strip(), (attributes, autocrlf, data)
            checkout = subprocess.run(
                ["git", "-C", str(ws.root), "cat-file", "--filters", "HEAD:f.md"],
                capture_output=True,
                check=True,
            ).stdout
            if b"\x00" not in data:  # (written as stored: docs/store.md)
                assert (ws.root / "f.md").read_bytes() == checkout, (attributes, autocrlf)
            # Git sees no change, where its own checkout of the blob would not either
            # (`\r\r\n` under `eol=lf` is stored as `\r\n`, which Git reads back as LF).
            again = git(ws.root, "hash-object", "--path=f.md", "--stdin", input_bytes=checkout)
            if again == wanted:
                assert git(ws.root, "diff", "--stat", "--", "f.md") == ""


def test_a_written_file_with_an_expanded_ident_is_stored_as_git_add_stores_it(
    ws: Workspace,
) -> None:
    (ws.root / ".gitattributes").write_text("*.md ident\n")
    ws.commit_external([".gitattributes"])
    data = b"# Notes\n\nCost: $5.\nVersion $Id: 0123abcd $\n"
    ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("v.md", data)])
    wanted = git(ws.root, "hash-object", "--path=v.md", "--stdin", input_bytes=data)
    assert ws.blob_id("v.md") == wanted.strip()
    assert git(ws.root, "show", "HEAD:v.md").endswith("Version $Id$\n")


def test_an_edit_keeps_the_crlf_a_checkout_wrote(tmp_path: Path) -> None:
    """The file on disk has CRLF, the blob LF; the edit is checked against the blob (not
    taken for someone else's edit) and written with CRLF, whether or not the stat cache
    knows the file."""
    root = tmp_path / "n"
    git(tmp_path, "init", "-q", str(root))
    (root / ".gitattributes").write_text("*.md text eol=crlf\n")
    (root / "win.md").write_bytes(b"one\r\ntwo\r\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "from windows")
    for turn in range(2):
        with Workspace.init(root) as ws:  # (a fresh stat cache each turn)
            ws.apply(
                CommandMeta("page.body.save", actor="hermes"),
                [Write("win.md", b"one\ntwo\nedit %d\n" % turn)],
            )
            ws.flush_index()
        assert (root / "win.md").read_bytes() == b"one\r\ntwo\r\nedit %d\r\n" % turn
        assert git(root, "show", "HEAD:win.md") == f"one\ntwo\nedit {turn}\n"
        assert_clean(root)


def test_with_core_filemode_false_the_executable_bit_on_disk_is_not_committed(
    ws: Workspace,
) -> None:
    """`git init` sets `core.fileMode = false` where execute bits mean nothing (FAT, NTFS, a
    Windows drive under WSL: every file reads as executable). Every note committed from
    such a disk went into history as executable, and every edit flipped its mode."""
    for name, mode in (("note.md", 0o644), ("run.sh", 0o755)):
        (ws.root / name).write_text(f"{name}\n")
        (ws.root / name).chmod(mode)
    git(ws.root, "add", "-A")
    git(ws.root, "commit", "-q", "-m", "made on a disk that keeps execute bits")
    git(ws.root, "config", "core.fileMode", "false")
    for name in ("note.md", "new.md"):
        (ws.root / name).write_text("seen on a FAT disk\n")
        (ws.root / name).chmod(0o777)
    (ws.root / "run.sh").chmod(0o644)
    assert ws.scan_changes() == ["new.md", "note.md"]  # the content, not the mode
    ws.commit_external([*ws.scan_changes(), "run.sh"])
    modes = {
        line.split()[3]: line.split()[0] for line in git(ws.root, "ls-tree", "HEAD").splitlines()
    }
    assert (modes["note.md"], modes["new.md"], modes["run.sh"]) == ("100644", "100644", "100755")
    assert ws.scan_changes() == [] and ws.commit_external(["note.md", "run.sh"]) is None
    ws.idle()
    assert_clean(ws.root)  # `git status` agrees
    git(ws.root, "config", "core.fileMode", "true")  # (a file system that keeps them: kept)
    assert ws.scan_changes() == ["new.md", "note.md", "run.sh"]
