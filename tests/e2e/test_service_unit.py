"""The systemd unit: generated from one text, installed by `mnote install-service`, valid;
and the command `mnote init` prints to serve a workspace."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mnoted.server.unit import install, render

REPO = Path(__file__).resolve().parents[2]


def test_repository_unit_is_the_installed_text() -> None:
    assert (REPO / "systemd" / "mnoted.service").read_text(encoding="utf-8") == render()
    unit = render()
    for line in ("Type=notify", "WatchdogSec=", "Restart=on-failure", "ExecReload="):
        assert line in unit


def test_install_service_writes_unit_and_config(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mnoted.cli.main",
            "install-service",
            "--workspace",
            str(tmp_path / "notes"),
            "--no-enable",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    unit = home / ".config" / "systemd" / "user" / "mnoted.service"
    assert unit.exists() and "ExecStart=" in unit.read_text()
    config = (home / ".config" / "mnoted" / "config.toml").read_text()
    assert str((tmp_path / "notes").resolve()) in config
    assert "systemctl --user" in done.stdout
    # the workspace is outside the home folder, where the unit may not write: a drop-in
    dropin = unit.parent / "mnoted.service.d" / "workspaces.conf"
    notes = (tmp_path / "notes").resolve()
    assert dropin.read_text() == f"[Service]\nReadWritePaths={notes}\n"


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    exe = Path(sys.executable)
    unit = tmp_path / "mnoted.service"
    unit.write_text(render(str(exe)))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
def test_paths_with_spaces_quotes_and_percent_signs_hold_in_the_unit_and_config(
    tmp_path: Path,
) -> None:
    """A venv under "My Projects", a workspace "100% notes": the unit read the space as the
    end of the path and `%` as a specifier, and a quote broke the TOML config."""
    home = tmp_path / "home"
    tools = tmp_path / "My Projects" / "bin"
    tools.mkdir(parents=True)
    exe = tools / "mnoted"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    notes = tmp_path / '100% "shared" notes'
    notes.mkdir()
    install(home, str(exe), [notes], enable=False)
    unit = home / ".config" / "systemd" / "user" / "mnoted.service"
    dropin = unit.parent / "mnoted.service.d" / "workspaces.conf"
    quoted = str(notes.resolve()).replace("%", "%%").replace('"', '\\"')
    assert dropin.read_text() == f'[Service]\nReadWritePaths="{quoted}"\n'
    config = tomllib.loads((home / ".config" / "mnoted" / "config.toml").read_text())
    assert config["workspaces"] == [str(notes.resolve())]
    # systemd reads the executable's path whole: it must exist, space and all
    verified = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True
    )
    assert verified.returncode == 0, verified.stderr


def test_init_prints_a_command_that_runs_as_pasted(tmp_path: Path) -> None:
    folder = tmp_path / "My Notes"
    done = subprocess.run(
        [sys.executable, "-m", "mnoted.cli.main", "init", str(folder)],
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    command = done.stdout.splitlines()[-1].split(":  ", 1)[1]
    assert shlex.split(command) == ["mnoted", "--workspace", str(folder.resolve())]
