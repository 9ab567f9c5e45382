"""What a command did (:class:`EditResult`), its changed block ids and unified diff. Pure."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from mnoted.core.page import Page
from mnoted.core.sequences import shared
from mnoted.core.source import Source


@dataclass
class EditResult:
    """What a command did: the new page, the blocks it changed and a unified diff."""

    command: str
    page: Page
    before: Page
    changed_block_ids: list[str]
    details: dict[str, Any] = field(default_factory=dict)
    # Lines known equal at the head and at the tail of ``before`` and ``page`` (an edit that
    # knows where it changed the text says so): the diff compares only what lies between.
    same_ends: tuple[int, int] = (0, 0)

    @property
    def changed(self) -> bool:
        return self.page.source != self.before.source

    @cached_property
    def diff(self) -> str:
        return unified_diff(self.before, self.page, same_ends=self.same_ends)

    def to_dict(self) -> dict[str, Any]:
        return {
            "appliedCommand": self.command,
            "changedBlockIds": self.changed_block_ids,
            "diff": self.diff,
            **self.details,
        }


def _common_ends(a: Source, b: Source, known: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """How many lines ``a`` and ``b`` share at their head and at their tail (text and
    ending), at least ``known`` (what an edit knows it left alone is not compared again)."""
    n = min(len(a), len(b))
    k = min(known[0], n)
    head = min(shared(a.lines, b.lines, n, start=k), shared(a.ends, b.ends, n, start=k))
    k = min(known[1], n - head)
    tail = min(
        shared(a.lines, b.lines, n - head, forward=False, start=k),
        shared(a.ends, b.ends, n - head, forward=False, start=k),
    )
    return head, tail


def _diff_lines(src: Source, start: int, stop: int) -> list[str]:
    return [
        ln + "\n" if end else ln
        for ln, end in zip(src.lines[start:stop], src.ends[start:stop], strict=True)
    ]


def _opcodes(
    a: Source, b: Source, context: int, same_ends: tuple[int, int]
) -> tuple[list[tuple[str, int, int, int, int]], list[str], list[str], int]:
    """difflib's opcodes for ``a`` → ``b``, matching only the part between the common
    head and tail (a one-line edit of a 1 MB page compares lines, no sequence match).

    Also the lines of both sides from ``offset`` on (what the hunks can show)."""
    head, tail = _common_ends(a, b, same_ends)
    offset = max(0, head - context)
    la = _diff_lines(a, offset, len(a) - max(0, tail - context))
    lb = _diff_lines(b, offset, len(b) - max(0, tail - context))
    ops: list[tuple[str, int, int, int, int]] = [("equal", 0, head, 0, head)] if head else []
    matcher = difflib.SequenceMatcher(
        None,
        la[head - offset : len(a) - tail - offset],
        lb[head - offset : len(b) - tail - offset],
        autojunk=False,
    )
    ops += [
        (tag, i1 + head, i2 + head, j1 + head, j2 + head)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
    ]
    if tail:
        ops.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return ops, la, lb, offset


def _groups(
    ops: list[tuple[str, int, int, int, int]], n: int
) -> list[list[tuple[str, int, int, int, int]]]:
    """Hunks of ``ops`` with ``n`` lines of context (difflib's own grouping rule)."""
    ops = [op for op in ops if op[1] != op[2] or op[3] != op[4]]
    if not ops or all(op[0] == "equal" for op in ops):
        return []
    if ops[0][0] == "equal":
        tag, i1, i2, j1, j2 = ops[0]
        ops[0] = (tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2)
    if ops[-1][0] == "equal":
        tag, i1, i2, j1, j2 = ops[-1]
        ops[-1] = (tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n))
    groups: list[list[tuple[str, int, int, int, int]]] = []
    group: list[tuple[str, int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal" and i2 - i1 > 2 * n:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            groups.append(group)
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        groups.append(group)
    return groups


def _range(start: int, stop: int) -> str:
    length = stop - start
    first = start + 1 if length else start
    return str(first) if length == 1 else f"{first},{length}"


def unified_diff(
    before: Page, after: Page, context: int = 3, *, same_ends: tuple[int, int] = (0, 0)
) -> str:
    """The change as a unified diff of the file (LF endings), like ``diff -u``.

    ``same_ends``: lines known equal at the head and at the tail of both (see
    :attr:`EditResult.same_ends`); the diff is the same, found with less comparing.
    """
    if before.source.lines == after.source.lines and before.source.ends == after.source.ends:
        return ""
    ops, a, b, k = _opcodes(before.source, after.source, context, same_ends)
    name = before.name or "page.md"
    out = [f"--- a/{name}\n", f"+++ b/{name}\n"]
    for group in _groups(ops, context):
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + ln for ln in a[i1 - k : i2 - k]]
                continue
            out += ["-" + ln for ln in a[i1 - k : i2 - k]]
            out += ["+" + ln for ln in b[j1 - k : j2 - k]]
    return "".join(
        ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in out
    )


def changed_ids(before: Page, after: Page, also: Sequence[str] = ()) -> list[str]:
    """Ids inserted, deleted or changed in themselves (not merely through a child)."""
    old = before.index
    new = after.index
    if after.window is not None:
        old_ids, new_ids = after.window
        out = [i for i in new_ids if i not in old or old[i].signature() != new[i].signature()]
        out += [i for i in old_ids if i not in new]
    else:
        out = [i for i, b in new.items() if i not in old or old[i].signature() != b.signature()]
        out += [i for i in old if i not in new]
    out += [i for i in also if i not in out and (i in new or i in old)]
    if len(out) < 2:
        return out
    ids = list(new)  # document order; a few changed ids are looked up in C, not mapped all
    wanted = set(out)
    order = (
        {i: ids.index(i) for i in wanted if i in new}
        if len(wanted) < 64
        else {i: n for n, i in enumerate(ids) if i in wanted}
    )
    return sorted(out, key=lambda i: order.get(i, len(ids)))
