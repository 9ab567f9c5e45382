"""Hostile files: committed untouched, served without crashing, edited only where asked."""

from __future__ import annotations

import re

import pytest

from mnoted.cli.client import parse_answer
from mnoted.contract.envelope import wire_bytes
from tests.service.conftest import Harness

HOSTILE = {
    "invalid-utf8.md": b"# Caf\xe9\n\n\xff\xfe broken \x80 bytes\n",
    "utf16.md": "# UTF-16 page\n\ntext\n".encode("utf-16"),
    "nul.md": b"# Nul\n\nbefore\x00after\n",
    "empty.md": b"",
    "long-line.md": b"# Long\n\n" + b"word " * 200_000 + b"\n",
    "binary.md": bytes(range(256)) * 4,
    "bad-yaml.md": b"---\ntitle: [unclosed\n: : :\n---\n# Still a page\n\nbody\n",
    "bom-frontmatter.md": b"\xef\xbb\xbf---\r\ntitle: Bom\r\n---\r\n# Heading\r\n\r\nbody\r\n",
    "bare-cr.md": b"# Old Mac\r\rline one\rline two\r",
    "mixed.md": b"# Mixed\n\r\nline\r\nother\nlast",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_file_round_trips_and_reads(h: Harness, name: str) -> None:
    data = HOSTILE[name]
    path = h.root / "odd" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    h.ws.commit_external([f"odd/{name}"])
    assert _git_bytes(h, f"HEAD:odd/{name}") == data
    for tool, args in [
        ("mnote.page.get", {}),
        ("mnote.doc.fetch", {"format": "page_xml"}),
        ("mnote.doc.fetch", {"scope": "outline", "format": "text"}),
    ]:
        resp = h.call(tool, documentId=f"odd/{name}", args=args)
        assert resp["ok"], (tool, resp["error"])
        assert parse_answer(wire_bytes(resp)) == resp  # as the project's client reads it
    assert path.read_bytes() == data


def _git_bytes(h: Harness, spec: str) -> bytes:
    import subprocess

    return subprocess.run(
        ["git", "cat-file", "blob", spec], cwd=h.root, capture_output=True, check=True
    ).stdout


@pytest.mark.parametrize(
    "name", ["invalid-utf8.md", "bom-frontmatter.md", "bare-cr.md", "mixed.md", "nul.md"]
)
def test_an_edit_changes_only_what_it_targets(h: Harness, name: str) -> None:
    data = HOSTILE[name]
    (h.root / name).write_bytes(data)
    h.ws.commit_external([name])
    blocks = h.call("mnote.page.get", documentId=name)["result"]["blocks"]
    heading = next(b for b in blocks if b["type"] == "heading")
    resp = h.write(
        "mnote.doc.apply_block_ops",
        documentId=name,
        args={
            "operations": [
                {
                    "command": "insert_block_after",
                    "after_block_id": heading["id"],
                    "block": "Inserted.",
                }
            ]
        },
    )
    assert resp["ok"], resp["error"]
    after = (h.root / name).read_bytes()
    assert b"Inserted." in after
    assert after.replace(b"Inserted.", b"") != b""
    # Everything that was there is still there, byte for byte, in order.
    rest = after
    for piece in [p for p in re.split(rb"\r\n|\r|\n", data) if p]:
        at = rest.find(piece)
        assert at >= 0, piece
        rest = rest[at + len(piece) :]


def test_option_writes_refuse_invalid_yaml_without_touching_the_file(h: Harness) -> None:
    (h.root / "bad.md").write_bytes(HOSTILE["bad-yaml.md"])
    h.ws.commit_external(["bad.md"])
    resp = h.write("mnote.page.update_options", documentId="bad.md", options={"wideLayout": True})
    assert resp["error"]["code"] == "mnote_page_invalid_frontmatter"
    assert (h.root / "bad.md").read_bytes() == HOSTILE["bad-yaml.md"]
