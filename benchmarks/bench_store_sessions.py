"""Store-wide keyword search against one search of a single session holding the same items.

The same 100,000 UFO-shaped items (``_common.make_ufo_rows``) are written
twice: as 100 sessions of 1,000 items, and as one session of 100,000 items
(SQLite: two store files; PostgreSQL: one database, the store-wide search
scoped to the 100 sessions by their id prefix). Each query is timed as ``store.search_sessions(q, 5)``
over every session of the first store and as ``store.search("all", q, 5)`` in
the second: the same corpus, the same statistics, the same hits (checked).
The table gives each query's best time of ``--repeat`` calls in each layout
and their ratio (target: at most 2x), for SQLite and PostgreSQL (a throwaway
server unless ``--postgres URL`` names one).

Run: ``python benchmarks/bench_store_sessions.py [--sessions 100] [--items 1000] [--repeat 5] [--rounds 3] [--no-sqlite] [--no-postgres]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import make_ufo_rows
from bench_stores import postgres_url

from agents.memory import MemoryItem
from agents.memory.stores import Store, open_store

QUERIES = (
    "report 42",
    "excel select",
    "step 7777",
    "button ok dialog",
    "winword wheel mouse input",
    "pdf",
)


def fill(store: Store, sessions: int, per_session: int, *, one: bool) -> None:
    """Write ``sessions * per_session`` items: as that many sessions, or as one session when ``one``."""
    for s in range(sessions):
        rows = make_ufo_rows(per_session, start=s * per_session)
        store.append("all" if one else f"run-{s:03d}", [MemoryItem(**row) for row in rows])


def fastest(fn: Callable[[], object], repeat: int) -> float:
    """Return the best of ``repeat`` timed calls, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def compare(
    label: str, wide: Store, single: Store, repeat: int, rounds: int, prefix: str | None = None
) -> None:
    """Print, per query, the store-wide and single-session times and their ratio over ``rounds`` runs."""
    n = len([sid for sid in wide.sessions() if prefix is None or sid.startswith(prefix)])
    print(f"\n{label}: store-wide over {n} sessions vs one session")
    print(f"{'query':28} {'wide ms':>9} {'single ms':>10} {'ratio':>7} {'spread':>13}")
    medians = []
    for query in QUERIES:
        got = [(h.item["step"], h.score) for h in wide.search_sessions(query, 5, prefix=prefix)]
        want = [(h.item["step"], h.score) for h in single.search("all", query, 5)]
        assert got == want, (query, got, want)
        ratios = []
        wide_ms = []
        single_ms = []
        for _ in range(rounds):
            w = fastest(lambda q=query: wide.search_sessions(q, 5, prefix=prefix), repeat)
            s = fastest(lambda q=query: single.search("all", q, 5), repeat)
            wide_ms.append(1000 * w)
            single_ms.append(1000 * s)
            ratios.append(w / s)
        ratio = statistics.median(ratios)
        medians.append(ratio)
        print(
            f"{query:28} {statistics.median(wide_ms):9.2f} {statistics.median(single_ms):10.2f}"
            f" {ratio:6.2f}x {min(ratios):5.2f}-{max(ratios):5.2f}x"
        )
    print(f"{'median over queries':28} {'':9} {'':10} {statistics.median(medians):6.2f}x")
    print(f"loadavg: {Path('/proc/loadavg').read_text().strip()}")


def main() -> None:
    """Write both layouts into SQLite (and PostgreSQL) and compare."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--items", type=int, default=1000, help="items per session")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", default=os.environ.get("KVMEMORY_BENCH_POSTGRES_URL"))
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        open_store(f"sqlite:///{tmp}/wide.db") as wide,
        open_store(f"sqlite:///{tmp}/single.db") as single,
    ):
        if not args.no_sqlite:
            fill(wide, args.sessions, args.items, one=False)
            fill(single, args.sessions, args.items, one=True)
            compare("SQLite", wide, single, args.repeat, args.rounds)
    if args.no_postgres:
        return
    with postgres_url(args.postgres) as url:
        if url is None:
            return
        # One database holds both layouts (PostgreSQL's statistics are per session anyway):
        # the store-wide search is scoped to the 100 sessions by their prefix.
        with open_store(url) as store:
            fill(store, args.sessions, args.items, one=False)
            fill(store, args.sessions, args.items, one=True)
            compare("PostgreSQL", store, store, args.repeat, args.rounds, prefix="run-")


if __name__ == "__main__":
    main()
