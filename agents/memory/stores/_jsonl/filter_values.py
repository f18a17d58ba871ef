"""The values of filtered fields of each session log, kept by one handle so that a filter is judged without decoding items.

A JSONL log keeps no column of any field, so telling which items pass a
search filter (``where={"agent": "reviewer"}``) means decoding them. A
filtered keyword query used to walk its ranking and decode its candidates
one by one until ``k`` passed: about 600 items for a filter that 1% pass,
six to eight times the unfiltered query. :class:`FilterValues` decodes
every live item once for the fields a filter reads, keeps each item's
values of them (``value_at``'s, ``NOTHING`` where it holds none), and from
then on judges any filter over those fields from the kept values, with the
comparisons :class:`~agents.memory.search.Filter` compiles
(:func:`~agents.memory._filter.node_test`): the same items pass.

The values are this handle's memory only, never written: each is kept with
the record bytes it was read from, the very object the log view holds. An
item appended, changed or deleted (by this handle, another handle or
another process), a log cleared, compacted or written again, each leaves
the view holding other objects (or none) for those seqs, and only those
items are decoded again when the view has moved since the values were
last brought up to date; the rest are known unchanged, object for object.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Final

from agents.memory._filter import (
    AllOf,
    AnyOf,
    Condition,
    FilterNode,
    node_fields,
    node_test,
    value_at,
)
from agents.memory.stores._core.encoding import decode_pairs
from agents.memory.stores._jsonl.log import SessionLog

__all__ = ["FilterValues"]


class _Column:
    """One field's kept values: each seq's, and the seqs of each distinct value (so that a condition tests each value once)."""

    def __init__(self) -> None:
        self.values: dict[int, Any] = {}
        self.groups: dict[tuple[type, Any], tuple[Any, set[int]]] = {}
        self.unhashable: set[int] = set()

    def put(self, seq: int, value: Any) -> None:
        """Keep ``value`` for ``seq`` (in place of the one kept before, if any)."""
        self.drop(seq)
        self.values[seq] = value
        try:
            key = (type(value), value)  # 1, 1.0 and True stay apart: filters tell their kinds apart
            group = self.groups.get(key)
        except TypeError:  # a list, a dict: tested one by one
            self.unhashable.add(seq)
            return
        if group is None:
            self.groups[key] = (value, {seq})
        else:
            group[1].add(seq)

    def drop(self, seq: int) -> None:
        """Forget the value kept for ``seq``, if any."""
        value = self.values.pop(seq, _MISSING)
        if value is _MISSING:
            return
        if seq in self.unhashable:
            self.unhashable.discard(seq)
            return
        key = (type(value), value)
        group = self.groups.get(key)
        if group is not None:
            group[1].discard(seq)
            if not group[1]:
                del self.groups[key]

    def passing(self, test: Callable[[Any], bool]) -> set[int]:
        """Return the seqs whose value passes ``test``."""
        out: set[int] = set()
        for value, seqs in self.groups.values():
            if test(value):
                out |= seqs
        values = self.values
        out.update(seq for seq in self.unhashable if test(values[seq]))
        return out


_MISSING: Final = object()


class _Values:
    """One session's kept values: the log view they match, each seq's record bytes, the columns, and the filters judged since they last changed."""

    def __init__(self, log: SessionLog) -> None:
        self.log = log
        self.offset = -1
        self.size = -1
        self.data: dict[int, bytes] = {}
        self.fields: dict[str, _Column] = {}
        self.judged: dict[Hashable, set[int]] = {}

    def passing(self, node: FilterNode) -> set[int]:
        """Return the live seqs whose items pass ``node`` (a tree of conditions on kept fields), kept until a value changes."""
        key = _node_key(node)
        try:
            found = self.judged.get(key)
        except TypeError:  # an operand that cannot be hashed (a dict to be equal to): judged again
            return self._judge(node)
        if found is None:
            found = self.judged[key] = self._judge(node)
        return found

    def _judge(self, node: FilterNode) -> set[int]:
        if isinstance(node, Condition):
            test = node_test(node)
            assert test is not None  # a condition is no function of the item
            field = node.field
            return self.fields[field].passing(lambda value: test({field: value}))
        assert isinstance(node, (AllOf, AnyOf))  # a function of the item is never kept
        if not node.parts:
            return set(self.data)
        parts = [self.passing(part) for part in node.parts]
        if isinstance(node, AllOf):
            return set.intersection(*sorted(parts, key=len))
        return set.union(*parts)


class FilterValues:
    """This handle's values of filtered fields, per session, each kept current with the session's log view.

    Every method expects the caller to hold the store's lock (shared at
    least) and the log view to be current.
    """

    def __init__(self) -> None:
        self._sessions: dict[str, _Values] = {}

    def passing(
        self,
        session_id: str,
        log: SessionLog,
        tree: FilterNode,
        source: str,
        seqs: Sequence[int] | None = None,
    ) -> set[int] | None:
        """Return the live seqs (among ``seqs``, if given) whose items pass ``tree``; ``None`` if only the item can tell (a function of it).

        The set returned for all seqs is the one kept: the caller does not change it.

        Raises:
            CorruptStoreError: if an item of the log cannot be decoded.
        """
        fields = node_fields(tree)
        if fields is None:
            return None
        kept = self._current(session_id, log, sorted(fields), source)
        found = kept.passing(tree)
        if seqs is None:
            return found
        return {seq for seq in seqs if seq in found}

    def _current(
        self, session_id: str, log: SessionLog, fields: Sequence[str], source: str
    ) -> _Values:
        """Return the session's kept values, with ``fields``, every live item's, decoding only the items not known unchanged."""
        kept = self._sessions.get(session_id)
        if kept is None:
            kept = self._sessions[session_id] = _Values(log)
        rows = log.rows
        new = [field for field in fields if field not in kept.fields]
        # A view read afresh (another log, or the same one read again) holds other objects.
        moved = kept.log is not log or kept.offset != log.offset or kept.size != len(rows)
        stale: list[tuple[int, bytes]] = []
        if new:  # every item read again, for every field kept
            kept.fields = {field: _Column() for field in [*kept.fields, *new]}
            kept.data.clear()
            kept.judged.clear()
            stale = [(seq, row[2]) for seq, row in rows.items()]
        elif moved:
            data = kept.data
            stale = [(seq, row[2]) for seq, row in rows.items() if data.get(seq) is not row[2]]
            if len(data) + len(stale) != len(
                rows
            ):  # some seqs deleted (or changed): forget the deleted
                kept.judged.clear()
                for seq in [seq for seq in data if seq not in rows]:
                    del data[seq]
                    for column in kept.fields.values():
                        column.drop(seq)
        if stale:
            kept.judged.clear()
            columns = list(kept.fields.items())
            for seq, item in decode_pairs(stale, source, "base"):
                for field, column in columns:
                    column.put(seq, value_at(item, field))
            kept.data.update(stale)
        kept.log, kept.offset, kept.size = log, log.offset, len(rows)
        return kept

    def forget(self, session_id: str) -> None:
        """Drop the kept values of a session."""
        self._sessions.pop(session_id, None)

    def clear(self) -> None:
        """Drop every session's kept values."""
        self._sessions.clear()


def _node_key(node: FilterNode) -> Hashable:
    """Return what tells one filter from another: its operands with their types (``1``, ``1.0`` and ``True`` filter apart)."""
    if isinstance(node, Condition):
        operand = node.operand
        if node.op in ("$in", "$nin"):
            return (node.field, node.op, tuple((type(one), one) for one in operand))
        return (node.field, node.op, type(operand), operand)
    assert isinstance(node, (AllOf, AnyOf))  # a function of the item is never kept
    return (type(node).__name__, tuple(_node_key(part) for part in node.parts))
