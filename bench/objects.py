"""A commit's objects among many packs: written through the repository, and by the store.

libgit2 looks for every object written through a repository's object database and, not
finding it, reads the pack folder again (``git_odb_refresh``), so each new object costs in
proportion to the packs there. The store builds its trees and commits in a repository with
no folder over its staged objects (``packs.object_writer``) and hashes its blobs itself.
For K packs, the script times one blob, one tree and one commit written each way on the
same repository, in the same run, and prints the median in microseconds.

    python bench/objects.py                  # 1, 16 and 64 packs, 300 commits each way
    python bench/objects.py --packs 1,200 --commits 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pygit2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commit import GIT_ENV

from mnoted.core.blob import blob_id
from mnoted.store import packs

Write = Callable[[bytes, pygit2.Tree, pygit2.Oid, int], None]
ENV = {**os.environ, **GIT_ENV}


def repository(root: Path, count: int) -> pygit2.Repository:
    """A repository with ``count`` packs of a few objects each, and one commit."""
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=ENV)
    repo = pygit2.Repository(str(root))
    for _ in range(count):
        ids = [str(repo.create_blob(os.urandom(64))) for _ in range(3)]
        subprocess.run(
            ["git", "-C", str(root), "pack-objects", "-q", ".git/objects/pack/pack"],
            input="\n".join(ids).encode(),
            check=True,
            stdout=subprocess.DEVNULL,
            env=ENV,
        )
    subprocess.run(["git", "-C", str(root), "prune-packed"], check=True, env=ENV)
    (root / "note.md").write_bytes(b"# Note\n")
    subprocess.run(["git", "-C", str(root), "add", "note.md"], check=True, env=ENV)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "first"], check=True, env=ENV)
    return pygit2.Repository(str(root))


def timed(ways: list[Write], repo: pygit2.Repository, commits: int) -> list[float]:
    """Median µs of each way of writing, taking turns commit by commit."""
    head = repo.head.peel(pygit2.Commit)
    samples: list[list[float]] = [[] for _ in ways]
    for i in range(commits):
        for way, out in zip(ways, samples, strict=True):
            data = b"# Note %d\n" % i + os.urandom(16).hex().encode()
            t0 = time.perf_counter()
            way(data, head.tree, head.id, i)
            out.append(time.perf_counter() - t0)
    return [statistics.median(out) * 1e6 for out in samples]


def compare(root: Path, count: int, commits: int) -> tuple[float, float]:
    """Median µs of a blob, a tree and a commit written each way, with ``count`` packs."""
    sig = pygit2.Signature("bench", "bench@mnote.local")
    repo = repository(root, count)
    staging = packs.Staging(None)  # as the workspace sets its repository up
    odb = pygit2.Odb(str(Path(repo.path) / "objects"))
    odb.add_backend(staging, 2)
    repo.set_odb(odb)
    writer = packs.object_writer(staging, repo)

    def through_repository(data: bytes, tree: pygit2.Tree, parent: pygit2.Oid, i: int) -> None:
        builder = repo.TreeBuilder(tree)
        builder.insert(f"n{i}.md", repo.create_blob(data), pygit2.GIT_FILEMODE_BLOB)
        repo.create_commit(None, sig, sig, f"n{i}", builder.write(), [parent])

    def by_the_store(data: bytes, tree: pygit2.Tree, parent: pygit2.Oid, i: int) -> None:
        blob = pygit2.Oid(hex=blob_id(data))
        staging.add(blob, pygit2.GIT_OBJECT_BLOB, data)
        builder = writer.TreeBuilder(tree.id)
        builder.insert(f"n{i}.md", blob, pygit2.GIT_FILEMODE_BLOB)
        writer.create_commit(None, sig, sig, f"n{i}", builder.write(), [parent])

    try:
        before, after = timed([through_repository, by_the_store], repo, commits)
        return before, after
    finally:
        writer.free()
        repo.free()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packs", default="1,16,64", help="comma-separated pack counts")
    parser.add_argument("--commits", type=int, default=300, help="commits timed each way")
    args = parser.parse_args()
    print(f"{'packs':>6} {'repository µs':>14} {'store µs':>9} {'ratio':>6}")
    with tempfile.TemporaryDirectory(prefix="mnote-objects-") as tmp:
        for count in (int(n) for n in args.packs.split(",")):
            before, after = compare(Path(tmp) / f"r{count}", count, args.commits)
            print(f"{count:>6} {before:>14.1f} {after:>9.1f} {before / after:>5.1f}x")


if __name__ == "__main__":
    main()
