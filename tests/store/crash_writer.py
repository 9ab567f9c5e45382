"""Subprocess for the crash test: applies commands and prints each intent and each ack.

Usage: crash_writer.py ROOT FIRST COUNT SEED [STEP COUNTDOWN]. With STEP the process arms the
store's crash point and is SIGKILLed when it reaches it; without, the parent kills it. Some
runs of 2-4 commands are applied as one group: their acks are printed once it has landed.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys

from mnoted.store import CommandMeta, Delete, Move, Workspace, Write, faults

PATHS = ["a.md", "b.md", "notes/c.md", "notes/deep/d.md", "e.md"]


def _command(ws: Workspace, rng: random.Random, k: int) -> str:
    """Apply command ``k`` (printing its intent first); its commit (landed or staged)."""
    present = [p for p in PATHS if ws.blob_id(p) is not None]
    absent = [p for p in PATHS if p not in present]
    ops: list[list[str]] = []
    changes: list[Write | Delete | Move] = []
    roll = rng.random()
    if present and absent and roll < 0.15:
        old, new = rng.choice(present), rng.choice(absent)
        ops.append(["m", old, new])
        changes.append(Move(old, new))
    elif present and roll < 0.25:
        victim = rng.choice(present)
        ops.append(["d", victim])
        changes.append(Delete(victim))
    else:
        for path in rng.sample(PATHS, rng.randint(1, 3)):
            body = f"command {k} wrote {path}\n" * rng.randint(1, 200)
            ops.append(["w", path, body])
            changes.append(Write(path, body.encode()))
    meta = CommandMeta(
        "test.write",
        actor="hermes",
        command_id=f"cmd_{k}",
        trace_id=f"trace_{k}",
        idempotency_key=f"key_{k}",
        request_hash=f"hash_{k}",
    )
    print("BEGIN", json.dumps({"k": k, "ops": ops}), flush=True)
    return ws.apply(meta, changes).commit


def main() -> None:
    root, first, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    ws = Workspace.open(root)
    if len(sys.argv) > 5:
        faults.arm(sys.argv[5], int(sys.argv[6]))
    print("OPEN", flush=True)
    k = first
    while k < first + count:
        # Some runs of commands land as a group (one barrier, journal entry and branch move).
        size = rng.randint(2, 4) if rng.random() < 0.4 else 1
        numbers = range(k, min(k + size, first + count))
        done: list[tuple[int, str]] = []
        with ws.group() if len(numbers) > 1 else contextlib.nullcontext():
            for n in numbers:
                done.append((n, _command(ws, rng, n)))
        for n, commit in done:
            print("ACK", n, commit, flush=True)
        k += len(numbers)
        if rng.random() < 0.3:
            ws.idle()
        if rng.random() < 0.15:  # packing may be cut short by a kill too
            ws.maintenance()
    ws.close()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
