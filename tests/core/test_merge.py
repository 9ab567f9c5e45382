"""The pure three-way page merge: examples, properties, and corpus pages edited on two sides."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnoted.core.merge import MergeResult, _Split, merge_page
from tests.conftest import corpus_files

SETTINGS = settings(
    suppress_health_check=[HealthCheck.too_slow],
    max_examples=max(20, settings.default.max_examples // 2),  # (the long profile: more)
)


def lost(base: bytes, side: bytes, result: MergeResult) -> list[str]:
    """Chunks ``side`` added or changed that are neither in the page nor held back."""
    kept = result.data.decode("utf-8", "surrogateescape") + "".join(
        h.theirs + h.ours for h in result.held
    )
    old = set(_Split.of(base).body) | set(_Split.of(base).header)
    new = [c for c in _Split.of(side).body if c not in old]
    return [c for c in new if c.strip() and c.strip() not in kept]


# -- examples -------------------------------------------------------------------------


def test_disjoint_blocks_merge() -> None:
    base = b"# T\n\none\n\ntwo\n\nthree\n"
    ours = b"# T\n\nONE\n\ntwo\n\nthree\n"
    theirs = b"# T\n\none\n\ntwo\n\nTHREE\n"
    r = merge_page(base, ours, theirs)
    assert r.data == b"# T\n\nONE\n\ntwo\n\nTHREE\n"
    assert r.clean


def test_adjacent_blocks_and_list_items_merge() -> None:
    base = b"one\n\ntwo\n\n- a\n- b\n- c\n"
    ours = b"ONE\n\ntwo\n\n- a\n- B\n- c\n"
    theirs = b"one\n\nTWO\n\n- a\n- b\n- C\n"
    r = merge_page(base, ours, theirs)
    assert r.data == b"ONE\n\nTWO\n\n- a\n- B\n- C\n"
    assert r.clean


def test_same_block_keeps_ours_and_holds_theirs() -> None:
    base = b"intro\n\nshared line\n\nend\n"
    ours = b"intro\n\nshared line, ours\n\nend\n"
    theirs = b"intro\n\nshared line, theirs\n\nend\n"
    r = merge_page(base, ours, theirs)
    assert r.data == ours
    assert [(h.where, h.ours, h.theirs) for h in r.held] == [
        ("body", "\nshared line, ours\n", "\nshared line, theirs\n")
    ]
    assert b"<<<<<<<" not in r.data and b">>>>>>>" not in r.data


def test_both_append_keeps_both_in_order() -> None:
    base = b"# Journal\n\n- monday\n"
    ours = b"# Journal\n\n- monday\n- tuesday (laptop)\n"
    theirs = b"# Journal\n\n- monday\n- tuesday (desktop)\n"
    r = merge_page(base, ours, theirs)
    assert r.data == b"# Journal\n\n- monday\n- tuesday (laptop)\n- tuesday (desktop)\n"
    assert r.clean


def test_same_insert_on_both_sides_once() -> None:
    base = b"a\n"
    both = b"a\n\nb\n"
    assert merge_page(base, both, both).data == both
    r = merge_page(base, b"a\n\nb\n\nc\n", b"a\n\nb\n")
    assert r.data == b"a\n\nb\n\nc\n"


def test_edit_against_delete_keeps_the_edit() -> None:
    base = b"one\n\ntwo\n\nthree\n"
    ours = b"one\n\nthree\n"
    theirs = b"one\n\ntwo, edited\n\nthree\n"
    r = merge_page(base, ours, theirs)
    assert r.data == theirs and r.clean
    r = merge_page(base, theirs, ours)
    assert r.data == theirs and r.clean


def test_only_one_side_changed_is_byte_faithful() -> None:
    base = b"\xef\xbb\xbfa\r\nb\rc\n\n\xff not utf-8"
    theirs = base + b"\r\nmore"
    assert merge_page(base, base, theirs).data == theirs
    assert merge_page(base, theirs, base).data == theirs
    assert merge_page(None, theirs, theirs).data == theirs


def test_crlf_page_keeps_its_endings() -> None:
    base = b"one\r\n\r\ntwo\r\n\r\nthree\r\n"
    ours = b"ONE\r\n\r\ntwo\r\n\r\nthree\r\n"
    theirs = b"one\r\n\r\ntwo\r\n\r\nTHREE\r\n"
    assert merge_page(base, ours, theirs).data == b"ONE\r\n\r\ntwo\r\n\r\nTHREE\r\n"


def test_frontmatter_merges_per_key() -> None:
    base = b"---\ntitle: Plan\ntags: [a]\nstatus: draft\n---\nbody\n"
    ours = b"---\ntitle: Plan v2\ntags: [a]\nstatus: draft\n---\nbody\n"
    theirs = b"---\ntitle: Plan\ntags: [a, b]\nowner: me\n---\nbody\n"
    r = merge_page(base, ours, theirs)
    assert r.data == b"---\ntitle: Plan v2\ntags: [a, b]\nowner: me\n---\nbody\n"
    assert r.clean


def test_frontmatter_same_key_holds_theirs() -> None:
    base = b"---\nstatus: draft\n---\nbody\n"
    ours = b"---\nstatus: done\n---\nbody\n"
    theirs = b"---\nstatus: review\n---\nbody, edited\n"
    r = merge_page(base, ours, theirs)
    assert r.data == b"---\nstatus: done\n---\nbody, edited\n"
    assert [(h.where, h.key, h.theirs) for h in r.held] == [
        ("frontmatter", "status", "status: review\n")
    ]


def test_frontmatter_added_on_one_side_body_on_other() -> None:
    base = b"body\n"
    ours = b"---\ntags: [x]\n---\nbody\n"
    theirs = b"body\n\nmore\n"
    assert merge_page(base, ours, theirs).data == b"---\ntags: [x]\n---\nbody\n\nmore\n"


def test_invalid_frontmatter_merges_as_one_unit() -> None:
    base = b"---\na: [\n---\nbody\n"
    ours = b"---\na: [1\n---\nbody\n"
    theirs = b"---\na: [2\n---\nbody\n"
    r = merge_page(base, ours, theirs)
    assert r.data == ours
    assert [h.where for h in r.held] == ["frontmatter"]


def test_both_added_the_page() -> None:
    r = merge_page(None, b"# A\n\nmine\n", b"# A\n\nyours\n")
    assert r.data.startswith(b"# A\n\nmine\n")
    assert not lost(b"", b"# A\n\nyours\n", r)


# -- properties -----------------------------------------------------------------------

blocks = st.one_of(
    st.sampled_from(["alpha", "beta", "gamma", "δέλτα", "中文", "[[link]]"]).map(
        lambda w: w + "\n"
    ),
    st.sampled_from(["x", "y", "z"]).map(lambda w: f"# {w}\n"),
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3).map(
        lambda items: "".join(f"- {i}\n" for i in items)
    ),
    st.sampled_from(["p", "q"]).map(lambda w: f"> {w}\n"),
    st.just("```\ncode\n```\n"),
)
pages = st.lists(blocks, max_size=6).map(lambda bs: "\n".join(bs).encode())
front = st.one_of(
    st.just(b""),
    st.dictionaries(
        st.sampled_from(["title", "tags", "s"]), st.sampled_from(["1", "x", "[a]"])
    ).map(lambda d: ("---\n" + "".join(f"{k}: {v}\n" for k, v in d.items()) + "---\n").encode()),
)


@st.composite
def edited(draw: st.DrawFn, base: bytes) -> bytes:
    """``base`` with a few of its lines changed, dropped or added."""
    lines = base.decode().splitlines(keepends=True)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["edit", "drop", "add"]))
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        if op == "add" or not lines:
            lines.insert(i, draw(st.sampled_from(["\n", "new\n", "- n\n", "# n\n"])))
        elif op == "drop":
            del lines[i]
        else:
            lines[i] = lines[i].rstrip("\n") + draw(st.sampled_from(["!", " more", "?"])) + "\n"
    return "".join(lines).encode()


@st.composite
def triples(draw: st.DrawFn) -> tuple[bytes, bytes, bytes]:
    base = draw(front) + draw(pages)
    return base, draw(edited(base)), draw(edited(base))


@SETTINGS
@given(triples())
def test_one_side_unchanged_gives_the_other(t: tuple[bytes, bytes, bytes]) -> None:
    base, x, y = t
    assert merge_page(base, x, base) == MergeResult(x, ())
    assert merge_page(base, base, y) == MergeResult(y, ())


@SETTINGS
@given(triples())
def test_no_version_is_lost(t: tuple[bytes, bytes, bytes]) -> None:
    base, ours, theirs = t
    r = merge_page(base, ours, theirs)
    assert lost(base, ours, r) == []
    assert lost(base, theirs, r) == []
    assert b"<<<<<<<" not in r.data
    for h in r.held:
        assert h.ours in r.data.decode()


@SETTINGS
@given(triples())
def test_merging_twice_is_stable(t: tuple[bytes, bytes, bytes]) -> None:
    """What a merge wrote, merged again with the same other side, changes nothing more."""
    base, ours, theirs = t
    r = merge_page(base, ours, theirs)
    assert merge_page(theirs, r.data, theirs).data == r.data


# -- the corpus: real pages edited on two sides -----------------------------------------


def _edit_blocks(data: bytes, rng: random.Random, tag: str) -> bytes:
    chunks = list(_Split.of(data).body)
    if not chunks:
        return data + f"\n{tag}\n".encode()
    for _ in range(2):
        i = rng.randrange(len(chunks))
        chunks[i] = chunks[i].rstrip("\n") + f" {tag}\n"
    header = "".join(_Split.of(data).header)
    return (header + "".join(chunks)).encode("utf-8", "surrogateescape")


@pytest.mark.parametrize("path", corpus_files()[::11], ids=lambda p: p.name)
def test_corpus_pages_edited_on_both_sides(path: object) -> None:
    data = path.read_bytes()  # type: ignore[attr-defined]
    rng = random.Random(str(path))
    ours = _edit_blocks(data, rng, "(laptop)")
    theirs = _edit_blocks(data, rng, "(desktop)")
    r = merge_page(data, ours, theirs)
    assert lost(data, ours, r) == [] and lost(data, theirs, r) == []
    text = r.data.decode("utf-8", "surrogateescape")
    # every edit of ours is in the page; theirs are in the page or held
    assert text.count("(laptop)") == ours.decode("utf-8", "surrogateescape").count("(laptop)")
    held = "".join(h.theirs for h in r.held)
    assert text.count("(desktop)") + held.count("(desktop)") >= theirs.decode(
        "utf-8", "surrogateescape"
    ).count("(desktop)")


FILE_BASE = "---\ntitle: Plan\n---\n# Plan\n\nFirst.\n\nSecond.\n\n- a\n- b\n\nLast.\n"


def test_a_file_grants_release_merges_different_blocks() -> None:
    """What ``mnote.file.release`` merges: the person's and the agent's edits to different
    blocks both land; the same block changed differently is held (the release refuses)."""
    ours = FILE_BASE.replace("First.", "First, by the person.")
    theirs = FILE_BASE.replace("Last.", "Last, by the agent.")
    merged = merge_page(FILE_BASE.encode(), ours.encode(), theirs.encode())
    assert merged.clean
    assert merged.data == ours.replace("Last.", "Last, by the agent.").encode()
    person = FILE_BASE.replace("Second.", "Second (person).")
    agent = FILE_BASE.replace("Second.", "Second (agent).")
    assert not merge_page(FILE_BASE.encode(), person.encode(), agent.encode()).clean
    same = merge_page(FILE_BASE.encode(), person.encode(), person.encode())
    assert same.clean and same.data == person.encode()
