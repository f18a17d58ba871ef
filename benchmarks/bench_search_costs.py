"""What search costs beyond the plain query: parts against whole items, a rare filter, the first query.

Three tables, each a ratio against a baseline measured in the same process
on the same data (UFO-shaped agent steps with a page text, from
benchmarks/_search_corpus.py):

* ``parts``: embedding a session in RAM (each side with a fresh
  WordLlamaEmbedder, so neither finds words the other tokenized, or
  HashingEmbedder with ``--parts-embedder hashing``; wall and process
  CPU ms a step) and
  querying it (semantic and hybrid) with the default ``EmbedParts()``
  against ``EmbedParts.WHOLE`` (one vector a step), the two sides timed in
  turn, in RAM and in each store, and the first queries after a write by
  the handle and after a write by another handle; ``embed``: embedding the session in each store that keeps
  vectors, parts against whole;
* ``filters``: a keyword, semantic and hybrid query with a filter that 1%
  of the items pass (``$eq``, ``$eq`` on a dotted field, ``$in``, a numeric
  range: see :data:`RARE`) against the same query unfiltered, in RAM, in
  each store (memory://, SQLite, JSONL, PostgreSQL) and in a
  ``StoredMemory`` over each, the unfiltered query and each filter timed
  in turn, query by query, once a store's kept vectors are compacted (see
  :data:`WARM`); the first filtered query after opening a store
  against the same query warm and unfiltered; the query right after a
  one-step write by the handle (an agent's loop), each filter against none;
  and (``--filter-tables ...,other``) right after a one-step write by
  another handle of the store;
* ``writes``: the ``parts`` section's queries after a write (by the
  handle, by another handle) alone, in each store, with ``HashingEmbedder``;
* ``store``: each of the five queries through ``Store.search`` on the
  session of the ``first`` table (``--first-items`` steps), in each mode:
  wall and CPU milliseconds of the process (SQLite runs in it, so its CPU
  time is the work done whatever the load), median of ``--runs`` runs of
  two calls each; whole-item 64-wide vectors, or with ``--first-parts parts
  --first-dimension 256`` the default parts 256 wide (a session of
  100,000 steps whose part vectors pass the kept-vector budget);
* ``first``: the first query after opening a session of ``--first-items``
  steps against warm queries, in each mode: the store itself, a
  ``StoredMemory`` opened on it, and a ``Memory`` read from it (keyword
  only: it holds no vectors). The ``ready`` rows wait for the search index
  built ahead before the first query, as an agent's model call would.
  A ``StoredMemory`` queried at once is also timed once its build is in
  (``against warm after the build``): its warm queries right after the
  first are still answered by the store while the build runs (tens of
  seconds at 100,000 steps on busy cores), so only that row shows what
  the first query costs against every later one.
  Warm is the median of :data:`WARM_QUERIES` (three other queries of the
  five, each asked once on the same handle, each differing from the one
  before): a coded part-vector table keeps the last query's bounds, so the
  first query asked again would time that cache hit, not a warm query.
  The first query is then asked again, untimed, and its hits must not
  have changed. Each row has its wall and its process CPU ms (the CPU is
  the steadier figure on a loaded machine). The slowest of the warm
  queries is shown apart (``slowest warm vs warm``): a handle that puts
  its heavy work off to the second query (a JSONL store of part vectors
  coded them there before it kept a coded file beside its logs) has a
  warm median that hides it.
  The sessions are written once under ``--cache`` (on PostgreSQL, in the
  schema ``kvmemory_bench_first``, kept; drop it when done) and reused.

Each cell is the median over ``--runs`` runs (each the best of ``--repeat``
calls) with the spread (max - min) of the runs; the load average is printed
beside each table, as the machine may be shared.

Run: .venv/bin/python benchmarks/bench_search_costs.py [--items N] [--runs R]
     [--sections parts,embed,filters,first,store,writes] [--filters eq,dotted,in,range]
     [--stores memory,sqlite,jsonl,postgres] [--postgres URL]
PostgreSQL runs only when --postgres (or KVMEMORY_BENCH_POSTGRES_URL) names a
server; the tables go to a fresh schema that is dropped afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import postgres_schema
from _search_corpus import SHAPES, make_corpus

from agents.memory import Memory, MemoryItem
from agents.memory.search import EmbedParts, search_index
from agents.memory.stores import Store, open_store

QUERIES = (
    "the report dialog was closed",
    "press OK to save the file",
    "which window is focused",
    "export the chart as PDF",
    "where was the invoice moved to",
)
SEMANTIC = ("semantic", "hybrid")


def best_wall_cpu(call: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Return the best wall time and the best CPU time (the process's) of ``repeat`` calls, in ms (the collector off while timing).

    On a loaded machine a call's wall time swings with the scheduler (a
    thread preempted in the middle of a 3 ms query takes 15 ms); its CPU
    time much less.
    """
    walls, cpus = [], []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        gc.enable()
    return 1000 * min(walls), 1000 * min(cpus)


def load() -> str:
    """Return the load average (1, 5, 15 minutes)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def best_ms(call: Callable[[], object], repeat: int) -> float:
    """Return the best wall time of ``repeat`` calls, in ms (the collector off while timing)."""
    times = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
        gc.enable()
    return 1000 * min(times)


def cell(values: Sequence[float]) -> str:
    """Return ``median (spread)`` of some figures."""
    return f"{statistics.median(values):7.2f} ({max(values) - min(values):.2f})"


def steps(n: int) -> list[dict[str, Any]]:
    """Return ``n`` UFO-shaped steps (short ones: a 20 to 60 word page) with facts planted.

    Each of the fields the rare filters ask (:data:`RARE`) is drawn apart, so
    that each filter keeps about one item in a hundred, not the same ones.
    """
    rows, _ = make_corpus(SHAPES["short-steps"], n, min(240, n), seed=1)
    rng = random.Random(5)
    for row in rows:
        # One item in a hundred is the reviewer's: the rare filter keeps those.
        row["agent"] = "reviewer" if rng.random() < 0.01 else "host"
        row["meta"] = {"owner": "reviewer" if rng.random() < 0.01 else "host"}
        team = rng.random()
        row["team"] = "red" if team < 0.005 else "blue" if team < 0.01 else "grey"
        row["weight"] = rng.random()
    # Rarer values, drawn apart (the fields above stay as they were): 0.1% and 0.01% of the items.
    tiers = random.Random(7)
    for row in rows:
        tier = tiers.random()
        row["tier"] = "platinum" if tier < 0.0001 else "gold" if tier < 0.0011 else "plain"
    return rows


@contextlib.contextmanager
def stores(folder: str, postgres: str | None) -> Iterator[list[tuple[str, str]]]:
    """Yield ``(name, url)`` of each store to measure (PostgreSQL in a fresh schema when given)."""
    urls = [("sqlite", f"sqlite://{folder}/bench.db"), ("jsonl", f"jsonl://{folder}/logs")]
    if not postgres:
        yield urls
        return
    with postgres_schema(postgres) as url:
        yield [*urls, ("postgres", url)]


# -- parts against whole items ---------------------------------------------------------------


SIDES = (("whole", EmbedParts.WHOLE), ("parts", EmbedParts()))
"""The two sides of the parts table: one vector a step, and the default parts."""


def interleaved_ms(calls: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Return the best wall time of ``repeat`` calls of each, in ms, the calls taken in turn (a shared machine's load falls on both)."""
    return {label: wall for label, (wall, _) in interleaved_wall_cpu(calls, repeat).items()}


def interleaved_wall_cpu(
    calls: dict[str, Callable[[], object]], repeat: int
) -> dict[str, tuple[float, float]]:
    """Return the best wall time and the best process CPU time of ``repeat`` calls of each, in ms, the calls taken in turn.

    The CPU time counts every thread of the process: a product scored on
    several threads takes less wall time, not less CPU.
    """
    times: dict[str, list[tuple[float, float]]] = {label: [] for label in calls}
    for _ in range(repeat):
        for label, call in calls.items():
            times[label].append(best_wall_cpu(call, 1))
    return {
        label: (min(wall for wall, _ in values), min(cpu for _, cpu in values))
        for label, values in times.items()
    }


def parts_run(
    rows: Sequence[dict[str, Any]], urls: Sequence[tuple[str, str]], repeat: int
) -> dict[str, float]:
    """Return one run's figures: embedding time per step and query times, parts and whole.

    The queries of the two sides are timed in turn, in one process, each
    query's best of ``repeat``; the median over the queries is kept.
    """
    embedder = fresh_embedder()  # loaded and warm before either side is timed
    out: dict[str, float] = {"load": float(load().split()[0])}
    memories = {}
    for label, parts in SIDES:
        memory = Memory([MemoryItem(**row) for row in rows])
        search_index(memory, parts=parts)
        fresh = fresh_embedder()  # none starts with the other side's words tokenized
        start, cpu = time.perf_counter(), time.process_time()
        memory.index_embeddings(fresh)
        out[f"embed cpu/{label}"] = 1000 * (time.process_time() - cpu) / len(rows)
        out[f"embed/{label}"] = 1000 * (time.perf_counter() - start) / len(rows)
        memories[label] = memory
    for mode in SEMANTIC:
        figures: dict[str, list[tuple[float, float]]] = {label: [] for label in memories}
        for q in QUERIES:
            calls = {
                label: lambda memory=memory, q=q, mode=mode: memory.search(
                    q, 5, mode=mode, embedder=embedder
                )
                for label, memory in memories.items()
            }
            for label, ms in interleaved_wall_cpu(calls, repeat).items():
                figures[label].append(ms)
        for label, values in figures.items():
            out[f"RAM {mode}/{label}"] = statistics.median(wall for wall, _ in values)
            out[f"RAM {mode} cpu/{label}"] = statistics.median(cpu for _, cpu in values)
    stored = Remembered(embedder)  # each store embeds the texts the first one embedded: not timed
    for name, url in urls:
        out.update(_store_parts(name, url, rows, stored, repeat))
    out["load after"] = float(load().split()[0])
    return out


class Remembered:
    """An embedder that embeds each text once and gives its vector again after (the stores' side: not timed)."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder
        self.name: str = embedder.name
        self.dimension: int = embedder.dimension
        self.known: dict[str, Any] = {}

    def __call__(self, texts: Sequence[str]) -> Any:
        import numpy as np

        new = [text for text in dict.fromkeys(texts) if text not in self.known]
        if new:
            self.known.update(zip(new, self.embedder(new), strict=True))
        return np.stack([self.known[text] for text in texts])


def _store_parts(
    name: str, url: str, rows: Sequence[dict[str, Any]], embedder: Any, repeat: int
) -> dict[str, float]:
    """Return a store's semantic and hybrid query times over parts and over whole items, in turn.

    Each side is warmed by :data:`WARM` queries first (the first reads the
    vectors page by page, the second keeps them, the 32nd starts their
    compaction and screen on a thread, waited for before the timing). Then
    the semantic queries after a write by this handle and after one by
    another handle, each side's: the first, the second, the 32nd and the
    33rd (the compaction may still run then).
    """
    out: dict[str, float] = {}
    with open_store(url) as store:
        sid = f"parts-{uuid.uuid4().hex[:8]}"
        store.append(sid, [MemoryItem(**row) for row in rows])
        for _, parts in SIDES:
            store.index_embeddings(sid, embedder, parts=parts)

        def search(q: str, mode: str, parts: EmbedParts) -> object:
            return store.search(sid, q, 5, mode=mode, embedder=embedder, parts=parts)

        for mode in SEMANTIC:
            for _, parts in SIDES:
                for _ in range(WARM):
                    search(QUERIES[0], mode, parts)
            _compacted()
            figures: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in SIDES}
            for q in QUERIES:
                calls = {
                    label: lambda q=q, mode=mode, parts=parts: search(q, mode, parts)
                    for label, parts in SIDES
                }
                for label, ms in interleaved_wall_cpu(calls, repeat).items():
                    figures[label].append(ms)
            for label, values in figures.items():
                out[f"{name} {mode}/{label}"] = statistics.median(wall for wall, _ in values)
                out[f"{name} {mode} cpu/{label}"] = statistics.median(cpu for _, cpu in values)
        # The queries after a write by this handle, then by another handle of the store
        # (another process's writes read the same): the kept vectors follow the items written.
        for writer, label_of in ((store, "write"), (None, "other write")):
            _compacted()  # (the 32nd query after the write before started one)
            with contextlib.ExitStack() as stack:
                if writer is None:
                    writer = stack.enter_context(open_store(url))
                writer.append(sid, [MemoryItem(step=-1, thought="a step written between queries")])
                for _, parts in SIDES:
                    writer.index_embeddings(sid, embedder, parts=parts)
            for query in range(1, WARM + 2):
                for label, parts in SIDES:
                    ms = best_ms(lambda parts=parts: search(QUERIES[0], "semantic", parts), 1)
                    if query in (1, 2, WARM, WARM + 1):
                        out[f"{name} {label_of}, query {query}/{label}"] = ms
        store.delete_session(sid)
    return out


def writes_run(
    rows: Sequence[dict[str, Any]], urls: Sequence[tuple[str, str]], repeat: int
) -> dict[str, float]:
    """Return one run's semantic queries after a write by the handle and after one by another handle, parts and whole, in each store.

    The ``parts`` section's store figures (:func:`_store_parts`) without its
    RAM side and with ``HashingEmbedder`` (fast; the embedding is not what is
    timed, and its 256 dimensions are those scored), for a quick before/after.
    """
    from agents.memory.search import HashingEmbedder

    out: dict[str, float] = {"load": float(load().split()[0])}
    for name, url in urls:
        figures = _store_parts(name, url, rows, HashingEmbedder(), repeat)
        out.update({key: ms for key, ms in figures.items() if " write, " in key})
    out["load after"] = float(load().split()[0])
    return out


WARM = 32
"""Queries of a side before it is timed: read page by page, then kept, then (the 32nd) compacted and screened on a thread."""


def _compacted() -> None:
    """Wait for the threads compacting kept vector tables (they start at the 32nd query at a version)."""
    _join_threads("kvmemory-compact-vectors")


def _join_threads(name: str) -> None:
    """Wait for the library's background threads of this name."""
    for thread in threading.enumerate():
        if thread.name == name:
            thread.join()


def print_parts(runs: Sequence[dict[str, float]]) -> None:
    """Print parts against whole: ms (median and spread of the runs) and the ratio."""
    loads = [f"{run['load']:.1f}-{run['load after']:.1f}" for run in runs if "load" in run]
    print(
        f"\n== parts vs whole items (load {load()}; each run's, before-after: {', '.join(loads)})"
    )
    print(f"{'':28} {'parts ms':>16} {'whole ms':>16} {'ratio':>16}")
    for name in sorted({key.split("/")[0] for key in runs[0] if "/" in key}):
        parts = [run[f"{name}/parts"] for run in runs]
        whole = [run[f"{name}/whole"] for run in runs]
        ratios = [p / w for p, w in zip(parts, whole, strict=True)]
        unit = " (ms a step)" if "embed" in name.split() else ""
        print(f"{name + unit:28} {cell(parts):>16} {cell(whole):>16} {cell(ratios):>16}")


PARTS_EMBEDDER = "wordllama"
"""The model of the ``parts`` and ``embed`` tables: ``wordllama`` (the default embedder) or ``hashing`` (``--parts-embedder``)."""


def fresh_embedder() -> Any:
    """Return a new embedder of :data:`PARTS_EMBEDDER`, loaded and warm, with no words of the corpus tokenized yet."""
    from agents.memory.search import HashingEmbedder, WordLlamaEmbedder

    embedder = WordLlamaEmbedder() if PARTS_EMBEDDER == "wordllama" else HashingEmbedder()
    embedder(list(QUERIES))
    return embedder


def embed_run(rows: Sequence[dict[str, Any]], urls: Sequence[tuple[str, str]]) -> dict[str, float]:
    """Return one run's embedding time per step in each store that keeps vectors, parts and whole, each side with a fresh embedder."""
    out: dict[str, float] = {}
    for name, url in urls:
        if name == "jsonl":  # JSONL keeps no vectors
            continue
        with open_store(url) as store:
            sid = f"embed-{uuid.uuid4().hex[:8]}"
            store.append(sid, [MemoryItem(**row) for row in rows])
            for label, parts in (("parts", EmbedParts()), ("whole", EmbedParts.WHOLE)):
                embedder = fresh_embedder()
                start = time.perf_counter()
                store.index_embeddings(sid, embedder, parts=parts)
                out[f"{name} embed/{label}"] = 1000 * (time.perf_counter() - start) / len(rows)
            store.delete_session(sid)
    return out


# -- a rare filter -----------------------------------------------------------------------------

RARE: dict[str, dict[str, Any]] = {
    "eq": {"agent": "reviewer"},
    "dotted": {"meta.owner": "reviewer"},
    "in": {"team": {"$in": ["red", "blue"]}},
    "range": {"weight": {"$gte": 0.25, "$lt": 0.26}},
    "eq-0.1%": {"tier": "gold"},
    "eq-0.01%": {"tier": "platinum"},
    "in-0.1%": {"tier": {"$in": ["gold", "platinum"]}},
    "range-0.1%": {"weight": {"$gte": 0.25, "$lt": 0.251}},
    "gt-0.1%": {"weight": {"$gt": 0.999}},
    "gt-none": {"weight": {"$gt": 1.5}},
    "none": {"agent": "auditor"},
}
"""The filters: the first four keep about 1% of the items each (``$eq``, ``$eq`` on a dotted
field (a path into a dict), ``$in`` and a numeric range); the rarer ones (:data:`RARER`)
0.1%, 0.01% and none, measured when ``--filters`` names them."""

RARER: Final = ("eq-0.1%", "eq-0.01%", "in-0.1%", "range-0.1%", "gt-0.1%", "gt-none", "none")
"""The filters of :data:`RARE` that keep under 1% of the items: not run unless named."""


FILTER_TABLES = ("warm", "first", "write", "other")
"""The tables of the filters section: the queries warm, the first filtered query, the query after a write by the handle, and after one by another handle."""


def filters_run(
    rows: Sequence[dict[str, Any]],
    urls: Sequence[tuple[str, str]],
    repeat: int,
    modes: Sequence[str],
    kinds: Sequence[str],
    tables: Sequence[str] = FILTER_TABLES,
) -> dict[str, float]:
    """Return one run's figures: each query unfiltered and with each filter 1% of the items pass.

    ``tables`` names those measured (:data:`FILTER_TABLES`): ``warm``, the
    queries warm; ``first``, the first filtered query after opening a store;
    ``write``, the query right after a one-step write; ``other``, the
    query right after a one-step write by another handle of the store
    (another process's writes read the same).

    In RAM (``Memory``), in each store (``Store.search``) and in a
    ``StoredMemory`` over each store; ``first/...`` keys hold the first
    query of each filter kind after the store is opened (cold) beside the
    same query warm. A store that keeps vectors is queried :data:`WARM`
    times and its compaction waited for before the timing, so that no
    filter is timed beside it.
    """
    from agents.memory.search import HashingEmbedder
    from agents.memory.stores import StoredMemory

    embedder = HashingEmbedder()
    out: dict[str, float] = {}
    memory = Memory([MemoryItem(**row) for row in rows])

    def timed(prefix: str, search: Callable[[str, str, Any], object]) -> None:
        # The filters and the unfiltered query timed in turn, query by query: a shared
        # machine's load falls on every side alike.
        wheres = {"all": None, **{kind: RARE[kind] for kind in kinds}}
        for mode in modes:
            if any(search(QUERIES[0], mode, where) is None for where in wheres.values()):
                continue  # warm; None: a mode not measured
            figures: dict[str, list[float]] = {label: [] for label in wheres}
            for q in QUERIES:
                calls = {
                    label: lambda q=q, mode=mode, where=where: search(q, mode, where)
                    for label, where in wheres.items()
                }
                for label, ms in interleaved_ms(calls, repeat).items():
                    figures[label].append(ms)
            for label, values in figures.items():
                out[f"{prefix} {mode}/{label}"] = statistics.median(values)

    if "warm" not in tables:
        timed = lambda prefix, search: None  # noqa: E731  # the warm table left out
    timed(
        "RAM", lambda q, mode, where: memory.search(q, 5, mode=mode, where=where, embedder=embedder)
    )
    for name, url in urls:
        with open_store(url) as store:
            sid = f"filters-{uuid.uuid4().hex[:8]}"
            store.append(sid, [MemoryItem(**row) for row in rows])
            wanted = list(modes) if store.backend.keeps_vectors else ["keyword"]
            if len(wanted) > 1:
                store.index_embeddings(sid, embedder)
        with open_store(url) as store:  # opened again: the first filtered query is cold
            if "first" in tables:
                out.update(_first_filtered(name, store, sid, kinds))
            if len(wanted) > 1:
                # As in the parts table: the kept vectors settled (read, kept, compacted and
                # screened on a thread from the 32nd query), so that no filter is timed
                # while the compaction runs beside it and the others after.
                for _ in range(WARM):
                    store.search(sid, QUERIES[0], 5, mode="semantic", embedder=embedder)
                _compacted()
            timed(name, _store_search(store, sid, wanted, embedder))
            stored = StoredMemory(store, sid)
            timed(
                f"{name} StoredMemory",
                lambda q, mode, where, stored=stored: stored.search(
                    q, 5, mode=mode, where=where, embedder=embedder
                ),
            )
            if "write" in tables:
                out.update(_after_write(name, store, sid, wanted, kinds, embedder, rows))
            if "other" in tables:
                with open_store(url) as other:
                    out.update(_after_write(name, store, sid, wanted, kinds, embedder, rows, other))
            store.delete_session(sid)
    return out


def _first_filtered(name: str, store: Store, sid: str, kinds: Sequence[str]) -> dict[str, float]:
    """Return the first keyword query of each filter kind after opening the store, the same query warm, and the query unfiltered.

    The unfiltered query is asked (and timed) first, so that the handle's
    keyword index is read before any filter: the first filtered query then
    pays for the filter alone. Each kind filters a field of its own, so
    each is the first query on its field.
    """
    out: dict[str, float] = {}
    query = QUERIES[min(2, len(QUERIES) - 1)]
    unfiltered = best_ms(lambda: store.search(sid, query, 5), 4)
    for kind in kinds:
        out[f"first/{name} keyword/{kind} first"] = best_ms(
            lambda kind=kind: store.search(sid, query, 5, where=RARE[kind]), 1
        )
        out[f"first/{name} keyword/{kind} warm"] = best_ms(
            lambda kind=kind: store.search(sid, query, 5, where=RARE[kind]), 3
        )
        out[f"first/{name} keyword/{kind} all"] = unfiltered
    return out


AFTER_WRITE = 5
"""One-step writes before each timed query of the after-write table, per filter and mode (the median is kept)."""


def _after_write(
    name: str,
    store: Store,
    sid: str,
    wanted: Sequence[str],
    kinds: Sequence[str],
    embedder: Any,
    rows: Sequence[dict[str, Any]],
    writer: Store | None = None,
) -> dict[str, float]:
    """Return the query right after a one-step write by the handle (the agent loop), with each filter and without, in each mode.

    The filters and the unfiltered query take turns, each after a write of
    its own; each figure is the median of :data:`AFTER_WRITE` such queries.
    ``writer``: another handle of the store writes instead (keys ``other/``).
    """
    out: dict[str, float] = {}
    prefix = "write" if writer is None else "other"
    writer = store if writer is None else writer
    wheres = {"all": None, **{kind: RARE[kind] for kind in kinds}}
    query = QUERIES[min(2, len(QUERIES) - 1)]
    written = 0
    for mode in wanted:
        figures: dict[str, list[float]] = {label: [] for label in wheres}
        for _ in range(AFTER_WRITE):
            for label, where in wheres.items():
                writer.append(sid, [MemoryItem(**rows[written % len(rows)])])
                written += 1
                figures[label].append(
                    best_ms(
                        lambda mode=mode, where=where: store.search(
                            sid, query, 5, mode=mode, where=where, embedder=embedder
                        ),
                        1,
                    )
                )
        for label, values in figures.items():
            out[f"{prefix}/{name} {mode}/{label}"] = statistics.median(values)
    return out


def _store_search(
    store: Store, sid: str, wanted: Sequence[str], embedder: Any
) -> Callable[[str, str, Any], object]:
    """Return a search of one stored session in the modes ``wanted`` (the others return ``None``)."""

    def search(q: str, mode: str, where: Any) -> object:
        if mode not in wanted:
            return None
        return store.search(sid, q, 5, mode=mode, where=where, embedder=embedder)

    return search


def print_filters(runs: Sequence[dict[str, float]], kinds: Sequence[str]) -> None:
    """Print each filter (1% pass) against none: ms and the ratio; then the first filtered query against warm."""
    print(f"\n== a filter 1% of the items pass vs none (load {load()})")
    print(f"{'':36} {'1% ms':>16} {'all ms':>16} {'ratio':>16}")
    names = sorted(
        {key.split("/")[0] for key in runs[0] if not key.startswith(("first/", "write/", "other/"))}
    )
    _ratio_rows(runs, names, kinds, "")
    firsts = sorted({key.rsplit(" ", 1)[0] for key in runs[0] if key.startswith("first/")})
    if firsts:
        print(
            f"\n== the first filtered keyword query after opening vs warm and unfiltered (load {load()})"
        )
        print(f"{'':36} {'first ms':>16} {'warm ms':>16} {'all ms':>16} {'first/all':>16}")
    for key in firsts:
        first = [run[f"{key} first"] for run in runs]
        warm = [run[f"{key} warm"] for run in runs]
        every = [run[f"{key} all"] for run in runs]
        ratios = [f / a for f, a in zip(first, every, strict=True)]
        print(
            f"{key[len('first/') :]:36} {cell(first):>16} {cell(warm):>16} {cell(every):>16} {cell(ratios):>16}"
        )
    written = sorted({key.split("/")[1] for key in runs[0] if key.startswith("write/")})
    if written:
        print(f"\n== the query right after a one-step write: 1% filter vs none (load {load()})")
        print(f"{'':36} {'1% ms':>16} {'all ms':>16} {'ratio':>16}")
    _ratio_rows(runs, written, kinds, "write/")
    others = sorted({key.split("/")[1] for key in runs[0] if key.startswith("other/")})
    if others:
        print(
            f"\n== the query right after a one-step write by another handle: 1% filter vs none (load {load()})"
        )
        print(f"{'':36} {'1% ms':>16} {'all ms':>16} {'ratio':>16}")
    _ratio_rows(runs, others, kinds, "other/")


def _ratio_rows(
    runs: Sequence[dict[str, float]], names: Sequence[str], kinds: Sequence[str], prefix: str
) -> None:
    """Print a row per name and filter kind: the filtered ms, the unfiltered ms and their ratio."""
    for name in names:
        for kind in kinds:
            if f"{prefix}{name}/{kind}" not in runs[0]:
                continue
            rare = [run[f"{prefix}{name}/{kind}"] for run in runs]
            every = [run[f"{prefix}{name}/all"] for run in runs]
            ratios = [r / a for r, a in zip(rare, every, strict=True)]
            label = f"{name} {kind}"
            print(f"{label:36} {cell(rare):>16} {cell(every):>16} {cell(ratios):>16}")


# -- the first query -------------------------------------------------------------------------

FIRST_MODES = ("keyword", "semantic", "hybrid")

FIRST_DIMENSION = 64
"""The width of the first-query and store sessions' hashed vectors (``--first-dimension``)."""

FIRST_PARTS: EmbedParts = EmbedParts.WHOLE
"""How the first-query and store sessions are embedded: whole items, or ``EmbedParts()`` with ``--first-parts parts``."""


def first_embedder() -> Any:
    """Return the embedder of the first-query table: small hashed vectors, one per item (see ``first_store``)."""
    from agents.memory.search import HashingEmbedder

    return HashingEmbedder(FIRST_DIMENSION)


SNAPSHOT = "auto"  # --snapshot: what the first-query section's kept rows read (see first_store)


def first_store(name: str, url: str, n: int) -> str:
    """Return the id of the session of ``n`` steps in the store at ``url``, writing it (and its vectors) once.

    The SQLite file and the JSONL folder live under ``--cache`` and are
    reused by later runs, as writing 100,000 steps takes minutes. The
    session's keyword snapshot (SQLite) is, by ``--snapshot``: ``auto``
    (default) the one the writer's close saved on its own (written by
    this run's code: a cache written by an older kvmemory has none);
    ``saved`` saved again before each run (``Store.save_keyword_snapshot``,
    untimed); ``none`` removed before each run. The
    vectors are whole-item (``EmbedParts.WHOLE``) and 64-wide, so that a
    session of 100,000 items stays small (else :data:`FIRST_PARTS` and
    :data:`FIRST_DIMENSION`, in a file and session of their own).
    """
    sid = f"first-{n}" if FIRST_PARTS == EmbedParts.WHOLE else f"first-{n}-parts"
    with open_store(url) as store:
        if store.count(sid) != n:
            store.delete_session(sid)
            print(f"  writing {n} steps to {name} (once; kept for later runs)", flush=True)
            rows = steps(n)
            for at in range(0, n, 10_000):
                store.append(sid, [MemoryItem(**row) for row in rows[at : at + 10_000]])
            if store.keeps_vectors:
                store.index_embeddings(sid, first_embedder(), parts=FIRST_PARTS)
        path = store.backend.keyword_snapshot_path(sid)
        if SNAPSHOT == "saved":  # the postings a Memory read later starts from, saved again
            store.save_keyword_snapshot(sid)
        elif SNAPSHOT == "none" and path is not None:
            Path(path).unlink(missing_ok=True)
    # The saves the writer's close started: the coded vectors first, then (after them) the keywords.
    _join_threads("kvmemory-vector-snapshot")
    _join_threads("kvmemory-keyword-snapshot")
    if path is not None:
        print(
            f"  {name}: keyword snapshot {'kept' if os.path.exists(path) else 'none'}", flush=True
        )
    return sid


def first_run(urls: Sequence[tuple[str, str]], n: int, modes: Sequence[str]) -> dict[str, float]:
    """Return one run's figures: the first query after opening a session, and a warm one, by mode."""
    out: dict[str, float] = {}
    for name, url in urls:
        sid = first_store(name, url, n)
        with open_store(url) as store:
            vectors = store.keeps_vectors
        for mode in modes:
            if mode != "keyword" and not vectors:
                continue  # JSONL keeps no vectors: a semantic query would embed the session
            out.update(_first_figures(name, url, sid, mode))
    return out


WARM_QUERIES = (0, 2, 4)
"""The warm queries of the ``first`` table, as indices into :data:`QUERIES`: not the first query
(1), nor the one of new terms (3); each differs from the one before (see :func:`_first_and_warm`)."""


def _first_and_warm(label: str, search: Callable[[str], Any], query: str) -> dict[str, float]:
    """Return the first query's wall and CPU ms and the warm queries' medians, then check the first's hits.

    The warm queries are :data:`WARM_QUERIES`, each asked once: a coded
    part-vector table keeps the last query's bounds, so the same query
    asked again would time that cache, not a query the handle has not just
    asked. The first query is asked again afterwards (untimed): its hits
    and scores must be those it first gave.
    """
    found, first = _timed(lambda: search(query))
    warm = [_timed(lambda text=text: search(text))[1] for text in _warm_texts()]
    again = search(query)
    if _hits(again) != _hits(found):
        msg = f"{label}: the first query {query!r} asked again found other hits: {again} against {found}"
        raise SystemExit(msg)
    return {
        f"{label}/first": first[0],
        f"{label}/first cpu": first[1],
        f"{label}/warm": statistics.median(wall for wall, _ in warm),
        f"{label}/warm cpu": statistics.median(cpu for _, cpu in warm),
        # The slowest of them apart: a handle that does its heavy work at the second query (a
        # JSONL store codes the session's part vectors there) has a median that hides it.
        f"{label}/slowest warm": max(wall for wall, _ in warm),
        f"{label}/slowest warm cpu": max(cpu for _, cpu in warm),
    }


def _warm_texts() -> list[str]:
    """Return the texts of :data:`WARM_QUERIES` that ``--queries`` kept (at least one other query)."""
    texts = [QUERIES[at] for at in WARM_QUERIES if at < len(QUERIES)]
    return texts or [QUERIES[0]]


def _timed(call: Callable[[], Any]) -> tuple[Any, tuple[float, float]]:
    """Return a call's result and its wall and process CPU ms (the collector off while timing)."""
    gc.collect()
    gc.disable()
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        found = call()
        return found, (1000 * (time.perf_counter() - wall), 1000 * (time.process_time() - cpu))
    finally:
        gc.enable()


def _hits(found: Any) -> list[tuple[Any, Any, float]]:
    """Return what a search found, to compare: each hit's seq (a store's) or item (a memory's), and score."""
    return [(getattr(hit, "seq", None), getattr(hit, "item", None), hit.score) for hit in found]


def _first_figures(name: str, url: str, sid: str, mode: str) -> dict[str, float]:
    """Return one store's first and warm query times in one mode: the store, a StoredMemory, a Memory read from it."""
    from agents.memory.stores import open_memory

    out: dict[str, float] = {}
    embedder = first_embedder()
    query, other = QUERIES[1], QUERIES[3]  # the second has terms the first did not need

    def search(target: Any, q: str) -> object:
        if isinstance(target, Store):
            return target.search(sid, q, 5, mode=mode, embedder=embedder, parts=FIRST_PARTS)
        return target.search(q, 5, mode=mode, embedder=embedder)

    # The open timed too (not the process's first: first_store opened the store before, so what
    # a process does once is in neither; bench_first_process.py times a fresh process's).
    start = time.perf_counter()
    with open_store(url) as store:
        out[f"{name} store {mode}/open"] = 1000 * (time.perf_counter() - start)
        out.update(
            _first_and_warm(f"{name} store {mode}", lambda q, store=store: search(store, q), query)
        )
    for wait in (False, True):
        label = f"{name} StoredMemory {mode}" + (" ready" if wait else "")
        _settle()
        with open_store(url) as store:
            start = time.perf_counter()
            memory = open_memory(store, sid, **_whole(open_memory))
            search_index(memory, parts=FIRST_PARTS)
            out[f"{label}/open"] = 1000 * (time.perf_counter() - start)
            if wait:
                _wait_ready(memory)
            out.update(_first_and_warm(label, lambda q, memory=memory: search(memory, q), query))
            fresh = best_wall_cpu(lambda memory=memory: search(memory, other), 1)
            out[f"{label}/new terms"], out[f"{label}/new terms cpu"] = fresh
            if not wait:  # the same handle once its build is in: what every later query costs
                _wait_ready(memory)
                settled = [
                    _timed(lambda memory=memory, text=text: search(memory, text))[1]
                    for text in _warm_texts()
                ]
                out[f"{label}/settled"] = statistics.median(wall for wall, _ in settled)
                out[f"{label}/settled cpu"] = statistics.median(cpu for _, cpu in settled)
            del memory
    if mode == "keyword":  # a Memory read from the store holds no vectors: semantic would embed it
        # A plain Memory (built ahead and waited for, or not), and one read with the terms the
        # store keeps (Store.read_memory, where the store has it).
        for wait, kept in ((False, False), (True, False), (False, True)):
            label = f"{name} Memory {mode}" + (" ready" if wait else "") + (" kept" if kept else "")
            _settle()
            with open_store(url) as store:
                if kept and not hasattr(store, "read_memory"):
                    continue
                start = time.perf_counter()
                memory = store.read_memory(sid) if kept else Memory(store.read(sid))
                out[f"{label}/open"] = 1000 * (time.perf_counter() - start)
                if wait:
                    _wait_ready(memory)
                out.update(
                    _first_and_warm(label, lambda q, memory=memory: search(memory, q), query)
                )
                fresh = best_wall_cpu(lambda memory=memory: search(memory, other), 1)
                out[f"{label}/new terms"], out[f"{label}/new terms cpu"] = fresh
                del memory
    return out


def _whole(open_memory: Callable[..., Any]) -> dict[str, Any]:
    """Return ``open_memory``'s option that cuts the index's items whole (where it has one), so that the stored vectors are taken as it opens."""
    import inspect

    return (
        {"parts": EmbedParts.WHOLE} if "parts" in inspect.signature(open_memory).parameters else {}
    )


def _settle() -> None:
    """Wait for the builds ahead that memories timed before left running (a store's vectors read), and collect their garbage."""
    _join_threads("kvmemory-index-ahead")
    gc.collect()


def _wait_ready(memory: Memory) -> None:
    """Build the memory's search index ahead and wait for it (as an agent's model call would, meanwhile).

    Then collect the garbage the memories timed before left (their indexes
    hold cycles), so that the collector does not run inside the first query
    timed after the build rather than in a warm one.
    """
    index = search_index(memory)
    build = getattr(index, "build_ahead", None)
    if build is not None:
        build(wait=True)
    _settle()


def _ratio_row(label: str, shown: str, top: Sequence[float], bottom: Sequence[float]) -> None:
    """Print a first-query table row: ``shown`` (the open time), ``top`` and ``bottom`` ms per run, and their ratios."""
    ratios = [t / b for t, b in zip(top, bottom, strict=True)]
    print(f"{label:34} {shown:>16} {cell(top):>16} {cell(bottom):>16} {cell(ratios):>16}")


def print_first(runs: Sequence[dict[str, float]]) -> None:
    """Print the first query after opening against warm ones (other queries): ms and the ratio, wall then CPU."""
    print(f"\n== first query after opening vs warm (load {load()})")
    print(f"{'':34} {'open ms':>16} {'first ms':>16} {'warm ms':>16} {'ratio':>16}")
    for name in dict.fromkeys(key.split("/")[0] for key in runs[0] if "/" in key):
        opened = cell([run[f"{name}/open"] for run in runs]) if f"{name}/open" in runs[0] else ""
        for clock in ("", " cpu"):
            if f"{name}/first{clock}" not in runs[0]:
                continue
            first = [run[f"{name}/first{clock}"] for run in runs]
            warm = [run[f"{name}/warm{clock}"] for run in runs]
            _ratio_row(name if not clock else "  CPU", opened if not clock else "", first, warm)
            also = ", CPU" if clock else ""
            if f"{name}/slowest warm{clock}" in runs[0]:
                slowest = [run[f"{name}/slowest warm{clock}"] for run in runs]
                _ratio_row("  slowest warm vs warm" + also, "", slowest, warm)
            if f"{name}/settled{clock}" in runs[0]:
                settled = [run[f"{name}/settled{clock}"] for run in runs]
                _ratio_row("  against warm after the build" + also, "", first, settled)
            if f"{name}/new terms{clock}" in runs[0]:
                fresh = [run[f"{name}/new terms{clock}"] for run in runs]
                _ratio_row("  new terms" + also, "", fresh, warm)


def store_run(urls: Sequence[tuple[str, str]], n: int, modes: Sequence[str]) -> dict[str, float]:
    """Return one run's wall and CPU ms of each query through ``Store.search`` in each mode (two calls each)."""
    out: dict[str, float] = {}
    embedder = first_embedder()
    for name, url in urls:
        sid = first_store(name, url, n)
        with open_store(url) as store:
            for mode in modes:
                if mode != "keyword" and not store.keeps_vectors:
                    continue
                for query in QUERIES:
                    for call in range(2):
                        wall, cpu = time.perf_counter(), time.process_time()
                        store.search(sid, query, 5, mode=mode, embedder=embedder, parts=FIRST_PARTS)
                        key = f"{name} {mode} {query!r} {call}"
                        out[f"{key}/wall"] = 1000 * (time.perf_counter() - wall)
                        out[f"{key}/cpu"] = 1000 * (time.process_time() - cpu)
    return out


def print_store(runs: Sequence[dict[str, float]]) -> None:
    """Print each query's wall and CPU ms through Store.search: median (spread) of the runs' calls."""
    print(f"\n== Store.search on the first-query session (load {load()})")
    print(f"{'':60} {'wall ms':>16} {'CPU ms':>16}")
    for key in dict.fromkeys(key.rsplit(" ", 1)[0] for key in runs[0] if key.endswith("/wall")):
        walls = [run[f"{key} {call}/wall"] for run in runs for call in range(2)]
        cpus = [run[f"{key} {call}/cpu"] for run in runs for call in range(2)]
        print(f"{key:60} {cell(walls):>16} {cell(cpus):>16}")


def _kept_schema(postgres: str) -> str:
    """Return the URL of the schema ``kvmemory_bench_first`` on the server, made once and kept for later runs."""
    import psycopg

    with psycopg.connect(postgres, autocommit=True) as con:
        con.execute("CREATE SCHEMA IF NOT EXISTS kvmemory_bench_first")
    sep = "&" if "?" in postgres else "?"
    return f"{postgres}{sep}options=-csearch_path%3Dkvmemory_bench_first"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--first-items", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sections", default="parts,embed,filters,first")
    parser.add_argument("--modes", default="keyword,semantic,hybrid")
    parser.add_argument(
        "--filters",
        default=",".join(kind for kind in RARE if kind not in RARER),
        help="of: " + ", ".join(RARE).replace("%", "%%"),  # argparse formats help with %
    )
    parser.add_argument("--queries", type=int, default=5, help="the first N queries (of 5)")
    parser.add_argument(
        "--snapshot",
        choices=("auto", "saved", "none"),
        default="auto",
        help="the first-query session's keyword snapshot: the writer's (auto), saved again, or none",
    )
    parser.add_argument(
        "--filter-tables",
        default=",".join(FILTER_TABLES),
        help="the filters section's tables, of: " + ", ".join(FILTER_TABLES),
    )
    parser.add_argument("--postgres", default=os.environ.get("KVMEMORY_BENCH_POSTGRES_URL"))
    parser.add_argument(
        "--first-postgres-options",
        default="",
        help="appended to the first-query session's PostgreSQL URL (&vector_cache=/abs/folder)",
    )
    parser.add_argument(
        "--stores",
        default="memory,sqlite,jsonl,postgres",
        help="'' for RAM only (memory:// is measured in the filters section only)",
    )
    parser.add_argument(
        "--cache",
        default=os.path.join(tempfile.gettempdir(), "kvmemory-bench-first"),
        help="where the first-query sessions are written once and reused",
    )
    parser.add_argument(
        "--first-parts",
        choices=("whole", "parts"),
        default="whole",
        help="embed the first-query and store sessions whole, or cut into EmbedParts()",
    )
    parser.add_argument(
        "--first-dimension",
        type=int,
        default=64,
        help="the width of those sessions' hashed vectors (256: HashingEmbedder's own)",
    )
    parser.add_argument(
        "--parts-embedder",
        choices=("wordllama", "hashing"),
        default="wordllama",
        help="the model of the parts and embed tables (wordllama: the default embedder)",
    )
    args = parser.parse_args()
    sections = args.sections.split(",")
    global QUERIES, SNAPSHOT, FIRST_PARTS, FIRST_DIMENSION, PARTS_EMBEDDER
    PARTS_EMBEDDER = args.parts_embedder
    FIRST_DIMENSION = args.first_dimension
    FIRST_PARTS = EmbedParts.WHOLE if args.first_parts == "whole" else EmbedParts()
    QUERIES = QUERIES[: args.queries]
    SNAPSHOT = args.snapshot
    print(f"kvmemory search costs: {args.items} steps, {args.runs} runs; load {load()}")
    rows = steps(args.items)
    with tempfile.TemporaryDirectory() as folder, stores(folder, args.postgres) as every:
        urls = [(name, url) for name, url in every if name in args.stores.split(",")]
        if "filters" in sections:
            modes = args.modes.split(",")
            kinds = args.filters.split(",")
            memory = [("memory", f"memory://bench-{uuid.uuid4().hex[:8]}")]
            filtered = (memory if "memory" in args.stores.split(",") else []) + urls
            runs: list[dict[str, float]] = []
            for _ in range(args.runs):  # the table so far after each run, for a long one
                tables = args.filter_tables.split(",")
                runs.append(filters_run(rows, filtered, args.repeat, modes, kinds, tables))
                print_filters(runs, kinds)
                sys.stdout.flush()
        if "first" in sections or "store" in sections:
            n = args.first_items
            Path(args.cache).mkdir(parents=True, exist_ok=True)
            cut = "" if FIRST_PARTS == EmbedParts.WHOLE else "-parts"
            cut += "" if FIRST_DIMENSION == 64 else f"-{FIRST_DIMENSION}"
            cached = {
                "sqlite": f"sqlite://{args.cache}/first-{n}{cut}.db",
                "jsonl": f"jsonl://{args.cache}/first-{n}{cut}",
            }
            if args.postgres and "postgres" in args.stores.split(","):
                cached["postgres"] = _kept_schema(args.postgres) + args.first_postgres_options
            first_urls = [(name, cached.get(name, url)) for name, url in urls]
            modes = [mode for mode in args.modes.split(",") if mode in FIRST_MODES]
            if "store" in sections:
                print_store([store_run(first_urls, n, modes) for _ in range(args.runs)])
            runs = []
            for run in range(args.runs if "first" in sections else 0):
                runs.append(first_run(first_urls, n, modes))
                # Each run's figures as they come (the table waits for every run).
                print(f"  run {run + 1}: {runs[-1]} (load {load()})", file=sys.stderr, flush=True)
            if runs:
                print_first(runs)
        if "parts" in sections:
            runs = []
            for run in range(args.runs):
                runs.append(parts_run(rows, urls, args.repeat))
                print(f"  run {run + 1}: {runs[-1]}", file=sys.stderr, flush=True)
            print_parts(runs)
        if "writes" in sections:
            print_parts([writes_run(rows, urls, args.repeat) for _ in range(args.runs)])
        if "embed" in sections and urls:
            print_parts([embed_run(rows, urls) for _ in range(args.runs)])


if __name__ == "__main__":
    main()
