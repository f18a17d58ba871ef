"""The JSONL log store: one append-only log file per session.

A store is a directory (schema version 4, recorded in the marker file)::

    kvmemory-store.json       {"format": "kvmemory.jsonl-store", "version": 4}
    kvmemory-store.lock       taken (flock) by every writer, shared by readers
    <session_id>.jsonl        the log of one session
    <session_id>.deleted      {"next_seq": N}: the seqs a deleted session had used
    <session_id>.keywords     the keyword index of the log, a cache (see below)
    <session_id>.vectors      the vectors and record offsets of the log, a cache (see below)
    <session_id>.values       the live rows filed by the values of their items, a cache (see below)
    kvmemory-coded/           each session's coded part vectors, a cache (see below)

Each log starts with a header line, then one record per line::

    {"format":"kvmemory.jsonl-log","version":2,"session_id":"run-1","step_key":"step",
     "created":...,"generation":"9f0c...","next_seq":1,"meta":{...}}
    {"seq":1,"t":1732250000.1,"s":"1","item":{"step":1,"action":"click"}}   an appended item
    {"seq":1,"t":1732250000.1,"s":"1","u":1,"item":{...}}                  new fields for item 1
    {"seq":2,"t":1732250000.2,"s":null,"k":"lang","item":{"key":"lang",...}}  a record (v4)
    {"del":[1,2]}                                                            items deleted
    {"clear":1}                                                              every item deleted
    {"meta":{...}}                                                           new session metadata
    {"vm":["hashing-3gram-256",256]}                         the model of the vectors (v3)
    {"vec":[1,"*","AACAPwAAAAA..."]}      item 1's unit vector over all fields, float32 base64 (v3)
    {"vdrop":1}                                               every vector and the model dropped (v3)

A record is an item whose record carries its key (``"k"``): replaying the log
files it under that key again, and a ``"del"`` or ``"clear"`` record frees
the key with the item. A replaced record is a ``"del"`` of its old seq and a
new item record, written together.

A vector belongs to the item's fields as they were when it was embedded:
reading a ``"u"`` or ``"del"`` record forgets the vectors of those items.
Semantic search reads the vectors from this process's view of the log (the
whole session's vectors are held in RAM with its items) and computes exact
cosines with numpy. Until a handle has read a session's log whole, it takes
them from ``<session_id>.vectors`` instead, mapped and caught up with the
log: :mod:`agents.memory.stores._jsonl.vector_views` describes when that
file is used, followed or saved again.

``item`` is the codec's wire form of the item, byte for byte, and ``meta``
the codec's form of the metadata. Appending writes the records of one
transaction with a single ``write`` to the end of the file, then flushes it
to disk with ``fsync`` unless the store was opened with ``?fsync=never``.
Existing lines are never rewritten by an append.

A crash in the middle of a write can leave a truncated last line. Readers
skip it with a ``SkippedRecordWarning`` naming the file and line, keeping
every complete line before it; the next writer cuts it off before appending.
Deleting leaves tombstones; once they outnumber the live items, the log is
compacted: the live items are written to a new file that atomically replaces
the old one.

Every time a log file is written whole (created, compacted, migrated) its
header gets a new random ``generation``. A handle caches what it read of a
log and, before using the cache, compares the header of the file with the
one it read: a log that another handle deleted and created again, or
compacted, is then read afresh instead of being taken for a longer version
of the old one. A deleted session leaves ``<session_id>.deleted`` behind,
so a session created again under the same id continues with higher seqs.

The first keyword search of a session builds its keyword index from the log
(each item's terms, as ``Memory.search`` counts them) and keeps it beside the
log in ``<session_id>.keywords``; later searches, in this process or another,
read it and index only the records appended since. It is a cache, never the
source of truth: :mod:`agents.memory.stores._jsonl.keywords` describes when it
is used, followed or built again.

A handle that reads a log whole to judge a filter saves the rows it filed
by value in ``<session_id>.values``, so that a fresh handle judges a rare
filter without reading the log: another cache, checked before it is used
and caught up with the records after it
(:mod:`agents.memory.stores._jsonl.value_file`).

A writable handle that codes a session's part vectors as int8 (they pass
the kept-vector budget) saves the coded table in ``kvmemory-coded/``, as
SQLite does beside its file (``agents.memory.stores._search.coded_file``):
keyed by the session's first vector rows, which ``<session_id>.vectors``
gives without reading the log, and caught up with the log's records
after the length it was saved at (:meth:`SessionLogs.vector_changes`).

Files are created readable by their owner only (``0600``), the directory
``0700``; logs and the lock file are opened without following symbolic links.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, TypeVar

import attrs

from agents.memory._filter import FilterNode
from agents.memory.exceptions import CorruptStoreError, StoreError
from agents.memory.stores._core.checks import check_store_path
from agents.memory.stores._core.encoding import IndexEntry, KeyedRow, Row, RowUpdate, SessionRow
from agents.memory.stores._core.filter_values import FilterValues, ranked_where
from agents.memory.stores._core.terms import Terms
from agents.memory.stores._jsonl.files import StoreFiles
from agents.memory.stores._jsonl.filter_reads import LogFilterReads
from agents.memory.stores._jsonl.keyword_index import KeywordIndex, numpy_module
from agents.memory.stores._jsonl.keyword_postings import DamagedIndexError
from agents.memory.stores._jsonl.keyword_ranking import (
    frequencies,
    held_terms,
    rank_together,
    score_among,
    top,
)
from agents.memory.stores._jsonl.keywords import SessionKeywords, rows_at
from agents.memory.stores._jsonl.log import (
    CLEAR_RECORD,
    DROP_VECTORS_RECORD,
    SessionLog,
    SessionLogs,
    delete_record,
    item_record,
    meta_record,
    model_record,
    vector_record,
)
from agents.memory.stores._jsonl.offset_values import OffsetValues, top_passing
from agents.memory.stores._jsonl.value_file import SessionValueFiles
from agents.memory.stores._jsonl.vector_file import VectorView
from agents.memory.stores._jsonl.vector_views import SessionVectors
from agents.memory.stores._store import Store

__all__ = ["JSONLStore", "LogBackend"]

_COMPACT_MIN_DEAD: Final = 32
_SETTLED_NS: Final = 2_000_000_000
"""How long before a scan a folder's last change must lie for the scan's answer to be kept (:func:`_searched`): a change in the same tick of the file system's clock leaves its time as it was."""
_SCANS: dict[str, tuple[tuple[int, int, int], bool]] = {}
"""Each store folder's answer of :func:`_searched`, by the folder's device, inode and time of its last change when it was scanned."""
_SCANS_KEPT: Final = 1024
"""The most folders whose answer :data:`_SCANS` keeps."""

T = TypeVar("T")


@attrs.define
class _Tx:
    """One write transaction: the log as it will be, and the bytes that make it so."""

    log: SessionLog | None
    parts: list[bytes] = attrs.Factory(list)
    new: bool = False
    vector_seqs: set[int] | None = attrs.Factory(set)  # whose vectors it changes (None: all)
    size: int = 0  # the length of parts[:counted]
    counted: int = 0

    def item(self, log: SessionLog, seq: int, record: bytes) -> None:
        """Add the record of item ``seq``, noting where it will start in the log (``log.offsets``)."""
        # The parts' length so far, counting only those added since the last record.
        self.size += sum(map(len, self.parts[self.counted :]))
        self.counted = len(self.parts) + 1
        log.offsets[seq] = (len(log.header) if self.new else log.offset) + self.size
        self.parts.append(record)
        self.size += len(record)

    def changed_vectors(self, seqs: Iterable[int] | None) -> None:
        """Note that the vectors of ``seqs`` (``None``: of every item) change."""
        if seqs is None:
            self.vector_seqs = None
        elif self.vector_seqs is not None:
            self.vector_seqs.update(seqs)


def _create_v1(store: LogBackend) -> None:
    """An empty directory needs nothing before its marker is written."""


def _add_generations(store: LogBackend) -> None:
    # v2 logs carry a generation id (and their next seq) in the header; rewrite each v1 log once.
    # A damaged log is left as it is: v2 reads v1 logs, and its error shows when it is read.
    for session_id in store.sessions():
        with contextlib.suppress(CorruptStoreError):
            store.compact(session_id)


def _add_vectors(store: LogBackend) -> None:
    """v3 logs may hold vector records (``vm``, ``vec``, ``vdrop``); v2 logs need no change."""


def _add_record_keys(store: LogBackend) -> None:
    """v4 item records may carry a record key (``k``); v3 logs need no change (they hold no records)."""


MIGRATIONS: Final = (_create_v1, _add_generations, _add_vectors, _add_record_keys)
"""Step ``i`` brings a store directory from schema version ``i`` to ``i + 1``."""

SCHEMA_VERSION: Final = len(MIGRATIONS)


class JSONLStore(Store):
    """Sessions as append-only JSONL logs in one directory.

    A :class:`~agents.memory.stores.Store` over :class:`LogBackend`, which
    keeps the logs.

    Args:
        directory: The store directory; created when missing unless ``read_only``.
        fsync: Flush every append to disk with ``fsync`` (default); ``False``
            leaves it to the operating system (a process crash loses nothing,
            a power cut can lose recent appends).
        read_only: Open without writing anything: the directory must be a
            store already; nothing is created or migrated.
        url: The URL to report in messages.

    Raises:
        InvalidStoreURLError: if the path holds a NUL character.
        StoreNotFoundError: if ``read_only`` and the directory is not a store.
        CorruptStoreError: if the directory holds other files and no kvmemory marker.
        SchemaVersionError: if a newer kvmemory wrote the store.
        StoreError: if the directory cannot be created, or its lock file is a symbolic link.
    """

    schema_version = SCHEMA_VERSION

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fsync: bool = True,
        read_only: bool = False,
        url: str | None = None,
    ) -> None:
        backend = LogBackend(directory, fsync=fsync, read_only=read_only, url=url)
        super().__init__(backend, read_only=read_only)
        self.backend: LogBackend = backend

    @property
    def directory(self) -> str:
        """The store directory."""
        return self.backend.directory

    @property
    def fsync(self) -> bool:
        """Whether every append is flushed to disk with ``fsync``."""
        return self.backend.fsync

    def compact(self, session_id: str) -> None:
        """Rewrite a session's log without its deleted items, atomically.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the log cannot be written; the old log stays as it was.
        """
        with self.guarded("compact", session_id, write=True) as sid:
            self.backend.compact(sid)


class LogBackend(LogFilterReads):
    """The rows of a JSONL store: one append-only log per session in a directory.

    Opening reads (or, unless ``read_only``, creates and migrates) the
    store directory; see :class:`JSONLStore` for the arguments. The
    directory, its marker and its lock are a :class:`StoreFiles`
    (``files``); the logs, read, followed and written, are a
    :class:`SessionLogs` (``log``). This class turns the row
    operations of :class:`Backend` into their records.
    """

    keeps_vectors = True

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fsync: bool = True,
        read_only: bool = False,
        url: str | None = None,
    ) -> None:
        self.directory = check_store_path(directory)
        self.url = url or f"jsonl:///{self.directory}"
        self.read_only = read_only
        self.fsync = fsync
        self._files = StoreFiles(self.directory)
        self._logs = SessionLogs(self._files, version=SCHEMA_VERSION, fsync=fsync)
        self._keywords = SessionKeywords(self.directory, read_only=read_only)
        self._vectors = SessionVectors(self.directory, read_only=read_only)
        self._values = FilterValues()
        self._where_answered: set[str] = set()  # the sessions keyword_top_where answered
        self._read_values = OffsetValues()  # the rows read by their offsets, filed by value
        self._value_files = SessionValueFiles(self.directory, read_only=read_only)
        self._logs.filed = self._value_files.whole_index  # a log read whole takes the file's
        try:
            if read_only:
                self._files.open_read_only(SCHEMA_VERSION)
            else:
                self._files.open_writable(MIGRATIONS, self)
        except StoreError:
            raise
        except OSError as exc:
            msg = f"Cannot open {self.url}: {exc}; nothing was changed."
            raise StoreError(msg) from exc
        if "numpy" not in sys.modules and _searched(self.directory):
            numpy_module()  # imported by the open, not by the first query (see _searched)

    # -- reading -----------------------------------------------------------------------

    def read_session(self, session_id: str) -> SessionRow | None:
        log = self._snapshot(session_id)
        return None if log is None else (log.step_key, log.created, log.metadata)

    def read_rows(
        self, session_id: str, *, steps: Sequence[str] | None = None, after: int | None = None
    ) -> list[tuple[int, bytes]]:
        with self._files.locked(exclusive=False):
            log = self._logs.current(session_id)
            if log is None:
                return []
            if steps is not None:
                return log.rows.of_steps(steps, after=after)
            low = -1 if after is None else after
            return [(seq, data) for seq, (_, _, data) in log.rows.items() if seq > low]

    def read_seqs(self, session_id: str, seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        with self._files.locked(exclusive=False):
            path = self._files.log_path(session_id)
            # The hits read alone, by the record offsets of the vector file where this handle
            # holds it (a semantic query's), else of the keyword index, else of the vector file.
            offsets = self._offsets(session_id)
            if offsets is not None:
                found = rows_at(path, offsets.record_at, offsets.offset, seqs)
                if found is not None:
                    self._read_by_offset(session_id, offsets, found)
                    return found
            log = self._logs.current(session_id)
            if log is not None and isinstance(offsets, KeywordIndex):  # an offset did not check out
                self._keywords.offsets_from(session_id, log, path)
            if log is not None and isinstance(offsets, VectorView):
                self._vectors.rebuilt(session_id, log, path)
            rows = log.rows if log is not None else {}
            return [(seq, rows[seq][2]) for seq in sorted(set(seqs)) if seq in rows]

    def count(self, session_id: str) -> int:
        with self._files.locked(exclusive=False):
            view = self._vector_view(session_id)
            if view is not None:
                return view.count
            log = self._logs.current(session_id)
        return 0 if log is None else len(log.rows)

    def sessions(self) -> list[str]:
        return self._files.session_ids()

    # -- writing ---------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, session_id: str) -> Iterator[_Tx]:
        with self._files.locked(exclusive=True):
            tx = _Tx(self._logs.current(session_id))
            try:
                yield tx
                if tx.log is not None:
                    self._commit(session_id, tx, tx.log)
            except BaseException:
                # The cached view may hold changes that never reached the file.
                self._logs.forget(session_id)
                raise

    def _commit(self, session_id: str, tx: _Tx, log: SessionLog) -> None:
        if tx.new:
            self._logs.write_new(session_id, log, tx.parts)
            self._files.forget_deleted(session_id)
        elif tx.parts:
            self._logs.append(session_id, log, b"".join(tx.parts), tx.vector_seqs)
        self._logs.keep(session_id, log)
        if log.dead >= _COMPACT_MIN_DEAD and log.dead > len(log.rows):
            self._compact(session_id, log)

    def _compact(self, session_id: str, log: SessionLog) -> None:
        """Compact a log; its keyword index, if it covered the whole log, covers the new one."""
        header, offset = log.header, log.offset
        self._logs.compact(session_id, log)
        new = self._logs.current(session_id)
        if new is not None:
            self._keywords.moved(session_id, header, offset, new)

    def lock_session(self, tx: _Tx, session_id: str) -> SessionRow | None:
        log = tx.log
        return None if log is None else (log.step_key, log.created, log.metadata)

    def create_session(self, tx: _Tx, session_id: str, step_key: str, created: float) -> None:
        next_seq = self._files.deleted_next_seq(session_id)
        tx.log = self._logs.new_log(session_id, step_key, created, next_seq)
        tx.new = True

    def set_metadata(self, tx: _Tx, session_id: str, metadata: bytes) -> None:
        log = _open_log(tx)
        tx.parts.append(meta_record(metadata))
        log.metadata = metadata

    def insert_rows(
        self, tx: _Tx, session_id: str, rows: Sequence[Row], terms: Sequence[Terms]
    ) -> list[int]:
        log = _open_log(tx)
        start = log.next_seq
        for offset, (step, created, data) in enumerate(rows, start=start):
            tx.item(log, offset, item_record(offset, created, step, data))
            log.rows[offset] = (step, created, data)
        log.next_seq = start + len(rows)
        return list(range(start, log.next_seq))

    def insert_keyed(
        self,
        tx: _Tx,
        session_id: str,
        rows: Sequence[Row],
        keys: Sequence[str],
        terms: Sequence[Terms],
    ) -> list[int]:
        log = _open_log(tx)
        start = log.next_seq
        for offset, ((step, created, data), key) in enumerate(zip(rows, keys, strict=True), start):
            tx.item(log, offset, item_record(offset, created, step, data, key=key))
            log.rows[offset] = (step, created, data)
            log.rows.file_key(offset, key)
        log.next_seq = start + len(rows)
        return list(range(start, log.next_seq))

    def keyed_seqs(self, tx: _Tx, session_id: str, keys: Sequence[str]) -> dict[str, int]:
        return _open_log(tx).rows.key_seqs(keys)

    def read_keyed_in(self, tx: _Tx, session_id: str, keys: Sequence[str]) -> list[KeyedRow]:
        return _open_log(tx).rows.keyed(keys, None)

    def read_keyed(
        self, session_id: str, keys: Sequence[str] | None = None, *, prefix: str | None = None
    ) -> list[KeyedRow]:
        with self._files.locked(exclusive=False):
            log = self._logs.current(session_id)
            return [] if log is None else log.rows.keyed(keys, prefix)

    def record_keys(self, session_id: str, prefix: str | None = None) -> list[str]:
        with self._files.locked(exclusive=False):
            log = self._logs.current(session_id)
            return [] if log is None else log.rows.record_keys(prefix)

    def update_rows(
        self, tx: _Tx, session_id: str, rows: Sequence[RowUpdate], terms: Sequence[Terms]
    ) -> list[int]:
        log = _open_log(tx)
        done = []
        for seq, step, data in rows:
            old = log.rows.get(seq)
            if old is not None:
                tx.item(log, seq, item_record(seq, old[1], step, data, update=True))
                log.rows[seq] = (step, old[1], data)
                log.dead += 1
                done.append(seq)
        log.drop_vectors_of(done)  # as reading the "u" records does
        tx.changed_vectors(done)
        return done

    def delete_rows(self, tx: _Tx, session_id: str, seqs: Sequence[int]) -> list[int]:
        log = _open_log(tx)
        gone = [seq for seq in dict.fromkeys(seqs) if log.rows.discard(seq)]
        if gone:
            tx.parts.append(delete_record(gone))
            log.dead += len(gone)
            log.deleted(gone)  # as reading the "del" record does
            tx.changed_vectors(gone)
        return sorted(gone)

    def clear_rows(self, tx: _Tx, session_id: str) -> int:
        log = _open_log(tx)
        count = len(log.rows)
        if count:
            tx.parts.append(CLEAR_RECORD)
            tx.changed_vectors(None)
            log.dead += count
            log.rows.clear()
            log.offsets.clear()
        return count

    def row_index(self, tx: _Tx, session_id: str) -> list[IndexEntry]:
        log = _open_log(tx)
        return [(seq, step, created) for seq, (step, created, _) in log.rows.items()]

    # -- vectors: records in the log (read: LogVectorReads) -------------------------------

    def claim_vector_model(
        self, tx: _Tx, session_id: str, model: str, dimension: int
    ) -> tuple[str, int]:
        log = _open_log(tx)
        if log.model is None:
            tx.parts.append(model_record(model, dimension))
            log.model = (model, dimension)
        return log.model

    def put_vectors(
        self, tx: _Tx, session_id: str, fields: str, rows: Sequence[tuple[int, bytes, bytes]]
    ) -> int:
        log = _open_log(tx)
        table = log.vectors.setdefault(fields, {})
        written = 0
        for seq, data, vector in rows:
            row = log.rows.get(seq)
            if row is None or row[2] != data:
                continue
            tx.parts.append(vector_record(seq, fields, vector))
            tx.changed_vectors((seq,))
            if seq in table:
                log.dead += 1
            table[seq] = vector
            written += 1
        return written

    def drop_vectors(self, tx: _Tx, session_id: str) -> int:
        log = _open_log(tx)
        count = sum(map(len, log.vectors.values()))
        if count or log.model is not None:
            tx.parts.append(DROP_VECTORS_RECORD)
            tx.changed_vectors(None)
            log.dead += count + 1
            log.vectors = {}
            log.model = None
        return count

    # -- whole sessions --------------------------------------------------------------------

    def delete_session(self, session_id: str) -> bool:
        with self._files.locked(exclusive=True):
            try:
                log = self._logs.current(session_id)
            except CorruptStoreError:
                log = None  # a damaged log can still be deleted; its seqs are then unknown
            path = self._files.log_path(session_id)
            if not os.path.lexists(path):
                return False
            next_seq = max(self._files.deleted_next_seq(session_id), log.next_seq if log else 1)
            self._files.record_deleted(session_id, next_seq)
            self._logs.forget(session_id)
            os.unlink(path)
            self._keywords.forget(session_id, remove=True)
            self._vectors.forget(session_id, remove=True)
            self._values.forget(session_id)
            self._read_values.forget(session_id)
            self._value_files.forget(session_id, remove=True)
            return True

    def compact(self, session_id: str) -> None:
        """Rewrite a session's log without its deleted items, atomically (the old log stays on failure)."""
        with self._files.locked(exclusive=True):
            log = self._logs.current(session_id)
            if log is not None:
                self._compact(session_id, log)

    def close(self) -> None:
        self._files.close()
        self._logs.clear()
        self._keywords.clear()
        self._vectors.clear()
        self._read_values.clear()
        self._values.clear()
        self._value_files.clear()

    # -- keyword search: the index beside each log ----------------------------------------

    def _indexed(self, session_id: str, answer: Callable[[KeywordIndex], T]) -> T | None:
        """Return ``answer`` of the session's keyword index, current with the log; ``None`` if there is no session.

        The caller holds the lock. While this handle holds no view of the
        log, the index is taken from the file as the log is now
        (:meth:`_unviewed`), without reading the log whole. An index file
        whose postings turn out damaged is built again from the log, and
        ``answer`` asked again.
        """
        index = self._unviewed(session_id)
        if index is not None:
            with contextlib.suppress(DamagedIndexError):  # built again from the log, below
                return answer(index)
        log = self._logs.current(session_id)
        if log is None:
            return None
        path = self._files.log_path(session_id)
        index = self._keywords.current(session_id, log, path)
        try:
            return answer(index)
        except DamagedIndexError:
            return answer(self._keywords.rebuilt(session_id, log, path))

    def keyword_version(self, session_id: str) -> tuple[bytes, int] | None:
        """Return the log's header and length as read (the rows it holds), following it first; ``None`` if there is no session.

        Every write appends to the log (a longer length) or writes it anew
        (a new header, with a new random generation: a compaction, a
        session deleted and created again), by this handle or any other
        handle or process, and the log is followed under the store's lock
        as every read follows it. The keyword index asked next is caught up
        with the log at that length (loaded from ``<session>.keywords``,
        followed or built again): the ranking of the rows of that version.
        A metadata or vector record changes it too: correct, only slower.
        """
        log = self._snapshot(session_id)
        return None if log is None else (log.header, log.offset)

    def keyword_ready(self, session_id: str) -> None:
        """Load ``<session>.keywords`` if this handle holds no index of the log and the file checks out (:meth:`SessionKeywords.loaded`); never build one."""
        with self._files.locked(exclusive=False):
            log = self._logs.current(session_id)
            if log is not None:
                self._keywords.loaded(session_id, log, self._files.log_path(session_id))

    def keyword_top(
        self, session_id: str, terms: Sequence[str], k: int
    ) -> list[tuple[float, int]] | None:
        with self._files.locked(exclusive=False):
            return self._indexed(session_id, lambda index: top(index, terms, k)) or []

    def keyword_among(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> list[tuple[float, int]] | None:
        with self._files.locked(exclusive=False):
            return self._indexed(session_id, lambda index: score_among(index, terms, seqs)) or []

    def keyword_held(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> dict[int, set[str]] | None:
        with self._files.locked(exclusive=False):
            return self._indexed(session_id, lambda index: held_terms(index, terms, seqs)) or {}

    def keyword_frequencies(self, session_id: str, terms: Sequence[str]) -> dict[str, int] | None:
        with self._files.locked(exclusive=False):
            df = self._indexed(session_id, lambda index: frequencies(index, terms))
        return df if df is not None else dict.fromkeys(terms, 0)

    def keyword_top_sessions(
        self, session_ids: Sequence[str], terms: Sequence[str], k: int
    ) -> list[tuple[float, str, int]] | None:
        with self._files.locked(exclusive=False):
            found = [
                (sid, index)
                for sid in session_ids
                if (index := self._indexed(sid, lambda index: index)) is not None
            ]
            try:
                best = rank_together([index for _, index in found], terms, k)
            except DamagedIndexError:
                self._keywords.clear()  # the postings of one did not check out: build each again
                found = [(sid, self._rebuilt(sid)) for sid, _ in found]
                best = rank_together([index for _, index in found], terms, k)
        return [(score, found[number][0], seq) for score, number, seq in best]

    def keyword_top_where(
        self, session_id: str, terms: Sequence[str], k: int, tree: FilterNode
    ) -> list[tuple[float, int]] | None:
        """Rank only the rows that pass ``tree``, judged from the values of its fields this handle keeps (:func:`ranked_where`).

        While this handle holds no view of the log and the keyword file is
        current (:meth:`_unviewed`), the rows it read by their offsets judge
        the filter (:class:`OffsetValues`): the ranking leaves out those
        that cannot pass, and the store reads and tests the others
        (``widening``). ``None`` where those values cannot judge ``tree``
        or none has been read (the store walks the file's ranking, reading
        candidates by offset), unless it answered for the session before
        (every row may pass then); once this handle has
        read as many rows by their offsets as the session holds (a whole
        read costs about that), the log is read whole, and its kept values
        judge the filters. A ranking is given each time it answered before.
        """
        with self._files.locked(exclusive=False):
            answered = session_id in self._where_answered
            index = self._unviewed(session_id)
            if index is not None:
                version = (index.header, index.offset)
                if not self._read_values.read_all(session_id, version, index.count):
                    # Nothing read yet: the store's walk of the first 1,024 ranked, unless answered.
                    failing = self._read_values.failing(session_id, version, tree, unread=answered)
                    if failing is None and not answered:
                        return None
                    # A filter those values cannot judge, once answered: every row may pass.
                    self._where_answered.add(session_id)
                    rank = functools.partial(top_passing, terms, k, failing or set())
                    return self._indexed(session_id, rank) or []
            log = self._logs.current(session_id)
            if log is None:
                return []
            self._where_answered.add(session_id)  # the same filter gets an answer each time
            allowed = self._passing(session_id, log, tree)
            if allowed is None:  # every row may pass, where an answer was given before
                return (
                    (self._indexed(session_id, functools.partial(_top_of, terms, k)) or [])
                    if answered
                    else None
                )

            def among(seqs: list[int]) -> list[tuple[float, int]]:
                return (
                    self._indexed(session_id, lambda index: score_among(index, terms, seqs)) or []
                )

            def ranked(depth: int) -> list[tuple[float, int]]:
                return self._indexed(session_id, functools.partial(_top_of, terms, depth)) or []

            return ranked_where(allowed, len(log.rows), k, among, ranked)

    def _rebuilt(self, session_id: str) -> KeywordIndex:
        log = self._logs.current(session_id)
        assert log is not None  # the caller holds the lock and just read the session
        return self._keywords.rebuilt(session_id, log, self._files.log_path(session_id))


def _searched(directory: str) -> bool:
    """Return whether a session of the store was searched: a keyword index or a vector file lies beside its log.

    Every search of such a store (keyword, semantic, hybrid) ranks with
    numpy where it is installed: its import (~50 ms at load 1) is then the
    open's, not the first query's, which it made six times a warm keyword
    query of 100,000 steps (``bench_first_process.py``). A store never
    searched (a tool that lists or exports sessions) opens without it.

    The folder is listed (~3.5 ms at 10,000 sessions) once while it does
    not change: a later open in the process takes the answer kept for the
    folder's time of last change (a file added or removed changes it),
    where that time lay :data:`_SETTLED_NS` before the scan.
    """
    try:
        stat = os.stat(directory)
        at = (stat.st_dev, stat.st_ino, stat.st_mtime_ns)
        kept = _SCANS.get(directory)
        if kept is not None and kept[0] == at:
            return kept[1]
        now = time.time_ns()
        with os.scandir(directory) as entries:
            found = any(entry.name.endswith((".keywords", ".vectors")) for entry in entries)
    except OSError:
        return False
    if now - at[2] > _SETTLED_NS:
        if len(_SCANS) >= _SCANS_KEPT:
            _SCANS.clear()  # a process that opens ever new folders keeps no more
        _SCANS[directory] = (at, found)
    return found


def _top_of(terms: Sequence[str], k: int, index: KeywordIndex) -> list[tuple[float, int]]:
    return top(index, terms, k)


def _open_log(tx: _Tx) -> SessionLog:
    assert tx.log is not None  # Store calls row primitives only on a session that exists
    return tx.log
