"""The Hermes plugin, loaded by the real hermes-agent's plugin manager, against a live daemon.

hermes-agent pins its own dependencies, so it gets a virtual environment of its own
(``.venv-hermes``, made once and reused; set ``MNOTE_HERMES_PYTHON`` to use another).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import DaemonProcess

REPO = Path(__file__).resolve().parents[2]
HERMES_VERSION = "0.19.0"

SCRIPT = """
import json, sys
from hermes_cli.plugins import discover_plugins
discover_plugins()
from tools.registry import registry
out = {"names": sorted(n for n in registry.get_all_tool_names() if n.startswith("mnote_"))}
get = registry.get_entry("mnote_page_get")
out["get"] = json.loads(get.handler({"documentId": "plan.md"}))
edit = registry.get_entry("mnote_doc_markdown_edit")
out["edit"] = json.loads(edit.handler({
    "documentId": "plan.md", "dryRun": False,
    "operations": [{"search": "Monday", "replace": "Tuesday"}],
}))
out["refused"] = json.loads(registry.get_entry("mnote_page_update_options").handler(
    {"documentId": "plan.md", "dryRun": False, "options": {"darkMode": True}}))
print(json.dumps(out))
"""


def hermes_python() -> Path:
    given = os.environ.get("MNOTE_HERMES_PYTHON")
    if given:
        return Path(given)
    venv = REPO / ".venv-hermes"
    python = venv / "bin" / "python"
    marker = venv / f".hermes-{HERMES_VERSION}"
    if not marker.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"hermes-agent=={HERMES_VERSION}"],
            check=True,
            timeout=1200,
        )
        marker.touch()
    # The plugin itself, without the daemon's dependencies (it only needs the socket).
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(REPO)],
        check=True,
        timeout=600,
        capture_output=True,
    )
    return python


@pytest.mark.slow
def test_hermes_loads_the_plugin_and_calls_the_daemon(daemon: DaemonProcess) -> None:
    python = hermes_python()
    token = daemon.agent_token("hermes", "page.write")
    home = daemon.base / "hermes-home"
    (home / ".hermes").mkdir(parents=True)
    (home / ".hermes" / "config.yaml").write_text("plugins:\n  enabled:\n    - mnote\n")
    env = {**daemon.env, "HOME": str(home), "MNOTE_TOKEN": token}
    run = subprocess.run(
        [str(python), "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert "mnote_page_get" in out["names"] and "mnote_doc_markdown_edit" in out["names"]
    assert all(len(n) <= 64 and "." not in n for n in out["names"])
    assert out["get"]["ok"] and out["get"]["toolName"] == "mnote.page.get"
    assert out["edit"]["ok"], out["edit"]
    assert "Tuesday" in (daemon.workspace / "plan.md").read_text()
    author = daemon.git("log", "-1", "--format=%an|%(trailers:key=Mnote-Actor,valueonly)").strip()
    assert author == "hermes|hermes"
    assert out["refused"]["error"]["code"] == "mnote_tool_unsupported_option"
