"""A parent folder swapped for a symlink exactly between the path check and the I/O.

Each test wraps a function the store calls after it checked a path (``validate``'s
``resolve``, the ``ref-updated`` fault point, ``read_disk``'s ``resolve``, ``entry_at``
inside ``disk_changes``) or the very system call that creates the temp file or unlinks the
page, so that the swap happens at that instant. The write, read, delete or temp-file
cleanup must then go nowhere outside: the outside folder keeps its bytes, mtimes and
listing, and its secret reaches no result, commit or workspace file. (Path-string I/O, as
before the folder-fd walk, fails the syscall, read, external-commit and cleanup cases.)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mnoted.errors import NotFound, PathRejected
from mnoted.store import CommandMeta, Delete, Workspace, Write, faults, trees
from mnoted.store import planning as planning_mod
from mnoted.store import reads as reads_mod
from mnoted.store.atomic import remove_temp_files
from mnoted.store.paths import TEMP_PREFIX
from tests.store.conftest import assert_clean, git

SECRET = b"SECRET-3f9a outside the workspace\n"
DECOY_TEMP = ".mnote-tmp-page.md-0000dead"


@dataclass
class Scene:
    ws: Workspace
    outside: Path
    aside: Path

    @property
    def link(self) -> Path:
        return self.ws.root / "sub"

    def swap_in(self) -> None:
        """The real folder moves aside; ``sub`` becomes a symlink to the outside folder."""
        os.rename(self.link, self.aside)
        os.symlink(self.outside, self.link)

    def swap_back(self) -> None:
        os.unlink(self.link)
        os.rename(self.aside, self.link)

    def outside_state(self) -> tuple[int, dict[str, tuple[bytes, int]]]:
        """The outside folder's mtime and each entry's bytes and mtime."""
        files = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in self.outside.iterdir()}
        return self.outside.stat().st_mtime_ns, files

    def assert_nothing_leaked(self, before: tuple[int, dict[str, tuple[bytes, int]]]) -> None:
        assert self.outside_state() == before
        assert SECRET.strip() not in git(self.ws.root, "log", "-p", "--all").encode()
        for p in self.ws.root.rglob("*"):
            if p.is_file() and not p.is_symlink() and ".git" not in p.parts:
                assert SECRET.strip() not in p.read_bytes(), p


@pytest.fixture
def scene(ws: Workspace, tmp_path: Path) -> Iterator[Scene]:
    (ws.root / "sub").mkdir()
    (ws.root / "sub" / "page.md").write_bytes(b"# Page\n\ninside\n")
    ws.commit_external(["sub/page.md"])
    ws.idle()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "page.md").write_bytes(SECRET)  # same name as the page: any I/O through the
    (outside / DECOY_TEMP).write_bytes(SECRET)  # link would hit these
    # The real folder is moved aside inside the workspace: I/O through an fd opened before
    # the swap still lands in it (the folder that was checked), never in ``outside``.
    yield Scene(ws, outside, ws.root / ".swap-aside")
    faults.disarm()


def swap_after(
    monkeypatch: pytest.MonkeyPatch,
    owner: Any,
    name: str,
    scene: Scene,
    when: Callable[..., bool],
    *,
    before: bool = False,
    swapped: list[bool] | None = None,
) -> list[bool]:
    """Wrap ``owner.name`` so that the swap happens right after (or ``before``) its first
    call that ``when`` matches (the first of those sharing ``swapped``)."""
    real = getattr(owner, name)
    swapped = [] if swapped is None else swapped

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        hit = not swapped and when(*args, **kwargs)
        if hit and before:
            scene.swap_in()
            swapped.append(True)
        result = real(*args, **kwargs)
        if hit and not before:
            scene.swap_in()
            swapped.append(True)
        return result

    monkeypatch.setattr(owner, name, wrapper)
    return swapped


CHANGES = {
    "modify": lambda: [Write("sub/page.md", b"# Page\n\nnew words\n")],
    "create": lambda: [Write("sub/new.md", b"# New\n")],
    "delete": lambda: [Delete("sub/page.md")],
}


@pytest.mark.parametrize("kind", sorted(CHANGES))
@pytest.mark.parametrize("moment", ["after-validate", "after-ref-update", "at-the-syscall"])
def test_write_after_the_check_goes_nowhere_outside(
    scene: Scene, monkeypatch: pytest.MonkeyPatch, kind: str, moment: str
) -> None:
    before = scene.outside_state()
    if moment == "after-validate":
        swapped = swap_after(monkeypatch, planning_mod, "resolve", scene, lambda *a, **k: True)
    elif moment == "after-ref-update":
        swapped = swap_after(
            monkeypatch, faults, "point", scene, lambda step: step == "ref-updated"
        )
    elif kind == "delete":  # just before the page is unlinked
        swapped = swap_after(
            monkeypatch,
            os,
            "unlink",
            scene,
            lambda path, *a, **k: "page.md" in str(path),
            before=True,
        )
    else:  # just before the new file is created beside the page
        swapped = []
        swap_after(
            monkeypatch,
            os,
            "open",
            scene,
            lambda path, *a, **k: TEMP_PREFIX in str(path),
            before=True,
            swapped=swapped,
        )
    if moment == "after-validate" and kind == "delete":
        # the disk's state is committed first: its folder is a link, the page is gone from
        # the work tree (as `git add -A` sees it), so there is nothing left to delete
        with pytest.raises(NotFound):
            scene.ws.apply(CommandMeta("page.body.save", actor="agent"), CHANGES[kind]())
        assert scene.ws.blob_id("sub/page.md") is None
    else:
        result = scene.ws.apply(CommandMeta("page.body.save", actor="agent"), CHANGES[kind]())
        assert result.commit  # committed in HEAD; the disk keeps the real folder's version
    assert swapped, "the swap did not happen"
    scene.assert_nothing_leaked(before)
    monkeypatch.undo()
    scene.swap_back()
    if moment == "at-the-syscall":  # the folder fd was open before the swap: the real folder
        assert scene.ws.read_disk(CHANGES[kind]()[0].path) == scene.ws.read_head(
            CHANGES[kind]()[0].path
        )
    scene.ws.commit_external(scene.ws.scan_changes())  # the real folder's files win, as edits
    scene.ws.idle()
    assert_clean(scene.ws.root)
    assert not list(scene.ws.root.rglob(".mnote-tmp-*"))
    scene.assert_nothing_leaked(before)


def test_read_after_the_check_is_refused(scene: Scene, monkeypatch: pytest.MonkeyPatch) -> None:
    before = scene.outside_state()
    swapped = swap_after(monkeypatch, reads_mod, "resolve", scene, lambda *a, **k: True)
    with pytest.raises(PathRejected):
        scene.ws.read_disk("sub/page.md")
    assert swapped
    scene.assert_nothing_leaked(before)


def test_external_commit_after_the_check_reads_nothing_outside(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``disk_changes`` looks the path up in HEAD between its checks and the read."""
    before = scene.outside_state()
    (scene.ws.root / "sub" / "page.md").write_bytes(b"# Page\n\nedited in an editor\n")
    swapped = swap_after(
        monkeypatch, trees, "entry_at", scene, lambda tree, rel: rel == "sub/page.md"
    )
    scene.ws.commit_external(["sub/page.md"])
    assert swapped
    scene.assert_nothing_leaked(before)
    monkeypatch.undo()
    scene.swap_back()
    scene.ws.commit_external(scene.ws.scan_changes())
    assert scene.ws.read_head("sub/page.md") == b"# Page\n\nedited in an editor\n"


def test_temp_cleanup_through_a_swapped_folder_deletes_nothing_outside(scene: Scene) -> None:
    before = scene.outside_state()
    scene.swap_in()
    assert remove_temp_files(scene.ws.root / "sub") == []
    scene.assert_nothing_leaked(before)
