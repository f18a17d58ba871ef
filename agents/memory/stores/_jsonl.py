"""The JSONL log store: one append-only log file per session.

A store is a directory::

    kvmemory-store.json       {"format": "kvmemory.jsonl-store", "version": 1}
    kvmemory-store.lock       taken (flock) by every writer, shared by readers
    <session_id>.jsonl        the log of one session

Each log starts with a header line, then one record per line::

    {"format":"kvmemory.jsonl-log","version":1,"session_id":"run-1","step_key":"step","created":...}
    {"seq":1,"t":1732250000.1,"s":"1","item":{"step":1,"action":"click"}}   an appended item
    {"seq":1,"t":1732250000.1,"s":"1","u":1,"item":{...}}                  new fields for item 1
    {"del":[1,2]}                                                            items deleted
    {"clear":1}                                                              every item deleted

``item`` is the codec's wire form of the item, byte for byte. Appending
writes the records of one call with a single ``write`` to the end of the
file, then flushes it to disk with ``fsync`` unless the store was opened
with ``?fsync=never``. Existing lines are never rewritten by an append.

A crash in the middle of a write can leave a truncated last line. Readers
skip it with a ``SkippedRecordWarning`` naming the file and line, keeping
every complete line before it; the next writer cuts it off before appending.
Deleting leaves tombstones; once they outnumber the live items, the log is
compacted: the live items are written to a new file that atomically replaces
the old one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Final

import attrs

from agents.memory import _codec
from agents.memory.exceptions import (
    CorruptSessionError,
    CorruptStoreError,
    SchemaVersionError,
    SkippedRecordWarning,
    StoreError,
)
from agents.memory.stores._base import BaseStore, Row, check_session_id

__all__ = ["JSONLStore"]

STORE_FORMAT: Final = "kvmemory.jsonl-store"
LOG_FORMAT: Final = "kvmemory.jsonl-log"
SCHEMA_VERSION: Final = 1
_MARKER: Final = "kvmemory-store.json"
_LOCK: Final = "kvmemory-store.lock"
_ITEM: Final = b',"item":'
_COMPACT_MIN_DEAD: Final = 32


@attrs.define
class _Log:
    """What this process knows of one session log, read up to ``offset``."""

    ino: int
    step_key: str
    offset: int = 0
    lines: int = 0
    next_seq: int = 1
    dead: int = 0
    rows: dict[int, tuple[str | None, float, bytes]] = attrs.Factory(dict)
    partial_at: int = 0


class JSONLStore(BaseStore):
    """Sessions as append-only JSONL logs in one directory.

    Args:
        directory: The store directory; created when missing.
        fsync: Flush every append to disk with ``fsync`` (default); ``False``
            leaves it to the operating system (a process crash loses nothing,
            a power cut can lose recent appends).
        url: The URL to report in messages.

    Raises:
        CorruptStoreError: if the directory's marker file is not a kvmemory store's.
        SchemaVersionError: if a newer kvmemory wrote the store.
        StoreError: if the directory cannot be created.
    """

    schema_version = SCHEMA_VERSION

    def __init__(
        self, directory: str | os.PathLike[str], *, fsync: bool = True, url: str | None = None
    ) -> None:
        self.directory = os.fspath(directory)
        super().__init__(url or f"jsonl:///{self.directory}")
        self.fsync = fsync
        self._logs: dict[str, _Log] = {}
        self._tlock = threading.RLock()
        self._depth = 0
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            msg = f"Cannot create the JSONL store directory {self.directory!r}: {exc}."
            raise StoreError(msg) from exc
        self._lock_fd = os.open(os.path.join(self.directory, _LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._check_marker()
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _check_marker(self) -> None:
        path = os.path.join(self.directory, _MARKER)
        with self._locked(exclusive=True):
            if not os.path.exists(path):
                doc = {"format": STORE_FORMAT, "version": SCHEMA_VERSION}
                _codec.atomic_write(path, [_codec.dumps(doc)])
                return
            with open(path, "rb") as stream:
                data = stream.read()
        try:
            doc = _codec.loads(data, source=f"JSONL store marker {path!r}")
        except CorruptSessionError as exc:
            raise CorruptStoreError(str(exc)) from exc
        if type(doc) is not dict or doc.get("format") != STORE_FORMAT:
            msg = f"{path!r} is not a kvmemory JSONL store marker; point the URL at another directory."
            raise CorruptStoreError(msg)
        version = doc.get("version")
        if type(version) is not int or version > SCHEMA_VERSION:
            msg = f"JSONL store {self.directory!r} has layout version {version!r}, newer than the {SCHEMA_VERSION} this kvmemory writes; upgrade kvmemory to open it."
            raise SchemaVersionError(msg)

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
            stat = os.stat(path)
        except FileNotFoundError:
            self._logs.pop(session_id, None)
            return None
        log = self._logs.get(session_id)
        if log is None or log.ino != stat.st_ino or stat.st_size < log.offset:
            log = None
        elif stat.st_size == log.offset:
            return log
        with open(path, "rb") as stream:
            if log is not None:
                stream.seek(log.offset)
            chunk = stream.read()
        if log is None:
            log = self._read_header(session_id, path, chunk, stat.st_ino)
            chunk = chunk[log.offset :]
        self._apply(path, log, chunk)
        self._logs[session_id] = log
        return log

    def _read_header(self, session_id: str, path: str, chunk: bytes, ino: int) -> _Log:
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
        version = header.get("version")
        if type(version) is not int or version > SCHEMA_VERSION:
            msg = f"JSONL log {path!r} has layout version {version!r}, newer than the {SCHEMA_VERSION} this kvmemory writes; upgrade kvmemory to open it."
            raise SchemaVersionError(msg)
        if header.get("session_id") != session_id:
            msg = f"JSONL log {path!r} holds session {header.get('session_id')!r}, not {session_id!r}; the file was renamed by hand."
            raise CorruptStoreError(msg)
        next_seq = header.get("next_seq", 1)
        return _Log(
            ino=ino,
            step_key=str(header.get("step_key")),
            offset=end + 1,
            lines=1,
            next_seq=next_seq if type(next_seq) is int else 1,
        )

    def _apply(self, path: str, log: _Log, chunk: bytes) -> None:
        lines = chunk.split(b"\n")
        tail = lines.pop()  # after the last newline: b"" when the log ends cleanly
        rows = log.rows
        for line in lines:
            log.lines += 1
            if not line.strip():
                continue
            cut = line.find(_ITEM)
            try:
                head = _codec.loads(
                    line[:cut] + b"}" if cut >= 0 else line,
                    source=f"line {log.lines} of JSONL log {path!r}",
                )
                if cut >= 0:
                    seq = head["seq"]
                    data = line[cut + len(_ITEM) : -1]
                    if head.get("u"):
                        old = rows.get(seq)
                        if old is not None:
                            rows[seq] = (head["s"], old[1], data)
                        log.dead += 1
                    else:
                        rows[seq] = (head["s"], head["t"], data)
                        log.next_seq = max(log.next_seq, seq + 1)
                elif "del" in head:
                    for seq in head["del"]:
                        if rows.pop(seq, None) is not None:
                            log.dead += 1
                elif "clear" in head:
                    log.dead += len(rows)
                    rows.clear()
                else:
                    msg = f"line {log.lines} of JSONL log {path!r} is not a record this kvmemory knows ({line[:80]!r})"
                    raise CorruptSessionError(msg)
            except (CorruptSessionError, KeyError, TypeError) as exc:
                msg = f"Cannot read line {log.lines} of JSONL log {path!r}: {exc}; the log is damaged in the middle (not a crash at the end). Restore it from a backup."
                raise CorruptStoreError(msg) from exc
        log.offset += len(chunk) - len(tail)
        if tail:
            if log.partial_at != log.lines + 1:
                warnings.warn(
                    f"JSONL log {path!r} ends with a truncated line {log.lines + 1} "
                    f"({len(tail)} bytes, left by a crash during an append); it was skipped, "
                    "and every complete line before it was kept.",
                    SkippedRecordWarning,
                    stacklevel=5,
                )
            log.partial_at = log.lines + 1

    # -- writing ---------------------------------------------------------------------

    def _append_bytes(self, session_id: str, log: _Log | None, data: bytes) -> None:
        path = self._path(session_id)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if log is not None and log.partial_at:
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
        if log is not None:
            log.offset += len(data)
            log.lines += data.count(b"\n")

    def _new_log(self, session_id: str, step_key: str) -> _Log:
        header = {
            "format": LOG_FORMAT,
            "version": SCHEMA_VERSION,
            "session_id": session_id,
            "step_key": step_key,
            "created": time.time(),
        }
        line = _codec.dumps(header) + b"\n"
        path = self._path(session_id)
        _codec.atomic_write(path, [line])
        log = _Log(ino=os.stat(path).st_ino, step_key=step_key, offset=len(line), lines=1)
        self._logs[session_id] = log
        return log

    def _guard(
        self, action: str, session_id: str | None
    ) -> contextlib.AbstractContextManager[None]:
        return _os_errors(self, action, session_id)

    def _write(
        self,
        session_id: str,
        step_key: str,
        *,
        add: Sequence[Row] = (),
        delete: Sequence[int] = (),
        update: Sequence[tuple[int, str | None, bytes]] = (),
        clear: bool = False,
    ) -> tuple[list[int], int]:
        dumps = _codec.dumps
        with self._guard("write to", session_id), self._locked(exclusive=True):
            log = self._log(session_id)
            if log is None:
                if not add:
                    return [], 0
                log = self._new_log(session_id, step_key)
            elif add and log.step_key != step_key:
                msg = (
                    f"Session {session_id!r} of JSONL store {self.directory!r} files steps under "
                    f"{log.step_key!r}, not {step_key!r}; open it with step_key={log.step_key!r}. Nothing was written."
                )
                raise StoreError(msg)
            parts: list[bytes] = []
            if clear and log.rows:
                parts.append(b'{"clear":1}\n')
            present = {} if clear else log.rows
            gone = [seq for seq in delete if seq in present]
            if gone:
                parts.append(b'{"del":' + dumps(gone) + b"}\n")
            gone_set = set(gone)
            for seq, step, data in update:
                if seq in present and seq not in gone_set:
                    created = present[seq][1]
                    parts.append(_record(seq, created, step, data, b',"u":1'))
            start = log.next_seq
            for offset, (step, created, data) in enumerate(add):
                parts.append(_record(start + offset, created, step, data, b""))
            if parts:
                self._append_bytes(session_id, log, b"".join(parts))
            # Apply to this process's view exactly as a reader of the file would.
            if clear:
                log.dead += len(log.rows)
                log.rows.clear()
            for seq in gone:
                del log.rows[seq]
            log.dead += len(gone)
            for seq, step, data in update:
                row = log.rows.get(seq)
                if row is not None:
                    log.rows[seq] = (step, row[1], data)
                    log.dead += 1
            for offset, row in enumerate(add):
                log.rows[start + offset] = row
            log.next_seq = start + len(add)
            self._maybe_compact(session_id, log)
            return list(range(start, start + len(add))), len(gone)

    def _maybe_compact(self, session_id: str, log: _Log) -> None:
        if log.dead >= _COMPACT_MIN_DEAD and log.dead > len(log.rows):
            self._compact(session_id, log)

    def _compact(self, session_id: str, log: _Log) -> None:
        header = {
            "format": LOG_FORMAT,
            "version": SCHEMA_VERSION,
            "session_id": session_id,
            "step_key": log.step_key,
            "created": time.time(),
            # Seqs are never reused, even for items the compaction drops.
            "next_seq": log.next_seq,
        }
        chunks = [_codec.dumps(header) + b"\n"]
        for seq, (step, created, data) in log.rows.items():
            chunks.append(_record(seq, created, step, data, b""))
        path = self._path(session_id)
        _codec.atomic_write(path, chunks)
        fresh = self._log_from_scratch(session_id)
        self._logs[session_id] = fresh

    def _log_from_scratch(self, session_id: str) -> _Log:
        self._logs.pop(session_id, None)
        log = self._log(session_id)
        assert log is not None  # just written
        return log

    def compact(self, session_id: str) -> None:
        """Rewrite a session's log without its deleted items, atomically.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the log cannot be written; the old log stays as it was.
        """
        sid = self._check(session_id)
        with self._guard("compact", sid), self._locked(exclusive=True):
            log = self._log(sid)
            if log is not None:
                self._compact(sid, log)

    # -- primitives --------------------------------------------------------------------

    def _snapshot(self, session_id: str) -> _Log | None:
        with self._guard("read", session_id), self._locked(exclusive=False):
            return self._log(session_id)

    def _fetch(
        self, session_id: str, *, steps: Sequence[str] | None, after: int | None
    ) -> list[tuple[int, bytes]]:
        with self._guard("read", session_id), self._locked(exclusive=False):
            log = self._log(session_id)
            if log is None:
                return []
            wanted = None if steps is None else frozenset(steps)
            low = -1 if after is None else after
            return [
                (seq, data)
                for seq, (step, _, data) in log.rows.items()
                if seq > low and (wanted is None or step in wanted)
            ]

    def _count(self, session_id: str) -> int:
        log = self._snapshot(session_id)
        return 0 if log is None else len(log.rows)

    def _select(self, session_id: str, pick: Any) -> list[int]:
        with self._guard("delete from", session_id), self._locked(exclusive=True):
            log = self._log(session_id)
            if log is None:
                return []
            seqs: list[int] = pick(log)
            if seqs:
                self._write(session_id, log.step_key, delete=seqs)
            return seqs

    def _delete_steps(self, session_id: str, steps: Sequence[str]) -> list[int]:
        wanted = frozenset(steps)
        return self._select(
            session_id, lambda log: [s for s, row in log.rows.items() if row[0] in wanted]
        )

    def _clear(self, session_id: str) -> int:
        with self._guard("clear", session_id), self._locked(exclusive=True):
            log = self._log(session_id)
            if log is None:
                return 0
            count = len(log.rows)
            self._write(session_id, log.step_key, clear=True)
            return count

    def _sessions(self) -> list[str]:
        with self._guard("list sessions of", None):
            names = os.listdir(self.directory)
        out = []
        for name in names:
            if name.endswith(".jsonl") and not name.startswith("."):
                sid = name[: -len(".jsonl")]
                with contextlib.suppress(ValueError):
                    out.append(check_session_id(sid))
        return sorted(out)

    def _delete_session(self, session_id: str) -> bool:
        with self._guard("delete", session_id), self._locked(exclusive=True):
            self._logs.pop(session_id, None)
            try:
                os.unlink(self._path(session_id))
            except FileNotFoundError:
                return False
            return True

    def _keep_last(self, session_id: str, n: int) -> list[int]:
        def pick(log: _Log) -> list[int]:
            seqs = list(log.rows)
            return seqs[: max(len(seqs) - n, 0)]

        return self._select(session_id, pick)

    def _expire(self, session_id: str, cutoff: float) -> list[int]:
        return self._select(
            session_id, lambda log: [s for s, row in log.rows.items() if row[1] < cutoff]
        )

    def _close(self) -> None:
        with self._tlock:
            os.close(self._lock_fd)
            self._logs.clear()


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


@contextlib.contextmanager
def _os_errors(store: JSONLStore, action: str, session_id: str | None) -> Iterator[None]:
    try:
        yield
    except StoreError:
        raise
    except OSError as exc:
        where = f" session {session_id!r} of" if session_id else ""
        msg = f"Cannot {action}{where} JSONL store {store.directory!r}: {exc}; nothing was changed."
        raise StoreError(msg) from exc
