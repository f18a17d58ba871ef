"""What checking a pooled PostgreSQL connection before each call costs, in one process.

A PostgreSQL store checks each connection it takes from the pool before a
call uses it, so that a connection the server dropped (a kill, a restart) is
replaced instead of failing the call. Three ways are timed on the same
server, runs alternating:

* ``none``: no check (kvmemory before the check; a dropped connection fails a call);
* ``probe``: the socket is polled with no wait; an idle connection has
  nothing to read, one the server dropped does (kvmemory's choice);
* ``round trip``: an empty statement on each connection before the call
  (psycopg_pool's ``check_connection``).

Each run times ``--calls`` one-item appends and as many ``count()`` reads;
printed: microseconds per call, median and spread of ``--repeat`` runs, the
ratio to ``none``, and the load average before and after.

Run: ``python benchmarks/bench_pg_checkout.py --postgres postgresql://... --repeat 5``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from _common import postgres_schema

from agents.memory import MemoryItem
from agents.memory.stores import open_store
from agents.memory.stores._postgres import pool as pool_module


def _round_trip(con: Any) -> bool:
    con.execute("")
    return False


CHECKS: dict[str, Callable[[Any], bool]] = {
    "none": lambda con: False,
    "probe": pool_module._dropped,
    "round trip": _round_trip,
}


def run_once(url: str, check: Callable[[Any], bool], calls: int) -> tuple[float, float]:
    """Return microseconds per append and per count with ``check`` as the checkout check."""
    chosen = pool_module._dropped
    pool_module._dropped = check
    try:
        with open_store(url) as store:
            store.append("s", [MemoryItem(step=-1)])
            items = [MemoryItem(step=i, note=f"word{i}") for i in range(calls)]
            start = time.perf_counter()
            for item in items:
                store.append("s", [item])
            appends = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(calls):
                store.count("s")
            counts = time.perf_counter() - start
    finally:
        pool_module._dropped = chosen
    return appends / calls * 1e6, counts / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--postgres", required=True, help="a PostgreSQL server URL")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in CHECKS}
    for _ in range(args.repeat):
        for name, check in CHECKS.items():
            with postgres_schema(args.postgres, pgvector=False) as url:
                times[name].append(run_once(url, check, args.calls))
    base = [statistics.median(t[i] for t in times["none"]) for i in (0, 1)]
    for name, runs in times.items():
        parts = []
        for i, call in enumerate(("append", "count")):
            values = [t[i] for t in runs]
            median = statistics.median(values)
            parts.append(
                f"{call} {median:7.1f} us (spread {min(values):.1f}-{max(values):.1f}, "
                f"x{median / base[i]:.2f})"
            )
        print(f"{name:>10}: " + "; ".join(parts))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
