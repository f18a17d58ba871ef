"""Rows as stores keep them: the types, and the encoding of items into rows and back through the codec.

A row is one item: its encoded bytes (the codec's wire form, exactly what
``Memory.to_json`` writes for that item), a *step text* (the item's step
value encoded in one canonical way, so that step filters can be answered by
the store without decoding items), the time the row was written, and a
*seq*, the number the store gave it. Every store encodes and decodes rows
here, once, and so means the same by them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

import orjson

from agents.memory import _codec
from agents.memory._codec import OnUnencodable
from agents.memory._item import NOTHING, MemoryItem, OnUnknownClass, item_fields
from agents.memory._wire import decode_items, dumps_each
from agents.memory.exceptions import (
    CorruptSessionError,
    CorruptStoreError,
    SerializationError,
    StoreArgumentError,
)
from agents.memory.stores._core.terms import Terms, item_terms

__all__ = [
    "SEQ_MAX",
    "IndexEntry",
    "KeyedRow",
    "Row",
    "RowUpdate",
    "SessionRow",
    "StoredRecord",
    "check_seq",
    "decode_pairs",
    "decode_rows",
    "encode_metadata",
    "encode_rows",
    "rows_terms",
    "step_text",
    "step_texts",
]

SEQ_MAX: Final = 2**63 - 1
"""The largest seq a store holds (64-bit signed)."""

Row = tuple[str | None, float, bytes]
"""One row to insert: ``(step_text, created_unix_time, encoded_item)``."""

RowUpdate = tuple[int, str | None, bytes]
"""New contents for an existing row: ``(seq, step_text, encoded_item)``."""

IndexEntry = tuple[int, str | None, float]
"""What a store knows of a row without its bytes: ``(seq, step_text, created_unix_time)``."""

KeyedRow = tuple[str, int, float, bytes]
"""A row filed under a key (a record): ``(key, seq, created_unix_time, encoded_item)``."""

SessionRow = tuple[str, float, bytes]
"""A session as a store keeps it: ``(step_key, created_unix_time, encoded_metadata)``."""


class StoredRecord(NamedTuple):
    """One item as a store holds it: its seq in the session and the decoded item.

    A named tuple rather than an attrs class: a reopen makes one per stored
    item, and a tuple is built in a third of the time.
    """

    seq: int
    item: MemoryItem


def step_text(value: Any) -> str | None:
    """Return the canonical text a store files a step value under (``None`` for no step).

    Numbers that Python counts as equal (``1``, ``1.0``, ``True``) get the same
    text, as they share one entry in ``Memory``'s step index; other values are
    written as their compact codec JSON.
    """
    if value is NOTHING:
        return None
    cls = type(value)
    if cls is int:
        return str(value)  # the common case, and what the codec would write
    if cls is bool:
        return "1" if value else "0"
    if cls is float and value.is_integer():
        return str(int(value))
    return _codec.dumps(_codec.encode_value(value, on_unencodable="repr")).decode("utf-8")


def encode_metadata(metadata: Mapping[str, Any], session_id: str) -> bytes:
    """Encode session metadata through the codec.

    Raises:
        StoreArgumentError: if ``metadata`` is not a mapping with string keys.
        SerializationError: if a value cannot be encoded.
    """
    if not isinstance(metadata, Mapping):
        msg = (
            f"Metadata of session {session_id!r} must be a mapping, got {type(metadata).__name__}."
        )
        raise StoreArgumentError(msg)
    for key in metadata:
        if type(key) is not str:
            msg = f"Metadata of session {session_id!r} has the key {key!r} ({type(key).__name__}); metadata keys are strings."
            raise StoreArgumentError(msg)
    try:
        return _codec.dumps(_codec.encode_value(dict(metadata)))
    except SerializationError as exc:
        msg = f"Metadata of session {session_id!r} cannot be saved: {exc}"
        raise SerializationError(msg) from exc


def encode_rows(
    items: Sequence[MemoryItem], step_key: str, on_unencodable: OnUnencodable
) -> list[Row]:
    """Encode items into rows through the codec (all or nothing).

    Raises:
        SerializationError: naming the key and step of a value that cannot be encoded.
    """
    now = time.time()
    encoded = dumps_each(items, step_key=step_key, on_unencodable=on_unencodable)
    return [
        (step_text(item_fields(item).get(step_key, NOTHING)), now, data)
        for item, data in zip(items, encoded, strict=True)
    ]


def decode_rows(
    rows: Iterable[tuple[int, bytes]], source: str, on_unknown_class: OnUnknownClass = "error"
) -> list[StoredRecord]:
    """Decode ``(seq, data)`` rows into records through the codec.

    Raises:
        CorruptStoreError: naming the seq and session of a row that is not valid JSON.
        CorruptSessionError: naming the seq and session of a row that is not a valid item.
    """
    pairs = decode_pairs(rows, source, on_unknown_class)
    return list(map(StoredRecord._make, pairs))


def decode_pairs(
    rows: Iterable[tuple[int, bytes]], source: str, on_unknown_class: OnUnknownClass = "error"
) -> list[tuple[int, MemoryItem]]:
    """Decode ``(seq, data)`` rows into ``(seq, item)`` pairs (the fast path of :func:`decode_rows`).

    Raises:
        CorruptStoreError: naming the seq and session of a row that is not valid JSON.
        CorruptSessionError: naming the seq and session of a row that is not a valid item.
    """
    rows = rows if isinstance(rows, list) else list(rows)
    if len(rows) < _codec.BULK_VALUES:  # a keyed get, a page: no pause to take
        return _decode_pairs(rows, source, on_unknown_class)
    with _codec.collector_paused(len(rows)):
        return _decode_pairs(rows, source, on_unknown_class)


def _decode_pairs(
    rows: list[tuple[int, bytes]], source: str, on_unknown_class: OnUnknownClass
) -> list[tuple[int, MemoryItem]]:
    seqs = [seq for seq, _ in rows]
    try:
        # One C-level pass; the loop below only runs to name a damaged row.
        wires = list(map(orjson.loads, [data for _, data in rows]))
    except (orjson.JSONDecodeError, TypeError):
        # Row by row through the codec, which names the damaged row and also
        # reads what orjson refuses and json reads (NaN, Infinity): such a row
        # is decoded, not re-raised as orjson's error.
        wires = []
        for seq, data in rows:
            if type(data) not in (bytes, str):
                msg = f"Item {seq} of {source} is damaged: its row holds a {type(data).__name__} where the item's JSON text belongs."
                raise CorruptStoreError(msg) from None
            try:
                wires.append(_codec.loads(data, source=source))
            except CorruptSessionError as exc:
                msg = f"Item {seq} of {source} is damaged: {exc}"
                raise CorruptStoreError(msg) from exc
    items = decode_items(
        wires, where=lambda i: f"item {seqs[i]} of {source}", on_unknown_class=on_unknown_class
    )
    return list(zip(seqs, items, strict=True))


def step_texts(steps: Iterable[Any]) -> list[str]:
    if isinstance(steps, (str, bytes)):
        msg = f"steps must be an iterable of step values, got the single value {steps!r}; wrap it: [{steps!r}]."
        raise StoreArgumentError(msg)
    out: dict[str, None] = {}
    for step in steps:
        text = step_text(step)
        if text is not None:
            out[text] = None
    return list(out)


def rows_terms(
    items: Sequence[MemoryItem], rows: Sequence[Row], on_unencodable: OnUnencodable
) -> list[Terms]:
    """Return the search terms of ``items`` as the store will hold them (``rows``, their encodings).

    Under the ``"error"`` policy the codec stores every value as it is, so
    the terms come from the items in hand; under ``"repr"`` or ``"drop"``
    the stored item can differ, so the rows are decoded and their terms taken.
    """
    if on_unencodable == "error":
        return [item_terms(item) for item in items]
    pairs = decode_pairs([(0, data) for _, _, data in rows], "the items being written", "base")
    return [item_terms(item) for _, item in pairs]


def check_seq(seq: object, name: str) -> int:
    if type(seq) is not int:
        msg = f"A {name} must be an int, got {seq!r} ({type(seq).__name__})."
        raise StoreArgumentError(msg)
    if not -SEQ_MAX <= seq <= SEQ_MAX:
        msg = f"{name} {seq} is outside the 64-bit range a store holds seqs in; no item has it."
        raise StoreArgumentError(msg)
    return seq
