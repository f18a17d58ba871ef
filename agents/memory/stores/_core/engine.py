"""What every call of a store shares: its backend, its state, the checks and the error wrapping.

:class:`Engine` is held by a :class:`~agents.memory.stores.Store` and
handed to the parts its calls are built from (:class:`WriteBatch`, keyword
and vector search), so that each of them checks arguments, refuses writes
to a read-only or closed store and turns the backend's errors into
:class:`StoreError` the same way, written once here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any

from agents.memory._item import MemoryItem, OnUnknownClass
from agents.memory.exceptions import StoreError
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._core.checks import check_session_id
from agents.memory.stores._core.encoding import StoredRecord, decode_pairs, decode_rows

__all__ = ["BackendErrors", "Engine", "Guard", "open_session"]


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

    def errors(self, action: str, session_id: str | None) -> BackendErrors:
        """Turn the backend's errors raised inside the block into :class:`StoreError` (:meth:`Backend.store_error`)."""
        return BackendErrors(self.backend, action, session_id)

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

    def close(self, saves: Callable[[], None] | None = None, *, thread: str = "") -> None:
        """Close the backend once; closing twice is harmless.

        With ``saves`` (caches the closing handle writes beside the store),
        they run first, on a thread named ``thread`` that is not a daemon,
        and the backend closes after them: ``close`` returns at once, and a
        process that ends waits for them. Without a thread to start (the
        interpreter is ending), the backend closes without them.
        """
        with self._close_lock:
            if self.closed:
                return
            self.closed = True
            if saves is None:
                self.backend.close()
                return
            worker = threading.Thread(target=self._save_then_close, args=(saves,), name=thread)
            try:
                worker.start()
            except RuntimeError:  # no new thread as the interpreter ends: no saves
                self.backend.close()

    def _save_then_close(self, saves: Callable[[], None]) -> None:
        try:
            saves()
        finally:
            self.backend.close()


class BackendErrors:
    """A block whose backend errors are raised as :class:`StoreError` (see :meth:`Engine.errors`).

    A class rather than a generator-based context manager: every store call
    enters one, and this costs about half as much (0.5 us against 0.85 us).
    """

    __slots__ = ("_action", "_backend", "_session_id")

    def __init__(self, backend: Backend, action: str, session_id: str | None) -> None:
        self._backend = backend
        self._action = action
        self._session_id = session_id

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None:
            _raise_store_error(self._backend, self._action, self._session_id, exc)


class Guard:
    """A store call's block: checked on entry, its backend errors raised as :class:`StoreError` (see ``Store.guarded``).

    Entering checks that the store is open (and writable for ``write``) and
    the session id, and gives the checked id (``""`` for the whole store).
    """

    __slots__ = ("_action", "_engine", "_session_id", "_sid", "_write")

    def __init__(self, engine: Engine, action: str, session_id: object, write: bool) -> None:
        self._engine = engine
        self._action = action
        self._session_id = session_id
        self._write = write
        self._sid = ""

    def __enter__(self) -> str:
        engine = self._engine
        if self._session_id is None:
            engine.check_open()
            if self._write and engine.read_only:
                msg = f"Store {engine.url} is open read-only; open it writable to call this ({self._action}). Nothing was changed."
                raise StoreError(msg)
        else:
            self._sid = (
                engine.check_write(self._session_id)
                if self._write
                else engine.check(self._session_id)
            )
        return self._sid

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None:
            _raise_store_error(self._engine.backend, self._action, self._sid or None, exc)


def _raise_store_error(
    backend: Backend, action: str, session_id: str | None, exc: BaseException
) -> None:
    """Raise ``exc`` as the backend's :class:`StoreError` if it is one of the driver's errors (else return)."""
    if not isinstance(exc, StoreError) and isinstance(exc, backend.driver_errors):
        where = f" session {session_id!r} of" if session_id else ""
        raise backend.store_error(action, where, exc) from exc


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
