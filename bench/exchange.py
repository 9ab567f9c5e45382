"""Replacing a page's file: a new file renamed over it, or a file taken back exchanged with it.

The store writes a page's new version into a spare file and puts it over the page. A spare
made for the purpose is a new file: creating it, allocating its blocks (at its fsync) and
freeing the old page's blocks (at the rename) all cost. A spare taken back is a page's file
replaced earlier (the store kept such spares until ``bench/turns.py`` showed they earned
under 10%: ``docs/performance.md``, *The complexity budget*): it is written over, and
exchanged with the page (``renameat2(RENAME_EXCHANGE)``), which leaves the old file at the
spare's name for the next write. This times both ways on the same pages in alternating
rounds of ``--group`` files (a group of agents' writes), each step per file, median and p99
in milliseconds: the create, the write, the file's fsync, and the rename (or exchange) with
the folders' fsync.

    python bench/exchange.py [--rounds 40] [--group 32] [--size 10000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from commit import quantiles

from mnoted.store import dirfd

STEPS = ("create", "write", "fsync", "rename")


class Pages:
    """``group`` pages of ``size`` bytes in one folder and a spares' folder beside it."""

    def __init__(self, root: Path, group: int, size: int) -> None:
        (root / "pages").mkdir(parents=True)
        (root / "spares").mkdir()
        self.pages = os.open(root / "pages", os.O_RDONLY | os.O_DIRECTORY)
        self.spares = os.open(root / "spares", os.O_RDONLY | os.O_DIRECTORY)
        self.names = [f"page-{i}.md" for i in range(group)]
        self.size = size
        self.made = 0
        self.taken_back: list[str] = []  # files exchanged out, to be written over
        for name in self.names:
            self._new_file(self.pages, name, self.data(0, name))

    def data(self, turn: int, name: str) -> bytes:
        line = f"turn {turn} of {name}: some words of a note.\n".encode()
        return (line * (self.size // len(line) + 1))[: self.size - (turn % 7)]

    def _new_file(self, folder: int, name: str, data: bytes) -> None:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=folder)
        dirfd.write_all(fd, data)
        os.fsync(fd)
        os.close(fd)

    def round(self, turn: int, exchange: bool, times: dict[str, list[float]]) -> None:
        """Replace every page once: timed per step, per file."""
        clock = time.perf_counter
        fds: list[tuple[str, int]] = []
        t = clock()
        for _ in self.names:
            if exchange and self.taken_back:
                spare = self.taken_back.pop()
                fds.append((spare, os.open(spare, os.O_RDWR, dir_fd=self.spares)))
            else:
                self.made += 1
                spare = f"spare-{self.made}"
                flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
                fds.append((spare, os.open(spare, flags, 0o644, dir_fd=self.spares)))
        t = _lap(times["create"], t, len(fds))
        for (_, fd), name in zip(fds, self.names, strict=True):
            data = self.data(turn, name)
            dirfd.write_all(fd, data)
            if exchange:  # what is left of the old bytes (as ``Spare.fill`` does)
                os.ftruncate(fd, len(data))
        t = _lap(times["write"], t, len(fds))
        for _, fd in fds:
            os.fsync(fd)
            os.close(fd)
        t = _lap(times["fsync"], t, len(fds))
        for (spare, _), name in zip(fds, self.names, strict=True):
            if exchange:
                dirfd.exchange(self.spares, spare, self.pages, name)
                self.taken_back.append(spare)
            else:
                os.rename(spare, name, src_dir_fd=self.spares, dst_dir_fd=self.pages)
        os.fsync(self.pages)
        _lap(times["rename"], t, len(fds))

    def close(self) -> None:
        os.close(self.pages)
        os.close(self.spares)


def _lap(into: list[float], since: float, files: int) -> float:
    now = time.perf_counter()
    into.append((now - since) / files)
    return now


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--group", type=int, default=32)
    ap.add_argument("--size", type=int, default=10_000)
    args = ap.parse_args()
    ways: dict[str, Callable[[Pages, int, dict[str, list[float]]], None]] = {
        "new file renamed over the page": lambda p, n, t: p.round(n, False, t),
        "file taken back, exchanged": lambda p, n, t: p.round(n, True, t),
    }
    times = {way: {step: [] for step in STEPS} for way in ways}
    with tempfile.TemporaryDirectory(prefix="mnote-exchange-") as tmp:
        pages = {
            way: Pages(Path(tmp) / str(i), args.group, args.size) for i, way in enumerate(ways)
        }
        os.sync()
        for turn in range(1, args.rounds + 1):
            for way, run in ways.items():  # alternating: both see the same stretch of the disk
                run(pages[way], turn, times[way])
        for p in pages.values():
            p.close()
    print(f"{args.rounds} rounds of {args.group} files of {args.size:,} bytes, ms per file")
    print(f"{'':34}" + "".join(f"{step:>16}" for step in (*STEPS, "total")))
    for way in ways:
        cells = [quantiles(times[way][step]) for step in STEPS]
        totals = [sum(x) for x in zip(*(times[way][s] for s in STEPS), strict=True)]
        cells.append(quantiles(totals))
        print(f"{way:34}" + "".join(f"{m:7.3f} / {p:6.3f}" for m, p in cells))
    print("(median / p99; the first round of taken-back files makes its files: none were yet)")


if __name__ == "__main__":
    main()
