"""The async store API against the sync store on threads, in one process.

Two workloads, each as the median and spread of ``--repeat`` runs, with the
load average printed beside them:

* PostgreSQL: ``--sessions`` sessions, each appending ``--steps`` one-step
  commits, run concurrently with ``asyncio.gather`` on one
  ``open_async_store`` against the same sessions on the sync store from 8
  threads (the issue's baseline). Needs ``--postgres URL``.
* SQLite: the cost of the thread hop, one awaited append against one sync
  append of the same row, per call.

Run: ``python benchmarks/bench_async.py --postgres postgresql://... --repeat 5``
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator

from _common import make_ufo_rows

from agents.memory import MemoryItem
from agents.memory.stores import open_async_store, open_store


def _items(n: int, tag: int) -> list[MemoryItem]:
    return [MemoryItem(**row, tag=tag) for row in make_ufo_rows(n)]


@contextlib.contextmanager
def _postgres_url(base: str) -> Iterator[str]:
    """Yield ``base`` with a fresh schema as its search path, dropped afterwards."""
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as con:
        con.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in base else "?"
    try:
        # pgvector=off: no extension is created (it would be database-wide, outliving the schema).
        yield f"{base}{sep}options=-csearch_path%3D{schema}&pgvector=off"
    finally:
        with psycopg.connect(base, autocommit=True) as con:
            con.execute(f"DROP SCHEMA {schema} CASCADE")


def in_schema(run: Callable[[str, int, int], float], base: str, sessions: int, steps: int) -> float:
    with _postgres_url(base) as url:
        return run(url, sessions, steps)


def sync_threads(url: str, sessions: int, steps: int) -> float:
    work = {n: _items(steps, n) for n in range(sessions)}
    with open_store(url) as store:
        store.append("warm", work[0][:1])

        def one(n: int) -> None:
            for item in work[n]:
                store.append(f"s{n}", [item])

        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(sessions)))
        return time.perf_counter() - start


def async_gather(url: str, sessions: int, steps: int) -> float:
    work = {n: _items(steps, n) for n in range(sessions)}

    async def main() -> float:
        async with open_async_store(url) as store:
            await store.append("warm", work[0][:1])

            async def one(n: int) -> None:
                for item in work[n]:
                    await store.append(f"s{n}", [item])

            start = time.perf_counter()
            await asyncio.gather(*(one(n) for n in range(sessions)))
            return time.perf_counter() - start

    return asyncio.run(main())


def sqlite_hop(calls: int) -> tuple[float, float]:
    """Return seconds per call of sync and awaited single-row appends to SQLite (synchronous=off)."""
    folder = tempfile.mkdtemp()
    item = _items(1, 0)
    url = f"sqlite://{folder}/hop.db?synchronous=off"
    with open_store(url) as store:
        start = time.perf_counter()
        for _ in range(calls):
            store.append("sync", item)
        sync = (time.perf_counter() - start) / calls

    async def main() -> float:
        async with open_async_store(url) as store:
            start = time.perf_counter()
            for _ in range(calls):
                await store.append("async", item)
            return (time.perf_counter() - start) / calls

    return sync, asyncio.run(main())


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f})"


def repeated(fn: Callable[[], float], repeat: int) -> list[float]:
    return [fn() for _ in range(repeat)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="a PostgreSQL server URL (a schema is made per run)")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()}")
    hops = [sqlite_hop(2_000) for _ in range(args.repeat)]
    ratio = [a / s for s, a in hops]
    print(
        f"SQLite, one append per call: sync {statistics.median(s for s, _ in hops) * 1e6:.0f} us, "
        f"awaited {statistics.median(a for _, a in hops) * 1e6:.0f} us; awaited/sync {summary(ratio)}"
    )
    if args.postgres:
        done = args.sessions * args.steps
        sync = repeated(
            lambda: in_schema(sync_threads, args.postgres, args.sessions, args.steps),
            args.repeat,
        )
        gathered = repeated(
            lambda: in_schema(async_gather, args.postgres, args.sessions, args.steps),
            args.repeat,
        )
        print(
            f"PostgreSQL, {args.sessions} sessions x {args.steps} commits: "
            f"8 threads {done / statistics.median(sync):.0f} commits/s ({summary(sync)} s), "
            f"asyncio.gather {done / statistics.median(gathered):.0f} commits/s ({summary(gathered)} s); "
            f"async/threads throughput {statistics.median(sync) / statistics.median(gathered):.2f}"
        )
    else:
        print("PostgreSQL: skipped (pass --postgres URL)")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
