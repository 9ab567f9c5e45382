"""Grant globs are gitignore style, rooted at the workspace (docs/protocol.md, *Who sees what*).

Held to ``pathspec``'s gitignore matcher (each pattern with a leading ``/``) on generated
patterns and paths, plus the cases the issue named.
"""

from __future__ import annotations

import random

import pathspec
import pytest

from mnoted.service.actors import Actor, glob_match

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (gitwildmatch's name)


def _reference(path: str, pattern: str) -> bool:
    spec = pathspec.PathSpec.from_lines("gitwildmatch", ["/" + pattern.lstrip("/")])
    return bool(spec.match_file(path))


COMPONENTS = ["a", "b", "ab", "*", "**", "?", "a*", "*b", "[ab]", "[!a]", "x.md", "*.md"]
COMPONENTS += ["a?", "[a-c]", "c*d", "笔记", "*.MD", "a.b"]
NAMES = ["a", "b", "ab", "ba", "x.md", "a.md", "bb", "c", "cd", "笔记", "A.MD", "a.b", "axb"]


def test_matches_gitignore_on_generated_patterns() -> None:
    rng = random.Random(41)
    for _ in range(4000):
        pattern = "/".join(rng.choice(COMPONENTS) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.1:
            pattern += "/"
        path = "/".join(rng.choice(NAMES) for _ in range(rng.randint(1, 5)))
        assert glob_match(path, pattern) == _reference(path, pattern), (pattern, path)


@pytest.mark.parametrize(
    ("pattern", "path", "granted"),
    [
        ("projects/*.md", "projects/a.md", True),
        ("projects/*.md", "projects/sub/b.md", False),  # (the reproduction)
        ("projects/**", "projects/sub/b.md", True),
        ("projects/**/*.md", "projects/a.md", True),
        ("projects/**/*.md", "projects/x/y/b.md", True),
        ("projects/", "projects/a.md", True),
        ("projects", "projects/a.md", True),
        ("*.md", "a.md", True),
        ("*.md", "notes/a.md", False),  # (rooted: not at any depth)
        ("/notes/*.md", "notes/a.md", True),
        ("**", "ai/summaries/doc_1.md", True),
        ("notes/?.md", "notes/ab.md", False),
        ("notes/**", "notesx/a.md", False),
    ],
)
def test_named_cases(pattern: str, path: str, granted: bool) -> None:
    assert glob_match(path, pattern) is granted
    assert _reference(path, pattern) is granted
    assert Actor("a", "agent", grants=(pattern,)).may_access(path) is granted
