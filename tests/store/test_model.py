"""A model-based test: random writes, moves, deletes by mnoted, edits and commits by the user.

After every step the files on disk are what the model says (no external edit is lost or
overwritten without first being committed), every command's paths are committed as on disk,
and at the end the repository is clean and sound.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mnoted.errors import NotFound
from mnoted.store import CommandMeta, Delete, Move, Workspace, Write
from tests.store.conftest import assert_clean, git

PATHS = ["a.md", "b.md", "n/c.md", "n/m/d.md"]
CONTENT = st.binary(min_size=0, max_size=40)
META = CommandMeta("model.step", actor="hermes")


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="mnote-model-"))
        self.ws = Workspace.init(self.tmp / "ws")
        self.root = self.ws.root
        self.disk: dict[str, bytes] = {}

    def _dirty(self, path: str) -> bool:
        return self.disk.get(path) != self.ws.read_head(path)

    @rule(path=st.sampled_from(PATHS), data=CONTENT)
    def write(self, path: str, data: bytes) -> None:
        if any(p.startswith(path + "/") for p in self.disk):
            return
        dirty = self._dirty(path)
        before = self.disk.get(path)
        result = self.ws.apply(META, [Write(path, data)])
        if dirty:  # the user's uncommitted content went into history first
            assert result.external_commit is not None
            kept = self.ws.blob_at(result.external_commit, path)
            assert (kept[1] if kept is not None else None) == before
        self.disk[path] = data
        assert self.ws.read_head(path) == data

    @rule(path=st.sampled_from(PATHS))
    def delete(self, path: str) -> None:
        if path not in self.disk:
            if self.ws.blob_id(path) is not None:  # the user deleted it already
                with pytest.raises(NotFound):
                    self.ws.apply(META, [Delete(path)])
                assert self.ws.read_head(path) is None  # their deletion got committed
            return
        if self.ws.blob_id(path) is None:  # untracked: commit it first so Delete can find it
            self.ws.commit_external([path])
        self.ws.apply(META, [Delete(path)])
        self.disk.pop(path, None)
        assert self.ws.read_head(path) is None

    @rule(old=st.sampled_from(PATHS), new=st.sampled_from(PATHS))
    def move(self, old: str, new: str) -> None:
        if old == new or old not in self.disk or new in self.disk:
            return
        if any(p.startswith(new + "/") for p in self.disk):
            return
        self.ws.commit_external([old])
        self.ws.apply(META, [Move(old, new)])
        self.disk[new] = self.disk.pop(old)
        assert self.ws.read_head(new) == self.disk[new]

    @rule(path=st.sampled_from(PATHS), data=CONTENT)
    def user_edits(self, path: str, data: bytes) -> None:
        if any(p.startswith(path + "/") for p in self.disk):
            return
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        self.disk[path] = data

    @rule(path=st.sampled_from(PATHS))
    def user_deletes(self, path: str) -> None:
        if path in self.disk:
            (self.root / path).unlink()
            del self.disk[path]

    @rule()
    def user_commits_everything(self) -> None:
        self.ws.idle()
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "-m", "user commit", "--allow-empty")

    @rule()
    def idle(self) -> None:
        self.ws.idle()

    @invariant()
    def disk_is_what_the_model_says(self) -> None:
        for path in PATHS:
            target = self.root / path
            if path in self.disk:
                assert target.read_bytes() == self.disk[path], path
            else:
                assert not target.is_file(), path

    def teardown(self) -> None:
        try:
            self.ws.commit_external(self.ws.scan_changes())
            for path in PATHS:
                assert self.ws.read_head(path) == self.disk.get(path)
            self.ws.idle()
            assert_clean(self.root)
        finally:
            self.ws.close()
            shutil.rmtree(self.tmp, ignore_errors=True)


StoreModel.TestCase.settings = settings(max_examples=8, stateful_step_count=12, deadline=None)
TestStoreModel = StoreModel.TestCase
