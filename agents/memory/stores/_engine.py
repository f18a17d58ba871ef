"""What every call of a store shares: its backend, its state, the checks and the error wrapping.

:class:`Engine` is held by a :class:`~agents.memory.stores.Store` and
handed to the parts its calls are built from (:class:`WriteBatch`, keyword
and vector search), so that each of them checks arguments, refuses writes
to a read-only or closed store and turns the backend's errors into
:class:`StoreError` the same way, written once here.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from agents.memory._item import MemoryItem, OnUnknownClass
from agents.memory.exceptions import StoreError
from agents.memory.stores._backend import Backend
from agents.memory.stores._checks import check_session_id
from agents.memory.stores._encoding import StoredRecord, decode_pairs, decode_rows

__all__ = ["Engine", "open_session"]


class Engine:
    """A backend with the state of the store over it: open or closed, read-only or not.

    Args:
        backend: The backend that keeps the rows.
        read_only: Refuse every write call.
    """

    def __init__(self, backend: Backend, *, read_only: bool) -> None:
        self.backend = backend
        self.read_only = read_only
        self.closed = False
        self._close_lock = threading.Lock()

    @property
    def url(self) -> str:
        """The backend's URL (passwords hidden)."""
        return self.backend.url

    @contextlib.contextmanager
    def errors(self, action: str, session_id: str | None) -> Iterator[None]:
        """Turn the backend's errors raised inside the block into :class:`StoreError` (:meth:`Backend.store_error`)."""
        try:
            yield
        except StoreError:
            raise
        except self.backend.driver_errors as exc:
            where = f" session {session_id!r} of" if session_id else ""
            raise self.backend.store_error(action, where, exc) from exc

    def check_open(self) -> None:
        """Raise :class:`StoreError` if the store is closed."""
        if self.closed:
            msg = f"Store {self.url} is closed; open it again with open_store()."
            raise StoreError(msg)

    def check(self, session_id: object) -> str:
        """Return ``session_id`` checked, on an open store."""
        self.check_open()
        return check_session_id(session_id)

    def check_write(self, session_id: object) -> str:
        """Return ``session_id`` checked, on an open store that may be written."""
        sid = self.check(session_id)
        if self.read_only:
            msg = f"Store {self.url} is open read-only; open it without read_only (or ?mode=ro) to change session {sid!r}. Nothing was changed."
            raise StoreError(msg)
        return sid

    def source(self, session_id: str) -> str:
        """Name a session in messages."""
        return f"session {session_id!r} of {self.url}"

    def decoded_pages(
        self, sid: str, size: int, on_unknown_class: OnUnknownClass
    ) -> Iterator[list[StoredRecord]]:
        """Yield a session's records in seq order, ``size`` at a time, read a page at a time."""
        source = self.source(sid)
        fetched = self.backend.read_pages(sid, size)
        while True:
            with self.errors("read", sid):
                rows = next(fetched, None)
            if rows is None:
                return
            if rows:
                yield decode_rows(rows, source, on_unknown_class)

    def read_items(
        self, sid: str, seqs: Sequence[int], on_unknown_class: OnUnknownClass
    ) -> dict[int, MemoryItem]:
        """Return the items with these seqs that exist, by seq (for search hits)."""
        with self.errors("search", sid):
            rows = self.backend.read_seqs(sid, seqs)
        return dict(decode_pairs(rows, self.source(sid), on_unknown_class))

    def close(self) -> None:
        """Close the backend once; closing twice is harmless."""
        with self._close_lock:
            if self.closed:
                return
            self.closed = True
            self.backend.close()


def open_session(backend: Backend, tx: Any, session_id: str, step_key: str) -> None:
    """Create the session in ``tx`` if it does not exist, else check its step key.

    Raises:
        StoreError: if the session files its steps under another key; nothing is written.
    """
    row = backend.lock_session(tx, session_id)
    if row is None:
        backend.create_session(tx, session_id, step_key, time.time())
    elif row[0] != step_key:
        msg = (
            f"Session {session_id!r} of {backend.url} files steps under {row[0]!r}, "
            f"not {step_key!r}; open it with step_key={row[0]!r}. Nothing was written."
        )
        raise StoreError(msg)
