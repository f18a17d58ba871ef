"""LangGraph's search filters in kvmemory's filter language, over the stored ``value`` field.

A LangGraph filter names fields of an item's value: ``{"color": "red"}``,
``{"score": {"$gt": 4.0}}``, ``{"user.name": "ann"}`` (a dotted key is a
path into nested dicts), ``{"meta": {"lang": "en"}}`` (a dict without
operators matches a dict holding at least those keys, nested the same way).
Each becomes a condition of :class:`agents.memory.search.Filter` on the
item's ``value`` field. The operators are LangGraph's (``$eq``, ``$ne``,
``$gt``, ``$gte``, ``$lt``, ``$lte``) and kvmemory's ``$in`` and ``$nin``;
``$and`` and ``$or`` combine whole filters. A NaN operand matches nothing
(``$ne``: everything), as NaN compares in LangGraph's stores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from agents.memory.exceptions import InvalidQueryError

__all__ = ["VALUE", "to_where"]

VALUE: Final = "value"
"""The item field that holds a LangGraph item's value."""

_OPERATORS: Final = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin"})
_NEVER: Final[dict[str, Any]] = {"$in": []}


def _operators(path: str, condition: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for op, operand in condition.items():
        if op not in _OPERATORS:
            msg = (
                f"Filter on {path!r} uses the unknown operator {op!r}; LangGraph filters take "
                "$eq, $ne, $gt, $gte, $lt and $lte (and kvmemory's $in and $nin)."
            )
            raise InvalidQueryError(msg)
        if isinstance(operand, float) and math.isnan(operand):
            # NaN equals nothing and is ordered with nothing: only $ne holds.
            out.append({path: {"$nin": []}} if op == "$ne" else {path: _NEVER})
        else:
            out.append({path: {op: operand}})
    return out


def _conditions(path: str, value: Any) -> list[dict[str, Any]]:
    if isinstance(value, Mapping) and any(
        type(key) is str and key.startswith("$") for key in value
    ):
        return _operators(path, value)
    if isinstance(value, Mapping) and value:
        out = []
        for key, inner in value.items():
            out.extend(_conditions(f"{path}.{key}", inner))
        return out
    if isinstance(value, float) and math.isnan(value):
        return [{path: _NEVER}]
    if isinstance(value, tuple):
        value = list(value)
    return [{path: value}]


def to_where(filter: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Return kvmemory's ``where`` for a LangGraph search ``filter`` (``None`` for none).

    Raises:
        InvalidQueryError: for a filter that is not a mapping, a key that is
            not a string, or an unknown operator.
    """
    if not filter:
        return None
    if not isinstance(filter, Mapping):
        msg = f"A LangGraph filter is a dict such as {{'color': 'red'}}, got {filter!r}."
        raise InvalidQueryError(msg)
    parts: list[dict[str, Any]] = []
    for key, value in filter.items():
        if type(key) is not str:
            msg = f"A LangGraph filter takes field names (strings) as keys, got {key!r}."
            raise InvalidQueryError(msg)
        if key in ("$and", "$or"):
            if not isinstance(value, (list, tuple)) or not value:
                msg = f"{key!r} takes a non-empty list of filters, got {value!r}."
                raise InvalidQueryError(msg)
            inner = [to_where(part) or {} for part in value]
            parts.append({key: inner})
        else:
            parts.extend(_conditions(f"{VALUE}.{key}", value))
    return parts[0] if len(parts) == 1 else {"$and": parts}
