"""A fresh SQLite handle's first semantic or hybrid query on a session kept coded (int8), against warm ones.

On the session ``first-<items>-parts`` of
``benchmarks/bench_search_costs.py --first-parts parts --first-dimension
256`` (written there once under ``--cache``; this script never writes
one), each run is one process: it opens the file, times the first query
(CPU and wall ms), then three more at the same version (the second query
of a version without a saved coded table codes the session). Run it
from a checkout of each version to compare them, in turn:
``PYTHONPATH=. python benchmarks/bench_coded_file.py [--items 100000]
[--mode semantic|hybrid] [--cache DIR]``; it prints one JSON line a run
with the load average and the hits (which must be the same on both
sides). A version that saves the coded table writes it beside the file,
in ``<file>.vectors/``, at the first run that codes the session.

With ``--writer``, each run first appends one step to the session and
embeds it (``index_embeddings``: the saved file is stale now) on a handle
of its own, and times that handle's ``close()`` (what it returns in) and
the wait until its threads are done (what a process that ends right
after ``close()`` waits for: a version that saves the coded file at close
codes the session there), wall and CPU ms, before the reader's queries.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search_costs import QUERIES

from agents.memory import MemoryItem
from agents.memory.search import EmbedParts, HashingEmbedder
from agents.memory.stores import open_store

T = TypeVar("T")


def timed(call: Callable[[], T]) -> tuple[T, float, float]:
    """Return what ``call`` gives, and the wall and CPU ms it took."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = call()
    return out, 1000 * (time.perf_counter() - wall), 1000 * (time.process_time() - cpu)


def write_one(path: str, sid: str, embedder: HashingEmbedder) -> dict[str, object]:
    """Append and embed one step on a handle of its own; return its close's figures (see the module docs)."""
    import threading

    store = open_store(f"sqlite://{path}")
    step = store.count(sid) + 1
    store.append(sid, [MemoryItem(step=step, thought="zqx probe of a close", status="CONTINUE")])
    store.index_embeddings(sid, embedder, parts=EmbedParts())
    wall, cpu = time.perf_counter(), time.process_time()
    store.close()
    returned = 1000 * (time.perf_counter() - wall)
    for thread in threading.enumerate():
        if thread.name.startswith("kvmemory-") and thread is not threading.current_thread():
            thread.join()
    waited = 1000 * (time.perf_counter() - wall), 1000 * (time.process_time() - cpu)
    return {"close returns ms": round(returned), "close done wall, cpu": [round(w) for w in waited]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--mode", choices=("semantic", "hybrid"), default="semantic")
    parser.add_argument("--cache", default="/tmp/kvmemory-bench-cache")
    parser.add_argument("--writer", action="store_true", help="append a step, close, then read")
    args = parser.parse_args()
    path = os.path.join(args.cache, f"first-{args.items}-parts-256.db")
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: write it with bench_search_costs.py --first-parts parts")
    sid, embedder = f"first-{args.items}-parts", HashingEmbedder(256)
    out: dict[str, object] = {"load": Path("/proc/loadavg").read_text().split()[0]}
    if args.writer:
        out.update(write_one(path, sid, embedder))
    out["coded file"] = os.path.isdir(f"{path}.vectors") and bool(os.listdir(f"{path}.vectors"))
    hits = []
    with open_store(f"sqlite://{path}") as store:
        for query in range(1, 5):
            found, wall, cpu = timed(
                lambda: store.search(
                    sid, QUERIES[1], 5, mode=args.mode, embedder=embedder, parts=EmbedParts()
                )
            )
            out[f"query {query} wall, cpu"] = [round(wall), round(cpu)]
            hits.append([(hit.seq, hit.score) for hit in found])
    out["same hits each query"] = all(found == hits[0] for found in hits)
    out["hits"] = hits[0]
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
