"""The step index of a memory: each step value to the keys of its items.

A memory keys its items by an int given at add, never reused and increasing
in memory order. :class:`StepIndex` files those keys under the value of the
step field, so that step lookups and deletions cost the items of the steps
asked for, not the whole memory. Items without a step field and items whose
step cannot be hashed (a list as a step) are kept aside.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agents.memory._item import NOTHING, MemoryItem, item_fields

__all__ = ["StepIndex", "fields_of", "unique"]

fields_of = item_fields
"""Return an item's own fields dict (read-only use: the fastest way to read many items)."""


class StepIndex:
    """Step value -> the keys of the items of that step, in increasing order.

    A step of one item (most steps) holds its key bare; a step of several
    holds a sorted list.

    Args:
        step_key: The field that names an item's step.
    """

    __slots__ = ("by_step", "step_key", "stepless", "unhashable")

    def __init__(self, step_key: str) -> None:
        self.step_key = step_key
        self.by_step: dict[Any, int | list[int]] = {}
        self.stepless: dict[int, None] = {}
        self.unhashable: dict[int, None] = {}

    def file(self, keys: Iterable[int], items: Iterable[MemoryItem]) -> None:
        """File ``items`` under ``keys``, which must all be above every key filed."""
        index = self.by_step
        stepless = self.stepless
        unhashable = self.unhashable
        step_key = self.step_key
        # Keys come in increasing order, above those filed, so each bucket is
        # appended to in order and needs no sorting.
        # One dict operation per item: setdefault files a new step and
        # returns what an earlier item of the step filed.
        file_first = index.setdefault
        for key, fields in zip(keys, map(fields_of, items), strict=True):
            try:
                step = fields[step_key]  # a subscript is quicker than .get() here
            except KeyError:
                stepless[key] = None
                continue
            try:
                bucket = file_first(step, key)
            except TypeError:
                unhashable[key] = None
                continue
            if bucket is key:
                continue
            if isinstance(bucket, int):
                index[step] = [bucket, key]
            else:
                bucket.append(key)

    def step_of(self, item: MemoryItem) -> Any:
        """Return the step ``item`` is filed under now (``NOTHING`` when it has none)."""
        return item_fields(item).get(self.step_key, NOTHING)

    def slot(self, step: Any) -> Sequence[int] | dict[int, None]:
        """Return the keys filed under ``step`` (``NOTHING`` for items without a step)."""
        if step is NOTHING:
            return self.stepless
        try:
            bucket = self.by_step.get(step)
        except TypeError:
            return self.unhashable
        if bucket is None:
            return ()
        return (bucket,) if isinstance(bucket, int) else bucket

    def add(self, key: int, step: Any) -> None:
        """File ``key`` under ``step`` (``NOTHING`` for an item without a step), at any position."""
        if step is NOTHING:
            self.stepless[key] = None
            return
        index = self.by_step
        try:
            bucket = index.get(step)
        except TypeError:
            # An unhashable step (a list as a step) is kept aside and compared one by one.
            self.unhashable[key] = None
            return
        if bucket is None:
            index[step] = key
        elif isinstance(bucket, int):
            index[step] = [bucket, key] if bucket < key else [key, bucket]
        elif bucket[-1] < key:
            bucket.append(key)
        else:
            bisect.insort(bucket, key)

    def remove(self, key: int, step: Any) -> None:
        """Take ``key`` out of the slot of ``step`` (no error if it is not there)."""
        if step is NOTHING:
            self.stepless.pop(key, None)
            return
        index = self.by_step
        try:
            bucket = index.get(step)
        except TypeError:
            self.unhashable.pop(key, None)
            return
        if bucket == key:
            del index[step]
        elif isinstance(bucket, list) and key in bucket:
            bucket.remove(key)
            if not bucket:
                del index[step]

    def keys_of_steps(self, steps: Iterable[Any], items: Mapping[int, MemoryItem]) -> list[int]:
        """Return the keys of the ``items`` whose step is in ``steps``, in increasing order."""
        index = self.by_step
        wanted = unique(steps)
        keys: list[int] = []
        buckets = 0
        for step in wanted:
            try:
                bucket = index.get(step)
            except TypeError:
                continue  # an unhashable step is matched against the unhashable items below
            if bucket is None:
                continue
            filed = [bucket] if isinstance(bucket, int) else bucket
            if not all(key in items for key in filed):
                # A field change that raced a delete can leave a key behind; drop it here.
                filed = [key for key in filed if key in items]
                if filed:
                    index[step] = filed
                else:
                    del index[step]
            keys.extend(filed)
            buckets += 1
        if self.unhashable:
            step_key = self.step_key
            for key in self.unhashable:
                held = items.get(key)
                if held is not None and item_fields(held).get(step_key) in wanted:
                    keys.append(key)
                    buckets += 1
        if buckets > 1:
            keys.sort()
        return keys


def unique(values: Iterable[Any]) -> list[Any]:
    """Return ``values`` without repeats, in first-seen order (unhashable values compared by ``==``)."""
    out: list[Any] = []
    seen: set[Any] = set()
    for value in values:
        try:
            if value in seen:
                continue
            seen.add(value)
        except TypeError:
            if value in out:
                continue
        out.append(value)
    return out
