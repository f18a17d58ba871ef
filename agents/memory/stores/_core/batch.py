"""Writes to one session, staged and applied in one transaction: :class:`WriteBatch`."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from typing_extensions import Self

from agents.memory._codec import OnUnencodable
from agents.memory._item import MemoryItem
from agents.memory.exceptions import StoreArgumentError
from agents.memory.stores._core.encoding import (
    SEQ_MAX,
    Row,
    RowUpdate,
    check_seq,
    encode_rows,
    rows_terms,
)
from agents.memory.stores._core.engine import open_session
from agents.memory.stores._core.terms import Terms

if TYPE_CHECKING:
    from agents.memory.stores._store import Store

__all__ = ["WriteBatch"]


class WriteBatch:
    """Writes to one session, staged by its calls and applied in one transaction when the ``with`` block ends.

    Each call checks and encodes at once, so a value the codec refuses or a
    bad argument raises before anything is written. On a clean exit one
    transaction applies the staged writes in this order: clear, deletes,
    updates, appends, then ``keep_last`` and ``expire``; leaving the block
    with an exception writes nothing. Get one from :meth:`Store.batch`.

    After the block, :attr:`appended` holds the seqs given to the appended
    items (in order), :attr:`updated` the seqs of the updated rows that
    existed, and :attr:`deleted` the seqs removed by ``delete``,
    ``keep_last`` and ``expire`` (not by ``clear``), increasing. Items staged
    with ``append(..., number_steps=True)`` that had no step are numbered in
    the transaction; :attr:`numbered` then holds them as written, in order.
    """

    def __init__(
        self, store: Store, session_id: str, step_key: str, on_unencodable: OnUnencodable
    ) -> None:
        self._store = store
        self.session_id = session_id
        self.step_key = step_key
        self._on_unencodable: OnUnencodable = on_unencodable
        self._clear = False
        self._delete: dict[int, None] = {}
        self._update: list[RowUpdate] = []
        self._append: list[Row] = []
        # The search terms of _append and _update, handed to the backend with the rows.
        self._append_terms: list[Terms] = []
        # Items to number in the transaction, by their position in _append.
        self._unnumbered: dict[int, MemoryItem] = {}
        self._update_terms: list[Terms] = []
        self._keep_last: int | None = None
        self._older_than: float | None = None
        self.appended: list[int] = []
        self.updated: list[int] = []
        self.deleted: list[int] = []
        self.numbered: list[MemoryItem] = []

    def append(self, items: Iterable[MemoryItem], *, number_steps: bool = False) -> None:
        """Stage appending ``items``, in order.

        Args:
            items: The items to append.
            number_steps: Give each item without a step field the session's
                next step number, read in the write transaction itself, so
                that two writers never give out the same number (see
                :func:`next_step` for the rule). The caller's items are not
                changed: the numbered copies are in :attr:`numbered` after the block.

        Raises:
            StoreArgumentError: if an element is not a ``MemoryItem``; nothing is staged.
            SerializationError: if a value cannot be encoded; nothing is staged.
        """
        batch = list(items)
        for position, item in enumerate(batch):
            if not isinstance(item, MemoryItem):
                msg = f"Element {position} is a {type(item).__name__}, not a MemoryItem; nothing was written to session {self.session_id!r}."
                raise StoreArgumentError(msg)
        rows = encode_rows(batch, self.step_key, self._on_unencodable)
        if number_steps:
            start = len(self._append)
            for offset, item in enumerate(batch):
                if self.step_key not in item:
                    self._unnumbered[start + offset] = item
        self._append_terms.extend(rows_terms(batch, rows, self._on_unencodable))
        self._append.extend(rows)

    def update(self, items: Mapping[int, MemoryItem]) -> None:
        """Stage replacing the stored fields of the rows ``items`` names by seq.

        Raises:
            StoreArgumentError: if a seq is not an int in the store's range.
            SerializationError: if a value cannot be encoded; nothing is staged.
        """
        seqs = [check_seq(seq, "seq") for seq in items]
        batch = list(items.values())
        rows = encode_rows(batch, self.step_key, self._on_unencodable)
        self._update_terms.extend(rows_terms(batch, rows, self._on_unencodable))
        self._update.extend(
            (seq, step, data) for seq, (step, _, data) in zip(seqs, rows, strict=True)
        )

    def delete(self, seqs: Iterable[int]) -> None:
        """Stage deleting the rows ``seqs`` names (seqs that do not exist are ignored).

        Raises:
            StoreArgumentError: if a seq is not an int in the store's range; nothing is staged.
        """
        checked = [check_seq(seq, "seq") for seq in seqs]
        self._delete.update(dict.fromkeys(checked))

    def clear(self) -> None:
        """Stage deleting every row of the session (applied before the other writes)."""
        self._clear = True
        self._delete.clear()
        self._update.clear()
        self._update_terms.clear()

    def keep_last(self, n: int) -> None:
        """Stage deleting all but the last ``n`` rows (applied after the appends).

        Raises:
            StoreArgumentError: if ``n`` is not an int >= 0.
        """
        if type(n) is not int or not 0 <= n <= SEQ_MAX:
            msg = f"keep_last() takes n >= 0 (an int), got {n!r}."
            raise StoreArgumentError(msg)
        self._keep_last = n

    def expire(self, older_than: dt.timedelta | float) -> None:
        """Stage deleting the rows written more than ``older_than`` ago (applied last).

        Raises:
            StoreArgumentError: if ``older_than`` is negative or not a duration.
        """
        if isinstance(older_than, dt.timedelta):
            seconds = older_than.total_seconds()
        elif type(older_than) in (int, float):
            try:
                seconds = float(older_than)
            except OverflowError:
                seconds = float("inf")
        else:
            msg = f"expire() takes older_than as a timedelta or seconds, got {older_than!r}."
            raise StoreArgumentError(msg)
        if not seconds >= 0:
            msg = f"expire() takes a non-negative age, got {older_than!r}."
            raise StoreArgumentError(msg)
        self._older_than = seconds

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is not None:
            return
        only_appends = not (
            self._clear
            or self._delete
            or self._update
            or self._keep_last is not None
            or self._older_than is not None
        )
        if only_appends and not self._append:
            return
        only_appends = only_appends and not self._unnumbered
        backend = self._store.backend
        with self._store.guarded("write to", self.session_id, write=True) as sid:
            if only_appends:
                appended = backend.append_rows(sid, self.step_key, self._append, self._append_terms)
                if appended is not None:
                    self.appended = appended
                    return
            with backend.transaction(sid) as tx:
                self._apply(tx, sid)

    def _apply(self, tx: Any, sid: str) -> None:
        """Apply the staged writes inside the backend's transaction ``tx``."""
        backend = self._store.backend
        if self._append:
            open_session(backend, tx, sid, self.step_key)
        elif backend.lock_session(tx, sid) is None:
            return
        deleted: list[int] = []
        if self._clear:
            backend.clear_rows(tx, sid)
            backend.drop_vectors(tx, sid)
        if self._delete:
            deleted += backend.delete_rows(tx, sid, list(self._delete))
        if self._update:
            self.updated = backend.update_rows(tx, sid, self._update, self._update_terms)
            if self.updated:
                # A vector belongs to the fields it was embedded from.
                backend.delete_vectors(tx, sid, self.updated)
        if self._unnumbered:
            self._number(*backend.last_step(tx, sid))
        if self._append:
            self.appended = backend.insert_rows(tx, sid, self._append, self._append_terms)
        if self._keep_last is not None:
            index = backend.row_index(tx, sid)
            old = [entry[0] for entry in index[: max(len(index) - self._keep_last, 0)]]
            deleted += backend.delete_rows(tx, sid, old) if old else []
        if self._older_than is not None:
            cutoff = time.time() - self._older_than
            index = backend.row_index(tx, sid)
            old = [entry[0] for entry in index if entry[2] < cutoff]
            deleted += backend.delete_rows(tx, sid, old) if old else []
        if deleted:
            backend.delete_vectors(tx, sid, deleted)
        self.deleted = sorted(deleted)

    def _number(self, count: int, last: str | None) -> None:
        """Number the staged items that have no step, following the session's ``count`` rows and ``last`` step text."""
        numbered: list[MemoryItem] = []
        for position, row in enumerate(self._append):
            item = self._unnumbered.get(position)
            if item is not None:
                step = next_step(count, last)
                item = type(item).from_mapping({self.step_key: step, **item.to_dict()})
                (row,) = encode_rows([item], self.step_key, self._on_unencodable)
                (terms,) = rows_terms([item], [row], self._on_unencodable)
                self._append[position] = row
                self._append_terms[position] = terms
                numbered.append(item)
            count, last = count + 1, row[0]
        self.numbered = numbered


def next_step(count: int, last: str | None) -> int:
    """Return the step number after a session of ``count`` rows whose last row's step text is ``last``.

    The rule: 1 for an empty session; the last row's step plus one when that
    step is a whole number; otherwise the row count plus one (a session whose
    last item has no step, or a text step such as ``"2a"``).
    """
    if count == 0:
        return 1
    if last is not None and last.lstrip("-").isdigit() and last.isascii():
        return int(last) + 1
    return count + 1
