"""Which rows may pass a filter, told from their record bytes without decoding them.

Decoding an item costs about 11 us for 1 kB (110 ms for 10,000 steps);
looking through its bytes costs about 1 us. :func:`row_screen` turns a
filter (or part of it) into a test of a row's bytes that every row whose
item passes the filter passes too (it may keep rows that do not pass: they
are decoded and tested). Two kinds of condition have one:

* a field equal to a string (``$eq``, or ``$in`` a list of strings): an
  item holding that string holds its JSON text (``"reviewer"``) in its
  record bytes, tagged values included (an enum's value, a NumPy string
  and the keys and values of a tagged dict are written as JSON strings);
* a field compared with numbers (``$eq`` a number, ``true``, ``false`` or
  ``null``; ``$in`` a list of them; ``$gt``, ``$gte``, ``$lt``, ``$lte``,
  a ``range``): each place where the field's name is written as a key is
  read, and the row is kept if one holds a JSON number or literal that
  passes, or a value of another kind (a string, an object, a list: such a
  value is decoded); a row that names the field nowhere holds no value of
  it, which fails these conditions. A dotted name is looked for whole and
  as its last part. A row holding a dict written as ``[key, value]``
  pairs (the codec's form for a dict with keys other than strings) is
  kept, as its keys are not written as keys.

Conditions on one field under ``$and`` (a range's two bounds) are tested
together on each value. Strings in the codec's bytes are looked for row
by row (one ``in`` a row); any other test looks through all the rows at
once (:class:`_Joined`: one C-level pass per byte string or pattern over
the rows joined, the row of each place found by bisection).

Records written by the codec spell each string one way (orjson's: only
``"``, ``\\`` and control characters escaped, no spaces between tokens);
where that is not known (``canonical=False``: a JSONL log, which another
program may have written) a row holding a ``\\u`` or ``\\/`` escape is
kept as well, and space is allowed around a key's colon.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable
from itertools import accumulate
from typing import Any, Final

import orjson

from agents.memory._codec import TAG
from agents.memory._filter import AllOf, AnyOf, Condition, FilterNode, node_test
from agents.memory._item import NOTHING

__all__ = ["RowScreen", "row_screen"]

Test = Callable[[bytes], bool]


class RowScreen:
    """A test of a row's bytes that every row passing a filter passes (see the module docstring)."""

    def __init__(self, test: Test) -> None:
        self.test = test

    def select(self, rows: Iterable[tuple[int, tuple[Any, Any, bytes]]]) -> list[tuple[int, bytes]]:
        """Return ``(seq, data)`` of the rows (``seq -> (step, created, data)`` items) whose bytes pass.

        Strings looked for in the codec's own bytes are looked for row by
        row (one ``in`` each: joining the rows would cost what the faster
        search over them saves); any other test looks through the rows at
        once (:class:`_Joined`), one C-level pass over all their bytes per
        byte string or pattern, not a Python call per row. Either way the
        rows kept are those :attr:`test` keeps.
        """
        test = self.test
        if isinstance(test, _Needles) and not test.escapes:
            needles = test.needles  # looked for inline: a call per row costs what a look does
            if len(needles) == 1:
                (one,) = needles
                return [(seq, row[2]) for seq, row in rows if one in row[2]]
            if len(needles) == 2:
                one, two = needles
                return [(seq, row[2]) for seq, row in rows if one in row[2] or two in row[2]]
            return [(seq, row[2]) for seq, row in rows if test(row[2])]
        pairs = [(seq, row[2]) for seq, row in rows]
        if not pairs:
            return []
        found = _rows_of(self.test, _Joined([data for _, data in pairs]))
        return [pairs[at] for at in sorted(found)]


def row_screen(tree: FilterNode, *, canonical: bool) -> RowScreen | None:
    """Return a screen of the rows that may pass ``tree``, or ``None`` where none is known.

    A conjunction is screened by the screens of those of its parts that
    have one (all must pass); a disjunction by the screens of all its parts
    (one must pass; none if a part has none).
    """
    test = _test_of(tree, canonical=canonical)
    return None if test is None else RowScreen(test)


def _test_of(tree: FilterNode, *, canonical: bool) -> Test | None:
    if isinstance(tree, Condition):
        return _condition_test(tree, canonical=canonical)
    if isinstance(tree, AllOf):
        every = [
            test for part in tree.parts if (test := _test_of(part, canonical=canonical)) is not None
        ]
        every = _merged(every)
        if len(every) <= 1:
            return every[0] if every else None
        return _All(every)
    if isinstance(tree, AnyOf) and tree.parts:
        tests = []
        for part in tree.parts:
            test = _test_of(part, canonical=canonical)
            if test is None:
                return None
            tests.append(test)
        return _Any(tests)
    return None


def _merged(tests: list[Test]) -> list[Test]:
    """Return ``tests`` (all of which must pass) with those reading the values of the same keys made one (a range's bounds: one look at each value)."""
    out: list[Test] = []
    by_keys: dict[tuple[bytes, ...], int] = {}
    for test in tests:
        if isinstance(test, _KeyValues):
            at = by_keys.setdefault(test.keys, len(out))
            if at < len(out):
                held = out[at]
                assert isinstance(held, _KeyValues)  # filed by its keys
                out[at] = held.also(test)
                continue
        out.append(test)
    return out


def _condition_test(node: Condition, *, canonical: bool) -> Test | None:
    op, operand = node.op, node.operand
    operands = operand if op == "$in" else (operand,)
    if op in ("$eq", "$in") and operands and all(type(one) is str for one in operands):
        needles = tuple(dict.fromkeys(orjson.dumps(one) for one in operands))
        return _Needles(needles, escapes=not canonical)
    numeric = op == "range" or (
        op in _NUMERIC_OPS and operands and all(type(one) in _LITERAL_TYPES for one in operands)
    )
    if not numeric:
        return None
    value_test = node_test(node)
    assert value_test is not None  # a condition is no function of the item
    field = node.field
    if value_test({field: NOTHING}):  # a missing field would pass: every row may
        return None
    keys = tuple(dict.fromkeys(orjson.dumps(name) for name in (field, field.rsplit(".", 1)[-1])))
    return _KeyValues(keys, _loose_test(op, operand), canonical=canonical)


def _loose_test(op: str, operand: Any) -> Callable[[Any], bool]:
    """Return a test of a JSON literal's value (an int, float, bool or None) that every value passing the condition passes.

    Looser than the filter: kinds are not told apart (``1``, ``1.0`` and
    ``True`` are equal here), which keeps a few more rows to decode, never
    fewer.
    """
    if op == "range":
        return lambda value: value in operand
    if op == "$eq":
        return lambda value: bool(value == operand)
    if op == "$in":
        members = frozenset(operand)
        return lambda value: value in members
    ordered: dict[str, Callable[[Any], bool]] = {
        "$gt": lambda value: value is not None and value > operand,
        "$gte": lambda value: value is not None and value >= operand,
        "$lt": lambda value: value is not None and value < operand,
        "$lte": lambda value: value is not None and value <= operand,
    }
    return ordered[op]


class _Needles:
    """Whether a row's bytes hold one of some byte strings (or, with ``escapes``, a ``\\u`` or ``\\/`` escape)."""

    def __init__(self, needles: tuple[bytes, ...], *, escapes: bool) -> None:
        self.needles = needles
        self.escapes = escapes

    def __call__(self, data: bytes) -> bool:
        if any(needle in data for needle in self.needles):
            return True
        return self.escapes and any(other in data for other in _OTHER_SPELLINGS)

    def rows(self, joined: _Joined) -> set[int]:
        """Return the rows of ``joined`` that pass, found in one pass over all of them per byte string."""
        found = set().union(*(joined.holding(needle) for needle in self.needles))
        if self.escapes:
            found |= joined.matching(_ESCAPE)
        return found


class _All:
    """Whether a row passes every one of some tests."""

    def __init__(self, tests: list[Test]) -> None:
        self.tests = tests

    def __call__(self, data: bytes) -> bool:
        return all(test(data) for test in self.tests)

    def rows(self, joined: _Joined) -> set[int]:
        """Return the rows of ``joined`` that pass: those the first test keeps, looked at one by one for the others."""
        first, *rest = self.tests
        rows = joined.rows
        return {at for at in _rows_of(first, joined) if all(test(rows[at]) for test in rest)}


class _Any:
    """Whether a row passes one of some tests."""

    def __init__(self, tests: list[Test]) -> None:
        self.tests = tests

    def __call__(self, data: bytes) -> bool:
        return any(test(data) for test in self.tests)

    def rows(self, joined: _Joined) -> set[int]:
        """Return the rows of ``joined`` that pass one test (each looked for in one pass)."""
        return set().union(*(_rows_of(test, joined) for test in self.tests))


class _KeyValues:
    """Whether a row may hold a passing value under one of some keys (see the module docstring)."""

    def __init__(
        self, keys: tuple[bytes, ...], passes: Callable[[Any], bool], *, canonical: bool
    ) -> None:
        self.keys, self.canonical = keys, canonical
        colon = rb":" if canonical else rb"[ \t\r\n]*:[ \t\r\n]*"
        self.patterns = [re.compile(re.escape(key) + colon + _LITERAL) for key in keys]
        self.passes = passes
        # Rows kept whole: a [key, value]-pairs dict (its keys are not written as keys), and
        # where the spelling is not known, an escape or any tagged value.
        self.kept = _Needles((_TAGGED_DICT,) if canonical else (_TAG,), escapes=not canonical)

    def also(self, other: _KeyValues) -> _KeyValues:
        """Return the test of a row holding, under these keys, a value that may pass both this and ``other`` (read under the same keys)."""
        one, two = self.passes, other.passes
        return _KeyValues(
            self.keys, lambda value: one(value) and two(value), canonical=self.canonical
        )

    def __call__(self, data: bytes) -> bool:
        if self.kept(data):
            return True
        return any(
            self._may_pass(found) for pattern in self.patterns for found in pattern.finditer(data)
        )

    def rows(self, joined: _Joined) -> set[int]:
        """Return the rows of ``joined`` that pass: one pass over all of them per key, a Python call per place the key is written."""
        found = self.kept.rows(joined)
        may_pass, row_at = self._may_pass, joined.row_at
        for pattern in self.patterns:
            found.update(
                row_at(place.start()) for place in pattern.finditer(joined.data) if may_pass(place)
            )
        return found

    def _may_pass(self, place: re.Match[bytes]) -> bool:
        """Whether the value written at a place of the key may pass."""
        literal = place.group(1)
        if literal is None:
            return True  # a value of another kind: decoded to be sure
        try:
            value = _LITERALS[literal] if literal in _LITERALS else _number(literal)
        except ValueError:  # no number JSON writes: decoding reports it
            return True
        return self.passes(value)


class _Joined:
    """Rows' bytes joined into one, so that one C-level pass finds a byte string or a pattern in all of them.

    Looking through 10,000 rows of 1 kB one call per row costs about 1-2 us
    a row (most of a first filtered query); ``bytes.find`` over the joined
    bytes (a two-way search with a shift table) and a regular expression's
    ``finditer`` cost about half, with no Python per row. The rows are
    joined by a NUL byte, which no byte string or pattern looked for holds
    (JSON spells a control character as an escape; the patterns' spaces are
    JSON's four), so a place found lies inside one row.
    """

    def __init__(self, rows: list[bytes]) -> None:
        self.rows = rows
        self.data = _SEPARATOR.join(rows)
        # Where each row's successor starts: row i is data[ends[i - 1] : ends[i] - 1].
        self.ends = list(accumulate([len(data) + 1 for data in rows]))

    def row_at(self, place: int) -> int:
        """Return the row holding the byte at ``place`` of the joined bytes."""
        return bisect_right(self.ends, place)

    def holding(self, needle: bytes) -> set[int]:
        """Return the rows holding ``needle`` (each row looked through up to its first)."""
        data, ends, found = self.data, self.ends, set()
        place = data.find(needle)
        while place >= 0:
            row = bisect_right(ends, place)
            found.add(row)
            place = data.find(needle, ends[row])
        return found

    def matching(self, pattern: re.Pattern[bytes]) -> set[int]:
        """Return the rows where ``pattern`` matches (each row looked through up to its first)."""
        data, ends, found = self.data, self.ends, set()
        place = pattern.search(data)
        while place is not None:
            row = bisect_right(ends, place.start())
            found.add(row)
            place = pattern.search(data, ends[row])
        return found


def _rows_of(test: Test, joined: _Joined) -> set[int]:
    """Return the rows of ``joined`` that pass ``test`` (a screen's test; looked at one by one if it has no pass of its own)."""
    rows = getattr(test, "rows", None)
    if rows is not None:
        found: set[int] = rows(joined)
        return found
    return {at for at, data in enumerate(joined.rows) if test(data)}


def _number(literal: bytes) -> int | float:
    """Return the number a JSON literal reads as, of the type orjson gives it."""
    if b"." in literal or b"e" in literal or b"E" in literal:
        return float(literal)
    return int(literal)


_OTHER_SPELLINGS: Final = (b"\\u", b"\\/")
"""The escapes with which another JSON writer may spell a string the codec writes plainly."""
_ESCAPE: Final = re.compile(rb"\\[u/]")
"""Either of :data:`_OTHER_SPELLINGS` (one pass over joined rows, not one per escape)."""
_SEPARATOR: Final = b"\x00"

_TAG: Final = orjson.dumps(TAG)
_TAGGED_DICT: Final = orjson.dumps({TAG: "dict"})[1:-1]
"""A dict written with other keys than strings, as ``[key, value]`` pairs: ``"$kv":"dict"``."""
_NUMERIC_OPS: Final = frozenset({"$eq", "$in", "$gt", "$gte", "$lt", "$lte"})
_LITERAL_TYPES: Final = frozenset({int, float, bool, type(None)})
_LITERALS: Final[dict[bytes, Any]] = {b"true": True, b"false": False, b"null": None}
_LITERAL: Final = rb"(-?[0-9][0-9.eE+-]*|true|false|null)?"
"""A JSON number or literal after a key's colon (none: a value of another kind)."""
