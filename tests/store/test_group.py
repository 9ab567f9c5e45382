"""Group commit: several commands land together, each its own commit, one durability wait."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest

from mnoted.errors import BaseChanged, Conflict, StorageError
from mnoted.store import CommandMeta, Workspace, Write, faults
from mnoted.store.message import parse_trailers
from tests.store.conftest import assert_clean, git


def meta(n: int, key: str | None = None) -> CommandMeta:
    return CommandMeta(
        "page.body.save",
        actor="hermes",
        trace_id=f"trace-{n}",
        idempotency_key=key,
        request_hash=f"hash-{n}" if key else None,
    )


@pytest.fixture(autouse=True)
def _disarm() -> None:
    yield
    faults.disarm()


def head(root: Path) -> str:
    return git(root, "rev-parse", "HEAD").strip()


def test_each_command_is_its_own_commit_landing_together(ws: Workspace) -> None:
    before = head(ws.root)
    results = []
    with ws.group():
        for n in range(3):
            results.append(ws.apply(meta(n), [Write(f"p{n}.md", f"page {n}\n".encode())]))
            # nothing is on the branch or on disk until the group lands
            assert head(ws.root) == before
            assert not (ws.root / f"p{n}.md").exists()
        # reads inside the group see the pending commits
        assert ws.read_head("p0.md") == b"page 0\n"
        assert ws.head == results[-1].commit
    assert head(ws.root) == results[-1].commit
    log = git(ws.root, "log", "--format=%H %P", f"{before}..HEAD").split("\n")[:-1]
    assert [line.split()[0] for line in reversed(log)] == [r.commit for r in results]
    for n, r in enumerate(results):
        assert r.parent == (before if n == 0 else results[n - 1].commit)
        trailers = parse_trailers(git(ws.root, "log", "-1", "--format=%B", r.commit))
        assert trailers["Mnote-Trace-Id"] == f"trace-{n}"
        assert trailers["Mnote-Command-Id"] == r.command_id
        assert (ws.root / f"p{n}.md").read_bytes() == f"page {n}\n".encode()
    ws.idle()
    assert_clean(ws.root)


def test_later_commands_build_on_earlier_ones_in_the_same_group(ws: Workspace) -> None:
    with ws.group():
        ws.apply(meta(1), [Write("a.md", b"one\n")])
        second = ws.apply(meta(2), [Write("a.md", b"two\n")])
        assert ws.revision_of("a.md") == second.commit
    assert (ws.root / "a.md").read_bytes() == b"two\n"
    assert git(ws.root, "show", "HEAD~1:a.md") == "one\n"
    assert ws.history("a.md")[0].commit == second.commit
    ws.idle()
    assert_clean(ws.root)


def test_callbacks_wait_for_landing(ws: Workspace) -> None:
    seen: list[str] = []
    with ws.group():
        ws.apply(meta(1), [Write("a.md", b"a\n")])
        ws.after_landing(lambda: seen.append(head(ws.root)))
        assert seen == []
    assert seen == [head(ws.root)]


def test_landing_callbacks_run_once_the_group_landed(ws: Workspace) -> None:
    before = head(ws.root)
    seen: list[str] = []

    def failing() -> None:
        raise RuntimeError("a listener's bug")

    with ws.group():
        ws.apply(meta(1), [Write("a.md", b"a\n")])
        ws.after_landing(failing)  # logged: the group lands all the same
        ws.after_landing(lambda: seen.append("landed at " + head(ws.root)))
        assert seen == []
    after = head(ws.root)
    assert after != before
    assert seen == ["landed at " + after]


def test_branch_moved_by_someone_else_abandons_the_group(ws: Workspace) -> None:
    ws.apply(meta(0), [Write("a.md", b"a\n")])
    ws.idle()  # the Git index in step with HEAD, as the daemon keeps it when idle
    seen: list[str] = []
    with pytest.raises(Conflict), ws.group():
        ws.apply(meta(1, key="k1"), [Write("b.md", b"b\n")])
        ws.after_landing(lambda: seen.append("landed"))
        # the person commits on the branch while the group is pending
        (ws.root / "c.md").write_text("mine\n")
        git(ws.root, "add", "c.md")
        git(ws.root, "commit", "-q", "-m", "mine")
    theirs = head(ws.root)
    assert git(ws.root, "log", "-1", "--format=%s") == "mine\n"
    assert not (ws.root / "b.md").exists()
    assert seen == []
    assert ws.blob_id("b.md") is None and ws.idempotency.check("k1", "hash-1", "hermes") is None
    # the same command run again on its own lands on the person's commit
    again = ws.apply(meta(1, key="k1"), [Write("b.md", b"b\n")])
    assert again.parent == theirs and not again.replayed
    ws.idle()
    assert_clean(ws.root)


@pytest.mark.parametrize("step", ["objects-written"])
def test_fault_before_the_branch_moves_keeps_nothing(ws: Workspace, step: str) -> None:
    before = head(ws.root)
    faults.arm_error(step, errno.ENOSPC)
    with pytest.raises(StorageError), ws.group():
        ws.apply(meta(1, key="k1"), [Write("a.md", b"a\n")])
        ws.apply(meta(2, key="k2"), [Write("b.md", b"b\n")])
    assert head(ws.root) == before
    assert not (ws.root / "a.md").exists() and ws.blob_id("a.md") is None
    # run again one at a time: each lands
    first = ws.apply(meta(1, key="k1"), [Write("a.md", b"a\n")])
    assert not first.replayed and first.parent == before
    ws.idle()
    assert_clean(ws.root)


@pytest.mark.parametrize(
    "step", ["journal-written", "ref-updated", "files-written", "sidecar-updated"]
)
def test_fault_after_the_journal_is_completed_and_replays(ws: Workspace, step: str) -> None:
    faults.arm_error(step, errno.EIO)
    with pytest.raises(StorageError), ws.group():
        one = ws.apply(meta(1, key="k1"), [Write("a.md", b"a\n")])
        two = ws.apply(meta(2, key="k2"), [Write("b.md", b"b\n")])
    # the commands run again one at a time: the group is completed first, and each replays
    again = ws.apply(meta(1, key="k1"), [Write("a.md", b"a\n")])
    assert again.replayed and again.commit == one.commit
    assert ws.apply(meta(2, key="k2"), [Write("b.md", b"b\n")]).commit == two.commit
    assert head(ws.root) == two.commit
    assert (ws.root / "a.md").read_bytes() == b"a\n" and (ws.root / "b.md").read_bytes() == b"b\n"
    ws.idle()
    assert_clean(ws.root)


def test_crash_after_landing_is_recovered_on_open(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    Workspace.init(root).close()
    ws = Workspace.open(root)
    faults.arm_error("files-written", errno.EIO)
    with pytest.raises(StorageError), ws.group():
        ws.apply(meta(1), [Write("a.md", b"a\n")])
        last = ws.apply(meta(2), [Write("a.md", b"aa\n"), Write("b.md", b"b\n")])
    ws.close()
    with Workspace.open(root) as again:  # a restart completes the group from its journal
        assert again.head == last.commit
        assert again.blob_id("b.md") is not None
        again.idle()
    assert (root / "a.md").read_bytes() == b"aa\n"
    assert_clean(root)


def test_a_file_edited_while_the_group_is_pending_keeps_the_persons_bytes(
    ws: Workspace,
) -> None:
    """A save made while a group waits to land: the group lands nothing (its commits would
    be answered and then reverted by the save), and the runner runs its commands again one
    at a time, each on the person's committed save."""
    ws.apply(meta(0), [Write("a.md", b"base\n")])
    before = head(ws.root)
    with pytest.raises(Conflict), ws.group():
        ws.apply(meta(1), [Write("a.md", b"agent\n")])
        ws.apply(meta(2), [Write("b.md", b"b\n")])
        (ws.root / "a.md").write_bytes(b"person\n")
    assert head(ws.root) == before
    assert (ws.root / "a.md").read_bytes() == b"person\n"
    again = ws.apply(meta(1), [Write("a.md", b"person\nagent\n")])
    assert again.external_commit is not None
    assert git(ws.root, "show", f"{again.external_commit}:a.md") == "person\n"
    assert (ws.root / "a.md").read_bytes() == b"person\nagent\n"
    ws.idle()
    assert_clean(ws.root)


def test_a_save_between_a_commands_check_and_its_commit_keeps_the_persons_bytes(
    ws: Workspace,
) -> None:
    """Inside a group a path is checked against the disk once: the page's load checks it,
    the command's commit does not check it again. A save in between is caught before the
    group lands: nothing lands, and the command run again alone finds its base changed
    (the executor plans it again on the save)."""
    ws.apply(meta(0), [Write("a.md", b"base\n")])
    blob = ws.blob_id("a.md")
    before = head(ws.root)
    with pytest.raises(Conflict), ws.group():
        assert ws.commit_external(["a.md"]) is None  # the load's check: nothing pending
        (ws.root / "a.md").write_bytes(b"person\n")  # saved a moment later
        ws.apply(meta(1), [Write("a.md", b"agent\n", base_blob=blob)])
    assert head(ws.root) == before
    with pytest.raises(BaseChanged):
        ws.apply(meta(1), [Write("a.md", b"agent\n", base_blob=blob)])
    assert git(ws.root, "show", "HEAD:a.md") == "person\n"
    assert (ws.root / "a.md").read_bytes() == b"person\n"
    ws.idle()
    assert_clean(ws.root)


def test_an_empty_group_changes_nothing(ws: Workspace) -> None:
    before = head(ws.root)
    with ws.group():
        ws.read_head(".gitignore")
    assert head(ws.root) == before


def test_commits_of_mnoted_rewound_by_someone_stay_reachable(ws: Workspace) -> None:
    ws.apply(meta(1), [Write("a.md", b"one\n")])
    ws.idle()
    kept = ws.apply(meta(2), [Write("a.md", b"two\n")])
    ws.idle()
    git(ws.root, "reset", "-q", "--hard", "HEAD~1")  # or a failed `git pull` restoring HEAD
    ws.refresh()
    assert git(ws.root, "rev-parse", f"refs/mnote/rewound/{kept.commit}").strip() == kept.commit
    assert kept.command_id in git(ws.root, "log", "--all", "--format=%B")
    # the person's own commits rewound by the person leave no such ref
    (ws.root / "mine.md").write_text("mine\n")
    git(ws.root, "add", "mine.md")
    git(ws.root, "commit", "-q", "-m", "mine")
    ws.refresh()
    git(ws.root, "reset", "-q", "--hard", "HEAD~1")
    ws.refresh()
    assert git(ws.root, "for-each-ref", "refs/mnote/rewound").count("\n") == 1


def packed_sizes(root: Path) -> dict[str, int]:
    """Object id -> bytes it takes in its pack, from ``git verify-pack -v``."""
    sizes = {}
    for idx in (root / ".git" / "objects" / "pack").glob("pack-*.idx"):
        for line in git(root, "verify-pack", "-v", str(idx)).splitlines():
            parts = line.split()
            if len(parts) >= 5 and parts[1] in ("blob", "tree", "commit"):
                sizes[parts[0]] = int(parts[3])
    return sizes


def test_a_large_blob_is_stored_uncompressed_and_reads_back_everywhere(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    Workspace.init(root).close()
    big = b"".join(b"line %d of a large page\n" % i for i in range(30_000))  # ~800 KB
    with Workspace.open(root) as ws:
        result = ws.apply(meta(1), [Write("big.md", big)])
        oid = git(root, "rev-parse", "HEAD:big.md").strip()
        assert not (root / ".git" / "objects" / oid[:2]).exists()  # no loose file
        assert packed_sizes(root)[oid] > len(big)  # in a pack, stored, not deflated
        ws.idle()
    assert (root / "big.md").read_bytes() == big
    assert (
        subprocess.run(
            ["git", "-C", str(root), "cat-file", "blob", oid], capture_output=True, check=True
        ).stdout
        == big
    )
    git(root, "fsck", "--strict")
    with Workspace.open(root) as ws:  # read back by libgit2 from the pack
        assert ws.read_head("big.md") == big
        ws.maintenance()
        assert ws.read_blob(oid) == big
        again = ws.apply(meta(2), [Write("big.md", big + b"more\n")])
        assert again.parent == result.commit
    assert_clean(root)
