"""The index file patched per entry (``store.indexfile``) reads as Git and libgit2 read it."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pygit2
import pytest

from mnoted.errors import WorkspaceInvalid
from mnoted.store import CommandMeta, Delete, Workspace, Write, indexfile
from mnoted.store.indexfile import IndexFile
from tests.store.conftest import git


def _git(root: Path, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", *args], cwd=root, input=data, check=True, capture_output=True
    ).stdout


@pytest.mark.parametrize("version", [2, 4])  # 4: `feature.manyFiles`, written back as 2
def test_patched_entries_read_as_git_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    monkeypatch.setattr(indexfile, "BLOCK", 4)  # many blocks for a few entries
    _git(tmp_path, "init", "-q", ".")
    blob = _git(tmp_path, "hash-object", "-w", "--stdin", data=b"x\n").decode().strip()
    names = [f"d{i % 3}/s{i % 2}/n{i}.md" for i in range(40)] + ["top.md"]
    _git(
        tmp_path,
        "update-index",
        "--index-info",
        data="".join(f"100644 {blob}\t{n}\n" for n in names).encode(),
    )
    _git(tmp_path, "update-index", "--index-version", str(version))
    _git(tmp_path, "write-tree")  # (a cache-tree to keep valid)
    index_path = tmp_path / ".git" / "index"
    patched = IndexFile.parse(index_path.read_bytes())
    expected = dict.fromkeys(names, blob)
    rng = random.Random(46)
    for round_ in range(60):
        changes: dict[str, tuple[str, int] | None] = {}
        for _ in range(rng.randrange(1, 4)):
            kind = rng.random()
            name = (
                rng.choice(sorted(expected))
                if expected and kind < 0.7
                else f"d{rng.randrange(4)}/new{round_}.md"
            )
            if kind < 0.5:
                data = f"v{round_}\n".encode()
                oid = _git(tmp_path, "hash-object", "-w", "--stdin", data=data).decode().strip()
                changes[name] = (oid, 0o100644)
            elif kind < 0.7:
                changes[name] = None
            else:
                changes[name] = (blob, 0o100644)
        patched.set(changes)
        for name, entry in changes.items():
            if entry is None:
                expected.pop(name, None)
            else:
                expected[name] = entry[0]
        with open(index_path, "wb") as fh:
            patched.write(fh.fileno())
        fresh = IndexFile.parse(index_path.read_bytes())
        assert fresh.serialize() == index_path.read_bytes()  # (the checksum is the file's)
        listed = _git(tmp_path, "ls-files", "-s").decode().splitlines()
        assert {line.split("\t")[1]: line.split()[1] for line in listed} == expected
        assert len(pygit2.Index(str(index_path))) == len(expected)  # libgit2 checks the sum
    tree = _git(tmp_path, "write-tree").decode().strip()  # the cache-tree was invalidated
    listed = _git(tmp_path, "ls-tree", "-r", tree).decode().splitlines()
    assert {line.split("\t")[1]: line.split()[2] for line in listed} == expected


def test_conflicts_in_the_index_stop_commands_without_a_merge_state(ws: Workspace) -> None:
    """Git writes a merge's conflicts into the index (and the files) before it records
    MERGE_HEAD, and a stash pop leaves them with no state file: unmerged entries alone make
    the store refuse to commit, name the state, and leave the person's index as it is."""
    root = ws.root
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"# P\n\nbase\n")])
    ws.idle()
    git(root, "checkout", "-q", "-b", "side")
    (root / "p.md").write_text("# P\n\nside\n")
    git(root, "-c", "user.name=p", "-c", "user.email=p@x", "commit", "-qam", "side")
    git(root, "checkout", "-q", "main")
    ws.refresh()
    ws.apply(CommandMeta("page.body.save", actor="hermes"), [Write("p.md", b"# P\n\nmain\n")])
    ws.idle()
    git(root, "-c", "user.name=p", "-c", "user.email=p@x", "merge", "side", check=False)
    (root / ".git" / "MERGE_HEAD").unlink()  # (the moment before Git records the merge)
    before = (root / ".git" / "index").read_bytes()
    operation = ws.operation()
    assert operation is not None and "git merge --abort" in operation[1]
    with pytest.raises(WorkspaceInvalid, match="merge conflicts"):
        ws.apply(CommandMeta("page.create", actor="hermes"), [Write("q.md", b"q\n")])
    with pytest.raises(WorkspaceInvalid):
        ws.commit_external(["p.md"])
    assert (root / ".git" / "index").read_bytes() == before
    assert "<<<<<<<" not in git(root, "show", "HEAD:p.md")
    git(root, "reset", "-q", "--merge")
    assert ws.operation() is None
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("q.md", b"q\n")])


def test_a_file_written_again_holds_exactly_the_new_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The landing writes the index into the file it replaced the time before (its spare),
    rewriting only the parts that changed since: with entries added and removed (the parts
    after them shift) and changed, each file read back is the index as a new file holds it."""
    monkeypatch.setattr(indexfile, "BLOCK", 4)
    _git(tmp_path, "init", "-q", ".")
    blob = _git(tmp_path, "hash-object", "-w", "--stdin", data=b"x\n").decode().strip()
    names = [f"d{i % 3}/n{i}.md" for i in range(30)]
    _git(
        tmp_path,
        "update-index",
        "--index-info",
        data="".join(f"100644 {blob}\t{n}\n" for n in names).encode(),
    )
    _git(tmp_path, "write-tree")
    index_path = tmp_path / ".git" / "index"
    patched = IndexFile.parse(index_path.read_bytes())
    files = [tmp_path / "a", tmp_path / "b"]
    held: list[list[bytes] | None] = [None, None]
    for name in files:
        name.write_bytes(b"stale bytes of another index" * 100)  # (longer than the new)
    rng = random.Random(7)
    for round_ in range(40):
        for _ in range(rng.randrange(1, 3)):
            kind = rng.random()
            name = rng.choice(names) if kind < 0.6 else f"d{rng.randrange(4)}/x{round_}.md"
            patched.set({name: None if kind < 0.2 else (blob, 0o100644)})
        parts = patched.parts()
        digest = patched.checksum(parts)
        target = round_ % 2
        fd = os.open(files[target], os.O_WRONLY)
        try:
            indexfile.write_parts(fd, parts, held[target])
            os.pwrite(fd, digest, sum(len(b) for b in parts))
            os.ftruncate(fd, sum(len(b) for b in parts) + len(digest))
        finally:
            os.close(fd)
        held[target] = parts
        assert files[target].read_bytes() == patched.serialize()
        index_path.write_bytes(files[target].read_bytes())
        assert len(pygit2.Index(str(index_path))) > 0  # (libgit2 checks the sum)


@pytest.mark.parametrize("landed", [b"# P\n\nv2\n", None], ids=["saved", "deleted"])
def test_a_merge_that_raced_a_landing_can_still_be_aborted(
    ws: Workspace, landed: bytes | None
) -> None:
    """`git merge` reads HEAD and the index, then writes the index back: a landing in between
    (the index set, nothing left pending) finds its entry put back to the page's older version
    once the merge stops half-way (HEAD moved under it). `git merge --abort` then refuses
    ("not uptodate") and a `git commit` ending the merge would revert the agent's write.
    Idle, the store sets the entry again: only that path, the merge's own work left alone."""
    root = ws.root
    ws.apply(CommandMeta("page.create", actor="hermes"), [Write("p.md", b"# P\n\nv1\n")])
    ws.idle()
    before = git(root, "rev-parse", "HEAD").strip()
    old_blob = git(root, "rev-parse", "HEAD:p.md").strip()
    git(root, "checkout", "-q", "-b", "side")
    (root / "other.md").write_text("from side\n")
    git(root, "add", "other.md")
    git(root, "-c", "user.name=p", "-c", "user.email=p@x", "commit", "-qm", "side")
    git(root, "checkout", "-q", "main")
    ws.refresh()
    change = Delete("p.md") if landed is None else Write("p.md", landed)
    ws.apply(CommandMeta("page.save", actor="hermes"), [change])
    ws.idle()
    head = git(root, "rev-parse", "HEAD").strip()
    # What the merge leaves: its result from the HEAD it read, MERGE_HEAD, ORIG_HEAD there.
    git(root, "-c", "user.name=p", "-c", "user.email=p@x", "merge", "-q", "--no-commit", "side")
    git(root, "update-index", "--add", "--cacheinfo", f"100644,{old_blob},p.md")
    (root / ".git" / "ORIG_HEAD").write_text(before + "\n")
    assert "p.md" in git(root, "diff", "--cached", "--name-only", "HEAD")
    ws.idle()
    assert git(root, "diff", "--cached", "--name-only", "HEAD").split() == ["other.md"]
    git(root, "merge", "--abort")
    assert git(root, "rev-parse", "HEAD").strip() == head
    if landed is None:
        assert not (root / "p.md").exists()
    else:
        assert (root / "p.md").read_bytes() == landed
    assert git(root, "status", "--porcelain") == ""
