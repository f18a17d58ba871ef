"""A fresh JSONL handle reading a session's log whole (``Backend.read_rows``), as a filter the value file cannot answer or any whole read does.

Each run opens a new read-only handle on ``--dir`` (a store directory, such
as the one ``bench_jsonl_first.py`` writes under its ``--cache``: ``first-100000``),
times its ``read_rows(--session)`` (wall and CPU ms of this process) and closes it. With a value file
(``<sid>.values``) current with the log, a branch that takes the file's
index files no row again; ``--no-values`` hides the file for the runs (renamed aside, then back)
to time the filing. Prints the median [min-max] of the runs after the first
(which imports), and the load average beside it.

Run: .venv/bin/python benchmarks/bench_jsonl_whole.py --dir /tmp/kvmemory-bench-first/first-100000
     [--session first-100000] [--runs 5] [--no-values]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

from agents.memory.stores import JSONLStore


@contextlib.contextmanager
def hidden(path: Path, hide: bool) -> Iterator[None]:
    """Keep ``path`` renamed aside while the block runs, if ``hide``."""
    aside = path.with_name(path.name + ".aside")
    if hide and path.exists():
        path.rename(aside)
    try:
        yield
    finally:
        if hide and aside.exists():
            aside.rename(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--session", default=None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-values", action="store_true")
    args = parser.parse_args()
    folder = Path(args.dir)
    sid = args.session or folder.name
    walls: list[float] = []
    cpus: list[float] = []
    with hidden(folder / f"{sid}.values", args.no_values):
        for run in range(args.runs + 1):
            gc.collect()
            with JSONLStore(folder, read_only=True) as store:
                wall, cpu = time.perf_counter(), time.process_time()
                rows = store.backend.read_rows(sid)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if run:
                walls.append(wall * 1000)
                cpus.append(cpu * 1000)
            del rows, store
    load = os.getloadavg()[0]

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]"

    print(f"read whole: wall {cell(walls)} ms, cpu {cell(cpus)} ms, load {load:.2f}")


if __name__ == "__main__":
    main()
