"""Differential no-leak test (issue 41): an agent learns nothing of a page outside its grants.

Generated workspaces (visible and hidden pages, artifacts of both, commits that touch both,
review sessions, pending edits, other actors' idempotency keys and file grants) and
generated calls of every tool, with every path form, flat and nested arguments, and
replays of keys other actors used. For each call an agent makes:

(a) its answer for a hidden existing page equals its answer for a missing one once the
    reference itself, ids and times are normalised;
(b) no byte of a hidden page's path, title or text appears in any answer or event: every
    hidden path, title and text carries the marker ``zq7``, which nothing visible does.

The calls go to the executor in process (the socket adds nothing to what an answer says);
``tests/e2e/test_grants_hold.py`` holds the socket's own answers (status, streams).
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnoted.contract.tools import TOOLS
from mnoted.service import Actor, Service, visibility
from mnoted.store import CommandMeta, Workspace, Write
from mnoted.store.tokens import TokenStore

MARK = "zq7"
CALLS_PER_RUN = 10_000


class World:
    """One generated workspace, its actors, and the references an agent may try."""

    def __init__(self, root: Path, rng: random.Random) -> None:
        self.rng = rng
        self.ws = Workspace.init(root)
        self.service = Service()
        self.service.add(self.ws)
        self.owner = Actor.owner()
        self.events: list[dict[str, Any]] = []
        self.visible: list[str] = []
        self.hidden: list[str] = []
        tokens = TokenStore(self.ws.state_dir)
        scopes = ("page.read", "page.write", "artifact.write")
        self.agent = Actor.from_token(
            tokens.create("narrow", scopes, ("pub/*.md", "ai/**"), None, now=0.0)[1]
        )
        self.wide = Actor.from_token(tokens.create("wide", scopes, ("**",), None, now=0.0)[1])
        self.service.events.subscribe(self._seen)
        self._populate()

    def _seen(self, event: dict[str, Any]) -> None:
        if visibility.event_visible(self.agent, event):
            self.events.append(visibility.public(event))

    def _page(self, path: str, title: str, body: str) -> None:
        full = self.ws.root / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(f"# {title}\n\n{body}\n\n- item one\n- item two\n", encoding="utf-8")
        self.ws.commit_external([path])

    def _populate(self) -> None:
        rng = self.rng
        for i in range(rng.randint(2, 4)):
            path = f"pub/v{i}.md"
            self._page(path, f"Visible page {i}", f"Plain words number {i}.")
            self.visible.append(path)
        hidden_folders = ["priv", "pub/sub", "pub/sub/deeper", ""]
        for i in range(rng.randint(3, 6)):
            folder = rng.choice(hidden_folders)
            path = f"{folder}/{MARK}h{i}.md".lstrip("/")
            self._page(path, f"{MARK.upper()} title {i}", f"{MARK} secret text {i}: 12{i}45.")
            self.hidden.append(path)
        # a commit touching a visible and a hidden page at once (history subjects)
        v, h = rng.choice(self.visible), rng.choice(self.hidden)
        self.ws.apply(
            CommandMeta("page.body.save", actor="owner"),
            [
                Write(v, (self.ws.root / v).read_bytes() + b"\nShared commit.\n"),
                Write(h, (self.ws.root / h).read_bytes() + f"\n{MARK} more.\n".encode()),
            ],
        )
        # artifacts of hidden and visible pages; other actors' keys; sessions; a file grant
        self.keys: list[str] = []
        self.sessions: list[str] = []
        self.grants: list[str] = []
        for n, path in enumerate(self.hidden[:3] + self.visible[:1]):
            self.call(
                "mnote.artifact.create_summary",
                self.owner,
                documentId=path,
                args={"summary": f"Summary {n}."},
                write=True,
            )
            self.call(
                "mnote.artifact.create_ai_note",
                self.owner,
                documentId=path,
                args={"content": f"Note {n}."},
                write=True,
            )
        for n, path in enumerate(self.hidden):
            key = f"k_other_{n}"
            self.call(
                "mnote.page.update_title",
                self.wide,
                documentId=path,
                args={"title": f"{MARK.upper()} renamed {n}"},
                write=True,
                key=key,
            )
            self.keys.append(key)
            proposed = self.call(
                "mnote.page.save",
                self.wide,
                documentId=path,
                args={"content": [f"{MARK} proposed {n}"], "mode": "append"},
                write=True,
            )
            if proposed["ok"] and proposed["result"].get("sessionId"):
                self.sessions.append(proposed["result"]["sessionId"])
        granted = self.call("mnote.file.grant", self.wide, documentId=self.hidden[0], write=True)
        if granted["ok"]:
            self.grants.append(granted["result"]["grantId"])
        # a pending (uncommitted) edit of a hidden page
        pending = self.ws.root / self.hidden[-1]
        pending.write_text(pending.read_text() + f"\n{MARK} pending edit.\n")
        self.doc_ids = {p: self.ws.resolve(p).document_id for p in self.visible + self.hidden}
        for listed in self.ws.listing("ai/"):
            doc = listed[0]
            if not visibility.may_see(self.agent, self.ws, doc.path):
                self.hidden.append(doc.path)
                self.doc_ids[doc.path] = doc.document_id

    def call(
        self,
        tool: str,
        actor: Actor,
        *,
        write: bool = False,
        key: str | None = None,
        flat: bool = False,
        **fields: Any,
    ) -> dict[str, Any]:
        return json.loads(self.answer(tool, actor, write=write, key=key, flat=flat, **fields))

    def answer(
        self,
        tool: str,
        actor: Actor,
        *,
        write: bool = False,
        key: str | None = None,
        flat: bool = False,
        dry: bool = False,
        **fields: Any,
    ) -> bytes:
        raw: dict[str, Any] = {
            "toolName": tool,
            "sessionId": "s1",
            "runId": "r1",
            "toolCallId": "c1",
            "traceId": "t1",
            **fields,
        }
        if write:
            raw["idempotencyKey"] = key or f"k_{self.rng.getrandbits(48):x}"
            raw["dryRun"] = dry
        args = raw.pop("args", {})
        if flat:
            raw.update({k: v for k, v in args.items() if k not in raw and k != "path"})
            args = {k: v for k, v in args.items() if k == "path"}
        if args:
            raw["args"] = args
        return self.service.answer(raw, actor)


TARGETED = {
    "mnote.page.get": {},
    "mnote.page.save": {"content": ["x"], "mode": "append"},
    "mnote.page.update_title": {"title": "T"},
    "mnote.page.update_options": {"options": {"wideLayout": True}},
    "mnote.artifact.create_summary": {"summary": "S."},
    "mnote.artifact.create_ai_note": {"content": "N."},
    "mnote.doc.fetch": {},
    "mnote.block.fetch": {"blockId": "b_1"},
    "mnote.doc.markdown_edit": {"operations": [{"search": "item", "replace": "x"}]},
    "mnote.doc.apply_block_ops": {"operations": [{"command": "delete_block", "block_id": "b"}]},
    "mnote.page.delete": {},
    "mnote.page.move": {"newPath": "pub/moved.md"},
    "mnote.doc.history": {},
    "mnote.file.grant": {},
    "mnote.page_ai.context": {},
    "mnote.doc.plan_update": {"fullContent": "# New\n"},
    "mnote.page_ai.route": {"instruction": "summarise"},
    "mnote.review.list": {},
}
"""Every tool that names a page in ``documentId``/``path``, with arguments that are valid."""


def _forms(world: World, path: str, missing: str) -> Iterator[tuple[str, str, str]]:
    """The ways a page can be named: (field, hidden form, missing form)."""
    yield "documentId", path, missing
    yield "path", path, missing
    yield "documentId", "./" + path, "./" + missing
    yield "documentId", path.replace("/", "//"), missing.replace("/", "//")
    fake = "doc_" + "".join(world.rng.choice("0123456789abcdef") for _ in range(20))
    yield "documentId", world.doc_ids.get(path, fake), fake


_IDS = [
    (re.compile(r"\b[0-9a-f]{40}\b"), "<rev>"),
    (re.compile(r"\b(doc|review|grant|page_\w+?|cmd)_[0-9a-f]{6,}\b"), r"<\1>"),
    (re.compile(r'"(time|at|createdAt|expiresAt)":\s*[0-9.e+]+'), r'"\1":0'),
]


def _normal(body: bytes, ref: str) -> str:
    text = body.decode("utf-8").replace(json.dumps(ref)[1:-1], "<ref>")
    for pattern, sub in _IDS:
        text = pattern.sub(sub, text)
    return text


def _missing_like(world: World, path: str) -> str:
    """A path of the same shape that names nothing (same folder, same length)."""
    folder, _, name = path.rpartition("/")
    other = "".join(world.rng.choice("abcdefghjk") for _ in name[:-3]) + ".md"
    return f"{folder}/{other}" if folder else other


def _generated_calls(world: World, count: int) -> Iterator[tuple[str, dict[str, Any], str, str]]:
    """(tool, fields, hidden ref, missing ref): one pair of calls each."""
    rng = world.rng
    tools = sorted(TARGETED)
    while count > 0:
        tool = rng.choice(tools)
        hidden = rng.choice(world.hidden)
        missing = _missing_like(world, hidden)
        forms = list(_forms(world, hidden, missing))
        field, hid, miss = rng.choice(forms)
        yield tool, {"field": field, "flat": rng.random() < 0.5}, hid, miss
        count -= 1


@pytest.fixture(params=[41, 4141])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path / "ws", random.Random(request.param))
    yield w
    w.ws.close()


def _clean(world: World, body: bytes | str, *echoed: str) -> None:
    """(b): nothing of a hidden page, the caller's own words (``echoed``) left out."""
    text = body if isinstance(body, str) else body.decode("utf-8")
    for words in echoed:
        text = text.replace(json.dumps(words)[1:-1], "")
    assert MARK not in text.lower(), text[:2000]
    for path in world.hidden:
        assert path not in text, (path, text[:2000])


def test_hidden_pages_answer_as_missing_ones_and_leak_nothing(world: World) -> None:
    rng = world.rng
    started = time.monotonic()
    calls = 0
    head = world.ws.head
    per_world = CALLS_PER_RUN // 2
    # 1. every page tool, every path form, flat and nested: hidden vs missing
    for tool, how, hid, miss in _generated_calls(world, per_world // 2 - 1500):
        spec = TOOLS[tool]
        args = dict(TARGETED[tool])
        write = spec.writes
        key = f"k_{rng.getrandbits(32):x}"
        dry = rng.random() < 0.5
        answers = []
        for ref in (hid, miss):
            answers.append(
                world.answer(
                    tool,
                    world.agent,
                    write=write,
                    key=key,
                    flat=how["flat"],
                    dry=dry,
                    args=args,
                    **{how["field"]: ref},
                )
            )
        calls += 2
        _clean(world, answers[0], hid)
        assert _normal(answers[0], hid) == _normal(answers[1], miss), (tool, how, answers)
    # 2. new paths named in arguments (create, move onto a path), hidden vs missing
    pages = [p for p in world.hidden if not visibility.is_artifact(p)]
    for _ in range(150):
        hid = rng.choice(pages)  # (a missing artifact path may be created: no pair to make)
        miss = _missing_like(world, hid)
        for tool, extra in (
            ("mnote.page.create", lambda p: {"args": {"path": p, "content": "x"}}),
            ("mnote.page.move", lambda p: {"documentId": world.visible[0], "args": {"newPath": p}}),
        ):
            pair = [world.answer(tool, world.agent, write=True, **extra(p)) for p in (hid, miss)]
            calls += 2
            _clean(world, pair[0], hid)
            assert _normal(pair[0], hid) == _normal(pair[1], miss)
    # 3. replays of other actors' keys, others' sessions and grants, hidden vs missing
    for _ in range(100):
        key = rng.choice(world.keys)
        hid = rng.choice(world.hidden)
        miss = _missing_like(world, hid)
        pair = [
            world.answer(
                "mnote.page.update_title",
                world.agent,
                write=True,
                key=key,
                documentId=ref,
                args={"title": f"{MARK.upper()} renamed 0"},
            )
            for ref in (hid, miss)
        ]
        calls += 2
        _clean(world, pair[0], hid, f"{MARK.upper()} renamed 0")
        assert _normal(pair[0], hid) == _normal(pair[1], miss)
        fake = "review_" + f"{rng.getrandbits(64):016x}"
        for tool in ("mnote.review.get", "mnote.review.reject", "mnote.review.abort"):
            session = rng.choice(world.sessions) if world.sessions else fake
            write = TOOLS[tool].writes
            pair = [
                world.answer(tool, world.agent, write=write, key="k_same", args={"sessionId": ref})
                for ref in (session, fake)
            ]
            calls += 2
            _clean(world, pair[0])
            assert _normal(pair[0], session) == _normal(pair[1], fake)
        grant = rng.choice(world.grants) if world.grants else "grant_x"
        fake_grant = "grant_" + f"{rng.getrandbits(64):016x}"
        pair = [
            world.answer(
                "mnote.file.release",
                world.agent,
                write=True,
                key="k_rel",
                documentId=world.visible[0],
                args={"grantId": ref},
            )
            for ref in (grant, fake_grant)
        ]
        calls += 2
        assert _normal(pair[0], grant) == _normal(pair[1], fake_grant)
    # 4. answers about what the agent does see: listings, history, reviews, its own pages
    assert calls < per_world - 1000
    while calls < per_world:
        visible = rng.choice(world.visible)
        tool, fields = rng.choice(
            [
                ("mnote.workspace.list", {"args": {"query": rng.choice(["", "v", "z", "q7"])}}),
                ("mnote.workspace.list", {"args": {"folder": rng.choice(["pub", "ai", ""])}}),
                ("mnote.review.list", {}),
                ("mnote.doc.history", {"documentId": visible}),
                ("mnote.page.get", {"documentId": visible}),
                ("mnote.doc.fetch", {"documentId": visible}),
                ("mnote.page_ai.context", {"documentId": visible}),
            ]
        )
        _clean(world, world.answer(tool, world.agent, **fields))
        calls += 1
    assert world.ws.head == head, "an agent's refused or read-only calls committed something"
    for event in world.events:
        _clean(world, json.dumps(event))
    assert calls >= per_world
    assert time.monotonic() - started < 60
