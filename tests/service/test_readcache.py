"""Kept answers of reads: given again only while the caller, the arguments and the page hold.

On the real store: an answer is kept on its stat of the work tree and the branch's ref."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mnoted.contract.envelope import wire_bytes
from mnoted.store import statcache
from tests.service.conftest import Harness

QUIET = statcache.TICK_NS / 1e9 + 0.02  # a file must be quiet this long before its hash is kept


def _read(h: Harness, **fields: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """One page.get: the envelope it sent and the answer the executor gave."""
    raw = h.envelope("mnote.page.get", documentId="notes/plan.md", **fields)
    return raw, h.service.call(raw, h.owner)


def _kept(h: Harness, raw: dict[str, Any], actor: Any = None) -> dict[str, Any] | None:
    out = h.service.cached_answer(raw, actor or h.owner)
    return None if out is None else json.loads(out)


def test_a_repeated_read_is_answered_from_the_cache_with_its_own_ids(h: Harness) -> None:
    time.sleep(QUIET)
    raw, first = _read(h)
    assert first["ok"]
    again = h.envelope("mnote.page.get", documentId="notes/plan.md")
    kept = _kept(h, again)
    assert kept is not None
    assert kept["toolCallId"] == again["toolCallId"] != raw["toolCallId"]
    assert kept["traceId"] == again["traceId"]
    fresh = h.service.call(again, h.owner)
    assert {k: v for k, v in kept.items()} == fresh  # byte for byte the same answer


def test_a_page_changed_on_disk_is_not_answered_from_the_cache(h: Harness) -> None:
    time.sleep(QUIET)
    raw, first = _read(h)
    assert _kept(h, raw) is not None
    path = h.root / "notes" / "plan.md"
    at = path.read_bytes().index(b"Monday")
    with path.open("r+b") as fh:  # in place, same size: only the stat data tells
        fh.seek(at)
        fh.write(b"MONDAY")
    assert _kept(h, raw) is None
    second = h.service.call(h.envelope("mnote.page.get", documentId="notes/plan.md"), h.owner)
    assert second["result"]["revision"] != first["result"]["revision"]
    assert second["result"]["revision"] == h.head()
    assert "MONDAY" in second["result"]["body"]


def test_a_file_just_changed_is_hashed_again_before_its_answer_is_kept(h: Harness) -> None:
    path = h.root / "notes" / "plan.md"
    path.write_text(path.read_text() + "\nMore.\n")  # changed a moment ago: racy
    raw, _ = _read(h)
    assert _kept(h, raw) is None
    time.sleep(QUIET)
    raw, _ = _read(h)
    assert _kept(h, raw) is not None


def test_a_moved_branch_is_not_answered_from_the_cache(h: Harness) -> None:
    time.sleep(QUIET)
    raw, _ = _read(h)
    assert _kept(h, raw) is not None
    (h.root / "other.md").write_text("# Other\n")
    h.git("add", "other.md")
    h.git("-c", "user.name=A", "-c", "user.email=a@x", "commit", "-qm", "other")
    assert _kept(h, raw) is None


def test_an_agent_write_is_seen_by_the_next_read(h: Harness) -> None:
    time.sleep(QUIET)
    raw, _ = _read(h)
    assert _kept(h, raw) is not None
    done = h.write(
        "mnote.doc.markdown_edit",
        documentId="notes/plan.md",
        args={"operations": [{"search": "Monday", "replace": "Friday"}]},
    )
    assert done["ok"], done
    assert _kept(h, raw) is None
    _, after = _read(h)
    assert "Friday" in after["result"]["body"]


def test_answers_are_kept_per_caller(h: Harness) -> None:
    time.sleep(QUIET)
    raw, _ = _read(h)
    assert _kept(h, raw) is not None
    outsider = h.agent("outsider", grants=("private/**",))
    assert _kept(h, raw, outsider) is None
    refused = h.service.call(raw, outsider)
    assert not refused["ok"] and refused["error"]["code"] == "mnote_tool_permission_denied"
    assert _kept(h, raw, outsider) is None  # a refusal is never kept


def test_a_call_the_executor_would_refuse_is_not_answered_from_the_cache(h: Harness) -> None:
    time.sleep(QUIET)
    raw, _ = _read(h)
    assert _kept(h, raw) is not None
    broken = {k: v for k, v in raw.items() if k != "toolCallId"}
    assert _kept(h, broken) is None
    assert h.service.call(broken, h.owner)["error"]["code"] == "mnote_tool_invalid_arguments"
    other_args = {**raw, "args": {"includeBlocks": False}}
    assert _kept(h, other_args) is None


def test_a_file_replaced_by_a_symlink_is_not_answered_from_the_cache(h: Harness) -> None:
    time.sleep(QUIET)
    raw, _ = _read(h)
    assert _kept(h, raw) is not None
    path = h.root / "notes" / "plan.md"
    outside = h.root.parent / "outside.md"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    os.symlink(outside, path)
    assert _kept(h, raw) is None


def test_kept_answers_are_bounded_by_count_and_size() -> None:
    from mnoted.service.actors import Actor
    from mnoted.service.readcache import Answer, ReadCache

    owner = Actor.owner()

    def answer(chars: int) -> Answer:
        return Answer((None, (0, 0, 0, 0, 0, 0)), "p.md", b"x" * chars)

    by_count = ReadCache(limit=3, size=10_000)
    for n in range(5):
        by_count.put(owner, f"k{n}", answer(50))
    assert [by_count.get(owner, f"k{n}") is not None for n in range(5)] == [0, 0, 1, 1, 1]
    by_size = ReadCache(limit=100, size=1000)
    for n in range(10):
        by_size.put(owner, f"k{n}", answer(120))
    assert [by_size.get(owner, f"k{n}") is not None for n in range(10)] == [0, 0] + [1] * 8
    by_size.put(owner, "big", answer(126))  # over an eighth of the budget: never kept
    assert by_size.get(owner, "big") is None


def test_the_wire_answer_is_the_envelope_the_call_gives(h: Harness) -> None:
    """``Service.answer`` (the daemon's path) sends a kept read's body as it was encoded to
    keep it; decoded, it is the envelope ``Service.call`` returns, for reads and refusals
    alike (and a write answers with its ids)."""
    time.sleep(QUIET)
    for tool, fields in (
        ("mnote.page.get", {"documentId": "notes/plan.md"}),
        ("mnote.doc.fetch", {"documentId": "notes/plan.md"}),
        ("mnote.page.get", {"documentId": "notes/missing.md"}),
        ("mnote.workspace.list", {}),
    ):
        raw = h.envelope(tool, **fields)
        wire = json.loads(h.service.answer(raw, h.owner))
        assert wire == h.service.call(raw, h.owner), tool
    edit = h.envelope(
        "mnote.doc.markdown_edit",
        documentId="notes/plan.md",
        args={"operations": [{"search": "Monday", "replace": "Tuesday"}]},
        idempotencyKey="idem_wire",
        dryRun=False,
    )
    wire = json.loads(h.service.answer(edit, h.owner))
    assert wire["ok"], wire
    assert wire["toolCallId"] == edit["toolCallId"]
    assert wire["result"]["revision"] == h.head()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_JSON)
def test_answers_on_the_wire_read_back_as_they_were(value: Any) -> None:
    """Any text (lone surrogates from a file that is not UTF-8 included: those go through the
    json module, escaped) reads back equal; other non-ASCII goes as UTF-8, not escaped."""
    sent = wire_bytes(value)
    assert json.loads(sent) == value
    if isinstance(value, str) and value.isprintable() and not {'"', "\\"} & set(value):
        assert sent == b'"' + value.encode() + b'"'  # non-ASCII as UTF-8, not escaped
