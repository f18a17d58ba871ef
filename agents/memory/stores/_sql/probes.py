"""The rows of a PostgreSQL session a filter may pass, named by indexes: a condition over ``doc`` and ``seq``.

Two indexes name rows without reading their JSONB copies: the GIN index over
the copies (schema version 11) for equalities (:func:`~agents.memory.stores._sql.doc_index.index_predicate`),
and the leaf table's btree indexes (schema version 13, see
``_postgres.leaves``) for ranges: ``$gt``, ``$gte``, ``$lt``, ``$lte`` with
a number or a string, and ``range`` conditions too long for the GIN index.
:func:`row_probe` writes, for a filter, a condition naming a superset of the
rows that may pass (the rows without a copy are added by the caller); like
the rest of ``_sql.filters`` it is sound, never exact: the rows it names are
judged by the SQL condition, then by the filter in Python. A range names:

* the rows holding a number (a string) at the field's path within the
  bounds, widened as ``_sql.filters`` widens them (a relative 1e-9 for
  numbers; strings by their first ``TEXT_KEPT`` characters, which order as
  the whole strings do or tie);
* the rows holding, at the path or on its way, a value SQL cannot order
  (a codec-tagged object, a number no ``float8`` holds).

The conditions on one field in ``$and`` make one interval, read as one scan.
``$ne`` and ``$nin`` are left to the scan: they keep every row without the
value (and without the field), most of a session, which no index lists more
cheaply than the rows themselves.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import attrs

from agents.memory._filter import AllOf, AnyOf, Condition, FilterNode
from agents.memory.stores._sql.doc_index import index_predicate

__all__ = ["TEXT_KEPT", "Interval", "RowProbe", "row_probe"]

TEXT_KEPT: Final = 64
"""The characters of a string value the leaf table keeps (a btree entry holds about 2.7 kB at most)."""
_SAFE_INT: Final = 2**53
_SLACK: Final = 1e-9
_ORDERS: Final = ("$gt", "$gte", "$lt", "$lte")


@attrs.frozen
class Interval:
    """The rows whose leaf at ``path`` lies in ``[low, high]`` (either end unbounded as ``None``) of one kind.

    ``low_open``, ``high_open``: the end itself is left out (a strict bound
    on strings shorter than ``TEXT_KEPT``, which the leaves hold whole).
    """

    path: str
    text: bool
    low: Any = None
    high: Any = None
    low_open: bool = False
    high_open: bool = False


@attrs.frozen
class RowProbe:
    """A condition naming the rows a filter may pass: ``kind`` is ``"gin"`` (``part`` a JSON path), ``"leaf"`` (an :class:`Interval`), ``"and"`` or ``"or"`` (``part`` a tuple of probes).

    ``whole``: the probe is of the leaf table alone, every condition of
    the filter went into it, and SQL judges each as the leaves do (:func:`_whole`), so
    the rows it names are the rows the SQL condition over the JSONB
    copies keeps (:meth:`seqs_sql` names them without reading the rows).
    """

    kind: str
    part: Any
    whole: bool = False

    def sql(self, p: Callable[[Any, str], str], session: str, prefix: str = "") -> str:
        """Return the condition over ``{prefix}doc`` and ``{prefix}seq``; ``p(value, cast)`` binds a parameter and returns its mark, in the order written."""
        if self.kind == "gin":
            return f"{prefix}doc @@ {p(self.part, 'jsonpath')}"
        if self.kind == "leaf":
            return _leaf_sql(self.part, p, session, prefix)
        joint = " AND " if self.kind == "and" else " OR "
        return joint.join(f"({part.sql(p, session, prefix)})" for part in self.part)

    def seqs_sql(self, p: Callable[[Any, str], str], session: str) -> str:
        """Return a query of the seqs this probe names, from the leaf table's indexes alone (a :attr:`whole` probe; a seq may come twice)."""
        if self.kind == "leaf":
            return _leaf_seqs(self.part, p, session)
        if self.kind == "gin":
            msg = "A probe of the GIN index names rows only through their JSONB copies."
            raise AssertionError(msg)
        joint = " INTERSECT ALL " if self.kind == "and" else " UNION ALL "
        return joint.join(f"({part.seqs_sql(p, session)})" for part in self.part)


def _leaf_sql(span: Interval, p: Callable[[Any, str], str], session: str, prefix: str) -> str:
    # Parameters bind in the order written: each fragment's mark is taken where it is written.
    # The session beside the seqs: the primary key's scan is bounded by both (by the seqs
    # alone it read the whole index, 3,900 buffers at 10,000 rows).
    return (
        f"{prefix}session_id = {p(session, 'text')}"
        f" AND {prefix}seq = ANY(ARRAY({_leaf_seqs(span, p, session)}))"
    )


def _leaf_seqs(span: Interval, p: Callable[[Any, str], str], session: str) -> str:
    """The seqs of the rows whose leaf lies in ``span``, and of those holding a value SQL cannot order on its way."""
    column, cast = ("txt", "text") if span.text else ("num", "float8")
    kept = "l.txt IS NOT NULL" if span.text else "l.txt IS NULL AND l.num IS NOT NULL"
    sql = (
        "SELECT l.seq FROM kvmemory_leaves AS l"
        f" WHERE l.session_id = {p(session, 'text')} AND l.path = {p(span.path, 'text')}"
        f" AND {kept}"
    )
    if span.low is not None:
        sql += f" AND l.{column} {'>' if span.low_open else '>='} {p(span.low, cast)}"
    if span.high is not None:
        sql += f" AND l.{column} {'<' if span.high_open else '<='} {p(span.high, cast)}"
    parts = span.path.split(".")
    ways = [".".join(parts[:end]) for end in range(1, len(parts) + 1)]
    # A second scan: the values SQL cannot order at the path or on its way (Python judges them).
    return (
        sql + " UNION ALL SELECT l.seq FROM kvmemory_leaves AS l"
        f" WHERE l.session_id = {p(session, 'text')} AND l.path = ANY({p(ways, 'text[]')})"
        " AND l.txt IS NULL AND l.num IS NULL"
    )


def row_probe(tree: FilterNode, *, gin: bool, leaves: bool) -> RowProbe | None:
    """Return the condition naming a superset of the rows that may pass ``tree`` from the indexes at hand, or ``None`` (every row must be read)."""
    if not gin and not leaves:
        return None
    if isinstance(tree, AnyOf):
        found = index_predicate(tree) if gin else None
        if found is not None:
            return RowProbe("gin", found)
        parts = [row_probe(part, gin=gin, leaves=leaves) for part in tree.parts]
        if not parts or any(part is None for part in parts):
            return None
        whole = all(part is not None and part.whole for part in parts)
        return RowProbe("or", tuple(parts), whole)
    if isinstance(tree, Condition):
        found = index_predicate(tree) if gin else None
        if found is not None:
            return RowProbe("gin", found)
        span = _interval([tree]) if leaves else None
        return None if span is None else RowProbe("leaf", span, _whole(span, [tree]))
    if not isinstance(tree, AllOf):
        return None
    conditions: list[Condition] = []
    others: list[FilterNode] = []
    _flatten(tree, conditions, others)
    probes: list[RowProbe] = []
    equal: list[FilterNode] = []
    groups: dict[tuple[str, bool], list[Condition]] = {}
    for condition in conditions:
        if gin and index_predicate(condition) is not None:
            equal.append(condition)
        elif leaves and _interval([condition]) is not None:
            groups.setdefault((condition.field, isinstance(condition.operand, str)), []).append(
                condition
            )
    if gin and (named := [*equal, *others]):
        found = index_predicate(AllOf(tuple(named)))
        if found is not None:
            probes.append(RowProbe("gin", found))
    # Whole while every condition goes into a probe of the leaves alone.
    whole = not probes and len(conditions) == sum(map(len, groups.values()))
    for other in others:
        if not gin or index_predicate(other) is None:
            probe = row_probe(other, gin=gin, leaves=leaves)
            if probe is not None:
                probes.append(probe)
            whole = whole and probe is not None and probe.whole
    for group in groups.values():
        span = _interval(group)
        if span is not None:
            probes.append(RowProbe("leaf", span, _whole(span, group)))
        whole = whole and span is not None and _whole(span, group)
    if not probes:
        return None
    if len(probes) == 1:  # whole only if no condition was left out of it
        return attrs.evolve(probes[0], whole=whole)
    return RowProbe("and", tuple(probes), whole)


def _whole(span: Interval, conditions: list[Condition]) -> bool:
    """Whether the leaves name the rows the SQL condition keeps for ``conditions`` (``span``), but for the widening both share.

    ``_sql.filters`` widens a number's bounds as the leaves do, and
    compares strings whole, as the leaves do strings shorter than
    ``TEXT_KEPT`` (a leaf holds a string's first ``TEXT_KEPT``
    characters: a longer bound ties with strings past it). It keeps only
    the ints of a ``range``, where the leaves name every number within
    half of it.
    """
    if span.text:
        return all(len(condition.operand) < TEXT_KEPT for condition in conditions)
    return all(condition.op != "range" for condition in conditions)


def _flatten(node: AllOf, conditions: list[Condition], others: list[FilterNode]) -> None:
    for part in node.parts:
        if isinstance(part, AllOf):
            _flatten(part, conditions, others)
        elif isinstance(part, Condition):
            conditions.append(part)
        else:
            others.append(part)


def _interval(conditions: list[Condition]) -> Interval | None:
    """The interval all of ``conditions`` (on one field, of one operand kind) lie in, or ``None`` where the leaves cannot name it."""
    path = conditions[0].field
    if not all(path.split(".")) or any(c in path for c in '"\\\x00'):
        return None  # as _sql.filters: a name SQL does not address
    low: Any = None
    high: Any = None
    low_open = high_open = text = False
    for condition in conditions:
        bounds = _bounds(condition)
        if bounds is None:
            return None
        text, below, above, strict = bounds
        if below is not None:
            if low is None or below > low:
                low, low_open = below, strict
            elif below == low:
                low_open = low_open or strict
        if above is not None:
            if high is None or above < high:
                high, high_open = above, strict
            elif above == high:
                high_open = high_open or strict
    return Interval(path, text, low, high, low_open, high_open)


def _bounds(node: Condition) -> tuple[bool, Any, Any, bool] | None:
    """``(text, low, high, strict)`` of a leaf that may pass ``node``, widened (``strict``: the bound itself cannot); ``None`` where the leaves cannot tell."""
    op, x = node.op, node.operand
    if op == "range":
        if not x:
            return None  # an empty range passes nothing; the scan says so without the leaves
        low, high = min(x[0], x[-1]), max(x[0], x[-1])
        if max(abs(low), abs(high)) >= _SAFE_INT:
            return None
        return False, low - 0.5, high + 0.5, False
    if op not in _ORDERS:
        return None
    lower = op in ("$gt", "$gte")
    if isinstance(x, str):
        if "\x00" in x:
            return None
        # A leaf keeps a string's first TEXT_KEPT characters: cutting keeps the order or ties.
        # A shorter bound is held whole: a leaf past it (before it) holds a string past it.
        cut = str(x)[:TEXT_KEPT]
        strict = op in ("$gt", "$lt") and len(x) < TEXT_KEPT
        return (True, cut, None, strict) if lower else (True, None, cut, strict)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    value = float(x) if abs(x) < _SAFE_INT or isinstance(x, float) else math.inf
    if not math.isfinite(value) or abs(value) >= 1e300:
        return None
    slack = abs(value) * _SLACK
    return (False, value - slack, None, False) if lower else (False, None, value + slack, False)
