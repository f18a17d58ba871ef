"""What a keyword snapshot costs to save, and what a writer's close saving it costs the writes, the close and the reads.

On an SQLite session of ``--items`` UFO-shaped steps (the ``first``
session of benchmarks/bench_search_costs.py, written once under
``--cache``), each run measures, in one process:

* ``save``: ``Store.save_keyword_snapshot`` (CPU and wall ms);
* on a copy of the file: a 1,000-step batch ``append``, the ``close``
  that follows (the call itself; the save it starts, where it does, runs
  after it on a thread: ``background save`` is the time till that ends),
  then ``read_memory`` on a new handle and its first keyword query
  against a warm one.

Run it from a checkout of each version to compare them (the calls are
public): ``PYTHONPATH=. python benchmarks/bench_keyword_snapshot.py
[--items 100000] [--runs 3] [--cache DIR]``. Each cell is the median
(spread) of the runs, with the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search_costs import QUERIES, steps

from agents.memory import MemoryItem
from agents.memory.stores import open_store


def timed(call: Callable[[], object]) -> tuple[float, float]:
    """Return the wall and CPU ms of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return 1000 * (time.perf_counter() - wall), 1000 * (time.process_time() - cpu)


def _join() -> None:
    for thread in threading.enumerate():
        if thread.name == "kvmemory-keyword-snapshot":
            thread.join()


def written(cache: str, n: int) -> str:
    """Return the file holding the session ``first-<n>`` of ``n`` steps, written once under ``cache``."""
    path = os.path.join(cache, f"first-{n}.db")
    with open_store(path) as store:
        if store.count(f"first-{n}") != n:
            print(f"  writing {n} steps (once; kept for later runs)", flush=True)
            rows = steps(n)
            for at in range(0, n, 10_000):
                store.append(f"first-{n}", [MemoryItem(**row) for row in rows[at : at + 10_000]])
    _join()
    return path


def run(path: str, n: int) -> dict[str, float]:
    """Return one run's figures (see the module docs)."""
    sid = f"first-{n}"
    out: dict[str, float] = {}
    with open_store(path) as store:
        out["save"], out["save cpu"] = timed(lambda: store.save_keyword_snapshot(sid))
    with tempfile.TemporaryDirectory() as folder:
        copy = os.path.join(folder, "copy.db")
        for suffix in ("", "-wal"):
            if os.path.exists(path + suffix):
                shutil.copyfile(path + suffix, copy + suffix)
        batch = [MemoryItem(**row) for row in steps(n + 1_000)[n:]]
        store = open_store(copy)
        out["append 1,000"], out["append 1,000 cpu"] = timed(lambda: store.append(sid, batch))
        start = time.perf_counter()
        out["close"], out["close cpu"] = timed(store.close)
        _join()
        out["background save"] = 1000 * (time.perf_counter() - start)
        with open_store(copy) as reader:
            memory = reader.read_memory(sid)  # warm the file's pages: the next read is timed
            del memory
            found: list[object] = []
            out["read_memory"], out["read_memory cpu"] = timed(
                lambda: found.append(reader.read_memory(sid))
            )
            memory = found.pop()
            out["first"], out["first cpu"] = timed(lambda: memory.search(QUERIES[1], 5))
            out["warm"], out["warm cpu"] = min(
                timed(lambda: memory.search(QUERIES[1], 5)) for _ in range(3)
            )
            out["first / warm cpu"] = out["first cpu"] / out["warm cpu"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--cache", default=os.path.join(tempfile.gettempdir(), "kvmemory-bench-first")
    )
    args = parser.parse_args()
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    path = written(args.cache, args.items)
    runs = []
    for number in range(args.runs):
        runs.append(run(path, args.items))
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        print(f"  run {number + 1}: {runs[-1]} (load {load})", file=sys.stderr, flush=True)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"\n== keyword snapshot costs, {args.items} steps (load {load})")
    for key in runs[0]:
        values = [run[key] for run in runs]
        unit = "" if "/" in key else " ms"
        spread = max(values) - min(values)
        print(f"{key:24} {statistics.median(values):10.2f}{unit} ({spread:.2f})")


if __name__ == "__main__":
    main()
