"""A fresh process's first ``Store.search`` against its warm ones, with the store's open time beside them.

``bench_search_costs.py --sections first`` times the first query of a
handle in a process that opened the store before (to write or check the
session) and asked other modes first: what a process does once (numpy's
import, for one) is not in its figures, or lands in another row. Here each
measurement is a process of its own that imports kvmemory, opens the store
(timed: ``open``), asks one query (``first``), then the three warm queries
of the ``first`` table (``warm``: their median; ``second``: the first of
them, the handle's second query, where work a first query leaves for later
lands; ``slowest``: the slowest of them), in one mode: what an agent
that starts, opens its store and searches pays, split between the open and
the first query, so that work moved from one to the other shows. Wall and
process CPU ms (the CPU is the steadier figure on a loaded machine: the
coded file's check runs on threads, so CPU may pass wall), median [spread]
over ``--runs`` runs, the load average beside each run.

``--kernels simsimd,numpy`` measures each store and mode with both
products of the coded rows, alternating in each run (which goes first
turns from run to run): ``numpy`` puts ``None`` in the child's
``sys.modules["simsimd"]`` before kvmemory is imported (the library's own
refusal: a ``simsimd`` that does not import), ``simsimd`` requires that it
imports (the ``simd`` extra). The default, ``installed``, leaves the child
as it is. Every run's first hits (seqs and scores) must be those of every
other run of its store and mode, whichever the kernel.

The sessions are those of ``bench_search_costs.py --sections first
--first-parts parts --first-dimension 256`` (written there once, under
``--cache`` and in PostgreSQL's schema ``kvmemory_bench_first``; written
here too where missing).

Run: .venv/bin/python benchmarks/bench_first_process.py [--stores sqlite,jsonl,postgres]
     [--modes keyword,semantic,hybrid] [--runs R] [--cache DIR] [--postgres URL]
     [--first-postgres-options '&vector_cache=/abs/folder'] [--first-items N]
     [--kernels installed|simsimd,numpy]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# bench_search_costs.QUERIES, written out: importing that module imports kvmemory, whose import
# a child process times.
QUERIES = (
    "the report dialog was closed",
    "press OK to save the file",
    "which window is focused",
    "export the chart as PDF",
    "where was the invoice moved to",
)
FIRST, WARM = 1, (0, 2, 4)  # as bench_search_costs's first table


KERNELS = ("installed", "simsimd", "numpy")
"""``--kernels``: the child as it is; with ``simsimd`` required; with ``simsimd`` refused (numpy's products)."""


def child(url: str, sid: str, mode: str, kernel: str) -> None:
    """Time, in this fresh process: kvmemory's import, the store's open, the first query and the warm ones; print them as JSON."""
    if kernel == "numpy":
        sys.modules["simsimd"] = None  # type: ignore[assignment]  # an import of it raises ImportError
    elif kernel == "simsimd":
        import importlib.util

        if importlib.util.find_spec("simsimd") is None:
            raise SystemExit("--kernels simsimd: simsimd is not installed (the simd extra)")
    clocks = (time.perf_counter, time.process_time)
    start = [clock() for clock in clocks]
    from agents.memory.search import EmbedParts, HashingEmbedder
    from agents.memory.stores import open_store

    embedder = HashingEmbedder(256)
    out: dict[str, Any] = {}

    def mark(name: str) -> None:
        now = [clock() for clock in clocks]
        out[name], out[f"{name} cpu"] = (1000 * (b - a) for a, b in zip(start, now, strict=True))
        start[:] = [clock() for clock in clocks]

    def search(text: str) -> list[tuple[int, float]]:
        found = store.search(sid, text, 5, mode=mode, embedder=embedder, parts=EmbedParts())
        return [(hit.seq, hit.score) for hit in found]

    mark("import")
    store = open_store(url)
    mark("open")
    first = search(QUERIES[FIRST])
    mark("first")
    warm = []
    for at in WARM:
        search(QUERIES[at])
        mark("warm")
        warm.append((out["warm"], out["warm cpu"]))
    out["second"], out["second cpu"] = warm[0]
    out["slowest"], out["slowest cpu"] = max(warm)
    out["warm"] = statistics.median(wall for wall, _ in warm)
    out["warm cpu"] = statistics.median(cpu for _, cpu in warm)
    if search(QUERIES[FIRST]) != first:
        raise SystemExit(f"{mode}: the first query asked again found other hits")
    store.close()
    out["hits"] = first
    out["simsimd imported"] = sys.modules.get("simsimd") is not None
    print(json.dumps(out))


def load() -> str:
    """Return the load average (1, 5, 15 minutes)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cell(values: Sequence[float]) -> str:
    """Return ``median [spread]`` of some figures."""
    return f"{statistics.median(values):7.1f} [{min(values):.0f}-{max(values):.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--stores", default="sqlite,jsonl,postgres")
    parser.add_argument("--modes", default="keyword,semantic,hybrid")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--first-items", type=int, default=100_000)
    parser.add_argument(
        "--cache", default=os.path.join(tempfile.gettempdir(), "kvmemory-bench-first")
    )
    parser.add_argument("--postgres", default=os.environ.get("KVMEMORY_BENCH_POSTGRES_URL"))
    parser.add_argument("--first-postgres-options", default="")
    parser.add_argument("--kernels", default="installed", help="installed, or of: simsimd,numpy")
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    kernels = args.kernels.split(",")
    if not set(kernels) <= set(KERNELS):
        parser.error(f"--kernels {args.kernels!r}: each of {', '.join(KERNELS)}")
    n = args.first_items
    sid = f"first-{n}-parts"
    urls = {  # bench_search_costs's cache layout (--first-parts parts --first-dimension 256)
        "sqlite": f"sqlite://{args.cache}/first-{n}-parts-256.db",
        "jsonl": f"jsonl://{args.cache}/first-{n}-parts-256",
    }
    if args.postgres:
        sep = "&" if "?" in args.postgres else "?"
        schema = f"{sep}options=-csearch_path%3Dkvmemory_bench_first"
        urls["postgres"] = args.postgres + schema + args.first_postgres_options
    chosen = [(name, urls[name]) for name in args.stores.split(",") if name in urls]
    _written(chosen, n, args)
    modes = args.modes.split(",")
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    loads: dict[tuple[str, str, str], list[float]] = {}
    hits: dict[tuple[str, str], Any] = {}
    print(f"kvmemory first query of a fresh process: {n} steps, {args.runs} runs; load {load()}")
    for run in range(args.runs):
        turned = kernels[run % len(kernels) :] + kernels[: run % len(kernels)]
        for name, url in chosen:
            for mode in modes:
                for kernel in turned:
                    done = subprocess.run(
                        [sys.executable, __file__, "--child", url, sid, mode, kernel],
                        check=True,
                        capture_output=True,
                        text=True,
                    )
                    figures = json.loads(done.stdout.strip().splitlines()[-1])
                    if hits.setdefault((name, mode), figures["hits"]) != figures["hits"]:
                        raise SystemExit(f"{name} {mode} {kernel}: other first hits than run 1's")
                    runs.setdefault((name, mode, kernel), []).append(figures)
                    now = load()
                    loads.setdefault((name, mode, kernel), []).append(float(now.split()[0]))
                    del figures["hits"]
                    print(
                        f"  run {run + 1} {name} {mode} {kernel}: {figures} (load {now})",
                        file=sys.stderr,
                    )
    print(f"\n== a fresh process: open, first query, warm (load {load()})")
    parts = ("open", "first", "second", "warm", "slowest")
    print(f"{'':30}", *(f"{part + ' ms':>18}" for part in parts), f"{'first/warm':>18}  load")
    for (name, mode, kernel), figures in runs.items():
        for clock in ("", " cpu"):
            row = [[run[f"{part}{clock}"] for run in figures] for part in parts]
            ratios = [f / w for f, w in zip(row[1], row[3], strict=True)]
            label = f"{name} {mode} {kernel}" if not clock else "  CPU"
            print(f"{label:30}", *(f"{cell(values):>18}" for values in row), end=" ")
            print(f"{statistics.median(ratios):8.2f} [{min(ratios):.2f}-{max(ratios):.2f}]", end="")
            at = loads[name, mode, kernel]
            print(f"  {min(at):.1f}-{max(at):.1f}" if not clock else "")


def _written(chosen: Sequence[tuple[str, str]], n: int, args: argparse.Namespace) -> None:
    """Write the sessions that are missing, as bench_search_costs does (its first_store)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_search_costs as costs

    from agents.memory.search import EmbedParts

    costs.FIRST_PARTS, costs.FIRST_DIMENSION = EmbedParts(), 256
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    for name, url in chosen:
        if name == "postgres":
            costs._kept_schema(args.postgres)
        costs.first_store(name, url, n)


if __name__ == "__main__":
    main()
