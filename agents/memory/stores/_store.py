"""The store: every public store call, composed over a :class:`Backend`.

:class:`Store` holds a backend and calls only its public operations. Its
calls are built from parts with one job each: the :class:`Engine` (state,
checks, error wrapping), the read calls (:class:`ReadCalls`), the keyed
records (:class:`RecordCalls`), the search
calls (:class:`SearchCalls`: keyword search in ``_search.keyword``, vectors
in ``_search.vectors``; :class:`SessionSearchCalls`: search across sessions
in ``_search.sessions``), and :class:`WriteBatch` for writes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from typing_extensions import Self

from agents.memory._codec import OnUnencodable
from agents.memory._item import MemoryItem
from agents.memory.exceptions import StoreArgumentError
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._core.batch import WriteBatch
from agents.memory.stores._core.encoding import StoredRecord, encode_metadata, step_texts
from agents.memory.stores._core.engine import Engine, Guard, open_session
from agents.memory.stores._core.reading import ReadCalls
from agents.memory.stores._core.records import RecordCalls
from agents.memory.stores._search.calls import SearchCalls
from agents.memory.stores._search.coded_saves import SAVE_THREAD
from agents.memory.stores._search.session_calls import SessionSearchCalls
from agents.memory.stores._search.vector_cache import VectorCache
from agents.memory.stores._search.vector_calls import VectorCalls

__all__ = ["Store"]


class Store(ReadCalls, RecordCalls, SearchCalls, VectorCalls, SessionSearchCalls):
    """Every public store call, over a :class:`Backend` that keeps the rows.

    The checks, the encoding through the codec, read-only refusal and the
    wrapping of the backend's errors into :class:`~agents.memory.StoreError`
    are done here, once, for every store; the backend only keeps rows
    (see :class:`Backend`). Writes are staged by a :class:`WriteBatch` and
    applied in one backend transaction. ``SQLiteStore``, ``PostgresStore``,
    ``JSONLStore`` and ``InMemoryStore`` are stores over their own backends.

    Example::

        store = Store(MyBackend(...))
        store.append("run-1", [MemoryItem(step=1)])
        memory = StoredMemory(store, "run-1")

    Args:
        backend: The backend that keeps the rows; :meth:`close` closes it.
        read_only: Refuse every write call. ``None`` (the default) follows
            the backend (:attr:`Backend.read_only`).

    Raises:
        StoreArgumentError: if ``backend`` is not a :class:`Backend`, or it
            was opened read-only and ``read_only=False`` is asked.
    """

    schema_version: int = 2
    """The layout version this kvmemory writes (each store names its own)."""

    def __init__(self, backend: Backend, *, read_only: bool | None = None) -> None:
        if not isinstance(backend, Backend):
            msg = (
                f"Store() takes a Backend (a subclass of agents.memory.stores.Backend), got "
                f"{backend!r} ({type(backend).__name__}); to open a store by URL, use open_store()."
            )
            raise StoreArgumentError(msg)
        if read_only is None:
            read_only = bool(backend.read_only)
        elif backend.read_only and not read_only:
            msg = (
                f"Store(read_only=False) was given backend {backend.url} opened read-only; "
                "open the backend writable, or leave read_only out."
            )
            raise StoreArgumentError(msg)
        self.backend = backend
        self._engine = Engine(backend, read_only=read_only)
        ReadCalls.__init__(self, self._engine)
        RecordCalls.__init__(self, self._engine)
        # One cache of kept vectors for the store's searches of one session and of many.
        cache = VectorCache()
        SearchCalls.__init__(self, self._engine, cache)
        SessionSearchCalls.__init__(self, self._engine, cache)

    @property
    def url(self) -> str:
        """The URL the store was opened with (passwords hidden)."""
        return self._engine.url

    @property
    def read_only(self) -> bool:
        """Whether every write call is refused."""
        return self._engine.read_only

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._engine.closed

    @property
    def driver_errors(self) -> tuple[type[BaseException], ...]:
        """The backend's exception types that calls report as :class:`~agents.memory.StoreError`."""
        return self.backend.driver_errors

    @property
    def keyword_index(self) -> bool:
        """Whether :meth:`search` without ``keys`` is answered by a keyword index the backend keeps.

        ``True`` for SQLite (FTS5), PostgreSQL (``tsvector``), JSONL (an
        index file beside each log) and ``memory://`` (postings per
        session); ``False`` for an SQLite file of an older layout opened
        read-only, and a backend that keeps no index, which read the session
        and tokenize it on every search. Either way the ranking is the same.
        """
        return self.backend.keyword_index

    @property
    def keeps_vectors(self) -> bool:
        """Whether the backend stores vectors with the items (:attr:`Backend.keeps_vectors`).

        ``True`` for every store kvmemory ships. A store over a backend
        without the vector operations still answers semantic and hybrid
        searches, embedding the session's items at each query, and its
        :meth:`index_embeddings` raises :class:`~agents.memory.StoreError`.
        """
        return self.backend.keeps_vectors

    def guarded(
        self, action: str, session_id: object = None, *, write: bool = False
    ) -> contextlib.AbstractContextManager[str]:
        """Run a store-specific call as every store call runs: checked, and with the backend's errors as :class:`~agents.memory.StoreError`.

        For a subclass that adds a call of its own (``JSONLStore.compact``)::

            with self.guarded("compact", session_id, write=True) as sid:
                self.backend.compact(sid)

        Args:
            action: What the call does, for messages (``"Cannot {action} ..."``).
            session_id: The session the call changes or reads, or ``None`` for the whole store.
            write: Refuse the call on a read-only store.

        Returns:
            A context manager whose ``with`` gives the checked session id
            (``""`` for the whole store); the checks run as the block is entered.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store is closed, or read-only and ``write``; or
                from the backend's errors inside the block.
        """
        return Guard(self._engine, action, session_id, write)

    def append(
        self,
        session_id: str,
        items: Iterable[MemoryItem],
        *,
        step_key: str = "step",
        on_unencodable: OnUnencodable = "error",
    ) -> list[int]:
        """Append ``items`` to a session in one transaction and return their seqs.

        The session is created on its first append and remembers ``step_key``.

        Args:
            session_id: The session to append to.
            items: The items, in order.
            step_key: The field that names an item's step.
            on_unencodable: The codec's policy for values JSON cannot hold.

        Returns:
            The seqs given to the items, increasing.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if an element is not a ``MemoryItem``; nothing is written.
            SerializationError: if a value cannot be encoded; nothing is written.
            StoreError: if the store cannot be written, or the session was
                created with another ``step_key``; nothing is written.
        """
        with self.batch(session_id, step_key=step_key, on_unencodable=on_unencodable) as batch:
            batch.append(items)
        return batch.appended

    def append_steps(
        self,
        session_id: str,
        items: Iterable[MemoryItem],
        *,
        step_key: str = "step",
        on_unencodable: OnUnencodable = "error",
    ) -> list[StoredRecord]:
        """Append ``items`` as the session's next steps, numbering those without one, in one transaction.

        Each item without a ``step_key`` field is written with the next step
        number, read inside the same write transaction that inserts it, so two
        processes or threads appending to one session never give out the same
        number: 1 for an empty session, the last item's step plus one when it
        is a whole number, else the item count plus one. Items that carry a
        step keep it, and the numbering goes on from theirs. The caller's
        items are not changed.

        Args:
            session_id: The session to append to.
            items: The items, in order.
            step_key: The field that names an item's step.
            on_unencodable: The codec's policy for values JSON cannot hold.

        Returns:
            A record per item, in order: its seq and the item as written
            (a numbered copy for those that had no step).

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if an element is not a ``MemoryItem``; nothing is written.
            SerializationError: if a value cannot be encoded; nothing is written.
            StoreError: if the store cannot be written, or the session was
                created with another ``step_key``; nothing is written.
        """
        given = list(items)
        with self.batch(session_id, step_key=step_key, on_unencodable=on_unencodable) as batch:
            batch.append(given, number_steps=True)
        numbered = iter(batch.numbered)
        written = [item if step_key in item else next(numbered) for item in given]
        return [StoredRecord(seq, item) for seq, item in zip(batch.appended, written, strict=True)]

    def batch(
        self,
        session_id: str,
        *,
        step_key: str = "step",
        on_unencodable: OnUnencodable = "error",
    ) -> WriteBatch:
        """Return a batch of writes to one session, applied together when its ``with`` block ends.

        Example::

            with store.batch("run-1") as batch:
                batch.delete([3, 4])
                batch.append([MemoryItem(step=5)])
            batch.appended   # the seqs the new items got

        Args:
            session_id: The session to write.
            step_key: The field that names an item's step.
            on_unencodable: The codec's policy for values JSON cannot hold.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store is closed or open read-only.
        """
        return WriteBatch(self, self._engine.check_write(session_id), step_key, on_unencodable)

    def set_metadata(
        self, session_id: str, metadata: Mapping[str, Any], *, step_key: str = "step"
    ) -> None:
        """Save ``metadata`` as the session's metadata, creating the session if it does not exist.

        The metadata is encoded through the codec, so every value type an item
        field can hold comes back unchanged from :meth:`session_info`.

        Args:
            session_id: The session.
            metadata: The new metadata; it replaces the old one as a whole.
            step_key: The step key of the session (recorded if it is created,
                checked otherwise).

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``metadata`` is not a mapping with string keys.
            SerializationError: if a value cannot be encoded; nothing is written.
            StoreError: if the store cannot be written, or the session was
                created with another ``step_key``; nothing is written.
        """
        sid = self._engine.check_write(session_id)
        data = encode_metadata(metadata, sid)
        with self._engine.errors("write metadata of", sid), self.backend.transaction(sid) as tx:
            open_session(self.backend, tx, sid, step_key)
            self.backend.set_metadata(tx, sid, data)

    def delete_steps(self, session_id: str, steps: Iterable[Any]) -> int:
        """Delete every item whose step is in ``steps`` and return how many went.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        sid = self._engine.check_write(session_id)
        wanted = frozenset(step_texts(steps))
        if not wanted:
            return 0
        with self._engine.errors("delete steps from", sid), self.backend.transaction(sid) as tx:
            if self.backend.lock_session(tx, sid) is None:
                return 0
            seqs = [entry[0] for entry in self.backend.row_index(tx, sid) if entry[1] in wanted]
            gone = self.backend.delete_rows(tx, sid, seqs) if seqs else []
            if gone:
                self.backend.delete_vectors(tx, sid, gone)
            return len(gone)

    def delete_seqs(self, session_id: str, seqs: Iterable[int]) -> int:
        """Delete items by seq and return how many of them existed.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if a seq is not an int in the store's range.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        with self.batch(session_id) as batch:
            batch.delete(seqs)
        return len(batch.deleted)

    def clear(self, session_id: str) -> int:
        """Delete every item of a session and return how many went; the session stays listed.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        sid = self._engine.check_write(session_id)
        with self._engine.errors("clear", sid), self.backend.transaction(sid) as tx:
            if self.backend.lock_session(tx, sid) is None:
                return 0
            self.backend.drop_vectors(tx, sid)
            return self.backend.clear_rows(tx, sid)

    def delete_session(self, session_id: str) -> bool:
        """Delete a session with its items; return whether it existed.

        Seqs are not reused: if the session is created again, its items get
        seqs above every seq it had before.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        sid = self._engine.check_write(session_id)
        with self._engine.errors("delete", sid):
            gone = self.backend.delete_session(sid)
            self.backend.remove_session_files(sid)
            return gone

    def keep_last(self, session_id: str, n: int) -> int:
        """Delete all but the last ``n`` items of a session and return how many went.

        Raises:
            StoreArgumentError: if ``n`` is not an int >= 0.
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        with self.batch(session_id) as batch:
            batch.keep_last(n)
        return len(batch.deleted)

    def expire(self, session_id: str, older_than: dt.timedelta | float) -> int:
        """Delete the items of a session written more than ``older_than`` ago.

        Args:
            session_id: The session to trim.
            older_than: An age, as a ``timedelta`` or a number of seconds.

        Returns:
            How many items were deleted.

        Raises:
            StoreArgumentError: if ``older_than`` is negative or not a duration.
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        with self.batch(session_id) as batch:
            batch.expire(older_than)
        return len(batch.deleted)

    def close(self) -> None:
        """Release the store's connections and files; closing twice is harmless.

        A writable SQLite handle first saves, on a thread of its own, the
        coded part vectors of the sessions whose vectors it wrote that a
        fresh handle would code (see :class:`~agents.memory.stores.SQLiteStore`'s
        ``vector_snapshot``), and closes its connection after them.
        """
        saves = None if self.closed else self._closing_saves()
        self._engine.close(saves, thread=SAVE_THREAD)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " read-only" if self.read_only else ""
        state += " closed" if self.closed else ""
        return f"<{type(self).__name__} {self.url!r}{state}>"
