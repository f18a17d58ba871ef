"""What writes cost a PostgreSQL store: one-step appends and a batch, wall and CPU (this process and the server's).

Each run writes to a fresh schema: one batch of ``--batch`` UFO-shaped steps
(``bench_search_costs.steps``: short steps, a 20 to 60 word page), then
``--singles`` one-step appends on top of it (an agent's loop, each its own
commit), then ``--deletes`` one-step deletes of the oldest steps. Printed per
run and as the median (spread) of ``--runs`` runs: the wall seconds, this
process's CPU and the server's CPU (every server process, from ``/proc``,
where the server runs on this machine and ``--pgdata`` names its data
folder; else not shown). The server's CPU is where the keyword index's
triggers run, and it is steadier than the wall time on a shared machine.

Run: ``PYTHONPATH=. python benchmarks/bench_pg_writes.py [--runs 3] [--batch 10000]
[--singles 1000] [--postgres URL] [--pgdata DIR]`` (no URL: a throwaway server, whose
CPU is measured).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import postgres_schema
from bench_search_costs import load, steps
from bench_stores import postgres_url

from agents.memory import MemoryItem
from agents.memory.stores import PostgresStore

_TICK = os.sysconf("SC_CLK_TCK")


def server_cpu(pgdata: str | None) -> float | None:
    """Return the CPU seconds the server's processes used so far (live ones and the exited ones reaped), or None."""
    if pgdata is None:
        return None
    try:
        root = int(Path(pgdata, "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry.name), int(fields[1])
        if pid == root:
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        elif ppid == root:
            total += int(fields[11]) + int(fields[12])
    return total / _TICK


def timed(call: Callable[[], object], pgdata: str | None) -> tuple[float, float, float | None]:
    """Return the wall seconds, this process's CPU seconds and the server's of one call."""
    server = server_cpu(pgdata)
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    after = server_cpu(pgdata)
    return wall, cpu, None if server is None or after is None else after - server


def one_run(url: str, args: argparse.Namespace) -> dict[str, tuple[float, float, float | None]]:
    """Return one run's figures: the batch, the one-step appends and the deletes."""
    rows = steps(args.batch + args.singles)
    items = [MemoryItem(**row) for row in rows]
    out = {}
    with postgres_schema(url, prefix="w") as schema, PostgresStore(schema, pgvector=False) as store:
        store.append("warm", items[:1])
        out[f"batch of {args.batch}"] = timed(
            lambda: store.append("s", items[: args.batch]), args.pgdata
        )
        singles = items[args.batch :]
        out[f"{args.singles} one-step appends"] = timed(
            lambda: [store.append("s", [item]) for item in singles], args.pgdata
        )
        out[f"{args.deletes} one-step deletes"] = timed(
            lambda: [store.delete_seqs("s", [seq]) for seq in range(1, args.deletes + 1)],
            args.pgdata,
        )
    return out


def cell(values: list[float]) -> str:
    """Return the median and the spread (max - min) of some figures."""
    return f"{statistics.median(values):.2f} ({max(values) - min(values):.2f})"


def main() -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--singles", type=int, default=1000)
    parser.add_argument("--deletes", type=int, default=100)
    parser.add_argument("--postgres", default=os.environ.get("KVMEMORY_BENCH_POSTGRES_URL"))
    parser.add_argument("--pgdata", default=None)
    args = parser.parse_args()
    with postgres_url(args.postgres) as url:
        if url is None:
            raise SystemExit("no PostgreSQL server")
        runs = []
        for run in range(args.runs):
            figures = one_run(url, args)
            runs.append(figures)
            shown = "  ".join(
                f"{name}: {w:.2f} s wall, {c:.2f} s CPU"
                + ("" if s is None else f", {s:.2f} s server")
                for name, (w, c, s) in figures.items()
            )
            print(f"run {run + 1} (load {load()}): {shown}", flush=True)
    print(f"\n== PostgreSQL writes, median (spread) of {args.runs} runs, seconds (load {load()})")
    print(f"{'':28} {'wall':>14} {'CPU here':>14} {'CPU server':>14}")
    for name in runs[0]:
        walls = [run[name][0] for run in runs]
        cpus = [run[name][1] for run in runs]
        servers = [s for run in runs if (s := run[name][2]) is not None]
        shown = cell(servers) if servers else "-"
        print(f"{name:28} {cell(walls):>14} {cell(cpus):>14} {shown:>14}")


if __name__ == "__main__":
    main()
