"""What the keyword index beside a JSONL log costs: appends with and without it, and the query after an append.

* writes: ``Store.append(session, [item])`` of ``--single`` UFO-shaped steps,
  one per call, CPU time of this process, to a session whose keyword index
  exists (a keyword search ran first: the index is in memory and its file
  beside the log) against one never searched (no index). Writes never touch
  the index (the next query indexes what was appended), so the ratio is the
  cost of having one.
* the query after an append: a keyword search right after each append (it
  reads the records appended since and indexes their items) against the
  same search again (warm), at ``--items`` steps.
* the file: building it at the first keyword search of ``--items`` steps,
  its size, and the first search of a new handle (reading the file) against
  a warm one.

Each figure is the median of ``--runs`` runs with the spread and the load
average beside it (the machine may be loaded). The 100,000-step first query
is in ``bench_search_costs.py --sections first --stores jsonl``.

Run: .venv/bin/python benchmarks/bench_jsonl_keywords.py [--runs 3] [--single 500] [--items 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence

from bench_search_costs import QUERIES, cell, load, steps

from agents.memory import MemoryItem
from agents.memory.stores import JSONLStore


def cpu_ms(call: Callable[[], object]) -> float:
    """Return this process's CPU ms for one call."""
    start = time.process_time()
    call()
    return 1000 * (time.process_time() - start)


def wall_ms(call: Callable[[], object]) -> float:
    """Return the wall ms of one call."""
    start = time.perf_counter()
    call()
    return 1000 * (time.perf_counter() - start)


def writes_run(single: int) -> dict[str, float]:
    """Return the CPU ms of ``single`` one-step appends to a session without an index and to one with it."""
    items = [MemoryItem(**row) for row in steps(single + 1)]
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder, JSONLStore(folder, fsync=False) as store:
        store.append("indexed", items[:1])
        store.search("indexed", QUERIES[0], 5, mode="keyword")  # the index exists from here on
        store.append("plain", items[:1])
        for sid in ("plain", "indexed"):
            out[f"writes {sid}"] = cpu_ms(
                lambda sid=sid: [store.append(sid, [i]) for i in items[1:]]
            )
        assert os.path.exists(os.path.join(folder, "indexed.keywords"))
        assert not os.path.exists(os.path.join(folder, "plain.keywords"))
    return out


def queries_run(n: int, appends: int) -> dict[str, float]:
    """Return the index's build, file size, first search of a new handle, and the search after an append, at ``n`` steps."""
    rows = steps(n + appends)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        with JSONLStore(folder, fsync=False) as store:
            for at in range(0, n, 10_000):
                store.append("s", [MemoryItem(**row) for row in rows[at : min(n, at + 10_000)]])
            out["build ms"] = wall_ms(lambda: store.search("s", QUERIES[0], 5, mode="keyword"))
        out["file MB"] = os.path.getsize(os.path.join(folder, "s.keywords")) / 1e6
        with JSONLStore(folder, fsync=False) as store:
            store.count("s")  # the log read, as a StoredMemory reads it when opened
            out["first ms"] = wall_ms(lambda: store.search("s", QUERIES[0], 5, mode="keyword"))
            out["warm ms"] = statistics.median(
                wall_ms(lambda: store.search("s", QUERIES[0], 5, mode="keyword")) for _ in range(5)
            )
            after = []
            for row in rows[n : n + appends]:
                store.append("s", [MemoryItem(**row)])
                after.append(wall_ms(lambda: store.search("s", QUERIES[0], 5, mode="keyword")))
            out["after append ms"] = statistics.median(after)
    return out


def show(runs: Sequence[dict[str, float]], keys: Sequence[str]) -> None:
    """Print each figure's median (spread) over the runs."""
    for key in keys:
        print(f"  {key:24} {cell([run[key] for run in runs]):>24}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--single", type=int, default=500)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--appends", type=int, default=20)
    args = parser.parse_args()
    print(f"JSONL keyword index costs; load {load()}")
    runs = [writes_run(args.single) for _ in range(args.runs)]
    print(f"\n== {args.single} one-step appends, CPU ms (load {load()})")
    show(runs, ["writes plain", "writes indexed"])
    ratios = [run["writes indexed"] / run["writes plain"] for run in runs]
    print(f"  {'indexed / plain':24} {cell(ratios):>24}")
    runs = [queries_run(args.items, args.appends) for _ in range(args.runs)]
    print(f"\n== the index at {args.items} steps, wall (load {load()})")
    show(runs, ["build ms", "file MB", "first ms", "warm ms", "after append ms"])
    ratios = [run["first ms"] / run["warm ms"] for run in runs]
    print(f"  {'first / warm':24} {cell(ratios):>24}")


if __name__ == "__main__":
    main()
