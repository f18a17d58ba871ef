"""Write-path benchmark: the CPU of appends to an SQLite store file against raw sqlite3 and LangGraph.

Two ratios, each measured ``--runs`` times in one process (median and spread
printed with the load average beside them; the machine may be loaded):

* one step per commit: ``Store.append(session, [item])`` for each of
  ``--single`` UFO-shaped items (nested dicts and lists, a long text), against
  raw ``sqlite3`` running ``BEGIN IMMEDIATE; INSERT; COMMIT`` of the same
  encoded rows on a table with the same columns and indexes, WAL mode and the
  same ``synchronous`` setting. The raw side gets the bytes already encoded
  and keeps no keyword index; kvmemory encodes, takes the search terms and
  keeps its index current, which is what a user pays.
* batched appends: ``Store.append`` of ``--batched`` items in batches of
  1,000 against LangGraph's ``SqliteStore.batch`` of the same values as
  ``PutOp``s (skipped when LangGraph is not installed).

Both are CPU time of this process (``time.process_time``), so other
processes on the machine weigh less than on wall time.

Run: .venv/bin/python benchmarks/bench_write_path.py [--runs 3] [--single 2000]
     [--batched 10000] [--synchronous normal] [--keyword-fold batched|lazy]
     [--profile]
``--profile`` prints a cProfile of the single appends instead.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sqlite3
import tempfile
import time
from collections.abc import Callable

from bench_stores import RAW_SQLITE_SCHEMA, encoded, ufo_items

from agents.memory import MemoryItem
from agents.memory.stores import open_store

BATCH = 1000


def cpu(fn: Callable[[], object]) -> float:
    """Return the CPU time of this process for one call of ``fn``."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def store_url(tmp: str, synchronous: str, keyword_index: str) -> str:
    """Return the URL of a fresh store file in ``tmp`` with the settings asked for."""
    url = f"sqlite://{tmp}/kv.db?synchronous={synchronous}"
    return url if keyword_index == "batched" else f"{url}&keyword_fold={keyword_index}"


def raw_connection(path: str, synchronous: str) -> sqlite3.Connection:
    """Open a raw connection in WAL mode with ``synchronous`` and the store's item table."""
    con = sqlite3.connect(path, isolation_level=None, timeout=30)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(f"PRAGMA synchronous={synchronous.upper()}")
    for statement in RAW_SQLITE_SCHEMA:
        con.execute(statement)
    return con


def single_ratio(
    items: list[MemoryItem], synchronous: str, keyword_index: str
) -> tuple[float, float]:
    """Return kvmemory's CPU for one append per commit over raw sqlite3's for the same rows, without and with the close."""
    rows = encoded(items)
    with tempfile.TemporaryDirectory() as tmp:
        with open_store(store_url(tmp, synchronous, keyword_index)) as store:
            store.append("warm", items[:1])
            ours = cpu(lambda: [store.append("steps", [item]) for item in items])
            closing = cpu(store.close)  # folds the rows a lazy index left pending
        raw = raw_connection(f"{tmp}/raw.db", synchronous)
        insert = "INSERT INTO items (session_id, step, created, data) VALUES (?, ?, ?, ?)"

        def raw_steps() -> None:
            for step, created, data in rows:
                raw.execute("BEGIN IMMEDIATE")
                raw.execute(insert, ("steps", step, created, data))
                raw.execute("COMMIT")

        theirs = cpu(raw_steps)
        raw.close()
    return ours / theirs, (ours + closing) / theirs


def batch_ratio(
    items: list[MemoryItem], synchronous: str, keyword_index: str
) -> tuple[float, float] | None:
    """Return kvmemory's CPU for batched appends over LangGraph ``SqliteStore.batch``'s (without and with the close), or None without LangGraph."""
    try:
        from langgraph.store.base import PutOp
        from langgraph.store.sqlite import SqliteStore
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        with open_store(store_url(tmp, synchronous, keyword_index)) as store:
            ours = cpu(
                lambda: [
                    store.append("big", items[i : i + BATCH]) for i in range(0, len(items), BATCH)
                ]
            )
            closing = cpu(store.close)
        con = sqlite3.connect(f"{tmp}/lg.db", check_same_thread=False, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute(f"PRAGMA synchronous={synchronous.upper()}")
        lang = SqliteStore(con)
        lang.setup()
        values = [item.to_dict() for item in items]

        def put() -> None:
            for i in range(0, len(values), BATCH):
                lang.batch(
                    [
                        PutOp(("big",), str(i + j), value)
                        for j, value in enumerate(values[i : i + BATCH])
                    ]
                )

        theirs = cpu(put)
        con.close()
    return ours / theirs, (ours + closing) / theirs


def spread(ratios: list[float]) -> str:
    """Return ``median (min-max)`` of ratios."""
    ordered = sorted(ratios)
    return f"{ordered[len(ordered) // 2]:5.2f}x ({ordered[0]:.2f}-{ordered[-1]:.2f})"


def profile(items: list[MemoryItem], synchronous: str, keyword_index: str) -> None:
    """Print where the CPU of one append per commit goes."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        open_store(store_url(tmp, synchronous, keyword_index)) as store,
    ):
        store.append("warm", items[:1])
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        for item in items:
            store.append("steps", [item])
        profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--single", type=int, default=2000)
    parser.add_argument("--batched", type=int, default=10000)
    parser.add_argument("--synchronous", default="normal", choices=["normal", "full", "off"])
    parser.add_argument("--keyword-fold", default="batched", choices=["batched", "lazy"])
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    singles = ufo_items(args.single)
    if args.profile:
        profile(singles, args.synchronous, args.keyword_fold)
        return
    batched = ufo_items(args.batched)
    results: dict[str, list[float]] = {}
    loads: list[str] = []
    for _ in range(args.runs):
        alone, closed = single_ratio(singles, args.synchronous, args.keyword_fold)
        results.setdefault("single append per commit / raw sqlite3 (CPU)", []).append(alone)
        results.setdefault("  single, the store's close included", []).append(closed)
        ratios = batch_ratio(batched, args.synchronous, args.keyword_fold)
        if ratios is not None:
            name = f"append in batches of {BATCH} / LangGraph SqliteStore.batch (CPU)"
            results.setdefault(name, []).append(ratios[0])
            results.setdefault("  batches, the store's close included", []).append(ratios[1])
        loads.append(" ".join(f"{x:.1f}" for x in os.getloadavg()))
    print(
        f"{args.single} single, {args.batched} batched UFO-shaped items; synchronous={args.synchronous}, "
        f"keyword_fold={args.keyword_fold}; {args.runs} runs; load average per run: {' | '.join(loads)}"
    )
    for name, ratios in results.items():
        print(f"{name:<64} {spread(ratios)}")


if __name__ == "__main__":
    main()
