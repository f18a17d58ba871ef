"""The rows of a session filed by the values their items hold, kept as rows are written, so that a filter's candidates are named without reading the session.

The in-process store (``memory://``) and the JSONL store keep no column of
any field: before this index, the first filter on a field looked through
every row's bytes (:mod:`~agents.memory.stores._core.screens`), 30-100
times the query it filtered at 10,000 steps. :class:`ValueIndex` reads each
row once, as it is written (or as a JSONL log is read at open and followed),
and files its seq under each scalar value of its item: a string of at most
:data:`SHORT` characters under the string itself, a number among the
numbers of its path, ``true``, ``false`` and ``null`` apart. A path is
a field's name, or the names into nested dicts joined by dots, as
:func:`~agents.memory._filter.value_at` reads a dotted field.

:meth:`ValueIndex.candidates` names, for a filter of ``$eq``, ``$in``,
``$gt``, ``$gte``, ``$lt``, ``$lte`` and ``range`` conditions on strings and
numbers, ``$and`` and ``$or``, a set of seqs that holds every row whose item
passes. :meth:`ValueIndex.judged` tells them apart: the rows known to
pass (no row needs decoding to be told: at 100,000 rows a 1% filter named
about 1,000, whose decoding was most of the first filtered query), and
the rows that may (the caller decodes and tests them). Exact, as
:class:`~agents.memory._filter.Filter` judges, for ``$eq``/``$in`` of
``None``, bools, ints, floats and short strings and for orderings of
ints and floats (numbers filed by value: ``1`` and ``1.0`` share a
place, as they are equal); a ``range`` only on a path where no float is
filed, and of step 1. Unsure, never missing a row:

* a dotted path is filed whole, so a field named ``"a.b"`` and the key
  ``b`` of a dict under ``a`` share a place: under a dotted path, the
  rows holding any key with a dot are unsure;
* a row of a typed item class is unsure (decoded, its class may set a
  value);
* an operand of a ``str`` or number subclass leaves every row it names
  unsure;
* a row holding, at a path or a dict above it, a value the codec tagged
  (an enum, a NumPy number, a dict with other keys than strings: decoded,
  it may equal a string or a number) is unsure under every condition on
  that path and below it;
* a row whose bytes are not a JSON object orjson reads (``NaN`` written by
  another program, a damaged line) is unsure under every filter, so
  decoding it reports or reads it as before.

A range on a path is answered, until its numbers are kept sorted, by a
look through them: in one comprehension (100,000 distinct numbers: 3-5
ms, most of the first range-filtered query on ``memory://``), or, where
NumPy is loaded already and the path holds at least :data:`ARRAYED`
numbers, by comparing an array of them kept as they are filed (0.1-0.3
ms; the same seqs).

Conditions the index cannot answer (a string longer than :data:`SHORT`, a
string ordered, ``$ne``, ``$nin``, a list or dict operand) give ``None``;
in a conjunction such a part is left to the exact check, in a disjunction
it leaves the whole to the byte screens.
"""

from __future__ import annotations

import math
import sys
from array import array
from bisect import bisect_left, bisect_right, insort
from operator import le
from typing import Any, Final, TypeAlias

import orjson

from agents.memory._codec import TAG
from agents.memory._filter import AllOf, AnyOf, Condition, FilterNode

__all__ = ["SHORT", "ValueIndex"]

SCANS: Final = 8
"""The ranges on a path answered by looking through its distinct numbers before they are kept sorted (sorting 100,000 costs about 14 looks)."""

ARRAYED: Final = 1024
"""The distinct numbers a path holds from which a range is answered by comparing an array of them with NumPy (fewer are looked through in less than NumPy's own overhead)."""

EXACT_INT: Final = 2**53
"""The largest int (and, negated, the smallest) a float holds exactly: a path filing a wider one keeps no array of its numbers."""

SHORT: Final = 64
"""The longest string (in characters) the index files; a longer one is no value a filter names often, and would cost its length in memory."""

Found: TypeAlias = tuple[set[int], set[int]]
"""What a filter names: the rows known to pass, and the rows that may (decoded to be told)."""

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
    """What is filed under one path: seqs by short string, by number (with the distinct numbers as filed, and in order once ranges ask often), of ``null`` and of tagged values."""

    __slots__ = ("arrayed", "floats", "numbers", "order", "others", "ranged", "stale", "strings")

    def __init__(self) -> None:
        # By the string itself, so that an equality names exactly the rows holding it
        # (filed by its hash, two strings sharing one were both named, and each had to be
        # decoded to be told apart: most of the first filter at 100,000 rows).
        self.strings: dict[str, Group] = {}
        self.numbers: dict[Any, Group] = {}  # ints and floats by value (never bools)
        # The distinct numbers in order; None until a range asks (filing a log of 10,000 rows
        # then sorts nothing, where one insort a new number cost about a fifth of the filing).
        self.order: list[Any] | None = None
        self.ranged = 0  # the ranges asked while unsorted: the first SCANS look through the numbers
        # The distinct numbers as filed, as floats (8 bytes each, appended as a number is first
        # filed), so that NumPy compares them all in one call where the first range-filtered
        # query looked through 100,000 in Python; a number unfiled stays (``stale`` of them)
        # until they outnumber the filed. None once an int wider than a float's exact ones
        # is filed (compared as a float, it might pass a bound it fails).
        self.arrayed: array[float] | None = array("d")
        self.stale = 0
        # Under None: the nulls; under True and False: the bools (no number equals one);
        # under _TAGGED: tagged values.
        self.others: dict[object, Group] = {}
        self.floats = False  # a float was filed here: a ``range`` (of ints only) is not exact

    def empty(self) -> bool:
        return not (self.strings or self.numbers or self.others)

    def add_number(self, number: Any) -> None:
        """Note ``number`` (an int or a float), just filed and held by no row before, among the numbers in order and in the array."""
        arrayed = self.arrayed
        if arrayed is not None:
            if type(number) is float or -EXACT_INT <= number <= EXACT_INT:
                arrayed.append(number)
            else:
                self.arrayed = None
        if self.order is not None:
            insort(self.order, number)

    def drop_number(self, number: Any) -> None:
        """Note ``number``, held by no row any longer: out of the numbers in order; in the array, stale until the stale outnumber the filed."""
        if self.order is not None:
            del self.order[bisect_left(self.order, number)]
        self.stale += 1
        if self.arrayed is not None and self.stale > len(self.numbers) + ARRAYED:
            self.arrayed = array("d", self.numbers)  # every one exact: else no array is kept
            self.stale = 0

    def between(self, low: Any, high: Any, *, low_in: bool, high_in: bool, out: set[int]) -> None:
        """Add to ``out`` the seqs of numbers from ``low`` to ``high`` (``None``: no bound; ``*_in``: the bound itself included)."""
        order, groups = self.order, self.numbers
        if order is None:
            inside = self._compared(low, high, low_in=low_in, high_in=high_in)
            if inside is not None:
                for value in inside:  # a stale number is held by no row: get gives None
                    _add_group(out, groups.get(value))
                return
        if order is None and self.ranged < SCANS:
            # A look through the distinct numbers, in one comprehension a pair of bounds
            # (100,000 distinct numbers: 2 ms, where a loop testing each bound took 6 and
            # sorting them 28); only a path asked often keeps them sorted.
            self.ranged += 1
            low = -math.inf if low is None else low
            high = math.inf if high is None else high
            if low_in and high_in:
                inside = [value for value in groups if low <= value <= high]
            elif low_in:
                inside = [value for value in groups if low <= value < high]
            elif high_in:
                inside = [value for value in groups if low < value <= high]
            else:
                inside = [value for value in groups if low < value < high]
            for value in inside:
                _add_group(out, groups[value])
            return
        if order is None:
            order = self.order = sorted(groups)
        start = 0 if low is None else (bisect_left if low_in else bisect_right)(order, low)
        end = (
            len(order) if high is None else (bisect_right if high_in else bisect_left)(order, high)
        )
        for value in order[start:end]:
            _add_group(out, groups[value])

    def _compared(self, low: Any, high: Any, *, low_in: bool, high_in: bool) -> list[float] | None:
        """Return the numbers of the array from ``low`` to ``high`` (some stale, some twice), compared by NumPy; ``None`` where no array answers (NumPy not loaded, few numbers, a bound a float cannot hold exactly)."""
        arrayed = self.arrayed
        if arrayed is None or len(arrayed) < ARRAYED or not (_exact(low) and _exact(high)):
            return None
        np = _numpy()
        if np is None:
            return None
        # A copy (0.03 ms at 100,000): a view would hold the array's buffer, and a row filed
        # while anything kept it (a traceback) could not append to it.
        values = np.array(arrayed, dtype=np.float64)
        keep = None
        if low is not None:
            low = float(low)  # exact (see _exact), as NumPy would take it under any promotion rule
            keep = values >= low if low_in else values > low
        if high is not None:
            high = float(high)
            below = values <= high if high_in else values < high
            keep = below if keep is None else keep & below
        chosen: list[float] = (values if keep is None else values[keep]).tolist()
        return chosen


class ValueIndex:
    """The seqs of a session's rows filed by the scalar values their items hold (see the module docstring).

    The caller files each row as it is set (:meth:`add`, after
    :meth:`remove` of the bytes held before when a row is replaced) and
    unfiles it as it goes (:meth:`remove`, with its bytes), under the lock
    that guards the rows.
    """

    __slots__ = ("_always", "_dotted", "_paths", "_typed")

    def __init__(self) -> None:
        self._paths: dict[str, _Path] = {}
        self._always: set[int] = set()
        # The rows of typed items: decoded, their class may set or change a value (a default,
        # a converter), so they are never known to pass without being decoded.
        self._typed: set[int] = set()
        # The rows holding a key with a dot (``"a.b"``, at any depth): a dotted path files
        # their values from both readings of it, where value_at reads one.
        self._dotted: set[int] = set()

    # -- filing ------------------------------------------------------------------------------

    def add(self, seq: int, data: bytes) -> None:
        """File the row ``seq`` holding the item encoded as ``data``."""
        fields, typed = _fields(data)
        if fields is None:
            self._always.add(seq)
            return
        if typed:
            self._typed.add(seq)
        if self._file_in(fields, "", seq):
            self._dotted.add(seq)

    def remove(self, seq: int, data: bytes) -> None:
        """Unfile the row ``seq``, which held the item encoded as ``data`` (as given to :meth:`add`)."""
        self._typed.discard(seq)
        self._dotted.discard(seq)
        fields, _ = _fields(data)
        if fields is None:
            self._always.discard(seq)
        else:
            self._file_out(fields, "", seq)

    def _file_in(self, fields: dict[str, Any], prefix: str, seq: int) -> bool:
        """File ``seq`` under each scalar of ``fields``, into nested dicts: the hot path of a log's open and a batch append, written out whole (one call a row, not one a value); return whether a key holds a dot."""
        paths = self._paths
        dotted = False
        for key, value in fields.items():
            if "." in key:
                dotted = True
            kind = type(value)
            if kind is str:
                if len(value) > SHORT:
                    continue  # no value a filter names often; filed, it would cost its length
                place: Any = value
            elif kind is int or kind is float or kind is bool:
                place = value
            elif kind is list:
                continue  # equal to no scalar a condition names
            elif kind is dict and TAG not in value:
                if self._file_in(value, prefix + key + "." if prefix else key + ".", seq):
                    dotted = True
                continue
            else:  # None, or a tagged value: decoded, it may equal a string or a number
                place = None if value is None else _TAGGED
            path = prefix + key if prefix else key
            filed = paths.get(path)
            if filed is None:
                filed = paths[path] = _Path()
            groups: dict[Any, Group]
            if kind is str:
                groups = filed.strings
            elif kind is int:
                groups = filed.numbers
            elif kind is float:
                groups = filed.numbers
                filed.floats = True
            else:  # bool, None, tagged
                groups = filed.others
            held = groups.get(place)
            if held is None:
                groups[place] = seq
                if groups is filed.numbers:
                    filed.add_number(place)
            elif isinstance(held, int):
                groups[place] = array("q", (held, seq) if held <= seq else (seq, held))
            elif seq >= held[-1]:  # rows are filed in seq order but where one is replaced
                held.append(seq)
            else:
                insort(held, seq)
        return dotted

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
                _take(filed.strings, value, seq)
            elif kind is int or kind is float:
                if _take(filed.numbers, value, seq):
                    filed.drop_number(value)
            elif kind is bool:
                _take(filed.others, value, seq)
            else:
                _take(filed.others, None if value is None else _TAGGED, seq)
            if filed.empty():
                del paths[path]

    def clear(self) -> None:
        """Unfile every row."""
        self._paths.clear()
        self._always.clear()
        self._typed.clear()
        self._dotted.clear()

    # -- a file of the index (:mod:`agents.memory.stores._jsonl.value_file`) ------------------

    def packed(self) -> tuple[bytes, dict[str, bytes]] | None:
        """Return the index as parts: the rows read loosely (JSON), and each path's filed values; ``None`` where a number JSON cannot hold exactly is filed (an infinity, an int wider than 64 bits).

        A path's part is a JSON line of its strings, numbers and other
        values (in the order filed) and whether a float is filed, then the
        count of seqs under each value (native ``uint32``) and the seqs
        (native ``int64``): read back by :meth:`take_path` with no work a
        seq. :meth:`take_sets` and :meth:`take_path` read them back; a path
        taken alone judges the conditions on it as the whole index does.
        """
        try:
            sets = orjson.dumps([sorted(self._always), sorted(self._typed), sorted(self._dotted)])
            paths = {}
            for path, filed in self._paths.items():
                if any(type(n) is float and not math.isfinite(n) for n in filed.numbers):
                    return None  # written as null: read back, it would name no number
                counts: array[int] = array("I")
                seqs: array[int] = array("q")
                for groups in (filed.strings, filed.numbers, filed.others):
                    for held in groups.values():
                        if isinstance(held, int):
                            counts.append(1)
                            seqs.append(held)
                        else:
                            counts.append(len(held))
                            seqs.extend(held)
                keys = [list(filed.strings), list(filed.numbers), list(filed.others), filed.floats]
                paths[path] = orjson.dumps(keys) + b"\n" + counts.tobytes() + seqs.tobytes()
        except (orjson.JSONEncodeError, OverflowError):
            return None
        return sets, paths

    def take_sets(self, sets: bytes) -> bool:
        """Take the rows read loosely as :meth:`packed` wrote them, into an index of no row yet; return whether they read so (else nothing is taken)."""
        try:
            parts = orjson.loads(sets)
        except orjson.JSONDecodeError:
            return False
        if not (
            type(parts) is list
            and len(parts) == 3
            and all(type(part) is list and all(type(seq) is int for seq in part) for part in parts)
        ):
            return False
        self._always, self._typed, self._dotted = (set(part) for part in parts)
        return True

    def take_path(self, path: str, blob: bytes, *, ordered: bool = False) -> bool:
        """File the values of ``path`` as :meth:`packed` wrote them (by this machine's byte order); return whether they read so (else nothing is filed).

        Each value's seqs are taken as they lie: a group of one seq as an
        int, of more as an array. Their order is checked only where
        ``ordered``: an index taken to be kept as rows change (unfiled by
        bisection) must hold each group in order, as filing keeps it; one
        only asked needs not.
        """
        cut = blob.find(b"\n")
        try:
            keys = orjson.loads(blob[:cut]) if cut >= 0 else None
        except orjson.JSONDecodeError:
            return False
        if not (type(keys) is list and len(keys) == 4 and type(keys[3]) is bool):
            return False
        strings, numbers, others = keys[0], keys[1], keys[2]
        if not (
            type(strings) is list
            and type(numbers) is list
            and type(others) is list
            and {type(key) for key in strings} <= {str}
            and {type(key) for key in numbers} <= {int, float}
            and all(key is None or type(key) is bool or key == _TAGGED for key in others)
        ):
            return False
        total = len(strings) + len(numbers) + len(others)
        counts: array[int] = array("I")
        seqs: array[int] = array("q")
        if (len(blob) - cut - 1 - total * counts.itemsize) % seqs.itemsize:
            return False
        counts.frombytes(blob[cut + 1 : cut + 1 + total * counts.itemsize])
        seqs.frombytes(blob[cut + 1 + total * counts.itemsize :])
        if total and (min(counts) < 1 or sum(counts) != len(seqs)):
            return False
        filed = _Path()
        at = 0
        start = 0
        for values, groups in (
            (strings, filed.strings),
            (numbers, filed.numbers),
            (others, filed.others),
        ):
            count = counts[start : start + len(values)]
            start += len(values)
            if sum(count) == len(values):  # one seq a value, as most distinct values hold
                groups.update(zip(values, seqs[at : at + len(values)], strict=True))
                at += len(values)
            else:
                for value, many in zip(values, count, strict=True):
                    if many == 1:
                        groups[value] = seqs[at]
                    else:
                        held = groups[value] = seqs[at : at + many]
                        if ordered and not all(map(le, held, held[1:])):
                            return False
                    at += many
            if len(groups) != len(values):
                return False  # a value twice (or 1 and 1.0, which share a place)
        filed.floats = keys[3]
        if all(type(n) is float or -EXACT_INT <= n <= EXACT_INT for n in numbers):
            filed.arrayed = array("d", filed.numbers)
        else:
            filed.arrayed = None
        if not filed.empty():
            self._paths[path] = filed
        return True

    @staticmethod
    def paths_of(tree: FilterNode) -> set[str]:
        """Return the paths whose filed values judge ``tree`` (:meth:`take_path`): each condition's, and the dicts above it."""
        out: set[str] = set()
        if isinstance(tree, Condition):
            parts = tree.field.split(".")
            out.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
        elif isinstance(tree, (AllOf, AnyOf)):
            for part in tree.parts:
                out |= ValueIndex.paths_of(part)
        return out

    # -- asking ------------------------------------------------------------------------------

    def candidates(self, tree: FilterNode) -> set[int] | None:
        """Return seqs among which are all the rows whose items pass ``tree``; ``None`` where the index cannot tell."""
        found = self.judged(tree)
        if found is None:
            return None
        return found[0] | found[1]

    def judged(self, tree: FilterNode) -> tuple[set[int], set[int]] | None:
        """Return ``(passing, unsure)``: rows whose items pass ``tree``, and rows that may (to be decoded and tested); ``None`` where the index cannot tell.

        A row of neither set fails ``tree``. A row is known to pass where
        each condition that decides it is answered exactly (see the module
        docstring); a row the index reads only loosely (a tagged value on
        the path, a key holding a dot, a typed item, bytes orjson cannot
        read) is unsure.
        """
        found = self._of(tree)
        if found is None:
            return None
        passing, unsure = found
        loose = self._always | self._typed
        if loose:
            unsure = unsure | (passing & self._typed) | self._always
            passing = passing - loose
        return passing, unsure

    def _of(self, tree: FilterNode) -> Found | None:
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
            answered = [found for part in rest if (found := self._of(part)) is not None]
            whole = len(answered) == len(rest)  # no part left to the exact check
            known += answered
            if not known:
                return None
            known.sort(key=lambda found: len(found[0]) + len(found[1]))
            passing, unsure = known[0]
            may = passing | unsure
            for one, two in known[1:]:
                may = (may & one) | (may & two)
            if not whole:
                return set(), may
            passing = passing.intersection(*(found[0] for found in known[1:]))
            return passing, may - passing
        if isinstance(tree, AnyOf) and tree.parts:
            passing, unsure = set(), set()
            for part in tree.parts:
                found = self._of(part)
                if found is None:
                    return None
                passing |= found[0]
                unsure |= found[1]
            return passing, unsure - passing
        return None

    def _condition(self, node: Condition) -> Found | None:
        if _bounds(node) is not None:
            return self._bounded(node.field, [node])
        op, operand, path = node.op, node.operand, node.field
        if op != "$eq" and op != "$in":
            return None
        out: set[int] = set()
        exact = True
        for one in operand if op == "$in" else (operand,):
            answer = self._equal(path, one, out)
            if answer is None:
                return None
            exact = exact and answer
        return self._split(path, out, exact)

    def _split(self, path: str, found: set[int], exact: bool) -> Found:
        """Return ``(passing, unsure)`` of the rows ``found`` at ``path`` (all unsure unless ``exact`` and the path is read exactly), the rows holding a tagged value on it unsure."""
        tagged: set[int] = set()
        self._add_tagged(path, tagged)
        if not exact:
            return set(), found | tagged
        unsure = tagged
        if "." in path and self._dotted:
            unsure = unsure | (found & self._dotted)
        if unsure:
            found -= unsure
        return found, unsure

    def _bounded(self, path: str, nodes: list[Condition]) -> Found:
        """Return ``(passing, unsure)`` of the rows holding at ``path`` a number within every bound of ``nodes`` (each one :func:`_bounds` reads)."""
        low: Bound = None
        high: Bound = None
        empty = False
        exact = True
        filed = self._paths.get(path)
        for node in nodes:
            bounds = _bounds(node)
            assert bounds is not None  # chosen by the caller
            if node.op == "range":
                # ints only: a float between the ends is filed with them; every other step
                # of the span skipped
                step = node.operand.step
                exact = exact and step in (1, -1) and not (filed is not None and filed.floats)
            elif type(node.operand) is not int and type(node.operand) is not float:
                exact = False  # a number subclass may compare as it likes
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
        if filed is not None and not empty:
            filed.between(
                None if low is None else low[0],
                None if high is None else high[0],
                low_in=low is None or low[1],
                high_in=high is None or high[1],
                out=out,
            )
        return self._split(path, out, exact)

    def _add_tagged(self, path: str, out: set[int]) -> None:
        """Add to ``out`` the seqs holding a tagged value at ``path`` or a dict above it: decoded, it may pass."""
        parts = path.split(".")
        for end in range(1, len(parts) + 1):
            filed = self._paths.get(".".join(parts[:end]))
            if filed is not None:
                _add_group(out, filed.others.get(_TAGGED))

    def _equal(self, path: str, operand: Any, out: set[int]) -> bool | None:
        """Add to ``out`` the seqs holding ``operand`` at ``path``; return whether they are exactly those equal to it (``None``: the index cannot tell)."""
        kind = type(operand)
        exact = True
        if kind is str:
            if len(operand) > SHORT:
                return None
        elif operand is None or kind is bool or kind is int or kind is float:
            pass  # NaN is refused by Filter
        elif isinstance(operand, str):
            if len(operand) > SHORT:
                return None
            # What a str subclass equals is its own business: the rows of its value, decoded.
            operand, exact = str.__str__(operand), False
        elif _is_number(operand):
            exact = False  # likewise a number subclass
        else:
            return None
        filed = self._paths.get(path)
        if filed is None:
            return exact
        if operand is None or kind is bool:
            _add_group(out, filed.others.get(operand))
        elif isinstance(operand, str):
            _add_group(out, filed.strings.get(operand))
        else:
            try:
                _add_group(out, filed.numbers.get(operand))
            except TypeError:  # a number subclass that cannot be hashed
                return None
        return exact


def _exact(bound: Any) -> bool:
    """Return whether ``bound`` (a bound's number, or ``None``) is compared by NumPy as Python compares it: no bound, a float, or an int a float holds exactly (a subclass may compare as it likes)."""
    kind = type(bound)
    return bound is None or kind is float or (kind is int and -EXACT_INT <= bound <= EXACT_INT)


def _numpy() -> Any:
    """Return NumPy where this process has loaded it already (the keyword ranker does at a session's first query), else ``None``: its import (0.1-0.3 s) would cost more than fifty looks through 100,000 numbers."""
    if sys.modules.get("numpy") is None:  # not loaded, or blocked (None)
        return None
    try:
        import numpy  # loaded: this waits only for a thread still importing it
    except ImportError:  # pragma: no cover - a broken install: look through the numbers
        return None
    return numpy


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


def _fields(data: bytes) -> tuple[dict[str, Any] | None, bool]:
    """Return the fields of an encoded item as JSON (tagged values as written), ``None`` where orjson cannot read them as an item's, and whether the item is of a typed class."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None, False
    if type(obj) is not dict:
        return None, False
    if TAG in obj:  # a wrapped item: {"$kv": "item", "fields": {...}} (anything else is damaged)
        fields = obj.get("fields")
        if obj[TAG] == "item" and type(fields) is dict:
            return fields, "class" in obj
        return None, False
    return obj, False
