"""Core benchmark: Memory against the raw limit, measured in one process.

Builds 100,000 items and times, best of several runs, each core operation
next to the plain-Python or orjson baseline doing the same work. Two row
shapes: UFO-shaped rows (an ``arguments`` dict, lists of controls, as UFO
records a step) and scalar-only rows of 10 fields. Prints one line per
operation: both times, their ratio (kvmemory / raw) and the target ratio.

Where the target is "no slower than UFO", the baseline is a stand-in written
here with UFO's data layout (each field an instance attribute plus a list of
the field names, items appended to a list, ``json.dumps`` of the field dicts
for ``to_json``), so UFO's cost is measured in the same process; the ratio
printed is kvmemory's time over the stand-in's, target 1.0.

Run: .venv/bin/python benchmarks/bench_core.py [--items N] [--repeat R] [--shape ufo|scalar|both]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import sqlite3
import tempfile
import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson
from _common import best, make_rows, make_ufo_rows

from agents.memory import Memory, MemoryItem
from agents.memory.stores import open_memory, open_store

# Target ratios (kvmemory / raw), from issue 9. Building the UFO way and
# to_json are held to UFO's own time, measured in this run on UFO's layout.
TARGETS = {
    "build the UFO way, against UFO's layout (GC on)": 1.0,
    "to_json, against UFO's layout": 1.0,
    "reopen from SQLite, index built (eager)": 1.5,
    "build (from_list_of_dicts)": 3.0,
    "to_json_bytes (first call, fresh memory)": 5.0,
    "to_json_bytes (later calls)": 2.5,
    "filter_memory_from_keys (3 keys)": 1.3,
    "filter_memory_from_steps (1,000 steps)": 3.0,
    "first step lookup (builds the index)": 2.0,
    "load from JSON": 2.0,
    "delete 100 steps (fresh memory, index included)": 40.0,
}


class UfoLayoutItem:
    """UFO's item layout, for the baseline: fields as attributes, their names in a list."""

    def __init__(self) -> None:
        self._names: list[str] = []

    def set_value(self, key: str, value: Any) -> None:
        setattr(self, key, value)
        if key not in self._names:
            self._names.append(key)

    def add_values_from_dict(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            self.set_value(key, value)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._names}


class UfoLayoutMemory:
    """UFO's memory layout, for the baseline: a list of items, JSON through json.dumps."""

    def __init__(self) -> None:
        self.content: list[UfoLayoutItem] = []

    def add_memory_item(self, item: UfoLayoutItem) -> None:
        self.content.append(item)

    def to_json(self) -> str:
        return json.dumps([item.to_dict() for item in self.content if item is not None])


def allocated(build: Callable[[], object]) -> tuple[int, object]:
    """Return the bytes allocated while building an object, and the object."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    obj = build()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return after - before, obj


def report(name: str, ours: float, raw: float, unit: str = "s") -> None:
    ratio = ours / raw
    target = TARGETS.get(name)
    verdict = (
        ""
        if target is None
        else f"  target {target:5.1f}  " + ("ok" if ratio <= target else "MISSES")
    )
    if unit == "s":
        print(
            f"{name:48s} {ours * 1e3:9.2f} ms  raw {raw * 1e3:9.2f} ms  ratio {ratio:7.3f}{verdict}"
        )
    else:
        print(f"{name:48s} {ours:9.0f} {unit}  raw {raw:9.0f} {unit}  ratio {ratio:7.3f}{verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--shape", choices=["ufo", "scalar", "both"], default="both")
    args = parser.parse_args()
    if args.shape in ("ufo", "both"):
        run(make_ufo_rows(args.items), "UFO-shaped (nested)", args.repeat)
    if args.shape in ("scalar", "both"):
        run(make_rows(args.items), "scalar-only", args.repeat)


def run(rows: list[dict[str, Any]], shape: str, repeat: int) -> None:
    """Time every workload on ``rows`` and print one line each."""
    n = len(rows)
    rng = random.Random(7)
    keys = ["step", "thought", "action"]
    steps = rng.sample(range(n), 1000)
    doomed = rng.sample(range(n), 100)
    print(f"\n{n:,} {shape} items of {len(rows[0])} fields, best of {repeat} runs")

    # Build: a Memory from dicts against copying the dicts.
    raw = best(lambda: [dict(row) for row in rows], repeat, gc_on=True)

    def build_the_ufo_way(memory_class: Callable[[], Any], item_class: Callable[[], Any]) -> Any:
        memory = memory_class()
        for row in rows:
            item = item_class()
            item.add_values_from_dict(row)
            memory.add_memory_item(item)
        return memory

    ours_ufo_way = best(lambda: build_the_ufo_way(Memory, MemoryItem), repeat, gc_on=True)
    report("build the UFO way (GC on)", ours_ufo_way, raw)

    def add_to_ufo_layout() -> UfoLayoutMemory:
        return build_the_ufo_way(UfoLayoutMemory, UfoLayoutItem)

    report(
        "build the UFO way, against UFO's layout (GC on)",
        ours_ufo_way,
        best(add_to_ufo_layout, repeat, gc_on=True),
    )
    raw = best(lambda: [dict(row) for row in rows], repeat)
    ours = best(lambda: Memory().from_list_of_dicts(rows), repeat)
    report("build (from_list_of_dicts)", ours, raw)

    def add_one_by_one() -> None:
        memory = Memory()
        for row in rows:
            memory.add_memory_item(MemoryItem(**row))

    report("build (add_memory_item one by one)", best(add_one_by_one, repeat), raw)

    # Encoding: first call after building computes each item's plain-JSON flag;
    # later calls reuse it until the item changes.
    raw = best(lambda: orjson.dumps(rows), repeat)
    fresh: list[Memory] = []

    def new_memory() -> None:
        memory = Memory()
        memory.from_list_of_dicts(rows)
        fresh[:] = [memory]

    report(
        "to_json_bytes (first call, fresh memory)",
        best(lambda: fresh[0].to_json_bytes(), repeat, new_memory),
        raw,
    )
    memory = Memory()
    memory.from_list_of_dicts(rows)
    memory.to_json_bytes()
    report("to_json_bytes (later calls)", best(memory.to_json_bytes, repeat), raw)
    # to_json writes UFO's JSON: the raw limit is json.dumps, which UFO calls.
    raw_str = best(lambda: json.dumps(rows), repeat)
    ours_to_json = best(memory.to_json, repeat)
    report("to_json (UFO's JSON)", ours_to_json, raw_str)
    ufo_layout = add_to_ufo_layout()
    report("to_json, against UFO's layout", ours_to_json, best(ufo_layout.to_json, repeat))

    # Projections, in each row's field order (UFO's order).
    wanted_keys = frozenset(keys)
    raw = best(lambda: [{k: v for k, v in row.items() if k in wanted_keys} for row in rows], repeat)
    report(
        "filter_memory_from_keys (3 keys)",
        best(lambda: memory.filter_memory_from_keys(keys), repeat),
        raw,
    )

    def build_index() -> dict[int, list[dict[str, Any]]]:
        index: dict[int, list[dict[str, Any]]] = {}
        for row in rows:
            index.setdefault(row["step"], []).append(row)
        return index

    raw_index = best(build_index, repeat)
    index = build_index()
    wanted = sorted(steps)
    raw = best(lambda: [dict(row) for step in wanted for row in index.get(step, ())], repeat)
    index_build = best(lambda: fresh[0].filter_memory_from_steps([0]), repeat, new_memory)
    memory.filter_memory_from_steps([0])  # builds the step index once
    report(
        "filter_memory_from_steps (1,000 steps)",
        best(lambda: memory.filter_memory_from_steps(steps), repeat),
        raw,
    )
    report("first step lookup (builds the index)", index_build, raw_index)

    # Deleting 100 steps on a fresh memory (the first delete builds the step
    # index) against one pass that copies the item list.
    raw = best(lambda: [row for row in rows if row["step"] != doomed[0]], repeat)

    def delete_all() -> None:
        for step in doomed:
            fresh[0].delete_memory_item(step)

    report(
        "delete 100 steps (fresh memory, index included)",
        best(delete_all, repeat, new_memory),
        raw,
    )

    # Loading: orjson.loads builds the dicts; we also build items.
    data = memory.to_json_bytes()
    raw = best(lambda: orjson.loads(data), repeat)
    report("load from JSON", best(lambda: Memory.from_json(data), repeat), raw)

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

            report(
                "reopen from SQLite, index built (eager)",
                best(reopen, repeat),
                best(raw_rows, repeat),
            )

    # Bytes held per item.
    raw_bytes, _ = allocated(lambda: [dict(row) for row in rows])

    def build_memory() -> Memory:
        memory = Memory()
        memory.from_list_of_dicts(rows)
        return memory

    our_bytes, _ = allocated(build_memory)
    report("bytes per item", our_bytes / n, raw_bytes / n, unit="B")


if __name__ == "__main__":
    main()
