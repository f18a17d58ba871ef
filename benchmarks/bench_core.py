"""Core benchmark: Memory against UFO's own memory module and the raw limit, in one process.

Builds UFO-shaped rows (``step``, ``subtask``, ``action``, ``arguments``
``{x, y, button}``, an ``observation`` of about 60 characters, a ``thought``
of about 80, ``cost``, ``status``, ``application``, ``round``) and times each
workload on kvmemory, on UFO's real ``Memory`` class and on the raw
baseline, interleaved run by run so that a burst of load on a shared machine
hits all three. Times are the process's CPU time (``time.process_time``),
which waiting for a core on a shared machine does not inflate; each line
gives the median time of each and the median and spread (lowest-highest)
of the per-run ratios, with the load average beside. ``--wall`` times wall
clock instead; ``--collector`` adds, under each line, the time each side
spent in garbage collections and how many of them were full ones.

UFO's class is loaded from the file given with ``--ufo`` (UFO's
``ufo/agents/memory/memory.py``; never copied into this repository). Without
it the UFO column is skipped, except for the build, where a stand-in with
UFO's data layout is timed instead and named as such.

Run: .venv/bin/python benchmarks/bench_core.py --ufo PATH/TO/ufo/agents/memory/memory.py [--items N] [--repeat R]
     .venv/bin/python benchmarks/bench_core.py --gc-study [--ufo PATH]   (the collector's share, at N and 10 N items)

The item layouts weighed for issue 33 (an item as one object the collector
tracks, or two) are prototyped and timed by ``benchmarks/bench_item_study.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from types import ModuleType
from typing import Any

import orjson

from agents.memory import Memory, MemoryItem
from agents.memory.stores import open_memory, open_store

# The targets of issue 22: kvmemory / raw, and kvmemory / UFO where UFO is the bound.
TARGETS: dict[str, tuple[float | None, float | None]] = {
    # name: (at most this x UFO, at most this x raw)
    "build the UFO way (GC on)": (1.0, 5.0),
    "to_json_bytes, later calls": (None, 2.5),
    "to_json_bytes, first call on a fresh memory": (None, 5.0),
    "to_json (UFO's text)": (1.0, None),
    "filter_memory_from_keys (3 keys)": (None, 1.3),
    "filter_memory_from_steps (1,000 steps), warm": (None, 3.0),
    "first step lookup on a fresh memory": (None, 2.0),
    "delete 100 steps, fresh memory": (None, 40.0),
    "load from JSON": (None, 2.0),
    "reopen from SQLite, index built": (None, 1.5),
}

# The clock of every timing: CPU time unless --wall.
CLOCK: Callable[[], float] = time.process_time

_ACTIONS = ("click_input", "set_edit_text", "wheel_mouse_input", "select", "summary")
_APPS = ("WINWORD.EXE", "EXCEL.EXE", "explorer.exe", "msedge.exe")


def make_rows(n: int) -> list[dict[str, Any]]:
    """Return ``n`` UFO-shaped step rows of 10 fields (the rows of issue 22)."""
    return [
        {
            "step": i,
            "subtask": f"Save the quarterly report {i % 97} as PDF",
            "action": _ACTIONS[i % 5],
            "arguments": {"x": 100 + i % 800, "y": 40 + i % 600, "button": "left"},
            "observation": f"Window 'Report {i % 97:02d}.docx - Word' is focused; 3 controls.",
            "thought": f"Step {i}: the save dialog is open, so I press OK to close it and go on.",
            "cost": 0.0005 * (i % 13),
            "status": "CONTINUE",
            "application": _APPS[i % 4],
            "round": i // 50,
        }
        for i in range(n)
    ]


def load_ufo(path: str) -> ModuleType:
    """Import UFO's ``memory.py`` from ``path`` under a private module name."""
    spec = importlib.util.spec_from_file_location("_ufo_memory_under_test", path)
    if spec is None or spec.loader is None:
        msg = f"Cannot import UFO's memory module from {path!r}."
        raise SystemExit(msg)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks the module up while building the class
    spec.loader.exec_module(module)
    return module


class StandInItem:
    """UFO's item layout, used only when no ``--ufo`` path is given: fields as attributes plus a name list."""

    _memory_attributes: list[str] = []  # noqa: RUF012 - shared by every instance, as UFO's is

    def set_value(self, key: str, value: Any) -> None:
        setattr(self, key, value)
        if key not in self._memory_attributes:
            self._memory_attributes.append(key)

    def add_values_from_dict(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            self.set_value(key, value)


class StandInMemory:
    """UFO's memory layout, used only when no ``--ufo`` path is given: a list of items."""

    def __init__(self) -> None:
        self._content: list[StandInItem] = []

    def add_memory_item(self, item: StandInItem) -> None:
        self._content.append(item)


class CollectorClock:
    """Time spent in garbage collections, and the number of full ones, while the block runs."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = CLOCK()
            return
        self.seconds += CLOCK() - self._started
        self.full += info["generation"] == 2

    def __enter__(self) -> CollectorClock:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


class Table:
    """Times workloads interleaved run by run and prints one line each."""

    def __init__(self, repeat: int, *, only: list[str] | None, collector: bool = False) -> None:
        self.repeat = repeat
        self.only = only
        self.collector = collector
        self.rows: list[str] = []

    def time(
        self,
        name: str,
        ours: Callable[[], object],
        raw: Callable[[], object],
        ufo: Callable[[], object] | None = None,
        *,
        setup: Callable[[], object] | None = None,
    ) -> None:
        """Time ``ours``, ``ufo`` and ``raw`` ``repeat`` times each, interleaved, and print the line.

        ``setup`` runs untimed before each call of ``ours`` (a fresh memory);
        the collector is on, as in a real process, and collected before each call.
        """
        if self.only is not None and not any(text in name for text in self.only):
            return
        times: dict[str, list[float]] = {"ours": [], "ufo": [], "raw": []}
        collector: dict[str, list[tuple[float, int]]] = {"ours": [], "ufo": [], "raw": []}
        for _ in range(self.repeat):
            for label, fn in (("ours", ours), ("ufo", ufo), ("raw", raw)):
                if fn is None:
                    continue
                if setup is not None and label == "ours":
                    setup()
                gc.collect()
                with CollectorClock() as spent:
                    start = CLOCK()
                    fn()
                    times[label].append(CLOCK() - start)
                collector[label].append((spent.seconds, spent.full))
        self.print_line(name, times)
        if self.collector:
            print(
                "    of which the collector: "
                + ", ".join(
                    f"{side} {statistics.median(s for s, _ in runs) * 1e3:.1f}ms "
                    f"({statistics.median(n for _, n in runs):g} full)"
                    for side, runs in (
                        ("kvmemory", collector["ours"]),
                        ("UFO", collector["ufo"]),
                        ("raw", collector["raw"]),
                    )
                    if runs
                )
            )

    def print_line(self, name: str, times: dict[str, list[float]]) -> None:
        ours, ufo, raw = times["ours"], times["ufo"], times["raw"]
        per_ufo = [a / b for a, b in zip(ours, ufo, strict=False)] if ufo else []
        per_raw = [a / b for a, b in zip(ours, raw, strict=True)]
        target_ufo, target_raw = TARGETS.get(name, (None, None))
        load = "/".join(f"{x:.1f}" for x in os.getloadavg())
        line = (
            f"{name:45s} {ms(ours)} {ms(ufo) if ufo else ' ' * 10} {ms(raw)}"
            f"  {spread(per_ufo, target_ufo)}  {spread(per_raw, target_raw)}  load {load}"
        )
        print(line, flush=True)
        self.rows.append(line)


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:8.1f}ms"


def spread(ratios: list[float], target: float | None) -> str:
    """Return 'median [lowest-highest] target verdict' for per-run ratios."""
    if not ratios:
        return f"{'-':>20s}{'':13s}"
    mid = statistics.median(ratios)
    text = f"{mid:6.2f} [{min(ratios):5.2f}-{max(ratios):5.2f}]"
    if target is None:
        return f"{text}{'':13s}"
    verdict = "ok" if mid <= target else "MISSES"
    return f"{text} <={target:<4g} {verdict:6s}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ufo", metavar="PATH", help="UFO's ufo/agents/memory/memory.py")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--collector",
        action="store_true",
        help="also print the time each side spent in garbage collections, and how many were full",
    )
    parser.add_argument("--wall", action="store_true", help="time wall clock, not CPU time")
    parser.add_argument(
        "--only",
        metavar="TEXT",
        action="append",
        help="run only the workloads whose name holds TEXT (repeat it for several)",
    )
    parser.add_argument(
        "--gc-study", action="store_true", help="measure the collector's share instead"
    )
    args = parser.parse_args()
    if args.wall:
        global CLOCK
        CLOCK = time.perf_counter
    ufo = load_ufo(args.ufo) if args.ufo else None
    if args.gc_study:
        gc_study(ufo, [args.items, 10 * args.items])
        return
    if args.repeat < 5:
        print("note: fewer than 5 runs; the spread says little on a shared machine")
    if ufo is None:
        print(
            "No --ufo PATH given: the UFO column is skipped (the build is compared with a "
            "stand-in of UFO's layout instead). Pass UFO's ufo/agents/memory/memory.py to "
            "measure against UFO's real class."
        )
    run(make_rows(args.items), args.repeat, ufo, args.only, collector=args.collector)


def run(
    rows: list[dict[str, Any]],
    repeat: int,
    ufo: ModuleType | None,
    only: list[str] | None,
    *,
    collector: bool = False,
) -> None:
    """Time every workload on ``rows`` and print the table."""
    n = len(rows)
    rng = random.Random(7)
    keys = ["step", "thought", "action"]
    steps = rng.sample(range(n), 1000)
    doomed = rng.sample(range(n), 100)
    print(
        f"\n{n:,} UFO-shaped items of {len(rows[0])} fields; median of {repeat} interleaved runs "
        f"each, {'wall' if CLOCK is time.perf_counter else 'CPU'} time, Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, GC on"
    )
    print(
        f"{'workload':45s} {'kvmemory':>10s} {'UFO':>10s} {'raw':>10s}"
        f"  {'kvmemory/UFO [spread] target':33s}  {'kvmemory/raw [spread] target':33s}"
    )
    table = Table(repeat, only=only, collector=collector)
    UfoMemory: Any = ufo.Memory if ufo is not None else StandInMemory
    UfoItem: Any = ufo.MemoryItem if ufo is not None else StandInItem

    def build(memory_class: Any, item_class: Any) -> Any:
        memory = memory_class()
        for row in rows:
            item = item_class()
            item.add_values_from_dict(row)
            memory.add_memory_item(item)
        return memory

    table.time(
        "build the UFO way (GC on)" if ufo is not None else "build the UFO way (GC on), stand-in",
        lambda: build(Memory, MemoryItem),
        lambda: [dict(r) for r in rows],
        lambda: build(UfoMemory, UfoItem),
    )

    fresh: list[Memory] = []

    def new_memory() -> None:
        fresh[:] = [build(Memory, MemoryItem)]

    ufo_memory = build(UfoMemory, UfoItem) if ufo is not None else None

    def ufo_call(name: str, *args: Any) -> Callable[[], object] | None:
        if ufo_memory is None:
            return None
        method = getattr(ufo_memory, name)
        return lambda: method(*args)

    table.time(
        "to_json_bytes, first call on a fresh memory",
        lambda: fresh[0].to_json_bytes(),
        lambda: orjson.dumps(rows),
        ufo_call("to_json"),
        setup=new_memory,
    )
    memory = build(Memory, MemoryItem)
    memory.to_json_bytes()
    table.time(
        "to_json_bytes, later calls",
        memory.to_json_bytes,
        lambda: orjson.dumps(rows),
        ufo_call("to_json"),
    )
    table.time(
        "to_json (UFO's text)", memory.to_json, lambda: orjson.dumps(rows), ufo_call("to_json")
    )
    if ufo_memory is not None:
        assert memory.to_json() == ufo_memory.to_json(), "to_json must write UFO's text"

    table.time(
        "filter_memory_from_keys (3 keys)",
        lambda: memory.filter_memory_from_keys(keys),
        lambda: [{k: r[k] for k in keys if k in r} for r in rows],
        ufo_call("filter_memory_from_keys", keys),
    )

    def dict_index() -> dict[Any, dict[str, Any]]:
        return {row["step"]: row for row in rows}

    index = dict_index()
    memory.filter_memory_from_steps([0])  # builds the step index once
    table.time(
        "filter_memory_from_steps (1,000 steps), warm",
        lambda: memory.filter_memory_from_steps(steps),
        lambda: [dict(index[step]) for step in sorted(steps) if step in index],
        ufo_call("filter_memory_from_steps", steps),
    )
    table.time(
        "first step lookup on a fresh memory",
        lambda: fresh[0].filter_memory_from_steps([0]),
        dict_index,
        ufo_call("filter_memory_from_steps", [0]),
        setup=new_memory,
    )

    def delete_ours() -> None:
        for step in doomed:
            fresh[0].delete_memory_item(step)

    table.time(
        "delete 100 steps, fresh memory",
        delete_ours,
        lambda: [row for row in rows if row["step"] != doomed[0]],
        (lambda: fresh_ufo_delete(UfoMemory, ufo_memory, doomed)) if ufo_memory else None,
        setup=new_memory,
    )

    data = memory.to_json_bytes()
    text = memory.to_json()

    def ufo_load() -> object:
        loaded = UfoMemory()
        loaded.from_list_of_dicts(json.loads(text))
        return loaded

    table.time(
        "load from JSON",
        lambda: Memory.from_json(data),
        lambda: orjson.loads(data),
        ufo_load if ufo is not None else None,
    )

    if only is not None and not any(text in "reopen from SQLite, index built" for text in only):
        return  # the store and the byte count are set up only for the rows they time
    # Reopening a stored session: open_memory decodes every row and the first
    # step lookup builds the index, against reading the rows and orjson.loads.
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "reopen.db")
        with open_store(path) as store:
            store.append("s", memory.content)
        with contextlib.closing(sqlite3.connect(path)) as con:

            def raw_rows() -> list[Any]:
                found = con.execute(
                    "SELECT seq, data FROM kvmemory_items WHERE session_id = ? ORDER BY seq",
                    ("s",),
                ).fetchall()
                return [orjson.loads(data) for _, data in found]

            def reopen() -> None:
                with open_memory(path, "s") as opened:
                    opened.filter_memory_from_steps([0])

            table.time("reopen from SQLite, index built", reopen, raw_rows)

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = build(Memory, MemoryItem)
    ours_bytes = tracemalloc.get_traced_memory()[0] - before
    del kept
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    kept_raw = [dict(r) for r in rows]
    raw_bytes = tracemalloc.get_traced_memory()[0] - before
    del kept_raw
    tracemalloc.stop()
    print(
        f"{'bytes per item':45s} {ours_bytes / n:8.0f} B {'':10s} {raw_bytes / n:8.0f} B"
        f"  {'':33s}  {ours_bytes / raw_bytes:6.2f}"
    )


def fresh_ufo_delete(memory_class: Any, built: Any, doomed: list[int]) -> None:
    """Delete ``doomed`` steps from a new UFO memory holding the built items.

    The copy of the item list is timed with the deletes: one pass against
    the hundred passes of the deletes, under 1% of the time.
    """
    fresh_ufo = memory_class()
    fresh_ufo.load(list(built.content))
    for step in doomed:
        fresh_ufo.delete_memory_item(step)


class OneObjectItem(dict):  # type: ignore[type-arg]  # a prototype, for --gc-study only
    """A prototype of an item as one object (a dict subclass with slots), to measure that design.

    Not a design kvmemory can take without changing what users see (an item
    would be a ``dict``, its methods would shadow fields such as ``items``);
    it shows what the collector costs a build when an item is one object.
    """

    __slots__ = ("_owners", "_plain")

    def __init__(self) -> None:
        self._owners = None
        self._plain = None

    add_values_from_dict = dict.update


class OneObjectMemory:
    """The memory side of the prototype: a list, as UFO's."""

    def __init__(self) -> None:
        self.content: list[Any] = []

    def add_memory_item(self, item: Any) -> None:
        self.content.append(item)


def gc_study(ufo: ModuleType | None, sizes: list[int]) -> None:
    """Print what the collector costs builds and first exports, and what gc.freeze() saves after a load."""
    impls: list[tuple[str, Any, Any]] = [("kvmemory", Memory, MemoryItem)]
    if ufo is not None:
        impls.append(("UFO", ufo.Memory, ufo.MemoryItem))
    impls.append(("one-object item (prototype)", OneObjectMemory, OneObjectItem))
    print(
        f"The collector's share: one run each, {'wall' if CLOCK is time.perf_counter else 'CPU'} "
        f"time, Python {sys.version.split()[0]}, load {'/'.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    for n in sizes:
        rows = make_rows(n)
        for name, memory_class, item_class in impls:
            line = f"  {n:>9,} items, {name:28s}"
            for gc_on in (False, True):
                gc.collect()
                if not gc_on:
                    gc.disable()
                start = CLOCK()
                memory = memory_class()
                for row in rows:
                    item = item_class()
                    item.add_values_from_dict(row)
                    memory.add_memory_item(item)
                built = CLOCK() - start
                line += f"  add GC {'on ' if gc_on else 'off'} {built / n * 1e6:5.2f} us"
                if memory_class is Memory:
                    start = CLOCK()
                    memory.to_json_bytes()
                    line += f", first export {(CLOCK() - start) / n * 1e6:5.2f} us"
                gc.enable()
                del memory
            print(line + " an item", flush=True)
        data = orjson.dumps(rows)
        line = f"  {n:>9,} items, load from JSON{'':15s}"
        for gc_on in (False, True):
            times = []
            for load in (orjson.loads, Memory.from_json):
                gc.collect()
                if not gc_on:
                    gc.disable()
                start = CLOCK()
                loaded = load(data)
                times.append(CLOCK() - start)
                gc.enable()
                del loaded
            line += (
                f"  GC {'on ' if gc_on else 'off'} {times[1] / n * 1e6:5.2f} us an item, "
                f"{times[1] / times[0]:4.2f}x orjson.loads"
            )
        print(line, flush=True)
        # A long-lived memory, loaded once; then a workload that allocates
        # (building a second memory of the same rows) and a full collection.
        memory = Memory.from_json(data)
        del data
        for frozen in (False, True):
            gc.collect()
            if frozen:
                gc.freeze()
            start = CLOCK()
            second = Memory()
            for row in rows:
                item = MemoryItem()
                item.add_values_from_dict(row)
                second.add_memory_item(item)
            built = CLOCK() - start
            del second
            start = CLOCK()
            gc.collect()
            full = CLOCK() - start
            if frozen:
                gc.unfreeze()
            print(
                f"  {n:>9,} items loaded, then gc.freeze() {'yes' if frozen else 'no '}: "
                f"adding {n:,} more {built / n * 1e6:5.2f} us an item, a full gc.collect() {full * 1e3:7.1f} ms",
                flush=True,
            )
        del memory, rows


if __name__ == "__main__":
    main()
