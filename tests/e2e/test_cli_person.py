"""Git and the CLI as the person sees them: their own edits under their Git name, `mnote
log` naming authors, `mnote page list` saying where it stopped, `mnote status` naming what
stays uncommitted, `mnote install-service` failing loudly."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.conftest import DaemonProcess

NAME, EMAIL = "Ada Lovelace", "ada@example.org"


def set_git_identity(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / ".gitconfig").write_text(f"[user]\n\tname = {NAME}\n\temail = {EMAIL}\n")


def test_the_owners_edits_carry_their_git_identity(daemon: DaemonProcess) -> None:
    set_git_identity(daemon.base / "home")
    daemon.stop()
    daemon.start()  # (the daemon reads the person's Git config as it opens the workspace)
    edited = daemon.cli("page", "save", "plan.md", "--markdown", "From the CLI.")
    assert edited.returncode == 0, edited.stderr
    found = daemon.git("log", f"--author={EMAIL}", "--format=%an <%ae>|%s")
    assert f"{NAME} <{EMAIL}>|" in found, found
    log = daemon.cli("log", "plan.md")
    assert log.returncode == 0, log.stderr
    assert NAME in log.stdout.splitlines()[0], log.stdout


def test_init_of_an_existing_folder_is_the_persons_commit(tmp_path: Path) -> None:
    home = tmp_path / "home"
    set_git_identity(home)
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "mine.md").write_text("# Mine\n\nWritten before mnoted.\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "XDG_"))},
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "mnoted.cli.main", "init", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    found = subprocess.run(
        ["git", "log", f"--author={EMAIL}", "--name-only", "--format=%an"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert NAME in found and "mine.md" in found, found


def test_page_list_says_where_it_stopped_and_lists_all(daemon: DaemonProcess) -> None:
    for i in range(12):
        (daemon.workspace / f"n{i:02d}.md").write_text(f"# Note {i}\n")
    want = {f"n{i:02d}.md" for i in range(12)}

    def listed() -> subprocess.CompletedProcess[str]:
        return daemon.cli("page", "list", "--all")

    deadline = time.monotonic() + 30
    while not want <= set(listed().stdout.split()) and time.monotonic() < deadline:
        time.sleep(0.2)
    every = listed()
    assert every.returncode == 0 and "stopped" not in every.stderr, every.stderr
    assert want <= set(every.stdout.split())
    total = len(every.stdout.splitlines())
    some = daemon.cli("page", "list", "--limit", "5")
    assert some.returncode == 0, some.stderr
    assert len(some.stdout.splitlines()) == 5
    assert "stopped at 5 pages" in some.stderr and "--all" in some.stderr
    assert len(daemon.cli("page", "list").stdout.splitlines()) == total  # (under 200)


def test_status_names_what_stays_uncommitted(daemon: DaemonProcess) -> None:
    raw = os.fsencode(daemon.workspace) + b"/caf\xe9.md"
    with open(raw, "wb") as fh:
        fh.write(b"# Latin-1 name\n")
    big = daemon.workspace / "huge.md"
    big.write_bytes(b"x" * (1_048_576 + 10))
    deadline = time.monotonic() + 30
    while True:
        status = daemon.cli("status")
        assert status.returncode == 0, status.stderr
        if ("huge.md" in status.stdout and "caf" in status.stdout) or (time.monotonic() > deadline):
            break
        time.sleep(0.3)
    assert "huge.md: " in status.stdout and "maxFileBytes" in status.stdout, status.stdout
    line = next(ln for ln in status.stdout.splitlines() if "caf" in ln)
    assert "UTF-8" in line, status.stdout


def test_install_service_fails_when_systemd_cannot_reload(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"
    fake.write_text("#!/bin/sh\necho 'Failed to connect to bus: No medium found' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {**os.environ, "HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-m", "mnoted.cli.main", "install-service"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0, done.stdout
    assert "daemon-reload failed" in done.stdout + done.stderr
    assert "No medium found" in done.stdout + done.stderr
