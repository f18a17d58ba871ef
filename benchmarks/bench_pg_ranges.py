"""What a range filter costs a PostgreSQL search: wall, this process's CPU and the server's, against the query unfiltered.

One session of ``--items`` UFO-shaped steps (``bench_search_costs.steps``:
each step's ``weight`` a uniform draw in [0, 1)) is written once to a schema
kept by ``--schema`` (reused by later runs; one schema for each version of
the code compared, since a newer one migrates the tables: drop them when
done), embedded with ``HashingEmbedder``; then each mode
(keyword, semantic, hybrid) is queried unfiltered and with each range of
:data:`RANGES` in turn, query by query, ``--runs`` rounds. Each cell is the
median over the rounds, with their spread, of: wall ms (the median query's
best of ``--repeat`` calls), this process's CPU ms and the
server's CPU ms (every process of the server whose data folder ``--pgdata``
names, from ``/proc``: the server must run on this machine), both the mean
over every call of the round, and ``cost/all``:
the filtered query's process CPU + server CPU over the unfiltered one's, the
cost of the query counting the server's work, which the wall time hides on
a loaded machine.

Run: ``PYTHONPATH=. python benchmarks/bench_pg_ranges.py --postgres URL --pgdata DIR
[--items 10000] [--runs 3] [--schema ranges_10000] [--modes keyword,semantic,hybrid]``
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pg_writes import server_cpu
from bench_search_costs import QUERIES, load, steps

from agents.memory import MemoryItem
from agents.memory.search import HashingEmbedder
from agents.memory.stores import PostgresStore

RANGES: dict[str, Any] = {
    "all": None,
    "range-1%": {"weight": {"$gte": 0.25, "$lt": 0.26}},
    "range-0.1%": {"weight": {"$gte": 0.25, "$lt": 0.251}},
    "gt-none": {"weight": {"$gt": 1.5}},
}
"""The filters: none, a range keeping 1% and 0.1% of the steps, one keeping none."""


def best(call: Callable[[], object], repeat: int, pgdata: str) -> tuple[float, float, float]:
    """Return the best wall, and the mean process CPU and server CPU, of ``repeat`` calls, in ms.

    The server's CPU is counted in clock ticks (10 ms): a mean over many
    calls, never the best of a few (which reads 0 for a short query).
    """
    walls, cpus, servers = [], [], []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        server = server_cpu(pgdata) or 0.0
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        servers.append((server_cpu(pgdata) or 0.0) - server)
        gc.enable()
    return 1000 * min(walls), 1000 * statistics.mean(cpus), 1000 * statistics.mean(servers)


def schema_url(base: str, schema: str) -> str:
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}"


def ensure_session(base: str, schema: str, n: int) -> str:
    """Return the URL of ``schema``, writing and embedding the session ``s`` of ``n`` steps there if it is not."""
    import psycopg

    with psycopg.connect(base, autocommit=True) as con:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    url = schema_url(base, schema)
    with PostgresStore(url) as store:
        if store.count("s") < n:
            store.clear("s")
            rows = steps(n)
            for at in range(0, n, 5000):
                store.append("s", [MemoryItem(**row) for row in rows[at : at + 5000]])
            store.index_embeddings("s", HashingEmbedder())
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("VACUUM ANALYZE")
    return url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--postgres", required=True)
    parser.add_argument("--pgdata", required=True)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--schema", default=None)
    parser.add_argument("--modes", default="keyword,semantic,hybrid")
    args = parser.parse_args()
    url = ensure_session(args.postgres, args.schema or f"ranges_{args.items}", args.items)
    embedder = HashingEmbedder()
    modes = args.modes.split(",")
    figures: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    with PostgresStore(url) as store:
        for mode in modes:  # warm: the kept vectors read and compacted
            for _ in range(40):
                store.search("s", QUERIES[0], 5, mode=mode, embedder=embedder)
        for _ in range(args.runs):
            for mode in modes:
                per: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in RANGES}
                for query in QUERIES:
                    for kind, where in RANGES.items():
                        per[kind].append(
                            best(
                                lambda q=query, m=mode, w=where: store.search(
                                    "s", q, 5, mode=m, where=w, embedder=embedder
                                ),
                                args.repeat,
                                args.pgdata,
                            )
                        )
                for kind, cells in per.items():
                    # Wall: the median query's best; CPU: the mean over every call.
                    figures.setdefault((mode, kind), []).append(
                        (
                            statistics.median(c[0] for c in cells),
                            statistics.mean(c[1] for c in cells),
                            statistics.mean(c[2] for c in cells),
                        )
                    )
    print(
        f"\nkvmemory range filters on PostgreSQL: {args.items} steps, {args.runs} runs (load {load()})"
    )
    print(f"{'':22} {'wall ms':>14} {'cpu ms':>14} {'server ms':>14} {'cost/all':>14}")
    for (mode, kind), runs in figures.items():
        base = figures[(mode, "all")]
        ratios = [(r[1] + r[2]) / (b[1] + b[2]) for r, b in zip(runs, base, strict=True)]
        cells = [
            f"{statistics.median(v):8.2f} ({max(v) - min(v):.2f})"
            for v in ([r[0] for r in runs], [r[1] for r in runs], [r[2] for r in runs], ratios)
        ]
        print(f"{mode + ' ' + kind:22} " + " ".join(f"{c:>14}" for c in cells))


if __name__ == "__main__":
    main()
