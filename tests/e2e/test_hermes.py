"""The Hermes plugin, loaded and dispatched by the real hermes-agent 0.19 against a live
daemon, set up as the README's Hermes section says; and ``mnote mcp`` from that same
environment, on the ``mcp`` 1.26 hermes-agent pins.

hermes-agent pins its own dependencies, so it gets a virtual environment of its own
(``.venv-hermes``: made once per machine and reused; set ``MNOTE_HERMES_PYTHON`` to use
another where mnoted is installed already).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mnoted.contract.tools import TOOLS
from tests.e2e.conftest import DaemonProcess
from tests.e2e.every_tool import report
from tests.e2e.test_mcp import every_tool

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
HERMES = "hermes-agent[mcp]==0.19.0"

SCRIPT = """
import json, sys
from hermes_cli.plugins import discover_plugins
discover_plugins()
from tools.registry import registry
from model_tools import handle_function_call
from tests.e2e.every_tool import drive
names = sorted(n for n in registry.get_all_tool_names() if n.startswith("mnote_"))
schemas = {n: registry.get_schema(n)["parameters"] for n in names}
def call(name, arguments):
    return json.loads(handle_function_call(name, dict(arguments)))
out = {"names": names, "schemas": schemas, "results": drive(call, schemas)}
print(json.dumps(out))
"""


def readme_hermes() -> tuple[str, str]:
    """The README's Hermes section: its install command and its ``config.yaml``."""
    text = README.read_text(encoding="utf-8").split("### Hermes\n", 1)[1].split("\n## ", 1)[0]
    install = re.search(r"```sh\n(.*?)\n```", text, re.S)
    config = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert install is not None and config is not None, "the README's Hermes section changed"
    return install.group(1).strip(), config.group(1)


def hermes_python() -> Path:
    """Hermes's environment, with mnoted installed by the README's one command (both kept
    for the next run; the command runs again when pyproject.toml changes)."""
    given = os.environ.get("MNOTE_HERMES_PYTHON")
    if given:
        return Path(given)
    venv = REPO / ".venv-hermes"
    # one builder at a time: the test runner's parallel workers share it
    with (REPO / ".venv-hermes.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        return _built(venv)


def _built(venv: Path) -> Path:
    python = venv / "bin" / "python"
    hermes = venv / ".hermes-0.19.0-mcp"
    if not hermes.exists():  # (Hermes as its users install it)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", HERMES]
        subprocess.run(pip, check=True, timeout=1800)
        hermes.touch()
    install, _config = readme_hermes()
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes() + install.encode())
    installed = venv / f".mnoted-{digest.hexdigest()[:12]}"
    if not installed.exists():
        command = install.replace("~/src/mnoted", str(REPO))
        env = {**os.environ, "HERMES_PYTHON": str(python)}
        subprocess.run(["bash", "-c", command], check=True, env=env, timeout=1800)
        installed.touch()
    return python


@pytest.mark.slow
def test_every_tool_through_hermes_and_through_mcp_1_26(daemon: DaemonProcess) -> None:
    python = hermes_python()
    versions = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert versions.stdout.strip() == "1.26.0"
    token = daemon.agent_token("hermes", "page.write", "artifact.write")
    _install, config = readme_hermes()
    home = daemon.base / "home"
    (home / ".hermes").mkdir(parents=True, exist_ok=True)
    (home / ".hermes" / "config.yaml").write_text(config)
    # what a desktop session gives Hermes: no MNOTED_SOCKET, no XDG_RUNTIME_DIR
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "MNOTE_TOKEN": token}
    run = subprocess.run(
        [str(python), "-c", SCRIPT], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    names = out["names"]
    assert "mnote_review_accept" not in names and "mnote_page_create" in names
    agent_tools = [s for s in TOOLS.values() if not s.owner_only]
    assert len(names) == len(agent_tools) and all(len(n) <= 64 and "." not in n for n in names)
    assert report(out["results"], names) == f"{len(names)}/{len(names)} usable"
    author = daemon.git("log", "-1", "--format=%an|%(trailers:key=Mnote-Actor,valueonly)").strip()
    assert author == "hermes|hermes"

    # the same environment's `mnote mcp` (mcp 1.26), driven by the SDK client
    over_mcp = every_tool(daemon, daemon.owner_token(), mnote=python.parent / "mnote")
    offered = sorted(t["name"] for t in over_mcp["tools"])
    assert report(over_mcp["results"], offered) == f"{len(TOOLS)}/{len(TOOLS)} usable"


def test_the_plugin_derives_the_idempotency_key_from_the_runtimes_call_id(
    daemon: DaemonProcess,
) -> None:
    from mnoted.contract.tools import TOOLS
    from mnoted.integrations.hermes_plugin import PluginClient, make_handler

    token = daemon.agent_token("hermes", "page.write")
    clients = PluginClient(lambda: daemon.client(token))
    handler = make_handler(TOOLS["mnote.doc.markdown_edit"], clients)
    edit = {"documentId": "plan.md", "operations": [{"search": "Monday", "replace": "Friday"}]}
    head = daemon.git("rev-parse", "HEAD").strip()
    first = json.loads(handler(dict(edit), tool_call_id="call_7"))
    again = json.loads(handler(dict(edit), tool_call_id="call_7"))
    assert first["ok"] and again["audit"]["replayed"] is True
    assert daemon.git("rev-list", "--count", f"{head}..HEAD").strip() == "1"
    other = json.loads(handler({**edit, "dryRun": True}, tool_call_id="call_8"))
    assert other["ok"] is False  # (Monday is gone: a new call is a new edit)


def test_the_plugin_keeps_one_client_and_makes_another_after_a_failure(
    daemon: DaemonProcess,
) -> None:
    """Every handler of the plugin calls through one client (its kept connections); a call
    that cannot reach the daemon drops it, and the next call makes a new one."""
    from mnoted.client.client import Client
    from mnoted.contract.tools import TOOLS
    from mnoted.integrations.hermes_plugin import PluginClient, make_handler

    token = daemon.agent_token("hermes", "page.read")
    made: list[Client] = []

    def factory() -> Client:  # the first one looks where no daemon is
        where = daemon.socket.with_name("gone.sock") if not made else daemon.socket
        made.append(Client(where, token=token))
        return made[-1]

    clients = PluginClient(factory)
    get, listing = (
        make_handler(TOOLS[n], clients) for n in ("mnote.page.get", "mnote.workspace.list")
    )
    down = json.loads(get({"documentId": "plan.md"}))
    assert down["error"]["code"] == "mnote_daemon_unreachable"
    answers = [json.loads(h(a)) for h, a in [(get, {"documentId": "plan.md"}), (listing, {})] * 2]
    assert all(a["ok"] for a in answers), answers
    assert len(made) == 2 and clients.get() is made[1]
