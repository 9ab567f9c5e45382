"""`mnote remote add|list|remove` work on the repository's own remotes, without a daemon, and
never print a secret of a URL."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mnoted.cli.main import main
from mnoted.store import Workspace


def test_remote_add_list_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "notes"
    Workspace.init(root).close()
    url = "https://me:s3cret@example.org/notes.git"
    assert main(["remote", "add", "origin", url, "--workspace", str(root)]) == 0
    got = subprocess.run(
        ["git", "remote", "get-url", "origin"], cwd=root, capture_output=True, text=True
    )
    assert got.stdout.strip() == url  # (git's own config holds it, as `git remote add` would)
    capsys.readouterr()
    assert main(["--json", "remote", "list", "--workspace", str(root)]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == [{"name": "origin", "url": "https://***@example.org/notes.git"}]
    assert "s3cret" not in out
    assert main(["remote", "add", "origin", url, "--workspace", str(root)]) == 1  # exists
    assert main(["remote", "add", "bad..name", url, "--workspace", str(root)]) == 1
    assert main(["remote", "remove", "origin", "--workspace", str(root)]) == 0
    capsys.readouterr()
    assert main(["remote", "list", "--workspace", str(root)]) == 0
    assert capsys.readouterr().out == ""
