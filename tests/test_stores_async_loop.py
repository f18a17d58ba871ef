"""The async stores never stall the event loop: a 5 ms ticker beside every call is late by 50 ms at most.

How the lag is measured, so that the test holds on a loaded 2-core CI
machine and still fails on a store that runs its work on the loop. A ticker
task sleeps 5 ms again and again while one store call is awaited; each
tick's lag is how late it woke, less two kinds of lateness no store design
can prevent, each measured, not guessed:

* the time other programs held the CPUs: a tick's lag is the smaller of
  its wall-clock lateness less the time the loop's thread waited on the
  kernel's run queue, ready to run (``/proc/thread-self/schedstat``, where
  the kernel has it), and the CPU time the whole process used beyond the
  5 ms (``time.process_time``, every thread). On a quiet machine both are
  the lag itself; on a loaded one each leaves out time the process was
  kept off a CPU, and neither leaves out what the process computed while
  the loop waited.
* the collector's pauses (``gc.callbacks``): a full collection walks every
  object of the process, the test's own included, and stops every thread
  whoever triggered it; its length is set by the heap, not by the store,
  and the benchmark (``benchmarks/bench_loop_lag.py``) reports it apart.

What is left still varies with the machine's load (a thread waiting for
the interpreter lock is not on the run queue), so each call is measured up
to three times and its least largest lag is the one held to the bound:
noise comes and goes between runs, a store that stalls the loop stalls it
every time.

A store whose Python runs on the loop (PostgreSQL's greenlets on the
program's loop did, freezing it 2.2 s for an 18,000-item append) still
fails: the loop's own CPU time is lag by both measures. No wall-clock
bound on how long a call takes is asserted.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from agents.memory import MemoryItem
from agents.memory.stores import open_async_memory, open_async_store

BOUND = 0.050
TICK = 0.005
ITEMS = 8000
TRIES = 3


def _run_queue_wait() -> float:
    """Return the seconds this thread has waited on the kernel's run queue (0 where the kernel does not say)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class Ticker:
    """A task that sleeps ``TICK`` again and again and keeps each wake's lateness the store could cause."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.collecting = 0.0
        self._started = 0.0

    def _collector(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.collecting += time.perf_counter() - self._started

    @staticmethod
    def _sample(collecting: float) -> tuple[float, float, float, float]:
        return time.perf_counter(), time.process_time(), _run_queue_wait(), collecting

    async def tick(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            wall, cpu, queued, collected = self._sample(self.collecting)
            await asyncio.sleep(TICK)
            wall2, cpu2, queued2, collected2 = self._sample(self.collecting)
            # Late by the wall clock, less the time the loop's thread was ready and the kernel
            # ran something else; and at most what the process computed past the tick.
            late = wall2 - wall - TICK - (queued2 - queued)
            on_cpu = cpu2 - cpu - TICK
            self.lags.append(max(0.0, min(late, on_cpu) - (collected2 - collected)))

    async def around(self, call: Callable[[], Awaitable[Any]]) -> float:
        """Await ``call()`` with the ticker running beside it; return the largest lag seen."""
        self.lags.clear()
        stop = asyncio.Event()
        gc.callbacks.append(self._collector)
        try:
            ticking = asyncio.ensure_future(self.tick(stop))
            await asyncio.sleep(2 * TICK)
            await call()
            stop.set()
            await ticking
        finally:
            gc.callbacks.remove(self._collector)
        return max(self.lags)


def steps(n: int) -> Iterator[MemoryItem]:
    for i in range(n):
        yield MemoryItem(
            step=i,
            thought=f"looking at window {i} for the save button",
            action=f"click button {i % 97}",
            arguments={"x": i, "y": -i},
            cost=0.001,
        )


def test_no_store_call_lags_a_5_ms_ticker_over_50_ms(store_url: str) -> None:
    """A large append, a search over some fields, a full read and a memory's open each leave the loop late by at most 50 ms."""
    items = list(steps(ITEMS))

    async def main() -> dict[str, float]:
        ticker = Ticker()
        async with open_async_store(store_url) as store:

            async def reopen(session: str) -> None:
                async with open_async_memory(store, session) as memory:
                    assert len(memory) == ITEMS

            calls: dict[str, Callable[[str], Awaitable[Any]]] = {
                "append": lambda session: store.append(session, items),
                "search keys": lambda session: store.search(
                    session, "save button 5", 5, keys=["thought", "action"]
                ),
                "read": store.read,
                "open memory": reopen,
            }
            lags: dict[str, float] = {}
            for name, call in calls.items():
                lags[name] = math.inf
                for attempt in range(TRIES):
                    session = f"s{attempt}"
                    if name != "append" and attempt > 0:
                        session = "s0"
                    made = functools.partial(call, session)
                    lags[name] = min(lags[name], await ticker.around(made))
                    if lags[name] <= BOUND:
                        break
        return lags

    lags = asyncio.run(main())
    assert {name: lag for name, lag in lags.items() if lag > BOUND} == {}, lags
