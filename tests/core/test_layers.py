"""The import direction of DESIGN.md: the core is pure and imports no other layer."""

from __future__ import annotations

import ast
from pathlib import Path

import mnoted

PACKAGE = Path(mnoted.__file__).parent
IO_MODULES = {
    "os",
    "pathlib",
    "io",
    "shutil",
    "tempfile",
    "socket",
    "subprocess",
    "threading",
    "asyncio",
    "time",
    "random",
    "pygit2",
    "aiohttp",
    "watchdog",
    "sqlite3",
    "glob",
}
# Layers may import these; every arrow not listed is forbidden.
ALLOWED = {
    "core": {"core", "errors"},
    "contract": {"contract", "core", "errors"},
    "store": {"store", "core", "errors"},
    "sync": {"sync", "core", "errors", "store"},
    "service": {"service", "contract", "core", "store", "sync", "errors"},
    "remote": {"remote", "service", "contract", "core", "store", "sync", "errors"},
    "server": {"server", "remote", "service", "contract", "core", "store", "errors"},
    "cli": {
        "cli",
        "server",
        "remote",
        "service",
        "contract",
        "core",
        "store",
        "errors",
        "integrations",
    },
    "integrations": {"integrations", "cli", "contract", "errors"},
}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_core_does_no_io() -> None:
    offenders = []
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        for name in imports_of(path):
            if name.split(".")[0] in IO_MODULES:
                offenders.append(f"{path.name} imports {name}")
    assert offenders == []


def test_core_uses_no_builtin_file_access() -> None:
    offenders = []
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "open"
            ):
                offenders.append(f"{path.name}:{node.lineno} calls open()")
    assert offenders == []


def test_layers_import_only_downwards() -> None:
    offenders = []
    for layer, allowed in ALLOWED.items():
        for path in sorted((PACKAGE / layer).rglob("*.py")) if (PACKAGE / layer).is_dir() else []:
            for name in imports_of(path):
                parts = name.split(".")
                if parts[0] != "mnoted" or len(parts) < 2:
                    continue
                if parts[1] not in allowed:
                    offenders.append(f"{layer}/{path.name} imports {name}")
    assert offenders == []


def test_agent_plugins_stay_light() -> None:
    """The Hermes plugin and the CLI client load without the daemon's heavy dependencies."""
    import subprocess
    import sys

    code = (
        "import sys, mnoted.integrations.hermes_plugin, mnoted.cli.client\n"
        "heavy = [m for m in ('pygit2', 'aiohttp', 'watchdog', 'markdown_it', 'mdit_py_plugins')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
