"""The workspace template that ``init`` copies, found as package data.

The files live in ``mnoted/workspace_template/`` so that setuptools ships them in the wheel
(``package-data``); the repository's top-level ``workspace_template`` is a symlink to that
folder, so the path the repository shows and the installed one are the same files.
"""

from __future__ import annotations

from importlib import resources


def template_root() -> resources.abc.Traversable:
    """The packaged ``workspace_template`` folder (works from a wheel and from the repo)."""
    return resources.files("mnoted") / "workspace_template"


def template_files() -> dict[str, bytes]:
    """Every file of the workspace template, by workspace-relative path."""
    out: dict[str, bytes] = {}

    def walk(node: resources.abc.Traversable, prefix: str) -> None:
        for child in node.iterdir():
            rel = f"{prefix}{child.name}"
            if child.is_dir():
                walk(child, rel + "/")
            elif child.is_file() and child.name != "__pycache__":
                out[rel] = child.read_bytes()

    walk(template_root(), "")
    return out


def merged_gitignore(existing: bytes, template: bytes) -> bytes:
    """``existing`` with the template's non-comment lines it lacks appended."""
    have = {line.strip() for line in existing.decode("utf-8", "replace").splitlines()}
    missing = [
        line
        for line in template.decode("utf-8").splitlines()
        if line.strip() and not line.startswith("#") and line.strip() not in have
    ]
    if not missing:
        return existing
    sep = b"" if existing.endswith(b"\n") or not existing else b"\n"
    return existing + sep + ("# added by mnoted\n" + "\n".join(missing) + "\n").encode("utf-8")
