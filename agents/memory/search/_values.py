"""The values of the fields a filter names, by item key: which items may pass a filter, without asking each.

A search with ``where=`` that few items pass ranks only those items (see
``SearchIndex``). :class:`FieldValues` holds, for one field, the items by
value; :func:`candidates` reads a parsed filter (``Filter.tree``) and
returns the keys of the items that *may* pass it, or ``None`` where it
cannot tell. It is sound, never exact by design: an item left out cannot
pass; the items kept are still asked with the compiled filter. It can tell
for conditions on a field (or a dotted path into nested dicts, read as the
filter reads it: :func:`~agents.memory._filter.value_at`): ``$eq``,
``$in``, ranges and ``$gt``/``$gte``/``$lt``/``$lte``, combined by
``$and`` and ``$or``; ``$ne``, ``$nin`` and functions are left to the
filter.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from agents.memory._filter import AllOf, AnyOf, Condition, FilterNode, value_at
from agents.memory._item import NOTHING, MemoryItem

__all__ = ["FieldValues", "FiledValues", "candidates"]

_PLAIN: Final = (type(None), bool, int, float, str)
_FIELDS: Final = 16  # fields whose values are kept (the most recently used)

_ORDER: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "$gt": lambda value, operand: value > operand,
    "$gte": lambda value, operand: value >= operand,
    "$lt": lambda value, operand: value < operand,
    "$lte": lambda value, operand: value <= operand,
}


class FieldValues:
    """The items of one field by value: plain values (None, bool, numbers, strings) filed, others kept aside.

    A value of another type (a list, a dict, a date) is not filed by value:
    its item is kept among the :attr:`other` items, which every condition
    keeps (the filter then decides).
    """

    __slots__ = ("by_value", "numbers", "other", "value_of")

    def __init__(self) -> None:
        self.by_value: dict[Any, set[int]] = {}
        self.value_of: dict[int, Any] = {}
        self.other: set[int] = set()
        self.numbers: list[Any] | None = None  # the distinct numbers, sorted when a range asks

    def add(self, key: int, value: Any) -> None:
        """File the item's value (``NOTHING``: it has no such field); call :meth:`drop` first for an item filed before."""
        if value is NOTHING:
            return
        if type(value) in _PLAIN or isinstance(value, str):
            self.value_of[key] = value
            held = self.by_value.get(value)
            if held is None:
                self.by_value[value] = {key}
                self.numbers = None
            else:
                held.add(key)
        else:
            self.other.add(key)

    def drop(self, key: int) -> None:
        """Forget the item (nothing for an item not filed)."""
        if key in self.value_of:
            value = self.value_of.pop(key)
            held = self.by_value[value]
            held.discard(key)
            if not held:
                del self.by_value[value]
                self.numbers = None
        else:
            self.other.discard(key)

    def equal(self, operands: Iterable[Any]) -> set[int] | None:
        """Return the items whose value may equal one of ``operands`` (``None`` for an operand that is no plain value)."""
        out = set(self.other)
        for operand in operands:
            if not (type(operand) in _PLAIN or isinstance(operand, str)):
                return None
            # Python's equality is wider than the filter's (True == 1 == 1.0): a superset.
            out |= self.by_value.get(operand, set())
        return out

    def between(self, low: float, high: float) -> set[int]:
        """Return the items whose value may be a number from ``low`` to ``high`` (bounds included).

        The distinct numbers are sorted once (again after a value comes or
        goes) and the span is found by bisection; NaN, which no bound
        holds, is left out, and the :attr:`other` items are kept.
        """
        numbers = self.numbers
        if numbers is None:
            numbers = self.numbers = sorted(
                value
                for value in self.by_value
                if type(value) in (int, float, bool) and value == value
            )
        span = numbers[bisect.bisect_left(numbers, low) : bisect.bisect_right(numbers, high)]
        return set(self.other).union(*(self.by_value[value] for value in span))

    def ordered(self, test: Callable[[Any], bool]) -> set[int]:
        """Return the items whose value passes ``test`` (a value it cannot compare is kept)."""
        out = set(self.other)
        for value, keys in self.by_value.items():
            try:
                keep = test(value)
            except TypeError:
                keep = True
            if keep:
                out |= keys
        return out


def candidates(tree: FilterNode, values: Callable[[str], FieldValues | None]) -> set[int] | None:
    """Return the keys of the items that may pass the filter ``tree``, or ``None`` if it cannot tell.

    Args:
        tree: The parsed filter (``Filter.tree``).
        values: Returns the values of a field (or dotted path) by item
            (made on first use), or ``None`` for a field it does not file.
    """
    if isinstance(tree, Condition):
        return _condition(tree, values)
    if isinstance(tree, AllOf):
        # Bounds on one field ({"$gte": 2, "$lt": 5}) are one span, not two half-lines.
        spans: dict[str, tuple[float, float]] = {}
        found = []
        for part in tree.parts:
            bounds = _bounds(part)
            if bounds is None:
                found.append(candidates(part, values))
            else:
                low, high = spans.get(bounds[0], (-math.inf, math.inf))
                spans[bounds[0]] = (max(low, bounds[1]), min(high, bounds[2]))
        for name, (low, high) in spans.items():
            field = values(name)
            found.append(None if field is None else field.between(low, high))
        known = [part for part in found if part is not None]
        if not known:
            return None
        return set.intersection(*sorted(known, key=len))
    if isinstance(tree, AnyOf):
        out: set[int] = set()
        for part in tree.parts:
            keys = candidates(part, values)
            if keys is None:
                return None
            out |= keys
        return out
    return None  # a function of the item


def _bounds(node: FilterNode) -> tuple[str, float, float] | None:
    """Return ``(field, low, high)`` of a condition that holds numbers from ``low`` to ``high`` only (bounds kept), else ``None``."""
    if not isinstance(node, Condition):
        return None
    op, operand = node.op, node.operand
    if op == "range":
        if not operand:
            return None
        # Only numbers are in a range (2.0 is, 2.5 and "2" are not): those from one end to the other.
        ends = (operand[0], operand[-1])  # a range's ends, without walking it
        return node.field, min(ends), max(ends)
    if op not in _ORDER or type(operand) not in (int, float) or math.isnan(operand):
        return None
    # A number is ordered against numbers only (the filter's rule): a span of them.
    if op in ("$gt", "$gte"):
        return node.field, operand, math.inf
    return node.field, -math.inf, operand


def _condition(
    condition: Condition, values: Callable[[str], FieldValues | None]
) -> set[int] | None:
    op, operand = condition.op, condition.operand
    if op in ("$ne", "$nin"):
        return None  # an item without the field passes: no value to look up
    field = values(condition.field)
    if field is None:
        return None
    if op == "$eq":
        return field.equal([operand])
    if op == "$in":
        return field.equal(operand)
    bounds = _bounds(condition)
    if bounds is not None:
        return field.between(bounds[1], bounds[2])
    if op == "range":
        return set(field.other)  # an empty range
    order = _ORDER.get(op)
    if order is None:
        return None
    return field.ordered(lambda value: order(value, operand))


class FiledValues:
    """The values of the fields filters have named (the 16 most recently named), by item, kept up to date."""

    __slots__ = ("fields",)

    def __init__(self) -> None:
        self.fields: dict[str, FieldValues] = {}

    def add(self, key: int, item: MemoryItem) -> None:
        """File the values of an item (re)indexed (its old ones dropped before)."""
        for name, values in self.fields.items():
            values.add(key, value_at(item, name))

    def drop(self, key: int) -> None:
        """Forget an item's values."""
        for values in self.fields.values():
            values.drop(key)

    def few(
        self, where: object, items: Mapping[int, MemoryItem], indexed: Iterable[int], most: int
    ) -> set[int] | None:
        """Return the keys of the ``indexed`` items that may pass the filter ``where``, if at most ``most``; else ``None``.

        ``None`` too where it cannot tell (a function, see :func:`candidates`).
        """
        tree = getattr(where, "tree", None)
        keys = None if tree is None else self.candidates(tree, items, indexed)
        return None if keys is None or len(keys) > most else keys

    def candidates(
        self, tree: FilterNode, items: Mapping[int, MemoryItem], indexed: Iterable[int]
    ) -> set[int] | None:
        """Return the keys of the ``indexed`` items that may pass ``tree`` (see :func:`candidates`); ``None`` if it cannot tell."""

        def values(name: str) -> FieldValues | None:
            found = self.fields.pop(name, None)
            if found is None:
                found = FieldValues()
                for key in indexed:
                    found.add(key, value_at(items[key], name))
                if len(self.fields) >= _FIELDS:
                    del self.fields[next(iter(self.fields))]  # the least recently used
            self.fields[name] = found  # last: the most recently used
            return found

        return candidates(tree, values)
