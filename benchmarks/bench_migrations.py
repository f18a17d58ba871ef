"""The time of the vector change log's nonce migrations on a large store, and how long they hold up other handles.

SQLite schema 9 -> 10 (``_nonce_vector_changes``: a nonce column, the
triggers, the change log's session index built again, each session's newest
row given a nonce) and, with ``--url``, PostgreSQL 13 -> 14
(``_add_vectors_nonce``: the nonce columns, the trigger function).

A store of ``--steps`` steps in ``--sessions`` sessions is written and
embedded (``HashingEmbedder(64)``, the default parts: one vector row a step),
its change log padded to ``--changes`` rows with the rows of other sessions
(a store whose sessions were embedded again and again), and taken back to
the older schema. Each of ``--runs`` runs opens a copy writable (the
migration) while another thread reads the same store through a connection
opened before, a query a millisecond (``vectors_version`` of a session and
one item), and prints the open's wall time and the longest a read waited.
A writer waits for the whole migration (one write transaction, under the
schema lock).

Run: ``PYTHONPATH=$PWD python benchmarks/bench_migrations.py --runs 5``
(``--url postgresql://...``: an empty database whose owner may create
databases; each run migrates a copy made from a template database).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.memory import MemoryItem
from agents.memory.search import HashingEmbedder
from agents.memory.stores import open_store


def written(url: str, steps: int, sessions: int) -> None:
    """Write and embed ``steps`` steps in ``sessions`` sessions."""
    embedder = HashingEmbedder(64)
    with open_store(url) as store:
        for n in range(sessions):
            sid = f"s{n}"
            share = steps // sessions
            store.append(
                sid, [MemoryItem(step=i, thought=f"w{i % 977} x{n}") for i in range(share)]
            )
            store.index_embeddings(sid, embedder)


class Reader(threading.Thread):
    """Read the store in a loop through ``query`` until stopped; keep the longest wait."""

    def __init__(self, query: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self._query = query
        self.longest = 0.0
        self.reads = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                start = time.perf_counter()
                self._query()
                self.longest = max(self.longest, time.perf_counter() - start)
                self.reads += 1
                time.sleep(0.001)
        except BaseException as exc:  # reported by the caller
            self.error = exc


def timed_open(url: str, reader: Reader) -> tuple[float, float, float]:
    """Open ``url`` writable while ``reader`` reads; return the open's wall time, the longest read and a second open's time (s, no migration)."""
    reader.start()
    time.sleep(0.05)
    start = time.perf_counter()
    with open_store(url):
        wall = time.perf_counter() - start
    time.sleep(0.05)
    reader.stop.set()
    reader.join()
    if reader.error is not None:
        raise reader.error
    start = time.perf_counter()
    with open_store(url):
        again = time.perf_counter() - start
    return wall, reader.longest, again


def sqlite_v9(db: Path, changes: int) -> int:
    """Pad the change log to ``changes`` rows and take the file back to schema version 9; return its rows."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        have = con.execute("SELECT count(*) FROM kvmemory_vector_changes").fetchone()[0]
        con.execute("BEGIN")
        pad = max(0, changes - have)
        con.executemany(
            "INSERT INTO kvmemory_vector_changes (session_id, seq, nonce) VALUES (?, ?, NULL)",
            ((f"pad{n % 100}", n // 100 + 1) for n in range(pad)),
        )
        con.execute("COMMIT")
        con.execute("DROP INDEX kvmemory_vector_changes_session")
        con.execute("ALTER TABLE kvmemory_vector_changes DROP COLUMN nonce")
        con.execute(
            "CREATE INDEX kvmemory_vector_changes_session ON kvmemory_vector_changes (session_id, id)"
        )
        for event, row in (("INSERT", "new"), ("UPDATE", "new"), ("DELETE", "old")):
            con.execute(f"DROP TRIGGER kvmemory_vectors_logged_{event.lower()}")
            con.execute(
                f"CREATE TRIGGER kvmemory_vectors_logged_{event.lower()} AFTER {event} ON"
                " kvmemory_vectors BEGIN INSERT INTO kvmemory_vector_changes (session_id, seq)"
                f" VALUES ({row}.session_id, {row}.seq); END"
            )
        con.execute("PRAGMA user_version = 9")
        con.execute("VACUUM")
        return int(con.execute("SELECT count(*) FROM kvmemory_vector_changes").fetchone()[0])
    finally:
        con.close()


def sqlite_runs(args: argparse.Namespace, folder: Path) -> None:
    """Time SQLite's 9 -> 10 migration."""
    base = folder / "base.db"
    start = time.perf_counter()
    written(f"sqlite://{base}", args.steps, args.sessions)
    rows = sqlite_v9(base, args.changes)
    print(
        f"sqlite: {args.steps} steps, {rows} change rows, built in {time.perf_counter() - start:.0f} s"
    )
    walls, waits, agains = [], [], []
    for _ in range(args.runs):
        db = folder / "run.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(base, db)
        con = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        con.execute("PRAGMA busy_timeout = 60000")

        def query(con: sqlite3.Connection = con) -> None:
            con.execute(
                "SELECT id FROM kvmemory_vector_changes WHERE session_id = 's0'"
                " ORDER BY id DESC LIMIT 1"
            ).fetchall()
            con.execute("SELECT data FROM kvmemory_items WHERE seq = 7").fetchall()

        wall, wait, again = timed_open(f"sqlite://{db}", Reader(query))
        con.close()
        walls.append(wall)
        waits.append(wait)
        agains.append(again)
    print(
        "sqlite 9 -> 10:",
        spread(walls, "open (migration)"),
        spread(agains, "open again"),
        spread(waits, "longest read"),
    )


def postgres_v13(con: Any) -> int:
    """Take the tables back to schema version 13; return the change log's rows."""
    from agents.memory.stores._postgres import schema

    con.execute(schema._LOGGED_VECTORS_VERSION_FUNCTION)  # the trigger body before the nonce
    con.execute("ALTER TABLE kvmemory_sessions DROP COLUMN vectors_nonce")
    con.execute("ALTER TABLE kvmemory_vector_changes DROP COLUMN nonce")
    con.execute("UPDATE kvmemory_schema SET version = 13")
    return int(con.execute("SELECT count(*) FROM kvmemory_vector_changes").fetchone()[0])


def postgres_runs(args: argparse.Namespace) -> None:
    """Time PostgreSQL's 13 -> 14 migration, each run on a database copied from a template."""
    import psycopg

    prefix, _, _ = args.url.rpartition("/")
    admin = psycopg.connect(args.url, autocommit=True)
    for name in ("kvmemory_bench_base", "kvmemory_bench_run"):
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
    admin.execute("CREATE DATABASE kvmemory_bench_base")
    base = f"{prefix}/kvmemory_bench_base"
    start = time.perf_counter()
    written(base, args.steps, args.sessions)
    with psycopg.connect(base, autocommit=True) as con:
        have = con.execute("SELECT count(*) FROM kvmemory_vector_changes").fetchone()[0]
        con.execute(
            "INSERT INTO kvmemory_vector_changes (session_id, version, seq)"
            " SELECT 'pad' || (n %% 100), n, n / 100 + 1 FROM generate_series(1, %s) AS n",
            (max(0, args.changes - have),),
        )
        rows = postgres_v13(con)
        con.execute("VACUUM ANALYZE")
    print(
        f"postgres: {args.steps} steps, {rows} change rows, built in {time.perf_counter() - start:.0f} s"
    )
    walls, waits, agains = [], [], []
    for _ in range(args.runs):
        admin.execute("DROP DATABASE IF EXISTS kvmemory_bench_run")
        admin.execute("CREATE DATABASE kvmemory_bench_run TEMPLATE kvmemory_bench_base")
        url = f"{prefix}/kvmemory_bench_run"
        with psycopg.connect(url, autocommit=True) as con:

            def query(con: Any = con) -> None:
                con.execute(
                    "SELECT vectors_version FROM kvmemory_sessions WHERE session_id = 's0'"
                ).fetchall()
                con.execute("SELECT data FROM kvmemory_items WHERE seq = 7").fetchall()

            wall, wait, again = timed_open(url, Reader(query))
        walls.append(wall)
        waits.append(wait)
        agains.append(again)
    admin.execute("DROP DATABASE IF EXISTS kvmemory_bench_run")
    admin.execute("DROP DATABASE IF EXISTS kvmemory_bench_base")
    admin.close()
    print(
        "postgres 13 -> 14:",
        spread(walls, "open (migration)"),
        spread(agains, "open again"),
        spread(waits, "longest read"),
    )


def spread(values: list[float], name: str) -> str:
    """Return ``name: median [min-max] ms``."""
    ms = [value * 1000 for value in values]
    return f"{name} {statistics.median(ms):.0f} ms [{min(ms):.0f}-{max(ms):.0f}];"


def main() -> None:
    """Build the stores, time the migrations and print the figures with the load average."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--url", help="a PostgreSQL database to time 13 -> 14 in too")
    parser.add_argument("--no-sqlite", action="store_true", help="time PostgreSQL only")
    args = parser.parse_args()
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as folder:
            sqlite_runs(args, Path(folder))
    if args.url:
        postgres_runs(args)
    print("load", Path("/proc/loadavg").read_text().split()[0])


if __name__ == "__main__":
    main()
