"""The checks of a store's search arguments, shared by its one-session and cross-session calls."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from agents.memory._text import check_k, checked_keys, checked_query
from agents.memory._vectors import EmbedParts, checked_weight
from agents.memory.exceptions import InvalidQueryError, StoreArgumentError

__all__ = ["checked_parts", "checked_vector_query"]

_DEFAULT_PARTS: Final = EmbedParts()


def checked_parts(parts: object) -> EmbedParts:
    """Return ``parts`` (``None``: the default ``EmbedParts()``), else raise :class:`StoreArgumentError`."""
    if parts is None:
        return _DEFAULT_PARTS
    if isinstance(parts, EmbedParts):
        return parts
    msg = f"parts must be an EmbedParts (see agents.memory.search.EmbedParts), got {parts!r}."
    raise StoreArgumentError(msg)


def checked_vector_query(
    call: str,
    query: str,
    k: int,
    keys: Iterable[str] | None,
    mode: str,
    hybrid_weight: float | None,
) -> tuple[str, tuple[str, ...] | None, float]:
    """Return the checked query text, fields and hybrid weight of a semantic or hybrid ``call``, else raise.

    Raises:
        InvalidQueryError: if the query, ``k``, the keys or ``mode`` is not
            one a search takes (the message names ``call``).
    """
    text = checked_query(query)
    check_k(k)
    fields = checked_keys(keys)
    if mode not in ("semantic", "hybrid"):
        msg = f"{call}() takes mode='keyword', 'semantic' or 'hybrid', got {mode!r}."
        raise InvalidQueryError(msg)
    return text, fields, checked_weight(hybrid_weight)
