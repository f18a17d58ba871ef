"""The session logs of a JSONL store: their records, and this process's view of each log.

The records are described in :mod:`agents.memory.stores._jsonl.backend`. This module
writes them (:func:`item_record` and the other ``*_record`` functions) and
reads them back (:func:`read_header`, :func:`apply_records`) into a
:class:`SessionLog`, what this process knows of one log; :class:`SessionLogs`
keeps those views, follows each log as other handles append to it, and
writes logs (appends, new logs, compactions).
"""

from __future__ import annotations

import base64
import binascii
import collections
import hashlib
import os
import uuid
import warnings
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Final, TypeAlias

import attrs
import orjson

from agents.memory import _codec
from agents.memory.exceptions import (
    CorruptSessionError,
    CorruptStoreError,
    SkippedRecordWarning,
    StoreError,
)
from agents.memory.stores._core.migrations import check_schema_version
from agents.memory.stores._core.rows import RowTable
from agents.memory.stores._core.value_index import ValueIndex
from agents.memory.stores._jsonl import side_file
from agents.memory.stores._jsonl.files import StoreFiles, open_file, pread

__all__ = [
    "CLEAR_RECORD",
    "DROP_VECTORS_RECORD",
    "LOG_FORMAT",
    "SessionLog",
    "SessionLogs",
    "apply_records",
    "delete_record",
    "item_record",
    "log_digest",
    "meta_record",
    "model_record",
    "read_header",
    "read_item_at",
    "split_item_record",
    "vector_record",
]

LOG_FORMAT: Final = "kvmemory.jsonl-log"
_ITEM: Final = b',"item":'
_META: Final = b'{"meta":'
_HEADER_READ: Final = 1 << 16
"""The most bytes read for a log's header line where the rest of the log is not read (a stretch's changes)."""
_ITEM_READ: Final = 16384
"""How many bytes are read first for one record (the size of most): more until its newline."""

FiledIndex: TypeAlias = Callable[[str, str, bytes, int], "tuple[ValueIndex, int] | None"]
"""What gives a log read whole the value index of its rows up to an offset (:class:`SessionLogs`)."""

CLEAR_RECORD: Final = b'{"clear":1}\n'
"""The record that deletes every item of the session."""

DROP_VECTORS_RECORD: Final = b'{"vdrop":1}\n'
"""The record that drops every vector of the session and its model."""

STEPS_KEPT: Final = 4096
"""The stretches of logs a handle remembers the vector changes of, at most (:meth:`SessionLogs.vector_changes`)."""


@attrs.define
class SessionLog:
    """What this process knows of one session log, read up to ``offset``.

    ``header`` is the log's first line as read (its generation tells the
    same file from one written again), ``lines`` the lines read so far,
    ``dead`` the records that no longer describe a live item or vector (the
    measure of what compaction would save), ``partial_at`` the number of a
    truncated last line (0 if none), ``vectors`` maps fields -> seq -> the
    vector's bytes (empty for an item without text), ``offsets`` maps each
    live item's seq -> where the record holding its current bytes starts
    in the log (what the keyword index file records, to read hits alone).
    """

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
    vectors: dict[str, dict[int, bytes]] = attrs.Factory(dict)
    offsets: dict[int, int] = attrs.Factory(dict)

    def deleted(self, seqs: Iterable[int]) -> None:
        """Forget the record offsets and vectors of items deleted (their rows gone already)."""
        seqs = list(seqs)
        for seq in seqs:
            self.offsets.pop(seq, None)
        self.drop_vectors_of(seqs)

    def drop_vectors_of(self, seqs: Iterable[int]) -> None:
        """Forget the vectors of items deleted or changed (their records imply it)."""
        for table in self.vectors.values():
            for seq in seqs:
                if table.pop(seq, None) is not None:
                    self.dead += 1


class SessionLogs:
    """This process's view of the logs of one store directory, kept up to date with the files.

    Every method expects the caller to hold the store's lock
    (:meth:`StoreFiles.locked`): shared to read, exclusive to write.

    Args:
        files: The store directory, opened.
        version: The schema version written into new log headers (and the newest one read).
        fsync: Flush every append to disk with ``fsync``.
        filed: Given ``(session_id, log_path, header, size)`` of a log about to be
            read whole, return the value index of its rows up to an offset and
            that offset (a line's end), or ``None``: the rows the records
            after it set are filed in that index, those before are not filed
            again.
    """

    def __init__(
        self, files: StoreFiles, *, version: int, fsync: bool, filed: FiledIndex | None = None
    ) -> None:
        self.files = files
        self.version = version
        self.fsync = fsync
        self.filed = filed
        """Where a log read whole takes its rows' value index from, up to an offset (a value file's), rather than filing each row."""
        self._logs: dict[str, SessionLog] = {}
        # Each stretch of a log this handle read or wrote: (session, header digest, offset at
        # its start) -> (header digest, offset at its end, the seqs whose vectors it changed or None
        # for all). A compaction is a stretch from the old log to the new one.
        self._steps: collections.OrderedDict[
            tuple[str, str, int], tuple[str, int, frozenset[int] | None]
        ] = collections.OrderedDict()

    def current(self, session_id: str) -> SessionLog | None:
        """Bring this process's view of a log up to date with the file; ``None`` if there is none.

        Raises:
            CorruptStoreError: if the log is damaged (a truncated last line only warns).
            StoreError: if the log is a symbolic link.
        """
        path = self.files.log_path(session_id)
        try:
            fd = open_file(path, os.O_RDONLY, "log")
        except FileNotFoundError:
            self._logs.pop(session_id, None)
            return None
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
            chunk = pread(fd, start, size)  # in several reads where it is over 2 GiB
        finally:
            os.close(fd)
        if log is None:
            log = read_header(session_id, path, chunk, newest=self.version)
            filed = None if self.filed is None else self.filed(session_id, path, log.header, size)
            if filed is not None and chunk[filed[1] - 1 : filed[1]] == b"\n":
                # The rows up to the offset the file covers are those its index filed.
                index, covered = filed
                log.rows.defer_filing()
                apply_records(path, log, chunk[log.offset : covered])
                log.rows.take_index(index)
                chunk = chunk[covered:]
            else:
                chunk = chunk[log.offset :]
            apply_records(path, log, chunk)
        else:
            changed = apply_records(path, log, chunk)
            if log.offset != start:
                self._step(session_id, (log.header, start), (log.header, log.offset), changed)
        self._logs[session_id] = log
        return log

    def _step(
        self,
        session_id: str,
        start: tuple[bytes, int],
        end: tuple[bytes, int],
        changed: Iterable[int] | None,
    ) -> None:
        """Remember that the log went from ``start`` to ``end`` (header, offset) changing the vectors of ``changed``."""
        seqs = None if changed is None else frozenset(changed)
        self._steps[(session_id, log_digest(start[0]), start[1])] = (
            log_digest(end[0]),
            end[1],
            seqs,
        )
        if len(self._steps) > STEPS_KEPT:
            self._steps.popitem(last=False)

    def vector_changes(self, session_id: str, since: Hashable, now: Hashable) -> set[int] | None:
        """Return the seqs whose vectors changed from one ``(header digest, offset, tail digest)`` of the log to another (:func:`log_digest`, :meth:`tail_digest`); ``None`` where this handle cannot tell.

        Every stretch of the log this handle appended or read (another
        handle's appends, read as it follows the file) is remembered with
        the seqs its records changed the vectors of, and this handle's own
        compactions lead from the old log to the new one. Where they do not
        lead from one to the other (a handle that has not read the log
        whole, a stretch forgotten), the log file is read from the one
        offset to the other where it is still the log of ``since``'s header
        and both versions are of it (one open of the file for that and the tail's check). ``None`` where
        neither tells (a log written anew, a damaged record), where a
        record dropped every vector, and where the log of ``since``'s header
        no longer ends, at ``since``'s offset, in the bytes it did (an older
        copy of the log put back and written again: the records after that
        offset are not those that followed it).
        """
        if not (
            isinstance(since, tuple)
            and isinstance(now, tuple)
            and len(since) == len(now) == 3
            and all(type(at) is int and 0 <= at < 2**63 for at in (since[1], now[1]))
        ):  # (an offset past 64 bits would raise as the file is read)
            return None
        header, offset = since[:2]
        changed: set[int] = set()
        walked = True
        while (header, offset) != now[:2]:
            step = self._steps.get((session_id, header, offset))
            if step is None:
                walked = False
                break
            header, offset, seqs = step
            if seqs is None:
                return None
            changed |= seqs
        if since[0] != now[0]:
            # Another log (a compaction's): no tail of since's to check, no records to read.
            return changed if walked else None
        # The tail check, and the records read where the steps did not lead to now: one open.
        path = self.files.log_path(session_id)
        try:
            fd = open_file(path, os.O_RDONLY, "log")
        except (OSError, StoreError):
            # (No tail read: a version whose tail could not be read either still holds.)
            return changed if walked and since[2] is None else None
        try:
            if _tail_digest(fd, since[1]) != since[2]:
                return None  # the log no longer ends at since as it did (an older copy put back)
            return changed if walked else _read_changes(fd, path, since, now)
        finally:
            os.close(fd)

    def tail_digest(self, session_id: str, offset: int) -> str | None:
        """Return the digest (:func:`log_digest`) of the session's log file's :data:`~agents.memory.stores._jsonl.side_file.TAIL` bytes before ``offset`` as they are now; ``None`` where they cannot be read whole.

        With the header's digest and the offset it makes a vectors version
        (``LogVectorReads.vectors_version``): a log put back to an older
        copy of itself and written again to the same length holds other
        bytes before it, as the side files check (``side_file.same_tail``).
        """
        try:
            fd = open_file(self.files.log_path(session_id), os.O_RDONLY, "log")
        except (OSError, StoreError):
            return None
        try:
            return _tail_digest(fd, offset)
        finally:
            os.close(fd)

    def as_of(self, session_id: str, header: bytes, offset: int) -> SessionLog | None:
        """Return the session's log as it was up to ``offset`` (a line's end), read from the file apart from this process's view; ``None`` where the file is no longer that log (removed, written anew: another ``header``, or shorter).

        Raises:
            CorruptStoreError: if the log is damaged before ``offset``.
        """
        path = self.files.log_path(session_id)
        try:
            fd = open_file(path, os.O_RDONLY, "log")
        except (OSError, StoreError):
            return None
        try:
            if os.fstat(fd).st_size < offset or os.pread(fd, len(header), 0) != header:
                return None
            chunk = pread(fd, 0, offset)
        finally:
            os.close(fd)
        log = read_header(session_id, path, chunk, newest=self.version)
        apply_records(path, log, chunk[log.offset :])
        return log

    def viewed(self, session_id: str) -> bool:
        """Return whether this process holds a view of the session's log (read it whole once)."""
        return session_id in self._logs

    def keep(self, session_id: str, log: SessionLog) -> None:
        """Take ``log`` as this process's view of the session (written to the file by the caller)."""
        self._logs[session_id] = log

    def forget(self, session_id: str) -> None:
        """Drop the view of a session, so that it is read afresh from the file."""
        self._logs.pop(session_id, None)

    def clear(self) -> None:
        """Drop every view."""
        self._logs.clear()

    def new_log(self, session_id: str, step_key: str, created: float, next_seq: int) -> SessionLog:
        """Return the view of a new empty log (with a new generation); :meth:`write_new` writes it."""
        header = _header(session_id, step_key, created, next_seq, b"{}", self.version)
        return SessionLog(header=header, step_key=step_key, created=created, next_seq=next_seq)

    def write_new(self, session_id: str, log: SessionLog, records: Sequence[bytes]) -> None:
        """Write a new log, its header and ``records``, atomically replacing any file of the session."""
        _codec.atomic_write(self.files.log_path(session_id), [log.header, *records])
        log.offset = len(log.header) + sum(map(len, records))
        log.lines = 1 + sum(part.count(b"\n") for part in records)

    def append(
        self, session_id: str, log: SessionLog, data: bytes, changed: Iterable[int] | None
    ) -> None:
        """Append whole records to a log with one ``write`` (and ``fsync``), after the view ``log``; they change the vectors of ``changed`` (``None``: all)."""
        start = log.offset
        fd = open_file(self.files.log_path(session_id), os.O_WRONLY | os.O_APPEND, "log")
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
        self._step(session_id, (log.header, start), (log.header, log.offset), changed)

    def compact(self, session_id: str, log: SessionLog) -> None:
        """Rewrite a log with only its live items and vectors, atomically, and keep the new view."""
        # Seqs are never reused, even for items the compaction drops: next_seq goes in the header.
        header = _header(
            session_id, log.step_key, log.created, log.next_seq, log.metadata, self.version
        )
        chunks = [header]
        keys = log.rows.keys_by_seq
        offsets: dict[int, int] = {}
        at = len(header)
        for seq, (step, created, data) in log.rows.items():
            chunks.append(item_record(seq, created, step, data, key=keys.get(seq)))
            offsets[seq] = at
            at += len(chunks[-1])
        if log.model is not None:
            chunks.append(model_record(*log.model))
        for fields, table in log.vectors.items():
            chunks.extend(
                vector_record(seq, fields, vector)
                for seq, vector in table.items()
                if seq in log.rows
            )
        _codec.atomic_write(self.files.log_path(session_id), chunks)
        offset = sum(map(len, chunks))
        # The vectors of items no longer in the log are left out: they changed (went).
        gone = {seq for table in log.vectors.values() for seq in table if seq not in log.rows}
        self._step(session_id, (log.header, log.offset), (header, offset), gone)
        self._logs[session_id] = SessionLog(
            header=header,
            step_key=log.step_key,
            created=log.created,
            offset=offset,
            lines=len(chunks),
            next_seq=log.next_seq,
            metadata=log.metadata,
            # The same rows: their value index is taken over (``log`` is dropped).
            rows=RowTable(log.rows.items(), keys, index=log.rows.value_index),
            model=log.model,
            offsets=offsets,
            vectors={
                fields: {seq: vector for seq, vector in table.items() if seq in log.rows}
                for fields, table in log.vectors.items()
            },
        )


def _tail_digest(fd: int, offset: int) -> str | None:
    """Return the digest of the open log's :data:`~agents.memory.stores._jsonl.side_file.TAIL` bytes before ``offset``; ``None`` where they cannot be read whole."""
    try:
        tail = pread(fd, max(0, offset - side_file.TAIL), offset)
    except OSError:
        return None
    return log_digest(tail) if len(tail) == min(offset, side_file.TAIL) else None


def _read_changes(
    fd: int, path: str, since: tuple[object, int, object], now: tuple[object, int, object]
) -> set[int] | None:
    """Return the seqs whose vectors the open log's records from ``since``'s offset to ``now``'s changed, read from the file; ``None`` where the file no longer starts with their header, the stretch is over a quarter of the log (as many items' vectors to read again as to read them all), or a record is not whole or not read."""
    if since[0] != now[0] or not 0 < since[1] <= now[1] or now[1] - since[1] > now[1] // 4:
        return None
    try:
        first = pread(fd, 0, min(since[1], _HEADER_READ))
        cut = first.find(b"\n")
        if cut < 0 or log_digest(first[: cut + 1]) != since[0]:
            return None
        chunk = pread(fd, since[1] - 1, now[1])
    except OSError:
        return None
    if len(chunk) != now[1] - since[1] + 1 or chunk[:1] != b"\n" or chunk[-1:] != b"\n":
        return None  # not a stretch of whole lines of this log (cut, or written anew)
    scratch = SessionLog(header=first[: cut + 1], step_key="", created=0.0, offset=since[1])
    try:
        return apply_records(path, scratch, chunk[1:])
    except CorruptStoreError:
        return None


def log_digest(data: bytes) -> str:
    """Return the short digest that names bytes of a log in a vectors version: its header line (and so its generation), and the :data:`~agents.memory.stores._jsonl.side_file.TAIL` bytes before its length. A version holds digests rather than the bytes, since a coded file's tag keeps its ``repr``."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


# -- writing records ---------------------------------------------------------------------


def _header(
    session_id: str, step_key: str, created: float, next_seq: int, meta: bytes, version: int
) -> bytes:
    head = {
        "format": LOG_FORMAT,
        "version": version,
        "session_id": session_id,
        "step_key": step_key,
        "created": created,
        "generation": uuid.uuid4().hex,
        "next_seq": next_seq,
    }
    return _codec.dumps(head)[:-1] + b',"meta":' + meta + b"}\n"


def item_record(
    seq: int,
    created: float,
    step: str | None,
    data: bytes,
    *,
    update: bool = False,
    key: str | None = None,
) -> bytes:
    """Return the record of item ``seq`` (``data`` is its codec bytes); ``update`` marks new fields of an item, ``key`` files it as a record."""
    return b"".join(
        (
            b'{"seq":',
            str(seq).encode(),
            b',"t":',
            repr(created).encode(),
            b',"s":',
            _codec.dumps(step),
            b',"u":1' if update else b"",
            b"" if key is None else b',"k":' + _codec.dumps(key),
            _ITEM,
            data,
            b"}\n",
        )
    )


def meta_record(metadata: bytes) -> bytes:
    """Return the record that sets the session's metadata (the codec's bytes of it)."""
    return _META + metadata + b"}\n"


def delete_record(seqs: Sequence[int]) -> bytes:
    """Return the record that deletes the items ``seqs``."""
    return b'{"del":' + _codec.dumps(seqs) + b"}\n"


def model_record(model: str, dimension: int) -> bytes:
    """Return the record that names the model of the session's vectors."""
    return _codec.dumps({"vm": [model, dimension]}) + b"\n"


def vector_record(seq: int, fields: str, vector: bytes) -> bytes:
    """Return the record of item ``seq``'s vector over ``fields`` (float32 bytes, written as base64)."""
    return _codec.dumps({"vec": [seq, fields, base64.b64encode(vector).decode("ascii")]}) + b"\n"


# -- reading records ---------------------------------------------------------------------


def vector_of(vec: object) -> tuple[int, str, bytes]:
    """Return ``(seq, fields, vector bytes)`` of a ``"vec"`` record's value.

    Raises:
        CorruptSessionError: if it is not ``[seq, fields, base64 text]``.
    """
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
        return vec[0], vec[1], base64.b64decode(vec[2], validate=True)
    except binascii.Error as exc:
        msg = f'the "vec" record of item {vec[0]} holds text that is not base64 ({exc})'
        raise CorruptSessionError(msg) from exc


def model_of(model: object) -> tuple[str, int]:
    """Return ``(model name, dimension)`` of a ``"vm"`` record's value.

    Raises:
        CorruptSessionError: if it is not ``[model name, dimension]``.
    """
    if not (
        type(model) is list and len(model) == 2 and type(model[0]) is str and type(model[1]) is int
    ):
        msg = f'the "vm" record holds {model!r}; expected [model name, dimension]'
        raise CorruptSessionError(msg)
    return model[0], model[1]


def read_header(session_id: str, path: str, chunk: bytes, *, newest: int) -> SessionLog:
    """Return the view of a log whose bytes start with ``chunk``, read up to its header line.

    Raises:
        CorruptStoreError: if the header line is missing, damaged, of another
            session or of a schema version newer than ``newest``.
    """
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
    check_schema_version(header.get("version"), newest, store=f"JSONL log {path!r}")
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
    return SessionLog(
        header=chunk[: end + 1],
        step_key=step_key,
        created=float(created),
        offset=end + 1,
        lines=1,
        next_seq=next_seq,
        metadata=_codec.dumps(meta),
    )


def apply_records(path: str, log: SessionLog, chunk: bytes) -> set[int] | None:
    """Read the records in ``chunk``, the bytes of the log after ``log.offset``, into ``log``; return the seqs whose vectors they changed (``None``: every item's).

    A truncated last line is left unread (``log.partial_at`` names it) with
    a :class:`~agents.memory.SkippedRecordWarning`, once per line.

    Raises:
        CorruptStoreError: if a complete line is not a record.
    """
    lines = chunk.split(b"\n")
    tail = lines.pop()  # after the last newline: b"" when the log ends cleanly
    rows = log.rows
    changed: set[int] | None = set()
    at = log.offset  # where the next line starts
    for line in lines:
        log.lines += 1
        start, at = at, at + len(line) + 1
        if not line.strip():
            continue
        where = f"line {log.lines} of JSONL log {path!r}"
        try:
            seqs = _apply_line(where, log, rows, line, start)
        except CorruptSessionError as exc:
            msg = f"Cannot read {where}: {exc}; the log is damaged in the middle (not a crash at the end). Restore it from a backup."
            raise CorruptStoreError(msg) from exc
        if seqs is None or changed is None:
            changed = None
        else:
            changed.update(seqs)
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
    return changed


def split_item_record(line: bytes) -> tuple[bytes, bytes] | None:
    """Return an item record's fields before its item (as a JSON object) and the item's bytes; ``None`` for another record.

    ``line`` is one line of a log, without its newline.
    """
    cut = line.find(_ITEM) if line.startswith(b'{"seq":') else -1
    if cut < 0:
        return None
    return line[:cut] + b"}", line[cut + len(_ITEM) : -1]


def read_item_at(fd: int, at: int, seq: int, end: int) -> bytes | None:
    """Return the item bytes of the record of item ``seq`` that starts at byte ``at`` of a log, read from ``fd`` before ``end``; ``None`` if it is not one.

    The line there must be a whole item record (ending before ``end``)
    whose fields parse, of item ``seq``: anything else (an offset from a
    stale or damaged keyword file) is ``None``, and the caller reads the
    log whole instead.
    """
    if not 0 < at < end:
        return None
    size = _ITEM_READ
    while True:
        chunk = os.pread(fd, min(size, end - at), at)
        cut = chunk.find(b"\n")
        if cut >= 0 or at + len(chunk) >= end or not chunk:
            break
        size *= 4
    if cut < 0:
        return None
    split = split_item_record(chunk[:cut])
    if split is None:
        return None
    try:
        head = orjson.loads(split[0])
    except orjson.JSONDecodeError:
        return None
    if type(head) is not dict or head.get("seq") != seq or type(head.get("seq")) is not int:
        return None
    return split[1]


def _apply_line(
    where: str, log: SessionLog, rows: RowTable, line: bytes, at: int
) -> Iterable[int] | None:
    """Read one record into ``log`` (the line starts at byte ``at`` of the log); return the seqs whose vectors it changed (``None``: every item's)."""
    # In an item record the first ',"item":' is its key: the fields before it are
    # numbers and JSON strings, in which a quote is always escaped.
    cut = line.find(_ITEM) if line.startswith(b'{"seq":') else -1
    head = _codec.loads(line[:cut] + b"}" if cut >= 0 else line, source=where)
    if type(head) is not dict:
        msg = f"{where} is a JSON {type(head).__name__}, not a record"
        raise CorruptSessionError(msg)
    if cut >= 0:
        seq, created, step, key = head.get("seq"), head.get("t"), head.get("s"), head.get("k")
        if (
            type(seq) is not int
            or not isinstance(created, (int, float))
            or not (step is None or type(step) is str)
            or not (key is None or (type(key) is str and key))
        ):
            msg = f"the item record holds seq {seq!r}, t {created!r}, s {step!r} and k {key!r}; expected an int, a number, text or null, and a non-empty key or none"
            raise CorruptSessionError(msg)
        data = line[cut + len(_ITEM) : -1]
        if head.get("u"):
            old = rows.get(seq)
            if old is not None:
                rows[seq] = (step, old[1], data)
                log.offsets[seq] = at
            log.dead += 1
            log.drop_vectors_of((seq,))
            return (seq,)
        rows[seq] = (step, float(created), data)
        log.offsets[seq] = at
        if key is not None:
            rows.file_key(seq, key)
        log.next_seq = max(log.next_seq, seq + 1)
        return ()
    if "del" in head:
        gone = head["del"]
        if type(gone) is not list or any(type(seq) is not int for seq in gone):
            msg = f'the "del" record holds {gone!r}; expected a list of int seqs'
            raise CorruptSessionError(msg)
        for seq in gone:
            if rows.discard(seq):
                log.dead += 1
        log.deleted(gone)
        return gone
    if "clear" in head:
        log.dead += len(rows)
        rows.clear()
        log.offsets.clear()
        return None
    if "vec" in head:
        seq, fields, vector = vector_of(head["vec"])
        table = log.vectors.setdefault(fields, {})
        if seq in table:
            log.dead += 1
        table[seq] = vector
        return (seq,)
    if "vm" in head:
        log.model = model_of(head["vm"])
        return ()
    if "vdrop" in head:
        log.dead += sum(map(len, log.vectors.values())) + 1
        log.vectors = {}
        log.model = None
        return None
    if "meta" in head:
        if type(head["meta"]) is not dict:
            msg = f'the "meta" record holds a {type(head["meta"]).__name__}; expected an object'
            raise CorruptSessionError(msg)
        log.metadata = (
            line[len(_META) : -1] if line.startswith(_META) else _codec.dumps(head["meta"])
        )
        return ()
    msg = f"it is not a record this kvmemory knows ({line[:80]!r})"
    raise CorruptSessionError(msg)
