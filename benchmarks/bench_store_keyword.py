"""Keyword search latency of the SQLite and PostgreSQL stores against their engines queried directly.

A session of agent-step-shaped items (an action, nested arguments, an
observation of 20-120 words) whose words follow a Zipf law over a 30,000-word
vocabulary, with the common words of English at the document frequencies
agent logs show them ("is" in about half the items, "to" in 40%, "with" in
30%) and one rare word per item. Queries mix rare and common words, and some
hold common words only. Each query is timed many times; the table gives the
median and 95th percentile of ``store.search(k=5)`` next to the engine's own
BM25 queried directly over the same terms (FTS5 ``bm25()``; PostgreSQL
``ts_rank`` over the GIN index), and their ratio.

Run: ``python benchmarks/bench_store_keyword.py [--items N] [--repeat R] [--postgres URL]``.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence

from agents.memory import MemoryItem
from agents.memory.search import Tokenizer
from agents.memory.stores import PostgresStore, SQLiteStore

COMMON = {  # word: share of items holding it
    "is": 0.52,
    "to": 0.40,
    "with": 0.30,
    "the": 0.70,
    "a": 0.45,
    "on": 0.25,
    "button": 0.35,
    "click": 0.30,
    "window": 0.20,
    "file": 0.15,
}

QUERIES = (
    "is with to",
    "click the button with the mouse",
    "what is the ticket4242 number",
    "save file to the folder",
    "w17 w230 with",
    "ticket777 is",
    "w5 w9 w12 w40",
    "the",
)


def vocabulary(size: int) -> list[str]:
    """Return ``size`` content words ``w0``, ``w1``, ...: the lower the number the more common."""
    return [f"w{i}" for i in range(size)]


def make_items(n: int, seed: int = 7) -> list[MemoryItem]:
    """Return ``n`` agent-step-shaped items with Zipf-distributed words and common English words."""
    rng = random.Random(seed)
    words = vocabulary(30_000)
    cumulative = list(itertools.accumulate(1.0 / (rank + 1) ** 1.1 for rank in range(len(words))))
    items = []
    for i in range(n):
        length = rng.randint(20, 120)
        text = rng.choices(words, cum_weights=cumulative, k=length)
        for word, share in COMMON.items():
            if rng.random() < share:
                text.insert(rng.randrange(len(text) + 1), word)
        text.insert(rng.randrange(len(text) + 1), f"ticket{rng.randrange(n)}")
        items.append(
            MemoryItem(
                step=i,
                action=rng.choice(["click_input", "set_edit_text", "wheel_mouse", "summary"]),
                args={"control": rng.choice(words[:500]), "keys": [rng.choice(words[:2000])]},
                observation=" ".join(text),
            )
        )
    return items


def percentiles(samples: Sequence[float]) -> tuple[float, float]:
    """Return the median and the 95th percentile of ``samples``, in milliseconds."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1e3, p95 * 1e3


def timings(fn: Callable[[], object], repeat: int) -> list[float]:
    """Return ``repeat`` wall times of ``fn`` after one warm-up call."""
    fn()
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def table(
    label: str, search: Callable[[str], object], direct: Callable[[str], object], repeat: int
) -> None:
    """Print median and p95 of the store's search and of the direct query, query by query."""
    print(f"\n{label}: store.search(k=5) / direct engine BM25, ms (median, p95 of {repeat})")
    print(f"{'query':<36}{'store':>16}{'direct':>16}{'ratio med':>10}{'ratio p95':>10}")
    ours_all: list[float] = []
    raw_all: list[float] = []
    for query in QUERIES:
        ours = timings(lambda query=query: search(query), repeat)
        raw = timings(lambda query=query: direct(query), repeat)
        ours_all += ours
        raw_all += raw
        (om, op), (rm, rp) = percentiles(ours), percentiles(raw)
        print(
            f"{query:<36}{om:>8.2f}{op:>8.2f}{rm:>8.2f}{rp:>8.2f}{om / rm:>10.2f}{op / rp:>10.2f}"
        )
    (om, op), (rm, rp) = percentiles(ours_all), percentiles(raw_all)
    print(
        f"{'all queries':<36}{om:>8.2f}{op:>8.2f}{rm:>8.2f}{rp:>8.2f}{om / rm:>10.2f}{op / rp:>10.2f}"
    )


SQLITE_DIRECT = (
    "SELECT i.seq, i.data FROM (SELECT rowid, bm25(kvmemory_fts) AS score FROM kvmemory_fts"
    " WHERE kvmemory_fts MATCH ? ORDER BY score, rowid LIMIT 5) AS f"
    " JOIN kvmemory_items AS i ON i.seq = f.rowid ORDER BY f.score, f.rowid"
)
POSTGRES_DIRECT = (
    "SELECT seq, data FROM kvmemory_items WHERE session_id = 'run' AND terms @@ %(q)s::tsquery"
    " ORDER BY ts_rank(terms, %(q)s::tsquery) DESC, seq LIMIT 5"
)


def run_sqlite(items: list[MemoryItem], repeat: int, path: str | None) -> None:
    """Time a SQLite store of one session, then of two sessions sharing the file."""
    tokenize = Tokenizer()
    with tempfile.TemporaryDirectory() as root:
        store = SQLiteStore(path or f"{root}/bench.db", synchronous="normal")
        if not store.count("run"):
            for i in range(0, len(items), 1000):
                store.append("run", items[i : i + 1000])
        con = sqlite3.connect(store.path)
        (key,) = con.execute("SELECT key FROM kvmemory_search WHERE session_id = 'run'").fetchone()

        def direct(query: str) -> object:
            match = " OR ".join(f'"{key}\u00b7{term}"' for term in dict.fromkeys(tokenize(query)))
            return con.execute(SQLITE_DIRECT, (match,)).fetchall()

        def search(query: str) -> object:
            return store.search("run", query, 5)

        table(f"SQLite, one session of {store.count('run')} items", search, direct, repeat)
        if path is None:
            store.append("other", items[: len(items) // 10])
            table("SQLite, the same session and a second one in the file", search, direct, repeat)
        store.close()
        con.close()


def run_postgres(items: list[MemoryItem], repeat: int, url: str) -> None:
    """Time a PostgreSQL store of one session."""
    import psycopg

    tokenize = Tokenizer()
    store = PostgresStore(url, pgvector=False)  # keyword only: never create the extension
    store.delete_session("run")
    for i in range(0, len(items), 1000):
        store.append("run", items[i : i + 1000])
    pg = psycopg.connect(url, autocommit=True)
    pg.execute("VACUUM ANALYZE kvmemory_items")

    def direct(query: str) -> object:
        lexemes = " | ".join(f"'run\u00b7{term}'" for term in dict.fromkeys(tokenize(query)))
        return pg.execute(POSTGRES_DIRECT, {"q": lexemes}).fetchall()

    def search(query: str) -> object:
        return store.search("run", query, 5)

    table(f"PostgreSQL, one session of {len(items)} items", search, direct, repeat)
    store.close()
    pg.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--sqlite-path", help="reuse (or create) this SQLite file")
    parser.add_argument(
        "--postgres", help="PostgreSQL URL (a scratch database: the table is written)"
    )
    args = parser.parse_args()
    items = make_items(args.items)
    run_sqlite(items, args.repeat, args.sqlite_path)
    if args.postgres:
        run_postgres(items, args.repeat, args.postgres)


if __name__ == "__main__":
    main()
