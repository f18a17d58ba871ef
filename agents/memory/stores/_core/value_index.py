"""The rows of a session filed by the values their items hold, kept as rows are written, so that a filter's candidates are named without reading the session.

The in-process store (``memory://``) and the JSONL store keep no column of
any field: before this index, the first filter on a field looked through
every row's bytes (:mod:`~agents.memory.stores._core.screens`), 30-100
times the query it filtered at 10,000 steps. :class:`ValueIndex` reads each
row once, as it is written (or as a JSONL log is read at open and followed),
and files its seq under each scalar value of its item: a string of at most
:data:`SHORT` characters under ``(path, string)``, a number, ``true`` or
``false`` among the sorted numbers of its path, ``null`` apart. A path is
a field's name, or the names into nested dicts joined by dots, as
:func:`~agents.memory._filter.value_at` reads a dotted field.

:meth:`ValueIndex.candidates` names, for a filter of ``$eq``, ``$in``,
``$gt``, ``$gte``, ``$lt``, ``$lte`` and ``range`` conditions on strings and
numbers, ``$and`` and ``$or``, a set of seqs that holds every row whose item
passes (it may hold more: the caller decodes and tests them). Kept more
loosely than the filter, never missing a row:

* numbers, ``true`` and ``false`` are filed together by value (``1``,
  ``1.0`` and ``true`` share a place);
* a dotted path is filed whole, so a field named ``"a.b"`` and the key
  ``b`` of a dict under ``a`` share a place;
* a row holding, at a path or a dict above it, a value the codec tagged
  (an enum, a NumPy number, a dict with other keys than strings: decoded,
  it may equal a string or a number) is a candidate of every condition on
  that path and below it;
* a row whose bytes are not a JSON object orjson reads (``NaN`` written by
  another program, a damaged line) is a candidate of every filter, so
  decoding it reports or reads it as before.

Conditions the index cannot answer (a string longer than :data:`SHORT`, a
string ordered, ``$ne``, ``$nin``, a list or dict operand) give ``None``;
in a conjunction such a part is left to the exact check, in a disjunction
it leaves the whole to the byte screens.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right, insort
from typing import Any, Final, TypeAlias

import orjson

from agents.memory._codec import TAG
from agents.memory._filter import AllOf, AnyOf, Condition, FilterNode

__all__ = ["SHORT", "ValueIndex"]

SHORT: Final = 64
"""The longest string (in characters) the index files; a longer one is no value a filter names often, and would cost its length in memory."""

Group: TypeAlias = "int | array[int]"
"""The seqs filed under one value: an int while there is one (most distinct values are held once), else an array of them in order (8 bytes a seq, where a set takes 30-50; a seq filed twice under one value is held twice), so that one is unfiled by bisection, not by a scan of a value most rows share."""


def _take(groups: dict[Any, Group], key: Any, seq: int) -> bool:
    """Unfile ``seq`` from ``key`` (once); return whether ``key`` is gone."""
    held = groups.get(key)
    if held is None:
        return False
    if isinstance(held, int):
        if held != seq:
            return False
        del groups[key]
        return True
    at = bisect_left(held, seq)  # in order: no scan of a value most rows share
    if at == len(held) or held[at] != seq:
        return False
    del held[at]
    if len(held) == 1:
        groups[key] = held[0]
    return False


def _add_group(out: set[int], held: Group | None) -> None:
    if held is None:
        return
    if isinstance(held, int):
        out.add(held)
    else:
        out.update(held)


class _Path:
    """What is filed under one path: seqs by short string, by number (with the distinct numbers in order, sorted when a second range asks), of ``null`` and of tagged values."""

    __slots__ = ("numbers", "order", "others", "ranged", "strings")

    def __init__(self) -> None:
        self.strings: dict[int, Group] = {}  # by the string's hash (two sharing one: both named)
        self.numbers: dict[Any, Group] = {}
        # The distinct numbers in order; None until a range asks (filing a log of 10,000 rows
        # then sorts nothing, where one insort a new number cost about a fifth of the filing).
        self.order: list[Any] | None = None
        self.ranged = False  # whether a range asked before: the first looks through the numbers
        self.others: dict[object, Group] = {}  # under None: the nulls; under _TAGGED: tagged values

    def empty(self) -> bool:
        return not (self.strings or self.numbers or self.others)

    def between(self, low: Any, high: Any, *, low_in: bool, high_in: bool, out: set[int]) -> None:
        """Add to ``out`` the seqs of numbers from ``low`` to ``high`` (``None``: no bound; ``*_in``: the bound itself included)."""
        order, groups = self.order, self.numbers
        if order is None and not self.ranged:
            # The first range looks through the distinct numbers (about a third of sorting
            # them); only a path asked again keeps them sorted.
            self.ranged = True
            for value, held in groups.items():
                if (low is None or (value >= low if low_in else value > low)) and (
                    high is None or (value <= high if high_in else value < high)
                ):
                    _add_group(out, held)
            return
        if order is None:
            order = self.order = sorted(groups)
        start = 0 if low is None else (bisect_left if low_in else bisect_right)(order, low)
        end = (
            len(order) if high is None else (bisect_right if high_in else bisect_left)(order, high)
        )
        for value in order[start:end]:
            _add_group(out, groups[value])


class ValueIndex:
    """The seqs of a session's rows filed by the scalar values their items hold (see the module docstring).

    The caller files each row as it is set (:meth:`add`, after
    :meth:`remove` of the bytes held before when a row is replaced) and
    unfiles it as it goes (:meth:`remove`, with its bytes), under the lock
    that guards the rows.
    """

    __slots__ = ("_always", "_paths")

    def __init__(self) -> None:
        self._paths: dict[str, _Path] = {}
        self._always: set[int] = set()

    # -- filing ------------------------------------------------------------------------------

    def add(self, seq: int, data: bytes) -> None:
        """File the row ``seq`` holding the item encoded as ``data``."""
        fields = _fields(data)
        if fields is None:
            self._always.add(seq)
        else:
            self._file_in(fields, "", seq)

    def remove(self, seq: int, data: bytes) -> None:
        """Unfile the row ``seq``, which held the item encoded as ``data`` (as given to :meth:`add`)."""
        fields = _fields(data)
        if fields is None:
            self._always.discard(seq)
        else:
            self._file_out(fields, "", seq)

    def _file_in(self, fields: dict[str, Any], prefix: str, seq: int) -> None:
        """File ``seq`` under each scalar of ``fields``, into nested dicts: the hot path of a log's open and a batch append, written out whole (one call a row, not one a value)."""
        paths = self._paths
        for key, value in fields.items():
            kind = type(value)
            if kind is str:
                if len(value) > SHORT:
                    continue  # no value a filter names often; filed, it would cost its length
                place: Any = hash(value)  # filed by its hash: half the memory of the string
            elif kind is int or kind is float or kind is bool:
                place = value
            elif kind is list:
                continue  # equal to no scalar a condition names
            elif kind is dict and TAG not in value:
                self._file_in(value, prefix + key + "." if prefix else key + ".", seq)
                continue
            else:  # None, or a tagged value: decoded, it may equal a string or a number
                place = None if value is None else _TAGGED
            path = prefix + key if prefix else key
            filed = paths.get(path)
            if filed is None:
                filed = paths[path] = _Path()
            groups = (
                filed.strings
                if kind is str
                else filed.others
                if place is None or place is _TAGGED
                else filed.numbers
            )
            held = groups.get(place)
            if held is None:
                groups[place] = seq
                if groups is filed.numbers and filed.order is not None:
                    insort(filed.order, place)
            elif isinstance(held, int):
                groups[place] = array("q", (held, seq) if held <= seq else (seq, held))
            elif seq >= held[-1]:  # rows are filed in seq order but where one is replaced
                held.append(seq)
            else:
                insort(held, seq)

    def _file_out(self, fields: dict[str, Any], prefix: str, seq: int) -> None:
        """Unfile ``seq`` from each scalar of ``fields``, into nested dicts (as :meth:`_file_in` filed it)."""
        paths = self._paths
        for key, value in fields.items():
            kind = type(value)
            if kind is list or (kind is str and len(value) > SHORT):
                continue
            path = prefix + key if prefix else key
            if kind is dict and TAG not in value:
                self._file_out(value, path + ".", seq)
                continue
            filed = paths.get(path)
            if filed is None:
                continue
            if kind is str:
                _take(filed.strings, hash(value), seq)
            elif kind is int or kind is float or kind is bool:
                if _take(filed.numbers, value, seq) and filed.order is not None:
                    del filed.order[bisect_left(filed.order, value)]
            else:
                _take(filed.others, None if value is None else _TAGGED, seq)
            if filed.empty():
                del paths[path]

    def clear(self) -> None:
        """Unfile every row."""
        self._paths.clear()
        self._always.clear()

    # -- asking ------------------------------------------------------------------------------

    def candidates(self, tree: FilterNode) -> set[int] | None:
        """Return seqs among which are all the rows whose items pass ``tree``; ``None`` where the index cannot tell."""
        found = self._of(tree)
        if found is None:
            return None
        return found | self._always

    def _of(self, tree: FilterNode) -> set[int] | None:
        if isinstance(tree, Condition):
            return self._condition(tree)
        if isinstance(tree, AllOf):
            # The bounds on one path (a range's two) are looked up together: each alone
            # may name most of the rows.
            bounded: dict[str, list[Condition]] = {}
            rest: list[FilterNode] = []
            for part in tree.parts:
                if isinstance(part, Condition) and _bounds(part) is not None:
                    bounded.setdefault(part.field, []).append(part)
                else:
                    rest.append(part)
            known = [self._bounded(path, parts) for path, parts in bounded.items()]
            known += [found for part in rest if (found := self._of(part)) is not None]
            if not known:
                return None
            known.sort(key=len)
            return known[0].intersection(*known[1:])
        if isinstance(tree, AnyOf) and tree.parts:
            out: set[int] = set()
            for part in tree.parts:
                found = self._of(part)
                if found is None:
                    return None
                out |= found
            return out
        return None

    def _condition(self, node: Condition) -> set[int] | None:
        if _bounds(node) is not None:
            return self._bounded(node.field, [node])
        op, operand, path = node.op, node.operand, node.field
        if op != "$eq" and op != "$in":
            return None
        out: set[int] = set()
        for one in operand if op == "$in" else (operand,):
            if not self._equal(path, one, out):
                return None
        self._add_tagged(path, out)
        return out

    def _bounded(self, path: str, nodes: list[Condition]) -> set[int]:
        """Return the seqs holding at ``path`` a number within every bound of ``nodes`` (each one :func:`_bounds` reads)."""
        low: Bound = None
        high: Bound = None
        empty = False
        for node in nodes:
            bounds = _bounds(node)
            assert bounds is not None  # chosen by the caller
            one, two = bounds
            if one == _EMPTY:
                empty = True
                continue
            if one is not None and (
                low is None or one[0] > low[0] or (one[0] == low[0] and not one[1])
            ):
                low = one
            if two is not None and (
                high is None or two[0] < high[0] or (two[0] == high[0] and not two[1])
            ):
                high = two
        out: set[int] = set()
        filed = self._paths.get(path)
        if filed is not None and not empty:
            filed.between(
                None if low is None else low[0],
                None if high is None else high[0],
                low_in=low is None or low[1],
                high_in=high is None or high[1],
                out=out,
            )
        self._add_tagged(path, out)
        return out

    def _add_tagged(self, path: str, out: set[int]) -> None:
        """Add to ``out`` the seqs holding a tagged value at ``path`` or a dict above it: decoded, it may pass."""
        parts = path.split(".")
        for end in range(1, len(parts) + 1):
            filed = self._paths.get(".".join(parts[:end]))
            if filed is not None:
                _add_group(out, filed.others.get(_TAGGED))

    def _equal(self, path: str, operand: Any, out: set[int]) -> bool:
        """Add to ``out`` the seqs holding ``operand`` at ``path``; return ``False`` where the index cannot tell."""
        if isinstance(operand, str) and len(operand) > SHORT:
            return False
        if not (operand is None or isinstance(operand, str) or _is_number(operand)):
            return False
        filed = self._paths.get(path)
        if filed is None:
            return True
        if operand is None:
            _add_group(out, filed.others.get(None))
            return True
        if isinstance(operand, str):
            _add_group(out, filed.strings.get(str.__hash__(operand)))
            return True
        try:
            _add_group(out, filed.numbers.get(operand))
        except TypeError:  # a number subclass that cannot be hashed
            return False
        return True


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float)) and value == value
    )  # NaN (refused by Filter) is never filed


_TAGGED: Final = "tagged"
"""The key of :attr:`_Path.others` under which rows holding a tagged value are filed (``None``'s: the nulls)."""

Bound = tuple[Any, bool] | None
"""A bound of numbers: ``(number, whether it is included)``, or ``None`` for none."""

_EMPTY: Final = (None, False)
"""The lower bound :func:`_bounds` gives an empty ``range``."""


def _bounds(node: Condition) -> tuple[Bound, Bound] | None:
    """Return the ``(lower, upper)`` bounds of the numbers a condition keeps; ``None`` if it is no ordering of numbers (or a ``range``)."""
    op, operand = node.op, node.operand
    if op == "range":
        if not len(operand):
            return _EMPTY, None
        ends = (operand[0], operand[-1])
        return (min(ends), True), (max(ends), True)
    if op not in ("$gt", "$gte", "$lt", "$lte") or not _is_number(operand):
        return None
    inclusive = op.endswith("e")
    if op.startswith("$g"):
        return (operand, inclusive), None
    return None, (operand, inclusive)


def _fields(data: bytes) -> dict[str, Any] | None:
    """Return the fields of an encoded item as JSON (tagged values as written); ``None`` where orjson cannot read them as an item's."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict:
        return None
    if TAG in obj:  # a wrapped item: {"$kv": "item", "fields": {...}} (anything else is damaged)
        fields = obj.get("fields")
        return fields if obj[TAG] == "item" and type(fields) is dict else None
    return obj
