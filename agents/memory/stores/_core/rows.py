"""The rows of one session held in RAM, with the step index a SQL store keeps in ``(session_id, step)``.

The in-process store and the JSONL store hold each session's rows in a dict
(seq -> row). :class:`RowTable` is that dict, plus a map from step text to
the seqs filed under it, kept up to date by every insert, update and
removal, so that a step filter reads the rows of its steps and not the
session; and a map from record key to seq (and back) for the rows filed
under a key, so that a record is found without reading the session; and
a log of the seqs set or removed, so that a reader keeping something per
row (:class:`~agents.memory.stores._core.filter_values.FilterValues`)
learns which rows changed since it last looked without comparing every
row (:meth:`RowTable.changed_since`); and the rows filed by the values
their items hold (:attr:`RowTable.value_index`), so that a filter's candidates
are named without reading the session.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from agents.memory.stores._core.value_index import ValueIndex

__all__ = ["RowTable", "StoredRow"]

StoredRow = tuple[str | None, float, bytes]
"""One row as RAM holds it: ``(step_text, created_unix_time, encoded_item)``."""


class RowTable(dict[int, StoredRow]):
    """``seq -> (step, created, data)`` in insertion order, indexed by step.

    Rows are set with ``table[seq] = row`` and removed with :meth:`discard`
    or :meth:`clear` (the other ways a ``dict`` changes are not used by the
    stores, and would bypass the index).
    """

    __slots__ = (
        "_by_step",
        "_changes",
        "_cleared",
        "_dropped",
        "_key_of",
        "_seq_of",
        "value_index",
    )

    def __init__(
        self,
        rows: Iterable[tuple[int, StoredRow]] = (),
        keys: Mapping[int, str] | None = None,
        *,
        index: ValueIndex | None = None,
    ) -> None:
        """Make a table of ``rows``, those of ``keys`` filed under their record keys.

        ``index`` is the value index of exactly these rows, taken over (a
        compaction's table: filing 10,000 rows again costs about 180 ms);
        the table it came from must not be changed after.
        """
        super().__init__()
        self._by_step: dict[str | None, dict[int, None]] = {}
        self._seq_of: dict[str, int] = {}
        self._key_of: dict[int, str] = {}
        # The seqs set or removed, in order; the first ``_dropped`` were forgotten, and
        # ``clear`` (at change ``_cleared``) changed every row.
        self._changes: list[int] = []
        self._dropped = 0
        self._cleared = 0
        # The rows of an index taken over are filed already: file nothing while they are set.
        self.value_index: ValueIndex = ValueIndex() if index is None else _FILED
        """The rows filed by the values their items hold, kept as rows are set and removed."""
        for seq, row in rows:
            self[seq] = row
        if index is not None:
            self.value_index = index
        for seq, key in (keys or {}).items():
            if seq in self:
                self.file_key(seq, key)

    def defer_filing(self) -> None:
        """File no row by value from now until :meth:`take_index`: the rows set meanwhile are those of an index to be taken (a JSONL log's value file)."""
        self.value_index = _FILED

    def take_index(self, index: ValueIndex) -> None:
        """Take ``index`` as the value index of exactly the rows held now (set since :meth:`defer_filing`); the rows set and removed after are filed and unfiled in it."""
        self.value_index = index

    def __setitem__(self, seq: int, row: StoredRow) -> None:
        old = self.get(seq)
        if old is not None and old[0] != row[0]:
            self._unfile(seq, old[0])
        if old is None:
            self.value_index.add(seq, row[2])
        elif old[2] is not row[2]:
            self.value_index.remove(seq, old[2])
            self.value_index.add(seq, row[2])
        super().__setitem__(seq, row)
        if old is None or old[0] != row[0]:
            self._by_step.setdefault(row[0], {})[seq] = None
        self._changed(seq)

    def discard(self, seq: int) -> bool:
        """Remove the row ``seq``; return whether it was there."""
        old = super().pop(seq, None)
        if old is None:
            return False
        self._unfile(seq, old[0])
        self.value_index.remove(seq, old[2])
        key = self._key_of.pop(seq, None)
        if key is not None:
            del self._seq_of[key]
        self._changed(seq)
        return True

    def clear(self) -> None:
        """Remove every row."""
        super().clear()
        self.value_index.clear()
        self._by_step.clear()
        self._seq_of.clear()
        self._key_of.clear()
        # A clear counts as a change of its own: a mark taken before it is told apart.
        self._dropped += len(self._changes) + 1
        self._changes.clear()
        self._cleared = self._dropped

    # -- changes ---------------------------------------------------------------------------

    @property
    def mark(self) -> int:
        """The count of changes so far: what :meth:`changed_since` takes to tell the rows changed after now."""
        return self._dropped + len(self._changes)

    def changed_since(self, mark: int) -> list[int] | None:
        """Return the seqs set or removed since :attr:`mark` was ``mark`` (with repeats), or ``None`` if the table cannot tell (cleared since, or too long ago).

        A seq returned may hold the same row as before (set again), or none
        (removed); a seq not returned holds the very row object it held.
        """
        if mark < self._cleared or mark < self._dropped or mark > self.mark:
            return None
        return self._changes[mark - self._dropped :]

    def _changed(self, seq: int) -> None:
        changes = self._changes
        changes.append(seq)
        if len(changes) > CHANGES_KEPT and len(changes) > 2 * len(self):
            half = len(changes) // 2
            del changes[:half]
            self._dropped += half

    # -- record keys -----------------------------------------------------------------------

    def file_key(self, seq: int, key: str) -> None:
        """File the row ``seq`` under the record key ``key`` (a row holding the key already loses it)."""
        held = self._seq_of.get(key)
        if held is not None:
            del self._key_of[held]
        self._seq_of[key] = seq
        self._key_of[seq] = key

    @property
    def keys_by_seq(self) -> dict[int, str]:
        """A new dict ``{seq: key}`` of the rows filed under a key."""
        return dict(self._key_of)

    def key_seqs(self, keys: Sequence[str]) -> dict[str, int]:
        """Return ``{key: seq}`` of the rows filed under ``keys``."""
        seq_of = self._seq_of
        return {key: seq_of[key] for key in keys if key in seq_of}

    def keyed(
        self, keys: Sequence[str] | None = None, prefix: str | None = None
    ) -> list[tuple[str, int, float, bytes]]:
        """Return ``(key, seq, created, data)`` of the keyed rows (under ``keys``, starting with ``prefix``)."""
        pairs = self._seq_of.items() if keys is None else self.key_seqs(keys).items()
        return [
            (key, seq, self[seq][1], self[seq][2])
            for key, seq in pairs
            if prefix is None or key.startswith(prefix)
        ]

    def record_keys(self, prefix: str | None = None) -> list[str]:
        """Return the record keys (those starting with ``prefix``), in any order."""
        if prefix is None:
            return list(self._seq_of)
        return [key for key in self._seq_of if key.startswith(prefix)]

    def of_steps(
        self, steps: Sequence[str], *, after: int | None = None
    ) -> list[tuple[int, bytes]]:
        """Return ``(seq, data)`` of the rows filed under ``steps`` with seq above ``after``, in seq order."""
        by_step = self._by_step
        low = -1 if after is None else after
        seqs = sorted({seq for step in steps for seq in by_step.get(step, ()) if seq > low})
        return [(seq, self[seq][2]) for seq in seqs]

    def _unfile(self, seq: int, step: str | None) -> None:
        filed = self._by_step.get(step)
        if filed is not None:
            filed.pop(seq, None)
            if not filed:
                del self._by_step[step]


class _Filed(ValueIndex):
    """The value index of a table whose rows are filed already (:class:`RowTable` taking over an index): files nothing."""

    def add(self, seq: int, data: bytes) -> None:
        """File nothing: the row is in the index taken over."""

    def remove(self, seq: int, data: bytes) -> None:
        """Unfile nothing."""


_FILED: Final = _Filed()

CHANGES_KEPT: Final = 4096
"""The changes a table remembers at least; past twice its rows, the older half is forgotten."""
