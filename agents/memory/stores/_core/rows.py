"""The rows of one session held in RAM, with the step index a SQL store keeps in ``(session_id, step)``.

The in-process store and the JSONL store hold each session's rows in a dict
(seq -> row). :class:`RowTable` is that dict, plus a map from step text to
the seqs filed under it, kept up to date by every insert, update and
removal, so that a step filter reads the rows of its steps and not the
session.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["RowTable", "StoredRow"]

StoredRow = tuple[str | None, float, bytes]
"""One row as RAM holds it: ``(step_text, created_unix_time, encoded_item)``."""


class RowTable(dict[int, StoredRow]):
    """``seq -> (step, created, data)`` in insertion order, indexed by step.

    Rows are set with ``table[seq] = row`` and removed with :meth:`discard`
    or :meth:`clear` (the other ways a ``dict`` changes are not used by the
    stores, and would bypass the index).
    """

    __slots__ = ("_by_step",)

    def __init__(self, rows: Iterable[tuple[int, StoredRow]] = ()) -> None:
        super().__init__()
        self._by_step: dict[str | None, dict[int, None]] = {}
        for seq, row in rows:
            self[seq] = row

    def __setitem__(self, seq: int, row: StoredRow) -> None:
        old = self.get(seq)
        if old is not None and old[0] != row[0]:
            self._unfile(seq, old[0])
        super().__setitem__(seq, row)
        if old is None or old[0] != row[0]:
            self._by_step.setdefault(row[0], {})[seq] = None

    def discard(self, seq: int) -> bool:
        """Remove the row ``seq``; return whether it was there."""
        old = super().pop(seq, None)
        if old is None:
            return False
        self._unfile(seq, old[0])
        return True

    def clear(self) -> None:
        """Remove every row."""
        super().clear()
        self._by_step.clear()

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
