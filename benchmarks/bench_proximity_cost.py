"""What the hybrid blend's proximity evidence costs a query, per store: the same hybrid search with it and without, in one process.

The evidence (``agents.memory._text.query_together``: does one of the
query's best 100 keyword hits hold 0.9 of its IDF weight within 5 terms of
one field?) is switched off by having every store and ``Memory.search``
answer "together" without looking, which is the blend as it was before the
evidence. For each held-out family (``benchmarks/corpora_heldout.py``:
``--items`` items, ``--facts`` planted facts asked three ways), each store
gets the family once; every query runs once each way untimed, then
``--rounds`` rounds time all queries with the evidence on and off (the
order alternating). A row gives the median milliseconds a query over the
rounds each way, the rounds, and their ratio, with the load beside.

Usage::

    python benchmarks/bench_proximity_cost.py [--stores ram,memory,sqlite,jsonl,postgres]
        [--postgres URL] [--families crowded-steps,pages] [--items 3000] [--facts 40]
        [--rounds 5] [--hashing]

``ram`` is ``Memory.search``; PostgreSQL runs only with ``--postgres`` (or
``KVMEMORY_BENCH_POSTGRES_URL``), in a schema of its own, dropped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import corpora_heldout as heldout

import agents.memory.stores._search.keyword as store_keyword
from agents.memory import Memory, MemoryItem
from agents.memory.search._index import SearchIndex
from agents.memory.stores import open_store

_SCHEMA = "kvmemory_bench_proximity"


def load() -> str:
    """Return the load average as ``uptime`` prints it."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f}, {five:.1f}, {fifteen:.1f}"


@contextlib.contextmanager
def evidence(on: bool) -> Iterator[None]:
    """Leave the proximity evidence on, or switch it off (every query's words count as together) inside the block."""
    if on:
        yield
        return
    stands_out, together = store_keyword.stands_out, SearchIndex.together
    store_keyword.stands_out = lambda *_: False  # type: ignore[assignment] # the blend before
    SearchIndex.together = lambda *_: True  # type: ignore[method-assign] # the blend before
    try:
        yield
    finally:
        store_keyword.stands_out, SearchIndex.together = stands_out, together


def _searcher(
    kind: str, rows: list[dict[str, Any]], embedder: Any, folder: str, postgres: str | None
) -> tuple[Callable[[str], object], Any]:
    """Return a hybrid search over ``rows`` in a fresh store of ``kind`` (``ram``: ``Memory.search``), and the store to close."""
    if kind == "ram":
        memory = Memory([MemoryItem(**row) for row in rows])
        return lambda query: memory.search(query, 5, mode="hybrid", embedder=embedder), None
    urls = {
        "memory": f"memory://bench-proximity-{os.getpid()}-{len(os.listdir(folder))}",
        "sqlite": f"sqlite://{folder}/{len(os.listdir(folder))}.db",
        "jsonl": f"jsonl://{folder}/{len(os.listdir(folder))}",
    }
    if kind == "postgres":
        import psycopg

        with psycopg.connect(str(postgres), autocommit=True) as con:
            con.execute(f"DROP SCHEMA IF EXISTS {_SCHEMA} CASCADE")
            con.execute(f"CREATE SCHEMA {_SCHEMA}")
        sep = "&" if "?" in str(postgres) else "?"
        urls["postgres"] = f"{postgres}{sep}options=-csearch_path%3D{_SCHEMA}"
    store = open_store(urls[kind])
    store.append("s", [MemoryItem(**row) for row in rows])
    store.index_embeddings("s", embedder)
    return lambda query: store.search("s", query, 5, mode="hybrid", embedder=embedder), store


def main() -> None:
    """Parse the options; time each store's hybrid queries with the evidence on and off."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stores", default="ram,memory,sqlite,jsonl,postgres")
    parser.add_argument("--postgres", default=os.environ.get("KVMEMORY_BENCH_POSTGRES_URL"))
    parser.add_argument("--families", default="crowded-steps,pages")
    parser.add_argument("--items", type=int, default=3000)
    parser.add_argument("--facts", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hashing", action="store_true")
    args = parser.parse_args()
    from agents.memory.search import HashingEmbedder, WordLlamaEmbedder

    embedder = HashingEmbedder(256) if args.hashing else WordLlamaEmbedder()
    stores = [s for s in args.stores.split(",") if s != "postgres" or args.postgres]
    print(f"== hybrid search, proximity evidence on / off, {args.items} items; {load()}")
    with tempfile.TemporaryDirectory() as folder:
        for family in args.families.split(","):
            made = heldout.make_family(family, args.items, args.facts, 1)
            queries = [query for kind in heldout.KINDS for query, _ in made.queries(kind)]
            for kind in stores:
                search, store = _searcher(kind, made.items, embedder, folder, args.postgres)
                for on in (True, False):  # untimed: caches fill
                    with evidence(on):
                        for query in queries:
                            search(query)
                took: dict[bool, list[float]] = {True: [], False: []}
                for round_ in range(args.rounds):
                    for on in (True, False) if round_ % 2 == 0 else (False, True):
                        with evidence(on):
                            start = time.perf_counter()
                            for query in queries:
                                search(query)
                            took[on].append(1000 * (time.perf_counter() - start) / len(queries))
                if store is not None:
                    store.close()
                on, off = (statistics.median(took[way]) for way in (True, False))
                rounds = {way: " ".join(f"{t:.1f}" for t in took[way]) for way in took}
                print(
                    f"{kind:<9}{family:<15}on {on:6.2f} ms [{rounds[True]}]  off {off:6.2f} ms"
                    f" [{rounds[False]}]  {on / off:.2f}x  {load()}",
                    flush=True,
                )
    if args.postgres and "postgres" in stores:
        import psycopg

        with psycopg.connect(args.postgres, autocommit=True) as con:
            con.execute(f"DROP SCHEMA IF EXISTS {_SCHEMA} CASCADE")


if __name__ == "__main__":
    main()
