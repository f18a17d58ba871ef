"""The open of a JSONL store whose folder holds many sessions: the listing that tells whether it was searched.

A JSONL handle imports numpy as it opens where a keyword or vector file
lies beside a log (the store was searched: every search ranks with numpy),
so that the first query does not pay the import. Telling that lists the
store's folder (``os.scandir``, stopped at the first such file). The
script writes ``--sessions`` session logs (copies of one, the open reads
none of them) into a folder last changed an hour ago, then times, in this
one process, ``JSONLStore(folder, read_only=True)`` and its close:

- ``never searched``: no side file, numpy not imported (a tool that lists
  or exports sessions, opening the store again and again);
- ``searched``: a ``.vectors`` file beside one log, numpy imported by the
  first open;

each against the raw listing of the folder (``os.scandir``, every name
looked at) measured in the same process.

Run: .venv/bin/python benchmarks/bench_jsonl_open.py [--sessions 10000] [--opens 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from agents.memory import MemoryItem
from agents.memory.stores import JSONLStore


def timed(run: Callable[[], object], count: int) -> str:
    """Return the median and [min-max] of ``count`` runs of ``run``, in ms."""
    took = []
    for _ in range(count):
        start = time.perf_counter()
        run()
        took.append(time.perf_counter() - start)
    median = statistics.median(took)
    return f"{median * 1e3:.3f} ms [{min(took) * 1e3:.3f}-{max(took) * 1e3:.3f}]"


def listed(folder: str) -> bool:
    """List the folder as the raw baseline: every name looked at."""
    with os.scandir(folder) as entries:
        return any(entry.name.endswith((".keywords", ".vectors")) for entry in entries)


def main() -> None:
    """Write the folder and print the timings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--opens", type=int, default=200)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="kvmemory-open-")
    try:
        with JSONLStore(folder) as store:
            store.append("s0", [MemoryItem(step=1, action="open the file")])
        log = os.path.join(folder, "s0.jsonl")
        for number in range(1, args.sessions):
            shutil.copyfile(log, os.path.join(folder, f"s{number}.jsonl"))
        hour_ago = time.time() - 3600
        os.utime(folder, (hour_ago, hour_ago))

        def opened() -> None:
            JSONLStore(folder, read_only=True).close()

        load = os.getloadavg()[0]
        print(f"{args.sessions} sessions, {args.opens} opens each, load {load:.2f}")
        assert "numpy" not in sys.modules
        print(f"  never searched: open+close {timed(opened, args.opens)}")
        assert "numpy" not in sys.modules
        print(f"  raw listing:    {timed(lambda: listed(folder), args.opens)}")
        open(os.path.join(folder, f"s{args.sessions // 2}.vectors"), "wb").close()
        os.utime(folder, (hour_ago, hour_ago))
        print(f"  searched:       open+close {timed(opened, args.opens)}")
        print(f"  raw listing:    {timed(lambda: listed(folder), args.opens)}")
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
