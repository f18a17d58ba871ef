"""The JSONL log store: one append-only log file per session.

A store is a directory (schema version 3, recorded in the marker file)::

    kvmemory-store.json       {"format": "kvmemory.jsonl-store", "version": 3}
    kvmemory-store.lock       taken (flock) by every writer, shared by readers
    <session_id>.jsonl        the log of one session
    <session_id>.deleted      {"next_seq": N}: the seqs a deleted session had used

Each log starts with a header line, then one record per line::

    {"format":"kvmemory.jsonl-log","version":2,"session_id":"run-1","step_key":"step",
     "created":...,"generation":"9f0c...","next_seq":1,"meta":{...}}
    {"seq":1,"t":1732250000.1,"s":"1","item":{"step":1,"action":"click"}}   an appended item
    {"seq":1,"t":1732250000.1,"s":"1","u":1,"item":{...}}                  new fields for item 1
    {"del":[1,2]}                                                            items deleted
    {"clear":1}                                                              every item deleted
    {"meta":{...}}                                                           new session metadata
    {"vm":["hashing-3gram-256",256]}                         the model of the vectors (v3)
    {"vec":[1,"*","AACAPwAAAAA..."]}      item 1's unit vector over all fields, float32 base64 (v3)
    {"vdrop":1}                                               every vector and the model dropped (v3)

A vector belongs to the item's fields as they were when it was embedded:
reading a ``"u"`` or ``"del"`` record forgets the vectors of those items.
Semantic search reads the vectors from this process's view of the log (the
whole session's vectors are held in RAM with its items) and computes exact
cosines with numpy.

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

Files are created readable by their owner only (``0600``), the directory
``0700``; logs and the lock file are opened without following symbolic links.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import fcntl
import os
import threading
import uuid
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

import attrs

from agents.memory import _codec
from agents.memory.exceptions import (
    CorruptSessionError,
    CorruptStoreError,
    SkippedRecordWarning,
    StoreError,
    StoreNotFoundError,
)
from agents.memory.stores._backend import Backend
from agents.memory.stores._checks import check_session_id, check_store_path
from agents.memory.stores._encoding import IndexEntry, Row, RowUpdate, SessionRow
from agents.memory.stores._keyword import Terms
from agents.memory.stores._migrations import check_schema_version, migrate
from agents.memory.stores._rows import RowTable
from agents.memory.stores._store import Store

__all__ = ["JSONLStore", "LogBackend"]

STORE_FORMAT: Final = "kvmemory.jsonl-store"
LOG_FORMAT: Final = "kvmemory.jsonl-log"
_MARKER: Final = "kvmemory-store.json"
_LOCK: Final = "kvmemory-store.lock"
_ITEM: Final = b',"item":'
_META: Final = b'{"meta":'
_COMPACT_MIN_DEAD: Final = 32
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


@attrs.define
class _Log:
    """What this process knows of one session log, read up to ``offset``."""

    header: bytes
    step_key: str
    created: float
    offset: int = 0
    lines: int = 0
    next_seq: int = 1
    metadata: bytes = b"{}"
    dead: int = 0
    rows: RowTable = attrs.Factory(RowTable)
    partial_at: int = 0
    model: tuple[str, int] | None = None
    # fields -> seq -> the vector's bytes (empty for an item without text)
    vectors: dict[str, dict[int, bytes]] = attrs.Factory(dict)

    def drop_vectors_of(self, seqs: Iterable[int]) -> None:
        """Forget the vectors of items deleted or changed (their records imply it)."""
        for table in self.vectors.values():
            for seq in seqs:
                if table.pop(seq, None) is not None:
                    self.dead += 1


@attrs.define
class _Tx:
    """One write transaction: the log as it will be, and the bytes that make it so."""

    log: _Log | None
    parts: list[bytes] = attrs.Factory(list)
    new: bool = False


def _create_v1(store: LogBackend) -> None:
    """An empty directory needs nothing before its marker is written."""


def _add_generations(store: LogBackend) -> None:
    # v2 logs carry a generation id (and their next seq) in the header; rewrite each v1 log once.
    # A damaged log is left as it is: v2 reads v1 logs, and its error shows when it is read.
    for session_id in store.sessions():
        with contextlib.suppress(CorruptStoreError):
            log = store._log(session_id)
            if log is not None:
                store._compact(session_id, log)


def _add_vectors(store: LogBackend) -> None:
    """v3 logs may hold vector records (``vm``, ``vec``, ``vdrop``); v2 logs need no change."""


MIGRATIONS: Final = (_create_v1, _add_generations, _add_vectors)
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


class LogBackend(Backend):
    """The rows of a JSONL store: one append-only log per session in a directory.

    Opening reads (or, unless ``read_only``, creates and migrates) the
    store directory; see :class:`JSONLStore` for the arguments.
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
        self._logs: dict[str, _Log] = {}
        self._tlock = threading.RLock()
        self._depth = 0
        self._lock_fd = -1
        try:
            if read_only:
                self._open_read_only()
            else:
                self._open_writable()
        except StoreError:
            raise
        except OSError as exc:
            msg = f"Cannot open {self.url}: {exc}; nothing was changed."
            raise StoreError(msg) from exc

    # -- opening ---------------------------------------------------------------------

    def _open_read_only(self) -> None:
        marker = os.path.join(self.directory, _MARKER)
        if not os.path.isfile(marker):
            msg = f"{self.directory!r} is not a kvmemory JSONL store (no {_MARKER}); check the path. Nothing was created."
            raise StoreNotFoundError(msg)
        try:
            self._lock_fd = self._open_lock(os.O_RDONLY)
        except FileNotFoundError:
            # No lock file means no writer ever opened this copy; the marker stands in.
            self._lock_fd = os.open(marker, os.O_RDONLY | _NOFOLLOW)
        try:
            with self._locked(exclusive=False):
                self._version = self._read_marker()
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _open_writable(self) -> None:
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
        except OSError as exc:
            msg = f"Cannot create the JSONL store directory {self.directory!r}: {exc}."
            raise StoreError(msg) from exc
        marker = os.path.join(self.directory, _MARKER)
        if not os.path.lexists(marker):
            # Refused before a lock file is left in someone else's directory.
            self._refuse_foreign_files()
        self._lock_fd = self._open_lock(os.O_RDWR | os.O_CREAT)
        try:
            with self._locked(exclusive=True):
                if os.path.lexists(marker):
                    found = self._read_marker()
                else:
                    self._refuse_foreign_files()
                    found = 0
                if found < SCHEMA_VERSION:
                    reached = migrate(
                        MIGRATIONS, found, self, store=f"JSONL store {self.directory!r}"
                    )
                    doc = {"format": STORE_FORMAT, "version": reached}
                    _codec.atomic_write(marker, [_codec.dumps(doc)])
                self._version = SCHEMA_VERSION
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _refuse_foreign_files(self) -> None:
        """Raise unless the directory, which has no marker, holds only kvmemory's own files."""
        others = sorted(
            name
            for name in os.listdir(self.directory)
            if name != _LOCK and not name.startswith(".kvmemory-")
        )
        # Listed before the marker is looked for: a store being created by another
        # process gets its marker before any other file, so files it wrote show with it.
        if others and not os.path.lexists(os.path.join(self.directory, _MARKER)):
            msg = (
                f"Directory {self.directory!r} is not a kvmemory JSONL store: it holds other "
                f"files ({', '.join(others[:5])}) and no {_MARKER}; it was left unchanged. "
                "Point the URL at a store or at a new or empty directory."
            )
            raise CorruptStoreError(msg)

    def _open_lock(self, flags: int) -> int:
        path = os.path.join(self.directory, _LOCK)
        try:
            return os.open(path, flags | _NOFOLLOW, 0o600)
        except OSError as exc:
            _refuse_link(path, "lock file", exc)
            raise

    def _read_marker(self) -> int:
        path = os.path.join(self.directory, _MARKER)
        data = _read_file(path, "marker")
        try:
            doc = _codec.loads(data, source=f"JSONL store marker {path!r}")
        except CorruptSessionError as exc:
            raise CorruptStoreError(str(exc)) from exc
        if type(doc) is not dict or doc.get("format") != STORE_FORMAT:
            msg = f"{path!r} is not a kvmemory JSONL store marker; point the URL at another directory."
            raise CorruptStoreError(msg)
        return check_schema_version(
            doc.get("version"), SCHEMA_VERSION, store=f"JSONL store {self.directory!r}"
        )

    # -- locking and reading the logs ------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, *, exclusive: bool) -> Iterator[None]:
        # The thread lock is reentrant; the file lock is taken by the outermost call only
        # (callers that write while holding it take it exclusive from the start).
        with self._tlock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            self._depth = 1
            try:
                yield
            finally:
                self._depth = 0
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _path(self, session_id: str) -> str:
        return os.path.join(self.directory, f"{session_id}.jsonl")

    def _log(self, session_id: str) -> _Log | None:
        """Bring this process's view of a log up to date with the file; ``None`` if there is none."""
        path = self._path(session_id)
        try:
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
        except FileNotFoundError:
            self._logs.pop(session_id, None)
            return None
        except OSError as exc:
            _refuse_link(path, "log", exc)
            raise
        try:
            size = os.fstat(fd).st_size
            log = self._logs.get(session_id)
            # Same header (and so the same generation) means the same file, grown by appends.
            if log is not None and (
                size < log.offset or os.pread(fd, len(log.header), 0) != log.header
            ):
                log = None
            if log is not None and size == log.offset:
                return log
            start = 0 if log is None else log.offset
            chunk = os.pread(fd, size - start, start)
        finally:
            os.close(fd)
        if log is None:
            log = self._read_header(session_id, path, chunk)
            chunk = chunk[log.offset :]
        self._apply(path, log, chunk)
        self._logs[session_id] = log
        return log

    def _read_header(self, session_id: str, path: str, chunk: bytes) -> _Log:
        end = chunk.find(b"\n")
        if end < 0:
            msg = f"JSONL log {path!r} has no complete header line; it was cut off while being created. Delete the file to start the session again."
            raise CorruptStoreError(msg)
        try:
            header = _codec.loads(chunk[:end], source=f"the header line of JSONL log {path!r}")
        except CorruptSessionError as exc:
            raise CorruptStoreError(str(exc)) from exc
        if type(header) is not dict or header.get("format") != LOG_FORMAT:
            msg = f"{path!r} does not start with a kvmemory log header; it is not a session log of this store."
            raise CorruptStoreError(msg)
        check_schema_version(header.get("version"), SCHEMA_VERSION, store=f"JSONL log {path!r}")
        if header.get("session_id") != session_id:
            msg = f"JSONL log {path!r} holds session {header.get('session_id')!r}, not {session_id!r}; the file was renamed by hand."
            raise CorruptStoreError(msg)
        step_key = header.get("step_key")
        created = header.get("created")
        next_seq = header.get("next_seq", 1)
        meta = header.get("meta", {})
        if (
            type(step_key) is not str
            or not isinstance(created, (int, float))
            or type(next_seq) is not int
            or type(meta) is not dict
        ):
            msg = (
                f"The header line of JSONL log {path!r} holds step_key {step_key!r}, created "
                f"{created!r}, next_seq {next_seq!r} and meta of type {type(meta).__name__}; "
                "expected text, a number, an int and an object. The log is damaged."
            )
            raise CorruptStoreError(msg)
        return _Log(
            header=chunk[: end + 1],
            step_key=step_key,
            created=float(created),
            offset=end + 1,
            lines=1,
            next_seq=next_seq,
            metadata=_codec.dumps(meta),
        )

    def _apply(self, path: str, log: _Log, chunk: bytes) -> None:
        lines = chunk.split(b"\n")
        tail = lines.pop()  # after the last newline: b"" when the log ends cleanly
        rows = log.rows
        for line in lines:
            log.lines += 1
            if not line.strip():
                continue
            where = f"line {log.lines} of JSONL log {path!r}"
            try:
                self._apply_line(where, log, rows, line)
            except CorruptSessionError as exc:
                msg = f"Cannot read {where}: {exc}; the log is damaged in the middle (not a crash at the end). Restore it from a backup."
                raise CorruptStoreError(msg) from exc
        log.offset += len(chunk) - len(tail)
        if tail:
            if log.partial_at != log.lines + 1:
                warnings.warn(
                    f"JSONL log {path!r} ends with a truncated line {log.lines + 1} "
                    f"({len(tail)} bytes, left by a crash during an append); it was skipped, "
                    "and every complete line before it was kept.",
                    SkippedRecordWarning,
                    stacklevel=6,
                )
            log.partial_at = log.lines + 1

    @staticmethod
    def _apply_line(where: str, log: _Log, rows: RowTable, line: bytes) -> None:
        # In an item record the first ',"item":' is its key: the fields before it are
        # numbers and JSON strings, in which a quote is always escaped.
        cut = line.find(_ITEM) if line.startswith(b'{"seq":') else -1
        head = _codec.loads(line[:cut] + b"}" if cut >= 0 else line, source=where)
        if type(head) is not dict:
            msg = f"{where} is a JSON {type(head).__name__}, not a record"
            raise CorruptSessionError(msg)
        if cut >= 0:
            seq, created, step = head.get("seq"), head.get("t"), head.get("s")
            if (
                type(seq) is not int
                or not isinstance(created, (int, float))
                or not (step is None or type(step) is str)
            ):
                msg = f"the item record holds seq {seq!r}, t {created!r} and s {step!r}; expected an int, a number and text or null"
                raise CorruptSessionError(msg)
            data = line[cut + len(_ITEM) : -1]
            if head.get("u"):
                old = rows.get(seq)
                if old is not None:
                    rows[seq] = (step, old[1], data)
                log.dead += 1
                log.drop_vectors_of((seq,))
            else:
                rows[seq] = (step, float(created), data)
                log.next_seq = max(log.next_seq, seq + 1)
        elif "del" in head:
            gone = head["del"]
            if type(gone) is not list or any(type(seq) is not int for seq in gone):
                msg = f'the "del" record holds {gone!r}; expected a list of int seqs'
                raise CorruptSessionError(msg)
            for seq in gone:
                if rows.discard(seq):
                    log.dead += 1
            log.drop_vectors_of(gone)
        elif "clear" in head:
            log.dead += len(rows)
            rows.clear()
        elif "vec" in head:
            vec = head["vec"]
            if not (
                type(vec) is list
                and len(vec) == 3
                and type(vec[0]) is int
                and type(vec[1]) is str
                and type(vec[2]) is str
            ):
                msg = f'the "vec" record holds {vec!r}; expected [seq, fields, base64 text]'
                raise CorruptSessionError(msg)
            try:
                vector = base64.b64decode(vec[2], validate=True)
            except binascii.Error as exc:
                msg = f'the "vec" record of item {vec[0]} holds text that is not base64 ({exc})'
                raise CorruptSessionError(msg) from exc
            table = log.vectors.setdefault(vec[1], {})
            if vec[0] in table:
                log.dead += 1
            table[vec[0]] = vector
        elif "vm" in head:
            model = head["vm"]
            if not (
                type(model) is list
                and len(model) == 2
                and type(model[0]) is str
                and type(model[1]) is int
            ):
                msg = f'the "vm" record holds {model!r}; expected [model name, dimension]'
                raise CorruptSessionError(msg)
            log.model = (model[0], model[1])
        elif "vdrop" in head:
            log.dead += sum(map(len, log.vectors.values())) + 1
            log.vectors = {}
            log.model = None
        elif "meta" in head:
            if type(head["meta"]) is not dict:
                msg = f'the "meta" record holds a {type(head["meta"]).__name__}; expected an object'
                raise CorruptSessionError(msg)
            log.metadata = (
                line[len(_META) : -1] if line.startswith(_META) else _codec.dumps(head["meta"])
            )
        else:
            msg = f"it is not a record this kvmemory knows ({line[:80]!r})"
            raise CorruptSessionError(msg)

    def _snapshot(self, session_id: str) -> _Log | None:
        with self._locked(exclusive=False):
            return self._log(session_id)

    # -- reading -----------------------------------------------------------------------

    def read_session(self, session_id: str) -> SessionRow | None:
        log = self._snapshot(session_id)
        return None if log is None else (log.step_key, log.created, log.metadata)

    def read_rows(
        self, session_id: str, *, steps: Sequence[str] | None = None, after: int | None = None
    ) -> list[tuple[int, bytes]]:
        with self._locked(exclusive=False):
            log = self._log(session_id)
            if log is None:
                return []
            if steps is not None:
                return log.rows.of_steps(steps, after=after)
            low = -1 if after is None else after
            return [(seq, data) for seq, (_, _, data) in log.rows.items() if seq > low]

    def read_seqs(self, session_id: str, seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        with self._locked(exclusive=False):
            log = self._log(session_id)
            rows = log.rows if log is not None else {}
            return [(seq, rows[seq][2]) for seq in sorted(set(seqs)) if seq in rows]

    def count(self, session_id: str) -> int:
        log = self._snapshot(session_id)
        return 0 if log is None else len(log.rows)

    def sessions(self) -> list[str]:
        out = []
        for name in os.listdir(self.directory):
            if name.endswith(".jsonl") and not name.startswith("."):
                sid = name[: -len(".jsonl")]
                with contextlib.suppress(ValueError):
                    out.append(check_session_id(sid))
        return sorted(out)

    # -- writing ---------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, session_id: str) -> Iterator[_Tx]:
        with self._locked(exclusive=True):
            tx = _Tx(self._log(session_id))
            try:
                yield tx
                if tx.log is not None:
                    self._commit(session_id, tx, tx.log)
            except BaseException:
                # The cached view may hold changes that never reached the file.
                self._logs.pop(session_id, None)
                raise

    def _commit(self, session_id: str, tx: _Tx, log: _Log) -> None:
        path = self._path(session_id)
        if tx.new:
            _codec.atomic_write(path, [log.header, *tx.parts])
            log.offset = len(log.header) + sum(map(len, tx.parts))
            log.lines = 1 + sum(part.count(b"\n") for part in tx.parts)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._deleted_path(session_id))
        elif tx.parts:
            self._append_bytes(path, log, b"".join(tx.parts))
        self._logs[session_id] = log
        if log.dead >= _COMPACT_MIN_DEAD and log.dead > len(log.rows):
            self._compact(session_id, log)

    def lock_session(self, tx: _Tx, session_id: str) -> SessionRow | None:
        log = tx.log
        return None if log is None else (log.step_key, log.created, log.metadata)

    def create_session(self, tx: _Tx, session_id: str, step_key: str, created: float) -> None:
        next_seq = self._deleted_next_seq(session_id)
        header = _header(session_id, step_key, created, next_seq, b"{}")
        tx.log = _Log(header=header, step_key=step_key, created=created, next_seq=next_seq)
        tx.new = True

    def set_metadata(self, tx: _Tx, session_id: str, metadata: bytes) -> None:
        log = _open_log(tx)
        tx.parts.append(_META + metadata + b"}\n")
        log.metadata = metadata

    def insert_rows(
        self, tx: _Tx, session_id: str, rows: Sequence[Row], terms: Sequence[Terms]
    ) -> list[int]:
        log = _open_log(tx)
        start = log.next_seq
        for offset, (step, created, data) in enumerate(rows, start=start):
            tx.parts.append(_record(offset, created, step, data, b""))
            log.rows[offset] = (step, created, data)
        log.next_seq = start + len(rows)
        return list(range(start, log.next_seq))

    def update_rows(
        self, tx: _Tx, session_id: str, rows: Sequence[RowUpdate], terms: Sequence[Terms]
    ) -> list[int]:
        log = _open_log(tx)
        done = []
        for seq, step, data in rows:
            old = log.rows.get(seq)
            if old is not None:
                tx.parts.append(_record(seq, old[1], step, data, b',"u":1'))
                log.rows[seq] = (step, old[1], data)
                log.dead += 1
                done.append(seq)
        log.drop_vectors_of(done)  # as reading the "u" records does
        return done

    def delete_rows(self, tx: _Tx, session_id: str, seqs: Sequence[int]) -> list[int]:
        log = _open_log(tx)
        gone = [seq for seq in dict.fromkeys(seqs) if log.rows.discard(seq)]
        if gone:
            tx.parts.append(b'{"del":' + _codec.dumps(gone) + b"}\n")
            log.dead += len(gone)
            log.drop_vectors_of(gone)  # as reading the "del" record does
        return sorted(gone)

    def clear_rows(self, tx: _Tx, session_id: str) -> int:
        log = _open_log(tx)
        count = len(log.rows)
        if count:
            tx.parts.append(b'{"clear":1}\n')
            log.dead += count
            log.rows.clear()
        return count

    def row_index(self, tx: _Tx, session_id: str) -> list[IndexEntry]:
        log = _open_log(tx)
        return [(seq, step, created) for seq, (step, created, _) in log.rows.items()]

    # -- vectors: records in the log ------------------------------------------------------

    def vector_model(self, session_id: str) -> tuple[str, int] | None:
        log = self._snapshot(session_id)
        return None if log is None else log.model

    def vector_pages(
        self, session_id: str, fields: str, size: int
    ) -> Iterator[list[tuple[int, bytes]]]:
        log = self._snapshot(session_id)
        rows = sorted((log.vectors.get(fields) or {}).items()) if log is not None else []
        for start in range(0, len(rows), size):
            yield rows[start : start + size]

    def vector_count(self, session_id: str, fields: str) -> int:
        log = self._snapshot(session_id)
        return len(log.vectors.get(fields) or {}) if log is not None else 0

    def unembedded_pages(
        self, session_id: str, fields: str, size: int
    ) -> Iterator[list[tuple[int, bytes]]]:
        with self._locked(exclusive=False):
            log = self._log(session_id)
            if log is None:
                return
            have = log.vectors.get(fields) or {}
            rows = [(seq, row[2]) for seq, row in log.rows.items() if seq not in have]
        for start in range(0, len(rows), size):
            yield rows[start : start + size]

    def claim_vector_model(
        self, tx: _Tx, session_id: str, model: str, dimension: int
    ) -> tuple[str, int]:
        log = _open_log(tx)
        if log.model is None:
            tx.parts.append(_codec.dumps({"vm": [model, dimension]}) + b"\n")
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
            tx.parts.append(_vector_record(seq, fields, vector))
            if seq in table:
                log.dead += 1
            table[seq] = vector
            written += 1
        return written

    def drop_vectors(self, tx: _Tx, session_id: str) -> int:
        log = _open_log(tx)
        count = sum(map(len, log.vectors.values()))
        if count or log.model is not None:
            tx.parts.append(b'{"vdrop":1}\n')
            log.dead += count + 1
            log.vectors = {}
            log.model = None
        return count

    def delete_session(self, session_id: str) -> bool:
        with self._locked(exclusive=True):
            try:
                log = self._log(session_id)
            except CorruptStoreError:
                log = None  # a damaged log can still be deleted; its seqs are then unknown
            path = self._path(session_id)
            if not os.path.lexists(path):
                return False
            next_seq = max(self._deleted_next_seq(session_id), log.next_seq if log else 1)
            _codec.atomic_write(
                self._deleted_path(session_id), [_codec.dumps({"next_seq": next_seq})]
            )
            self._logs.pop(session_id, None)
            os.unlink(path)
            return True

    def _deleted_path(self, session_id: str) -> str:
        return os.path.join(self.directory, f"{session_id}.deleted")

    def _deleted_next_seq(self, session_id: str) -> int:
        path = self._deleted_path(session_id)
        try:
            data = _read_file(path, "deleted-session record")
        except FileNotFoundError:
            return 1
        try:
            doc = _codec.loads(data, source=f"the deleted-session record {path!r}")
        except CorruptSessionError as exc:
            raise CorruptStoreError(str(exc)) from exc
        next_seq = doc.get("next_seq") if type(doc) is dict else None
        if type(next_seq) is not int:
            msg = f"The deleted-session record {path!r} holds {doc!r}; expected {{'next_seq': int}}. Delete it only if session {session_id!r} never existed."
            raise CorruptStoreError(msg)
        return next_seq

    def _append_bytes(self, path: str, log: _Log, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | _NOFOLLOW)
        try:
            if log.partial_at:
                # Cut off the line a crash left half written, so records start on a line of their own.
                os.ftruncate(fd, log.offset)
                log.partial_at = 0
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        log.offset += len(data)
        log.lines += data.count(b"\n")

    def _compact(self, session_id: str, log: _Log) -> None:
        # Seqs are never reused, even for items the compaction drops: next_seq goes in the header.
        header = _header(session_id, log.step_key, log.created, log.next_seq, log.metadata)
        chunks = [header]
        for seq, (step, created, data) in log.rows.items():
            chunks.append(_record(seq, created, step, data, b""))
        if log.model is not None:
            chunks.append(_codec.dumps({"vm": list(log.model)}) + b"\n")
        for fields, table in log.vectors.items():
            chunks.extend(
                _vector_record(seq, fields, vector)
                for seq, vector in table.items()
                if seq in log.rows
            )
        _codec.atomic_write(self._path(session_id), chunks)
        self._logs[session_id] = _Log(
            header=header,
            step_key=log.step_key,
            created=log.created,
            offset=sum(map(len, chunks)),
            lines=len(chunks),
            next_seq=log.next_seq,
            metadata=log.metadata,
            rows=RowTable(log.rows.items()),
            model=log.model,
            vectors={
                fields: {seq: vector for seq, vector in table.items() if seq in log.rows}
                for fields, table in log.vectors.items()
            },
        )

    def compact(self, session_id: str) -> None:
        """Rewrite a session's log without its deleted items, atomically (the old log stays on failure)."""
        with self._locked(exclusive=True):
            log = self._log(session_id)
            if log is not None:
                self._compact(session_id, log)

    def close(self) -> None:
        with self._tlock:
            os.close(self._lock_fd)
            self._logs.clear()


def _open_log(tx: _Tx) -> _Log:
    assert tx.log is not None  # Store calls row primitives only on a session that exists
    return tx.log


def _header(session_id: str, step_key: str, created: float, next_seq: int, meta: bytes) -> bytes:
    head = {
        "format": LOG_FORMAT,
        "version": SCHEMA_VERSION,
        "session_id": session_id,
        "step_key": step_key,
        "created": created,
        "generation": uuid.uuid4().hex,
        "next_seq": next_seq,
    }
    return _codec.dumps(head)[:-1] + b',"meta":' + meta + b"}\n"


def _record(seq: int, created: float, step: str | None, data: bytes, extra: bytes) -> bytes:
    return b"".join(
        (
            b'{"seq":',
            str(seq).encode(),
            b',"t":',
            repr(created).encode(),
            b',"s":',
            _codec.dumps(step),
            extra,
            _ITEM,
            data,
            b"}\n",
        )
    )


def _vector_record(seq: int, fields: str, vector: bytes) -> bytes:
    return _codec.dumps({"vec": [seq, fields, base64.b64encode(vector).decode("ascii")]}) + b"\n"


def _read_file(path: str, what: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError as exc:
        _refuse_link(path, what, exc)
        raise
    with os.fdopen(fd, "rb") as stream:
        return stream.read()


def _refuse_link(path: str, what: str, exc: OSError) -> None:
    """Raise a StoreError naming ``path`` if ``exc`` says it is a symbolic link (O_NOFOLLOW)."""
    if exc.errno == errno.ELOOP:
        msg = (
            f"The JSONL store {what} {path!r} is a symbolic link; kvmemory does not follow links "
            "inside a store (a link could point its writes at another file). Replace the link "
            "with the file itself."
        )
        raise StoreError(msg) from exc
