"""A document's bytes as lines that remember their own line endings.

Every edit in mnoted is a splice of these lines, so that what an edit does not
touch keeps its exact bytes: the BOM, each line's terminator (LF, CRLF or a
bare CR, mixed freely), a missing final newline, tabs and trailing spaces.
Bytes that are not valid UTF-8 are carried through with ``surrogateescape`` and
written back unchanged.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

BOM = "\ufeff"
_LINE_RE = re.compile(r"([^\r\n]*)(\r\n|\r|\n|$)")


def decode(data: bytes | str) -> tuple[bool, str]:
    """Text of a document and whether it began with a UTF-8 byte order mark."""
    text = data if isinstance(data, str) else data.decode("utf-8", "surrogateescape")
    if text.startswith(BOM):
        return True, text[1:]
    return False, text


def split_lines(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Split text on CRLF, CR and LF (as markdown-it does) keeping each terminator."""
    lines: list[str] = []
    ends: list[str] = []
    pos = 0
    n = len(text)
    while pos < n:
        m = _LINE_RE.match(text, pos)
        assert m is not None
        lines.append(m.group(1))
        ends.append(m.group(2))
        pos = m.end()
    return tuple(lines), tuple(ends)


@dataclass(frozen=True)
class Source:
    """Immutable line-level view of a document; ``ends[i]`` is line i's terminator."""

    lines: tuple[str, ...]
    ends: tuple[str, ...]
    bom: bool = False

    @classmethod
    def from_data(cls, data: bytes | str) -> Source:
        bom, text = decode(data)
        lines, ends = split_lines(text)
        out = cls(lines, ends, bom)
        if isinstance(data, bytes) and not bom and b"\r" not in data:
            out.__dict__["lf_bytes"] = data
        return out

    @cached_property
    def lf_bytes(self) -> bytes | None:
        """The file's bytes when they are its LF text as UTF-8 (no BOM, no CR), else None.

        An edit then searches and splices these, not the text: a page holding one character
        outside the BMP is stored by Python at four bytes a character, so each search,
        splice and encoding of the whole text would handle four times the bytes.
        """
        ends = self.ends
        if self.bom or ends.count("\n") + ends[-1:].count("") != len(ends):
            return None
        return self.normalized.encode("utf-8", "surrogateescape")

    @cached_property
    def newline(self) -> str:
        """The file's own line ending: the most common one, LF for a file with none."""
        counts = Counter(e for e in self.ends if e)
        return counts.most_common(1)[0][0] if counts else "\n"

    @cached_property
    def newlines(self) -> int:
        """How many LFs :attr:`normalized` holds: every line but an unterminated one ends
        in one there (kept through :meth:`replace_lines`, so an edit need not count them)."""
        return len(self.ends) - self.ends.count("")

    @cached_property
    def text(self) -> str:
        ends = self.ends
        if ends:
            nl = ends[0]
            last_open = ends[-1] == ""
            if nl and ends.count(nl) == len(ends) - last_open:  # one ending throughout
                if nl == "\n" and "normalized" in self.__dict__:
                    return self.normalized
                return nl.join(self.lines) + ("" if last_open else nl)
        return "".join(map(operator.add, self.lines, ends))

    @cached_property
    def normalized(self) -> str:
        """The text with every line ending written as LF (what the parser sees)."""
        if not self.lines:
            return ""
        if "" in self.ends[:-1]:  # not from split_lines; keep the general rule
            return "".join(
                ln + ("\n" if e else "") for ln, e in zip(self.lines, self.ends, strict=True)
            )
        return "\n".join(self.lines) + ("\n" if self.ends[-1] else "")

    def to_bytes(self) -> bytes:
        known: bytes | None = self.__dict__.get("lf_bytes")
        if known is not None:
            return known
        return ((BOM if self.bom else "") + self.text).encode("utf-8", "surrogateescape")

    def __len__(self) -> int:
        return len(self.lines)

    def segment(self, start: int, end: int) -> str:
        """Lines ``start:end`` joined with LF, without a final newline."""
        return "\n".join(self.lines[start:end])

    def replace_lines(
        self,
        start: int,
        end: int,
        new: Sequence[str],
        *,
        normalized: str | None = None,
        lf_bytes: bytes | None = None,
        open_end: bool = False,
    ) -> Source:
        """Replace lines ``start:end`` with ``new`` (no terminators), in the file's newline.

        Lines outside the range keep their bytes, except that a last line without a
        terminator gets one when lines are added after it (the file then still ends
        without a final newline). ``open_end``: the lines replaced run to the end, and the
        result ends without a final newline (an edit took it). ``normalized``,
        ``lf_bytes``: the result's LF text or its bytes, when the caller has them already
        (a search/replace spliced them), so they are not joined or encoded again.
        """
        if not 0 <= start <= end <= len(self.lines):
            raise ValueError(f"line range {start}:{end} outside 0:{len(self.lines)}")
        nl = self.newline
        lines = list(self.lines)
        ends = list(self.ends)
        at_open_end = end == len(lines) and bool(ends) and ends[-1] == ""
        # New lines ending in an empty one at a file's open end: the new text ends with a
        # newline, and so does the file now (an unterminated empty line is no line at all,
        # as a fresh read of the bytes has it).
        closes = at_open_end and bool(new) and new[-1] == ""
        if closes:
            new = new[:-1]
        new_ends = [nl] * len(new)
        if at_open_end and start == end and (new or closes):
            ends[start - 1] = nl  # the open last line is followed now
        if at_open_end and not closes:
            # The file ends without a newline; keep it that way.
            if new:
                new_ends[-1] = ""
            elif start > 0:
                ends[start - 1] = ""
        lines[start:end] = list(new)
        ends[start:end] = new_ends
        if open_end and end == len(self.lines) and start + len(new) > 0:
            ends[start + len(new) - 1] = ""
        out = Source(tuple(lines), tuple(ends), self.bom)
        if not at_open_end and not open_end and len(new) >= self.ends[start:end].count(nl):
            # No fewer lines end in ``nl`` and no more in anything else: it is still the
            # most common ending (counting 30,000 again per edit of a 1 MB page is not free).
            out.__dict__["newline"] = nl
        if normalized is not None:
            out.__dict__["normalized"] = normalized
        if lf_bytes is not None:
            out.__dict__["lf_bytes"] = lf_bytes
        if "newlines" in self.__dict__:
            before = self.ends[max(0, start - 1) : end]
            after = ends[max(0, start - 1) : start + len(new)]
            out.__dict__["newlines"] = (
                self.newlines - len(before) + before.count("") + len(after) - after.count("")
            )
        return out
