"""A fresh handle's first semantic, hybrid or keyword query on a session of part vectors (kept coded, int8), against warm ones.

On the session ``first-<items>-parts`` of
``benchmarks/bench_search_costs.py --first-parts parts --first-dimension
256`` (written there once under ``--cache``; this script never writes
one), each run is one process: it opens the file, times the first query
(CPU and wall ms), then three other queries at the same version (the
second query of a version without a saved coded table codes the session;
each differs from the last, as a table keeps the last query's bounds) and
the first again (its hits checked unchanged). Run it
from a checkout of each version to compare them, in turn:
``PYTHONPATH=. python benchmarks/bench_coded_file.py [--items 100000]
[--mode semantic|hybrid] [--cache DIR]``; it prints one JSON line a run
with the load average and the hits (which must be the same on both
sides). A version that saves the coded table writes it beside the file,
in ``<file>.vectors/``, at the first run that codes the session.

``--store jsonl`` runs on the JSONL folder ``first-<items>-parts-256`` of
the same cache (a version that saves the coded table writes it in its
``kvmemory-coded/`` at the first run that codes the session), and tells
whether the first query read the session's log whole.

``--store postgres --postgres URL`` runs on the schema
``kvmemory_bench_first`` that ``bench_search_costs.py --stores postgres``
writes (``--parts whole`` on its session of whole-item vectors), and with
``--pgdata DIR`` (the server's data folder; the server on this machine)
adds the server's CPU ms of each query (``bench_pg_writes.server_cpu``);
``--store-options`` is appended to the store's URL (``&pgvector=off``).
Each line also holds the process's peak resident memory (MB).

With ``--writer``, each run first appends ``--writer-steps`` steps (one
by default) to the session and embeds them (``index_embeddings``: the
saved file is stale now) on a handle of its own, and times that handle's
``close()`` (what it returns in) and the wait until its threads are done
(what a process that ends right after ``close()`` waits for: a version
that saves the coded file at close codes the session there), wall and
CPU ms, before the reader's queries (a version that catches a stale file
up answers the first from it). The session then holds more steps than
``--items``: run each on a fresh copy of the file and its folders.

With ``--readers N``, N fresh reader handles run in turn, each timing its
four queries and then its close with the saves it starts (wall and CPU
ms): a reader that caught up as many changed items as a writer's close
codes the session for (``rebuild_rows``) saves the table back there, and
the next reader loads a current file.

``--numpy-first`` imports numpy before the store opens and reports its
import apart (``numpy import cpu ms``): a SQLite store imports it as it
opens where sqlite-vec is installed, a PostgreSQL store at its first
semantic or hybrid query (80-140 ms of CPU on this machine), a cost of
the process's first query rather than of the session's (an agent that
uses numpy already pays none).

``--hashes`` prints instead the CPU throughput of an HMAC over 8 MiB
chunks with each hash of the standard library fit for it (GB/s, best of
five over 64 MiB), and the ms each would take over a 299 MB body (the
coded file of 100,000 steps cut into parts): what choosing another hash
for the coded file's HMAC would save on this CPU.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pg_writes import server_cpu
from bench_search_costs import QUERIES, _kept_schema

from agents.memory import MemoryItem
from agents.memory.search import EmbedParts, HashingEmbedder
from agents.memory.stores import Store, open_store

T = TypeVar("T")


def timed(call: Callable[[], T], pgdata: str | None = None) -> tuple[T, float, float, float | None]:
    """Return what ``call`` gives, and the wall, CPU and server CPU ms it took (``None``: no ``pgdata``)."""
    server = server_cpu(pgdata)
    wall, cpu = time.perf_counter(), time.process_time()
    out = call()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    after = server_cpu(pgdata)
    served = None if server is None or after is None else 1000 * (after - server)
    return out, 1000 * wall, 1000 * cpu, served


def write_one(url: str, sid: str, embedder: HashingEmbedder, steps: int = 1) -> dict[str, object]:
    """Append and embed ``steps`` steps on a handle of its own; return its close's figures (see the module docs)."""
    import threading

    store = open_store(url)
    step = store.count(sid) + 1
    store.append(
        sid,
        [
            MemoryItem(step=step + i, thought=f"zqx probe {i} of a close", status="CONTINUE")
            for i in range(steps)
        ],
    )
    store.index_embeddings(sid, embedder, parts=EmbedParts())
    wall, cpu = time.perf_counter(), time.process_time()
    store.close()
    returned = 1000 * (time.perf_counter() - wall)
    for thread in threading.enumerate():
        if thread.name.startswith("kvmemory-") and thread is not threading.current_thread():
            thread.join()
    waited = 1000 * (time.perf_counter() - wall), 1000 * (time.process_time() - cpu)
    return {"close returns ms": round(returned), "close done wall, cpu": [round(w) for w in waited]}


def closed(store: Store) -> None:
    """Close ``store`` and wait for the threads its close started (its saves)."""
    import threading

    store.close()
    for thread in threading.enumerate():
        if thread.name.startswith("kvmemory-") and thread is not threading.current_thread():
            thread.join()


def hash_speeds() -> None:
    """Print each standard-library hash's HMAC throughput on this CPU (see ``--hashes``)."""
    import hmac

    data = memoryview(os.urandom(64 << 20))
    key = os.urandom(32)
    out: dict[str, object] = {"load": Path("/proc/loadavg").read_text().split()[0]}
    for name in (
        "sha256",
        "sha1",
        "sha224",
        "sha512",
        "sha512_256",
        "blake2b",
        "blake2s",
        "sha3_256",
    ):
        best = float("inf")
        for _ in range(5):
            cpu = time.process_time()
            for at in range(0, len(data), 8 << 20):
                hmac.new(key, data[at : at + (8 << 20)], name).digest()
            best = min(best, time.process_time() - cpu)
        speed = len(data) / best
        out[name] = {"GB/s": round(speed / 1e9, 2), "ms over 299 MB": round(299e6 / speed * 1000)}
    print(json.dumps(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--mode", choices=("semantic", "hybrid", "keyword"), default="semantic")
    parser.add_argument("--cache", default="/tmp/kvmemory-bench-cache")
    parser.add_argument("--store", choices=("sqlite", "jsonl", "postgres"), default="sqlite")
    parser.add_argument("--postgres", default=os.environ.get("KVMEMORY_BENCH_POSTGRES_URL"))
    parser.add_argument("--pgdata", help="the PostgreSQL server's data folder: its CPU too")
    parser.add_argument("--parts", choices=("parts", "whole"), default="parts")
    parser.add_argument("--store-options", default="", help="appended to the store's URL")
    parser.add_argument("--writer", action="store_true", help="append steps, close, then read")
    parser.add_argument("--writer-steps", type=int, default=1, help="the steps --writer appends")
    parser.add_argument(
        "--readers", type=int, default=1, help="fresh reader handles, one after the other"
    )
    parser.add_argument("--hashes", action="store_true", help="each hash's HMAC speed only")
    parser.add_argument(
        "--numpy-first", action="store_true", help="import numpy before opening (timed apart)"
    )
    args = parser.parse_args()
    if args.hashes:
        hash_speeds()
        return
    parts = EmbedParts() if args.parts == "parts" else EmbedParts.WHOLE
    sid = f"first-{args.items}" + ("-parts" if args.parts == "parts" else "")
    embedder = HashingEmbedder(256)
    if args.store == "postgres":
        if not args.postgres:
            sys.exit("--store postgres needs --postgres URL (or KVMEMORY_BENCH_POSTGRES_URL)")
        url = _kept_schema(args.postgres) + args.store_options
    else:
        path = os.path.join(args.cache, f"first-{args.items}-{args.parts}-256")
        if args.parts == "whole":
            path = path.replace("-whole", "")
        path += ".db" if args.store == "sqlite" else ""
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: write it with bench_search_costs.py --first-parts parts")
        url = f"{args.store}://{path}{args.store_options}"
    out: dict[str, object] = {"load": Path("/proc/loadavg").read_text().split()[0]}
    if args.numpy_first:
        cpu = time.process_time()
        import numpy  # noqa: F401 (imported for its cost, timed apart)

        out["numpy import cpu ms"] = round(1000 * (time.process_time() - cpu))
    if args.writer:
        out["writer steps"] = args.writer_steps
        out.update(write_one(url, sid, embedder, args.writer_steps))
    if args.store != "postgres":
        folder = f"{path}.vectors" if args.store == "sqlite" else f"{path}/kvmemory-coded"
        out["coded file"] = os.path.isdir(folder) and bool(os.listdir(folder))
    hits = []
    for reader in range(1, args.readers + 1):
        named = "" if reader == 1 else f"reader {reader} "
        store = open_store(url)
        if store.count(sid) < args.items + (args.writer_steps if args.writer else 0):
            sys.exit(
                f"{sid} of {url} is missing: write it with bench_search_costs.py --sections first"
            )
        # Four different queries (a table keeps the last query's bounds: the same query
        # again would time that), then the first again, whose hits must not change.
        for query, text in enumerate([*QUERIES[1:5], QUERIES[1]], 1):
            found, wall, cpu, server = timed(
                functools.partial(
                    store.search, sid, text, 5, mode=args.mode, embedder=embedder, parts=parts
                ),
                args.pgdata,
            )
            out[f"{named}query {query} wall, cpu"] = [round(wall), round(cpu)]
            if server is not None:
                out[f"{named}query {query} server cpu"] = round(server)
            if text == QUERIES[1]:
                hits.append([(hit.seq, hit.score) for hit in found])
            if args.store == "jsonl" and query == 1:  # a fresh handle's first query, from the files
                out[f"{named}query 1 read the log whole"] = store.backend._logs.viewed(sid)
        if args.readers > 1:  # its close and its saves (a table caught up may be saved back)
            _, wall, cpu, _ = timed(functools.partial(closed, store))
            out[f"reader {reader} close done wall, cpu"] = [round(wall), round(cpu)]
        else:
            store.close()
    # ru_maxrss is in KiB on Linux.
    out["peak MB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out["same hits each query"] = all(found == hits[0] for found in hits)
    out["hits"] = hits[0]
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
