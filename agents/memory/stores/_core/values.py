"""The value objects store calls return: session counts and info, hits, the vector model."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from agents.memory import _codec
from agents.memory._item import MemoryItem
from agents.memory.exceptions import CorruptSessionError, CorruptStoreError
from agents.memory.stores._core.encoding import SessionRow

__all__ = ["SessionHit", "SessionInfo", "SessionSummary", "StoreHit", "VectorModel", "session_info"]


@attrs.frozen
class SessionSummary:
    """Counts of a session, as ``kvmemory stats`` prints them (see :meth:`Store.summary`)."""

    items: int
    """How many items the session holds."""
    steps: int
    """How many distinct steps its items name (items without a step are not counted)."""
    first_step: Any
    """The step of the first item that has one, or ``None``."""
    last_step: Any
    """The last step to appear for the first time, or ``None``."""
    cost: float
    """The sum of the numeric (``int`` or ``float``, not ``bool``) values of the cost field."""
    fields: dict[str, int]
    """How many items hold each field, most common first (ties in order of first appearance)."""

    @classmethod
    def of(
        cls,
        pages: Iterable[Sequence[MemoryItem]],
        *,
        step_key: str = "step",
        cost_key: str = "cost",
    ) -> SessionSummary:
        """Count a session from its items, given in order in pages (holding one page at a time).

        Args:
            pages: The items, in pages (lists) of any size; an iterator is read once.
            step_key: The field that names an item's step.
            cost_key: The numeric field summed as cost.
        """
        items = 0
        cost = 0.0
        fields: Counter[str] = Counter()
        steps: dict[Any, None] = {}
        unhashable: list[Any] = []
        for page in pages:
            items += len(page)
            for item in page:
                fields.update(item.keys())
                value = item.get_value(cost_key)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    cost += value
                if step_key not in item:
                    continue
                step = item[step_key]
                try:
                    steps.setdefault(step, None)
                except TypeError:  # a list or dict step: kept in order, compared by value
                    if step not in unhashable:
                        unhashable.append(step)
        order = [*steps, *unhashable]
        return cls(
            items=items,
            steps=len(order),
            first_step=order[0] if order else None,
            last_step=order[-1] if order else None,
            cost=cost,
            fields=dict(fields.most_common()),
        )


@attrs.frozen
class VectorModel:
    """The embedding model a session's stored vectors came from (see :meth:`Store.vector_model`)."""

    name: str
    """The embedder's ``name``."""
    dimension: int
    """The length of each vector."""


@attrs.frozen
class StoreHit:
    """One item found by :meth:`Store.search`: its seq, the item and its score (BM25, cosine or the hybrid blend)."""

    seq: int
    item: MemoryItem
    score: float


@attrs.frozen
class SessionHit:
    """One item found by :meth:`Store.search_sessions`: its session, its seq there, the item and its score.

    Attributes:
        session_id: The session that holds the item.
        seq: The item's seq in that session.
        item: The item.
        score: BM25 (with the statistics of every session searched), cosine,
            or the hybrid blend.
    """

    session_id: str
    seq: int
    item: MemoryItem
    score: float


@attrs.frozen
class SessionInfo:
    """What a store knows about one session, apart from its items.

    Attributes:
        session_id: The session's id.
        step_key: The field that names an item's step in this session.
        metadata: The free-form data saved with :meth:`Store.set_metadata`
            (a fresh dict, decoded through the codec).
        created: When the session was created (UTC).
    """

    session_id: str
    step_key: str
    metadata: dict[str, Any]
    created: dt.datetime


def session_info(session_id: str, row: SessionRow, store: str) -> SessionInfo:
    """Decode a backend's session row into a :class:`SessionInfo`.

    Args:
        session_id: The session's id.
        row: Its ``(step_key, created, metadata)``.
        store: The store's URL, for messages.

    Raises:
        CorruptStoreError: if the row holds the wrong types or undecodable metadata.
    """
    step_key, created, data = row
    source = f"the metadata of session {session_id!r} of {store}"
    try:
        if type(step_key) is not str or type(created) not in (int, float):
            msg = f"{source}: the session row holds step key {step_key!r} and created {created!r}, expected text and a number"
            raise CorruptSessionError(msg)
        metadata = _codec.decode_value(_codec.loads(data, source=source))
        if type(metadata) is not dict:
            msg = f"{source} is a JSON {type(metadata).__name__}, expected an object"
            raise CorruptSessionError(msg)
        when = dt.datetime.fromtimestamp(created, dt.timezone.utc)
    except (CorruptSessionError, OverflowError, ValueError, OSError, TypeError) as exc:
        msg = f"Cannot read {source}: {exc}; the store is damaged."
        raise CorruptStoreError(msg) from exc
    return SessionInfo(session_id, step_key, metadata, when)
