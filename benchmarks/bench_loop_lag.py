"""How late a 5 ms ticker on the event loop wakes while one async store call is awaited, per store and call.

For each store (``memory://``, SQLite, JSONL and, with ``--postgres URL``,
PostgreSQL) and each call (an append of ``--items`` items in one batch, a
search over two fields, a full read, a memory's open, all over a session of
``--items`` items), a ticker task sleeps 5 ms again and again while the call
is awaited, and keeps how late each wake was. Printed per store and call,
over ``--repeat`` runs: the median and the spread (least-most) of the
largest lag and of the 99th percentile, by the wall clock; the same
largest lag less the collector's pauses and the time the loop's thread
waited on the run queue (what ``tests/test_stores_async_loop.py`` holds to
50 ms); and the longest collector pause seen.

Two rows frame them, measured the same way in the same process:

* ``idle``: the ticker alone (the machine's own noise);
* ``GIL floor``: beside a thread running pure Python (the least lag any
  design that runs the store's work on another thread can give: the
  loop's thread waits up to a switch interval for the interpreter);
* ``on the loop``: the same call made with the sync store on the loop's
  thread, which is what PostgreSQL's async store did before (its greenlets
  ran the store's Python on the program's loop).

The load average is printed before and after: on a shared machine, read
the spreads.

Run: ``python benchmarks/bench_loop_lag.py --postgres postgresql://... --repeat 5``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from _common import postgres_schema

from agents.memory import MemoryItem
from agents.memory.stores import open_async_memory, open_async_store, open_memory, open_store

TICK = 0.005


def load() -> str:
    with open("/proc/loadavg", encoding="ascii") as stats:
        return " ".join(stats.read().split()[:3])


def _queued() -> float:
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class Ticker:
    """The ticker of ``tests/test_stores_async_loop.py``, keeping the raw lag beside the attributable one."""

    def __init__(self) -> None:
        self.raw: list[float] = []
        self.kept: list[float] = []
        self.pauses: list[float] = []
        self.collecting = 0.0
        self._started = 0.0

    def _collector(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            pause = time.perf_counter() - self._started
            self.collecting += pause
            self.pauses.append(pause)

    async def _tick(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            wall, cpu, queued, collected = (
                time.perf_counter(),
                time.process_time(),
                _queued(),
                self.collecting,
            )
            await asyncio.sleep(TICK)
            late = time.perf_counter() - wall - TICK
            self.raw.append(late)
            on_cpu = time.process_time() - cpu - TICK
            ready = late - (_queued() - queued)
            self.kept.append(max(0.0, min(ready, on_cpu) - (self.collecting - collected)))

    async def around(self, call: Callable[[], Awaitable[Any]]) -> dict[str, float]:
        self.raw, self.kept, self.pauses = [], [], []
        stop = asyncio.Event()
        gc.callbacks.append(self._collector)
        try:
            ticking = asyncio.ensure_future(self._tick(stop))
            await asyncio.sleep(2 * TICK)
            await call()
            stop.set()
            await ticking
        finally:
            gc.callbacks.remove(self._collector)
        ordered = sorted(self.raw)
        return {
            "max": ordered[-1],
            "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "kept": max(self.kept),
            "gc": max(self.pauses, default=0.0),
        }


def items(n: int, start: int = 0) -> list[MemoryItem]:
    return [
        MemoryItem(
            step=i,
            thought=f"looking at window {i} for the save button",
            action=f"click button {i % 97}",
            arguments={"x": i, "y": -i},
            cost=0.001,
        )
        for i in range(start, start + n)
    ]


@contextlib.contextmanager
def store_url(kind: str, postgres: str | None) -> Iterator[str]:
    if kind == "postgres":
        assert postgres is not None
        with postgres_schema(postgres, pgvector=False, prefix="lag") as url:
            yield url
        return
    with tempfile.TemporaryDirectory() as folder:
        yield {
            "memory": f"memory://{uuid.uuid4().hex}",
            "sqlite": f"sqlite://{folder}/lag.db",
            "jsonl": f"jsonl://{folder}/logs",
        }[kind]


def calls(store: Any, batch: list[MemoryItem], run: int) -> dict[str, Callable[[], Any]]:
    """The calls measured, on an async store (awaitables) or a sync one (plain calls)."""

    def search() -> Any:
        return store.search("s", "save button 5", 5, keys=["thought", "action"])

    return {
        "append": lambda: store.append(f"a{run}", batch),
        "search keys": search,
        "read": lambda: store.read("s"),
    }


async def one_run(kind: str, url: str, n: int, run: int) -> dict[str, dict[str, float]]:
    ticker = Ticker()
    batch = items(n)
    found: dict[str, dict[str, float]] = {}
    async with open_async_store(url) as store:
        if run == 0:
            await store.append("s", batch)
        for name, call in calls(store, batch, run).items():
            found[name] = await ticker.around(call)

        async def reopen() -> None:
            async with open_async_memory(store, "s"):
                pass

        found["open memory"] = await ticker.around(reopen)
    if kind != "postgres":  # the sync PostgreSQL store would need a loop-free thread: skip
        with open_store(url) as sync:
            for name, call in calls(sync, batch, run + 1000).items():

                async def blocking(call: Callable[[], Any] = call) -> None:
                    call()

                found[f"{name}, on the loop"] = await ticker.around(blocking)

            async def reopen_blocking() -> None:
                with open_memory(sync, "s"):
                    pass

            found["open memory, on the loop"] = await ticker.around(reopen_blocking)
    return found


async def frame(seconds: float) -> dict[str, dict[str, float]]:
    ticker = Ticker()
    found = {"idle": await ticker.around(lambda: asyncio.sleep(seconds))}
    stop = threading.Event()

    def spin() -> None:
        total = 0
        while not stop.is_set():
            total += sum(range(1000))

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        found["GIL floor"] = await ticker.around(lambda: asyncio.sleep(seconds))
    finally:
        stop.set()
        thread.join()
    return found


def show(name: str, runs: list[dict[str, float]]) -> None:
    def ms(key: str) -> str:
        values = [r[key] * 1000 for r in runs]
        return f"{statistics.median(values):7.1f} ({min(values):.1f}-{max(values):.1f})"

    print(f"  {name:26} max {ms('max')}  p99 {ms('p99')}  kept {ms('kept')}  gc {ms('gc')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=18_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", default=os.environ.get("KVMEMORY_BENCH_POSTGRES_URL"))
    parser.add_argument("--stores", default="memory,sqlite,jsonl,postgres")
    args = parser.parse_args()
    print(f"load average before: {load()}; {args.items} items, {args.repeat} runs; ms")
    print("  lag by the wall clock (max, p99), attributable (kept), longest collector pause (gc)")
    framed = [asyncio.run(frame(1.0)) for _ in range(args.repeat)]
    for name in ("idle", "GIL floor"):
        show(name, [f[name] for f in framed])
    for kind in args.stores.split(","):
        if kind == "postgres" and not args.postgres:
            print("postgres: skipped (pass --postgres URL)")
            continue
        with store_url(kind, args.postgres) as url:
            runs = [asyncio.run(one_run(kind, url, args.items, run)) for run in range(args.repeat)]
        print(f"{kind}:")
        for name in runs[0]:
            show(name, [r[name] for r in runs])
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
