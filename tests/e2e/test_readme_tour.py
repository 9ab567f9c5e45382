"""The README's five-minute tour runs as written against a workspace made from the template:
a user who pastes it line by line meets no error."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import DaemonProcess

README = Path(__file__).resolve().parents[2] / "README.md"


def commands(section: str) -> list[str]:
    """The shell lines of the first ``sh`` block under README heading ``section``."""
    text = README.read_text(encoding="utf-8").split(f"## {section}\n", 1)[1]
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block is not None, f"the README has no commands under {section!r}"
    lines = []
    for line in block.group(1).replace("\\\n", " ").splitlines():
        command = re.split(r"\s{2,}#", line, maxsplit=1)[0].strip()  # drop trailing comments
        if command and not command.startswith(("make run", "export PATH")):
            lines.append(command)
    return lines


def test_the_readme_tour_runs_as_written(daemon: DaemonProcess) -> None:
    lines = commands("A five-minute tour") + commands("Connecting an agent")
    assert any(line.startswith("mnote page edit") for line in lines)
    assert any(line.startswith("mnote grant create") for line in lines)
    cli = shlex.join([sys.executable, "-m", "mnoted.cli.main", "--socket", str(daemon.socket)])
    script = "\n".join(
        ["set -euo pipefail", f'mnote() {{ {cli} "$@"; }}']
        + [line.replace("~/notes", shlex.quote(str(daemon.workspace))) for line in lines]
    )
    ran = subprocess.run(
        ["bash", "-c", script], env=daemon.env, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, f"{ran.stdout}\n{ran.stderr}"
    assert "Typed in my editor." in (daemon.workspace / "Welcome.md").read_text()
