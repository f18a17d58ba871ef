"""How many rows a semantic query over parts scores, and what fewer rows (other cuts of an item) would cost and save.

A query over parts costs about what its distinct part vectors cost to
score: the index holds a part vector that several items share once
(``Vectors``), so the rows a query scores are the session's distinct part
texts, not its parts. Two sections, each over the tuning corpora
(benchmarks/_search_corpus.py, _hybrid_quality.py, _crowded_corpus.py,
and ``costs``: the UFO-shaped steps of bench_search_costs.py) and the
held-out families (benchmarks/corpora_heldout.py), printed apart:

``rows``
    Per corpus, with the default ``EmbedParts()``: the parts of its items
    (each item's distinct parts, what the index maps items to), the
    distinct part texts among them (the rows a query scores), the share of
    parts that repeat one before, both per item, and the items with a
    single part equal to their whole text (an item whose whole-item vector
    would be one of its parts).
``costs``
    Per corpus and per cut (``--cuts``: ``8`` the default windows of 8
    words, ``16`` windows of 16, ``field`` each field whole, ``whole`` one
    text an item), ``Memory.search`` in semantic and hybrid mode, k = 5,
    over the corpus's own queries (its planted facts asked each way; the
    five fixed queries of bench_search_costs.py for ``costs``), each cut's
    time divided by the whole-item time of the same query: every query's
    best of ``--repeat`` calls, the cuts taken in turn query by query in
    one process; median and range over the queries, then median and
    spread over ``--runs`` runs, with the load average.

What a cut does to recall is printed by ``bench_heldout.py --sections rule
--chunk-words N`` (tuning and held-out corpora apart).

Run: .venv/bin/python benchmarks/bench_parts_rows.py [--sections rows,costs] [--items 10000]
     [--corpora costs,short-steps,...] [--cuts 8,16,field] [--runs 3] [--repeat 3] [--queries 12]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpora_heldout as heldout
from bench_heldout import TUNING_KEYWORD, TUNING_RULE, corpus
from bench_search_costs import QUERIES, steps

from agents.memory import Memory, MemoryItem
from agents.memory.search import EmbedParts, WordLlamaEmbedder, search_index

CORPORA = ("costs", *TUNING_KEYWORD, *TUNING_RULE, *heldout.FAMILIES)
"""Every corpus: ``costs`` (bench_search_costs.py's steps), the tuning ones, then the held-out families."""

CUTS = {
    "8": EmbedParts(),
    "16": EmbedParts(chunk_words=16),
    "field": EmbedParts(chunk_words=None),
    "whole": EmbedParts.WHOLE,
}
"""The cuts ``--cuts`` names: the default, longer windows, fields whole, one text an item."""


def load() -> str:
    """Return the load average (1, 5, 15 minutes)."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def rows_and_queries(
    name: str, n_items: int, n_queries: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """Return a corpus's items and up to ``n_queries`` of its queries, taken from each kind in turn."""
    if name == "costs":
        return steps(n_items), list(QUERIES)
    rows, sets = corpus(name, n_items, min(200, max(n_items // 20, 10)), 1)
    kinds = list(sets.values())
    picked: list[str] = []
    for at in range(max(len(queries) for queries in kinds)):
        picked += [queries[at][0] for queries in kinds if at < len(queries)]
    return rows, picked[:n_queries]


def side(name: str) -> str:
    """Return ``held-out`` or ``tuning``."""
    return "held-out" if name in heldout.FAMILIES else "tuning"


def print_rows(names: Sequence[str], n_items: int) -> None:
    """Print the ``rows`` table: parts, distinct part texts and their share per corpus."""
    parts = EmbedParts()
    print(f"\n== rows: {n_items} items a corpus, cut {parts.label()}; load {load()}")
    print(
        f"{'corpus':<24}{'parts':>9}{'distinct':>10}{'repeat':>8}"
        f"{'parts/item':>12}{'rows/item':>11}{'one part = whole':>18}"
    )
    for name in names:
        items, _ = rows_and_queries(name, n_items, 0)
        count = 0
        distinct: set[str] = set()
        single = 0
        for row in items:
            texts = list(dict.fromkeys(parts.texts(row, None)))
            count += len(texts)
            distinct.update(texts)
            whole = EmbedParts.WHOLE.texts(row, None)
            if len(texts) == 1 and [" ".join(texts[0].split())] == [" ".join(whole[0].split())]:
                single += 1
        print(
            f"{side(name) + ' ' + name:<24}{count:>9}{len(distinct):>10}"
            f"{1 - len(distinct) / count:>8.1%}{count / len(items):>12.1f}"
            f"{len(distinct) / len(items):>11.2f}{single:>18}",
            flush=True,
        )


def cost_run(
    items: Sequence[dict[str, Any]],
    queries: Sequence[str],
    cuts: Sequence[str],
    embedder: Any,
    repeat: int,
) -> dict[str, list[float]]:
    """Return, per ``mode/cut``, each query's time over the whole-item time of the same query (every cut timed in turn)."""
    memories = {}
    for cut in dict.fromkeys([*cuts, "whole"]):
        memory = Memory([MemoryItem(**row) for row in items])
        search_index(memory, parts=CUTS[cut])
        memory.index_embeddings(embedder)
        memories[cut] = memory
    out: dict[str, list[float]] = {}
    for mode in ("semantic", "hybrid"):
        for memory in memories.values():
            for query in queries:
                memory.search(query, 5, mode=mode, embedder=embedder)  # type: ignore[arg-type]
        for query in queries:
            best = dict.fromkeys(memories, float("inf"))
            for _ in range(repeat):
                for cut, memory in memories.items():
                    gc.collect()
                    gc.disable()
                    start = time.perf_counter()
                    memory.search(query, 5, mode=mode, embedder=embedder)  # type: ignore[arg-type]
                    best[cut] = min(best[cut], time.perf_counter() - start)
                    gc.enable()
            for cut in cuts:
                out.setdefault(f"{mode}/{cut}", []).append(best[cut] / best["whole"])
            out.setdefault(f"{mode}/whole ms", []).append(1000 * best["whole"])
    return out


def print_costs(
    names: Sequence[str], n_items: int, cuts: Sequence[str], runs: int, repeat: int, n_queries: int
) -> None:
    """Print the ``costs`` table: each cut's query time over the whole-item one, per corpus and mode."""
    embedder = WordLlamaEmbedder()
    print(
        f"\n== costs: ÷ whole items, {n_items} items, k = 5, median [range] over the queries, "
        f"then median (spread) over {runs} runs; load {load()}"
    )
    print(f"{'corpus':<24}{'mode':<10}{'whole ms':>10}" + "".join(f"{cut:>24}" for cut in cuts))
    for name in names:
        items, queries = rows_and_queries(name, n_items, n_queries)
        embedder(list(queries))
        figures = [cost_run(items, queries, cuts, embedder, repeat) for _ in range(runs)]
        for mode in ("semantic", "hybrid"):
            whole = [statistics.median(run[f"{mode}/whole ms"]) for run in figures]
            cells = []
            for cut in cuts:
                per_run = [run[f"{mode}/{cut}"] for run in figures]
                medians = [statistics.median(ratios) for ratios in per_run]
                low = min(min(ratios) for ratios in per_run)
                high = max(max(ratios) for ratios in per_run)
                spread = max(medians) - min(medians)
                cells.append(
                    f"{statistics.median(medians):.2f} ({spread:.2f}) [{low:.1f}-{high:.1f}]"
                )
            print(
                f"{side(name) + ' ' + name:<24}{mode:<10}{statistics.median(whole):>10.2f}"
                + "".join(f"{cell:>24}" for cell in cells),
                flush=True,
            )
    print(f"load after: {load()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sections", default="rows,costs")
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--corpora", default=",".join(CORPORA))
    parser.add_argument("--cuts", default="8,16,field", help="of: " + ", ".join(CUTS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--queries", type=int, default=12, help="queries a corpus (costs)")
    args = parser.parse_args()
    names = args.corpora.split(",")
    sections = args.sections.split(",")
    if "rows" in sections:
        print_rows(names, args.items)
    if "costs" in sections:
        cuts = [cut for cut in args.cuts.split(",") if cut != "whole"]
        print_costs(names, args.items, cuts, args.runs, args.repeat, args.queries)


if __name__ == "__main__":
    main()
