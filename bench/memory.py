"""The daemon's memory through a long run of agent writes, beside its memory when ready.

A daemon that serves agents for days must not grow with the number of writes it made: its
caches (parsed pages, kept answers, libgit2's objects) each have a bound, and what it
holds once they are full is what it holds for good. This bench starts the daemon on a
workspace of `--files` notes (folders of 100, as `bench/daemon.py`), then, through its
socket, edits every third of the first 3,000 notes in turn (`mnote.doc.markdown_edit`: a
line of its own switched between two texts of one length) and reads each of them with
`mnote.doc.fetch`, until `--writes` writes were made. The notes keep their size: notes
that grew would fill the same bounded caches with more, which is not the number of writes
(an earlier version appended a line each time; its notes grew ninefold). The daemon's resident set
(`VmRSS`) and the part of it not backed by a file (`RssAnon`: the heap, where a leak
shows) are printed every `--every` writes, each as a ratio to its value when the daemon
was ready (the reference, measured in the same run), with the rate of writes (and their
reads) over those last writes: a daemon that slowed as it aged would show it there.

With `--idle SECONDS` the client pauses that long after each `--every` writes, before the
figures are read, as an agent that works in bursts does: the daemon then packs and merges
in the background (after 5 s without writes). Each line also gives the files the daemon
still maps or holds open whose names are gone (deleted packs, say): their disk space is
only freed once it lets go of them.

    python bench/memory.py [--files 10000] [--writes 20000] [--every 2000] [--idle 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from daemon import Daemon, workspace
from fixture import daemon_env, status_mb

PAGES = 3000
MARKER = "mnoted memory bench: "


def deleted_held(pid: int) -> tuple[int, float]:
    """The files process ``pid`` maps or holds open whose names are gone: how many, and
    their size in MB (as mapped, or from their open descriptor)."""
    sizes: dict[str, float] = {}
    for row in Path(f"/proc/{pid}/maps").read_text().splitlines():
        if row.endswith("(deleted)"):
            start, end = (int(x, 16) for x in row.split()[0].split("-"))
            path = row.split(maxsplit=5)[5]
            sizes[path] = sizes.get(path, 0.0) + (end - start) / 1e6
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.endswith("(deleted)") and target not in sizes:
                sizes[target] = os.stat(f"/proc/{pid}/fd/{fd}").st_size / 1e6
        except OSError:
            continue
    return len(sizes), sum(sizes.values())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--writes", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=2_000)
    parser.add_argument("--idle", type=float, default=0.0, help="seconds of pause each time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mnm") as tmp:
        base = Path(tmp)
        env = daemon_env(base)
        root = workspace(base, args.files, env)
        notes = sorted(
            p.relative_to(root).as_posix()
            for p in root.glob("d*/**/*.md")  # the fixture's notes (not page.md, big.md)
        )[:PAGES]
        written = notes[::3]
        for note in written:  # committed by the daemon as it starts (an editor's saves)
            with (root / note).open("a") as fh:
                fh.write(f"\n{MARKER}A\n")
        shown = dict.fromkeys(written, "A")
        daemon = Daemon(root, base, env)
        try:
            client = daemon.client()
            rss0, anon0 = status_mb(daemon.proc.pid, "VmRSS", "RssAnon")
            print(f"workspace of {args.files:,} files, {len(notes):,} notes written in turn")
            print(f"  {'when ready':<24} RSS {rss0:6.0f} MB   heap (RssAnon) {anon0:6.0f} MB")
            writes, last = 0, time.perf_counter()
            while writes < args.writes:
                for i, note in enumerate(notes):
                    got = client.request(
                        "POST", "/v1/tools/call", client.envelope("mnote.doc.fetch", note)
                    )[1]
                    assert got.get("ok"), got
                    if i % 3:
                        continue
                    old, shown[note] = shown[note], "B" if shown[note] == "A" else "A"
                    swap = {"search": MARKER + old, "replace": MARKER + shown[note]}
                    edit = {"operations": [swap]}
                    done = client.request(
                        "POST",
                        "/v1/tools/call",
                        client.envelope("mnote.doc.markdown_edit", note, edit),
                    )[1]
                    assert done.get("ok"), done
                    writes += 1
                    if writes % args.every == 0:
                        now = time.perf_counter()
                        rate = args.every / (now - last)
                        time.sleep(args.idle)
                        last = time.perf_counter()
                        rss, anon = status_mb(daemon.proc.pid, "VmRSS", "RssAnon")
                        gone, gone_mb = deleted_held(daemon.proc.pid)
                        label = f"after {writes:,} writes"
                        print(
                            f"  {label:<24} RSS {rss:6.0f} MB ({rss / rss0:4.2f}x)"
                            f"   heap {anon:6.0f} MB ({anon / anon0:4.2f}x)   {rate:5.0f} writes/s"
                            f"   deleted files held {gone} ({gone_mb:.1f} MB)"
                        )
                    if writes >= args.writes:
                        break
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
