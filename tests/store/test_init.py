"""Workspace creation from the template, adoption of existing repositories, refusals."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from mnoted.errors import LockBusy, WorkspaceInvalid
from mnoted.store import CommandMeta, Workspace, Write, template_files
from mnoted.store.statedir import STATE_DIR
from tests.store.conftest import assert_clean, git


def test_template_is_packaged() -> None:
    files = template_files()
    assert {"Welcome.md", ".gitignore", ".mnote/config.toml"} <= set(files)
    repo_copy = Path(__file__).parents[2] / "workspace_template"
    assert repo_copy.is_dir() and (repo_copy / "Welcome.md").read_bytes() == files["Welcome.md"]


def test_init_new_folder(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    with Workspace.init(root) as ws:
        assert ws.workspace_id.startswith("ws_")
        assert ws.branch == "refs/heads/main"
        config = tomllib.loads((root / ".mnote/config.toml").read_text())
        assert config["workspaceId"] == ws.workspace_id
        assert ws.config.max_file_bytes == 1_048_576
        assert [d.path for d in ws.documents()] == ["Welcome.md"]
    assert git(root, "log", "--format=%s").strip().startswith("workspace.init:")
    tracked = git(root, "ls-files").split()
    assert tracked == [".gitignore", ".mnote/config.toml", "Welcome.md"]
    assert_clean(root)


def test_init_is_idempotent_and_keeps_the_id(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    with Workspace.init(root) as ws:
        first = ws.workspace_id
    with Workspace.init(root) as ws:
        assert ws.workspace_id == first
    assert len(git(root, "log", "--format=%H").split()) == 1


@pytest.mark.parametrize(
    "config",
    [
        None,  # the template copied by hand: its workspaceId is ""
        '[profile]\napprovalMode = "yolo"\n',  # written by hand, no id at all
        "workspaceId = '   '\n\n[profile]\napprovalMode = \"yolo\"\n",
        'workspaceId = ""  # set by init\n[profile]\napprovalMode = "yolo"\n',
    ],
)
def test_init_gives_a_config_without_an_id_one_and_keeps_its_settings(
    tmp_path: Path, config: str | None
) -> None:
    # Opening such a folder says "has no workspaceId; run `mnote init`", so init must mend
    # it (it used to refuse with that same message).
    root = tmp_path / "notes"
    (root / ".mnote").mkdir(parents=True)
    text = config if config is not None else template_files()[".mnote/config.toml"].decode()
    (root / ".mnote/config.toml").write_text(text)
    (root / "a.md").write_text("# A\n")
    git(root, "init", "-q")
    with pytest.raises(WorkspaceInvalid, match="no workspaceId") as info:
        Workspace.open(root)
    assert "mnote init" in info.value.hint
    with Workspace.init(root) as ws:
        wid = ws.workspace_id
        assert wid.startswith("ws_")
        if config is not None:
            assert ws.config.approval_mode == "yolo"
    written = (root / ".mnote/config.toml").read_text()
    assert any(line.startswith(f'workspaceId = "{wid}"') for line in written.splitlines())

    def settings(config: str) -> list[str]:
        return [line for line in config.splitlines() if not line.startswith("workspaceId")]

    assert settings(written) == settings(text)
    with Workspace.init(root) as ws:  # and from then on, it is kept
        assert ws.workspace_id == wid
    assert "workspace.init" in git(root, "log", "-1", "--format=%s")
    assert git(root, "show", "HEAD:.mnote/config.toml") == written
    assert_clean(root)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("workspaceId = 7\n", "no workspaceId"),
        ("workspaceId = [\n", "not valid TOML"),
        (b'workspaceId = "\xff"\n', "not UTF-8"),
    ],
)
def test_init_refuses_a_config_it_cannot_mend(
    tmp_path: Path, config: str | bytes, message: str
) -> None:
    root = tmp_path / "notes"
    (root / ".mnote").mkdir(parents=True)
    data = config.encode() if isinstance(config, str) else config
    (root / ".mnote/config.toml").write_bytes(data)
    with pytest.raises(WorkspaceInvalid, match=message):
        Workspace.init(root)
    assert (root / ".mnote/config.toml").read_bytes() == data


def test_init_imports_an_existing_plain_folder(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    (root / "sub").mkdir(parents=True)
    (root / "old.md").write_text("# Old\n")
    (root / "sub" / "n.md").write_text("# N\n")
    with Workspace.init(root) as ws:
        paths = {d.path for d in ws.documents()}
    assert paths == {"old.md", "sub/n.md"}  # an existing notes folder gets no welcome page
    assert_clean(root)


def test_init_adopts_a_repository_with_history(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "trunk")
    (root / ".gitignore").write_text("*.log\n")
    (root / "a.md").write_text("# A\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "user history")
    before = git(root, "rev-parse", "HEAD").strip()
    with Workspace.init(root) as ws:
        assert ws.branch == "refs/heads/trunk"
        assert [d.path for d in ws.documents()] == ["a.md"]
        assert ws.revision_of("a.md") == before
    assert git(root, "rev-parse", "HEAD~1").strip() == before
    ignore = (root / ".gitignore").read_text()
    assert ignore.startswith("*.log\n") and ".mnote-tmp-*" in ignore
    assert_clean(root)


def test_refuses_detached_head(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    with Workspace.init(root):
        pass
    git(root, "checkout", "-q", "--detach")
    with pytest.raises(WorkspaceInvalid, match="detached"):
        Workspace.open(root)
    with pytest.raises(WorkspaceInvalid, match="detached"):
        Workspace.init(root)


def test_a_head_detached_while_open_is_refused_by_every_write_until_a_branch_is_back(
    ws: Workspace,
) -> None:
    # The first write after `git checkout --detach` was refused; the next one saw nothing
    # new in HEAD's stat data and committed on the branch under a HEAD that was not on it.
    root = ws.root
    branch_head = git(root, "rev-parse", "HEAD").strip()
    git(root, "checkout", "-q", "--detach")
    for text in ("# One\n", "# Two\n"):
        with pytest.raises(WorkspaceInvalid, match="detached"):
            ws.apply(CommandMeta("test.write", actor="test"), [Write("n.md", text.encode())])
    assert git(root, "rev-parse", "main").strip() == branch_head
    assert not (root / "n.md").exists()
    git(root, "checkout", "-q", "main")
    ws.apply(CommandMeta("test.write", actor="test"), [Write("n.md", b"# Three\n")])
    assert git(root, "show", "HEAD:n.md") == "# Three\n"


def test_a_workspace_folder_moved_away_is_named_and_taken_up_again_when_back(
    ws: Workspace,
) -> None:
    root = ws.root
    root.rename(root.with_name("moved"))
    with pytest.raises(WorkspaceInvalid, match="moved or deleted") as caught:
        ws.apply(CommandMeta("test.write", actor="test"), [Write("n.md", b"# One\n")])
    assert str(root) in caught.value.hint
    root.with_name("moved").rename(root)
    ws.apply(CommandMeta("test.write", actor="test"), [Write("n.md", b"# Two\n")])
    assert git(root, "show", "HEAD:n.md") == "# Two\n"


def test_refuses_a_repository_mid_merge(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    with Workspace.init(root):
        pass
    git(root, "checkout", "-q", "-b", "side")
    (root / "Welcome.md").write_text("side\n")
    git(root, "commit", "-qam", "side")
    git(root, "checkout", "-q", "main")
    (root / "Welcome.md").write_text("main\n")
    git(root, "commit", "-qam", "main")
    git(root, "merge", "side", check=False)
    with pytest.raises(WorkspaceInvalid, match="middle of a merge") as info:
        Workspace.open(root)
    assert "git merge --abort" in info.value.hint


def test_not_a_workspace(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceInvalid):
        Workspace.open(tmp_path)
    git(tmp_path, "init", "-q")
    with pytest.raises(WorkspaceInvalid, match="not an mnote workspace") as info:
        Workspace.open(tmp_path)
    assert "mnote init" in info.value.hint


def test_one_process_per_workspace(ws: Workspace) -> None:
    with pytest.raises(LockBusy) as info:
        Workspace.open(ws.root)
    assert info.value.details["path"].endswith("daemon.lock")
    # `git clean -fdx` removed the work tree's .mnote/state (Git ignores it) with the lock
    # then held there, and a second daemon served the same folder. Lock and state are in
    # the Git directory now, where it does not reach.
    subprocess.run(["git", "clean", "-fdxq"], cwd=ws.root, check=True)
    assert (ws.root / STATE_DIR / "state.sqlite3").is_file()
    with pytest.raises(LockBusy):
        Workspace.open(ws.root)


def test_adopting_keeps_uncommitted_user_files_for_reconciliation(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.md").write_text("# A\n")
    git(root, "add", "a.md")
    git(root, "commit", "-qm", "user history")
    (root / "a.md").write_text("# A, edited\n")
    (root / "draft.md").write_text("draft\n")
    with Workspace.init(root) as ws:
        assert ws.scan_changes() == ["a.md", "draft.md"]  # left for start-up reconciliation
        assert ws.read_head("a.md") == b"# A\n"
        ws.commit_external(ws.scan_changes())
        assert ws.scan_changes() == []
    assert_clean(root)


def test_refuses_a_partial_clone_naming_the_way_out(tmp_path: Path) -> None:
    """A `git clone --filter=blob:none` has none of its history's blobs: libgit2 cannot fetch
    them, and reading the history to index it failed with a bare ``KeyError``."""
    server = tmp_path / "server"
    server.mkdir()
    git(server, "init", "-q", "-b", "main")
    git(server, "config", "uploadpack.allowFilter", "true")
    for text in ("one\n", "two\n"):
        (server / "a.md").write_text(text)
        git(server, "add", "-A")
        git(server, "commit", "-qm", text)
    root = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--filter=blob:none", f"file://{server}", str(root))
    for _ in range(2):  # as `mnote init` and the daemon's start meet it
        with pytest.raises(WorkspaceInvalid, match="partial clone") as info:
            Workspace.init(root)
        assert "without `--filter`" in info.value.hint
    assert git(root, "log", "--format=%s").split() == ["two", "one"]


def test_refuses_a_sha256_repository_naming_the_way_out(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    git(root, "init", "-q", "-b", "main", "--object-format=sha256")
    with pytest.raises(WorkspaceInvalid, match="sha256") as info:
        Workspace.init(root)
    assert "--object-format=sha1" in info.value.hint


def test_a_blob_missing_from_the_history_is_named(tmp_path: Path) -> None:
    """A repository missing an old blob (a lost pack, a half-copied `.git`) is refused with
    the path and commit, not a bare ``KeyError`` out of the history's indexing."""
    root = tmp_path / "notes"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.md").write_text("lost\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "one")
    lost = git(root, "rev-parse", "HEAD:a.md").strip()
    (root / "a.md").write_text("kept\n")
    git(root, "commit", "-qam", "two")
    (root / ".git/objects" / lost[:2] / lost[2:]).unlink()
    missing = f"missing a.md as commit .* has it .*{lost}"
    with pytest.raises(WorkspaceInvalid, match=missing) as info:
        Workspace.init(root)
    assert "git fsck" in info.value.hint
