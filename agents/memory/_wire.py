"""Items to JSON and back in batches: the item side of the wire encoding.

The wire format itself (type tags, the verdict on which fields are written as
they are, the class wrapper) is :mod:`agents.memory._codec`'s; one item's own
wire form, which it caches until it changes, is the item's
(:func:`agents.memory._item.item_wire_form`). This module turns many items into
one JSON array or one document each, checking the containers of all plain
items at once, and many decoded wire forms back into items, all or nothing.
``Memory``, session files and stores all go through it.
"""

from __future__ import annotations

import itertools
import operator
import typing
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from agents.memory import _codec
from agents.memory._item import (
    MemoryItem,
    OnUnknownClass,
    cached_verdict,
    decode_item,
    dumps_item,
    item_fields,
    item_from_fields,
    item_verdict,
    item_wire_form,
    items_from_fields,
    wire_alone,
)
from agents.memory.exceptions import SerializationError

if TYPE_CHECKING:
    from agents.memory._codec import OnUnencodable

__all__ = [
    "GROUPED_FROM",
    "decode_item",
    "decode_items",
    "dumps_each",
    "dumps_item",
    "dumps_items",
    "ufo_json_items",
]


def dumps_items(
    items: Iterable[MemoryItem], *, step_key: str, on_unencodable: OnUnencodable
) -> bytes:
    """Encode items as a JSON array of their wire forms.

    With :func:`dumps_item` this is the one path from items to bytes:
    ``Memory``, session files and stores all call them.

    Raises:
        SerializationError: naming the key, step and type of a value that cannot be encoded.
    """
    batch = items if isinstance(items, (list, tuple)) else list(items)
    try:
        try:
            return _codec.dumps(_wires(batch, step_key, on_unencodable))
        except _codec.IntegerOutOfRange:
            raise
        except SerializationError:
            # A plain-looking container held what the writer refuses (a key
            # that is not a str, a nesting too deep): the walk names it.
            return _codec.dumps([item_wire_form(item, step_key, on_unencodable) for item in batch])
    except _codec.IntegerOutOfRange:
        # A plain-looking item held an int beyond 64 bits: walk every value to tag it.
        return _codec.dumps(
            [item_wire_form(item, step_key, on_unencodable, walk=True) for item in batch]
        )


def dumps_each(
    items: Iterable[MemoryItem], *, step_key: str, on_unencodable: OnUnencodable
) -> list[bytes]:
    """Encode each item's wire form on its own, as :func:`dumps_item` does, checking all of them at once.

    The bytes are those :func:`dumps_item` gives for each item; the plain
    containers of the whole batch are checked together (see :func:`_wires`),
    which halves the cost of encoding a store's batch item by item.

    Raises:
        SerializationError: naming the key, step and type of a value that cannot be encoded.
    """
    batch = items if isinstance(items, (list, tuple)) else list(items)
    try:
        try:
            return list(map(_codec.dumps, _wires(batch, step_key, on_unencodable)))
        except _codec.IntegerOutOfRange:
            raise
        except SerializationError:
            # As in dumps_items: a plain-looking container held what the writer refuses.
            return [_codec.dumps(item_wire_form(item, step_key, on_unencodable)) for item in batch]
    except _codec.IntegerOutOfRange:
        return [
            _codec.dumps(item_wire_form(item, step_key, on_unencodable, walk=True))
            for item in batch
        ]


def _wires(
    batch: list[MemoryItem] | tuple[MemoryItem, ...], step_key: str, on_unencodable: OnUnencodable
) -> list[dict[str, Any]]:
    """Return the wire forms of ``batch``, checking the containers of all plain items at once.

    An item's verdict on its top-level values is cached (see
    ``_codec.plain_verdict``); its containers are checked on every call,
    because they can change in place without the item knowing.
    """
    if len(batch) < GROUPED_FROM:
        return [wire_alone(item, step_key, on_unencodable) for item in batch]
    cached = list(map(cached_verdict, batch))
    fields = list(map(item_fields, batch))
    # True, False, None (not judged yet) and shared shapes, all hashed by identity.
    kinds: set[Any] = set(cached)
    if None in kinds:
        # Each item judges and keeps its verdict at once (not in one pass for
        # all, then another): a field set by another thread in between would
        # leave a verdict on values the item no longer holds.
        verdicts = [
            verdict if verdict is not None else item_verdict(item)
            for item, verdict in zip(batch, cached, strict=True)
        ]
        kinds = set(verdicts)
    else:
        verdicts = typing.cast("list[_codec.PlainVerdict]", cached)
    if kinds == {True}:
        return fields
    shapes: list[_codec.Shape] = [kind for kind in kinds if kind is not True and kind is not False]
    # Check the containers of all items of a shape together, one field at a
    # time: items of one agent keep the same fields, so there is mostly one shape.
    dict_groups: list[list[dict[Any, Any]]] = []
    list_groups: list[list[list[Any]]] = []
    for shape in shapes:
        members = (
            fields
            if len(kinds) == 1
            else [f for f, verdict in zip(fields, verdicts, strict=True) if verdict is shape]
        )
        dict_groups += [list(map(operator.itemgetter(key), members)) for key in shape.dicts]
        list_groups += [list(map(operator.itemgetter(key), members)) for key in shape.lists]
    if _codec.containers_plain(dict_groups, list_groups):
        if False not in kinds:
            return fields
        return [
            item_wire_form(item, step_key, on_unencodable) if verdict is False else own
            for item, own, verdict in zip(batch, fields, verdicts, strict=True)
        ]
    # Some container holds what needs a tag: each item checks its own and is walked if it must be.
    return [
        own
        if verdict is True
        or (
            verdict is not False
            and _codec.containers_plain(
                [[own[key] for key in verdict.dicts]], [[own[key] for key in verdict.lists]]
            )
        )
        else item_wire_form(item, step_key, on_unencodable)
        for item, own, verdict in zip(batch, fields, verdicts, strict=True)
    ]


GROUPED_FROM: Final = 16
"""From this many items a batch's containers are checked in groups (``_codec.containers_plain``).

Below it each item's containers are walked on their own
(``_codec.shape_plain``): grouping costs more to set up than it saves for a
few items (one UFO step: 2.5 us walked against 14 us grouped, CPU; equal
per item from about 16 on)."""


def ufo_json_items(
    items: Iterable[MemoryItem], *, step_key: str, on_unencodable: OnUnencodable
) -> str:
    """Return items' fields as UFO's ``Memory.to_json`` writes them (``json.dumps`` of a list of dicts).

    Raises:
        SerializationError: naming the key, step and type of a value that cannot be encoded.
    """
    return _codec.dumps_ufo_rows(
        list(map(item_fields, items)), step_key=step_key, on_unencodable=on_unencodable
    )


def decode_items(
    wires: Iterable[Any],
    *,
    where: Callable[[int], str],
    on_unknown_class: OnUnknownClass = "error",
    trusted_import: bool = False,
    tagged_values: bool = False,
) -> list[MemoryItem]:
    """Turn many wire forms into items, all or nothing.

    Plain field objects (the common case) become ``MemoryItem``s without a
    walk over their values; wrapped items go through :func:`decode_item`.

    Args:
        wires: Wire forms as decoded from JSON, in order.
        where: Names the item at a position in error messages.
        on_unknown_class: See :func:`item_class`.
        trusted_import: See :func:`item_class`.
        tagged_values: Plain field objects may hold type tags (``to_json``
            writes them in place), so walk their values too.

    Raises:
        CorruptSessionError: naming the item whose wire form or field is invalid.
        InvalidArgumentError: if ``on_unknown_class`` is not ``"error"`` or ``"base"``.
    """
    _codec.check_on_unknown_class(on_unknown_class)
    batch = wires if isinstance(wires, list) else list(wires)
    tag = _codec.TAG
    if (
        not tagged_values
        and operator.countOf(map(type, batch), dict) == len(batch)
        and not any(map(operator.contains, batch, itertools.repeat(tag)))
    ):
        # Every wire form is a plain field object (a session of base items):
        # make the items in C-level passes, the collector paused (see
        # _codec.collector_paused): each new item would otherwise make it
        # walk the decoded rows again.
        with _codec.collector_paused(len(batch)):
            return items_from_fields(batch)
    items: list[MemoryItem] = []
    append = items.append
    for position, wire in enumerate(batch):
        if type(wire) is dict and tag not in wire:
            if tagged_values:
                wire = _codec.decode_fields(
                    wire,
                    where=where(position),
                    on_unknown_class=on_unknown_class,
                    trusted_import=trusted_import,
                )
            append(item_from_fields(wire))
        else:
            append(
                decode_item(
                    wire,
                    where=where(position),
                    on_unknown_class=on_unknown_class,
                    trusted_import=trusted_import,
                )
            )
    return items
