"""The first query of a StoredMemory over the kept-vector budget: keys, filters, no word, index_embeddings.

A session whose stored part vectors pass the store handle's budget
(``Store.vectors_over_budget``) leaves them in the store, which answers its
semantic and hybrid queries. Each case opens the session in a fresh
process (``StoredMemory``, its index built ahead and waited for), then
times its first call, three warm ones (the same query), three more
queries that differ from it (``fresh ms``, and their process CPU time), and reads the process's peak
resident memory (``ru_maxrss``) before and after. ``--trees`` runs each
case with each source tree's ``agents`` (main's and a branch's),
alternating, so the two are compared under the same load.

The SQLite session (``--items`` UFO-shaped steps of
``bench_search_costs.steps``, cut into the default ``EmbedParts()``,
``HashingEmbedder(--dimension)``, and the vectors over ``KEYS`` too) is
written once under ``--cache`` and reused.

Usage::

    PYTHONPATH=. python benchmarks/bench_store_memory_budget.py --items 50000 \\
        --cache /tmp/budget --trees /tmp/main-tree,. --runs 3
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

KEYS = ("thought", "observation", "page", "subtask", "comment")
"""The fields of the keyed cases: the steps' prose, not their controls and arguments."""

QUERY = "press OK to save the file"
WORDLESS = "-- ? --"
FRESH = {
    QUERY: ("press OK to open the report", "close the window", "save the chart"),
    WORDLESS: ("?? --", "-- !", "... ?"),
}
"""Warm queries that differ from the first (``fresh ms``): a handle may keep what it worked out for one query."""
CASES = (
    "semantic keys",
    "hybrid keys",
    "semantic function",
    "hybrid function",
    "hybrid common function",
    "hybrid rare function",
    "hybrid none function",
    "semantic fields filter",
    "hybrid fields filter",
    "hybrid keys fields filter",
    "semantic rare filter",
    "hybrid rare filter",
    "semantic no word",
    "hybrid no word",
    "index_embeddings",
)


def light(item: Any) -> bool:
    """The filter function of the function cases: about half the steps pass."""
    return bool(item.get_value("weight", 0.0) < 0.5)


def common(item: Any) -> bool:
    """The filter function of ``hybrid common function``: 99% of the steps pass."""
    return bool(item.get_value("agent", None) == "host")


def rare(item: Any) -> bool:
    """The filter function of ``hybrid rare function``: 0.1% of the steps pass."""
    return bool(item.get_value("tier", None) == "gold")


def none(item: Any) -> bool:
    """The filter function of ``hybrid none function``: no step passes (no keyword hit to prune against)."""
    return False


def _sid(n: int) -> str:
    return f"budget-{n}"


def write_session(url: str, n: int, dimension: int) -> None:
    """Write the session of ``n`` steps and its vectors (all fields and ``KEYS``), once."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_search_costs import steps

    from agents.memory import MemoryItem
    from agents.memory.search import EmbedParts, HashingEmbedder
    from agents.memory.stores import open_store

    sid = _sid(n)
    embedder = HashingEmbedder(dimension)
    with open_store(url) as store:
        if store.count(sid) != n:
            store.delete_session(sid)
            print(f"writing {n} steps (once; kept for later runs)", flush=True)
            rows = steps(n)
            for at in range(0, n, 10_000):
                store.append(sid, [MemoryItem(**row) for row in rows[at : at + 10_000]])
        store.index_embeddings(sid, embedder, parts=EmbedParts())
        store.index_embeddings(sid, embedder, keys=KEYS, parts=EmbedParts())
        over = {
            "all fields": store.vectors_over_budget(sid, parts=EmbedParts()),
            "KEYS": store.vectors_over_budget(sid, keys=KEYS, parts=EmbedParts()),
        }
        print(f"over the budget: {over}", flush=True)


def child(url: str, n: int, dimension: int, case: str) -> dict[str, float]:
    """Open the session, wait for its build, and time ``case``'s first and warm calls; return the figures."""
    from agents.memory.search import EmbedParts, HashingEmbedder, search_index
    from agents.memory.stores import StoredMemory, open_store

    embedder = HashingEmbedder(dimension)
    mode = "hybrid" if case.startswith("hybrid") else "semantic"
    options: dict[str, Any] = {"mode": mode, "embedder": embedder}
    if case.endswith("keys") or "keys fields" in case:
        options["keys"] = KEYS
    if case.endswith("function"):
        functions = {"common": common, "rare": rare, "none": none}
        options["where"] = functions.get(case.split()[1], light)
    if case.endswith("fields filter"):
        options["where"] = {"agent": "host"}  # 99% of the steps pass
    if case.endswith("rare filter"):
        options["where"] = {"tier": "gold"}  # 0.1% of the steps pass
    query = WORDLESS if case.endswith("no word") else QUERY

    def call() -> object:
        if case == "index_embeddings":
            return memory.index_embeddings(embedder)
        return memory.search(query, 5, **options)

    store = open_store(url)
    memory = StoredMemory(store, _sid(n), parts=EmbedParts(), index_ahead=True)
    search_index(memory).build_ahead(wait=True)
    gc.collect()
    ready = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out: dict[str, float] = {"ready MB": ready}
    warm: list[float] = []
    for round_ in range(4):
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        if round_ == 0:
            out["first ms"] = 1000 * (time.perf_counter() - wall)
            out["first cpu ms"] = 1000 * (time.process_time() - cpu)
        else:
            warm.append(1000 * (time.perf_counter() - wall))
    out["warm ms"] = statistics.median(warm)
    fresh: list[float] = []
    fresh_cpu: list[float] = []
    for other in FRESH[query] if case != "index_embeddings" else ():
        wall, cpu = time.perf_counter(), time.process_time()
        memory.search(other, 5, **options)
        fresh.append(1000 * (time.perf_counter() - wall))
        fresh_cpu.append(1000 * (time.process_time() - cpu))
    out["fresh ms"] = statistics.median(fresh) if fresh else out["warm ms"]
    out["fresh cpu ms"] = statistics.median(fresh_cpu) if fresh_cpu else 0.0
    out["peak MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["held vectors"] = float(search_index(memory).vector_model() is not None)
    store.close()
    return out


def _load() -> str:
    with open("/proc/loadavg") as file:
        return " ".join(file.read().split()[:3])


def _cell(values: list[float]) -> str:
    if not values:
        return ""
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--dimension", type=int, default=256)
    parser.add_argument("--cache", default="/tmp/kvmemory-bench-budget")
    parser.add_argument("--trees", default=".", help="source trees to compare, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    url = f"sqlite://{args.cache}/budget.db"
    if args.child is not None:
        print(json.dumps(child(url, args.items, args.dimension, args.child)))
        return
    write_session(url, args.items, args.dimension)
    trees = [str(Path(tree).resolve()) for tree in args.trees.split(",")]
    cases = args.cases.split(",")
    figures: dict[tuple[str, str], list[dict[str, float]]] = {}
    for run in range(args.runs):
        for case in cases:
            for tree in trees if run % 2 == 0 else trees[::-1]:
                command = [sys.executable, __file__, "--child", case, "--items", str(args.items)]
                command += ["--dimension", str(args.dimension), "--cache", args.cache]
                load = _load()
                done = subprocess.run(
                    command,
                    env={**os.environ, "PYTHONPATH": tree},
                    capture_output=True,
                    text=True,
                    check=True,
                )
                found = json.loads(done.stdout.strip().splitlines()[-1])
                found["load"] = float(load.split()[0])
                figures.setdefault((case, tree), []).append(found)
                print(f"run {run} {case:20} {tree}: {found}", flush=True)
    print(f"\n{args.items:,} steps, median [range] of {args.runs} runs (load at each start)")
    print(f"{'case':20} {'tree':32} {'first ms':>22} {'first CPU ms':>22} {'warm ms':>16}")
    print(f"{'':20} {'':32} {'ready MB':>22} {'peak MB':>22} {'fresh ms':>16}")
    print(f"{'':20} {'':32} {'fresh CPU ms':>22} {'':>22} {'':>16}  load")
    for case in cases:
        for tree in trees:
            rows = figures[(case, tree)]

            def of(name: str, rows: list[dict[str, float]] = rows) -> list[float]:
                return [row[name] for row in rows]

            name = tree[-32:]
            print(
                f"{case:20} {name:32} {_cell(of('first ms')):>22} "
                f"{_cell(of('first cpu ms')):>22} {_cell(of('warm ms')):>16}"
            )
            loads = of("load")
            print(
                f"{'':20} {'':32} {_cell(of('ready MB')):>22} {_cell(of('peak MB')):>22} "
                f"{_cell(of('fresh ms')):>16}"
            )
            print(
                f"{'':20} {'':32} {_cell(of('fresh cpu ms')):>22} {'':>22} {'':>16}  "
                f"{min(loads):.1f}-{max(loads):.1f}, vectors held: {of('held vectors')}"
            )


if __name__ == "__main__":
    main()
