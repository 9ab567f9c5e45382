"""Fault injection: SIGKILL the writing process at every step of a command, then recover.

After each kill the workspace is reopened (which recovers) and checked: every acknowledged
command is in HEAD's history with its trailers, the files on disk are byte for byte what the
commands in history wrote, no command is half-applied, ``git fsck --strict`` passes and
``git status --porcelain`` is empty. Iterations: ``MNOTE_CRASH_ITERATIONS`` (default 30).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mnoted.errors import StorageError
from mnoted.store import CommandMeta, Workspace, Write, durable, faults
from mnoted.store.journal import JOURNAL_NAME, Entry, FileStep, Journal
from mnoted.store.statedir import STATE_DIR
from tests.store.conftest import assert_clean, git

WRITER = Path(__file__).with_name("crash_writer.py")
PATHS = ["a.md", "b.md", "notes/c.md", "notes/deep/d.md", "e.md"]


def _run_writer(
    root: Path,
    first: int,
    count: int,
    seed: int,
    step: str | None,
    countdown: int,
    kill_after: float | None,
) -> tuple[list[str], bool]:
    args = [sys.executable, str(WRITER), str(root), str(first), str(count), str(seed)]
    if step is not None:
        args += [step, str(countdown)]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    # Its output goes to files, not pipes: a writer whose pipe filled would be killed
    # blocked in a print, never inside the store.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, stdout=out, stderr=err, env=env)
        try:
            proc.wait(timeout=kill_after if kill_after is not None else 60)
        except subprocess.TimeoutExpired:
            if kill_after is None:
                raise
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        out.seek(0)
        err.seek(0)
        text = out.read().decode()
        assert proc.returncode in (0, -signal.SIGKILL), err.read().decode()
    return text.splitlines(), proc.returncode == -signal.SIGKILL


def _expected(events: list[tuple[str, object]], applied: list[int]) -> dict[str, str]:
    """Fold the user's edits and the commands that made it into history, in order."""
    state: dict[str, str] = {}
    done = set(applied)
    for kind, data in events:
        if kind == "ext":
            path, content = data  # type: ignore[misc]
            state[path] = content
            continue
        k, ops = data  # type: ignore[misc]
        if k not in done:
            continue
        for op in ops:
            if op[0] == "w":
                state[op[1]] = op[2]
            elif op[0] == "d":
                state.pop(op[1])
            else:
                state[op[2]] = state.pop(op[1])
    return state


@pytest.mark.slow
def test_sigkill_at_every_step_recovers(tmp_path: Path) -> None:
    iterations = int(os.environ.get("MNOTE_CRASH_ITERATIONS", "30"))
    root = tmp_path / "ws"
    Workspace.init(root).close()
    rng = random.Random(1234)
    events: list[tuple[str, object]] = []
    acked: dict[int, str] = {}
    next_k = 0
    kills = 0
    modes = [*faults.STEPS, "timer"]
    for i in range(iterations):
        mode = modes[i % len(modes)]
        if (
            i % 3 == 1 or mode == "external-committed"
        ):  # the user edits a file behind mnoted's back before the next run
            on_disk = [p for p in PATHS if (root / p).exists()]
            if on_disk:
                path = rng.choice(on_disk)
                content = f"external edit {i} of {path}\n"
                (root / path).write_text(content)
                events.append(("ext", (path, content)))
        count = rng.randint(2, 6)
        if mode == "timer":  # a kill at an arbitrary instant of a longer run
            count = 60
            lines, killed = _run_writer(root, next_k, count, i, None, 0, rng.uniform(0.3, 0.9))
        else:
            countdown = 0 if mode == "external-committed" else rng.randint(0, 3)
            lines, killed = _run_writer(root, next_k, count, i, mode, countdown, None)
        kills += killed
        for n, line in enumerate(lines, 1):
            kind, _, rest = line.partition(" ")
            try:
                if kind == "BEGIN":
                    data = json.loads(rest)
                    events.append(("cmd", (data["k"], data["ops"])))
                elif kind == "ACK":
                    k, commit = rest.split()
                    acked[int(k)] = commit
            except ValueError:  # killed while printing: apply() not called yet, or no ack
                assert n == len(lines), f"the writer's line {n} of {len(lines)} came cut"
        next_k += count

        with Workspace.open(root) as ws:  # recovery happens here
            ws.commit_external(ws.scan_changes())  # the daemon's start-up reconciliation
            fields = ["%H"] + [
                f"%(trailers:key={key},valueonly,separator=)"
                for key in ("Mnote-Command-Id", "Mnote-Trace-Id", "Mnote-Idempotency-Key")
            ]
            log = git(root, "log", "--first-parent", "--reverse", "--format=" + "%x00".join(fields))
            history = [line.split("\0") for line in log.splitlines()]
            ours = [h for h in history if h[1].startswith("cmd_")]
            applied = [int(h[1].removeprefix("cmd_")) for h in ours]
            assert applied == sorted(applied), "commands applied out of order"
            assert len(set(applied)) == len(applied), "a command was committed twice"
            by_commit = {h[0]: h for h in ours}
            for k, commit in acked.items():  # in HEAD's history, with its trailers
                assert commit in by_commit, f"acknowledged command {k} lost"
                assert by_commit[commit][1:] == [f"cmd_{k}", f"trace_{k}", f"key_{k}"]
            # after recovery the next command must not reuse a lost one's number
            next_k = max(next_k, max(applied, default=-1) + 1)
            expected = _expected(events, applied)
            for path in PATHS:
                disk = root / path
                if path in expected:
                    assert disk.read_bytes() == expected[path].encode(), f"{path} differs"
                else:
                    assert not disk.exists(), f"{path} should not exist"
            # an acknowledged command replays from its idempotency record after restart
            if acked:
                k = max(acked)
                rec = ws.idempotency.check(f"key_{k}", f"hash_{k}", "hermes")
                assert rec is not None and rec.commit == acked[k]
            assert not list(root.rglob(".mnote-tmp-*"))
        assert_clean(root)
    assert kills >= iterations // 2, f"only {kills} of {iterations} runs were killed"


def test_an_edit_made_after_a_crash_is_kept(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    with Workspace.init(root) as ws:
        ws.apply(CommandMeta("page.create", actor="hermes"), [Write("a.md", b"v1\n")])
    script = (
        "import sys\n"
        "from mnoted.store import CommandMeta, Workspace, Write, faults\n"
        "ws = Workspace.open(sys.argv[1])\n"
        "faults.arm('ref-updated')\n"
        "ws.apply(CommandMeta('page.body.save', actor='hermes', command_id='cmd_v2'),"
        " [Write('a.md', b'v2\\n')])\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    proc = subprocess.run([sys.executable, "-c", script, str(root)], env=env, check=False)
    assert proc.returncode == -signal.SIGKILL
    assert (root / "a.md").read_bytes() == b"v1\n"  # killed after the branch moved
    (root / "a.md").write_bytes(b"user edit after the crash\n")
    with Workspace.open(root) as ws:
        assert ws.read_head("a.md") == b"user edit after the crash\n"
    assert git(root, "show", "HEAD~1:a.md") == "v2\n"  # the command completed...
    assert git(root, "log", "-1", "--format=%(trailers:key=Mnote-Actor,valueonly)").strip() == (
        "external"  # ...and the user's later edit was kept and committed on top
    )
    assert (root / "a.md").read_bytes() == b"user edit after the crash\n"
    assert_clean(root)


def test_an_answered_command_stays_journaled_until_its_folders_are_synced(
    tmp_path: Path,
) -> None:
    """A command is answered once its journal is durable; the journal names it until the
    syncs of its folders end, which the next landing (or idling) waits for first."""
    with Workspace.init(tmp_path / "ws") as ws:
        journal = Journal(ws.state_dir)
        first = ws.apply(CommandMeta("page.create", actor="hermes"), [Write("a.md", b"v1\n")])
        assert (ws.root / "a.md").read_bytes() == b"v1\n"
        assert git(ws.root, "rev-parse", "HEAD").strip() == first.commit
        named = journal.read()
        assert named is not None and named.commit == first.commit
        second = ws.apply(CommandMeta("page.save", actor="hermes"), [Write("a.md", b"v2\n")])
        named = journal.read()
        assert named is not None and named.commit == second.commit  # (the first's dropped)
        ws.idle()
        assert journal.read() is None
        journal.close()


def test_folders_whose_sync_failed_after_the_answer_are_synced_before_the_next_landing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Workspace.init(tmp_path / "ws") as ws:
        journal = Journal(ws.state_dir)
        first = ws.apply(CommandMeta("page.create", actor="hermes"), [Write("a.md", b"v1\n")])
        settling = ws.landing.settling
        assert settling is not None

        def failed() -> None:
            raise OSError(errno.EIO, "the folder's sync failed")

        monkeypatch.setattr(settling[0], "wait", failed)
        real = durable.sync_paths
        monkeypatch.setattr(durable, "sync_paths", lambda *a, **k: failed())
        with pytest.raises(StorageError) as refused:  # synced again, which fails as well
            ws.apply(CommandMeta("page.save", actor="hermes"), [Write("a.md", b"v2\n")])
        assert refused.value.details["errno"] == errno.EIO
        named = journal.read()
        assert named is not None and named.commit == first.commit  # kept for recovery
        assert (ws.root / "a.md").read_bytes() == b"v1\n"
        monkeypatch.setattr(durable, "sync_paths", real)  # the fault clears
        ws.apply(CommandMeta("page.save", actor="hermes"), [Write("a.md", b"v2\n")])
        assert (ws.root / "a.md").read_bytes() == b"v2\n"
        assert git(ws.root, "log", "-2", "--format=%s").splitlines() == [
            "page.save: a.md",
            "page.create: a.md",
        ]
        journal.close()
    assert_clean(tmp_path / "ws")


def test_recovery_syncs_the_folders_of_a_command_it_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after the answer, before its folders were synced: the new names may not have
    survived a power cut, so recovery syncs them before it drops the journal."""
    root = tmp_path / "ws"
    Workspace.init(root).close()
    script = (
        "import os, sys\n"
        "from mnoted.store import CommandMeta, Workspace, Write\n"
        "ws = Workspace.open(sys.argv[1])\n"
        "ws.apply(CommandMeta('page.create', actor='hermes'), [Write('notes/a.md', b'v1\\n')])\n"
        "os._exit(0)  # answered; the journal still names it\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    subprocess.run([sys.executable, "-c", script, str(root)], env=env, check=True)
    journal = Journal(root / STATE_DIR)
    assert journal.read() is not None
    synced: list[set[Path]] = []
    real = durable.sync_paths

    def recorded(paths: Sequence[str | os.PathLike[str]], fds: Sequence[int] = ()) -> None:
        synced.append({Path(p) for p in paths})
        real(paths, fds)

    monkeypatch.setattr(durable, "sync_paths", recorded)
    with Workspace.open(root) as ws:
        assert ws.read_head("notes/a.md") == b"v1\n"
        branch = ws.gitdir / ws.branch
    assert any({root / "notes", branch.parent} <= paths for paths in synced), synced
    assert journal.read() is None
    journal.close()
    assert (root / "notes" / "a.md").read_bytes() == b"v1\n"
    assert_clean(root)


def test_a_torn_journal_is_ignored(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    entry = Entry("cmd", "refs/heads/main", None, "c" * 40, (FileStep("a.md", None, "b" * 40, 0),))
    journal.write(entry)
    assert journal.read() == entry
    raw = (tmp_path / "command.journal").read_bytes()
    (tmp_path / "command.journal").write_bytes(raw[: len(raw) // 2])
    assert journal.read() is None
    journal.clear()
    assert journal.read() is None
    journal.close()


def _entry(n_files: int, tag: str) -> Entry:
    files = tuple(FileStep(f"{tag}/{i}.md", None, f"{i:040x}", 0o100644) for i in range(n_files))
    return Entry(f"cmd_{tag}", "refs/heads/main", None, "c" * 40, files)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(st.none(), st.tuples(st.integers(0, 40), st.text("abc", min_size=1))),
        max_size=12,
    ),
    st.integers(0, 10_000),
)
@example(steps=[(7, "aaaa")], cut=897)  # a record as long as the newest, cut after its last change
def test_the_journal_overwritten_in_place_reads_back_its_newest_record(
    steps: list[tuple[int, str] | None], cut: int
) -> None:
    """Records of any size over one another, cleared or not: the newest one is read back
    (the bytes of a longer earlier one behind it do not matter), a clear reads as none, and
    the newest record torn at any byte over the older ones reads as none."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        journal = Journal(folder)
        expected: Entry | None = None
        for step in steps:
            if step is None:
                journal.clear()
                expected = None
            else:
                expected = _entry(*step)
                journal.write(expected)
            assert journal.read() == expected
        path = folder / JOURNAL_NAME
        before = path.read_bytes()
        newest = _entry(7, "torn")
        journal.write(newest, sync=False)
        written = path.read_bytes()
        record_end = written.index(b"\n") + 1 + len(newest.to_json())
        at = cut % record_end  # a torn write: only a prefix of the record reached the disk
        left = written[:at] + before[at:]
        path.write_bytes(left)
        torn = journal.read()
        if left[:record_end] == written[:record_end]:
            # The bytes not written were the same already (records of one length ending
            # alike): the new record is whole on the disk.
            assert torn == newest
        else:
            # Nothing of the new record reached the disk yet: the older state is read back.
            assert torn == (expected if written[:at] == before[:at] else None)
        journal.close()


def test_a_journal_in_the_earlier_format_is_still_read(tmp_path: Path) -> None:
    entry = _entry(2, "old")
    body = entry.to_json()
    (tmp_path / JOURNAL_NAME).write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    journal = Journal(tmp_path)
    assert journal.read() == entry
    journal.clear()
    assert journal.read() is None
    journal.write(_entry(1, "new"))
    assert journal.read() == _entry(1, "new")
    journal.close()
