"""``Memory``: an agent's ordered record of ``MemoryItem`` steps.

This is the module UFO-style code imports (``from agents.memory.memory import
Memory, MemoryItem``). ``Memory`` keeps UFO's names and meaning and fixes its
defects: items without a step never crash step filtering or deletion, step
lookups go through an index that follows items whose step changes after they
were added, projections return fresh dicts, loading is all-or-nothing, and
every call is safe under threads.
"""

from __future__ import annotations

import bisect
import datetime as dt
import operator
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, ValuesView
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol, overload

import attrs
from typing_extensions import Self

from agents.memory import _codec, _session
from agents.memory._codec import OnUnencodable
from agents.memory._item import (
    NOTHING,
    MemoryItem,
    OnUnknownClass,
    OwnedRef,
    dumps_items,
    item_fields,
    items_from_mappings,
    ufo_json_items,
    unwatch_items,
    watch_items,
)
from agents.memory._views import MemoryContent, MemoryListContent
from agents.memory.exceptions import (
    ArgumentTypeError,
    CallbackError,
    InvalidArgumentError,
    ItemNotFoundError,
    StepNotFoundError,
)

if TYPE_CHECKING:
    from agents.memory.prompt import Window
    from agents.memory.search import Embedder, Hit, SearchMode, Where

__all__ = [
    "ChangeKind",
    "Memory",
    "MemoryChange",
    "MemoryItem",
    "MemoryWriter",
]

ChangeKind = Literal["add", "delete", "clear"]
"""What a change did to a memory: items were added, deleted, or all cleared."""

_fields_of = operator.attrgetter("_fields")


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


def _validate_max_items(instance: object, attribute: object, value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 1):
        msg = f"max_items must be a positive int or None, got {value!r}."
        raise InvalidArgumentError(msg)


class Memory:
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
        _validate_max_items(self, None, max_items)
        self._lock = threading.RLock()
        self._watcher = OwnedRef(self._on_item_change, self)
        self._writer = writer
        self._observers: list[MemoryWriter] = []
        self._step_key = step_key
        self._max_items = max_items
        self._callbacks: list[ChangeCallback] = list(callbacks)
        self.session_id = session_id
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.created_at = dt.datetime.now(dt.timezone.utc).isoformat()
        self._items: dict[int, MemoryItem] = {}
        self._next_seq = 0
        self._first_seq = 0
        # Items under keys from here on were appended on the fast path and are
        # not yet filed, watched or told to observers: _settle() catches up.
        self._settled = 0
        # step -> sorted seqs; built on first step lookup, then kept up to date.
        # Step -> the seqs of its items: a bare seq for a step of one item (most
        # steps), a sorted list for more. Built on the first step lookup.
        self._by_step: dict[Any, int | list[int]] | None = None
        self._stepless: dict[int, None] = {}
        self._unhashable_steps: dict[int, None] = {}
        self._list: list[MemoryItem] | None = None
        self._list_shared = False
        if writer is not None:
            # Items are watched while the index exists, and a writer must hear of every field change.
            self._index()
        if items is not None:
            self.load(list(items))

    # -- configuration -------------------------------------------------------

    @property
    def step_key(self) -> str:
        """The field that names an item's step."""
        return self._step_key

    @property
    def max_items(self) -> int | None:
        """The bound on the number of items, or ``None`` for no bound."""
        return self._max_items

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
            self._callbacks.append(callback)

    def remove_callback(self, callback: ChangeCallback) -> None:
        """Stop running ``callback``.

        Raises:
            InvalidArgumentError: if ``callback`` was not registered.
        """
        with self._lock:
            try:
                self._callbacks.remove(callback)
            except ValueError:
                name = getattr(callback, "__qualname__", repr(callback))
                msg = f"Callback {name} is not registered on this memory; nothing was removed."
                raise InvalidArgumentError(msg) from None

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
            self._index()  # items are watched while the index exists: field changes reach observers
            self._observers.append(observer)
            observer.write_replace(self, list(self._items.items()))

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
            self._observers.remove(observer)

    @property
    def observers(self) -> tuple[MemoryWriter, ...]:
        """The observers added with :meth:`add_observer`, in order."""
        return tuple(self._observers)

    # -- UFO's API -----------------------------------------------------------

    @property
    def content(self) -> list[MemoryItem]:
        """The items in order: a new, read-only list (the items themselves are live).

        Appending, inserting or deleting through it raises
        :class:`~agents.memory.ReadOnlyViewError` naming the method to call
        (``add_memory_item`` ...), since the change would not reach the memory.
        """
        with self._lock:
            return MemoryContent(self._items.values())

    @property
    def list_content(self) -> list[dict[str, Any]]:
        """Each item's fields as a new dict, in order, in a read-only list (see :attr:`content`)."""
        return MemoryListContent(self.to_list_of_dicts())

    @property
    def length(self) -> int:
        """The number of items."""
        return len(self._items)

    def is_empty(self) -> bool:
        """Return whether the memory holds no item."""
        return not self._items

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
            if self._writer is None and not self._callbacks and self._max_items is None:
                # Nothing to ask first and nothing to evict: store it (_push,
                # inlined: this is the agent's hot path). The step index and
                # the observers catch up on their next read (_settle).
                seq = self._next_seq
                self._next_seq = seq + 1
                self._items[seq] = memory_item
                if self._list is not None:
                    if self._list_shared:
                        self._list = None
                    else:
                        self._list.append(memory_item)
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
            if not self._items:
                return None
            return next(reversed(self._items.values()))

    def filter_memory_from_keys(self, keys: Iterable[str]) -> list[dict[str, Any]]:
        """Return, for every item, a new dict of its fields among ``keys``.

        Items that hold none of the keys give ``{}``, so positions line up with
        the memory. Fields come in each item's order, as in UFO (the prompt
        text follows it); :func:`agents.memory.prompt.project` gives the order
        of ``keys``.
        """
        wanted = frozenset(keys)
        with self._lock:
            items = self._snapshot()
        # filter_fields, inlined: a call per item is a third of the time here.
        # Going through the keys and reading the few wanted values beats
        # going through every (key, value) pair.
        return [{k: f[k] for k in f if k in wanted} for f in map(_fields_of, items)]

    def filter_memory_from_steps(self, steps: Iterable[Any]) -> list[dict[str, Any]]:
        """Return a new dict of fields for every item whose step is in ``steps``, in memory order."""
        with self._lock:
            return [item.to_dict() for item in self._items_of_steps(steps)]

    def delete_memory_item(self, step: Any) -> int:
        """Delete every item of ``step`` and return how many were deleted.

        Items without a step field are never deleted by step.

        Raises:
            CallbackError: if a callback raised; the items stay deleted.
        """
        with self._lock:
            return self._delete_seqs(self._seqs_of_steps((step,)))

    def delete_items(self, items: Iterable[MemoryItem]) -> int:
        """Delete these very items (by identity, wherever the memory holds them); return how many went.

        Items the memory does not hold are skipped.

        Raises:
            CallbackError: if a callback raised; the items stay deleted.
        """
        with self._lock:
            seqs: set[int] = set()
            for item in items:
                seqs.update(self._seqs_holding(item))
            return self._delete_seqs(sorted(seqs))

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
            seqs = self._seqs_holding(item)
            if not seqs:
                seqs = [seq for seq, held in self._items.items() if held is item]
            if not seqs:
                msg = f"{item!r} is not an item of {self!r}; add it with add_memory_item()."
                raise ItemNotFoundError(msg)
            if self._writer is not None:
                self._writer.write_update(self, seqs, item)
            step = item_fields(item).get(self._step_key, NOTHING)
            for seq in seqs:
                self._refile(seq, item, step)
            for observer in self._observers:
                observer.write_update(self, seqs, item)

    def clear(self) -> None:
        """Remove every item.

        Raises:
            CallbackError: if a callback raised; the memory stays cleared.
        """
        with self._lock:
            removed = tuple(self._items.values())
            if self._writer is not None:
                self._writer.write_replace(self, ())
            self._reset()
            if self._writer is not None or self._observers:
                # Items added from now on must be watched, so that their field changes are heard.
                self._index()
            for observer in self._observers:
                observer.write_replace(self, ())
            if self._callbacks and removed:
                self._run_callbacks(MemoryChange("clear", removed))

    def to_json(self, *, on_unencodable: OnUnencodable = "error") -> str:
        """Return the items as UFO writes them: ``json.dumps`` of the list of field dicts.

        Byte for byte what UFO's ``Memory.to_json`` writes for every value it
        can write: ``", "`` and ``": "`` separators, non-ASCII text escaped,
        ``str``/``int`` enums as their values, tuples as lists, so
        ``json.loads(memory.to_json())`` gives UFO's values back. A value
        ``json.dumps`` refuses (``datetime``, ``set``, ``bytes``, ...) is
        written as its type tag where UFO would raise; :meth:`from_json`
        decodes the tags. Items come back as plain ``MemoryItem``; use
        :meth:`to_json_bytes` or :meth:`save` to keep classes and types.

        Raises:
            SerializationError: naming the key, step and type of a value that
                cannot be encoded under ``on_unencodable``.
        """
        return ufo_json_items(
            self._snapshot(), step_key=self._step_key, on_unencodable=on_unencodable
        )

    def to_json_bytes(self, *, on_unencodable: OnUnencodable = "error") -> bytes:
        """Return the items in kvmemory's lossless form: a compact UTF-8 JSON array.

        Plain items are their field objects; values JSON cannot hold
        (``tuple``, ``datetime``, enums, NaN, ...) and typed item classes are
        kept with type tags (see ``docs/format.md``), so :meth:`from_json`
        gives back an equal memory. Session files and stores use this form.

        Raises:
            SerializationError: naming the key, step and type of a value that
                cannot be encoded under ``on_unencodable``.
        """
        return dumps_items(self._snapshot(), step_key=self._step_key, on_unencodable=on_unencodable)

    def to_list_of_dicts(self) -> list[dict[str, Any]]:
        """Return each item's fields as a new dict, in order."""
        with self._lock:
            items = self._snapshot()
        return [dict(f) for f in map(_fields_of, items)]

    def from_list_of_dicts(
        self, data: Iterable[Mapping[str, Any]], *, item_class: type[MemoryItem] = MemoryItem
    ) -> None:
        """Replace the content with one item per mapping, all or nothing.

        Raises:
            ArgumentTypeError: naming the position of an element that is not a mapping.
            InvalidKeyError: naming a key that is not a string.
            FieldValidationError: if ``item_class`` declares fields and one is invalid.
        """
        items = items_from_mappings(item_class, data, "the memory was left unchanged")
        self._replace(items)

    # -- Python protocols ----------------------------------------------------

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

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
        return self._step_key == other._step_key and self._snapshot() == other._snapshot()

    __hash__ = None  # type: ignore[assignment]  # mutable container

    def __repr__(self) -> str:
        label = f" {self.session_id!r}" if self.session_id else ""
        return f"<Memory{label}: {len(self._items)} items, step_key={self._step_key!r}>"

    # -- copying and pickling -------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """Return what ``pickle`` and ``copy`` keep: the items and the settings, not the lock.

        The copy gets a lock of its own, builds its step index on its first
        lookup and has no observers (the search index is built again on the
        copy's first search; embeddings are computed again). Change callbacks
        travel with it (``pickle`` needs them to be picklable).

        Raises:
            ArgumentTypeError: if the memory writes to a store: a copy would
                write to the same session. Copy ``memory.content`` into a
                ``Memory`` instead.
        """
        with self._lock:
            if self._writer is not None:
                msg = (
                    f"{self!r} writes through to a store and cannot be pickled or copied (a copy "
                    "would write to the same session); copy its items instead: "
                    "Memory(copy.deepcopy(memory.content))."
                )
                raise ArgumentTypeError(msg)
            state = {k: v for k, v in self.__dict__.items() if k not in _RUNTIME_STATE}
            state["_items"] = list(self._items.values())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Take the state :meth:`__getstate__` gave, with a new lock and no observers."""
        state = dict(state)
        items: list[MemoryItem] = list(state.pop("_items"))
        self.__dict__.update(state)
        self._lock = threading.RLock()
        self._watcher = OwnedRef(self._on_item_change, self)
        self._writer = None
        self._observers = []
        self._items = dict(enumerate(items))
        self._next_seq = self._settled = len(items)
        self._first_seq = 0
        self._by_step = None
        self._stepless = {}
        self._unhashable_steps = {}
        self._list = list(items)
        self._list_shared = False

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
            values = reversed(self._items.values())
            out = [item for _, item in zip(range(k), values, strict=False)]
        out.reverse()
        return out

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
        key = self._step_key
        seen: dict[Any, None] = {}
        others: list[Any] = []
        for item in self._snapshot():
            step = item_fields(item).get(key, NOTHING)
            if step is NOTHING:
                continue
            try:
                seen.setdefault(step, None)
            except TypeError:
                if step not in others:
                    others.append(step)
        return [*seen, *others]

    def items_of_steps(self, steps: Iterable[Any]) -> list[MemoryItem]:
        """Return the (live) items whose step is in ``steps``, in memory order."""
        with self._lock:
            return self._items_of_steps(steps)

    def items_of_step(self, step: Any) -> list[MemoryItem]:
        """Return the items of ``step`` in memory order.

        Raises:
            StepNotFoundError: if no item has that step.
        """
        with self._lock:
            items = self._items_of_steps((step,))
        if not items:
            msg = f"No item has {self._step_key}={step!r}; the memory holds steps {self.steps()[:20]}."
            raise StepNotFoundError(msg)
        return items

    # -- search (the search room, imported on first use) ------------------------

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        keys: Iterable[str] | None = None,
        mode: SearchMode = "keyword",
        where: Where | None = None,
        embedder: Embedder | None = None,
    ) -> list[Hit]:
        """Return the ``k`` items that best match ``query``, best first, as hits.

        Keyword mode ranks by BM25; the index is built on the first search
        and then follows every change. See :func:`agents.memory.search.search`.

        Args:
            query: The text to look for.
            k: How many hits at most.
            keys: Search only these fields (default: every string field, nested strings included).
            mode: ``"keyword"``, ``"semantic"`` or ``"hybrid"``.
            where: ``{field: value}`` (a ``range`` for step ranges) or a predicate, applied before ranking.
            embedder: The model for semantic and hybrid modes.

        Raises:
            InvalidQueryError: for an empty query, ``k`` outside 1 to 2**63 - 1, an unknown mode or a bad filter.
            EmbeddingError: if the embedder returns the wrong shape or NaN.
            EmbedderMismatchError: if the memory was embedded with another model.
        """
        from agents.memory import search

        return search.search(self, query, k, keys=keys, mode=mode, where=where, embedder=embedder)

    def recall(
        self,
        query: str,
        k: int = 3,
        *,
        recent: Window | None = None,
        keys: Iterable[str] | None = None,
        mode: SearchMode = "keyword",
        where: Where | None = None,
        embedder: Embedder | None = None,
    ) -> list[MemoryItem]:
        """Return the top ``k`` hits for ``query`` and the ``recent`` window's items, once each, in session order.

        See :func:`agents.memory.search.recall`.

        Raises:
            InvalidQueryError: as :meth:`search`.
            BudgetExceededError: if the window's pinned items alone break its bounds.
        """
        from agents.memory import search

        return search.recall(
            self, query, k, recent=recent, keys=keys, mode=mode, where=where, embedder=embedder
        )

    def index_embeddings(
        self,
        embedder: Embedder | None = None,
        *,
        keys: Iterable[str] | None = None,
        batch_size: int = 256,
        progress: bool | Callable[[int, int], object] = False,
    ) -> int:
        """Embed every item without a vector, in batches; return how many items hold one.

        See :func:`agents.memory.search.index_embeddings`.

        Raises:
            EmbeddingError: if the embedder returns the wrong shape or NaN.
        """
        from agents.memory import search

        return search.index_embeddings(
            self, embedder, keys=keys, batch_size=batch_size, progress=progress
        )

    # -- session files -------------------------------------------------------

    def save(
        self, path: str | os.PathLike[str], *, on_unencodable: OnUnencodable = "error"
    ) -> None:
        """Write the memory as a versioned session file, atomically.

        A path ending in ``.jsonl`` gets a JSONL stream (a header line, then one
        item per line); any other path gets one JSON document. The file is
        written to a temporary name, flushed to disk and renamed, so a crash
        leaves either the old file or the new one.

        Raises:
            SerializationError: if a value cannot be encoded; no file is written.
            InvalidArgumentError: if ``path`` holds a NUL byte; no file is written.
        """
        name = _codec.file_path(path, what="session file path")
        # Encoded before the file is opened, so an unencodable value writes nothing.
        chunks = list(
            self._session_chunks(jsonl=name.endswith(".jsonl"), on_unencodable=on_unencodable)
        )
        _codec.atomic_write(name, chunks)

    def write_jsonl(self, stream: IO[bytes], *, on_unencodable: OnUnencodable = "error") -> None:
        """Stream the memory to a binary file as JSONL: a header line, then one line per item.

        Raises:
            SerializationError: if a value cannot be encoded (earlier lines are already written).
        """
        for chunk in self._session_chunks(jsonl=True, on_unencodable=on_unencodable):
            stream.write(chunk)

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        on_unknown_class: OnUnknownClass = "error",
        trusted_import: bool = False,
        **options: Any,
    ) -> Self:
        """Open a session file (JSON document, JSONL stream or UFO's bare array) as a new memory.

        Args:
            path: The file to read.
            on_unknown_class: ``"base"`` loads items of a class this process
                does not define as plain ``MemoryItem`` (and enum members of an
                unknown class as their values) instead of raising.
            trusted_import: Import the modules the file names to find its
                classes. This runs their code: only for files you trust.
            **options: Passed to the constructor (``max_items``, ``callbacks``).

        Raises:
            FileNotFoundError: if ``path`` does not exist.
            InvalidArgumentError: if ``path`` holds a NUL byte.
            CorruptSessionError: naming the file and position of invalid content.
            UnsupportedVersionError: if a newer kvmemory wrote the file.
        """
        memory = cls(**options)
        memory.load_file(path, on_unknown_class=on_unknown_class, trusted_import=trusted_import)
        return memory

    def load_file(
        self,
        path: str | os.PathLike[str],
        *,
        on_unknown_class: OnUnknownClass = "error",
        trusted_import: bool = False,
    ) -> None:
        """Replace the content with a session file's items, all or nothing.

        The session id, metadata and step key saved in the file are restored.
        Classes are found among those this process defines; see
        :meth:`from_file` for ``on_unknown_class`` and ``trusted_import``.

        Raises:
            FileNotFoundError: if ``path`` does not exist.
            InvalidArgumentError: if ``path`` holds a NUL byte.
            CorruptSessionError: naming the file and position; the memory is unchanged.
            UnsupportedVersionError: if a newer kvmemory wrote the file.
        """
        name = _codec.file_path(path, what="session file path")
        options = _session.LoadOptions(on_unknown_class, trusted_import)
        self._take(*_session.read_session_file(name, options))

    @classmethod
    def from_json(
        cls,
        data: str | bytes,
        *,
        on_unknown_class: OnUnknownClass = "error",
        trusted_import: bool = False,
        **options: Any,
    ) -> Self:
        """Create a memory from :meth:`to_json` or :meth:`to_json_bytes` output, or a saved session document.

        See :meth:`from_file` for ``on_unknown_class`` and ``trusted_import``.

        Raises:
            CorruptSessionError: naming the position of invalid content.
        """
        memory = cls(**options)
        memory.load_json(data, on_unknown_class=on_unknown_class, trusted_import=trusted_import)
        return memory

    def load_json(
        self,
        data: str | bytes,
        *,
        source: str = "JSON input",
        on_unknown_class: OnUnknownClass = "error",
        trusted_import: bool = False,
    ) -> None:
        """Replace the content with the items of a JSON array or session document, all or nothing.

        See :meth:`from_file` for ``on_unknown_class`` and ``trusted_import``.

        Raises:
            CorruptSessionError: naming the position of invalid content; the memory is unchanged.
        """
        options = _session.LoadOptions(on_unknown_class, trusted_import)
        self._take(*_session.read_document(data, source, options))

    @classmethod
    def read_jsonl(
        cls,
        stream: IO[bytes],
        *,
        source: str = "JSONL input",
        on_unknown_class: OnUnknownClass = "error",
        trusted_import: bool = False,
        **options: Any,
    ) -> Self:
        """Create a memory from a JSONL stream written by :meth:`write_jsonl`, line by line.

        See :meth:`from_file` for ``on_unknown_class`` and ``trusted_import``.

        Raises:
            CorruptSessionError: naming the line of invalid content.
        """
        memory = cls(**options)
        load = _session.LoadOptions(on_unknown_class, trusted_import)
        memory._take(*_session.read_jsonl(stream, source, load))
        return memory

    # -- internals: storage and index ----------------------------------------
    #
    # Items live in ``_items`` under their keys (``seq``: an int given at add,
    # never reused, increasing in memory order). Two paths change the set of
    # items: ``_add`` (appends, then evictions under ``max_items``) and
    # ``_replace`` (everything at once: loads, reopens, ``clear``); deletions
    # go through ``_delete_seqs``. Each tells the writer first, then applies.
    # While the step index exists, every item in it is watched, so field
    # changes reach ``_on_item_change``.

    def _snapshot(self) -> list[MemoryItem]:
        """Return the items as a list that later changes will not touch (treat it as read-only)."""
        with self._lock:
            items = self._list
            if items is None:
                items = self._list = list(self._items.values())
            # Handed out: the next append must start a new list, not grow this one.
            self._list_shared = True
            return items

    def _add(self, batch: list[MemoryItem]) -> None:
        """Append checked items, drop the oldest beyond ``max_items``, announce both."""
        with self._lock:
            self._settle()  # items added on the fast path are announced first
            start = self._next_seq
            seqs = range(start, start + len(batch))
            evicted = self._oldest_beyond_bound(seqs)
            if self._writer is not None:
                self._writer.write_add(self, list(zip(seqs, batch, strict=True)), evicted)
            for item in batch:
                seq = self._push(item)
                if self._by_step is not None:
                    self._index_seq(seq, item)
            self._settled = self._next_seq
            removed = [self._remove_seq(seq) for seq in evicted]
            if removed:
                self._list = None
            if self._observers:
                added = list(zip(seqs, batch, strict=True))
                for observer in self._observers:
                    observer.write_add(self, added, evicted)
            if self._callbacks:
                if removed:
                    self._run_callbacks(MemoryChange("delete", tuple(removed)))
                self._run_callbacks(MemoryChange("add", tuple(batch)))

    def _push(self, item: MemoryItem) -> int:
        """Store ``item`` under the next key and return the key (nothing is filed or told)."""
        seq = self._next_seq
        self._next_seq = seq + 1
        self._items[seq] = item
        if self._list is not None:
            if self._list_shared:
                self._list = None
            else:
                self._list.append(item)
        return seq

    def _settle(self) -> None:
        """File, watch and announce to observers the items stored by the fast path since the last call."""
        start = self._settled
        if start == self._next_seq:
            return
        self._settled = self._next_seq
        if self._by_step is None:
            return  # nothing is filed or watched, and observers exist only with the index
        tail: list[tuple[int, MemoryItem]] = []
        for seq, item in reversed(self._items.items()):
            if seq < start:
                break
            tail.append((seq, item))
        tail.reverse()
        self._file([seq for seq, _ in tail], [item for _, item in tail])
        for observer in self._observers:
            observer.write_add(self, tail, ())

    def _oldest_beyond_bound(self, incoming: range) -> list[int]:
        """Return the keys ``max_items`` evicts once ``incoming`` is appended, oldest first."""
        bound = self._max_items
        if bound is None:
            return []
        excess = len(self._items) + len(incoming) - bound
        if excess <= 0:
            return []
        items = self._items
        seq = self._first_seq
        # Keys below _first_seq are gone for good (keys are never reused), so
        # the scan starts there and moves the mark past keys already deleted.
        while seq < self._next_seq and seq not in items:
            seq += 1
        self._first_seq = seq
        out: list[int] = []
        while len(out) < excess and seq < self._next_seq:
            if seq in items:
                out.append(seq)
            seq += 1
        out.extend(incoming[: excess - len(out)])
        return out

    def _delete_seqs(self, seqs: list[int]) -> int:
        """Delete the items under ``seqs`` (in memory order), announce it, return how many."""
        if not seqs:
            return 0
        self._settle()
        if self._writer is not None:
            self._writer.write_delete(self, seqs)
        removed = [self._remove_seq(seq) for seq in seqs]
        self._list = None
        for observer in self._observers:
            observer.write_delete(self, seqs)
        if self._callbacks:
            self._run_callbacks(MemoryChange("delete", tuple(removed)))
        return len(removed)

    def _remove_seq(self, seq: int) -> MemoryItem:
        item = self._items.pop(seq)
        if self._by_step is not None:
            step = item_fields(item).get(self._step_key, NOTHING)
            self._unindex_seq(seq, step)
            if not self._seqs_holding(item):
                item.unwatch(self)
        return item

    def _replace(self, items: list[MemoryItem]) -> None:
        """Make ``items`` the whole content (the newest ``max_items`` of them): the one load path."""
        with self._lock:
            bound = self._max_items
            kept = items if bound is None else items[max(len(items) - bound, 0) :]
            start = self._next_seq
            seqs = range(start, start + len(kept))
            # The (key, item) pairs only for those who are told: a tuple per
            # item is as many objects for the collector to go through.
            told = self._writer is not None or bool(self._observers)
            pairs = list(zip(seqs, kept, strict=True)) if told else []
            if self._writer is not None:
                self._writer.write_replace(self, pairs)
            self._reset()
            self._items = dict(zip(seqs, kept, strict=True))
            self._next_seq = start + len(kept)
            self._first_seq = start
            self._list = list(kept)
            self._list_shared = False
            if self._writer is not None or self._observers:
                self._index()
            for observer in self._observers:
                observer.write_replace(self, pairs)

    def _reset(self) -> None:
        """Drop every item and the index (items are no longer watched)."""
        if self._by_step is not None:
            unwatch_items(self._items.values(), self)
        self._items = {}
        self._first_seq = self._next_seq
        self._by_step = None
        self._stepless = {}
        self._unhashable_steps = {}
        self._list = None

    def _index(self) -> dict[Any, int | list[int]]:
        """Return the step index, built on first use and caught up with the fast path's items."""
        index = self._by_step
        if index is None:
            index = self._by_step = {}
            self._stepless = {}
            self._unhashable_steps = {}
            self._file(self._items, self._items.values())
            # Observers exist only with the index: none was told of anything yet.
            self._settled = self._next_seq
        elif self._settled != self._next_seq:
            self._settle()
        return index

    def _file(self, seqs: Iterable[int], items: Iterable[MemoryItem]) -> None:
        """Watch ``items`` and file them in the step index under ``seqs``, all above every seq filed."""
        # A list, or the memory's own values view (gone through twice, not copied).
        batch = items if isinstance(items, (list, ValuesView)) else list(items)
        watch_items(batch, self, self._watcher)
        index = self._by_step
        assert index is not None  # only called once the index exists
        stepless = self._stepless
        unhashable = self._unhashable_steps
        key = self._step_key
        items = batch
        # Seqs come in increasing order, above those filed, so each bucket is
        # appended to in order and needs no sorting.
        # One dict operation per item: setdefault files a new step and
        # returns what an earlier item of the step filed.
        file_first = index.setdefault
        for seq, fields in zip(seqs, map(_fields_of, items), strict=True):
            try:
                step = fields[key]  # a subscript is quicker than .get() here
            except KeyError:
                stepless[seq] = None
                continue
            try:
                bucket = file_first(step, seq)
            except TypeError:
                unhashable[seq] = None
                continue
            if bucket is seq:
                continue
            if isinstance(bucket, int):
                index[step] = [bucket, seq]
            else:
                bucket.append(seq)

    def _slot(self, step: Any) -> Sequence[int] | dict[int, None]:
        """Return the seqs filed under ``step`` (``NOTHING`` for items without a step)."""
        if step is NOTHING:
            return self._stepless
        try:
            bucket = self._by_step.get(step) if self._by_step is not None else None
        except TypeError:
            return self._unhashable_steps
        if bucket is None:
            return ()
        return (bucket,) if isinstance(bucket, int) else bucket

    def _seqs_holding(self, item: MemoryItem) -> list[int]:
        """Return the keys under which the memory holds ``item`` (found through the index)."""
        self._index()
        items = self._items
        step = item_fields(item).get(self._step_key, NOTHING)
        return [seq for seq in self._slot(step) if items.get(seq) is item]

    def _index_seq(self, seq: int, item: MemoryItem) -> None:
        item.watch(self, self._watcher)
        step = item_fields(item).get(self._step_key, NOTHING)
        if step is NOTHING:
            self._stepless[seq] = None
            return
        index = self._by_step
        assert index is not None  # only called once the index exists
        try:
            bucket = index.get(step)
        except TypeError:
            # An unhashable step (a list as a step) is kept aside and compared one by one.
            self._unhashable_steps[seq] = None
            return
        if bucket is None:
            index[step] = seq
        elif isinstance(bucket, int):
            index[step] = [bucket, seq] if bucket < seq else [seq, bucket]
        elif bucket[-1] < seq:
            bucket.append(seq)
        else:
            bisect.insort(bucket, seq)

    def _unindex_seq(self, seq: int, step: Any) -> None:
        if step is NOTHING:
            self._stepless.pop(seq, None)
            return
        index = self._by_step
        assert index is not None  # only called once the index exists
        try:
            bucket = index.get(step)
        except TypeError:
            self._unhashable_steps.pop(seq, None)
            return
        if bucket == seq:
            del index[step]
        elif isinstance(bucket, list) and seq in bucket:
            bucket.remove(seq)
            if not bucket:
                del index[step]

    def _seqs_of_steps(self, steps: Iterable[Any]) -> list[int]:
        index = self._index()
        items = self._items
        wanted = _unique(steps)
        seqs: list[int] = []
        buckets = 0
        for step in wanted:
            try:
                bucket = index.get(step)
            except TypeError:
                continue  # an unhashable step is matched against the unhashable items below
            if bucket is None:
                continue
            filed = [bucket] if isinstance(bucket, int) else bucket
            if not all(seq in items for seq in filed):
                # A field change that raced a delete can leave a key behind; drop it here.
                filed = [seq for seq in filed if seq in items]
                if filed:
                    index[step] = filed
                else:
                    del index[step]
            seqs.extend(filed)
            buckets += 1
        if self._unhashable_steps:
            key = self._step_key
            for seq in self._unhashable_steps:
                held = items.get(seq)
                if held is not None and item_fields(held).get(key) in wanted:
                    seqs.append(seq)
                    buckets += 1
        if buckets > 1:
            seqs.sort()
        return seqs

    def _items_of_steps(self, steps: Iterable[Any]) -> list[MemoryItem]:
        items = self._items
        return [items[seq] for seq in self._seqs_of_steps(steps)]

    def _on_item_change(self, item: MemoryItem, key: str, old: Any, new: Any) -> None:
        """Write a field change of a held item through, and refile the item if its step changed."""
        with self._lock:
            if self._by_step is None:
                return
            self._settle()  # observers hear earlier adds before this change
            step_changed = key == self._step_key
            filed = old if step_changed else item_fields(item).get(self._step_key, NOTHING)
            items = self._items
            seqs = [seq for seq in self._slot(filed) if items.get(seq) is item]
            if not seqs:
                return
            if self._writer is not None:
                self._writer.write_update(self, seqs, item)
            if step_changed:
                for seq in seqs:
                    self._refile(seq, item, old)
            for observer in self._observers:
                observer.write_update(self, seqs, item)

    def _refile(self, seq: int, item: MemoryItem, filed: Any) -> None:
        """Move ``seq`` from the index slot of step ``filed`` to that of the item's step now."""
        if self._by_step is not None:
            self._unindex_seq(seq, filed)
            self._index_seq(seq, item)

    def _run_callbacks(self, change: MemoryChange) -> None:
        for callback in list(self._callbacks):
            try:
                callback(self, change)
            except Exception as exc:
                name = getattr(callback, "__qualname__", repr(callback))
                steps = [item_fields(item).get(self._step_key) for item in change.items[:5]]
                msg = (
                    f"Change callback {name} raised {type(exc).__name__}: {exc} "
                    f"(after {change.kind} of steps {steps}); the change was applied and the memory is consistent."
                )
                raise CallbackError(msg) from exc

    # -- internals: session files -------------------------------------------

    def _session_chunks(self, *, jsonl: bool, on_unencodable: OnUnencodable) -> Iterator[bytes]:
        header = _session.envelope(
            session_id=self.session_id,
            created_at=self.created_at,
            metadata=self.metadata,
            step_key=self._step_key,
        )
        return _session.session_chunks(
            header,
            [self._snapshot()],
            jsonl=jsonl,
            step_key=self._step_key,
            on_unencodable=on_unencodable,
        )

    def _take(self, header: Mapping[str, Any], items: list[MemoryItem]) -> None:
        """Replace the content with a file's items and take its checked header, in one step.

        ``header`` comes from ``_session.check_header``, which validated every
        field, so this cannot fail half-way.
        """
        with self._lock:
            self._replace(items)
            if self._writer is None:
                # A memory with a writer keeps its identity: its session id and step
                # key name where the writer files the items, not what a file says.
                if "step_key" in header:
                    self._step_key = header["step_key"]
                if "session_id" in header:
                    self.session_id = header["session_id"]
            if "metadata" in header:
                self.metadata = header["metadata"]
            if "created_at" in header:
                self.created_at = header["created_at"]


# What a memory holds only while it runs (its lock, index, observers and
# writer, the keys of its items): never pickled or copied, made anew by __setstate__.
_RUNTIME_STATE = frozenset(
    {
        "_lock",
        "_watcher",
        "_writer",
        "_observers",
        "_items",
        "_next_seq",
        "_first_seq",
        "_settled",
        "_by_step",
        "_stepless",
        "_unhashable_steps",
        "_list",
        "_list_shared",
    }
)


def _checked_items(items: Iterable[MemoryItem], outcome: str) -> list[MemoryItem]:
    """Return ``items`` as a list, refusing any element that is not a ``MemoryItem``."""
    batch = list(items)
    for position, item in enumerate(batch):
        if not isinstance(item, MemoryItem):
            msg = f"Element {position} is a {type(item).__name__}, not a MemoryItem; {outcome}."
            raise ArgumentTypeError(msg)
    return batch


def _unique(values: Iterable[Any]) -> list[Any]:
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
