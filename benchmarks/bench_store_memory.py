"""Keyword and hybrid query latency of the in-process store (``memory://``) against ``Memory.search`` in RAM.

The items are those of ``bench_store_keyword.py`` (agent steps, Zipf words,
common English words at the shares agent logs show). The same items are
held by a ``Memory`` and by a ``memory://`` session; the hits and scores of
every query are checked equal first. Each of the 8 queries is timed a few
times (its median kept) and the per-query medians averaged, for RAM and the
store alike, in one process; a run gives the store's ratio to RAM, and the
table gives the median of the runs with the least and most, and the load
average. The first keyword query of each (which files every item) is
timed once. Hybrid queries use ``HashingEmbedder(64)`` (no model weights).

Run: ``PYTHONPATH=. python benchmarks/bench_store_memory.py [--items 600,10000] [--runs 5]``
(``PYTHONPATH`` picks the checkout whose ``agents`` is measured).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy  # noqa: F401  # imported before timing, so no first query pays for the import
from bench_store_keyword import QUERIES, make_items

from agents.memory import Memory
from agents.memory.search import HashingEmbedder
from agents.memory.stores import InMemoryStore


def median_time(fn: Callable[[], object], repeat: int) -> float:
    """Return the median wall time of ``repeat`` calls of ``fn``, in seconds."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def load() -> str:
    """Return the 1-minute load average."""
    with open("/proc/loadavg", encoding="ascii") as file:
        return file.read().split()[0]


def run(n: int, runs: int) -> None:
    """Time keyword and hybrid queries over ``n`` items in RAM and in memory://, and print the table rows."""
    items = make_items(n)
    memory = Memory(items)
    store = InMemoryStore(f"bench-{uuid.uuid4().hex}")
    store.append("s", items)
    start = time.perf_counter()
    store.search("s", QUERIES[0], 5)
    first_store = time.perf_counter() - start
    start = time.perf_counter()
    memory.search(QUERIES[0], 5)
    first_ram = time.perf_counter() - start
    print(
        f"{n:>7} first keyword query: memory:// {first_store * 1e3:.1f} ms,"
        f" RAM {first_ram * 1e3:.1f} ms (load {load()})"
    )
    embedder = HashingEmbedder(64)
    memory.search("click", 5, mode="hybrid", embedder=embedder)  # embeds every item once
    store.search("s", "click", 5, mode="hybrid", embedder=embedder)
    for query in QUERIES:
        want = [(h.item["step"], h.score) for h in memory.search(query, 5)]
        got = [(h.item["step"], h.score) for h in store.search("s", query, 5)]
        assert got == want, (query, got, want)
    repeat = 3 if n >= 10_000 else 10
    for mode in ("keyword", "hybrid"):
        options: dict[str, Any] = {"mode": mode}
        if mode == "hybrid":
            options["embedder"] = embedder
        ram, kept, ratios = [], [], []
        for _ in range(runs):
            in_ram = statistics.fmean(
                median_time(lambda q=q, o=options: memory.search(q, 5, **o), repeat)
                for q in QUERIES
            )
            in_store = statistics.fmean(
                median_time(lambda q=q, o=options: store.search("s", q, 5, **o), repeat)
                for q in QUERIES
            )
            ram.append(in_ram * 1e3)
            kept.append(in_store * 1e3)
            ratios.append(in_store / in_ram)
        print(
            f"{n:>7} {mode:8} RAM {statistics.median(ram):8.3f} ms"
            f"  memory:// {statistics.median(kept):8.3f} ms"
            f"  ratio {statistics.median(ratios):7.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
            f"  load {load()}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", default="600,10000", help="session sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"load {load()}")
    for n in (int(size) for size in args.items.split(",")):
        run(n, args.runs)


if __name__ == "__main__":
    main()
