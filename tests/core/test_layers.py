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
LAYERS = (
    "core",
    "contract",
    "store",
    "sync",
    "remote",
    "service",
    "host",
    "server",
    "client",
    "cli",
    "integrations",
)
"""DESIGN.md §2, lowest first: a layer imports only itself and the layers before it."""
BASE = {"errors", "locations"}
"""Modules at the package's top level, beneath every layer (the core takes only errors)."""


def allowed(layer: str) -> set[str]:
    if layer == "core":
        return {"core", "errors"}
    return {*LAYERS[: LAYERS.index(layer) + 1], *BASE}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (not run)."""
    out: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.If)
                and isinstance(child.test, ast.Name)
                and child.test.id == "TYPE_CHECKING"
            ):
                stack.extend(child.orelse)
                continue
            stack.append(child)
    return out


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The package's modules ``path`` imports when run, at any depth (a function's imports
    too): ``from a import b`` is module ``a.b`` when there is one, else ``a``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return {name for name in out if name in known and name != here}


def module_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    known = {module_name(p) for p in paths}
    return {module_name(p): imported_modules(p, known) for p in paths}


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
    for name, imports in module_graph().items():
        parts = name.split(".")
        if len(parts) < 2:
            continue
        layer = parts[1]
        if layer in BASE:
            rules: set[str] = set()
        else:
            assert layer in LAYERS, f"{name} is in no layer of DESIGN.md §2"
            rules = allowed(layer)
        for imported in imports:
            target = imported.split(".")
            if len(target) >= 2 and target[1] not in rules:
                offenders.append(f"{name} imports {imported}")
    assert offenders == []


def test_no_import_cycles() -> None:
    """No module reaches itself through the imports it runs (a function's included)."""
    graph = module_graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert cycles == []


def test_agent_plugins_stay_light() -> None:
    """The Hermes plugin and the CLI client load without the daemon's heavy dependencies."""
    import subprocess
    import sys

    code = (
        "import sys, mnoted.integrations.hermes_plugin, mnoted.client.client\n"
        "heavy = [m for m in ('pygit2', 'aiohttp', 'watchdog', 'markdown_it', 'mdit_py_plugins')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
