"""Search filters: ``where={"step": {"$gte": 2, "$lte": 5}}`` checked and compiled once.

The one copy of the filter language, shared by the search room (``Memory.search``
and ``Memory.recall`` filter their rankings with it) and the stores room
(``store.search(..., where=)`` and ``store.ranking(..., where=)`` filter the
items they rank with it). A filter is compiled by :class:`Filter` into nested
closures over an item's fields; a filter that is not understood raises
:class:`~agents.memory.exceptions.InvalidQueryError` when it is compiled,
before anything is read, so no search ever returns an empty result for a
filter it did not understand.

The language (MongoDB's and Chroma's, described in full in ``docs/search.md``):

* ``{field: value}``: the field holds a value equal to ``value``; a
  ``range`` matches an ``int`` field inside it; several fields must all hold.
* ``{field: {"$op": operand, ...}}``: every operator must hold; the
  operators are ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``,
  ``$in`` and ``$nin``.
* ``{"$and": [filter, ...]}``, ``{"$or": [filter, ...]}``: all or any of
  the filters; they may sit beside field conditions (which are ANDed).
* A field name holding dots names a nested value (``"action.name"``) when
  the item has no field of that whole name.

Values have kinds: ``None``, ``bool``, numbers (``int`` and ``float`` and
their subclasses, never ``bool``), strings (``str`` and its subclasses),
and everything else. Values of different kinds are never equal and never
ordered, so ``True`` is not ``1`` and ``"2"`` is not ``2``; numbers compare
by value (``2 == 2.0``), strings by code point. A condition on a field the
item does not hold is false, except ``$ne`` and ``$nin``, which are the
negations of ``$eq`` and ``$in`` and so hold.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias

import attrs

from agents.memory._item import NOTHING, MemoryItem
from agents.memory.exceptions import InvalidQueryError

__all__ = [
    "COMPARISONS",
    "LOGICAL",
    "AllOf",
    "AnyOf",
    "Condition",
    "Filter",
    "FilterNode",
    "Predicate",
    "Where",
    "node_fields",
    "node_test",
    "value_at",
]

Where: TypeAlias = Mapping[str, Any] | Callable[[MemoryItem], bool]
"""A filter applied before ranking: a mapping in the filter language, or a function of the item.

See :class:`Filter` for the language: ``{"agent": "host"}``,
``{"step": {"$gte": 2, "$lte": 5}}``, ``{"$or": [{"kind": "a"}, {"cost": {"$lt": 0.5}}]}``,
``{"step": range(10, 20)}``. A function is called with each candidate item
and keeps it when it returns a true value.
"""

COMPARISONS: Final = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")
"""The operators a field condition takes: ``{field: {"$gte": 2, "$lt": 5}}``."""

LOGICAL: Final = ("$and", "$or")
"""The operators that combine whole filters: ``{"$or": [{...}, {...}]}``."""


@attrs.frozen
class Condition:
    """One condition on one field: ``op`` is one of :data:`COMPARISONS` or ``"range"``.

    ``operand`` is checked (no NaN; a tuple for ``$in``/``$nin``, a number
    or a string for ordering, a ``range`` for ``"range"``).
    """

    field: str
    op: str
    operand: Any


@attrs.frozen
class AllOf:
    """Every part holds (a dict of several conditions, or ``$and``)."""

    parts: tuple[FilterNode, ...]


@attrs.frozen
class AnyOf:
    """Some part holds (``$or``)."""

    parts: tuple[FilterNode, ...]


@attrs.frozen
class Predicate:
    """A function of the item: only Python can tell."""

    function: Callable[[MemoryItem], bool]


FilterNode: TypeAlias = Condition | AllOf | AnyOf | Predicate
"""The parsed form of a filter, for a store that translates it into its query language."""

_Test: TypeAlias = Callable[[MemoryItem], bool]
_ValueTest: TypeAlias = Callable[[Any], bool]

_NULL, _BOOL, _NUMBER, _STRING, _OTHER = range(5)
_OPERATORS_TEXT: Final = "$eq, $ne, $gt, $gte, $lt, $lte, $in and $nin"


_EXACT_KINDS: Final = {type(None): 0, bool: 1, int: 2, float: 2, str: 3}


def _kind(value: Any) -> int:
    """Return the kind of a value: values of two kinds are never equal and never ordered."""
    kind = _EXACT_KINDS.get(type(value))
    if kind is not None:
        return kind
    if value is None:
        return _NULL
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, (int, float)):
        return _NUMBER
    if isinstance(value, str):
        return _STRING
    return _OTHER


class Filter:
    """A search filter, checked and compiled once, that tells whether an item passes.

    ``Filter(where)`` takes a mapping in the filter language or a function
    of the item (see :data:`Where`); calling the filter with an item returns
    whether the item passes. ``Memory.search``, ``Memory.recall``,
    ``StoredMemory.search`` and every store's ``search`` and ``ranking``
    compile their ``where`` with it, so they all keep the same items.

    The language:

    * ``{field: value}`` keeps items whose field holds a value equal to
      ``value`` (see below); ``{field: range(a, b)}`` keeps items whose field
      holds an ``int`` in the range. A dict value without operators
      (``{"meta": {"lang": "en"}}``) is a value to be equal to.
    * ``{field: {"$op": operand, ...}}`` keeps items for which every
      operator holds: ``$eq``/``$ne`` (equal, not equal), ``$gt``, ``$gte``,
      ``$lt``, ``$lte`` (ordered after or before a number or a string),
      ``$in``/``$nin`` (equal to one of / none of a list of values).
    * ``{"$and": [filter, ...]}`` and ``{"$or": [filter, ...]}`` combine
      whole filters (each a mapping in this language); field conditions and
      ``$and``/``$or`` in one mapping must all hold. ``{}`` keeps every item.
    * A field name is looked up as a whole first; if the item has no field
      of that name and the name holds dots, it is a path through nested
      dicts: ``"action.name"`` is ``item["action"]["name"]``.

    Comparing: ``None``, ``bool``, numbers (``int`` and ``float``, never
    ``bool``), strings and other values are five kinds; values of two kinds
    are never equal and never ordered (``True`` is not ``1``, ``"2"`` is
    not ``2``, and ``{"$gt": 1}`` never keeps a string). Numbers compare by
    value, exactly (``2 == 2.0``), strings by code point; other values
    (lists, dicts, dates, ...) are only compared for equality, by Python's
    ``==``. A condition on a field the item does not hold is false, except
    ``$ne`` and ``$nin``, which hold (they are the negations of ``$eq`` and
    ``$in``, as in MongoDB and Chroma).

    Args:
        where: The filter: a mapping, a function of the item, or a ``Filter``.

    Raises:
        InvalidQueryError: for a filter that is not understood: a key that is
            not a string, an unknown ``$`` operator, operators mixed with
            plain keys in one dict, ``$and``/``$or`` without a list of
            filters or used on a field, ``$in``/``$nin`` without a list, an
            order operator with an operand that is not a number or a string,
            a NaN operand, or a ``where`` that is neither a mapping nor a
            function. The message names the field, the operator and the fix.
    """

    __slots__ = ("_test", "tree", "where")

    where: Where
    """The filter as given (a mapping or a function)."""

    tree: FilterNode
    """The filter parsed: conditions under ``AllOf``/``AnyOf``, or a ``Predicate``."""

    def __init__(self, where: Where | Filter) -> None:
        if isinstance(where, Filter):
            self.where = where.where
            self.tree = where.tree
            self._test: _Test = where._test
        elif isinstance(where, Mapping):
            self.where = where
            self._test, self.tree = _compile(where, "")
        elif callable(where):
            function = where
            self.where = where
            self.tree = Predicate(function)
            self._test = lambda item: bool(function(item))
        else:
            msg = (
                "where must be a mapping of field to value or condition (such as "
                f"{{'step': {{'$gte': 2}}}}) or a function of the item, got {where!r}."
            )
            raise InvalidQueryError(msg)

    @classmethod
    def of(cls, where: Where | Filter | None) -> Filter | None:
        """Return the compiled filter of ``where``, or ``None`` for no filter.

        Raises:
            InvalidQueryError: as :class:`Filter`.
        """
        return None if where is None else cls(where)

    def __call__(self, item: MemoryItem) -> bool:
        """Return whether ``item`` passes the filter."""
        return self._test(item)

    def __repr__(self) -> str:
        return f"Filter({self.where!r})"


# -- compiling ---------------------------------------------------------------------


def _compile(where: Mapping[Any, Any], place: str) -> tuple[_Test, FilterNode]:
    """Compile a mapping of field conditions and ``$and``/``$or``; ``place`` says where it sits in the filter."""
    compiled: list[tuple[_Test, FilterNode]] = []
    for key, condition in where.items():
        if type(key) is not str:
            msg = f"where takes field names (strings) as keys{place}, got {key!r}; write {{'step': 3}}."
            raise InvalidQueryError(msg)
        if key in LOGICAL:
            compiled.append(_logical(key, condition, place))
        elif key.startswith("$"):
            msg = (
                f"where{place} uses {key!r}, which is not an operator: filters combine with "
                f"$and and $or, and a field takes {_OPERATORS_TEXT} ({{'step': {{'$gte': 2}}}}). "
                "To filter a field whose name begins with '$', pass a function of the item."
            )
            raise InvalidQueryError(msg)
        else:
            compiled.append(_field(key, condition, place))
    if len(compiled) == 1:
        return compiled[0]
    tests = [test for test, _ in compiled]
    node = AllOf(tuple(node for _, node in compiled))
    if not tests:
        return _always, node
    return _every(tests), node


def _always(item: MemoryItem) -> bool:
    return True


def _every(tests: list[Callable[[Any], bool]]) -> Callable[[Any], bool]:
    """Return the test that all of ``tests`` hold (a loop: a generator in all() costs more per item)."""
    if len(tests) == 2:
        first, second = tests
        return lambda x: first(x) and second(x)

    def every(x: Any) -> bool:
        for test in tests:  # noqa: SIM110  # a loop: all() of a generator costs more per item
            if not test(x):
                return False
        return True

    return every


def _some(tests: list[Callable[[Any], bool]]) -> Callable[[Any], bool]:
    """Return the test that one of ``tests`` holds."""
    if len(tests) == 2:
        first, second = tests
        return lambda x: first(x) or second(x)

    def some(x: Any) -> bool:
        for test in tests:  # noqa: SIM110  # a loop: any() of a generator costs more per item
            if test(x):
                return True
        return False

    return some


def _logical(op: str, operand: Any, place: str) -> tuple[_Test, FilterNode]:
    if not isinstance(operand, (list, tuple)) or not operand:
        msg = (
            f"where{place}: {op!r} takes a non-empty list of filters, got "
            f"{type(operand).__name__} {operand!r}; write "
            f"{{{op!r}: [{{'step': {{'$gte': 2}}}}, {{'agent': 'host'}}]}}."
        )
        raise InvalidQueryError(msg)
    compiled = []
    for index, inner in enumerate(operand):
        where = f"{place} in {op}[{index}]"
        if not isinstance(inner, Mapping):
            msg = (
                f"where{where}: {op!r} takes filters (dicts such as {{'agent': 'host'}}), got "
                f"{type(inner).__name__} {inner!r}."
            )
            raise InvalidQueryError(msg)
        compiled.append(_compile(inner, where))
    tests = [test for test, _ in compiled]
    nodes = tuple(node for _, node in compiled)
    if op == "$and":
        return _every(tests), AllOf(nodes)
    return _some(tests), AnyOf(nodes)


def _field(name: str, condition: Any, place: str) -> tuple[_Test, FilterNode]:
    """Compile the condition on one field: a plain value, a range, or a dict of operators."""
    label = f"Filter on field {name!r}{place}"
    node: FilterNode
    if isinstance(condition, range):
        span = condition
        value_test: _ValueTest = lambda value: type(value) is int and value in span  # noqa: E731  # one-line closure
        node = Condition(name, "range", span)
    elif isinstance(condition, Mapping) and any(
        type(key) is str and key.startswith("$") for key in condition
    ):
        value_test = _operators(label, condition)
        conditions = tuple(
            Condition(name, op, tuple(operand) if op in ("$in", "$nin") else operand)
            for op, operand in condition.items()
        )
        node = conditions[0] if len(conditions) == 1 else AllOf(conditions)
    else:
        value_test = _equal_to(label, "$eq", condition)
        node = Condition(name, "$eq", condition)
    if "." not in name:

        def test(item: MemoryItem) -> bool:
            return value_test(item.get_value(name, NOTHING))

        return test, node

    def nested(item: MemoryItem) -> bool:
        return value_test(value_at(item, name))

    return nested, node


def node_fields(node: FilterNode) -> set[str] | None:
    """Return the field names a parsed filter reads, or ``None`` if it holds a function of the item (only the item can tell)."""
    if isinstance(node, Condition):
        return {node.field}
    if isinstance(node, Predicate):
        return None
    out: set[str] = set()
    for part in node.parts:
        fields = node_fields(part)
        if fields is None:
            return None
        out |= fields
    return out


def node_test(node: FilterNode) -> Callable[[Mapping[str, Any]], bool] | None:
    """Return the test of a parsed filter over a row's field values, or ``None`` if it holds a function of the item.

    The test takes, for each field :func:`node_fields` names, the value
    :func:`value_at` reads (``NOTHING`` where the item holds none), and
    keeps what :class:`Filter` keeps: the same comparisons, compiled by the
    same code. A store that keeps the values of filtered fields apart from
    its items judges a filter with it without decoding the items.
    """
    if isinstance(node, Predicate):
        return None
    if isinstance(node, Condition):
        field = node.field
        if node.op == "range":
            span = node.operand
            return lambda values: type(values[field]) is int and values[field] in span
        value_test = _operator(f"Filter on field {field!r}", node.op, node.operand)
        return lambda values: value_test(values[field])
    tests = []
    for part in node.parts:
        test = node_test(part)
        if test is None:
            return None
        tests.append(test)
    if not tests:
        return lambda values: True
    return _every(tests) if isinstance(node, AllOf) else _some(tests)


def value_at(item: MemoryItem, name: str) -> Any:
    """Return the value a filter reads for the field ``name`` of ``item``, or ``NOTHING`` if it holds none.

    A name without dots is the field itself. A dotted name is the field of
    that whole name if the item holds one, else a path into nested dicts,
    one key per dotted part (a value on the way that is no dict leaves it
    missing).
    """
    value = item.get_value(name, NOTHING)
    if value is not NOTHING or "." not in name:
        return value
    path = name.split(".")
    value = item.get_value(path[0], NOTHING)
    for part in path[1:]:
        if not isinstance(value, Mapping):
            return NOTHING
        value = value.get(part, NOTHING)
    return value


def _operators(label: str, condition: Mapping[Any, Any]) -> _ValueTest:
    plain = [key for key in condition if not (type(key) is str and key.startswith("$"))]
    if plain:
        ops = [key for key in condition if key not in plain]
        msg = (
            f"{label} mixes operators {ops} with plain keys {plain} in one dict; write only "
            f"operators ({{'$gte': 2, '$lte': 5}}), or {{'$eq': {{...}}}} to match a dict value."
        )
        raise InvalidQueryError(msg)
    tests = [_operator(label, op, operand) for op, operand in condition.items()]
    if len(tests) == 1:
        return tests[0]
    return _every(tests)


def _operator(label: str, op: str, operand: Any) -> _ValueTest:
    if op in ("$eq", "$ne"):
        equal = _equal_to(label, op, operand)
        if op == "$eq":
            return equal
        return lambda value: value is NOTHING or not equal(value)
    if op in ("$in", "$nin"):
        member = _member_of(label, op, operand)
        if op == "$in":
            return member
        return lambda value: value is NOTHING or not member(value)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        return _ordered(label, op, operand)
    if op in LOGICAL:
        msg = (
            f"{label} uses {op!r}, which combines whole filters, not the conditions of one "
            f"field; write {{{op!r}: [{{'step': 1}}, {{'step': 2}}]}}, or "
            "{'step': {'$in': [1, 2]}}."
        )
        raise InvalidQueryError(msg)
    msg = (
        f"{label} uses the unknown operator {op!r}; a field takes {_OPERATORS_TEXT} "
        "({'step': {'$gte': 2, '$lte': 5}}), filters combine with $and and $or, "
        "and anything else can be a function of the item."
    )
    raise InvalidQueryError(msg)


def _checked_operand(label: str, op: str, operand: Any) -> int:
    """Return the kind of an operand of ``op``, refusing NaN (equal to nothing, ordered with nothing)."""
    if isinstance(operand, float) and math.isnan(operand):
        msg = f"{label}: {op!r} got NaN, which is equal to nothing and ordered with nothing; a NaN can only be found with a function of the item."
        raise InvalidQueryError(msg)
    return _kind(operand)


def _equal_to(label: str, op: str, operand: Any) -> _ValueTest:
    """Return the test ``value`` equals ``operand`` (false for a missing field)."""
    kind = _checked_operand(label, op, operand)
    if kind == _NULL:
        return lambda value: value is None
    if kind == _BOOL:
        return lambda value: value is operand
    if kind == _NUMBER:

        def number(value: Any) -> bool:
            cls = type(value)
            if cls is int or cls is float:  # the common case, without _kind's lookups
                return bool(value == operand)
            return _kind(value) == _NUMBER and bool(value == operand)

        return number
    if kind == _STRING:
        return lambda value: isinstance(value, str) and value == operand
    return lambda value: value is not NOTHING and _kind(value) == _OTHER and _same(value, operand)


def _same(value: Any, operand: Any) -> bool:
    """Python's ``==`` as a bool; a comparison that fails or gives no truth value (a numpy array) is false."""
    try:
        return bool(value == operand)
    except Exception:  # a value's __eq__ or __bool__ may raise anything; it is then not equal
        return False


def _member_of(label: str, op: str, operand: Any) -> _ValueTest:
    """Return the test ``value`` equals one of ``operand`` (false for a missing field)."""
    if not isinstance(operand, (list, tuple, set, frozenset)):
        msg = (
            f"{label}: {op!r} takes a list of values, got {type(operand).__name__} {operand!r}; "
            f"write {{{op!r}: [{operand!r}]}}."
        )
        raise InvalidQueryError(msg)
    by_kind: dict[int, list[Any]] = {}
    for element in operand:
        by_kind.setdefault(_checked_operand(label, op, element), []).append(element)
    nulls = _NULL in by_kind
    bools = set(by_kind.get(_BOOL, ()))
    numbers = by_kind.get(_NUMBER, [])
    strings = by_kind.get(_STRING, [])
    others = by_kind.get(_OTHER, [])
    try:
        number_set: frozenset[Any] | None = frozenset(numbers)
    except TypeError:  # an unhashable int or float subclass: compare one by one
        number_set = None
    try:
        string_set: frozenset[Any] | None = frozenset(strings)
    except TypeError:
        string_set = None

    def member(value: Any) -> bool:
        kind = _kind(value)
        if kind == _NULL:
            return nulls
        if kind == _BOOL:
            return value in bools
        if kind == _NUMBER:
            if number_set is not None:
                try:
                    return value in number_set
                except TypeError:  # an unhashable number subclass
                    pass
            return any(value == number for number in numbers)
        if kind == _STRING:
            if string_set is not None:
                try:
                    return value in string_set
                except TypeError:
                    pass
            return any(value == string for string in strings)
        if value is NOTHING:
            return False
        return any(_same(value, other) for other in others)

    return member


def _ordered(label: str, op: str, operand: Any) -> _ValueTest:
    """Return the test ``value`` is ordered after or before ``operand`` (same kind only)."""
    kind = _checked_operand(label, op, operand)
    if kind not in (_NUMBER, _STRING):
        msg = (
            f"{label}: {op!r} orders numbers or strings, got {type(operand).__name__} "
            f"{operand!r}; write {{{op!r}: 2}} or {{{op!r}: '2024-05-01'}}, or use $eq/$in for "
            "other values."
        )
        raise InvalidQueryError(msg)
    if op == "$gt":
        compare: Callable[[Any], bool] = lambda value: value > operand  # noqa: E731  # one-line closures
    elif op == "$gte":
        compare = lambda value: value >= operand  # noqa: E731
    elif op == "$lt":
        compare = lambda value: value < operand  # noqa: E731
    else:
        compare = lambda value: value <= operand  # noqa: E731
    if kind == _NUMBER:

        def number(value: Any) -> bool:
            cls = type(value)
            if cls is int or cls is float:  # the common case, without _kind's lookups
                return compare(value)
            return _kind(value) == _NUMBER and compare(value)

        return number
    return lambda value: isinstance(value, str) and compare(value)
