"""A study, not a feature: PostgreSQL keyword ranking from per-term posting blocks, against the store's.

The store ranks a session by one statement over every row holding a query
word (``agents.memory.stores._postgres.keyword``): at 100,000 short steps a
word like "the" is in every row, so each query reads ~20,000 heap pages and
decompresses each row's JSONB counts. This study builds, beside the store's
tables, what a schema could keep instead: one row per (session, term) whose
``bytea`` holds the term's postings, each ``(seq, count, row length)`` as
three big-endian int32 (``STORAGE EXTERNAL``: no compression), then ranks
the five ``bench_search_costs`` queries from the blocks of the query's terms
alone: numpy sums BM25+ per seq, the best ``k`` and the spare rows that tie
to rounding are scored again with ``bm25_score`` (the scores of
``Memory.search``, to the bit), and the hits and scores are checked equal to
``Store.search``'s. Printed, each the median of ``--rounds`` interleaved
rounds with its spread: ``Store.search``, the blocks with numpy, the blocks
summed in pure Python (numpy is no runtime dependency); then what the blocks
would cost a write (one block row per term of the rows written, as an insert
trigger would add them: for 1,000 rows and for one), the build of a whole
session (a migration's backfill), and their size.

Nothing here is in the library: it measures whether the design pays before
anyone builds its write path (appends, updates, deletes, merging the small
blocks one-step appends leave, the migration).

Run: ``python benchmarks/bench_pg_postings.py [--items 100000] [--rounds 5] [--postgres URL]``
(no URL: a throwaway server). The session is ``bench_search_costs``'s ``first-N``, written
once and kept in the database given: a URL whose search_path is ``kvmemory_bench_first``
reuses the one ``bench_search_costs.py --sections first`` wrote.
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import time
from array import array
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import psycopg
from bench_search_costs import QUERIES, first_store, load
from bench_stores import postgres_url

from agents.memory._text import BM25_B, BM25_FLOOR, BM25_K1, bm25_average_length
from agents.memory.search import Tokenizer
from agents.memory.stores import PostgresStore
from agents.memory.stores._core.terms import bm25_score, query_weights

_SPARE = 64  # rows past the k-th scored again, as the store's ranking keeps
_POSTING = np.dtype([("seq", ">i4"), ("tf", ">i4"), ("len", ">i4")])
_BLOCKS_OF = """
SELECT i.session_id, e.key, min(i.seq), count(*), string_agg(int4send(i.seq::int)
    || int4send(e.value::text::int) || int4send(i.n_terms), ''::bytea ORDER BY i.seq)
FROM kvmemory_items AS i CROSS JOIN LATERAL jsonb_each(i.tf) AS e
WHERE i.session_id = %(sid)s AND i.seq BETWEEN %(low)s AND %(high)s GROUP BY 1, 2
"""
_READ = """
SELECT s.n_items, s.n_terms, p.term, p.n, p.data FROM kvmemory_sessions AS s
LEFT JOIN bench_postings AS p ON p.session_id = s.session_id AND p.term = ANY(%(names)s)
WHERE s.session_id = %(sid)s AND NOT s.deleted
"""


def make_table(con: psycopg.Connection[Any], name: str) -> None:
    """Create (again) the study's table of posting blocks ``name``."""
    con.execute(f"DROP TABLE IF EXISTS {name}")
    con.execute(
        f"CREATE TABLE {name} (session_id text NOT NULL, term text NOT NULL,"
        " first_seq bigint NOT NULL, n integer NOT NULL, data bytea NOT NULL,"
        " PRIMARY KEY (session_id, term, first_seq))"
    )
    con.execute(f"ALTER TABLE {name} ALTER COLUMN data SET STORAGE EXTERNAL")


def timed(call: Callable[[], object]) -> tuple[float, Any]:
    """Return how long one call took, in milliseconds, and what it returned."""
    start = time.perf_counter()
    out = call()
    return 1000 * (time.perf_counter() - start), out


def blocks(con: psycopg.Connection[Any], sid: str, terms: Sequence[str]) -> tuple[Any, ...]:
    """Return the session's counts, the query's weights and the posting blocks of its terms."""
    rows = con.execute(_READ, {"sid": sid, "names": list(set(terms))}, binary=True).fetchall()
    n_items, total = int(rows[0][0]), int(rows[0][1])
    held = [row for row in rows if row[2] is not None]
    weighted = query_weights(terms, {row[2]: int(row[3]) for row in held}, n_items)
    summed: dict[str, float] = {}
    for term, weight in weighted:
        summed[term] = summed.get(term, 0.0) + weight
    return held, weighted, summed, bm25_average_length(total, n_items)


def rank_numpy(con: psycopg.Connection[Any], sid: str, terms: Sequence[str], k: int) -> Any:
    """Return the ``k`` best ``(score, seq)`` from the blocks: numpy sums, the top scored again exactly."""
    held, weighted, summed, average = blocks(con, sid, terms)
    arrays = {row[2]: np.frombuffer(row[4], dtype=_POSTING) for row in held}
    if not arrays:
        return []
    score = np.zeros(max(int(a["seq"].max()) for a in arrays.values()) + 1)
    slope = BM25_K1 * BM25_B / average
    for term, a in arrays.items():
        tf = a["tf"].astype(np.float64)
        score[a["seq"]] += summed[term] * (
            tf / (tf + BM25_K1 * (1 - BM25_B) + slope * a["len"]) + BM25_FLOOR
        )
    found = np.flatnonzero(score)
    m = min(len(found), k + _SPARE)
    best = found[np.argpartition(-score[found], m - 1)[:m]]
    near = found[score[found] >= score[best].min() / (1 + 1e-9) ** 2]
    counts: dict[int, dict[str, int]] = {int(seq): {} for seq in near}
    length: dict[int, int] = {}
    for term, a in arrays.items():
        for seq, tf, n in a[np.isin(a["seq"], near)].tolist():
            counts[seq][term] = tf
            length[seq] = n
    scored = [(bm25_score(c, length[seq], weighted, average), seq) for seq, c in counts.items()]
    return heapq.nsmallest(k, scored, key=lambda hit: (-hit[0], hit[1]))


def sum_python(con: psycopg.Connection[Any], sid: str, terms: Sequence[str], k: int) -> Any:
    """Return the ``k + spare`` best rough ``(seq, score)`` from the blocks summed in pure Python."""
    held, _, summed, average = blocks(con, sid, terms)
    flat, slope = BM25_K1 * (1 - BM25_B), BM25_K1 * BM25_B / average
    score: dict[int, float] = {}
    for _, _, term, _, data in held:
        a = array("i")
        a.frombytes(data)
        a.byteswap()
        weight = summed[term]
        for seq, tf, n in zip(a[0::3], a[1::3], a[2::3], strict=True):
            score[seq] = score.get(seq, 0.0) + weight * (tf / (tf + flat + slope * n) + BM25_FLOOR)
    return heapq.nlargest(k + _SPARE, score.items(), key=lambda hit: (hit[1], -hit[0]))


def run(url: str, n: int, rounds: int) -> None:
    """Take the first-query session of ``n`` steps (written once), build its blocks, check and time the rankings."""
    sid = first_store("postgres", url, n)
    store = PostgresStore(url, pgvector=False)
    con = psycopg.connect(url, autocommit=True)
    con.execute("SET jit = off")
    con.execute("SET work_mem = '64MB'")
    print(f"\n{n} steps, load before {load()}")
    make_table(con, "bench_postings")
    build, _ = timed(
        lambda: con.execute(
            f"INSERT INTO bench_postings {_BLOCKS_OF}", {"sid": sid, "low": 0, "high": n}
        )
    )
    con.execute("VACUUM ANALYZE bench_postings")
    size = con.execute(
        "SELECT count(*), pg_size_pretty(pg_total_relation_size('bench_postings')),"
        " pg_size_pretty(pg_total_relation_size('kvmemory_items')) FROM bench_postings"
    ).fetchone()
    print(
        f"blocks of the whole session built in {build:.0f} ms: {size[0]} rows, {size[1]} (items: {size[2]})"
    )
    make_table(con, "bench_postings_written")
    writes: dict[str, list[float]] = {}
    for r in range(rounds):
        for label, low, high in (
            ("1,000 rows", 1000 * r, 1000 * r + 999),
            ("1 row", n - 1 - r, n - 1 - r),
        ):
            con.execute("TRUNCATE bench_postings_written")
            ms, _ = timed(
                lambda low=low, high=high: con.execute(
                    f"INSERT INTO bench_postings_written {_BLOCKS_OF}",
                    {"sid": sid, "low": low, "high": high},
                )
            )
            writes.setdefault(label, []).append(ms)
    con.execute("DROP TABLE bench_postings_written")
    for label, values in writes.items():
        print(
            f"blocks of {label} written: {statistics.median(values):.1f} ms (spread {max(values) - min(values):.1f})"
        )
    tokenize = Tokenizer()
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for q in QUERIES:
            terms = tokenize(q)
            ms, hits = timed(lambda q=q: store.search(sid, q, 5, mode="keyword"))
            times.setdefault((q, "Store.search"), []).append(ms)
            ms, mine = timed(lambda terms=terms: rank_numpy(con, sid, terms, 5))
            times.setdefault((q, "blocks, numpy"), []).append(ms)
            if [(hit.score, hit.seq) for hit in hits] != mine:
                msg = f"{q!r}: the blocks rank {mine}, Store.search {[(h.score, h.seq) for h in hits]}"
                raise AssertionError(msg)
            ms, _ = timed(lambda terms=terms: sum_python(con, sid, terms, 5))
            times.setdefault((q, "blocks, pure Python"), []).append(ms)
    print(f"hits and scores equal to Store.search's on every query; load after {load()}")
    sides = ("Store.search", "blocks, numpy", "blocks, pure Python")
    print(f"median (spread) of {rounds} rounds, ms\n| query | {' | '.join(sides)} |")
    print("|---" * (len(sides) + 1) + "|")
    for q in QUERIES:
        cells = " | ".join(
            f"{statistics.median(v):.0f} ({max(v) - min(v):.0f})"
            for v in (times[(q, side)] for side in sides)
        )
        print(f"| {q} | {cells} |")
    con.execute("DROP TABLE bench_postings")
    con.close()
    store.close()


def main() -> None:
    """Parse the arguments and run the study on each size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", help="a scratch database's URL (the session first-N is kept)")
    args = parser.parse_args()
    with postgres_url(args.postgres) as url:
        if url is not None:  # no server to be had: postgres_url said why
            run(url, args.items, args.rounds)


if __name__ == "__main__":
    main()
