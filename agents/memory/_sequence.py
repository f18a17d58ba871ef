"""The ordered items of a memory: their keys, their step index and the size bound.

Items live in a dict under their keys (ints given at add, never reused,
increasing in memory order); the keyed records among them are filed in a
:class:`~agents.memory._records.RecordIndex`, which forgets a record as its
item leaves. Two paths change the set of items: appends
(:meth:`ItemSequence.push` on the fast path, :meth:`ItemSequence.append`
otherwise) and :meth:`ItemSequence.replace` (loads, reopens, ``clear``);
single items go through :meth:`ItemSequence.remove`. The step index is built
on the first step lookup; while it exists every item in it is watched, so a
field change reaches the memory's watcher. Items appended on the fast path
are filed and watched when the index is next read (:meth:`ItemSequence.settle`).

This module knows nothing of writers, observers or callbacks: the memory
asks it what a change will do, tells its listeners, then applies it here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, ValuesView
from typing import Any

from agents.memory._item import (
    NOTHING,
    MemoryItem,
    WatcherRef,
    item_fields,
    unwatch_items,
    watch_items,
)
from agents.memory._records import RecordIndex
from agents.memory._steps import StepIndex

__all__ = ["ItemSequence"]


class ItemSequence:
    """A memory's items in order, under their keys, with the step index and the bound.

    The sequence itself is the owner its items' watchers are registered under.

    Args:
        step_key: The field that names an item's step.
        max_items: Keep at most this many items (the memory drops the oldest), or ``None``.
    """

    __slots__ = (
        "_list",
        "_shared",
        "first_key",
        "index",
        "items",
        "max_items",
        "next_key",
        "records",
        "settled",
        "step_key",
        "watcher",
    )

    def __init__(self, step_key: str, max_items: int | None) -> None:
        self.step_key = step_key
        self.max_items = max_items
        self.watcher: WatcherRef | None = None
        self.items: dict[int, MemoryItem] = {}
        self.next_key = 0
        # Keys below first_key are gone for good; the bound's scan starts there.
        self.first_key = 0
        # Items under keys from here on were appended on the fast path and are
        # not yet filed or watched: settle() catches up.
        self.settled = 0
        self.index: StepIndex | None = None
        # The keyed records among the items (record key <-> item key).
        self.records = RecordIndex()
        # The items as a list, kept while appends can grow it; None once stale.
        self._list: list[MemoryItem] | None = None
        self._shared = False

    # -- reading -----------------------------------------------------------------

    def snapshot(self) -> list[MemoryItem]:
        """Return the items as a list that later changes will not touch (treat it as read-only)."""
        items = self._list
        if items is None:
            items = self._list = list(self.items.values())
        # Handed out: the next append must start a new list, not grow this one.
        self._shared = True
        return items

    def last(self, k: int) -> list[MemoryItem]:
        """Return the last ``k`` items in order."""
        values = reversed(self.items.values())
        out = [item for _, item in zip(range(k), values, strict=False)]
        out.reverse()
        return out

    def steps(self) -> list[Any]:
        """Return the distinct step values in order of first appearance."""
        key = self.step_key
        seen: dict[Any, None] = {}
        others: list[Any] = []
        for item in self.snapshot():
            step = item_fields(item).get(key, NOTHING)
            if step is NOTHING:
                continue
            try:
                seen.setdefault(step, None)
            except TypeError:
                if step not in others:
                    others.append(step)
        return [*seen, *others]

    def keys_of_steps(self, steps: Iterable[Any]) -> list[int]:
        """Return the keys of the items whose step is in ``steps``, in memory order."""
        return self.ensure_index().keys_of_steps(steps, self.items)

    def items_of_steps(self, steps: Iterable[Any]) -> list[MemoryItem]:
        """Return the items whose step is in ``steps``, in memory order."""
        items = self.items
        return [items[key] for key in self.keys_of_steps(steps)]

    def keys_holding(self, item: MemoryItem) -> list[int]:
        """Return the keys under which ``item`` is held (found through the index)."""
        index = self.ensure_index()
        items = self.items
        return [key for key in index.slot(index.step_of(item)) if items.get(key) is item]

    def keys_filed(self, item: MemoryItem, step: Any) -> list[int]:
        """Return the keys under which ``item`` is filed with ``step`` (none while there is no index)."""
        if self.index is None:
            return []
        items = self.items
        return [key for key in self.index.slot(step) if items.get(key) is item]

    # -- the index ---------------------------------------------------------------

    def ensure_index(self) -> StepIndex:
        """Return the step index, built on first use and caught up with the fast path's items."""
        index = self.index
        if index is None:
            index = self.index = StepIndex(self.step_key)
            self._file(self.items, self.items.values())
            self.settled = self.next_key
        elif self.settled != self.next_key:
            self.settle()
        return index

    def settle(self) -> list[tuple[int, MemoryItem]]:
        """File and watch the items the fast path appended since the last call; return them.

        Returns ``[]`` while there is no index: then nothing is filed or
        watched, and no one (observers exist only with the index) must hear.
        """
        start = self.settled
        if start == self.next_key:
            return []
        self.settled = self.next_key
        if self.index is None:
            return []
        tail: list[tuple[int, MemoryItem]] = []
        for key, item in reversed(self.items.items()):
            if key < start:
                break
            tail.append((key, item))
        tail.reverse()
        self._file([key for key, _ in tail], [item for _, item in tail])
        return tail

    def refile(self, key: int, item: MemoryItem, filed: Any) -> None:
        """Move ``key`` from the slot of step ``filed`` to that of the item's step now."""
        index = self.index
        if index is not None:
            index.remove(key, filed)
            self._watch(item)
            index.add(key, index.step_of(item))

    def _file(self, keys: Iterable[int], items: Iterable[MemoryItem]) -> None:
        """Watch ``items`` and file them under ``keys``, all above every key filed."""
        # A list, or the own values view (gone through twice, not copied).
        batch = items if isinstance(items, (list, ValuesView)) else list(items)
        if self.watcher is not None:
            watch_items(batch, self, self.watcher)
        assert self.index is not None  # only called once the index exists
        self.index.file(keys, batch)

    def _watch(self, item: MemoryItem) -> None:
        if self.watcher is not None:
            item.watch(self, self.watcher)

    # -- changing ----------------------------------------------------------------

    def push(self, item: MemoryItem) -> int:
        """Store ``item`` under the next key and return the key (not filed: see :meth:`settle`)."""
        key = self.next_key
        self.next_key = key + 1
        self.items[key] = item
        cached = self._list
        if cached is not None:
            if self._shared:
                self._list = None
            else:
                cached.append(item)
        return key

    def append(self, batch: Sequence[MemoryItem]) -> None:
        """Store and file ``batch`` under the next keys (call :meth:`settle` first)."""
        index = self.index
        push = self.push
        for item in batch:
            key = push(item)
            if index is not None:
                self._watch(item)
                index.add(key, index.step_of(item))
        self.settled = self.next_key

    def next_keys(self, count: int) -> range:
        """Return the keys the next ``count`` appended items will get."""
        return range(self.next_key, self.next_key + count)

    def evictions(self, incoming: range) -> list[int]:
        """Return the keys ``max_items`` evicts once ``incoming`` is appended, oldest first."""
        bound = self.max_items
        if bound is None:
            return []
        excess = len(self.items) + len(incoming) - bound
        if excess <= 0:
            return []
        items = self.items
        key = self.first_key
        # Keys are never reused, so the scan moves the mark past keys already deleted.
        while key < self.next_key and key not in items:
            key += 1
        self.first_key = key
        out: list[int] = []
        while len(out) < excess and key < self.next_key:
            if key in items:
                out.append(key)
            key += 1
        out.extend(incoming[: excess - len(out)])
        return out

    def bounded(self, items: list[MemoryItem]) -> list[MemoryItem]:
        """Return the newest ``max_items`` of ``items`` (all of them without a bound)."""
        bound = self.max_items
        return items if bound is None else items[max(len(items) - bound, 0) :]

    def remove(self, key: int) -> MemoryItem:
        """Take out the item under ``key`` and return it (unwatched unless held under another key)."""
        item = self.items.pop(key)
        self._list = None
        self.records.drop_item(key)
        index = self.index
        if index is not None:
            index.remove(key, index.step_of(item))
            if not self.keys_holding(item):
                item.unwatch(self)
        return item

    def replace(self, keys: range, items: list[MemoryItem], *, indexed: bool) -> None:
        """Make ``items``, under ``keys``, the whole content; build the index if ``indexed``."""
        self.reset()
        self.items = dict(zip(keys, items, strict=True))
        self.next_key = keys.stop
        self.first_key = keys.start
        self._list = list(items)
        self._shared = False
        if indexed:
            self.ensure_index()

    def reset(self) -> None:
        """Drop every item and the index (items are no longer watched)."""
        if self.index is not None:
            unwatch_items(self.items.values(), self)
        self.items = {}
        self.records.clear()
        self.first_key = self.next_key
        self.settled = self.next_key
        self.index = None
        self._list = None
