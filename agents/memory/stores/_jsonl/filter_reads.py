"""The filter reads of a JSONL store: judged from the log's kept values, or, while a handle holds no view of the log, from the rows it read by their offsets.

:class:`LogFilterReads` is the part of
:class:`~agents.memory.stores._jsonl.backend.LogBackend` that answers which
rows may pass a search filter (``Backend.filter_candidates``,
``filter_among``, ``filter_among_rows``). A handle that has read a session's
log whole judges every row from the values of the filtered fields it keeps
(:class:`~agents.memory.stores._core.filter_values.FilterValues`).

A fresh handle answers a semantic or hybrid query from the vector file and
the keyword file beside the log, current with it, and reads the hits by
their record offsets (:func:`~agents.memory.stores._jsonl.keywords.rows_at`).
A filtered semantic query (``Backend.walks_filtered``) walks its ranking
best first, asking which rows of each slice may pass
(``filter_among_rows``): the rows not read yet are read by their offsets
and filed by value
(:class:`~agents.memory.stores._jsonl.offset_values.OffsetValues`), those
filed before and known to fail are skipped unread, and the answer is judged
from the values filed, so the log is not read whole (at 100,000 steps a
filter keeping 1% of the items reads about a thousand rows: 23-24 ms of CPU
where reading the log took 2.5 s). A hybrid query asks first whether few
rows pass (``filter_few``, to rank only those): a sample of :data:`SAMPLE`
rows read by offset answers where clearly many do (its walk is then judged
by offset as well); otherwise, and for ``filter_candidates``, which rows of
the whole session pass cannot be told without reading every row, and the
log is read whole. Reading a row by its offset and filing it costs about
what reading it in the whole log does: once one in :data:`WHOLE_AT` of the
session's rows (at least :data:`WHOLE_FLOOR`) have been read by offset at
one version of the log, or a slice would pass that, the log is read whole
and its kept values judge the filters from then on.

Where the session has a value file (``<session_id>.values``,
:mod:`~agents.memory.stores._jsonl.value_file`, saved by a writable handle
that read the log whole for a filter), ``filter_few`` and
``filter_candidates`` judge the filter from the file instead
(:meth:`LogFilterReads._from_value_file`): the file's rows that may pass,
less those the records after it touched, plus those of them that may pass
read by offset. The log is not read: at 100,000 steps a hybrid query with a
filter keeping 1% costs 70-75 ms of CPU first, where reading the log took
3.2-3.3 s. A semantic query then ranks only the rows the file names where
few pass, rather than walking (:meth:`LogFilterReads.walks_filtered`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from agents.memory._filter import FilterNode
from agents.memory.stores._core.filter_values import FEW, FilterValues
from agents.memory.stores._core.rows import RowTable
from agents.memory.stores._jsonl import side_file
from agents.memory.stores._jsonl.keyword_index import KeywordIndex
from agents.memory.stores._jsonl.keywords import SessionKeywords, read_range, rows_at
from agents.memory.stores._jsonl.log import SessionLog
from agents.memory.stores._jsonl.offset_values import OffsetValues
from agents.memory.stores._jsonl.value_file import SessionValueFiles, touched
from agents.memory.stores._jsonl.vector_backend import LogVectorReads
from agents.memory.stores._jsonl.vector_file import VectorView

__all__ = [
    "JUDGED_PER_READ",
    "MARGIN",
    "SAMPLE",
    "SAMPLED_PART",
    "WHOLE_AT",
    "WHOLE_FLOOR",
    "LogFilterReads",
]

WHOLE_AT: Final = 8
"""Once one in this many of a session's rows have been read by their offsets (at one version of its log), filters are judged from the log read whole."""

SAMPLE: Final = 1024
"""Rows read by their offsets to tell whether few of a session's rows pass a filter (``filter_few``)."""

MARGIN: Final = 1.25
"""A filter judged to let pass this many times the rows ``filter_few`` asks about, in the sample, has many pass."""

WHOLE_FLOOR: Final = 4096
"""...but not before this many have been: a small session is read by offset throughout."""

SAMPLED_PART: Final = 1 << 20
"""Bytes of a value file's parts a filter names, not read yet, past which a sample of rows first tells whether many pass (``walks_filtered``)."""

JUDGED_PER_READ: Final = 8
"""A walk that asks which of this many rows may pass (``filter_among_rows``), one in ``FEW`` at most passing, costs about what reading one row does.

What a warm filtered semantic walk costs more than ranking only the rows
that pass (every cosine ranked, the slices judged from the values filed),
by the rows it asks about: at 100,000 steps a filter keeping 0.1% asks
about some 4,200 rows a query and costs 11-13 ms more, a row read (in the
log read whole) about 25 us. Once a handle's walks of rare filters, with
the rows read by offset, have cost what reading the log whole does
(:meth:`LogFilterReads._by_offset`), the log is read whole and the next
queries rank only the rows that pass: a handle that queries on pays at
most about twice what the better of the two would have. A slice more than
one in ``FEW`` of whose rows pass is not counted: a handle that read the
log walks such a filter too.
"""

Offsets = VectorView | KeywordIndex
"""The record offsets of a log's live rows, current with it: a vector file's or a keyword file's."""


class LogFilterReads(LogVectorReads):
    """The filter reads of a JSONL backend; the subclass sets ``_keywords``, ``_values``, ``_read_values`` and ``_value_files`` (and those of :class:`LogVectorReads`)."""

    _keywords: SessionKeywords
    _value_files: SessionValueFiles
    read_only: bool
    _values: FilterValues
    _read_values: OffsetValues

    def filter_candidates(self, session_id: str, tree: FilterNode) -> set[int] | None:
        """Return the rows that may pass ``tree``, judged from the log's kept values (the log read whole, if it was not)."""
        with self._files.locked(exclusive=False):
            filed = self._from_value_file(session_id, tree)
            if filed is not None:
                return filed
            log = self._logs.current(session_id)
            if log is None:
                return set()
            found = self._passing(session_id, log, tree)
            return None if found is None else set(found)  # the kept set stays as it is

    def filter_few(self, session_id: str, tree: FilterNode, most: int) -> set[int] | None:
        """Return the rows that may pass ``tree`` where ``most`` at most may, judged from the log's kept values (the log read whole, if it was not): a hybrid query that ranks only them needs every row judged.

        While this handle judges rows by their offsets, a sample of
        :data:`SAMPLE` rows spread over the vector file's is read and judged
        first: where clearly more than ``most`` in the session's would pass
        at its rate (:data:`MARGIN` times), ``None`` without reading the log.
        """
        with self._files.locked(exclusive=False):
            filed = self._from_value_file(session_id, tree)
            if filed is not None:
                return None if len(filed) > most else filed
            if self._many_in_sample(session_id, tree, most):
                return None  # many pass: the query walks its ranking
            log = self._logs.current(session_id)
            if log is None:
                return set()
            found = self._passing(session_id, log, tree)
            return None if found is None or len(found) > most else set(found)

    def filter_among(
        self, session_id: str, tree: FilterNode, seqs: Sequence[int]
    ) -> set[int] | None:
        with self._files.locked(exclusive=False):
            offsets = self._by_offset(session_id, len(seqs))
            if offsets is not None:
                judged = self._judged_by_offset(session_id, offsets, tree, seqs)
                if judged is not None:
                    return {seq for seq, _ in judged}
            log = self._logs.current(session_id)
            if log is None:
                return set()
            return self._passing(session_id, log, tree, seqs)

    def filter_among_rows(
        self, session_id: str, tree: FilterNode, seqs: Sequence[int]
    ) -> list[tuple[int, bytes]] | None:
        with self._files.locked(exclusive=False):
            offsets = self._by_offset(session_id, len(seqs))
            if offsets is not None:
                judged = self._judged_by_offset(session_id, offsets, tree, seqs)
                if judged is not None:
                    if len(judged) * FEW <= len(seqs):  # a rare filter: the walk goes deep
                        version = (offsets.header, offsets.offset)
                        self._read_values.judge(session_id, version, len(seqs))
                    return judged
            log = self._logs.current(session_id)
            if log is None:
                return []
            may = self._passing(session_id, log, tree, seqs)
            if may is None:
                return None
            return [(seq, log.rows[seq][2]) for seq in sorted(may)]

    def _by_offset(self, session_id: str, more: int = 0) -> Offsets | None:
        """Return the record offsets filters are judged by (:meth:`_offsets`), unless this handle has read (with ``more`` rows) as many rows by them as make reading the log whole cheaper, or its walks have cost, with those rows, what reading it does (:data:`JUDGED_PER_READ`); the caller holds the lock."""
        offsets = self._offsets(session_id)
        if offsets is None:
            return None
        version = (offsets.header, offsets.offset)
        spent = self._read_values.spent(session_id, version)
        if spent + more >= _bound(offsets):
            return None
        walked = self._read_values.judged(session_id, version) // JUDGED_PER_READ
        return offsets if spent + walked < max(WHOLE_FLOOR, offsets.count) else None

    def _from_value_file(self, session_id: str, tree: FilterNode) -> set[int] | None:
        """Return the rows that may pass ``tree`` judged from the session's value file while this handle judges rows by their offsets (:meth:`_by_offset`), the log not read; ``None`` where the file does not answer.

        The rows the records after the file's offset add, change or delete
        (:func:`touched`) are judged from their current bytes, read by
        their offsets; the file is not used where those records are more
        than one in :data:`WHOLE_AT` of the log's bytes (the log is read
        whole instead, and the file saved again). The caller holds the lock.
        """
        offsets = self._by_offset(session_id)
        if offsets is None:
            return None
        # Asked again at this version of the log (a warm query), answered from memory.
        return self._value_files.judged_filters(session_id).judged(
            session_id,
            tree,
            (offsets.header, offsets.offset),
            lambda: self._filed_passing(session_id, tree, offsets),
        )

    def _filed_passing(
        self, session_id: str, tree: FilterNode, offsets: Offsets
    ) -> set[int] | None:
        """Return :meth:`_from_value_file`'s answer, judged afresh."""
        path = self._files.log_path(session_id)
        judged = self._value_files.judge(session_id, tree, path, offsets.header, offsets.offset)
        if judged is None:
            return None
        may, covered = judged
        if covered < offsets.offset:
            if (offsets.offset - covered) * WHOLE_AT > offsets.offset:
                return None
            changed = touched(read_range(path, covered, offsets.offset))
            if changed is None:
                return None
            if changed:
                may.difference_update(changed)
                again = self._judged_by_offset(
                    session_id, offsets, tree, sorted(changed), data=False
                )
                if again is None:
                    return None
                may.update(seq for seq, _ in again)
        return may

    def _many_in_sample(self, session_id: str, tree: FilterNode, most: int) -> bool:
        """Return whether, while this handle judges rows by their offsets, a sample of :data:`SAMPLE` rows spread over the vector file's says clearly more than ``most`` of the session's would pass ``tree`` at its rate (:data:`MARGIN` times); the caller holds the lock."""
        offsets = self._by_offset(session_id, SAMPLE)
        if not isinstance(offsets, VectorView) or not offsets.count:
            return False
        sample = offsets.spread(SAMPLE)
        judged = self._judged_by_offset(session_id, offsets, tree, sample, data=False)
        return judged is not None and len(judged) * offsets.count > MARGIN * most * len(sample)

    def walks_filtered(self, session_id: str, tree: FilterNode, most: int) -> bool:
        """Return whether a filtered semantic query should walk its ranking rather than ask ``filter_few(session_id, tree, most)``: this handle judges rows by their offsets (:meth:`_by_offset`) and the session's value file does not tell cheaply that ``most`` at most pass.

        Without a value file current with the log (and on a read-only
        handle, which never asks ``filter_few``), asking which rows pass
        would read the log whole: the query walks. With one
        (:meth:`_from_value_file`), the file's parts that ``tree`` names are
        read and the query walks where more than ``most`` pass (at 100,000
        steps a filter no row passes: 7 ms of CPU, where the walk read an
        eighth of the rows by offset and then the log, 3.5-3.7 s); a part
        larger than :data:`SAMPLED_PART` (a field of many distinct values:
        100,000 floats cost 50-75 ms to read) is read only where the sample
        of rows (:meth:`_many_in_sample`) does not already say many pass.
        """
        with self._files.locked(exclusive=False):
            offsets = self._by_offset(session_id)
            if offsets is None:
                return False
            if self.read_only:
                return True  # a read-only search asks no filter_few: it walks
            path = self._files.log_path(session_id)
            if not self._value_files.current(session_id, path, offsets.header, offsets.offset):
                return True
            unread = self._value_files.unread_bytes(session_id, tree)
            if unread > SAMPLED_PART and self._many_in_sample(session_id, tree, most):
                return True
            filed = self._from_value_file(session_id, tree)  # kept: filter_few asks it next
            return filed is None or len(filed) > most

    def _read_by_offset(
        self, session_id: str, offsets: Offsets, rows: Sequence[tuple[int, bytes]]
    ) -> None:
        """Note ``rows``, read by ``offsets``: filed by value while filters are judged from such rows (:meth:`_by_offset`), else only counted."""
        version = (offsets.header, offsets.offset)
        below = self._read_values.spent(session_id, version) < _bound(offsets)
        self._read_values.read(session_id, version, rows, file=below)

    def _judged_by_offset(
        self,
        session_id: str,
        offsets: Offsets,
        tree: FilterNode,
        seqs: Sequence[int],
        *,
        data: bool = True,
    ) -> list[tuple[int, bytes]] | None:
        """Return ``(seq, data)`` of the live rows among ``seqs`` that may pass ``tree``, judged from the rows read by their offsets; ``None`` if an offset does not check out.

        The rows not read yet at this version of the log are read and
        filed (:meth:`OffsetValues.read`); those filed before that may pass
        are read again by their offsets (the values kept are not the rows),
        unless ``data`` is false (their data is then ``b""``).
        """
        path = self._files.log_path(session_id)
        version = (offsets.header, offsets.offset)
        values = self._read_values
        unread = values.unread(session_id, version, seqs)
        rows = rows_at(path, offsets.record_at, offsets.offset, unread) if unread else []
        if rows is None:
            return None
        self._read_by_offset(session_id, offsets, rows)
        may = values.may_pass(session_id, version, tree, seqs)
        found = {seq: row for seq, row in rows if seq in may}
        again = sorted(may.difference(found))
        if not data:
            found.update(dict.fromkeys(again, b""))
        elif again:
            more = rows_at(path, offsets.record_at, offsets.offset, again)
            if more is None:
                return None
            self._read_values.read(session_id, version, more, file=False)
            found.update(more)
        return sorted(found.items())

    def _offsets(self, session_id: str) -> Offsets | None:
        """Return the record offsets rows are read by while this handle holds no view of the log: the vector file's where this handle holds it (a semantic query's), else the keyword file's, else the vector file's; ``None`` where neither is current with the log. The caller holds the lock."""
        view = self._vector_view(session_id) if self._vectors.holds(session_id) else None
        if view is not None:
            return view
        index = self._unviewed(session_id)
        return index if index is not None else self._vector_view(session_id)

    def _passing(
        self, session_id: str, log: SessionLog, tree: FilterNode, seqs: Sequence[int] | None = None
    ) -> set[int] | None:
        """Return the seqs (among ``seqs``) whose items pass ``tree`` (:meth:`FilterValues.passing`); the caller holds the lock."""
        source = self._source(session_id)
        found = self._values.passing(session_id, _view(log), tree, source, seqs)
        if self._value_files.due(session_id, log.header, log.offset):
            path = self._files.log_path(session_id)
            tail = read_range(path, max(0, log.offset - side_file.TAIL), log.offset)
            self._value_files.save(session_id, log.rows.value_index, log.header, log.offset, tail)
        return found

    def _unviewed(self, session_id: str) -> KeywordIndex | None:
        """Return the index current with the log file while this handle holds no view of the log (:meth:`SessionKeywords.unviewed`): ``keyword_top`` ranks from it and ``read_seqs`` reads rows by its offsets (:func:`rows_at`), neither reading the log whole."""
        if self._logs.viewed(session_id):
            return None
        return self._keywords.unviewed(session_id, self._files.log_path(session_id))

    def _source(self, session_id: str) -> str:
        """Return how errors name a session's log."""
        return f"session {session_id!r} of {self._files.log_path(session_id)!r}"


def _bound(offsets: Offsets) -> int:
    """Return how many rows read by ``offsets`` make reading the log whole cheaper (:data:`WHOLE_AT`, :data:`WHOLE_FLOOR`)."""
    return max(WHOLE_FLOOR, offsets.count // WHOLE_AT)


def _view(log: SessionLog) -> tuple[RowTable, int]:
    """Return what :class:`FilterValues` keeps a session's values current with: the log's rows and how far it was read."""
    return log.rows, log.offset
