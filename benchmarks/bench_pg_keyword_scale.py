"""PostgreSQL keyword ranking at 10,000 and 100,000 short steps: where a query's time goes.

A session of UFO-shaped short steps (``bench_search_costs.steps``, the
corpus of the first-query figures) is written to a PostgreSQL store; each of
the five ``bench_search_costs`` queries is then timed three ways, interleaved
in rounds: ``store.search(mode="keyword")`` (its pooled connections run with
JIT off, its ranking with sequential scans off), and the store's scoring statement run directly on a connection
with JIT on (the server's default), with JIT off, and with JIT and
sequential scans off (``enable_seqscan = off``: the GIN index's bitmap scan
never reads a row's out-of-line ``terms``, which a sequential scan's filter
reads for every row). The table gives the median of the rounds and the
JIT on / off ratio. ``--explain`` prints
``EXPLAIN (ANALYZE, BUFFERS)`` of the first query on each connection.

Run: ``python benchmarks/bench_pg_keyword_scale.py [--items 10000,100000] [--rounds 3]
[--postgres URL] [--explain]`` (no URL: a throwaway server, as the tests start one).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
from bench_search_costs import QUERIES, steps
from bench_stores import postgres_url

from agents.memory import MemoryItem
from agents.memory.search import Tokenizer
from agents.memory.stores import PostgresStore
from agents.memory.stores._postgres import keyword


def load() -> str:
    """Return the load average (1, 5, 15 minutes)."""
    with open("/proc/loadavg", encoding="utf-8") as f:
        return " ".join(f.read().split()[:3])


def scoring(sid: str, query: str) -> tuple[str, dict[str, Any]]:
    """Return the store's scoring statement for ``query`` (k=5) and its parameters."""
    terms = Tokenizer()(query)
    weights = Counter(terms)
    names = list(weights)
    params = keyword.PostgresKeywordIndex._params(sid, names, 5)
    params.update((f"t{j}", term) for j, term in enumerate(names))
    params.update((f"w{j}", float(weights[term])) for j, term in enumerate(names))
    return keyword._score_sql(len(names)), params


def ms(call: Callable[[], object]) -> float:
    """Return how long one call took, in milliseconds."""
    start = time.perf_counter()
    call()
    return 1000 * (time.perf_counter() - start)


def run(url: str, n: int, rounds: int, explain: bool) -> None:
    """Write a session of ``n`` steps and time the queries on it."""
    sid = f"scale-{n}"
    store = PostgresStore(url, pgvector=False)
    if store.count(sid) != n:
        store.delete_session(sid)
        rows = steps(n)
        for at in range(0, n, 10_000):
            store.append(sid, [MemoryItem(**row) for row in rows[at : at + 10_000]])
    jit_on = psycopg.connect(url, autocommit=True)
    jit_on.execute("SET jit = on")
    jit_off = psycopg.connect(url, autocommit=True)
    jit_off.execute("SET jit = off")
    no_seq = psycopg.connect(url, autocommit=True)
    no_seq.execute("SET jit = off")
    no_seq.execute("SET enable_seqscan = off")
    jit_on.execute("VACUUM ANALYZE kvmemory_items")
    times: dict[tuple[str, str], list[float]] = {}
    print(f"\n{n} steps, load before {load()}")
    for _ in range(rounds):
        for q in QUERIES:
            sql, params = scoring(sid, q)
            sides: dict[str, Callable[[], object]] = {
                "store.search": lambda q=q: store.search(sid, q, 5, mode="keyword"),
                "SQL jit on": lambda sql=sql, params=params: jit_on.execute(sql, params).fetchall(),
                "SQL jit off": lambda sql=sql, params=params: jit_off.execute(
                    sql, params
                ).fetchall(),
                "SQL no seq scan": lambda sql=sql, params=params: no_seq.execute(
                    sql, params
                ).fetchall(),
            }
            for side, call in sides.items():
                times.setdefault((q, side), []).append(ms(call))
    print(f"load after {load()}; median of {rounds} rounds, ms")
    sides = ("store.search", "SQL jit on", "SQL jit off", "SQL no seq scan")
    print(f"| query | {' | '.join(sides)} | on / off |")
    print("|---" * (len(sides) + 2) + "|")
    for q in QUERIES:
        med = [statistics.median(times[(q, side)]) for side in sides]
        cells = " | ".join(f"{value:.0f}" for value in med)
        print(f"| {q} | {cells} | {med[1] / med[2]:.2f}x |")
    if explain:
        sql, params = scoring(sid, QUERIES[0])
        for name, con in (("jit on", jit_on), ("jit off", jit_off), ("no seq scan", no_seq)):
            print(f"\nEXPLAIN (ANALYZE, BUFFERS), {name}: {QUERIES[0]!r}")
            for (line,) in con.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).fetchall():
                if "Sort Key" not in line:
                    print(line)
    jit_on.close()
    jit_off.close()
    no_seq.close()
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--postgres", help="a scratch database's URL (sessions scale-N are written)"
    )
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()
    with postgres_url(args.postgres) as url:
        if url is None:
            return
        for n in (int(part) for part in args.items.split(",")):
            run(url, n, args.rounds, args.explain)


if __name__ == "__main__":
    main()
