"""Keyed records of a memory: items filed under a key unique within the memory.

A record is an ordinary item that is also filed under a key, in a
:class:`RecordIndex` kept beside the step index (key -> the item's key in
the memory, and back), so a record is found without going through the
items. The item carries its key in its field ``"key"``. Items added with
``add_memory_item`` are not records, whatever fields they hold.

:class:`RecordFront` is the part of :class:`~agents.memory.memory.Memory`
that puts, gets and deletes records; putting under a key that is taken
deletes the old item and appends the new one at the end (as a store gives
a replaced record a new seq). The key rules (:func:`check_key`) and the
making of the record's item (:func:`keyed_item`) are shared with the stores.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from agents.memory._item import MemoryItem
from agents.memory.exceptions import AgentMemoryError, ArgumentTypeError, InvalidArgumentError

if TYPE_CHECKING:
    import threading

    from agents.memory._sequence import ItemSequence

__all__ = ["KEY_FIELD", "KEY_MAX_BYTES", "RecordFront", "RecordIndex", "check_key", "keyed_item"]

KEY_FIELD: Final = "key"
"""The field a record's item carries its key in."""

KEY_MAX_BYTES: Final = 1024
"""The longest record key accepted, in UTF-8 bytes (an index entry of every SQL engine holds it)."""


def check_key(
    key: object,
    where: str,
    value_error: type[AgentMemoryError] = InvalidArgumentError,
    type_error: type[AgentMemoryError] = ArgumentTypeError,
) -> str:
    """Return ``key`` if a record may be filed under it, else raise.

    A key is a non-empty ``str`` of at most :data:`KEY_MAX_BYTES` UTF-8 bytes
    without NUL characters or lone surrogates (no store can hold those).

    Args:
        key: The key to check.
        where: What holds the record, for messages (``"session 'run-1'"``).
        value_error: The error for a ``str`` that breaks a rule.
        type_error: The error for a key that is not a ``str``.

    Raises:
        AgentMemoryError: ``value_error`` or ``type_error``, naming the key and the rule.
    """
    if type(key) is not str:
        msg = (
            f"A record key must be a str, got {key!r} ({type(key).__name__}) for {where}; "
            f"pass the key as text, e.g. str({key!r})."
        )
        raise type_error(msg)
    if not key:
        msg = f"A record key must not be empty ({where}); pick a name such as 'language'."
        raise value_error(msg)
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        msg = f"Record key {key!r} of {where} holds a lone surrogate, which no store can hold; remove it."
        raise value_error(msg) from exc
    if "\x00" in key:
        msg = f"Record key {key!r} of {where} holds a NUL character, which no store can hold; remove it."
        raise value_error(msg)
    if size > KEY_MAX_BYTES:
        msg = (
            f"Record key {key[:40]!r}... of {where} is {size} UTF-8 bytes long; the limit is "
            f"{KEY_MAX_BYTES}. Use a shorter key (a hash of a long one)."
        )
        raise value_error(msg)
    return key


def keyed_item(
    key: str,
    item: MemoryItem | Mapping[str, Any],
    where: str,
    error: type[AgentMemoryError] = InvalidArgumentError,
) -> MemoryItem:
    """Return ``item`` as the record filed under ``key``: holding ``key`` in its field ``"key"``.

    The caller's item is not changed: an item without the field is copied
    with it (first); an item that holds it already is the record as it is.

    Raises:
        AgentMemoryError: ``error``, if ``item`` is neither a ``MemoryItem``
            nor a mapping, or its own ``"key"`` field holds another value.
    """
    if isinstance(item, MemoryItem):
        fields = item.to_dict()
        cls: type[MemoryItem] = type(item)
    elif isinstance(item, Mapping):
        fields = dict(item)
        cls = MemoryItem
    else:
        msg = (
            f"The record {key!r} of {where} must be a MemoryItem or a mapping of fields, got "
            f"{type(item).__name__}; nothing was written."
        )
        raise error(msg)
    if KEY_FIELD in fields:
        own = fields[KEY_FIELD]
        if type(own) is not str or own != key:
            msg = (
                f"The record put under key {key!r} in {where} holds another key in its own 'key' "
                f"field ({own!r}); drop the field or make it {key!r}. Nothing was written."
            )
            raise error(msg)
        return item if isinstance(item, MemoryItem) else cls.from_mapping(fields)
    return cls.from_mapping({KEY_FIELD: key, **fields})


class RecordIndex:
    """Record keys -> the keys of the items filed under them in a memory, and back."""

    __slots__ = ("_item_key", "_record_key")

    def __init__(self) -> None:
        self._item_key: dict[str, int] = {}
        self._record_key: dict[int, str] = {}

    def file(self, record_key: str, item_key: int) -> None:
        """File the item under ``item_key`` as the record ``record_key`` (the key's former item loses it)."""
        old = self._item_key.get(record_key)
        if old is not None:
            del self._record_key[old]
        self._item_key[record_key] = item_key
        self._record_key[item_key] = record_key

    def item_key(self, record_key: str) -> int | None:
        """Return the key of the item filed under ``record_key``, or ``None``."""
        return self._item_key.get(record_key)

    def drop_item(self, item_key: int) -> None:
        """Forget the record of the item under ``item_key`` (it left the memory), if it is one."""
        if self._record_key:
            record_key = self._record_key.pop(item_key, None)
            if record_key is not None:
                del self._item_key[record_key]

    def clear(self) -> None:
        """Forget every record."""
        self._item_key.clear()
        self._record_key.clear()

    def keys(self, prefix: str | None = None) -> list[str]:
        """Return the record keys (those starting with ``prefix``), sorted by code point."""
        found: Iterator[str] = iter(self._item_key)
        if prefix:
            found = (key for key in found if key.startswith(prefix))
        return sorted(found)

    def __len__(self) -> int:
        return len(self._item_key)


class RecordFront:
    """The keyed-record calls of :class:`~agents.memory.memory.Memory` (a base of it).

    It holds no state: the record index lives in the memory's item
    sequence (which forgets a record whenever its item leaves), and
    changes go through the memory's own delete and add paths, so the
    writer, observers and callbacks hear of them as of any change.
    """

    if TYPE_CHECKING:
        _lock: threading.RLock
        _seq: ItemSequence

        def _settle(self) -> None: ...

        def _delete_keys(self, keys: list[int]) -> int: ...

        def _add(self, batch: list[MemoryItem]) -> None: ...

    def put_record(self, key: str, item: MemoryItem | Mapping[str, Any]) -> MemoryItem:
        """File ``item`` under ``key``, replacing the record filed there; return the item now held.

        The held item carries the key in its field ``"key"`` (a copy is
        made when ``item`` lacks it; ``item`` is not changed). A replaced
        record's item is deleted and the new one appended at the end, so
        the memory's order (and a store's seqs) show when it last changed.
        Callbacks run with a ``"delete"`` and an ``"add"`` change. On a
        durable memory (``StoredMemory``) the record is written to the
        store first, in one transaction.

        Args:
            key: The record's key: a non-empty ``str``, unique within the memory.
            item: A ``MemoryItem`` or a mapping of fields.

        Returns:
            The item filed under ``key``.

        Raises:
            ArgumentTypeError: if ``key`` is not a ``str``.
            InvalidArgumentError: if ``key`` is empty or unwritable, ``item`` is
                not an item or mapping, or its ``"key"`` field holds another key;
                nothing is changed.
            CallbackError: if a callback raised; the record stays put.
        """
        where = self._records_where()
        record = keyed_item(check_key(key, where), item, where)
        with self._lock:
            self._put_record(key, record)
        return record

    def get_record(self, key: str) -> MemoryItem | None:
        """Return the item filed under ``key``, or ``None`` if there is none.

        Raises:
            ArgumentTypeError: if ``key`` is not a ``str``.
            InvalidArgumentError: if ``key`` is empty or unwritable.
        """
        check_key(key, self._records_where())
        with self._lock:
            seq = self._seq
            held = seq.records.item_key(key)
            return None if held is None else seq.items.get(held)

    def delete_record(self, key: str) -> bool:
        """Delete the item filed under ``key``; return whether there was one.

        Raises:
            ArgumentTypeError: if ``key`` is not a ``str``.
            InvalidArgumentError: if ``key`` is empty or unwritable.
            CallbackError: if a callback raised; the record stays deleted.
        """
        check_key(key, self._records_where())
        with self._lock:
            held = self._seq.records.item_key(key)
            if held is None:
                return False
            self._remove_record(key, held)
            return True

    def record_keys(self, *, prefix: str | None = None) -> list[str]:
        """Return the keys of the memory's records (those starting with ``prefix``), sorted by code point.

        Raises:
            ArgumentTypeError: if ``prefix`` is not a ``str`` or ``None``.
        """
        if prefix is not None and type(prefix) is not str:
            msg = f"A record key prefix must be a str or None, got {prefix!r} ({type(prefix).__name__})."
            raise ArgumentTypeError(msg)
        with self._lock:
            return self._seq.records.keys(prefix)

    # -- what a durable memory overrides ---------------------------------------------

    def _records_where(self) -> str:
        """Name the memory in messages."""
        sid = getattr(self, "session_id", None)
        return "the memory" if sid is None else f"session {sid!r}"

    def _remove_record(self, key: str, held: int) -> None:
        """Delete the record ``key``, held under the memory key ``held`` (call under the lock)."""
        self._delete_record(held)

    def _put_record(self, key: str, record: MemoryItem) -> None:
        """Replace the record filed under ``key`` with ``record``, in RAM (call under the lock)."""
        held = self._seq.records.item_key(key)
        if held is not None:
            self._delete_record(held)
        self._add_record(key, record)

    def _delete_record(self, held: int) -> None:
        """Delete the item under the memory key ``held`` (call under the lock)."""
        self._settle()
        self._delete_keys([held])

    def _record_held(self, key: str) -> int | None:
        """Return the memory key of the item filed under ``key``, or ``None``."""
        return self._seq.records.item_key(key)

    def _file_records(self, pairs: Iterable[tuple[str, int]]) -> None:
        """File the items under these memory keys as the records of these keys (items read from a store)."""
        seq = self._seq
        for key, held in pairs:
            if held in seq.items:
                seq.records.file(key, held)

    def _add_record(self, key: str, record: MemoryItem) -> None:
        """Append ``record`` and file it under ``key`` (call under the lock)."""
        seq = self._seq
        (held,) = seq.next_keys(1)
        try:
            self._add([record])
        finally:
            if held in seq.items:  # not evicted at once by max_items
                seq.records.file(key, held)
