"""``Memory``: an agent's ordered record of ``MemoryItem`` steps.

This is the module UFO-style code imports (``from agents.memory.memory import
Memory, MemoryItem``). ``Memory`` keeps UFO's names and meaning and fixes its
defects: items without a step never crash step filtering or deletion, step
lookups go through an index that follows items whose step changes after they
were added, projections return fresh dicts, loading is all-or-nothing, and
every call is safe under threads.

``Memory`` is the front of parts that each own one thing: the ordered items
with their step index and size bound (``_sequence``, ``_steps``), the
listeners told of each change (``_listeners``: writer, observers,
callbacks), keyed records (``_records``), the file formats and pickling (``_formats`` over ``_session``)
and the search room above it (``_ports``: reached, never imported, from here).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, overload

from agents.memory._formats import SessionFormats
from agents.memory._item import NOTHING, MemoryItem, OwnedRef, item_fields
from agents.memory._listeners import ChangeCallback as ChangeCallback
from agents.memory._listeners import ChangeKind, Listeners, MemoryChange, MemoryWriter
from agents.memory._ports import SearchFront
from agents.memory._records import RecordFront
from agents.memory._sequence import ItemSequence
from agents.memory._steps import fields_of
from agents.memory._views import MemoryContent, MemoryListContent
from agents.memory.exceptions import (
    ArgumentTypeError,
    InvalidArgumentError,
    ItemNotFoundError,
    StepNotFoundError,
)

__all__ = [
    "ChangeKind",
    "Memory",
    "MemoryChange",
    "MemoryItem",
    "MemoryWriter",
]


def _validate_max_items(value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 1):
        msg = f"max_items must be a positive int or None, got {value!r}."
        raise InvalidArgumentError(msg)


class Memory(SessionFormats, SearchFront, RecordFront):
    """An ordered, indexed, thread-safe collection of ``MemoryItem`` steps.

    Args:
        items: Items to start with, in order.
        step_key: The field that names an item's step (UFO's older logs use ``"Step"``).
        max_items: Keep at most this many items; the oldest are dropped first.
        callbacks: Run after each add, delete and clear as ``callback(memory, change)``.
        session_id: A name for the session, written into saved session documents.
        metadata: Free-form data about the session, saved with it.
        writer: Told of every change before it is applied (see :class:`MemoryWriter`);
            ``agents.memory.stores.open_memory`` sets one up for durable sessions.
    """

    # The parts: _seq owns the items, their keys, the step index and the bound;
    # _listeners owns the writer, the observers and the callbacks. _fast is
    # whether an append needs neither asked first nor evictions (the hot path).
    # They and the lock are made anew by __setstate__, never pickled or copied.
    _RUNTIME: ClassVar[frozenset[str]] = frozenset({"_lock", "_seq", "_listeners", "_fast"})

    def __init__(
        self,
        items: Iterable[MemoryItem] | None = None,
        *,
        step_key: str = "step",
        max_items: int | None = None,
        callbacks: Iterable[ChangeCallback] = (),
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        writer: MemoryWriter | None = None,
    ) -> None:
        if type(step_key) is not str:
            msg = f"step_key must be a string, got {step_key!r}."
            raise ArgumentTypeError(msg)
        _validate_max_items(max_items)
        self._start(ItemSequence(step_key, max_items), Listeners(writer, callbacks))
        self.session_id = session_id
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.created_at = dt.datetime.now(dt.timezone.utc).isoformat()
        if writer is not None:
            # Items are watched while the index exists, and a writer must hear of every field change.
            self._seq.ensure_index()
        if items is not None:
            self.load(list(items))

    def _start(self, seq: ItemSequence, listeners: Listeners) -> None:
        """Take ``seq`` and ``listeners`` as the memory's parts, with a new lock."""
        self._lock = threading.RLock()
        self._seq = seq
        self._listeners = listeners
        seq.watcher = OwnedRef(self._on_item_change, seq)
        self._fast = listeners.quiet and seq.max_items is None

    # -- configuration -------------------------------------------------------

    @property
    def step_key(self) -> str:
        """The field that names an item's step."""
        return self._seq.step_key

    @property
    def max_items(self) -> int | None:
        """The bound on the number of items, or ``None`` for no bound."""
        return self._seq.max_items

    @property
    def lock(self) -> threading.RLock:
        """The lock every method holds; hold it to make several calls one consistent step.

        It is reentrant, so the memory's own calls work while you hold it::

            with memory.lock:
                if memory.get_latest_item() is last_seen:
                    memory.add_memory_item(item)
        """
        return self._lock

    def add_callback(self, callback: ChangeCallback) -> None:
        """Run ``callback(memory, change)`` after each add, delete and clear."""
        with self._lock:
            self._listeners.callbacks.append(callback)
            self._fast = False

    def remove_callback(self, callback: ChangeCallback) -> None:
        """Stop running ``callback``.

        Raises:
            InvalidArgumentError: if ``callback`` was not registered.
        """
        with self._lock:
            self._listeners.remove_callback(callback)
            self._fast = self._listeners.quiet and self._seq.max_items is None

    def add_observer(self, observer: MemoryWriter) -> None:
        """Tell ``observer`` of every change *after* it is applied, by item key.

        The observer first hears the current content as one ``write_replace``,
        then every add, delete, field change and whole-content load with the
        same calls a :class:`MemoryWriter` gets, under the memory's lock, in
        the order the changes happened. This is how state derived item by item
        (the index behind :meth:`search`) follows the memory. An observer must
        not raise: the change is already applied.

        Adds reach observers in batches: items added one by one (while the
        memory has no writer, callbacks or ``max_items``) are told in one
        ``write_add`` before the next other change is told, or when
        :meth:`notify_observers` is called. An observer calls it before it
        reads what it derived, so building a memory pays nothing per item
        for its observers.
        """
        with self._lock:
            self._settle()
            self._seq.ensure_index()  # items are watched while it exists: field changes reach observers
            self._listeners.observers.append(observer)
            observer.write_replace(self, list(self._seq.items.items()))

    def notify_observers(self) -> None:
        """Tell the observers of the items added since they last heard (see :meth:`add_observer`)."""
        with self._lock:
            self._settle()

    def remove_observer(self, observer: MemoryWriter) -> None:
        """Stop telling ``observer`` of changes.

        Raises:
            ValueError: if ``observer`` was not added.
        """
        with self._lock:
            self._listeners.observers.remove(observer)

    @property
    def observers(self) -> tuple[MemoryWriter, ...]:
        """The observers added with :meth:`add_observer`, in order."""
        return tuple(self._listeners.observers)

    # -- UFO's API -----------------------------------------------------------

    @property
    def content(self) -> list[MemoryItem]:
        """The items in order: a new, read-only list (the items themselves are live).

        Appending, inserting or deleting through it raises
        :class:`~agents.memory.ReadOnlyViewError` naming the method to call
        (``add_memory_item`` ...), since the change would not reach the memory.
        """
        with self._lock:
            return MemoryContent(self._seq.items.values())

    @property
    def list_content(self) -> list[dict[str, Any]]:
        """Each item's fields as a new dict, in order, in a read-only list (see :attr:`content`)."""
        return MemoryListContent(self.to_list_of_dicts())

    @property
    def length(self) -> int:
        """The number of items."""
        return len(self._seq.items)

    def is_empty(self) -> bool:
        """Return whether the memory holds no item."""
        return not self._seq.items

    def load(self, content: Iterable[MemoryItem]) -> None:
        """Replace the content with ``content``, all or nothing.

        Raises:
            ArgumentTypeError: if an element is not a ``MemoryItem``; the memory is unchanged.
        """
        self._replace(_checked_items(content, "the memory was left unchanged"))

    def add_memory_item(self, memory_item: MemoryItem) -> None:
        """Append ``memory_item``, index its step and run the callbacks.

        Raises:
            ArgumentTypeError: if ``memory_item`` is not a ``MemoryItem``.
            CallbackError: if a callback raised; the item stays added.
        """
        if not isinstance(memory_item, MemoryItem):
            msg = (
                f"add_memory_item() takes a MemoryItem, got {type(memory_item).__name__}; "
                "wrap a dict with MemoryItem(**fields)."
            )
            raise ArgumentTypeError(msg)
        with self._lock:
            if self._fast:
                # Nothing to ask first and nothing to evict: the agent's hot path.
                # The step index and the observers catch up on their next read.
                self._seq.push(memory_item)
            else:
                self._add([memory_item])

    def add_memory_items(self, items: Iterable[MemoryItem]) -> None:
        """Append several items, all or nothing, then run the callbacks once.

        Raises:
            ArgumentTypeError: if an element is not a ``MemoryItem``; nothing is added.
            CallbackError: if a callback raised; the items stay added.
        """
        batch = _checked_items(items, "nothing was added")
        if batch:
            self._add(batch)

    def get_latest_item(self) -> MemoryItem | None:
        """Return the last item, or ``None`` when the memory is empty."""
        with self._lock:
            items = self._seq.items
            return next(reversed(items.values())) if items else None

    def filter_memory_from_keys(self, keys: Iterable[str]) -> list[dict[str, Any]]:
        """Return, for every item, a new dict of its fields among ``keys``.

        Items that hold none of the keys give ``{}``, so positions line up with
        the memory. Fields come in each item's order, as in UFO (the prompt
        text follows it); :func:`agents.memory.prompt.project` gives the order
        of ``keys``.
        """
        wanted = frozenset(keys)
        with self._lock:
            items = self._seq.snapshot()
        # filter_fields, inlined: a call per item is a third of the time here.
        # Going through the keys and reading the few wanted values beats
        # going through every (key, value) pair.
        return [{k: f[k] for k in f if k in wanted} for f in map(fields_of, items)]

    def filter_memory_from_steps(self, steps: Iterable[Any]) -> list[dict[str, Any]]:
        """Return a new dict of fields for every item whose step is in ``steps``, in memory order."""
        with self._lock:
            self._settle()
            return [item.to_dict() for item in self._seq.items_of_steps(steps)]

    def delete_memory_item(self, step: Any) -> int:
        """Delete every item of ``step`` and return how many were deleted.

        Items without a step field are never deleted by step.

        Raises:
            CallbackError: if a callback raised; the items stay deleted.
        """
        with self._lock:
            self._settle()
            return self._delete_keys(self._seq.keys_of_steps((step,)))

    def delete_items(self, items: Iterable[MemoryItem]) -> int:
        """Delete these very items (by identity, wherever the memory holds them); return how many went.

        Items the memory does not hold are skipped.

        Raises:
            CallbackError: if a callback raised; the items stay deleted.
        """
        with self._lock:
            self._settle()
            keys: set[int] = set()
            for item in items:
                keys.update(self._seq.keys_holding(item))
            return self._delete_keys(sorted(keys))

    def item_changed(self, item: MemoryItem) -> None:
        """Tell the memory that a value of ``item`` was changed in place.

        Field changes through ``set_value``, ``item[key] = ...`` and ``del``
        are seen on their own; mutating a value in place
        (``item["tags"].append(x)``) is not. Call this afterwards so that the
        step index and a durable store follow.

        Raises:
            ItemNotFoundError: if the memory does not hold ``item``.
        """
        with self._lock:
            self._settle()
            seq = self._seq
            keys = seq.keys_holding(item) or [k for k, held in seq.items.items() if held is item]
            if not keys:
                msg = f"{item!r} is not an item of {self!r}; add it with add_memory_item()."
                raise ItemNotFoundError(msg)
            self._listeners.before_update(self, keys, item)
            step = item_fields(item).get(seq.step_key, NOTHING)
            for key in keys:
                seq.refile(key, item, step)
            self._listeners.after_update(self, keys, item)

    def clear(self) -> None:
        """Remove every item.

        Raises:
            CallbackError: if a callback raised; the memory stays cleared.
        """
        with self._lock:
            listeners = self._listeners
            removed = tuple(self._seq.items.values())
            listeners.before_replace(self, ())
            self._seq.reset()
            if listeners.told_by_key:
                # Items added from now on must be watched, so that their field changes are heard.
                self._seq.ensure_index()
            listeners.after_replace(self, ())
            if listeners.callbacks and removed:
                listeners.run_callbacks(self, MemoryChange("clear", removed))

    # -- Python protocols ----------------------------------------------------

    def __len__(self) -> int:
        return len(self._seq.items)

    def __bool__(self) -> bool:
        return bool(self._seq.items)

    def __iter__(self) -> Iterator[MemoryItem]:
        return iter(self._snapshot())

    @overload
    def __getitem__(self, index: int) -> MemoryItem: ...
    @overload
    def __getitem__(self, index: slice) -> list[MemoryItem]: ...
    def __getitem__(self, index: int | slice) -> MemoryItem | list[MemoryItem]:
        return self._snapshot()[index]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Memory):
            return NotImplemented
        return self.step_key == other.step_key and self._snapshot() == other._snapshot()

    __hash__ = None  # type: ignore[assignment]  # mutable container

    def __repr__(self) -> str:
        label = f" {self.session_id!r}" if self.session_id else ""
        return f"<Memory{label}: {len(self._seq.items)} items, step_key={self.step_key!r}>"

    def _restart(self, settings: Mapping[str, Any], items: list[MemoryItem]) -> None:
        """Make the parts anew from pickled ``settings`` and ``items`` (see ``SessionFormats``)."""
        seq = ItemSequence(settings.get("_step_key", "step"), settings.get("_max_items"))
        self._start(seq, Listeners(None, settings.get("_callbacks", ())))
        seq.replace(seq.next_keys(len(items)), items, indexed=False)

    # -- extended reads ------------------------------------------------------

    def last(self, k: int) -> list[MemoryItem]:
        """Return the last ``k`` items in memory order (fewer if the memory is shorter).

        Raises:
            InvalidArgumentError: if ``k`` is negative.
        """
        if type(k) is not int or k < 0:
            msg = f"last() takes an int k >= 0, got {k!r}."
            raise InvalidArgumentError(msg)
        with self._lock:
            return self._seq.last(k)

    def iter_newest(self) -> Iterator[MemoryItem]:
        """Yield items newest first, reading them in growing chunks.

        The cost follows how many items the caller reads, not the size of the
        memory, which is what windows over long sessions need. Items appended
        while the iteration runs may be skipped or seen twice.
        """
        seen = 0
        chunk_size = 32
        while True:
            chunk = self.last(chunk_size)
            if len(chunk) <= seen:
                return
            yield from reversed(chunk[: len(chunk) - seen])
            seen = len(chunk)
            chunk_size *= 2

    def select(self, predicate: Callable[[MemoryItem], bool]) -> list[MemoryItem]:
        """Return the items for which ``predicate(item)`` is true, in memory order."""
        return [item for item in self._snapshot() if predicate(item)]

    def steps(self) -> list[Any]:
        """Return the distinct step values in order of first appearance (items without a step are skipped)."""
        with self._lock:
            return self._seq.steps()

    def items_of_steps(self, steps: Iterable[Any]) -> list[MemoryItem]:
        """Return the (live) items whose step is in ``steps``, in memory order."""
        with self._lock:
            self._settle()
            return self._seq.items_of_steps(steps)

    def items_of_step(self, step: Any) -> list[MemoryItem]:
        """Return the items of ``step`` in memory order.

        Raises:
            StepNotFoundError: if no item has that step.
        """
        items = self.items_of_steps((step,))
        if not items:
            msg = (
                f"No item has {self.step_key}={step!r}; the memory holds steps {self.steps()[:20]}."
            )
            raise StepNotFoundError(msg)
        return items

    # -- internals: each change, told to the listeners around the sequence's part --

    def _snapshot(self) -> list[MemoryItem]:
        """Return the items as a list that later changes will not touch (treat it as read-only)."""
        with self._lock:
            return self._seq.snapshot()

    def _settle(self) -> None:
        """File the fast path's items and tell the observers of them (call under the lock)."""
        tail = self._seq.settle()
        if tail:
            self._listeners.settled(self, tail)

    def _add(self, batch: list[MemoryItem]) -> None:
        """Append checked items, drop the oldest beyond ``max_items``, announce both."""
        with self._lock:
            self._settle()  # items added on the fast path are announced first
            seq = self._seq
            keys = seq.next_keys(len(batch))
            evicted = seq.evictions(keys)
            self._listeners.before_add(self, keys, batch, evicted)
            seq.append(batch)
            removed = [seq.remove(key) for key in evicted]
            self._listeners.after_add(self, keys, batch, evicted, removed)

    def _delete_keys(self, keys: list[int]) -> int:
        """Delete the items under ``keys`` (in memory order, fast path settled), announce it, return how many."""
        if not keys:
            return 0
        self._listeners.before_delete(self, keys)
        removed = [self._seq.remove(key) for key in keys]
        self._listeners.after_delete(self, keys, removed)
        return len(removed)

    def _replace(self, items: list[MemoryItem]) -> None:
        """Make ``items`` the whole content (the newest ``max_items`` of them): the one load path."""
        with self._lock:
            seq = self._seq
            listeners = self._listeners
            kept = seq.bounded(items)
            keys = seq.next_keys(len(kept))
            # The (key, item) pairs only for those who are told: a tuple per
            # item is as many objects for the collector to go through.
            told = listeners.told_by_key
            pairs = list(zip(keys, kept, strict=True)) if told else []
            listeners.before_replace(self, pairs)
            seq.replace(keys, kept, indexed=told)
            listeners.after_replace(self, pairs)

    def _on_item_change(self, item: MemoryItem, key: str, old: Any, new: Any) -> None:
        """Write a field change of a held item through, and refile the item if its step changed."""
        with self._lock:
            seq = self._seq
            if seq.index is None:
                return
            self._settle()  # observers hear earlier adds before this change
            step_changed = key == seq.step_key
            filed = old if step_changed else item_fields(item).get(seq.step_key, NOTHING)
            keys = seq.keys_filed(item, filed)
            if not keys:
                return
            self._listeners.before_update(self, keys, item)
            if step_changed:
                for held in keys:
                    seq.refile(held, item, old)
            self._listeners.after_update(self, keys, item)

    def _take(self, header: Mapping[str, Any], items: list[MemoryItem]) -> None:
        """Replace the content with a file's items and take its checked header, in one step.

        ``header`` comes from ``_session.check_header``, which validated every
        field, so this cannot fail half-way.
        """
        with self._lock:
            if self._listeners.writer is None:
                # A memory with a writer keeps its identity: its session id and step
                # key name where the writer files the items, not what a file says.
                if "step_key" in header:
                    self._seq.reset()  # the index goes with the step key it was built on
                    self._seq.step_key = header["step_key"]
                if "session_id" in header:
                    self.session_id = header["session_id"]
            self._replace(items)
            if "metadata" in header:
                self.metadata = header["metadata"]
            if "created_at" in header:
                self.created_at = header["created_at"]


def _checked_items(items: Iterable[MemoryItem], outcome: str) -> list[MemoryItem]:
    """Return ``items`` as a list, refusing any element that is not a ``MemoryItem``."""
    batch = list(items)
    for position, item in enumerate(batch):
        if not isinstance(item, MemoryItem):
            msg = f"Element {position} is a {type(item).__name__}, not a MemoryItem; {outcome}."
            raise ArgumentTypeError(msg)
    return batch
