"""The keyword snapshots an SQLite handle saves as it closes, for the sessions it wrote (``keyword_snapshot="auto"``).

An agent writes its steps and closes its store; later another process
reads the session (``Store.read_memory``) and queries it. That reader's
first keyword query is a few milliseconds with a current snapshot of the
session's postings beside the file (``agents.memory.stores._search.snapshot``)
and tens of milliseconds of scanning without one (at 100,000 steps ~85 ms
of CPU against ~3.6 warm). So the writer saves it, where it costs least:
as its handle closes, on a thread of its own, for each session of at
least :data:`FEWEST` rows that the handle wrote to and whose snapshot no
read would take, or would take only after catching up more than
:func:`behind_allowed` rows (a fraction of a millisecond each). The
handle's connection closes once the saves are done; ``close()`` returns
at once, and the thread is not a daemon, so a process that ends after
``close()`` waits for it (about a second of CPU at 100,000 steps) rather
than leave no snapshot. A process killed meanwhile leaves the previous
snapshot or none (the file is renamed in place whole), never a damaged
one: a read checks it anyway.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

from agents.memory.exceptions import StoreArgumentError
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._search.coded_file import coded_name, remove_coded
from agents.memory.stores._search.snapshot import save_snapshot, saved_rows

__all__ = [
    "FEWEST",
    "KeywordSnapshotMode",
    "SnapshotFiles",
    "SnapshotsOnClose",
    "behind_allowed",
    "vector_snapshot_mode",
]

KeywordSnapshotMode = Literal["auto", "off"]
"""Whether a writable SQLite handle saves the keyword snapshots of the sessions it wrote as it closes."""

FEWEST: Final = 1_000
"""Rows below which a session's first query scans its kept terms in about a millisecond: no snapshot is saved for it."""

_ITEMS: Final = "SELECT items FROM kvmemory_search WHERE session_id = ?"
_BEHIND: Final = 64  # rows a read catches up whatever the session's size, beyond a 200th of it


def behind_allowed(saved: int) -> int:
    """Return how many rows appended after a snapshot of ``saved`` rows leave it current enough not to save it again as a handle closes."""
    return max(_BEHIND, saved // 200)


class SnapshotsOnClose:
    """The sessions a handle wrote, and the saves of their snapshots as it closes.

    Args:
        mode: ``"auto"`` to save them, ``"off"`` never to.

    Raises:
        StoreArgumentError: if ``mode`` is neither.
    """

    def __init__(self, mode: KeywordSnapshotMode) -> None:
        if mode not in ("auto", "off"):
            msg = f"keyword_snapshot must be 'auto' or 'off', got {mode!r}."
            raise StoreArgumentError(msg)
        self.mode = mode
        self._written: dict[str, bool] = {}  # session -> whether a row it held was changed
        self._lock = threading.Lock()

    def appended(self, session_id: str) -> None:
        """Note rows appended to the session by this handle."""
        if self.mode == "auto":
            with self._lock:
                self._written.setdefault(session_id, False)

    def changed(self, session_id: str) -> None:
        """Note rows of the session updated or deleted by this handle (a snapshot of them no longer vouches for the rows)."""
        if self.mode == "auto":
            with self._lock:
                self._written[session_id] = True

    def due(
        self,
        path_of: Callable[[str], str | None],
        query: Callable[[str, Sequence[object]], list[Any]],
    ) -> list[tuple[str, str]]:
        """Return ``(session, snapshot path)`` of the sessions whose snapshot the handle saves as it closes (see the module docs).

        A session's rows are counted by the keyword index's statistics
        (one row read, run by ``query``; the pending rows folded first):
        ``count(*)`` over its rows costs milliseconds at 100,000.
        """
        with self._lock:
            written, self._written = self._written, {}
        due = []
        for session_id, changed in written.items():
            path = path_of(session_id)
            if path is None:
                continue
            try:
                counted = query(_ITEMS, (session_id,))
            except sqlite3.Error:  # the close goes on; a read later scans the kept terms
                continue
            rows = int(counted[0][0]) if counted else 0
            if rows < FEWEST:
                continue
            saved = saved_rows(path)
            if changed or saved is None or saved > rows or rows - saved > behind_allowed(saved):
                due.append((session_id, path))
        return due

    def save_then_close(
        self,
        due: Sequence[tuple[str, str]],
        read: Callable[[str], Sequence[tuple[int, Any, str]] | None],
        close: Callable[[], None],
    ) -> None:
        """Save the ``due`` sessions' snapshots from the rows ``read`` gives, on a thread of their own, then ``close`` the connection (at once where none is due).

        Without a thread to start (the interpreter is ending), the
        connection is closed without them.
        """
        if not due:
            close()
            return
        thread = threading.Thread(
            target=self._save, args=(due, read, close), name="kvmemory-keyword-snapshot"
        )
        try:
            thread.start()
        except RuntimeError:  # no new thread as the interpreter ends: no snapshot
            close()

    @staticmethod
    def _save(
        due: Sequence[tuple[str, str]],
        read: Callable[[str], Sequence[tuple[int, Any, str]] | None],
        close: Callable[[], None],
    ) -> None:
        try:
            for session_id, path in due:
                # A cache: a save that cannot read the rows or write the file leaves the
                # memories read later to scan their kept terms, as without it.
                with contextlib.suppress(OSError, sqlite3.Error):
                    save_snapshot(path, read(session_id))
        finally:
            close()


def vector_snapshot_mode(mode: KeywordSnapshotMode) -> KeywordSnapshotMode:
    """Return ``mode``, whether a writable SQLite handle saves the coded part vectors it builds (``"auto"``) or never (``"off"``).

    Raises:
        StoreArgumentError: if ``mode`` is neither.
    """
    if mode not in ("auto", "off"):
        msg = f"vector_snapshot must be 'auto' or 'off', got {mode!r}."
        raise StoreArgumentError(msg)
    return mode


class SnapshotFiles(Backend):
    """Where an SQLite backend keeps its sessions' coded part vectors beside its file, and the removal of a deleted session's caches (a base of ``SQLiteBackend``).

    ``<file>.vectors/<sha1 of the session id>-<sha1 of the fields>``
    (``agents.memory.stores._search.coded_file``).
    """

    path: str
    vector_snapshot: KeywordSnapshotMode

    def vector_snapshot_path(self, session_id: str, fields: str) -> str | None:
        """Return the file of the session's coded part vectors over ``fields``."""
        return os.path.join(f"{self.path}.vectors", coded_name(session_id, fields))

    @property
    def saves_vector_snapshots(self) -> bool:
        """Whether this handle saves coded part vectors beside the file: writable, and ``vector_snapshot="auto"``."""
        return not self.read_only and self.vector_snapshot == "auto"

    def remove_session_files(self, session_id: str) -> None:
        """Remove the deleted session's keyword snapshot and coded part vectors (caches beside the file): one left would never vouch for a later session's rows (their digests differ), only hold the disk."""
        snapshot = self.keyword_snapshot_path(session_id)
        if snapshot is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(snapshot)
        remove_coded(f"{self.path}.vectors", session_id)
