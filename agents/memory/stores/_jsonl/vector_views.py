"""The vector files beside the logs of a store: when a handle reads one, follows it, and saves it.

A handle that holds no view of a session's log (it has not read it whole)
answers a semantic query's calls (the model, the item and vector counts, the
vectors, the hits' rows by their record offsets) from ``<session_id>.vectors``
(:mod:`agents.memory.stores._jsonl.vector_file`), caught up with the log file
as it is at each call: the log's length and header are looked at, and the
records appended since the file are followed. Where that takes reading the
log (no file, a file that does not check out, a line cut short, a record not
followed) the caller reads the log whole, as at any other first read.

A writable handle saves the file when it reads a session's vectors whole
(a semantic query's first, :meth:`SessionVectors.save_due`) and the file is
missing, of another version or log, damaged where its load checks, or
behind the log by more than :data:`SAVE_BYTES` (or a 64th of the log);
from a view it followed that far, as it follows it; and from a view of a
version 1 file, as it loads it (read as that version was, served, and saved
in version 2). A read-only handle never writes it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Final

from agents.memory import _codec
from agents.memory.exceptions import StoreError
from agents.memory.stores._jsonl import side_file
from agents.memory.stores._jsonl.files import open_file, pread
from agents.memory.stores._jsonl.keyword_index import numpy_module
from agents.memory.stores._jsonl.log import SessionLog
from agents.memory.stores._jsonl.vector_file import (
    DamagedVectorFileError,
    VectorView,
    covered,
    file_bytes,
    load,
)
from agents.memory.stores._search.coded_file import coded_name, remove_coded

__all__ = ["CODED_FOLDER", "SAVE_BYTES", "SessionVectors"]

CODED_FOLDER: Final = "kvmemory-coded"
"""The folder of the store directory that holds the sessions' coded part vectors (``agents.memory.stores._search.coded_file``), one file a session and fields."""

SAVE_BYTES: Final = 1 << 20
"""Bytes of log past the file after which a writable handle saves it again (or a 64th of the log, if more)."""
_HEADER_READ: Final = 65536


class SessionVectors:
    """This handle's vector files of the logs of one store: views read from them, and when to save them.

    Every method expects the caller to hold the store's lock (shared at least).

    Args:
        directory: The store directory.
        read_only: Never write a vector file.
    """

    def __init__(self, directory: str, *, read_only: bool) -> None:
        self.directory = directory
        self.read_only = read_only
        self._views: dict[str, VectorView] = {}
        self._saved: dict[str, tuple[str, int] | None] = {}  # what each file covers, as last seen

    def path(self, session_id: str) -> str:
        """Return the path of a session's vector file."""
        return os.path.join(self.directory, f"{session_id}.vectors")

    def coded_path(self, session_id: str, fields: str) -> str:
        """Return the path of a session's coded part vectors over ``fields``: ``kvmemory-coded/<sha1 of the session id>-<sha1 of the fields>``."""
        return os.path.join(self.directory, CODED_FOLDER, coded_name(session_id, fields))

    def holds(self, session_id: str) -> bool:
        """Return whether this handle holds a view of the session's file (read for an earlier call)."""
        return session_id in self._views

    def unviewed(self, session_id: str, log_path: str) -> VectorView | None:
        """Return the session's view caught up with its log file as it is now; ``None`` where that takes reading the log whole.

        The log is looked at, not read: its length, its header line and the
        records after the view. The view held, else the file's, is taken
        if it is of a log with this header and no longer than it (the file
        checked as :func:`load` does: its vectors' blocks as they are read;
        one that does not check out then is the caller's to fall back from,
        :meth:`damaged`). A writable handle saves the file again from the
        view where it was of version 1 (:attr:`VectorView.outdated`: it
        pays the write of the file once, not a read of the log whole), or
        followed :data:`SAVE_BYTES` of the log (a 64th of it, if more).
        """
        try:
            fd = open_file(log_path, os.O_RDONLY, "log")
        except (OSError, StoreError):
            return None
        try:
            view = self._caught_up(session_id, fd)
        except (OSError, DamagedVectorFileError):
            view = None
        finally:
            os.close(fd)
        if view is None:
            self._views.pop(session_id, None)
            return None
        self._views[session_id] = view
        if self.read_only:
            return view
        if view.outdated or view.followed >= max(SAVE_BYTES, view.offset // 64):
            view.outdated = False  # tried once: a file that cannot be written is left
            try:
                self._save(session_id, view, log_path)  # checks the file's every block
            except DamagedVectorFileError:
                self._views.pop(session_id, None)
                return None
        return view

    def _caught_up(self, session_id: str, fd: int) -> VectorView | None:
        size = os.fstat(fd).st_size
        first = pread(fd, 0, min(size, _HEADER_READ))
        cut = first.find(b"\n")
        if cut < 0:
            return None
        header = first[: cut + 1]
        view = self._views.get(session_id)
        if view is not None and (view.header != header or view.offset > size):
            view = None
        if view is None:
            view = self._load(session_id, header, size, lambda start, end: pread(fd, start, end))
        if view is None:
            return None
        if view.offset < size:
            chunk = pread(fd, view.offset, size)
            if not chunk.endswith(b"\n") or not view.follow(chunk):
                return None  # a line cut short (the read of the log whole warns), or not followed
        return view

    def _load(
        self, session_id: str, header: bytes, size: int, read_log: Callable[[int, int], bytes]
    ) -> VectorView | None:
        try:
            fd = open_file(self.path(session_id), os.O_RDONLY, "vector file")
        except (OSError, StoreError):
            return None
        try:
            return load(fd, header, size, read_log)
        except DamagedVectorFileError:
            # Saved again as a missing one is (save_due): its header line may be sound and
            # name the log as it is (a file cut short, its table of sums damaged).
            self._saved[session_id] = None
            return None
        except OSError:
            return None
        finally:
            os.close(fd)  # the mapping stays

    def save_due(self, session_id: str, log: SessionLog, log_path: str) -> None:
        """Save the file of ``log`` (read whole) if it is missing, did not check out as this handle loaded it, is of another log, or behind it by :data:`SAVE_BYTES` (a 64th of the log, if more)."""
        if self.read_only:
            return
        if session_id not in self._saved:
            self._saved[session_id] = self._covered(session_id)
        known = self._saved[session_id]
        behind = log.offset - known[1] if known is not None else -1
        if (
            known is not None
            and known[0] == side_file.log_hash(log.header)
            and 0 <= behind < max(SAVE_BYTES, log.offset // 64)
        ):
            return  # current enough: a fresh handle follows the rest
        self._save(session_id, log, log_path)

    def _covered(self, session_id: str) -> tuple[str, int] | None:
        try:
            fd = open_file(self.path(session_id), os.O_RDONLY, "vector file")
        except (OSError, StoreError):
            return None
        try:
            return covered(fd)
        except OSError:
            return None
        finally:
            os.close(fd)

    def _save(self, session_id: str, log: SessionLog | VectorView, log_path: str) -> None:
        """Save the file of ``log``; a file that cannot be written is left (a cache).

        Raises:
            DamagedVectorFileError: if a block of the file a :class:`VectorView` follows does not check out.
        """
        np = numpy_module()
        if np is None:
            return  # the sums are numpy's; semantic search needs it anyway
        try:
            fd = open_file(log_path, os.O_RDONLY, "log")
            try:
                tail = pread(fd, max(0, log.offset - side_file.TAIL), log.offset)
            finally:
                os.close(fd)
            # A DamagedVectorFileError (a followed view's block) is no OSError: it passes through.
            _codec.atomic_write(self.path(session_id), file_bytes(np, log, tail))
        except (OSError, StoreError):
            return  # a cache that cannot be written is read whole by the next process
        self._saved[session_id] = (side_file.log_hash(log.header), log.offset)
        if isinstance(log, VectorView):
            log.followed = 0

    def damaged(self, session_id: str) -> None:
        """Drop the session's view: a block of its file did not check out as it was read (the caller reads the log whole, then :meth:`rebuilt`)."""
        self._views.pop(session_id, None)

    def rebuilt(self, session_id: str, log: SessionLog, log_path: str) -> None:
        """Drop the session's view (a record offset of its file did not check out) and save the file of ``log``, read whole, again."""
        self._views.pop(session_id, None)
        if not self.read_only:
            self._save(session_id, log, log_path)

    def forget(self, session_id: str, *, remove: bool = False) -> None:
        """Drop the view of a session (and, if ``remove``, its file)."""
        self._views.pop(session_id, None)
        self._saved.pop(session_id, None)
        if remove:
            with contextlib.suppress(OSError):
                os.unlink(self.path(session_id))
            remove_coded(os.path.join(self.directory, CODED_FOLDER), session_id)

    def clear(self) -> None:
        """Drop every view."""
        self._views.clear()
        self._saved.clear()
