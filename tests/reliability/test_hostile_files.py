"""Hostile files: committed untouched, served without crashing, edited only where asked."""

from __future__ import annotations

import re

import pytest

from mnoted.client.client import parse_answer
from mnoted.contract.envelope import wire_bytes
from tests.e2e.conftest import DaemonProcess
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


def _alias_bomb() -> bytes:
    """Anchors nine deep, nine aliases each: 9**9 values once expanded (~500 bytes)."""
    lines = ["---", "l0: &l0 [a,a,a,a,a,a,a,a,a]"]
    lines += [f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    return ("\n".join([*lines, "---", "# Bomb", "", "body text", ""])).encode()


FRONTMATTER_BOMBS = {
    "alias-bomb.md": _alias_bomb(),
    "deep-nesting.md": b"---\na: " + b"[" * 20_000 + b"]" * 20_000 + b"\n---\n# Deep\n\nbody\n",
}


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_frontmatter_bombs_read_quickly_with_bounded_memory(daemon: DaemonProcess) -> None:
    """A page over the YAML limits reads (frontmatter kept as bytes, with a warning), and
    page.get / workspace.list answer it for owner and agent alike, never internal_error."""
    import time

    assert len(FRONTMATTER_BOMBS["alias-bomb.md"]) < 600
    for name, data in FRONTMATTER_BOMBS.items():
        (daemon.workspace / name).write_bytes(data)
    assert daemon.proc is not None
    rss_before = _rss_kb(daemon.proc.pid)
    owner = daemon.client()
    agent = daemon.client(daemon.agent_token("bot", "page.read"))
    started = time.monotonic()
    for client in (owner, agent):
        for name in FRONTMATTER_BOMBS:
            resp = client.call("mnote.page.get", name)
            assert resp["ok"], resp["error"]
            result = resp["result"]
            assert any("frontmatter ignored" in w for w in result["warnings"]), result
            assert result["frontmatter"] == {}
            fetched = client.call("mnote.doc.fetch", name, {"format": "page_xml"})
            assert fetched["ok"], fetched["error"]
        listed = client.call("mnote.workspace.list", args={})
        assert listed["ok"], listed["error"]
        paths = {p["path"] for p in listed["result"]["pages"]}
        assert {"alias-bomb.md", "deep-nesting.md"} <= paths
    assert time.monotonic() - started < 20  # (seconds each before the limits: GBs, or errors)
    assert _rss_kb(daemon.proc.pid) - rss_before < 200_000
    for name, data in FRONTMATTER_BOMBS.items():  # the bytes, kept (and committed) as they are
        assert (daemon.workspace / name).read_bytes() == data
        assert daemon.git("show", f"HEAD:{name}").encode() == data
