"""Core benchmark: Memory against the raw limit, measured in one process.

Builds 100,000 items of 10 fields and times, best of several runs, each core
operation next to the plain-Python or orjson baseline doing the same work.
Prints one line per operation: both times and their ratio (kvmemory / raw).

Run: .venv/bin/python benchmarks/bench_core.py [--items N] [--repeat R]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson
from _common import best, make_rows

from agents.memory import Memory, MemoryItem

TARGETS = {
    "build (from_list_of_dicts)": 3.0,
    "to_json_bytes (warm)": 1.5,
    "to_json (UFO's JSON)": 1.5,
    "filter_memory_from_keys (3 keys)": 1.3,
    "filter_memory_from_steps (1,000 steps)": 3.0,
    "load from JSON": 2.0,
    "delete 100 steps": 1.0,
}


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
    verdict = "" if target is None else ("  ok" if ratio <= target else f"  MISSES {target}x")
    if unit == "s":
        print(
            f"{name:42s} {ours * 1e3:9.2f} ms  raw {raw * 1e3:9.2f} ms  ratio {ratio:6.3f}{verdict}"
        )
    else:
        print(f"{name:42s} {ours:9.0f} {unit}  raw {raw:9.0f} {unit}  ratio {ratio:6.3f}{verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n, repeat = args.items, args.repeat
    rows = make_rows(n)
    rng = random.Random(7)
    keys = ["step", "thought", "action"]
    steps = rng.sample(range(n), 1000)
    doomed = rng.sample(range(n), 100)
    print(f"{n:,} items of 10 fields, best of {repeat} runs\n")

    # Build: a Memory from dicts against copying the dicts.
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
        "to_json_bytes (cold, first call)",
        best(lambda: fresh[0].to_json_bytes(), repeat, new_memory),
        raw,
    )
    memory = Memory()
    memory.from_list_of_dicts(rows)
    memory.to_json_bytes()
    report("to_json_bytes (warm)", best(memory.to_json_bytes, repeat), raw)
    # to_json writes UFO's JSON: the raw limit is json.dumps, which UFO calls.
    raw_str = best(lambda: json.dumps(rows), repeat)
    report("to_json (UFO's JSON)", best(memory.to_json, repeat), raw_str)

    # Projections, in each row's field order (UFO's order).
    wanted_keys = frozenset(keys)
    raw = best(lambda: [{k: v for k, v in row.items() if k in wanted_keys} for row in rows], repeat)
    report(
        "filter_memory_from_keys (3 keys)",
        best(lambda: memory.filter_memory_from_keys(keys), repeat),
        raw,
    )

    index: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        index.setdefault(row["step"], []).append(row)
    wanted = sorted(steps)
    raw = best(lambda: [dict(row) for step in wanted for row in index.get(step, ())], repeat)
    index_build = best(lambda: fresh[0].filter_memory_from_steps([0]), 1, new_memory)
    memory.filter_memory_from_steps([0])  # builds the step index once
    report(
        "filter_memory_from_steps (1,000 steps)",
        best(lambda: memory.filter_memory_from_steps(steps), repeat),
        raw,
    )
    report("  first step lookup (builds the index)", index_build, raw)

    # Deleting 100 steps against one pass that copies the item list.
    raw = best(lambda: [row for row in rows if row["step"] != doomed[0]], repeat)

    def fresh_indexed() -> None:
        new_memory()
        fresh[0].filter_memory_from_steps([0])

    def delete_all() -> None:
        for step in doomed:
            fresh[0].delete_memory_item(step)

    report("delete 100 steps", best(delete_all, repeat, fresh_indexed), raw)

    # Loading: orjson.loads builds the dicts; we also build items.
    data = memory.to_json_bytes()
    raw = best(lambda: orjson.loads(data), repeat)
    report("load from JSON", best(lambda: Memory.from_json(data), repeat), raw)

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
