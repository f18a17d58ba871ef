"""Who hears of a memory's changes: its writer, its observers and its change callbacks.

A :class:`Memory` tells its :class:`Listeners` of each change in two halves:
``before_*`` asks the writer (a durable store) first, so that a refused
change is never applied; ``after_*`` tells the observers (state derived item
by item, such as the search index) and then runs the change callbacks. The
memory applies the change in between; this module never sees its items.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

import attrs

from agents.memory._item import MemoryItem, item_fields
from agents.memory.exceptions import CallbackError, InvalidArgumentError

if TYPE_CHECKING:
    from agents.memory.memory import Memory

__all__ = [
    "ChangeCallback",
    "ChangeKind",
    "Listeners",
    "MemoryChange",
    "MemoryWriter",
]

ChangeKind = Literal["add", "delete", "clear"]
"""What a change did to a memory: items were added, deleted, or all cleared."""


@attrs.frozen
class MemoryChange:
    """What changed in a memory, as given to change callbacks.

    ``kind`` is ``"add"``, ``"delete"`` (a step deleted, or the oldest items
    dropped by ``max_items``) or ``"clear"``; ``items`` are the items concerned.
    """

    kind: ChangeKind
    items: tuple[MemoryItem, ...]


ChangeCallback = Callable[["Memory", MemoryChange], object]
"""A callback run after each change: ``callback(memory, change)``."""


class MemoryWriter(Protocol):
    """Where a memory sends each change before it applies it: the seam to durable stores.

    A memory gives every item a *key* when it is added: an int unique within
    the memory, never reused, increasing in memory order. A writer is told
    of every change by those keys, under the memory's lock, *before* the
    memory applies it; if the writer raises, the memory is left exactly as it
    was and the error propagates. A writer never sees the memory's
    internals, and the memory never knows what the writer does with a change
    (``agents.memory.stores.StoredMemory`` writes each one to a store).
    """

    def write_add(
        self,
        memory: Memory,
        added: Sequence[tuple[int, MemoryItem]],
        evicted: Sequence[int],
    ) -> None:
        """Items are appended under the given keys; then the ``evicted`` keys go (``max_items``).

        ``evicted`` may name keys of ``added`` (items dropped as soon as they arrive).
        """

    def write_delete(self, memory: Memory, keys: Sequence[int]) -> None:
        """The items under ``keys`` are deleted."""

    def write_update(self, memory: Memory, keys: Sequence[int], item: MemoryItem) -> None:
        """``item``, held under ``keys``, has new field values."""

    def write_replace(self, memory: Memory, added: Sequence[tuple[int, MemoryItem]]) -> None:
        """Every item goes and ``added`` takes its place (``clear`` gives no items)."""


class Listeners:
    """A memory's writer, observers and change callbacks, told of each change in order.

    Args:
        writer: Told of every change before it is applied; ``None`` for a memory in RAM only.
        callbacks: Run after each add, delete and clear.
    """

    __slots__ = ("callbacks", "observers", "writer")

    def __init__(self, writer: MemoryWriter | None, callbacks: Iterable[ChangeCallback]) -> None:
        self.writer = writer
        self.observers: list[MemoryWriter] = []
        self.callbacks: list[ChangeCallback] = list(callbacks)

    @property
    def quiet(self) -> bool:
        """Whether an append needs no one asked first and no one told at once (observers hear later)."""
        return self.writer is None and not self.callbacks

    @property
    def told_by_key(self) -> bool:
        """Whether someone hears of changes by item key (a writer or an observer)."""
        return self.writer is not None or bool(self.observers)

    def remove_callback(self, callback: ChangeCallback) -> None:
        """Stop running ``callback``.

        Raises:
            InvalidArgumentError: if ``callback`` was not registered.
        """
        try:
            self.callbacks.remove(callback)
        except ValueError:
            name = getattr(callback, "__qualname__", repr(callback))
            msg = f"Callback {name} is not registered on this memory; nothing was removed."
            raise InvalidArgumentError(msg) from None

    # -- each change: the writer before, observers and callbacks after ----------

    def before_add(
        self, memory: Memory, keys: range, batch: Sequence[MemoryItem], evicted: Sequence[int]
    ) -> None:
        """Ask the writer to append ``batch`` under ``keys`` and drop ``evicted``."""
        if self.writer is not None:
            self.writer.write_add(memory, list(zip(keys, batch, strict=True)), evicted)

    def after_add(
        self,
        memory: Memory,
        keys: range,
        batch: Sequence[MemoryItem],
        evicted: Sequence[int],
        removed: Sequence[MemoryItem],
    ) -> None:
        """Tell the observers of an append, then run the callbacks (evictions first)."""
        if self.observers:
            added = list(zip(keys, batch, strict=True))
            for observer in self.observers:
                observer.write_add(memory, added, evicted)
        if self.callbacks:
            if removed:
                self.run_callbacks(memory, MemoryChange("delete", tuple(removed)))
            self.run_callbacks(memory, MemoryChange("add", tuple(batch)))

    def settled(self, memory: Memory, added: Sequence[tuple[int, MemoryItem]]) -> None:
        """Tell the observers of items appended on the fast path, which no writer or callback hears."""
        for observer in self.observers:
            observer.write_add(memory, added, ())

    def before_delete(self, memory: Memory, keys: Sequence[int]) -> None:
        """Ask the writer to delete the items under ``keys``."""
        if self.writer is not None:
            self.writer.write_delete(memory, keys)

    def after_delete(
        self, memory: Memory, keys: Sequence[int], removed: Sequence[MemoryItem]
    ) -> None:
        """Tell the observers of a deletion, then run the callbacks."""
        for observer in self.observers:
            observer.write_delete(memory, keys)
        if self.callbacks:
            self.run_callbacks(memory, MemoryChange("delete", tuple(removed)))

    def before_update(self, memory: Memory, keys: Sequence[int], item: MemoryItem) -> None:
        """Ask the writer to store the new field values of ``item``."""
        if self.writer is not None:
            self.writer.write_update(memory, keys, item)

    def after_update(self, memory: Memory, keys: Sequence[int], item: MemoryItem) -> None:
        """Tell the observers that ``item`` has new field values."""
        for observer in self.observers:
            observer.write_update(memory, keys, item)

    def before_replace(self, memory: Memory, added: Sequence[tuple[int, MemoryItem]]) -> None:
        """Ask the writer to replace every item with ``added``."""
        if self.writer is not None:
            self.writer.write_replace(memory, added)

    def after_replace(self, memory: Memory, added: Sequence[tuple[int, MemoryItem]]) -> None:
        """Tell the observers that ``added`` replaced every item."""
        for observer in self.observers:
            observer.write_replace(memory, added)

    def run_callbacks(self, memory: Memory, change: MemoryChange) -> None:
        """Run every callback on ``change``, in order.

        Raises:
            CallbackError: naming the callback that raised; the change stays applied.
        """
        for callback in list(self.callbacks):
            try:
                callback(memory, change)
            except Exception as exc:
                name = getattr(callback, "__qualname__", repr(callback))
                key = memory.step_key
                steps = [item_fields(item).get(key) for item in change.items[:5]]
                msg = (
                    f"Change callback {name} raised {type(exc).__name__}: {exc} "
                    f"(after {change.kind} of steps {steps}); the change was applied and the memory is consistent."
                )
                raise CallbackError(msg) from exc
