"""MCP benchmark: what a tool call through ``kvmemory mcp`` costs over the store call it makes.

Starts ``kvmemory mcp`` on a fresh SQLite file over stdio, with the MCP
SDK's own client, and times ``record_step`` (one append), ``search`` (BM25
over the session) and ``recent_history`` (a window of the newest items),
call by call. The baseline is the same store call made in this process on
another fresh file: ``store.append``, ``store.search`` and ``store.tail``.
Prints the median and the spread (25th to 75th percentile) of each, and the
ratio of the medians: what the protocol, the JSON-RPC framing, the process
hop and the argument checks add.

Run: .venv/bin/python benchmarks/bench_mcp.py [--items N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from _common import make_rows
from mcp import Client, StdioServerParameters

from agents.memory import MemoryItem
from agents.memory.stores import open_store

ROOT = Path(__file__).resolve().parent.parent


def spread(times: list[float]) -> str:
    """Return ``median (p25..p75)`` of times in milliseconds."""
    q = statistics.quantiles(times, n=4)
    return f"{statistics.median(times) * 1e3:7.2f} ms ({q[0] * 1e3:.2f}..{q[2] * 1e3:.2f})"


async def timed_async(call: Callable[[int], Awaitable[Any]], n: int) -> list[float]:
    times = []
    for i in range(n):
        start = time.perf_counter()
        await call(i)
        times.append(time.perf_counter() - start)
    return times


def timed(call: Callable[[int], Any], n: int) -> list[float]:
    times = []
    for i in range(n):
        start = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    """Time the three calls both ways and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=300, help="steps recorded (default 300)")
    args = parser.parse_args()
    rows = make_rows(args.items)
    for row in rows:
        row.pop("screenshot")  # a path the server would check against an image folder
    folder = Path(tempfile.mkdtemp(prefix="kvmemory-bench-mcp-"))

    with open_store(folder / "direct.db") as store:
        direct = {
            "record_step": timed(lambda i: store.append("s", [MemoryItem(**rows[i])]), len(rows)),
            "search": timed(lambda i: store.search("s", "dialog report", 5), 100),
            "recent_history": timed(lambda i: store.tail("s", 20), 100),
        }

    served: dict[str, list[float]] = {}

    async def through_mcp() -> None:
        server = StdioServerParameters(
            command=sys.executable,
            args=["-m", "agents.cli", "mcp", str(folder / "served.db"), "--session", "s"],
            env={"PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])},
        )
        async with Client(server) as client:
            served["record_step"] = await timed_async(
                lambda i: client.call_tool("record_step", {"fields": rows[i]}), len(rows)
            )
            served["search"] = await timed_async(
                lambda i: client.call_tool("search", {"query": "dialog report", "k": 5}), 100
            )
            served["recent_history"] = await timed_async(
                lambda i: client.call_tool("recent_history", {"max_items": 20}), 100
            )

    anyio.run(through_mcp)
    print(f"{args.items} steps of 9 fields, SQLite, MCP over stdio vs the store call in process")
    for name, times in served.items():
        ratio = statistics.median(times) / statistics.median(direct[name])
        print(f"{name:15} mcp {spread(times)}  direct {spread(direct[name])}  ratio {ratio:6.1f}x")


if __name__ == "__main__":
    main()
