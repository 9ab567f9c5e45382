"""The real daemon at the kernel's inotify limits (docs/reliability.md, docs/sync.md).

A flood of real creates (two `tar -x` processes unpacking into the workspace) overflows the
kernel's inotify queue; a low ``max_user_watches`` is set for real in a user namespace. In
both cases the daemon says so in its status, reconciles by content, HEAD ends equal to the
disk, and it makes no commit once idle.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pygit2
import pytest

from tests.e2e.conftest import DaemonProcess, fsck, running_daemon, wait_for

# The same knob as test_watcher_stress.py's in-process flood; MNOTE_FLOOD_FILES=100000 for
# the full run. 10,000 files give ~30,000 events in folders already watched (create, modify,
# attrib, close-write each), about twice the kernel queue.
FLOOD = int(os.environ.get("MNOTE_FLOOD_FILES", "10000"))
FLOOD_DIRS = int(os.environ.get("MNOTE_FLOOD_DIRS", "40"))


def _default_flood_tmp() -> str | None:
    # On tmpfs `tar` writes ~100,000 files/s, far faster than the watcher reads events, so
    # the queue overflows for certain; on a busy ext4 disk the writer can be slow enough for
    # the reader to keep up. MNOTE_FLOOD_TMP=/some/disk/folder runs it on a disk instead.
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return None


FLOOD_TMP = os.environ.get("MNOTE_FLOOD_TMP") or _default_flood_tmp()
WATCH_LIMIT = 50  # set in the daemon's own user namespace
LIMIT_FOLDERS = 200
RECONCILE_SECONDS = 2.0


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--no-optional-locks", *args],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def commits(root: Path) -> int:
    return int(git(root, "rev-list", "--count", "HEAD"))


def status(d: DaemonProcess) -> dict[str, Any]:
    """The workspace's entry of GET /v1/workspaces (watcher health, pending changes)."""
    code, body = d.client(d.owner_token()).request("GET", "/v1/workspaces")
    assert code == 200, body
    return dict(body["workspaces"][0])


def wait_clean(d: DaemonProcess, timeout: float, *, settled_watcher: bool = True) -> None:
    """Until the work tree, the index and HEAD agree and the daemon has nothing pending."""
    deadline = time.monotonic() + timeout
    while True:
        left = git(d.workspace, "status", "--porcelain", "--untracked-files=all")
        if left == "":
            # Asked only now: the status endpoint waits for the runner, busy while committing.
            s = status(d)
            watcher = s["watcher"]
            if (
                s["pendingChanges"] == 0
                and watcher["pending"] == 0
                and not (settled_watcher and watcher["needsReconcile"])
            ):
                return
        failed = [line for line in d.log.read_text().splitlines() if "could not commit" in line]
        if failed:  # the runner gave up on a commit: nothing will retry it before the next pass
            raise AssertionError("\n".join(f"{x[:160]} ... {x[-400:]}" for x in failed[:3]))
        if time.monotonic() > deadline:
            raise AssertionError(f"not settled after {timeout:.0f}s:\n{left[:2000]}")
        time.sleep(1.0)


def head_blobs(root: Path, prefix: str) -> dict[str, str]:
    out = {}
    for item in git(root, "ls-tree", "-r", "-z", "HEAD", "--", prefix).split("\0"):
        if item:
            meta, path = item.split("\t", 1)
            out[path] = meta.split()[2]
    return out


def disk_blobs(root: Path, prefix: str) -> dict[str, str]:
    out = {}
    for folder, _, files in os.walk(root / prefix):
        for name in files:
            path = Path(folder, name)
            out[path.relative_to(root).as_posix()] = str(pygit2.hash(path.read_bytes()))
    return out


def assert_head_is_the_disk(root: Path, prefix: str) -> dict[str, str]:
    head, disk = head_blobs(root, prefix), disk_blobs(root, prefix)
    missing = sorted(set(disk) - set(head))
    extra = sorted(set(head) - set(disk))
    differ = sorted(p for p in set(head) & set(disk) if head[p] != disk[p])
    assert not (missing or extra or differ), (
        f"{len(missing)} on disk only {missing[:5]}, {len(extra)} in HEAD only {extra[:5]}, "
        f"{len(differ)} differ {differ[:5]}"
    )
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    checked = fsck(root)  # the daemon may be merging packs meanwhile
    assert checked.returncode == 0, checked.stderr
    return head


@contextmanager
def daemon_in(
    parent: str | None,
    prepare: Callable[[Path], None],
    *,
    prefix: list[str] | None = None,
    config: str | None = None,
) -> Iterator[DaemonProcess]:
    """A daemon on a fresh workspace under ``parent`` (None: the default temp folder)."""

    def with_prefix(d: DaemonProcess) -> None:
        d.prefix = prefix or []

    with running_daemon(prepare, config=config, setup=with_prefix, parent=parent) as d:
        yield d


# -- a flood that overflows the kernel queue --------------------------------------------------


def note(i: int) -> bytes:
    return b"# Note %d\n\n" % i + b"A line of the flood.\n" * (i % 7)


def flood_path(i: int) -> str:
    per = -(-FLOOD // FLOOD_DIRS)
    return f"flood/d{i // per:03d}/n{i:06d}.md"


def flood_tarballs(into: Path, parts: int) -> list[Path]:
    """Tar archives of the flood's notes, each folder's files in one of ``parts`` archives."""
    paths = [into / f"part{k}.tar" for k in range(parts)]
    with ExitStack() as stack:
        tars = [stack.enter_context(tarfile.open(p, "w", format=tarfile.GNU_FORMAT)) for p in paths]
        for i in range(FLOOD):
            data = note(i)
            info = tarfile.TarInfo(flood_path(i))
            info.size, info.mode, info.mtime = len(data), 0o644, 1_700_000_000
            folder = int(info.name.split("/")[1][1:])
            tars[folder % parts].addfile(info, io.BytesIO(data))
    return paths


def watch_budget_problem(needed: int) -> str | None:
    try:
        limit = int(Path("/proc/sys/fs/inotify/max_user_watches").read_text())
    except (OSError, ValueError):
        return "no /proc/sys/fs/inotify/max_user_watches"
    if limit < needed:
        return f"fs.inotify.max_user_watches is {limit}, the flood needs {needed} watches"
    return None


@pytest.mark.slow
@pytest.mark.timeout(300 + FLOOD // 50)
def test_a_real_flood_overflows_the_queue_and_head_ends_equal_to_the_disk() -> None:
    if shutil.which("tar") is None:
        pytest.skip("tar(1) is not installed")
    queue = Path("/proc/sys/fs/inotify/max_queued_events")
    if queue.exists() and int(queue.read_text()) >= FLOOD * 2:
        pytest.skip(f"the inotify queue holds {queue.read_text().strip()} events: no overflow")
    problem = watch_budget_problem(FLOOD_DIRS + 20)
    if problem:
        pytest.skip(problem)
    # Three quarters of the folders exist and are watched before the flood (a checkout or
    # a pull into a tree); the rest are new, as an unzip makes them: their files are written
    # before the watch on them exists, and the rescan of new folders finds them.
    existing = FLOOD_DIRS * 3 // 4

    def prepare(ws: Path) -> None:
        for k in range(existing):
            (ws / f"flood/d{k:03d}").mkdir(parents=True)
            (ws / f"flood/d{k:03d}/README.md").write_text(f"# Folder {k}\n")

    with daemon_in(FLOOD_TMP, prepare) as d:
        root = d.workspace
        wait_clean(d, 60)
        before = commits(root)
        tars = flood_tarballs(d.base, parts=2)

        # The daemon is stopped while the tars run, as a busy machine would hold it: the
        # kernel's queue then fills for certain (a reader that keeps up with a tmpfs would
        # otherwise see no overflow), and the test proves what follows one.
        assert d.proc is not None
        started = time.monotonic()
        os.kill(d.proc.pid, signal.SIGSTOP)
        try:
            writers = [subprocess.Popen(["tar", "-xf", str(t), "-C", str(root)]) for t in tars]
            assert [w.wait(timeout=600) for w in writers] == [0, 0]
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        written = time.monotonic() - started
        wait_clean(d, 120 + FLOOD / 100)
        settled = time.monotonic() - started

        s = status(d)
        watcher = s["watcher"]
        where = FLOOD_TMP or tempfile.gettempdir()
        made = commits(root) - before
        figures = f"written in {written:.1f}s, settled in {settled:.1f}s"
        overflows = f"{watcher['overflows']} overflow(s), {made} commit(s)"
        print(f"\nflood: {FLOOD} files in {FLOOD_DIRS} folders on {where}: {figures}, {overflows}")
        assert watcher["overflows"] >= 1, (
            f"the queue did not overflow: {FLOOD} files written in {written:.1f}s while the "
            "daemon was stopped"
        )
        assert watcher["state"] == "running", watcher
        log = d.log.read_text()
        assert "inotify queue overflowed" in log
        assert "reconciling the workspace: queue_overflow" in log

        head = assert_head_is_the_disk(root, "flood")
        expected = {flood_path(i): str(pygit2.hash(note(i))) for i in range(FLOOD)}
        flood_head = {p: oid for p, oid in head.items() if not p.endswith("README.md")}
        assert flood_head == expected  # every file, with its bytes: none lost

        made = commits(root)
        time.sleep(2)
        assert commits(root) == made, "commits made while idle"


# -- a low max_user_watches, set for real in a user namespace -----------------------------------


def lowered_watch_limit(limit: int) -> list[str]:
    """A command prefix: a new user namespace whose inotify watch limit is ``limit``."""
    script = f'echo {limit} > /proc/sys/user/max_inotify_watches && exec "$@"'
    return ["unshare", "-U", "-r", "sh", "-c", script, "sh"]


def unshare_problem() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    try:
        probe = subprocess.run(
            [*lowered_watch_limit(WATCH_LIMIT), "cat", "/proc/sys/user/max_inotify_watches"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare -U -r failed: {exc}"
    if probe.returncode != 0 or probe.stdout.strip() != str(WATCH_LIMIT):
        return (
            "cannot lower the inotify watch limit in a new user namespace "
            f"(unshare -U -r not permitted here?): {probe.stderr.strip()}"
        )
    return None


def watched_inodes(pid: int) -> set[int]:
    """Inodes the process holds inotify watches on (/proc/PID/fdinfo lists them, in hex)."""
    out: set[int] = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        out.update(
            int(ino, 16) for ino in re.findall(r"^inotify wd:\S+ ino:([0-9a-f]+)", text, re.M)
        )
    return out


@pytest.mark.slow
def test_a_low_max_user_watches_degrades_and_reconciliation_commits_unwatched_folders() -> None:
    problem = unshare_problem()
    if problem:
        pytest.skip(problem)

    def prepare(ws: Path) -> None:
        for k in range(LIMIT_FOLDERS):
            (ws / f"area/f{k:03d}").mkdir(parents=True)
            (ws / f"area/f{k:03d}/note.md").write_text(f"# Note {k}\n")

    config = f"[sync]\nreconcileSeconds = {RECONCILE_SECONDS}\n"
    with daemon_in(None, prepare, prefix=lowered_watch_limit(WATCH_LIMIT), config=config) as d:
        root = d.workspace
        wait_clean(d, 60, settled_watcher=False)
        watcher = status(d)["watcher"]
        assert watcher["state"] == "degraded", watcher
        assert watcher["watchCount"] <= WATCH_LIMIT
        assert "max_user_watches" in (watcher["lastError"] or ""), watcher

        _, health = d.client().request("GET", "/v1/health")
        watched = watched_inodes(int(health["pid"]))
        folders = [root / f"area/f{k:03d}" for k in range(LIMIT_FOLDERS)]
        unwatched = [f for f in folders if f.stat().st_ino not in watched]
        on_watch = [f for f in folders if f.stat().st_ino in watched]
        assert len(unwatched) >= LIMIT_FOLDERS - WATCH_LIMIT and on_watch, (len(watched), root)

        # Edits in folders nobody watches (only reconciliation can see them), a move from an
        # unwatched folder to a watched one (a create seen, a delete unseen), a watched edit.
        with (unwatched[0] / "note.md").open("a") as fh:
            fh.write("\nEdited where no watch is.\n")
        (unwatched[1] / "new.md").write_text("# New in an unwatched folder\n")
        (unwatched[2] / "note.md").unlink()
        os.rename(unwatched[3] / "note.md", on_watch[0] / "moved.md")
        with (on_watch[1] / "note.md").open("a") as fh:
            fh.write("\nEdited under a watch.\n")
        edited = time.monotonic()
        wait_clean(d, 30, settled_watcher=False)
        print(f"\nwatch limit: unwatched edits committed {time.monotonic() - edited:.1f}s later")

        head = assert_head_is_the_disk(root, "area")
        rel = [f.relative_to(root).as_posix() for f in (*unwatched[:4], *on_watch[:2])]
        assert head[f"{rel[0]}/note.md"] == disk_blobs(root, rel[0])[f"{rel[0]}/note.md"]
        assert f"{rel[1]}/new.md" in head
        assert f"{rel[2]}/note.md" not in head and f"{rel[3]}/note.md" not in head
        assert f"{rel[4]}/moved.md" in head
        assert len(head) == LIMIT_FOLDERS  # 200 notes - 2 gone + new.md + moved.md

        # Idle while degraded: the fallback passes keep running and commit nothing.
        made, passes = commits(root), d.log.read_text().count("while watching is incomplete")
        wait_for(
            lambda: d.log.read_text().count("while watching is incomplete") >= passes + 2,
            "two more fallback passes while idle",
            timeout=60,
        )
        assert commits(root) == made, git(root, "log", "--format=%s", "-3")
        assert status(d)["watcher"]["state"] == "degraded"


# -- many new files under a service's open-file limit --------------------------------------------

SERVICE_NOFILE = 1024  # systemd's default soft RLIMIT_NOFILE, which systemd/mnoted.service keeps


def test_a_checkout_of_thousands_of_files_under_the_service_file_limit_is_committed() -> None:
    files = 3 * SERVICE_NOFILE

    def prepare(ws: Path) -> None:  # pulled while the daemon was down: one start-up pass
        for i in range(files):
            path = ws / f"pulled/d{i % 10}/n{i:05d}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(note(i))

    limit = ["prlimit", f"--nofile={SERVICE_NOFILE}:{SERVICE_NOFILE}", "--"]
    if shutil.which("prlimit") is None:
        pytest.skip("prlimit(1) is not installed")
    with daemon_in(None, prepare, prefix=limit) as d:
        wait_clean(d, 60)
        head = assert_head_is_the_disk(d.workspace, "pulled")
        assert len(head) == files
