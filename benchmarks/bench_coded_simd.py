"""A coded table's query (a session past the kept-vectors budget) with its bound by simsimd's int8 product, against numpy's ``einsum``, in turn.

Two sections, each timing the same queries with ``simsimd`` importable
and with it refused (a ``None`` in ``sys.modules``: the library's numpy
bound), alternating which goes first from round to round, and checking
that both give the same hits and floats:

- ``table``: the ``CompactVectors`` built by ``compact_table`` from the
  part vectors (``EmbedParts()``, ``HashingEmbedder(256)``) of ``--items``
  UFO-shaped steps (``bench_search_costs.steps``), its exact floats read
  from the float32 rows held in RAM: ``scores(query, k)`` alone, each
  query's bounds computed anew (``last_bounds`` cleared).
- ``store``: ``Store.search`` semantic and hybrid on a SQLite store of
  those steps (written once under ``--cache``) whose handle keeps the
  session coded: at 10,000 steps the handle's budget is set below the
  session's float32 part vectors as the tests do (``coded_sessions``); at
  100,000 the session passes the real budget (``CACHE_BYTES``).

Each figure is the median over ``--rounds`` rounds of a round's median
query (wall ms, the five queries of ``bench_search_costs.QUERIES``), with
the spread [min-max] of the rounds, and the load average at the start and
end. ``PYTHONPATH=. python benchmarks/bench_coded_simd.py [--items 10000]
[--sections table,store] [--rounds 5] [--k 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search_costs import QUERIES, steps

from agents.memory import MemoryItem
from agents.memory._vectors import best_cosines
from agents.memory.search import EmbedParts, HashingEmbedder
from agents.memory.stores import Store, open_store
from agents.memory.stores._search import compact

KERNELS = ("simsimd", "numpy")


@contextmanager
def kernel(name: str) -> Iterator[None]:
    """Bound the coded rows by ``name``: simsimd as installed, or numpy with simsimd refused."""
    saved = sys.modules.get("simsimd")
    if name == "numpy":
        sys.modules["simsimd"] = None  # type: ignore[assignment]  # import simsimd raises ImportError
    try:
        assert (compact.int8_dot() is not None) == (name == "simsimd"), name
        yield
    finally:
        if saved is None:
            sys.modules.pop("simsimd", None)
        else:
            sys.modules["simsimd"] = saved


def load() -> str:
    """Return the 1-minute load average."""
    return Path("/proc/loadavg").read_text().split()[0]


def summary(values: list[float]) -> str:
    """Return the median of ``values`` and their spread [min-max]."""
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def alternated(
    rounds: int, query: Callable[[str, int], Any], queries: int
) -> dict[str, list[float]]:
    """Return each kernel's round medians (wall ms a query), the kernels taking turns first; every answer checked the same on both."""
    out: dict[str, list[float]] = {name: [] for name in KERNELS}
    for at in range(rounds):
        answers: dict[str, list[Any]] = {}
        for name in KERNELS if at % 2 == 0 else KERNELS[::-1]:
            times, answers[name] = [], []
            with kernel(name):
                for which in range(queries):
                    start = time.perf_counter()
                    answers[name].append(query(name, which))
                    times.append(1000 * (time.perf_counter() - start))
            out[name].append(statistics.median(times))
        assert answers["simsimd"] == answers["numpy"], "the kernels gave different answers"
    return out


def part_table(n: int) -> tuple[Any, Any, HashingEmbedder]:
    """Return the coded table of the parts of ``n`` steps (its exact floats from RAM) and the embedder."""
    import numpy as np

    embedder = HashingEmbedder(256)
    parts = EmbedParts()
    texts: dict[str, int] = {}
    owners: list[int] = []
    refs: list[int] = []
    for key, row in enumerate(steps(n)):
        for text in parts.texts(row, None):
            owners.append(key)
            refs.append(texts.setdefault(text, len(texts)))
    distinct = list(texts)
    matrix = np.concatenate(
        [embedder(distinct[at : at + 20_000]) for at in range(0, len(distinct), 20_000)]
    ).astype(np.float32)
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), np.float32(1e-12))
    keys, rows = np.asarray(owners, dtype=np.int64), np.asarray(refs, dtype=np.int64)
    first = np.searchsorted(keys, np.arange(n + 1))

    def exact(query: Any, wanted: Any) -> dict[int, float]:
        got = [(key, rows[first[key] : first[key + 1]]) for key in wanted]
        flat = [key for key, at in got for _ in at]
        return best_cosines([(flat, matrix[np.concatenate([at for _, at in got])])], query, None)

    pages = (
        (keys[at : at + 65_536].tolist(), matrix[rows[at : at + 65_536]])
        for at in range(0, len(keys), 65_536)
    )
    table = compact.compact_table(pages, "m", parts, 256, 1 << 40, exact)
    return table, (len(keys), len(matrix)), embedder


def table_section(n: int, rounds: int, k: int) -> dict[str, object]:
    """Return the coded table's figures (see the module docs)."""
    import numpy as np

    start = time.perf_counter()
    table, (references, distinct), embedder = part_table(n)
    built = time.perf_counter() - start
    queries = embedder(list(QUERIES)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)

    def query(_: str, which: int) -> Any:
        table.last_bounds = None
        return table.scores(queries[which], k)

    before = load()
    figures = alternated(rounds, query, len(queries))
    return {
        "section": "table",
        "items": n,
        "parts": references,
        "coded rows": table.used,
        "distinct parts": distinct,
        "built s": round(built, 1),
        **{f"{name} ms": summary(figures[name]) for name in KERNELS},
        "load": f"{before}-{load()}",
    }


def session(n: int, cache: str) -> tuple[str, list[MemoryItem]]:
    """Return the URL of a SQLite store holding ``n`` steps embedded in parts (written once under ``cache``), and the steps."""
    os.makedirs(cache, exist_ok=True)
    url = f"sqlite://{cache}/coded-simd-{n}.db"
    items = [MemoryItem(**row) for row in steps(n)]
    with open_store(url) as store:
        if store.count("s") != n:
            store.delete_session("s")
            print(f"  writing {n} steps (once; kept for later runs)", flush=True)
            for at in range(0, n, 10_000):
                store.append("s", items[at : at + 10_000])
            store.index_embeddings("s", HashingEmbedder(256), parts=EmbedParts())
    return url, items


def kept_coded(store: Store) -> list[Any]:
    """Return the coded tables the handle keeps."""
    tables = [entry[1] for entry in store._vectors._cache._tables.values()]
    return [table for table in tables if isinstance(table, compact.CompactVectors)]


def store_section(n: int, rounds: int, k: int, cache: str) -> list[dict[str, object]]:
    """Return the SQLite store's figures, semantic then hybrid (see the module docs)."""
    url, items = session(n, cache)
    embedder = HashingEmbedder(256)
    out: list[dict[str, object]] = []
    with open_store(url) as store:
        if n < 100_000:  # below the session's float32 parts, above them coded (coded_sessions)
            texts = {text for item in items for text in EmbedParts().texts(item.to_dict(), None)}
            store._vectors._cache._budget = 2 * 256 * len(texts)
        for mode in ("semantic", "hybrid"):
            for query in QUERIES[:3]:  # read page by page, then coded: the table kept
                store.search("s", query, k, mode=mode, embedder=embedder)
            assert kept_coded(store), "the session is not kept coded"

            def search(_: str, which: int, mode: str = mode) -> Any:
                for table in kept_coded(store):
                    table.last_bounds = None
                hits = store.search("s", QUERIES[which], k, mode=mode, embedder=embedder)
                return [(hit.item["step"], hit.score) for hit in hits]

            before = load()
            figures = alternated(rounds, search, len(QUERIES))
            out.append(
                {
                    "section": "store",
                    "items": n,
                    "mode": mode,
                    **{f"{name} ms": summary(figures[name]) for name in KERNELS},
                    "load": f"{before}-{load()}",
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--sections", default="table,store")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--cache", default="/tmp/kvmemory-bench-cache")
    args = parser.parse_args()
    sections = args.sections.split(",")
    if compact.int8_dot() is None:
        sys.exit("simsimd is missing or unusable: pip install 'kvmemory[simd]'")
    if "table" in sections:
        print(json.dumps(table_section(args.items, args.rounds, args.k)), flush=True)
    if "store" in sections:
        for line in store_section(args.items, args.rounds, args.k, args.cache):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
