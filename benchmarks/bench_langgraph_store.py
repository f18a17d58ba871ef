"""KVMemoryStore against LangGraph's own SqliteStore: put, get and filtered search on a SQLite file.

Usage: python benchmarks/bench_langgraph_store.py [--items 10000] [--runs 5] [--searches 50]

Both stores write one SQLite file in WAL mode with ``synchronous=NORMAL``
(kvmemory's ``?synchronous=normal``; a ``sqlite3`` connection with the same
pragmas for LangGraph, opened as ``SqliteStore.from_conn_string`` opens it),
the same records (agent memories: nested dicts and lists, a long text) in
the same ten namespaces. Each run times, in one process:

* ``put`` of every record, one call each (CPU time);
* ``get`` of ``--items`` random keys (wall time);
* ``search`` of the ten namespaces' prefix with a filter and no query,
  ``--searches`` times (wall time).

It prints the ratio kvmemory / LangGraph of each run, then the median and
spread over the runs, with the load average beside them.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from typing import Any

from agents.integrations.langgraph import KVMemoryStore

KINDS = ("preference", "fact", "episode", "instruction")


def memories(n: int) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    """Return ``n`` (namespace, key, value) agent memories: nested dicts and lists, a long text."""
    rng = random.Random(7)
    words = ["invoice", "report", "pdf", "export", "user", "prefers", "danish", "terse", "answers"]
    out = []
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(60))
        value = {
            "kind": KINDS[i % 4],
            "active": i % 3 != 0,
            "text": f"Memory {i}: {text}",
            "confidence": round(rng.random(), 3),
            "tags": [rng.choice(words) for _ in range(3)],
            "source": {
                "thread": f"thread-{i % 97}",
                "turn": i,
                "tool_calls": [{"name": "save_memory", "args": {"id": i, "why": text[:80]}}],
            },
        }
        out.append((("users", f"u{i % 10}", "memories"), f"m{i}", value))
    return out


def cpu(fn: Callable[[], object]) -> float:
    """Return the CPU time of one call of ``fn``."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def wall(fn: Callable[[], object]) -> float:
    """Return the wall time of one call of ``fn``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def langgraph_store(path: str) -> Any:
    """Return LangGraph's SqliteStore on ``path``, WAL and synchronous=NORMAL."""
    from langgraph.store.sqlite import SqliteStore

    con = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    store = SqliteStore(con)
    store.setup()
    return store


def one_run(tmp: str, records: list[Any], searches: int) -> dict[str, float]:
    """Time each workload on both stores once; return kvmemory / LangGraph per workload."""
    rng = random.Random(11)
    picks = [rng.choice(records)[:2] for _ in range(len(records))]
    where = {"kind": "preference", "active": True}
    ratios = {}
    with KVMemoryStore(f"sqlite://{tmp}/kv.db?synchronous=normal") as ours:
        theirs = langgraph_store(f"{tmp}/lg.db")
        times = {}
        for name, store in (("kv", ours), ("lg", theirs)):
            times[f"put {name}"] = cpu(lambda s=store: [s.put(ns, k, v) for ns, k, v in records])
            times[f"get {name}"] = wall(lambda s=store: [s.get(ns, k) for ns, k in picks])
            times[f"search {name}"] = wall(
                lambda s=store: [
                    s.search(("users",), filter=where, limit=10) for _ in range(searches)
                ]
            )
        everything = len(records)
        kv_keys = {i.key for i in ours.search(("users",), filter=where, limit=everything)}
        lg_keys = {i.key for i in theirs.search(("users",), filter=where, limit=everything)}
        assert kv_keys == lg_keys, "the two stores found different items"
        theirs.conn.close()
    for work in ("put", "get", "search"):
        ratios[work] = times[f"{work} kv"] / times[f"{work} lg"]
    ratios.update({f"{k} s": v for k, v in times.items()})
    return ratios


def spread(values: list[float]) -> str:
    """Return ``median (min-max)``."""
    ordered = sorted(values)
    return f"{ordered[len(ordered) // 2]:5.2f}x ({ordered[0]:.2f}-{ordered[-1]:.2f})"


def main() -> None:
    """Run the benchmark and print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--searches", type=int, default=50)
    args = parser.parse_args()
    records = memories(args.items)
    print(f"load average {os.getloadavg()}; {args.items} memories, {args.runs} runs")
    results: dict[str, list[float]] = {}
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            for name, value in one_run(tmp, records, args.searches).items():
                results.setdefault(name, []).append(value)
        print(
            f"run {run + 1}: put {results['put'][-1]:.2f}x, get {results['get'][-1]:.2f}x, "
            f"search {results['search'][-1]:.2f}x; load average {os.getloadavg()}"
        )
    targets = {"put": 1.5, "get": 1.2, "search": 1.5}
    labels = {
        "put": f"put of {args.items} items one at a time (CPU)",
        "get": f"get of {args.items} random keys (wall)",
        "search": f"search with a filter, no query, x{args.searches} (wall)",
    }
    for work, label in labels.items():
        print(f"{label:<50} {spread(results[work])}  target <= {targets[work]}x")
    for name in sorted(k for k in results if k.endswith(" s")):
        print(f"  {name:<14} median {sorted(results[name])[len(results[name]) // 2]:.3f} s")


if __name__ == "__main__":
    main()
