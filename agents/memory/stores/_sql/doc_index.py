"""A search filter as a JSON path predicate that PostgreSQL's GIN index over the JSONB copy answers.

The index (``jsonb_path_ops``, schema version 11) answers ``doc @@
jsonpath`` for equalities of a path with a constant, joined by ``&&`` and
``||``, in one scan of the index. :func:`index_predicate` writes, for a
filter whose conditions ask a field for one of some values, a predicate
that holds for every row's JSONB copy where the filter may hold, so that
SQL reads only the rows the index names (and the rows without a copy)
where it read every row of the session. Like the rest of
``_sql.filters`` it is sound, never exact: a row it leaves out cannot
pass; the rows it names are still judged by the SQL condition, then by
:class:`~agents.memory.search.Filter` in Python. A row may pass where:

* the field (or, for a dotted name, the field of that whole name or the
  path into nested objects) holds a JSON value equal to the operand as
  the filter compares (JSON paths compare numbers by value, exactly, as
  Python compares an ``int`` with a ``float`` below 2**53: ``1``, ``1.0``
  and ``1e0`` are one value; ``true`` is not ``1`` for either);
* it holds a value the codec tagged (``{"$kv": "<tag>", ...}``: any tag,
  since some decode to values equal to a string or a number: an enum, a
  numpy scalar), or a dotted name's path passes through one (a dict with
  non-string keys, which Python follows);
* the item is the codec's item wrapper, whose fields sit under ``"fields"``.

Filters the index cannot answer exactly are left to a scan (``None``):
ordering (``$gt``, ranges longer than :data:`_RANGE_PROBED`),
``$ne``/``$nin``, numbers at or beyond 2**53 or not finite, values of
other kinds (lists, dicts, dates), function filters. In ``$and`` the
conditions it can answer narrow the rows alone. From schema version 13 the
leaf table names the ordering ones (``_sql.probes``, which joins both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

import orjson

from agents.memory._codec import TAG, TAGS
from agents.memory._filter import AllOf, AnyOf, Condition, FilterNode

__all__ = ["index_predicate"]

_RANGE_PROBED: Final = 64
"""The longest ``range`` condition written as its ints (each one an entry of the index's scan)."""
_SAFE_INT: Final = 2**53
_TAG_TEXTS: Final = tuple(orjson.dumps(tag).decode() for tag in sorted(TAGS))
_WRAPPER: Final = '"fields"'
"""The key under which the codec's item wrapper holds the item's fields."""


def index_predicate(tree: FilterNode) -> str | None:
    """Return a JSON path predicate that holds for a row's JSONB copy wherever ``tree`` may hold, or ``None`` when the index cannot narrow it."""
    if isinstance(tree, AllOf):
        parts = [sql for sql in map(index_predicate, tree.parts) if sql is not None]
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else " && ".join(f"({part})" for part in parts)
    if isinstance(tree, AnyOf):
        found = [index_predicate(part) for part in tree.parts]
        if not found or any(part is None for part in found):
            return None
        return " || ".join(f"({part})" for part in found if part is not None)
    if isinstance(tree, Condition):
        return _condition(tree)
    return None


def _condition(node: Condition) -> str | None:
    if node.op == "$eq":
        values: Sequence[Any] = [node.operand]
    elif node.op == "$in":
        values = node.operand
    elif node.op == "range" and len(node.operand) <= _RANGE_PROBED:
        values = list(node.operand)
    else:
        return None
    name = node.field
    if not all(name.split(".")) or "\x00" in name:
        return None  # an empty dotted part, or a name no JSON path can hold
    literals: list[str] = []
    for value in values:
        literal = _literal(value)
        if literal is None:
            return None
        if literal:
            literals.append(literal)
    parts = name.split(".")
    paths = [[name], parts] if len(parts) > 1 else [parts]
    clauses = [f"{_path(path)} == {literal}" for path in paths for literal in literals]
    # A value the codec tagged there, or on a dotted name's way (Python follows a tagged dict).
    tagged = [*paths, *(parts[:end] for end in range(1, len(parts)))]
    clauses += [f"{_path([*path, TAG])} == {tag}" for path in tagged for tag in _TAG_TEXTS]
    if not clauses:
        return "false"
    wrapped = [clause.replace("$", f"$.{_WRAPPER}", 1) for clause in clauses]
    return " || ".join(clauses + wrapped)


def _path(keys: Sequence[str]) -> str:
    return "$" + "".join("." + orjson.dumps(key).decode() for key in keys)


def _literal(value: Any) -> str | None:
    """The operand as a JSON path literal; ``""`` where no JSON value equals it; ``None`` where the index cannot compare it exactly."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        number = int(value) if isinstance(value, int) else float(value)
        if not math.isfinite(number) or abs(number) >= _SAFE_INT:
            return None
        return repr(number)
    if isinstance(value, str):
        # No JSONB string holds NUL: the rows holding one have no copy, and are read anyway.
        return "" if "\x00" in value else orjson.dumps(str(value)).decode()
    return None
