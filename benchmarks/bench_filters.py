"""Filtered search benchmark: a store's search with where= against the same search without it.

One session of N generated agent steps per store; the same keyword query is
run unfiltered and with filters that half, 1%, 0.1% and none of the items
pass, and the filtered time is printed as a ratio of the unfiltered one,
measured in the same process on the same store (median of --repeats, and
the spread). ``Memory.search`` in RAM is measured the same way.

Run: .venv/bin/python benchmarks/bench_filters.py [--items N] [--repeats R]
     [--postgres URL]
PostgreSQL runs only when --postgres (or KVMEMORY_BENCH_POSTGRES_URL) names a
server; the tables go to a fresh schema that is dropped afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _common import postgres_schema

from agents.memory import Memory, MemoryItem
from agents.memory.stores import open_store

WORDS = [
    "open",
    "click",
    "the",
    "report",
    "file",
    "save",
    "dialog",
    "export",
    "button",
    "menu",
    "type",
    "mail",
    "send",
]
QUERY = "report dialog w5"
FILTERS: list[tuple[str, dict[str, Any]]] = [
    ("half pass", {"agent": "host"}),
    ("1% pass", {"cost": {"$lt": 10}}),
    ("0.1% pass", {"cost": 999}),
    ("none pass", {"cost": -1}),
    ("$or, 2%", {"$or": [{"cost": {"$gte": 990}}, {"action.name": "send", "cost": {"$lt": 10}}]}),
]


def items(n: int) -> list[MemoryItem]:
    return [
        MemoryItem(
            step=i,
            agent="host" if i % 2 else "app",
            thought=" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(8)) + f" w{i % 97}",
            action={"name": WORDS[i % len(WORDS)]},
            cost=i % 1000,
        )
        for i in range(n)
    ]


def timed(call: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median and spread (max - min) in ms."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, (max(times) - min(times)) * 1000


def report(name: str, search: Callable[[dict[str, Any] | None], object], repeats: int) -> None:
    search(None)  # warm
    base, spread = timed(lambda: search(None), repeats)
    print(f"{name}: unfiltered {base:.1f} ms (spread {spread:.1f})")
    for label, where in FILTERS:
        median, spread = timed(lambda where=where: search(where), repeats)
        print(f"  {label:>10}: {median:7.1f} ms (spread {spread:.1f}), {median / base:4.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--postgres", default=os.environ.get("KVMEMORY_BENCH_POSTGRES_URL"))
    args = parser.parse_args()
    session = items(args.items)
    memory = Memory(session)
    report("Memory (RAM)", lambda where: memory.search(QUERY, 5, where=where), args.repeats)
    with tempfile.TemporaryDirectory() as folder:
        urls = [f"sqlite://{folder}/bench.db", f"jsonl://{folder}/logs"]
        with contextlib.ExitStack() as stack:
            if args.postgres:
                urls.append(stack.enter_context(postgres_schema(args.postgres)))
            for url in urls:
                with open_store(url) as store:
                    store.append("s", session)
                    report(
                        url.split(":", 1)[0],
                        lambda where, store=store: store.search("s", QUERY, 5, where=where),
                        args.repeats,
                    )


if __name__ == "__main__":
    main()
