"""Link parsing, Obsidian's resolution rules (docs/links.md) and rewriting after a move."""

from __future__ import annotations

import pytest

from mnoted.core.links import PathIndex, parse_links, replace_links, resolve, rewritten

PATHS = ["Plan.md", "work/Plan.md", "work/deep/Other.md", "a b/Note x.md", "top.md"]


def _one(text: str):  # type: ignore[no-untyped-def]
    (link,) = parse_links(text)
    return link


@pytest.mark.parametrize(
    ("text", "source", "expected"),
    [
        ("[[Plan]]", "top.md", "Plan.md"),  # by name: the closest (root before a folder)
        ("[[Plan]]", "work/x.md", "work/Plan.md"),  # the same folder wins
        ("[[work/Plan]]", "top.md", "work/Plan.md"),  # a path names one
        ("[[deep/Other]]", "top.md", "work/deep/Other.md"),  # a path's tail is enough
        ("[[other]]", "top.md", "work/deep/Other.md"),  # case does not matter
        ("[[Plan.md]]", "top.md", "Plan.md"),
        ("[[Missing]]", "top.md", None),
        ("[[#Heading]]", "top.md", "top.md"),  # the page itself
        ("[x](Plan.md)", "work/x.md", "work/Plan.md"),  # Markdown: relative to the page
        ("[x](../Plan.md)", "work/x.md", "Plan.md"),
        ("[x](/work/Plan.md)", "top.md", "work/Plan.md"),
        ("[x](<a b/Note x.md>)", "top.md", "a b/Note x.md"),
        ("[x](a%20b/Note%20x.md#Sec)", "top.md", "a b/Note x.md"),
        ("[x](../../escape.md)", "top.md", None),
    ],
)
def test_resolution(text: str, source: str, expected: str | None) -> None:
    assert resolve(_one(text), source, PathIndex(PATHS)) == expected


def test_forms_and_what_is_not_a_link() -> None:
    text = (
        '[[P#H|alias]] ![[P^b1]] [[P#^b2]] [t](P.md "title") [w](https://x.org/a.md) '
        "[i](pic.png) `[[code]]`\n```\n[[fenced]]\n```\n"
    )
    links = parse_links(text)
    assert [(lk.kind, lk.embed, lk.target, lk.heading, lk.block, lk.alias) for lk in links] == [
        ("wikilink", False, "P", "H", None, "alias"),
        ("wikilink", True, "P", None, "b1", None),
        ("wikilink", False, "P", None, "b2", None),
        ("markdown", False, "P.md", None, None, "t"),
    ]


def test_rewriting_keeps_each_part() -> None:
    after = PathIndex(["Plan.md", "archive/Goal one.md", "x/y.md"])
    cases = {
        "[[Old#H|alias]]": "[[Goal one#H|alias]]",
        "![[Old^b]]": "![[Goal one^b]]",
        "[[Old#^b]]": "[[Goal one#^b]]",
        '[t](Old.md#H "t")': '[t](../archive/Goal%20one.md#H "t")',
        "[t](<Old.md>)": "[t](<../archive/Goal one.md>)",
    }
    for raw, expected in cases.items():
        assert rewritten(_one(raw), "x/y.md", "archive/Goal one.md", after) == expected
    text = "a [[Old]] b [[Old|c]]"
    links = parse_links(text)
    new = replace_links(text, [(lk, rewritten(lk, "x/y.md", "archive/Goal one.md", after))
                               for lk in links])  # fmt: skip
    assert new == "a [[Goal one]] b [[Goal one|c]]"
    both = PathIndex(["Goal one.md", "archive/Goal one.md"])  # an ambiguous name: the path
    assert rewritten(_one("[[Old]]"), "x/y.md", "archive/Goal one.md", both) == (
        "[[archive/Goal one]]"
    )
