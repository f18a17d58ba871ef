"""Store benchmark: kvmemory's stores against the raw driver, measured in one process.

Each workload runs twice: through kvmemory (``StoredMemory`` / the store) and
through the raw driver (``sqlite3`` or ``psycopg``) doing the same inserts and
selects of the same encoded bytes, on a table with the same columns and
indexes, with the same durability setting. The raw side gets the item bytes
already encoded; kvmemory encodes (and, on reads, decodes) them itself, which
is what a user pays. Prints both times and the ratio kvmemory / raw.

Workloads: append N items one by one; append N items in batches of 100;
reopen a session of M items; read 1,000 steps with the filter pushed down.

Run: .venv/bin/python benchmarks/bench_stores.py [--items N] [--reopen M]
     [--synchronous normal|full] [--postgres URL | --no-postgres]
Without --postgres, a throwaway server is started when the PostgreSQL
binaries are installed (as for the tests).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
from _common import make_rows, make_ufo_rows

from agents.memory import MemoryItem
from agents.memory._wire import dumps_item
from agents.memory.stores import open_memory, open_store
from agents.memory.stores._base import step_text

TARGETS = {"append one by one": 2.0, "append in batches": 1.5, "reopen": 1.5, "filter steps": 1.5}
BATCH = 100


def make_items(n: int, start: int = 0) -> list[MemoryItem]:
    """Return ``n`` agent-step items of ten fields."""
    return [MemoryItem(**row) for row in make_rows(n, start)]


def encoded(items: list[MemoryItem]) -> list[tuple[str | None, float, bytes]]:
    """Return the rows the raw side inserts: the same step text and bytes as kvmemory's."""
    now = time.time()
    return [
        (
            step_text(item["step"]),
            now,
            dumps_item(item, step_key="step", on_unencodable="error"),
        )
        for item in items
    ]


def timed(fn: Callable[[], object]) -> float:
    """Return the wall time of one call of ``fn``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def report(name: str, ours: float, raw: float, note: str = "") -> None:
    """Print one line: both times, the ratio, and the target."""
    ratio = ours / raw if raw else float("inf")
    target = TARGETS.get(name.split(" (")[0].split(": ")[-1].split(" of ")[0])
    mark = "" if target is None else (" ok" if ratio <= target else f" OVER target {target}x")
    print(
        f"{name:<44} kvmemory {ours * 1000:9.1f} ms   raw {raw * 1000:9.1f} ms   ratio {ratio:5.2f}x{mark}{note}"
    )


# -- SQLite ------------------------------------------------------------------------

RAW_SQLITE_SCHEMA = (
    "CREATE TABLE items (seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, step TEXT, created REAL NOT NULL, data BLOB NOT NULL)",
    "CREATE INDEX items_session ON items (session_id, seq)",
    "CREATE INDEX items_step ON items (session_id, step)",
    "CREATE INDEX items_created ON items (session_id, created)",
)


def raw_sqlite(path: str, synchronous: str) -> sqlite3.Connection:
    """Open a raw connection with the store's settings and schema."""
    con = sqlite3.connect(path, isolation_level=None, timeout=30)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(f"PRAGMA synchronous={synchronous.upper()}")
    for statement in RAW_SQLITE_SCHEMA:
        con.execute(statement)
    return con


def bench_sqlite(n: int, reopen_n: int, synchronous: str) -> None:
    """Run the four workloads on SQLite."""
    print(f"SQLite (WAL, synchronous={synchronous}), {n} appends, reopen of {reopen_n}")
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite://{tmp}/kv.db?synchronous={synchronous}"
        raw = raw_sqlite(f"{tmp}/raw.db", synchronous)
        items = make_items(n)
        rows = encoded(items)

        def raw_single() -> None:
            for step, created, data in rows:
                raw.execute("BEGIN IMMEDIATE")
                raw.execute(
                    "INSERT INTO items (session_id, step, created, data) VALUES (?, ?, ?, ?)",
                    ("single", step, created, data),
                )
                raw.execute("COMMIT")

        memory = open_memory(url, "single")

        def ours_single() -> None:
            for item in make_items(n):
                memory.add_memory_item(item)

        report("SQLite: append one by one", timed(ours_single), timed(raw_single))
        memory.close()

        def raw_batches() -> None:
            for i in range(0, n, BATCH):
                raw.execute("BEGIN IMMEDIATE")
                raw.executemany(
                    "INSERT INTO items (session_id, step, created, data) VALUES (?, ?, ?, ?)",
                    [("batch", s, c, d) for s, c, d in rows[i : i + BATCH]],
                )
                raw.execute("COMMIT")

        memory = open_memory(url, "batch")

        def ours_batches() -> None:
            fresh = make_items(n)
            for i in range(0, n, BATCH):
                memory.add_memory_items(fresh[i : i + BATCH])

        report(f"SQLite: append in batches of {BATCH}", timed(ours_batches), timed(raw_batches))
        memory.close()

        big = make_items(reopen_n)
        big_rows = encoded(big)
        with open_store(url) as store:
            for i in range(0, reopen_n, 1000):
                store.append("big", big[i : i + 1000])
        raw.execute("BEGIN IMMEDIATE")
        raw.executemany(
            "INSERT INTO items (session_id, step, created, data) VALUES (?, ?, ?, ?)",
            [("big", s, c, d) for s, c, d in big_rows],
        )
        raw.execute("COMMIT")

        def raw_reopen() -> Any:
            return raw.execute(
                "SELECT seq, data FROM items WHERE session_id = ? ORDER BY seq", ("big",)
            ).fetchall()

        def raw_reopen_loads() -> Any:
            return [orjson.loads(d) for _, d in raw_reopen()]

        def ours_reopen() -> None:
            with open_memory(url, "big") as opened:
                assert len(opened) == reopen_n

        ours = timed(ours_reopen)
        report("SQLite: reopen", ours, timed(raw_reopen))
        report("SQLite: reopen (raw also orjson.loads)", ours, timed(raw_reopen_loads))

        wanted = list(range(0, reopen_n, max(reopen_n // 1000, 1)))[:1000]
        texts = orjson.dumps([step_text(s) for s in wanted]).decode()

        def raw_filter() -> Any:
            return raw.execute(
                "SELECT seq, data FROM items WHERE session_id = ? AND step IN (SELECT value FROM json_each(?)) ORDER BY seq",
                ("big", texts),
            ).fetchall()

        with open_store(url) as store:
            ours = timed(lambda: store.read("big", steps=wanted))
        report("SQLite: filter steps (1,000 steps)", ours, timed(raw_filter))
        raw.close()


# -- PostgreSQL ---------------------------------------------------------------------

RAW_PG_SCHEMA = (
    "DROP TABLE IF EXISTS raw_items",
    "CREATE TABLE raw_items (session_id text NOT NULL, seq bigint NOT NULL, step text, created double precision NOT NULL, data bytea NOT NULL, doc jsonb, PRIMARY KEY (session_id, seq))",
    "CREATE INDEX raw_items_step ON raw_items (session_id, step)",
    "CREATE INDEX raw_items_created ON raw_items (session_id, created)",
)


def bench_postgres(url: str, n: int, reopen_n: int) -> None:
    """Run the four workloads on PostgreSQL."""
    import psycopg

    print(f"PostgreSQL (autocommit, server defaults), {n} appends, reopen of {reopen_n}")
    with psycopg.connect(url, autocommit=True) as raw:
        for statement in RAW_PG_SCHEMA:
            raw.execute(statement)
        with open_store(url) as store:
            for sid in store.sessions():
                store.delete_session(sid)
        items = make_items(n)
        rows = encoded(items)
        insert = "INSERT INTO raw_items (session_id, seq, step, created, data, doc) VALUES (%s, %s, %s, %s, %s, %s::jsonb)"

        def raw_single() -> None:
            for seq, (step, created, data) in enumerate(rows):
                raw.execute(insert, ("single", seq, step, created, data, data.decode()))

        memory = open_memory(url, "single")

        def ours_single() -> None:
            for item in make_items(n):
                memory.add_memory_item(item)

        report("PostgreSQL: append one by one", timed(ours_single), timed(raw_single))
        memory.close()

        def raw_batches() -> None:
            for i in range(0, n, BATCH):
                with raw.transaction(), raw.cursor() as cur:
                    cur.executemany(
                        insert,
                        [
                            ("batch", i + k, s, c, d, d.decode())
                            for k, (s, c, d) in enumerate(rows[i : i + BATCH])
                        ],
                    )

        memory = open_memory(url, "batch")

        def ours_batches() -> None:
            fresh = make_items(n)
            for i in range(0, n, BATCH):
                memory.add_memory_items(fresh[i : i + BATCH])

        report(f"PostgreSQL: append in batches of {BATCH}", timed(ours_batches), timed(raw_batches))
        memory.close()

        big = make_items(reopen_n)
        big_rows = encoded(big)
        with open_store(url) as store:
            for i in range(0, reopen_n, 1000):
                store.append("big", big[i : i + 1000])
        with (
            raw.cursor() as cur,
            cur.copy(
                "COPY raw_items (session_id, seq, step, created, data, doc) FROM STDIN"
            ) as copy,
        ):
            for seq, (s, c, d) in enumerate(big_rows):
                copy.write_row(("big", seq, s, c, d, d.decode()))

        def raw_reopen() -> Any:
            return raw.execute(
                "SELECT seq, data FROM raw_items WHERE session_id = %s ORDER BY seq", ("big",)
            ).fetchall()

        def raw_reopen_loads() -> Any:
            return [orjson.loads(d) for _, d in raw_reopen()]

        def ours_reopen() -> None:
            with open_memory(url, "big") as opened:
                assert len(opened) == reopen_n

        ours = timed(ours_reopen)
        report("PostgreSQL: reopen", ours, timed(raw_reopen))
        report("PostgreSQL: reopen (raw also orjson.loads)", ours, timed(raw_reopen_loads))

        wanted = list(range(0, reopen_n, max(reopen_n // 1000, 1)))[:1000]
        texts = [step_text(s) for s in wanted]

        def raw_filter() -> Any:
            return raw.execute(
                "SELECT seq, data FROM raw_items WHERE session_id = %s AND step = ANY(%s) ORDER BY seq",
                ("big", texts),
            ).fetchall()

        with open_store(url) as store:
            ours = timed(lambda: store.read("big", steps=wanted))
        report("PostgreSQL: filter steps (1,000 steps)", ours, timed(raw_filter))
        raw.execute("DROP TABLE raw_items")


@contextlib.contextmanager
def postgres_url(given: str | None) -> Iterator[str | None]:
    """Yield the server URL to use: the given one, a throwaway server, or None."""
    if given:
        yield given
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.conftest import _throwaway_server

    try:
        server = _throwaway_server()
        url = server.__enter__()
    except Exception as exc:
        print(f"PostgreSQL skipped: {exc}")
        yield None
        return
    try:
        yield url
    finally:
        server.__exit__(None, None, None)


def bench_projection(url: str, label: str, n: int) -> None:
    """Time project() (keys cut in the store) against reading whole items and cutting in Python.

    Two sessions: the usual ten small fields, and the same with a 20 kB
    screenshot field, which is where cutting in the store pays.
    """
    keys = ["step", "action", "cost"]
    with open_store(url) as store:
        small = make_items(n)
        store.append("proj-small", small)
        store.append(
            "proj-big",
            [MemoryItem(**item.to_dict(), screenshot_b64="A" * 20_000) for item in small],
        )
        for session in ("proj-small", "proj-big"):

            def whole(session: str = session) -> Any:
                return [item.filter(keys) for item in store.read(session)]

            def pushed(session: str = session) -> Any:
                return store.project(session, keys)

            assert whole() == pushed()
            report(
                f"{label}: project 3 keys ({session.removeprefix('proj-')} items)",
                min(timed(pushed) for _ in range(3)),
                min(timed(whole) for _ in range(3)),
                note="  (raw = read whole items, cut in Python)",
            )


def main() -> None:
    """Parse the options and run the SQLite and PostgreSQL benchmarks."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--reopen", type=int, default=100_000)
    parser.add_argument("--synchronous", choices=["normal", "full"], default="normal")
    parser.add_argument("--postgres", default=os.environ.get("KVMEMORY_BENCH_POSTGRES_URL"))
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument(
        "--targets", action="store_true", help="print the store layer's target table"
    )
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.targets:
        targets(args.reopen, args.runs)
        return
    bench_sqlite(args.items, args.reopen, args.synchronous)
    with tempfile.TemporaryDirectory() as folder:
        bench_projection(f"sqlite://{folder}/projection.db", "SQLite", args.items)
    if not args.no_postgres:
        with postgres_url(args.postgres) as url:
            if url is not None:
                bench_postgres(url, args.items, args.reopen)
                bench_projection(url, "PostgreSQL", args.items)


# -- the target table (``--targets``) ------------------------------------------

WORDS = [
    *("report", "dialog", "window", "save", "export", "click", "button", "table"),
    *("chart", "sheet", "mail", "attach", "document", "folder", "picture", "title"),
    *("menu", "ribbon", "insert", "format", "style", "font", "color", "page"),
]


def ufo_items(n: int, start: int = 0) -> list[MemoryItem]:
    """Return ``n`` UFO-shaped steps of 1-2 kB with nested values (the issue's rows)."""
    out = []
    for row in make_ufo_rows(n, start):
        i = row["step"]
        words = [WORDS[(i * 7 + k * 3) % len(WORDS)] + str((i + k) % 50) for k in range(120)]
        row["response"] = {"comment": " ".join(words), "plan": ["save", f"export {i % 11}"]}
        out.append(MemoryItem(**row))
    return out


def cpu(fn: Callable[[], object]) -> float:
    """Return the CPU time of this process for one call of ``fn``."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def wall(fn: Callable[[], object]) -> float:
    """Return the wall time of one call of ``fn``."""
    return timed(fn)


def spread(ratios: list[float]) -> str:
    """Return ``median (min-max)`` of ratios."""
    ordered = sorted(ratios)
    return f"{ordered[len(ordered) // 2]:5.2f}x ({ordered[0]:.2f}-{ordered[-1]:.2f})"


def targets(n: int, runs: int) -> None:
    """Print the issue's target table: each workload ``runs`` times, median and spread of the ratio."""
    from agents.memory.stores._core.terms import item_terms

    print(f"load average {os.getloadavg()}; {n} UFO-shaped rows, {runs} runs")
    results: dict[str, list[float]] = {}
    items = ufo_items(n)
    print(
        f"row size: {min(len(d) for _, _, d in encoded(items[:100]))}-{max(len(d) for _, _, d in encoded(items[:100]))} bytes"
    )
    rows = encoded(items)
    texts = [item_terms(item)[0] for item in items]
    for run in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            _target_run(tmp, items, rows, texts, results)
        print(f"run {run + 1} done, load average {os.getloadavg()}")
    for name, ratios in results.items():
        print(f"{name:<80} {spread(ratios)}")


def _target_run(
    tmp: str,
    items: list[MemoryItem],
    rows: list[tuple[str | None, float, bytes]],
    texts: list[str],
    results: dict[str, list[float]],
) -> None:
    """Run each workload of the target table once in ``tmp``; add the ratios to ``results``."""
    n = len(items)
    # Batched append, keyword index on: store.append in batches of 1,000
    # against raw INSERTs of the same bytes plus an FTS5 insert of the same text.
    url = f"sqlite://{tmp}/kv.db?synchronous=normal"
    with open_store(url) as store:
        ours = cpu(lambda: [store.append("big", items[i : i + 1000]) for i in range(0, n, 1000)])
    raw = raw_sqlite(f"{tmp}/raw.db", "normal")
    raw.execute("CREATE VIRTUAL TABLE fts USING fts5(terms, tokenize='ascii')")

    def raw_append() -> None:
        for i in range(0, n, 1000):
            raw.execute("BEGIN IMMEDIATE")
            last = raw.execute("SELECT coalesce(max(seq), 0) FROM items").fetchone()[0]
            raw.executemany(
                "INSERT INTO items (session_id, step, created, data) VALUES (?, ?, ?, ?)",
                [("big", s, c, d) for s, c, d in rows[i : i + 1000]],
            )
            raw.executemany(
                "INSERT INTO fts (rowid, terms) VALUES (?, ?)",
                [(last + 1 + j, t) for j, t in enumerate(texts[i : i + 1000])],
            )
            raw.execute("COMMIT")

    raw_cpu = cpu(raw_append)
    results.setdefault("batched append, keyword index on / raw INSERT + FTS5 (CPU)", []).append(
        ours / raw_cpu
    )
    lang = _langgraph_cpu(tmp, items)
    if lang is not None:
        results.setdefault(
            "batched append / LangGraph SqliteStore.batch of PutOps (CPU)", []
        ).append(ours / lang)

    # A 1,000-step range of the session, two keys projected.
    wanted = list(range(n // 2, n // 2 + 1000))
    step_json = orjson.dumps([step_text(s) for s in wanted]).decode()
    with open_store(url) as store:
        ours = min(
            wall(lambda: store.project("big", ["action", "thought"], steps=wanted))
            for _ in range(3)
        )

        def raw_range() -> Any:
            got = raw.execute(
                "SELECT seq, data FROM items INDEXED BY items_step WHERE session_id = ?"
                " AND step IN (SELECT value FROM json_each(?)) ORDER BY seq",
                ("big", step_json),
            ).fetchall()
            return [orjson.loads(d) for _, d in got]

        raw_time = min(wall(raw_range) for _ in range(3))
    results.setdefault(
        "1,000-step range of the session, 2 keys / indexed SELECT + orjson.loads", []
    ).append(ours / raw_time)

    # Reopen the whole session (index built) against SELECT + orjson.loads.
    def reopen() -> None:
        with open_memory(url, "big") as memory:
            memory.items_of_step(0)  # the step index built

    def raw_reopen() -> Any:
        got = raw.execute(
            "SELECT seq, data FROM items WHERE session_id = ? ORDER BY seq", ("big",)
        ).fetchall()
        return [orjson.loads(d) for _, d in got]

    ours_reopen = wall(reopen)
    results.setdefault("reopen the session / SELECT + orjson.loads", []).append(
        ours_reopen / wall(raw_reopen)
    )

    def without_collector(fn: Callable[[], object]) -> float:
        # CPU with the collector off on both sides: the decoding work alone,
        # without the collections either side's allocations trigger.
        gc.collect()
        gc.disable()
        try:
            return cpu(fn)
        finally:
            gc.enable()

    results.setdefault(
        "reopen the session / the same, collector off on both sides (CPU)", []
    ).append(without_collector(reopen) / without_collector(raw_reopen))

    # Each side followed by a full collection while its result is alive: the
    # collections a side put off (a reopen pauses the collector while it
    # builds; the raw side's later ones) are paid inside the timing.
    def reopen_collected() -> None:
        with open_memory(url, "big") as memory:
            memory.items_of_step(0)
            gc.collect()

    def raw_reopen_collected() -> None:
        got = raw_reopen()
        gc.collect()
        assert got

    gc.collect()
    results.setdefault(
        "reopen the session / the same, each with a full collection after (wall)", []
    ).append(wall(reopen_collected) / wall(raw_reopen_collected))

    # One step per commit, synchronous=normal.
    few = items[: min(n, 2000)]
    few_rows = rows[: len(few)]
    with open_memory(url, "steps") as memory:
        ours = cpu(lambda: [memory.add_memory_item(item) for item in few])

    def raw_steps() -> None:
        for s, c, d in few_rows:
            raw.execute("BEGIN IMMEDIATE")
            raw.execute(
                "INSERT INTO items (session_id, step, created, data) VALUES (?, ?, ?, ?)",
                ("steps", s, c, d),
            )
            raw.execute("COMMIT")

    results.setdefault("one step per commit / BEGIN IMMEDIATE; INSERT; COMMIT (CPU)", []).append(
        ours / cpu(raw_steps)
    )
    raw.close()


def _langgraph_cpu(tmp: str, items: list[MemoryItem]) -> float | None:
    """Return the CPU time of LangGraph's SqliteStore putting the same records in batches of 1,000, or None."""
    try:
        from langgraph.store.base import PutOp
        from langgraph.store.sqlite import SqliteStore
    except ImportError:
        print("LangGraph baseline skipped: pip install langgraph langgraph-checkpoint-sqlite")
        return None
    con = sqlite3.connect(f"{tmp}/langgraph.db", check_same_thread=False, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    store = SqliteStore(con)
    store.setup()
    values = [item.to_dict() for item in items]

    def put() -> None:
        for i in range(0, len(values), 1000):
            store.batch(
                [PutOp(("big",), str(i + j), value) for j, value in enumerate(values[i : i + 1000])]
            )

    took = cpu(put)
    con.close()
    return took


if __name__ == "__main__":
    main()
