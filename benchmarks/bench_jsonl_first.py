"""The first keyword ``Store.search`` of a fresh JSONL handle against a warm one, on a session written once.

Each run opens a new handle on the session of ``--items`` UFO-shaped steps
(written once under ``--cache``, as ``bench_search_costs.py --sections
first`` writes it, and its keyword file saved by a first search), times its
first search (wall and CPU ms of this process) and the best of ``--warm``
warm ones (3; their median and slowest are printed too: a query that reads the log
whole shows there), and closes it. The first run of a process also imports what the
first query needs (numpy: some 70 ms), so it is left out of the medians.
``--mode`` and ``--where`` (a JSON filter) time the other first queries
(semantic and hybrid ones from the session's vector file, ``<sid>.vectors``,
where it is current; a filter is judged from the session's value file,
``<sid>.values``, where it is current, else a filtered semantic one walks that
ranking, reading and judging rows by their offsets, and so does a hybrid one whose
filter a sample shows many rows pass; a rarer filter reads the log whole and saves
the value file, as does a walk past an eighth of the rows). ``--no-files``
removes the session's keyword and vector files before each run (untimed),
so that its first query reads the log whole and saves them again: the cost
of the save. ``--no-values`` removes only its value file before each run, so
that a first rare-filtered query reads the log whole and saves it again:
against main, the cost of that save. The hits of the last run are printed as
a digest, to compare two branches, with the sizes of the log and its files
(the value file's among them).

Run: .venv/bin/python benchmarks/bench_jsonl_first.py [--items 100000] [--runs 7]
     [--cache DIR] [--mode keyword|semantic|hybrid] [--where JSON] [--no-files] [--no-values]
     [--warm 3] [--parts]

With many warm queries (``--warm 600``), the total CPU of a handle's warm
queries and the median of its last tenth are printed too: a handle whose
walks of a rare filter read the log whole part way shows it there (one
slow query, the rest cheaper).

``--parts`` times a session of its own embedded with ``EmbedParts()`` (a
vector per field and per window of 8 words) instead of whole items.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_search_costs
from bench_search_costs import QUERIES, cell, first_embedder, first_store, load

from agents.memory.search import EmbedParts
from agents.memory.stores import open_store


def timed(call: Callable[[], Any]) -> tuple[Any, float, float]:
    """Return a call's result, wall ms and CPU ms of this process."""
    wall, cpu = time.perf_counter(), time.process_time()
    got = call()
    return got, 1000 * (time.perf_counter() - wall), 1000 * (time.process_time() - cpu)


def main() -> None:
    """Print the first query of fresh handles against warm ones: medians (spread), and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--mode", default="keyword")
    parser.add_argument("--where", default=None)
    parser.add_argument("--no-files", action="store_true")
    parser.add_argument("--no-values", action="store_true")
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--parts", action="store_true")
    parser.add_argument(
        "--cache", default=os.path.join(tempfile.gettempdir(), "kvmemory-bench-first")
    )
    args = parser.parse_args()
    url = f"jsonl://{args.cache}/first-{args.items}"
    parts = EmbedParts() if args.parts else EmbedParts.WHOLE
    bench_search_costs.FIRST_PARTS = parts  # the session (of its own with --parts) embedded so
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    sid = first_store("jsonl", url, args.items)
    options: dict[str, Any] = {"mode": args.mode}
    if args.mode != "keyword":
        options.update(embedder=first_embedder(), parts=parts)
    if args.where is not None:
        options["where"] = json.loads(args.where)
    with open_store(url) as store:
        store.search(sid, QUERIES[1], 5, **options)  # the keyword file saved (if it was not)
    figures: dict[str, list[float]] = {"first": [], "first cpu": [], "warm": [], "warm cpu": []}
    totals: list[float] = []  # the CPU ms of all warm queries of a handle
    lasts: list[float] = []  # the median wall ms of its last tenth
    slowest: list[float] = []
    middle: list[float] = []
    found: Any = None
    folder = Path(args.cache) / f"first-{args.items}"  # the store: its sessions' files
    for run in range(args.runs + 1):
        suffixes = (".keywords", ".vectors") if args.no_files else ()
        for suffix in (*suffixes, *((".values",) if args.no_values else ())):
            (folder / f"{sid}{suffix}").unlink(missing_ok=True)
        with open_store(url) as store:

            def search(store: Any = store) -> Any:
                return store.search(sid, QUERIES[1], 5, **options)

            found, wall, cpu = timed(search)
            warms = [timed(search) for _ in range(args.warm)]
            warm = min(warms, key=lambda got: got[1])
        if run:  # the first run also imports what the first query needs
            figures["first"].append(wall)
            figures["first cpu"].append(cpu)
            figures["warm"].append(warm[1])
            figures["warm cpu"].append(warm[2])
            slowest.append(max(got[1] for got in warms))
            middle.append(statistics.median(got[1] for got in warms))
            totals.append(sum(got[2] for got in warms))
            lasts.append(statistics.median(got[1] for got in warms[-max(1, len(warms) // 10) :]))
    digest = repr([(hit.seq, hit.score, hit.item.to_dict()) for hit in found])
    print(f"== JSONL, {args.items} steps, {args.mode}, where {args.where} (load {load()})")
    for clock in ("", " cpu"):
        first, warm = figures[f"first{clock}"], figures[f"warm{clock}"]
        ratios = [f / w for f, w in zip(first, warm, strict=True)]
        print(
            f"{'wall' if not clock else 'CPU':5} first {cell(first):>16} warm {cell(warm):>16}"
            f" ratio {cell(ratios):>14} (median of ratios {statistics.median(ratios):.1f}x)"
        )
    print(f"median of {args.warm} warm queries (wall ms): {cell(middle)}")
    print(f"slowest of {args.warm} warm queries (wall ms): {cell(slowest)}")
    print(f"total CPU of {args.warm} warm queries (ms): {cell(totals)}")
    print(f"median of the last tenth of them (wall ms): {cell(lasts)}")
    print(f"hits {hashlib.sha1(digest.encode()).hexdigest()[:12]}")
    sizes = [
        f"{path.suffix} {path.stat().st_size / 1e6:.2f} MB"
        for path in sorted(folder.glob(f"{sid}.*"))
    ]
    print(f"files {', '.join(sizes)}")


if __name__ == "__main__":
    main()
