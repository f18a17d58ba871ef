"""CLI benchmark: time and peak memory of kvmemory commands on a long SQLite session.

Writes a session of 200,000 agent steps (ten fields each) to a SQLite store
and runs ``show --last 2``, ``replay --last 2``, ``stats`` and ``convert``
(to JSONL and to another store) on it, each in a fresh process, and prints
the wall time and the process's peak resident memory. The baseline is a
process that imports the command and reads nothing: what a command adds to
it is what the command holds of the session. ``show`` and ``replay`` of the
last items should stay near the baseline whatever the session's length; the
others read the whole session a page at a time and should stay within a
few tens of MB of it.

Run: .venv/bin/python benchmarks/bench_cli.py [--items N]
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile

# Runs in a fresh process: the command, then its wall time and peak RSS in MB on stderr.
RUNNER = """
import os, resource, sys, time
from agents.cli import main
start = time.perf_counter()
with open(os.devnull, "w") as sink:
    status = main(sys.argv[1:], out=sink) if sys.argv[1:] else 0
elapsed = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{status} {elapsed:.2f} {peak:.0f}", file=sys.stderr)
"""

WRITER = """
import sys
from _common import make_rows
from agents.memory import MemoryItem
from agents.memory.stores import open_store
with open_store(sys.argv[1]) as store:
    rows = make_rows(int(sys.argv[2]))
    for start in range(0, len(rows), 10_000):
        store.append("long", [MemoryItem(**row) for row in rows[start : start + 10_000]])
"""


def measure(*argv: str) -> tuple[float, float]:
    """Run the command in a fresh process and return its wall time (s) and peak RSS (MB)."""
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, *argv], capture_output=True, text=True, check=True
    )
    status, elapsed, peak = done.stderr.split()[-3:]
    assert status == "0", done.stderr
    return float(elapsed), float(peak)


def main() -> None:
    """Write the session, run the commands and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    args = parser.parse_args()

    folder = pathlib.Path(tempfile.mkdtemp(prefix="kvmemory-bench-"))
    db = folder / "runs.db"
    # Written by another process: a child's peak memory counts from its parent's
    # at fork, so this process must stay small while it starts the commands.
    subprocess.run(
        [sys.executable, "-c", WRITER, str(db), str(args.items)],
        cwd=pathlib.Path(__file__).parent,
        check=True,
    )
    source = [str(db), "--session", "long"]
    cases = {
        "show --last 2": ["show", *source, "--last", "2"],
        "replay --last 2": ["replay", *source, "--last", "2", "--no-color"],
        "stats": ["stats", *source],
        "convert to JSONL": ["convert", *source, str(folder / "copy.jsonl"), "--quiet"],
        "convert to a store": ["convert", *source, str(folder / "copy.db"), "--quiet"],
    }
    _, base = measure()
    print(f"{args.items:,} items; a process that only imports the command peaks at {base:.0f} MB")
    for name, argv in cases.items():
        elapsed, peak = measure(*argv)
        print(f"{name:20} {elapsed:6.2f} s  peak {peak:5.0f} MB  (+{peak - base:.0f} MB)")


if __name__ == "__main__":
    main()
