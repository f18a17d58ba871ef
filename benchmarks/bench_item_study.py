"""The item-layout study of issue 33: prototypes of one ``MemoryItem``, timed against UFO and raw dicts.

Each prototype is the least code that shows what a layout costs the
collector and the hot paths; none is kvmemory's class. For every layout it
times, with the collector on and as CPU time, interleaved run by run:

- ``build``: ``item = Item(); item.add_values_from_dict(row); memory.append(item)``
  for every UFO-shaped row (the row of ``bench_core.py``, with a nested ``arguments`` dict),
  with the collector on and, to tell its share, off;
- ``load``: ``orjson.loads`` of the rows' JSON, then one item per decoded row;
- ``index``: the first read of every item's fields as a dict (a step index,
  as a memory builds on its first step lookup), on freshly built items;
- ``filter``: three fields of every item as new dicts, on items already read once;

and counts the objects the collector tracks per item after a build.

Layouts:

- ``two objects``: kvmemory 0.1.0's: ``__slots__`` and a per-instance fields dict;
- ``own __dict__``: fields are the instance's own managed ``__dict__`` (on
  CPython, a values array beside the object until someone asks for the dict),
  written with ``object.__setattr__``; ``__slots__`` keep the watchers;
- ``own __dict__, adopt``: the same, but a decoded row becomes the ``__dict__`` as it is;
- ``values + shape``: a tuple of values and a shared key table per shape;
- ``dict subclass``: the item *is* a dict (kept for reference; it lets dict
  methods shadow fields and mutators bypass watchers).

Run: .venv/bin/python benchmarks/bench_item_study.py --ufo PATH/TO/ufo/agents/memory/memory.py [--items N] [--repeat R]
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson
from bench_core import load_ufo, make_rows

_consume = collections.deque(maxlen=0).extend
_setattr = object.__setattr__


class TwoObjects:
    """kvmemory 0.1.0's layout: slots, and the fields in a dict of their own."""

    __slots__ = ("_fields", "_owners", "_plain")

    def __init__(self) -> None:
        self._fields: dict[str, Any] = {}
        self._owners = None
        self._plain = None

    def add_values_from_dict(self, values: dict[str, Any]) -> None:
        self._fields.update(values)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TwoObjects:
        item = object.__new__(cls)
        item._fields = row
        item._owners = None
        item._plain = None
        return item

    def fields(self) -> dict[str, Any]:
        return self._fields


class OwnDict:
    """The fields are the instance's managed ``__dict__``; watchers and caches stay in slots."""

    __slots__ = ("__dict__", "_owners", "_plain")

    def __init__(self) -> None:
        self._owners = None
        self._plain = None

    def add_values_from_dict(self, values: dict[str, Any]) -> None:
        if _RESERVED.isdisjoint(values):
            # Written one by one (in C), so that they stay in the instance's values array.
            _consume(map(_setattr, itertools.repeat(self), values, values.values()))

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> OwnDict:
        item = object.__new__(cls)
        item._owners = None
        item._plain = None
        _consume(map(_setattr, itertools.repeat(item), row, row.values()))
        return item

    def fields(self) -> dict[str, Any]:
        return self.__dict__


_RESERVED = frozenset(dir(OwnDict))


class OwnDictAdopt(OwnDict):
    """As :class:`OwnDict`, but a decoded row becomes the instance's ``__dict__`` as it is."""

    __slots__ = ()

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> OwnDictAdopt:
        item = object.__new__(cls)
        item._owners = None
        item._plain = None
        item.__dict__ = row
        return item


class Shape:
    """The keys of every item that has the same keys in the same order, shared by them."""

    __slots__ = ("keys",)

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys


_SHAPES: dict[tuple[str, ...], Shape] = {}


class ValuesAndShape:
    """A tuple of values and a key table shared per shape."""

    __slots__ = ("_owners", "_plain", "_shape", "_values")

    def __init__(self) -> None:
        self._shape = _EMPTY
        self._values: tuple[Any, ...] = ()
        self._owners = None
        self._plain = None

    def add_values_from_dict(self, values: dict[str, Any]) -> None:
        merged = dict(zip(self._shape.keys, self._values, strict=True))
        merged.update(values)
        keys = tuple(merged)
        shape = _SHAPES.get(keys)
        if shape is None:
            shape = _SHAPES[keys] = Shape(keys)
        self._shape = shape
        self._values = tuple(merged.values())

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ValuesAndShape:
        item = object.__new__(cls)
        keys = tuple(row)
        shape = _SHAPES.get(keys)
        if shape is None:
            shape = _SHAPES[keys] = Shape(keys)
        item._shape = shape
        item._values = tuple(row.values())
        item._owners = None
        item._plain = None
        return item

    def fields(self) -> dict[str, Any]:
        return dict(zip(self._shape.keys, self._values, strict=True))


_EMPTY = Shape(())


class DictSubclass(dict):  # type: ignore[type-arg]  # a prototype
    """The item is a dict (slots for the watchers)."""

    __slots__ = ("_owners", "_plain")

    def __init__(self) -> None:
        self._owners = None
        self._plain = None

    add_values_from_dict = dict.update

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DictSubclass:
        item = cls()
        item.update(row)
        return item

    def fields(self) -> dict[str, Any]:
        return self


LAYOUTS: dict[str, Any] = {
    "two objects (0.1.0)": TwoObjects,
    "own __dict__": OwnDict,
    "own __dict__, adopt": OwnDictAdopt,
    "values + shape": ValuesAndShape,
    "dict subclass": DictSubclass,
}


def tracked_per_item(make: Callable[[], list[Any]], n: int) -> float:
    """Return how many more objects the collector tracks, per item, once ``make()`` has run."""
    gc.collect()
    before = len(gc.get_objects())
    kept = make()
    gc.collect()
    after = len(gc.get_objects())
    del kept
    return (after - before) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ufo", metavar="PATH", required=True, help="UFO's memory.py")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--only", metavar="TEXT", help="time only the sections whose title holds TEXT"
    )
    args = parser.parse_args()
    ufo = load_ufo(args.ufo)
    rows = make_rows(args.items)
    data = orjson.dumps(rows)
    n = len(rows)
    print(
        f"{n:,} UFO-shaped rows, median [lowest-highest] of {args.repeat} interleaved runs, "
        f"CPU time, GC on, Python {sys.version.split()[0]}, load {'/'.join(f'{x:.1f}' for x in os.getloadavg())}"
    )

    def build(item_class: Any) -> Callable[[], list[Any]]:
        def run() -> list[Any]:
            content: list[Any] = []
            append = content.append
            for row in rows:
                item = item_class()
                item.add_values_from_dict(row)
                append(item)
            return content

        return run

    def load(item_class: Any) -> Callable[[], list[Any]]:
        return lambda: list(map(item_class.from_row, orjson.loads(data)))

    def index(item_class: Any) -> tuple[Callable[[], object], Callable[[], object]]:
        built: list[Any] = []

        def setup() -> None:
            built[:] = build(item_class)()

        def run() -> object:
            return {f["step"]: i for i, f in enumerate(map(item_class.fields, built))}

        return setup, run

    keys = frozenset(("step", "thought", "action"))

    def filt(item_class: Any) -> Callable[[], object]:
        built = build(item_class)()
        for item in built:
            item.fields()
        return lambda: [{k: f[k] for k in f if k in keys} for f in map(item_class.fields, built)]

    ufo_build = build(ufo.MemoryItem)

    def ufo_load() -> object:
        memory = ufo.Memory()
        memory.from_list_of_dicts(orjson.loads(data))
        return memory

    def raw_build() -> object:
        return [dict(r) for r in rows]

    def raw_load() -> object:
        return orjson.loads(data)

    print(f"{'layout':24s} {'tracked/item':>12s}")  # counted at n items, whatever --only says
    for name, cls in LAYOUTS.items():
        print(f"{name:24s} {tracked_per_item(build(cls), n):12.2f}", flush=True)
    print(f"{'UFO':24s} {tracked_per_item(ufo_build, n):12.2f}")
    print(f"{'raw dicts':24s} {tracked_per_item(raw_build, n):12.2f}", flush=True)

    def ratio_line(label: str, times: dict[str, list[float]], base: str) -> str:
        ratios = [a / b for a, b in zip(times[label], times[base], strict=True)]
        return f"{statistics.median(ratios):5.2f}x [{min(ratios):4.2f}-{max(ratios):4.2f}]"

    def time_all(
        title: str,
        fns: dict[str, tuple[Callable[[], object] | None, Callable[[], object]]],
        *,
        collector: bool = True,
    ) -> None:
        if args.only is not None and args.only not in title:
            return
        times: dict[str, list[float]] = {label: [] for label in fns}
        for _ in range(args.repeat):
            for label, (setup, fn) in fns.items():
                if setup is not None:
                    setup()
                gc.collect()
                if not collector:
                    gc.disable()
                start = time.process_time()
                result = fn()
                times[label].append(time.process_time() - start)
                gc.enable()
                del result
        print(f"\n{title}: {'median':>9s}   /UFO [spread]          /raw [spread]")
        for label in fns:
            print(
                f"  {label:24s} {statistics.median(times[label]) * 1e3:8.1f}ms"
                f"  {ratio_line(label, times, 'UFO')}  {ratio_line(label, times, 'raw')}",
                flush=True,
            )

    time_all(
        "build the UFO way",
        {"UFO": (None, ufo_build), "raw": (None, raw_build)}
        | {name: (None, build(cls)) for name, cls in LAYOUTS.items()},
    )
    time_all(
        "build the UFO way, collector off (what the collector costs is the difference)",
        {"UFO": (None, ufo_build), "raw": (None, raw_build)}
        | {name: (None, build(cls)) for name, cls in LAYOUTS.items()},
        collector=False,
    )
    time_all(
        "load from JSON",
        {"UFO": (None, ufo_load), "raw": (None, raw_load)}
        | {name: (None, load(cls)) for name, cls in LAYOUTS.items()},
    )
    index_fns: dict[str, tuple[Callable[[], object] | None, Callable[[], object]]] = {
        name: index(cls) for name, cls in LAYOUTS.items()
    }
    ufo_built: list[Any] = []
    index_fns["UFO"] = (
        lambda: ufo_built.__setitem__(slice(None), ufo_build()),
        lambda: {item.step: i for i, item in enumerate(ufo_built)},
    )
    raw_rows = [dict(r) for r in rows]
    index_fns["raw"] = (None, lambda: {r["step"]: i for i, r in enumerate(raw_rows)})
    time_all("first read of every item as a dict (a step index)", index_fns)
    filters = {name: (None, filt(cls)) for name, cls in LAYOUTS.items()}
    ufo_memory = ufo.Memory()
    ufo_memory.load(ufo_build())
    filters["UFO"] = (None, lambda: ufo_memory.filter_memory_from_keys(list(keys)))
    filters["raw"] = (None, lambda: [{k: r[k] for k in keys if k in r} for r in raw_rows])
    time_all("three fields of every item, items read before", filters)


if __name__ == "__main__":
    main()
