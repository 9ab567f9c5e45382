"""The watcher lists folders and reads files through folder fds: a folder swapped for a
symlink to the outside is never listed or read through the link.

Reads are caught by atimes: the outside files and folder get an atime older than their
mtime, which any read or listing moves (even under ``relatime``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from mnoted.sync import listing
from mnoted.sync.own_writes import ABSENT, blob_id, read_blob_id_at
from tests.sync.conftest import QuietFn, RecordingSink, WatcherFactory

SECRET = "SECRET outside the workspace\n"


def outside_folder(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    for name in ("x.md", "deep/y.md"):
        (outside / name).write_text(SECRET)
    for name in ("x.md", "deep/y.md", "deep", "."):
        os.utime(outside / name, ns=(1, (outside / name).stat().st_mtime_ns))
    return outside


def untouched(outside: Path) -> bool:
    return all((outside / n).stat().st_atime_ns == 1 for n in ("x.md", "deep/y.md", "deep", "."))


def names(steps: Iterator[listing.Step]) -> set[bytes]:
    out = set()
    for folder, subfolders, files in steps:
        out.update(os.path.join(folder, n) for n in [*subfolders, *files])
    return out


def test_walk_never_goes_through_a_symlink(tmp_path: Path) -> None:
    outside = outside_folder(tmp_path)
    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "n.md").write_text("mine")
    (root / "a" / "link").symlink_to(outside)
    (root / "link").symlink_to(root / "a")
    base = os.fsencode(root)
    assert names(listing.walk(base, base)) == {
        base + p for p in (b"/a", b"/a/b", b"/a/b/n.md", b"/a/link", b"/link")
    }
    assert names(listing.walk(base, base + b"/a/link")) == set()  # the top itself
    assert names(listing.walk(base, base + b"/link/b")) == set()  # a folder on the way
    assert names(listing.walk(base, base + b"/../outside")) == set()
    assert untouched(outside)


def test_own_write_check_reads_nothing_through_a_swapped_folder(tmp_path: Path) -> None:
    outside = outside_folder(tmp_path)
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "x.md").write_text("mine")
    assert read_blob_id_at(str(root), "sub/x.md") == blob_id(b"mine")
    os.rename(root / "sub", tmp_path / "aside")
    (root / "sub").symlink_to(outside)
    assert read_blob_id_at(str(root), "sub/x.md") is ABSENT
    assert untouched(outside)


def test_a_folder_swapped_while_the_watcher_lists_it(
    workspace: Path,
    tmp_path: Path,
    make_watcher: WatcherFactory,
    sink: RecordingSink,
    quiet: QuietFn,
    monkeypatch: object,
) -> None:
    """The moved-in folder becomes a symlink to the outside at the instant the watcher
    lists it (to watch its subfolders and report its files): nothing outside is listed."""
    outside = outside_folder(tmp_path)
    real = listing.walk
    swapped: list[bytes] = []

    def racing(
        root: bytes, top: bytes, prune: frozenset[bytes] = frozenset(), *, files: bool = True
    ) -> Iterator:
        if top.endswith(b"/moved") and not swapped:
            os.rename(workspace / "moved", tmp_path / "aside")
            (workspace / "moved").symlink_to(outside)
            swapped.append(top)
        return real(root, top, prune, files=files)

    monkeypatch.setattr(listing, "walk", racing)  # type: ignore[attr-defined]
    watcher = make_watcher()
    incoming = tmp_path / "incoming"
    (incoming / "deep").mkdir(parents=True)
    (incoming / "x.md").write_text("mine")
    os.rename(incoming, workspace / "moved")
    assert sink.wait(lambda s: bool(s.batches))
    quiet(watcher)
    assert swapped
    assert untouched(outside)
    reported = set(sink.paths)
    assert not any(p.startswith("moved/") for p in reported), reported
