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

``--coded-hybrid DB`` times instead a hybrid query (``EmbedParts()``,
``HashingEmbedder(256)``) over a SQLite session (or the store a URL names,
``postgresql://...``) of N UFO-shaped steps
(``bench_search_costs.steps``, written once to DB and reused) whose part
vectors are kept coded (the handle's budget set below them as float32),
unfiltered and with filters from 0.1% to 99% of the steps passing (ranges
of ``weight`` passing 1% to 80%): wall
and process CPU, median [range] of --repeats warm queries, the load
average beside. Run it with each tree's ``agents`` on PYTHONPATH, alternating,
to compare them. With ``--paired``, each of --repeats rounds runs the
unfiltered query and every filter in turn, and each filter's wall is also
printed as the median [range] of its ratio to the same round's unfiltered
wall (a loaded machine moves both alike); ``--pgdata DIR`` (the server's
data folder, on this machine) adds the server's CPU, a mean per query.

``--semantic-whole DB`` times the same way a semantic query over whole-item
vectors (``EmbedParts.WHOLE``, ``HashingEmbedder(256)``: no kept table, the
store's filtered walk) with the same filters, on the same session.
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


CODED_FILTERS: list[tuple[str, dict[str, Any] | None]] = [
    ("none", None),
    ("eq 1%", {"agent": "reviewer"}),
    ("eq 0.1%", {"tier": "gold"}),
    ("range 1%", {"weight": {"$gte": 0.25, "$lt": 0.26}}),
    ("range 5%", {"weight": {"$lt": 0.05}}),
    ("range 10%", {"weight": {"$lt": 0.1}}),
    ("range 20%", {"weight": {"$lt": 0.2}}),
    ("range 30%", {"weight": {"$lt": 0.3}}),
    ("range 50%", {"weight": {"$lt": 0.5}}),
    ("range 80%", {"weight": {"$lt": 0.8}}),
    ("eq 99%", {"agent": "host"}),
]


def coded_hybrid(
    path: str, n: int, repeats: int, *, paired: bool = False, pgdata: str | None = None
) -> None:
    """Time Store.search hybrid over a coded session, unfiltered and with CODED_FILTERS (see the module's docstring)."""
    from bench_search_costs import steps

    from agents.memory.search import EmbedParts, HashingEmbedder
    from agents.memory.stores._search.compact import CompactVectors

    embedder = HashingEmbedder(256)
    rows = steps(n)
    url = path if "://" in path else f"sqlite://{path}"
    with open_store(url) as store:
        if store.count("s") != n:
            store.delete_session("s")
            store.append("s", [MemoryItem(**row) for row in rows])
            store.index_embeddings("s", embedder, parts=EmbedParts())
        texts = {
            text for row in rows for text in EmbedParts().texts(MemoryItem(**row).to_dict(), None)
        }
        store._vectors._cache._budget = 2 * embedder.dimension * len(texts)  # coded, not float32
        search = searcher(store, embedder, "hybrid", EmbedParts())
        for _ in range(3):  # read page by page, then coded, then from the coded table
            search(None)
        kept = store._vectors._kept_table("s", embedder, None, EmbedParts())
        print(f"{n:,} steps, kept as {type(kept).__name__}", flush=True)
        assert isinstance(kept, CompactVectors)
        if paired:
            _paired(search, repeats, pgdata)
            return
        timed_filters(search, repeats)


def searcher(
    store: Any, embedder: Any, mode: str, parts: Any
) -> Callable[[dict[str, Any] | None], list[int]]:
    """Return ``search(where)``: the seqs of the best 5 of session ``s`` for the coded cases' query."""

    def search(where: dict[str, Any] | None) -> list[int]:
        hits = store.search(
            "s",
            "press OK to save the file",
            5,
            mode=mode,
            where=where,
            embedder=embedder,
            parts=parts,
        )
        return [hit.seq for hit in hits]

    return search


def timed_filters(search: Callable[[dict[str, Any] | None], object], repeats: int) -> None:
    """Print wall and process CPU of ``search`` with each of CODED_FILTERS: median [range] of ``repeats``, the load average beside."""
    for label, where in CODED_FILTERS:
        walls, cpus = [], []
        for _ in range(repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            search(where)
            walls.append(1000 * (time.perf_counter() - wall))
            cpus.append(1000 * (time.process_time() - cpu))
        with open("/proc/loadavg") as file:
            load = " ".join(file.read().split()[:3])
        cells = [f"{statistics.median(v):7.1f} [{min(v):.0f}-{max(v):.0f}]" for v in (walls, cpus)]
        print(f"  {label:>10}: wall {cells[0]} ms, CPU {cells[1]} ms, load {load}", flush=True)


def semantic_whole(path: str, n: int, repeats: int) -> None:
    """Time Store.search semantic over whole-item vectors, unfiltered and with CODED_FILTERS (see the module's docstring)."""
    from bench_search_costs import steps

    from agents.memory.search import EmbedParts, HashingEmbedder

    embedder = HashingEmbedder(256)
    url = path if "://" in path else f"sqlite://{path}"
    with open_store(url) as store:
        if store.count("s") != n:
            store.delete_session("s")
            store.append("s", [MemoryItem(**row) for row in steps(n)])
            store.index_embeddings("s", embedder, parts=EmbedParts.WHOLE)
        search = searcher(store, embedder, "semantic", EmbedParts.WHOLE)
        search(None)
        print(f"{n:,} steps, semantic over whole-item vectors", flush=True)
        timed_filters(search, repeats)


def _paired(
    search: Callable[[dict[str, Any] | None], object], rounds: int, pgdata: str | None
) -> None:
    """Run the unfiltered query and each of CODED_FILTERS in turn, ``rounds`` times; print each one's wall, its ratio to the round's unfiltered wall, and the CPU of this process and of the server."""
    from bench_pg_writes import server_cpu

    walls: dict[str, list[float]] = {label: [] for label, _ in CODED_FILTERS}
    cpus: dict[str, list[float]] = {label: [] for label, _ in CODED_FILTERS}
    servers: dict[str, list[float]] = {label: [] for label, _ in CODED_FILTERS}
    loads = []
    for _ in range(rounds):
        for label, where in CODED_FILTERS:
            server = server_cpu(pgdata) or 0.0
            wall, cpu = time.perf_counter(), time.process_time()
            search(where)
            walls[label].append(1000 * (time.perf_counter() - wall))
            cpus[label].append(1000 * (time.process_time() - cpu))
            servers[label].append(1000 * ((server_cpu(pgdata) or 0.0) - server))
        with open("/proc/loadavg") as file:
            loads.append(float(file.read().split()[0]))
    base = walls["none"]
    for label, _ in CODED_FILTERS:
        ratios = [wall / unfiltered for wall, unfiltered in zip(walls[label], base, strict=True)]
        wall, cpu = walls[label], cpus[label]
        print(
            f"  {label:>10}: wall {statistics.median(wall):6.1f} [{min(wall):.0f}-{max(wall):.0f}]"
            f" ms, {statistics.median(ratios):4.2f}x [{min(ratios):.2f}-{max(ratios):.2f}],"
            f" CPU {statistics.median(cpu):5.1f} ms, server CPU"
            f" {statistics.mean(servers[label]):5.1f} ms (mean)",
            flush=True,
        )
    print(f"  load {min(loads):.2f}-{max(loads):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--postgres", default=os.environ.get("KVMEMORY_BENCH_POSTGRES_URL"))
    parser.add_argument("--coded-hybrid", default=None, metavar="DB")
    parser.add_argument("--semantic-whole", default=None, metavar="DB")
    parser.add_argument("--paired", action="store_true")
    parser.add_argument("--pgdata", default=None, metavar="DIR")
    args = parser.parse_args()
    if args.coded_hybrid:
        coded_hybrid(
            args.coded_hybrid, args.items, args.repeats, paired=args.paired, pgdata=args.pgdata
        )
        return
    if args.semantic_whole:
        semantic_whole(args.semantic_whole, args.items, args.repeats)
        return
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
