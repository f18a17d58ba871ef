"""The read side of a JSONL store's vectors: from the handle's view of a log, or from the vector file while it holds none.

:class:`LogVectorReads` is the part of
:class:`~agents.memory.stores._jsonl.backend.LogBackend` that answers the
vector reads of :class:`~agents.memory.stores.Backend` (the writes are
records the backend appends with the rest). Each answers from this
handle's view of the log (:class:`SessionLog`) where it holds one, else
from ``<session>.vectors`` caught up with the log file
(:class:`SessionVectors`), else it reads the log whole. A block of the
file's vectors that does not check out as it is first read
(:class:`DamagedVectorFileError`, before any of its bytes is used) drops
the file's view: the call is answered from the log read whole, as every
later one, and a writable handle saves the file again
(:meth:`LogVectorReads._damaged`).
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterator, Sequence

from agents.memory.stores._core.backend import Backend
from agents.memory.stores._jsonl.files import StoreFiles
from agents.memory.stores._jsonl.log import SessionLog, SessionLogs, log_digest
from agents.memory.stores._jsonl.vector_file import DamagedVectorFileError, VectorView
from agents.memory.stores._jsonl.vector_views import SessionVectors

__all__ = ["LogVectorReads"]


class LogVectorReads(Backend):
    """The vector reads of a JSONL backend; the subclass sets ``_files``, ``_logs`` and ``_vectors``."""

    _files: StoreFiles
    _logs: SessionLogs
    _vectors: SessionVectors

    def _snapshot(self, session_id: str) -> SessionLog | None:
        with self._files.locked(exclusive=False):
            return self._logs.current(session_id)

    def vector_snapshot_path(self, session_id: str, fields: str) -> str | None:
        """Return the file of the session's coded part vectors over ``fields``, in the store directory (:meth:`SessionVectors.coded_path`)."""
        return self._vectors.coded_path(session_id, fields)

    @property
    def saves_vector_snapshots(self) -> bool:
        """Whether this handle saves coded part vectors beside the logs: it is writable."""
        return not self._vectors.read_only

    def vector_model(self, session_id: str) -> tuple[str, int] | None:
        """Return the session's vector model; where that reads the log whole, a writable handle saves ``<session>.vectors`` first if it is due (missing, of another version or log, or behind: :meth:`SessionVectors.save_due`), as a semantic query's first call."""
        with self._files.locked(exclusive=False):
            view = self._vector_view(session_id)
            if view is not None:
                return view.model
            log = self._logs.current(session_id)
            if log is not None and log.model is not None:
                self._vectors.save_due(session_id, log, self._files.log_path(session_id))
        return None if log is None else log.model

    def vector_pages(
        self, session_id: str, fields: str, size: int
    ) -> Iterator[list[tuple[int, bytes]]]:
        """Yield the vector rows over ``fields`` in seq order, ``size`` at a time, as of the first page: from ``<session>.vectors`` caught up with the log while this handle holds no view of it (the first page of any session costs a few rows: the key of its coded file), else from the view.

        Where a block of the file does not check out after some pages, the
        rows after the last page yielded come from the log read whole, up
        to where it was at the first page (read apart, if it was appended
        to since); from the log as it is then only where another handle
        wrote it anew (compacted, written again) or removed it since.
        """
        last = -1  # the last seq yielded
        with self._files.locked(exclusive=False):
            view = self._vector_view(session_id)
            if view is not None:
                table = view.tables.get(fields)
                pages = None if table is None else table.pages(size)
                first = (view.header, view.offset)  # the log as of the first page
            else:
                log = self._logs.current(session_id)
        if view is not None:
            if pages is None:
                return
            try:
                for page in pages:
                    yield page
                    last = page[-1][0]
                return
            except DamagedVectorFileError:  # the rows after the last page yielded: from the log
                log = self._damaged(session_id)
            if log is not None and (log.header, log.offset) != first:
                # Appended to since the first page: read up to where it was then (written anew: as now).
                with self._files.locked(exclusive=False):
                    log = self._logs.as_of(session_id, *first) or log
        rows = sorted((log.vectors.get(fields) or {}).items()) if log is not None else []
        rows = rows[bisect.bisect_right(rows, last, key=lambda row: row[0]) :]
        for start in range(0, len(rows), size):
            yield rows[start : start + size]

    def vector_matrix(
        self, session_id: str, fields: str
    ) -> tuple[Sequence[int], Sequence[int], bytes | memoryview] | None:
        """Return the vectors over ``fields`` from ``<session>.vectors`` where this handle holds no view of the log and the file is current (:class:`SessionVectors`); else ``None``, saving the file first if it is due."""
        with self._files.locked(exclusive=False):
            view = self._vector_view(session_id)
            if view is not None:
                table = view.tables.get(fields)
                try:
                    return ((), (), b"") if table is None else table.block()
                except DamagedVectorFileError:
                    self._damaged(session_id)
                    return None  # vector_pages reads them from the log now read whole
            log = self._logs.current(session_id)
            if log is not None:
                self._vectors.save_due(session_id, log, self._files.log_path(session_id))
        return None

    def vectors_of(
        self, session_id: str, fields: str, seqs: Sequence[int]
    ) -> list[tuple[int, bytes]]:
        with self._files.locked(exclusive=False):
            view = self._vector_view(session_id)
            log = None
            if view is not None:
                try:
                    return view.vectors_of(fields, seqs)
                except DamagedVectorFileError:
                    log = self._damaged(session_id)
            else:
                log = self._logs.current(session_id)
        table = (log.vectors.get(fields) or {}) if log is not None else {}
        return [(seq, table[seq]) for seq in sorted(set(seqs)) if seq in table]

    def vectors_version(self, session_id: str, fields: str) -> tuple[str, int, str] | None:
        """Return the digest of the log's header, its length as read and the digest of the bytes before that length in the file (:func:`log_digest`, :meth:`SessionLogs.tail_digest`); ``None`` where they cannot be read.

        Every write appends to the log or writes it anew (a new header);
        the tail tells a log put back to an older copy of itself (a backup
        restored) and written again to the same length from the one it was.
        """
        with self._files.locked(exclusive=False):
            view = self._vector_view(session_id)
            read = view if view is not None else self._logs.current(session_id)
            if read is None:
                return None
            tail = self._logs.tail_digest(session_id, read.offset)
        return None if tail is None else (log_digest(read.header), read.offset, tail)

    def vector_changes(
        self, session_id: str, fields: str, since: Hashable, now: Hashable
    ) -> set[int] | None:
        """Return the seqs whose vectors the log's records changed from ``since`` to ``now``, whoever appended them; ``None`` where this handle cannot tell.

        A version is the digest of the log's header, its length and the
        digest of the bytes before that length (``None`` where those bytes
        are no longer those of ``since``). The
        records between two lengths say which items' vectors they changed
        (``vec``, ``u`` and ``del`` records): those this handle appended or
        read as it followed the file are remembered, others (a fresh
        handle catching a coded file up) are read from the file, that
        stretch only; this handle's compaction leads to the new log.
        ``None`` across a log another handle wrote anew (compacted), a
        ``clear`` or ``vdrop`` record, or a stretch over a quarter of the log
        (:meth:`SessionLogs.vector_changes`).
        """
        with self._files.locked(exclusive=False):
            return self._logs.vector_changes(session_id, since, now)

    def vector_count(self, session_id: str, fields: str) -> int:
        with self._files.locked(exclusive=False):
            view = self._vector_view(session_id)
            if view is not None:
                table = view.tables.get(fields)
                return 0 if table is None else table.count
            log = self._logs.current(session_id)
        return len(log.vectors.get(fields) or {}) if log is not None else 0

    def unembedded_pages(
        self, session_id: str, fields: str, size: int
    ) -> Iterator[list[tuple[int, bytes]]]:
        with self._files.locked(exclusive=False):
            view = self._vector_view(session_id)
            if view is not None and view.embedded(fields):
                return
            log = self._logs.current(session_id)
            if log is None:
                return
            have = log.vectors.get(fields) or {}
            rows = [(seq, row[2]) for seq, row in log.rows.items() if seq not in have]
        for start in range(0, len(rows), size):
            yield rows[start : start + size]

    def _damaged(self, session_id: str) -> SessionLog | None:
        """Drop the view of the session's vector file (a block of it did not check out as it was read) and return the log read whole; a writable handle saves the file again from it."""
        with self._files.locked(exclusive=False):
            self._vectors.damaged(session_id)
            log = self._logs.current(session_id)
            if log is not None:
                self._vectors.rebuilt(session_id, log, self._files.log_path(session_id))
        return log

    def _vector_view(self, session_id: str) -> VectorView | None:
        """Return the session's vector file caught up with the log file while this handle holds no view of the log (:meth:`SessionVectors.unviewed`): a semantic query's calls answered without reading the log whole."""
        if self._logs.viewed(session_id):
            return None
        return self._vectors.unviewed(session_id, self._files.log_path(session_id))
