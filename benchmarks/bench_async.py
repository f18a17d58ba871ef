"""The async store API against the sync store on threads, and the SQLite driver choice, in one process.

Two parts, each printed as the median and spread of ``--repeat`` runs, with
the load average (``uptime``) before and after:

* PostgreSQL (``--postgres URL``): ``--sessions`` sessions, each appending
  ``--steps`` one-step commits, run concurrently with ``asyncio.gather`` on
  one ``open_async_store`` (psycopg's ``AsyncConnectionPool``, the store's
  code in greenlets) against the same sessions on the sync store from 8
  threads (the issue's baseline). Runs alternate, each in a fresh schema;
  the ratio is async throughput / threaded throughput per pair. The raw
  driver's round trip (``SELECT 1``, sync ``psycopg.Connection`` against
  ``AsyncConnection``) is printed beside it: it bounds what any async
  design on psycopg can reach on this machine.
* SQLite: the driver for ``open_async_store``. Seven statements shaped as
  a one-item append (``BEGIN IMMEDIATE``, the session row, the item, its
  FTS5 postings, the counts, ``COMMIT``; the store itself runs more,
  counted with a trace callback and printed) run on a dedicated thread, one
  hop per append (the design kvmemory uses), against aiosqlite, one hop
  per statement (what the store's code would pay on aiosqlite through a
  bridge like PostgreSQL's). Plus the awaited ``AsyncStore.append``
  against the sync ``append`` of the same row.

Run: ``python benchmarks/bench_async.py --postgres postgresql://... --repeat 5``
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import sqlite3
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable

from _common import make_ufo_rows, postgres_schema

from agents.memory import MemoryItem
from agents.memory.stores import open_async_store, open_store


def _items(n: int, tag: int) -> list[MemoryItem]:
    return [MemoryItem(**row, tag=tag) for row in make_ufo_rows(n)]


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"load average: {os.getloadavg()}"


def in_schema(run: Callable[[str, int, int], float], base: str, sessions: int, steps: int) -> float:
    with postgres_schema(base, pgvector=False) as url:
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


def driver_round_trips(base: str, calls: int) -> tuple[float, float]:
    """Return microseconds per ``SELECT 1`` round trip: sync psycopg, then its AsyncConnection."""
    import psycopg

    with psycopg.connect(base, autocommit=True) as con:
        start = time.perf_counter()
        for _ in range(calls):
            con.execute("SELECT 1").fetchall()
        sync = (time.perf_counter() - start) / calls * 1e6

    async def main() -> float:
        async with await psycopg.AsyncConnection.connect(base, autocommit=True) as con:
            start = time.perf_counter()
            for _ in range(calls):
                await (await con.execute("SELECT 1")).fetchall()
            return (time.perf_counter() - start) / calls * 1e6

    return sync, asyncio.run(main())


def raw_pools(base: str, sessions: int, steps: int) -> tuple[float, float]:
    """Return commits/s of one-row INSERTs, no kvmemory: ConnectionPool on 8 threads, AsyncConnectionPool with gather.

    Both pools hold 4 connections (the store's default). This is psycopg
    alone on this machine: the ceiling of any async design on its driver.
    """
    import psycopg_pool

    payload = "x" * 1500
    with postgres_schema(base, pgvector=False) as url:
        conninfo = url.replace("&pgvector=off", "")
        autocommit = {"autocommit": True}  # as the store's pools: one round trip a commit
        with psycopg_pool.ConnectionPool(
            conninfo, min_size=4, max_size=4, kwargs=autocommit, open=True
        ) as pool:
            with pool.connection() as con:
                con.execute("CREATE TABLE raw (sid text, i int, data text)")

            def one(n: int) -> None:
                for i in range(steps):
                    with pool.connection() as con:
                        con.execute("INSERT INTO raw VALUES (%s, %s, %s)", (f"s{n}", i, payload))

            start = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(8) as threads:
                list(threads.map(one, range(sessions)))
            threaded = sessions * steps / (time.perf_counter() - start)

        async def main() -> float:
            async with psycopg_pool.AsyncConnectionPool(
                conninfo, min_size=4, max_size=4, kwargs=autocommit, open=False
            ) as pool:

                async def one(n: int) -> None:
                    for i in range(steps):
                        async with pool.connection() as con:
                            await con.execute(
                                "INSERT INTO raw VALUES (%s, %s, %s)", (f"a{n}", i, payload)
                            )

                start = time.perf_counter()
                await asyncio.gather(*(one(n) for n in range(sessions)))
                return sessions * steps / (time.perf_counter() - start)

        return threaded, asyncio.run(main())


# -- SQLite: the driver behind open_async_store ---------------------------------------------

_SCHEMA = (
    "CREATE TABLE sessions (id TEXT PRIMARY KEY, n INTEGER NOT NULL, next_seq INTEGER NOT NULL)",
    "CREATE TABLE items (sid TEXT, seq INTEGER, step TEXT, data BLOB, PRIMARY KEY (sid, seq))",
    "CREATE VIRTUAL TABLE postings USING fts5(terms)",
)


def _append_statements(sid: str, seq: int, data: str) -> list[str]:
    """Seven statements shaped as a one-item append (the store's tables, fewer statements than it runs)."""
    text = data.replace("'", "''")
    return [
        "BEGIN IMMEDIATE",
        f"INSERT INTO sessions VALUES ('{sid}', 0, 1) ON CONFLICT (id) DO NOTHING",
        f"SELECT n, next_seq FROM sessions WHERE id = '{sid}'",
        f"INSERT INTO items VALUES ('{sid}', {seq}, '{seq}', '{text}')",
        f"INSERT INTO postings (terms) VALUES ('{text}')",
        f"UPDATE sessions SET n = n + 1, next_seq = {seq + 1} WHERE id = '{sid}'",
        "COMMIT",
    ]


def store_statements_per_append() -> int:
    """Count the statements kvmemory's SQLite store runs for a one-item append (a trace callback)."""
    folder = tempfile.mkdtemp()
    seen: list[str] = []
    connect = sqlite3.connect

    def traced(*args: object, **kwargs: object) -> sqlite3.Connection:
        con = connect(*args, **kwargs)  # type: ignore[arg-type]
        con.set_trace_callback(seen.append)
        return con

    sqlite3.connect = traced  # type: ignore[assignment]
    try:
        with open_store(f"sqlite://{folder}/count.db?synchronous=off") as store:
            store.append("s", _items(1, 0))
            seen.clear()
            store.append("s", _items(1, 0))
            return len(seen)
    finally:
        sqlite3.connect = connect  # type: ignore[assignment]


def sqlite_drivers(appends: int, tasks: int) -> tuple[float, float]:
    """Return seconds for ``appends`` one-item appends from ``tasks`` tasks: dedicated thread, aiosqlite."""
    import aiosqlite

    data = MemoryItem(**make_ufo_rows(1)[0]).to_json()
    per_task = appends // tasks
    folder = tempfile.mkdtemp()

    def fresh(name: str) -> str:
        path = f"{folder}/{name}-{uuid.uuid4().hex}.db"
        con = sqlite3.connect(path)
        for sql in _SCHEMA:
            con.execute(sql)
        con.commit()
        con.close()
        return path

    async def on_thread() -> float:
        con = sqlite3.connect(fresh("thread"), isolation_level=None, check_same_thread=False)
        con.execute("PRAGMA synchronous=off")
        thread = concurrent.futures.ThreadPoolExecutor(1)
        loop = asyncio.get_running_loop()

        def append(sid: str, seq: int) -> None:
            for sql in _append_statements(sid, seq, data):
                con.execute(sql).fetchall()

        async def one(n: int) -> None:
            for i in range(per_task):
                await loop.run_in_executor(thread, append, f"s{n}", i)

        start = time.perf_counter()
        await asyncio.gather(*(one(n) for n in range(tasks)))
        took = time.perf_counter() - start
        thread.shutdown()
        con.close()
        return took

    async def on_aiosqlite() -> float:
        async with aiosqlite.connect(fresh("aio"), isolation_level=None) as con:
            await con.execute("PRAGMA synchronous=off")
            turn = asyncio.Lock()  # one writer at a time, as SQLite allows

            async def one(n: int) -> None:
                for i in range(per_task):
                    async with turn:
                        for sql in _append_statements(f"s{n}", i, data):
                            await (await con.execute(sql)).fetchall()

            start = time.perf_counter()
            await asyncio.gather(*(one(n) for n in range(tasks)))
            return time.perf_counter() - start

    return asyncio.run(on_thread()), asyncio.run(on_aiosqlite())


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


def summary(values: list[float], digits: int = 3) -> str:
    return f"median {statistics.median(values):.{digits}f} (min {min(values):.{digits}f}, max {max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="a PostgreSQL server URL (a schema is made per run)")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-sqlite", action="store_true")
    args = parser.parse_args()
    print(f"before: {uptime()}")
    if not args.skip_sqlite:
        count = store_statements_per_append()
        print(
            f"SQLite: kvmemory's store runs {count} statements for a one-item append (the replay runs 7)."
        )
        for tasks in (1, 20):
            runs = [sqlite_drivers(2_000, tasks) for _ in range(args.repeat)]
            thread = [t for t, _ in runs]
            aio = [a for _, a in runs]
            ratio = [a / t for t, a in runs]
            print(
                f"SQLite driver, 2,000 one-item appends from {tasks} task(s): dedicated thread "
                f"{summary([t / 2_000 * 1e6 for t in thread], 0)} us/append, aiosqlite "
                f"{summary([a / 2_000 * 1e6 for a in aio], 0)} us/append; aiosqlite/thread time {summary(ratio, 2)}"
            )
        hops = [sqlite_hop(2_000) for _ in range(args.repeat)]
        ratio = [a / s for s, a in hops]
        print(
            f"SQLite store, one append per call: sync {statistics.median(s for s, _ in hops) * 1e6:.0f} us, "
            f"awaited {statistics.median(a for _, a in hops) * 1e6:.0f} us; awaited/sync {summary(ratio, 2)}"
        )
    if args.postgres:
        done = args.sessions * args.steps
        trips = [driver_round_trips(args.postgres, 2_000) for _ in range(args.repeat)]
        print(
            f"psycopg round trip (SELECT 1): sync {summary([s for s, _ in trips], 0)} us, "
            f"AsyncConnection {summary([a for _, a in trips], 0)} us; async/sync {summary([a / s for s, a in trips], 2)}"
        )
        raw = [raw_pools(args.postgres, args.sessions, args.steps) for _ in range(args.repeat)]
        print(
            f"psycopg alone, {args.sessions} x {args.steps} INSERTs: ConnectionPool on 8 threads "
            f"{summary([t for t, _ in raw], 0)} commits/s, AsyncConnectionPool with gather "
            f"{summary([a for _, a in raw], 0)} commits/s; async/threads {summary([a / t for t, a in raw], 2)}"
        )
        pairs = []
        for _ in range(args.repeat):
            threads = in_schema(sync_threads, args.postgres, args.sessions, args.steps)
            gathered = in_schema(async_gather, args.postgres, args.sessions, args.steps)
            pairs.append((threads, gathered))
            print(
                f"  run: 8 threads {done / threads:.0f} commits/s, gather {done / gathered:.0f} commits/s",
                flush=True,
            )
        print(
            f"PostgreSQL, {args.sessions} sessions x {args.steps} commits: "
            f"8 threads {summary([done / t for t, _ in pairs], 0)} commits/s, "
            f"asyncio.gather {summary([done / g for _, g in pairs], 0)} commits/s; "
            f"async/threads throughput {summary([t / g for t, g in pairs], 2)}"
        )
    else:
        print("PostgreSQL: skipped (pass --postgres URL)")
    print(f"after: {uptime()}")


if __name__ == "__main__":
    main()
