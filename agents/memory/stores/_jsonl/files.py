"""The directory of a JSONL store: its marker, its lock, its migrations and the small files beside the logs.

:class:`StoreFiles` opens a store directory (read-only, or writable:
created, checked for foreign files, migrated), holds the store's lock and
owns the names of the files in it. The logs themselves are read and written
by :mod:`agents.memory.stores._jsonl.log`; the layout is described in
:mod:`agents.memory.stores._jsonl.backend`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Final, TypeVar

from agents.memory import _codec
from agents.memory.exceptions import (
    CorruptSessionError,
    CorruptStoreError,
    StoreError,
    StoreNotFoundError,
)
from agents.memory.stores._core.checks import check_session_id
from agents.memory.stores._core.migrations import check_schema_version, migrate

__all__ = ["NOFOLLOW", "STORE_FORMAT", "StoreFiles", "open_file", "pread", "read_file"]

STORE_FORMAT: Final = "kvmemory.jsonl-store"
_MARKER: Final = "kvmemory-store.json"
_LOCK: Final = "kvmemory-store.lock"

NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
"""Flags every file of a store is opened with: symbolic links are refused, and fds are not inherited."""

T = TypeVar("T")


class StoreFiles:
    """The files of one JSONL store directory, and the lock every handle on it takes.

    Nothing is opened until :meth:`open_read_only` or :meth:`open_writable`;
    after either, :meth:`locked` serialises the handles on the store (and
    the threads of this one) and :meth:`close` lets the lock go.

    Args:
        directory: The store directory, already checked (``check_store_path``).
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.version = 0
        """The schema version of the store, once opened."""
        self._tlock = threading.RLock()
        self._depth = 0
        self._lock_fd = -1

    # -- opening ---------------------------------------------------------------------

    def open_read_only(self, newest: int) -> None:
        """Take the store as it is: its marker must be there and name a version up to ``newest``.

        Raises:
            StoreNotFoundError: if the directory has no marker.
            CorruptStoreError: if the marker is not a kvmemory JSONL store marker.
            SchemaVersionError: if the marker's version is newer than ``newest``.
            StoreError: if the lock file is a symbolic link.
            OSError: if the directory cannot be read.
        """
        marker = os.path.join(self.directory, _MARKER)
        if not os.path.isfile(marker):
            msg = f"{self.directory!r} is not a kvmemory JSONL store (no {_MARKER}); check the path. Nothing was created."
            raise StoreNotFoundError(msg)
        try:
            self._lock_fd = self._open_lock(os.O_RDONLY)
        except FileNotFoundError:
            # No lock file means no writer ever opened this copy; the marker stands in.
            self._lock_fd = os.open(marker, os.O_RDONLY | NOFOLLOW)
        try:
            with self.locked(exclusive=False):
                self.version = self._read_marker(newest)
        except BaseException:
            os.close(self._lock_fd)
            raise

    def open_writable(self, migrations: Sequence[Callable[[T], None]], target: T) -> None:
        """Create the store directory if needed and bring it to version ``len(migrations)``.

        The missing migration steps run on ``target`` under the exclusive
        lock (which they may take again: it is reentrant), then the marker
        records the version reached.

        Raises:
            StoreError: if the directory cannot be created, or the lock file is a symbolic link.
            CorruptStoreError: if the directory holds other files and no marker.
            SchemaVersionError: if a newer kvmemory wrote the store.
            OSError: if the directory cannot be read or written.
        """
        newest = len(migrations)
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
            with self.locked(exclusive=True):
                if os.path.lexists(marker):
                    found = self._read_marker(newest)
                else:
                    self._refuse_foreign_files()
                    found = 0
                if found < newest:
                    reached = migrate(
                        migrations, found, target, store=f"JSONL store {self.directory!r}"
                    )
                    doc = {"format": STORE_FORMAT, "version": reached}
                    _codec.atomic_write(marker, [_codec.dumps(doc)])
                self.version = newest
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
        return open_file(os.path.join(self.directory, _LOCK), flags, "lock file")

    def _read_marker(self, newest: int) -> int:
        path = os.path.join(self.directory, _MARKER)
        data = read_file(path, "marker")
        try:
            doc = _codec.loads(data, source=f"JSONL store marker {path!r}")
        except CorruptSessionError as exc:
            raise CorruptStoreError(str(exc)) from exc
        if type(doc) is not dict or doc.get("format") != STORE_FORMAT:
            msg = f"{path!r} is not a kvmemory JSONL store marker; point the URL at another directory."
            raise CorruptStoreError(msg)
        return check_schema_version(
            doc.get("version"), newest, store=f"JSONL store {self.directory!r}"
        )

    # -- locking ---------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, *, exclusive: bool) -> Iterator[None]:
        """Hold the store's lock (``flock``) and this handle's thread lock for the ``with`` block.

        The thread lock is reentrant; the file lock is taken by the outermost
        call only, so a caller that writes while holding it takes it
        ``exclusive`` from the start.

        Args:
            exclusive: Keep every other handle out (writers); else share it (readers).
        """
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

    def close(self) -> None:
        """Let the lock go, once no thread of this handle holds it."""
        with self._tlock:
            os.close(self._lock_fd)

    # -- the files of sessions -----------------------------------------------------------

    def log_path(self, session_id: str) -> str:
        """Return the path of a session's log."""
        return os.path.join(self.directory, f"{session_id}.jsonl")

    def session_ids(self) -> list[str]:
        """Return the ids of the sessions that have a log, sorted; other files are ignored."""
        out = []
        for name in os.listdir(self.directory):
            if name.endswith(".jsonl") and not name.startswith("."):
                sid = name[: -len(".jsonl")]
                with contextlib.suppress(ValueError):
                    out.append(check_session_id(sid))
        return sorted(out)

    def deleted_next_seq(self, session_id: str) -> int:
        """Return the seq a session created again must start from (1 if it was never deleted).

        Raises:
            CorruptStoreError: if the deleted-session record is damaged.
            StoreError: if it is a symbolic link.
        """
        path = self._deleted_path(session_id)
        try:
            data = read_file(path, "deleted-session record")
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

    def record_deleted(self, session_id: str, next_seq: int) -> None:
        """Write the deleted-session record: a session created again continues from ``next_seq``."""
        _codec.atomic_write(self._deleted_path(session_id), [_codec.dumps({"next_seq": next_seq})])

    def forget_deleted(self, session_id: str) -> None:
        """Remove the deleted-session record, once the session's new log holds its next seq."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._deleted_path(session_id))

    def _deleted_path(self, session_id: str) -> str:
        return os.path.join(self.directory, f"{session_id}.deleted")


def open_file(path: str, flags: int, what: str) -> int:
    """Open a file of the store without following a symbolic link (new files get ``0600``).

    Args:
        path: The file.
        flags: ``os.open`` flags; :data:`NOFOLLOW` is added.
        what: Names the file in the message (``"log"``, ``"lock file"``).

    Returns:
        The file descriptor.

    Raises:
        StoreError: if ``path`` is a symbolic link.
        OSError: if it cannot be opened otherwise (``FileNotFoundError`` included).
    """
    try:
        return os.open(path, flags | NOFOLLOW, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            msg = (
                f"The JSONL store {what} {path!r} is a symbolic link; kvmemory does not follow links "
                "inside a store (a link could point its writes at another file). Replace the link "
                "with the file itself."
            )
            raise StoreError(msg) from exc
        raise


def read_file(path: str, what: str) -> bytes:
    """Return the bytes of a file of the store, refusing a symbolic link as :func:`open_file` does."""
    with os.fdopen(open_file(path, os.O_RDONLY, what), "rb") as stream:
        return stream.read()


def pread(fd: int, start: int, end: int) -> bytes:
    """Return the bytes ``[start, end)`` of an open file (fewer if it is shorter).

    One ``os.pread`` may return fewer bytes than asked: Linux returns at most
    2,147,479,552 (0x7ffff000) a call, so a log over 2 GiB read in one call
    lost its tail (taken for a line cut by a crash). Read until ``end``.
    """
    out = []
    while start < end:
        got = os.pread(fd, end - start, start)
        if not got:
            break
        out.append(got)
        start += len(got)
    return b"".join(out)
