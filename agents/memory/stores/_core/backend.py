"""The public backend interface: the row operations a store is built on.

A third party adds a durable home for sessions by writing a :class:`Backend`
(a handful of row operations, all public names) and handing it to
:class:`Store`, which gives it every call users make (``append``, ``read``,
``search``, ``batch``, ``StoredMemory``, ...) with the checks, the encoding
through the codec and the error wrapping done once for every store. The
``Store`` holds the backend; it does not inherit from it, so a backend sees
only its own rows, and the contract suite
(:class:`agents.memory.stores.testing.StoreContract`) checks a backend
through ``Store(backend)``.

The words the operations use:

* a *row* to insert is ``(step_text, created, data)`` (:data:`Row`): the
  item's canonical step text (``None`` for no step), the unix time it was
  written and the codec's bytes for it; an update is ``(seq, step_text,
  data)`` (:data:`RowUpdate`);
* *terms* are an item's search terms, ``(text, count)`` (:data:`Terms`),
  handed with each row inserted or updated so that a backend that keeps a
  keyword index never decodes a row to index it;
* a *seq* is the number the backend gives a row when it is inserted:
  increasing in commit order within a session, never given twice, not even
  after the session is deleted and created again;
* a *session row* is ``(step_key, created, metadata)`` (:data:`SessionRow`);
* an *index entry* is ``(seq, step_text, created)`` (:data:`IndexEntry`);
* a *filter tree* is a parsed search filter (:data:`FilterNode`);
* a *transaction handle* is whatever :meth:`Backend.transaction` yields
  (:data:`Transaction`): the store only hands it back to the operations
  that take ``tx``;
* a *keyed row* is ``(key, seq, created, data)`` (:data:`KeyedRow`): a row
  filed under a key unique within its session (a record, written by
  ``Store.put_record``). The key is kept beside the row, like its step
  text, so that a record is found by key without reading the session; it
  goes with the row when the row is deleted.

Every name a backend's signatures use is public in
:mod:`agents.memory.stores.backend` (and in :mod:`agents.memory.stores`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator, Sequence
from typing import Any, TypeAlias

from agents.memory.exceptions import StoreError
from agents.memory.stores._core.backend_search import SearchOperations
from agents.memory.stores._core.encoding import IndexEntry, KeyedRow, Row, RowUpdate, SessionRow
from agents.memory.stores._core.terms import Terms

__all__ = ["Backend", "Transaction"]

Transaction: TypeAlias = Any
"""The handle :meth:`Backend.transaction` yields (a connection, a cursor, a dict of pending changes, ...).

The store never looks inside it: it passes it back, unchanged, to the
operations that take ``tx``, within the ``with`` block that yielded it.
"""


class Backend(SearchOperations):
    """The row operations of one durable home for sessions; subclass it and hand it to :class:`Store`.

    Implement the operations that raise :class:`NotImplementedError` here:
    reading (:meth:`read_session`, :meth:`read_rows`, :meth:`count`,
    :meth:`sessions`) and writing (:meth:`transaction`, and inside it
    :meth:`lock_session`, :meth:`create_session`, :meth:`set_metadata`,
    :meth:`insert_rows`, :meth:`update_rows`, :meth:`delete_rows`,
    :meth:`clear_rows`, :meth:`row_index`; then :meth:`delete_session` and
    :meth:`close`). The others have defaults built on those, which a backend
    overrides where its engine does better (read the last rows of a session
    without the rest, :meth:`last_step` without the whole row index, rank by
    keyword from an index it keeps). The vector operations are optional as a
    group: set :attr:`keeps_vectors` and implement them for semantic search.

    Operations may assume valid session ids and checked arguments, and let
    the engine's errors escape: :class:`Store` turns the types listed in
    :attr:`driver_errors` into :class:`~agents.memory.StoreError`.

    How the store calls a backend:

    * **Inside a transaction** the store call that opened it calls only the
      operations that take ``tx``, with the ``tx`` that :meth:`transaction`
      yielded, on the thread that opened it; it never calls a read
      (:meth:`read_rows`, :meth:`count`, ...), :meth:`append_rows`,
      :meth:`delete_session` or a second :meth:`transaction` before the
      block ends. So a backend may hold a lock or a connection for the
      whole block.
    * **Threads.** The store takes no lock of its own. A program that shares
      one store between threads (a web server's handlers, two durable
      memories of one store) reaches the backend from those threads at once:
      reads while another thread's transaction is open, two transactions at
      once. :meth:`transaction` must make writers of a session queue, and a
      read must see only committed writes; a backend that cannot do that
      with its engine takes a lock (a ``threading.RLock``) around each
      operation and around the transaction. Calls may come from any thread,
      not only the one that created the backend: the async store
      (:func:`~agents.memory.stores.open_async_store`) runs every call on
      a worker thread of its own, one at a time, and closes the backend from
      another.
    * **Read-only.** A backend opened for inspection sets :attr:`read_only`
      (its constructor takes ``read_only``, and the opener registered with
      :func:`~agents.memory.stores.register_backend` receives it) and then
      creates, migrates and writes nothing, not even an empty file: a
      missing store is :class:`~agents.memory.StoreNotFoundError`.
      ``Store(backend)`` is read-only when the backend is, and never calls a
      writing operation on a read-only store.
    * **Errors.** :attr:`driver_errors` names the exception types the engine
      raises when storage fails (``sqlite3.Error``, ``psycopg.Error``,
      ``OSError`` for files): each becomes a
      :class:`~agents.memory.StoreError` naming the call, the session and
      :attr:`url`, with the engine's error as its cause
      (:meth:`store_error` chooses the subclass). Leave out the types a bug
      raises (``TypeError``, ``KeyError``, ``AttributeError``): they reach
      the caller as they are, so they are seen. kvmemory's own errors
      (a :class:`~agents.memory.StoreError` the backend raises itself, such
      as :class:`~agents.memory.CorruptStoreError`) pass through unchanged.
    """

    url: str = "backend://"
    """What the store is called in messages (hide passwords)."""

    driver_errors: tuple[type[BaseException], ...] = (OSError,)
    """The engine's exception types that the store reports as :class:`~agents.memory.StoreError`."""

    keeps_vectors: bool = False
    """Whether the vector operations are implemented (vectors stored with the items).

    Without them semantic and hybrid search still work: the store embeds the session's items
    at each query (as a read-only handle does); ``Store.index_embeddings`` refuses to store.
    """

    read_only: bool = False
    """Whether the backend was opened for reading only; ``Store(backend)`` is then read-only.

    Set it in the constructor of a backend opened with ``read_only=True`` (it writes nothing).
    """

    # -- reading ---------------------------------------------------------------------

    def read_session(self, session_id: str) -> SessionRow | None:
        """Return the session's ``(step_key, created, metadata)``, or ``None`` if it does not exist."""
        raise NotImplementedError

    def read_rows(
        self, session_id: str, *, steps: Sequence[str] | None = None, after: int | None = None
    ) -> list[tuple[int, bytes]]:
        """Return ``(seq, data)`` of the rows filed under ``steps`` (all if ``None``) with seq above ``after``, in seq order.

        Answer a step filter from an index of ``(session, step)`` where the
        engine has one: a filter names few steps of a long session as a rule.
        """
        raise NotImplementedError

    def read_keys(
        self, session_id: str, keys: Sequence[str], *, steps: Sequence[str] | None = None
    ) -> list[tuple[int, bytes]]:
        """Return ``(seq, data)`` of the rows among ``steps``, where ``data`` may hold only the fields ``keys``.

        A backend that can cut rows down to some keys in its query language,
        exactly as the codec wrote them, overrides this (``Store.project``);
        by default whole rows are read and cut in Python.
        """
        return self.read_rows(session_id, steps=steps)

    def read_last(
        self, session_id: str, n: int, *, steps: Sequence[str] | None = None
    ) -> list[tuple[int, bytes]]:
        """Return ``(seq, data)`` of the last ``n`` (> 0) rows among ``steps``, in seq order (default: read them all, keep the end)."""
        return self.read_rows(session_id, steps=steps)[-n:]

    def read_seqs(self, session_id: str, seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        """Return ``(seq, data)`` of the rows with these seqs that exist, in seq order."""
        wanted = set(seqs)
        return [row for row in self.read_rows(session_id) if row[0] in wanted]

    def read_pages(self, session_id: str, size: int) -> Iterator[list[tuple[int, bytes]]]:
        """Yield ``(seq, data)`` of a session's rows in seq order, at most ``size`` (> 0) at a time.

        By default the session is read once and handed out in pages; a
        backend that can read a page at a time overrides this, so that a
        reader holds one page at once.
        """
        rows = self.read_rows(session_id)
        for start in range(0, len(rows), size):
            yield rows[start : start + size]

    def count(self, session_id: str) -> int:
        """Return the number of rows of a session (0 if it does not exist)."""
        raise NotImplementedError

    def sessions(self) -> list[str]:
        """Return the ids of every session, sorted by code point."""
        raise NotImplementedError

    def read_sessions(self, session_ids: Sequence[str]) -> dict[str, SessionRow]:
        """Return ``{session_id: (step_key, created, metadata)}`` of those of ``session_ids`` that exist.

        A store-wide search with a metadata filter asks this of every session
        in its scope; by default each is read with :meth:`read_session`, and
        a backend whose engine reads many sessions in one query overrides it.
        """
        out = {}
        for sid in session_ids:
            row = self.read_session(sid)
            if row is not None:
                out[sid] = row
        return out

    # -- writing ---------------------------------------------------------------------

    def transaction(self, session_id: str) -> contextlib.AbstractContextManager[Transaction]:
        """Open one exclusive write transaction on a session and yield a handle ``tx`` for the operations below.

        What they do becomes visible to other handles all together when the
        block exits cleanly, and not at all when it raises.
        """
        raise NotImplementedError

    def append_rows(
        self, session_id: str, step_key: str, rows: Sequence[Row], terms: Sequence[Terms]
    ) -> list[int] | None:
        """Optionally append rows in one step and return their seqs, or ``None`` to decline (the default).

        A backend whose engine can create-or-lock the session, check its step
        key and insert the rows in one statement overrides this (PostgreSQL:
        one round trip instead of four). It must decline, writing nothing,
        unless the session is new or live with this ``step_key``; the store
        then runs the general transaction, which raises or recreates.
        """
        return None

    def lock_session(self, tx: Transaction, session_id: str) -> SessionRow | None:
        """Return the session inside the transaction (``None`` if it does not exist), keeping other writers out."""
        raise NotImplementedError

    def create_session(
        self, tx: Transaction, session_id: str, step_key: str, created: float
    ) -> None:
        """Create a session with empty metadata (``b"{}"``)."""
        raise NotImplementedError

    def set_metadata(self, tx: Transaction, session_id: str, metadata: bytes) -> None:
        """Replace a session's encoded metadata."""
        raise NotImplementedError

    def insert_rows(
        self, tx: Transaction, session_id: str, rows: Sequence[Row], terms: Sequence[Terms]
    ) -> list[int]:
        """Insert rows (with their search terms, one per row) and return their new seqs, increasing."""
        raise NotImplementedError

    def update_rows(
        self, tx: Transaction, session_id: str, rows: Sequence[RowUpdate], terms: Sequence[Terms]
    ) -> list[int]:
        """Replace the step and data of rows by seq (with their new terms); return the seqs that existed."""
        raise NotImplementedError

    def delete_rows(self, tx: Transaction, session_id: str, seqs: Sequence[int]) -> list[int]:
        """Delete rows by seq; return the seqs that existed."""
        raise NotImplementedError

    def clear_rows(self, tx: Transaction, session_id: str) -> int:
        """Delete every row of a session; return how many there were."""
        raise NotImplementedError

    def row_index(self, tx: Transaction, session_id: str) -> list[IndexEntry]:
        """Return ``(seq, step_text, created)`` of every row of a session, in seq order."""
        raise NotImplementedError

    def last_step(self, tx: Transaction, session_id: str) -> tuple[int, str | None]:
        """Return the session's row count and the step text of its last row (``None`` for none), inside ``tx``.

        :meth:`Store.append_steps` numbers new steps from these in the same
        transaction that inserts them. The default reads :meth:`row_index`;
        a backend whose engine can read the last row alone overrides it.
        """
        index = self.row_index(tx, session_id)
        return len(index), (index[-1][1] if index else None)

    def delete_session(self, session_id: str) -> bool:
        """Delete a session, its rows and vectors in one transaction; return whether it existed.

        Remember its last seq: a session created again under the same id
        continues above it.
        """
        raise NotImplementedError

    def remove_session_files(self, session_id: str) -> None:
        """Remove the caches a deleted session left beside the store (keyword snapshots, coded vectors): files that would never be taken again, only hold the disk.

        :meth:`Store.delete_session` calls it after :meth:`delete_session`;
        what fails is left (they are caches). By default there are none.
        """

    def close(self) -> None:
        """Release connections and files."""

    def store_error(self, action: str, where: str, exc: BaseException) -> StoreError:
        """Return the :class:`~agents.memory.StoreError` for an engine error of :attr:`driver_errors`.

        Override to tell damage apart (return a :class:`~agents.memory.CorruptStoreError`).

        Args:
            action: What the call did, as in ``"Cannot {action}..."``.
            where: ``" session 'id' of"``, or ``""`` for a call on the whole store.
            exc: The engine's error.
        """
        msg = f"Cannot {action}{where} {self.url}: {exc}; nothing was changed."
        return StoreError(msg)

    # -- optional: keyed rows (records) -------------------------------------------------

    @property
    def keeps_records(self) -> bool:
        """Whether the keyed-row operations are implemented (by default: whether :meth:`insert_keyed` is overridden)."""
        return type(self).insert_keyed is not Backend.insert_keyed

    def read_keyed(
        self, session_id: str, keys: Sequence[str] | None = None, *, prefix: str | None = None
    ) -> list[KeyedRow]:
        """Return ``(key, seq, created, data)`` of the session's keyed rows, in any order.

        Only the rows filed under ``keys`` when it is given (keys that are
        not there are left out), and only those whose key starts with
        ``prefix`` when it is given. Answer it from an index of ``(session,
        key)``: a lookup never reads the session's other rows.
        """
        raise NotImplementedError

    def record_keys(self, session_id: str, prefix: str | None = None) -> list[str]:
        """Return the keys of the session's keyed rows (those starting with ``prefix``), in any order.

        By default read with :meth:`read_keyed`; a backend that can list the
        keys without the rows overrides it.
        """
        return [row[0] for row in self.read_keyed(session_id, prefix=prefix)]

    def keyed_seqs(self, tx: Transaction, session_id: str, keys: Sequence[str]) -> dict[str, int]:
        """Return ``{key: seq}`` of the rows filed under ``keys`` that exist, inside the transaction ``tx``."""
        raise NotImplementedError

    def read_keyed_in(
        self, tx: Transaction, session_id: str, keys: Sequence[str]
    ) -> list[KeyedRow]:
        """Return ``(key, seq, created, data)`` of the rows filed under ``keys`` that exist, in any order, inside ``tx``.

        Called by ``Store.put_records(..., keep=...)``, after the session
        was locked or created in ``tx``. By default read with
        :meth:`read_keyed`, outside the transaction; a backend whose reads
        would wait on its own transaction overrides it.
        """
        return self.read_keyed(session_id, keys)

    def insert_keyed(
        self,
        tx: Transaction,
        session_id: str,
        rows: Sequence[Row],
        keys: Sequence[str],
        terms: Sequence[Terms],
    ) -> list[int]:
        """Insert rows as :meth:`insert_rows` does, each filed under its key (one per row); return their seqs.

        The store has deleted (with :meth:`delete_rows`) any row filed under
        one of ``keys`` in the same transaction, so a key is never held by
        two rows; an engine with a unique index on ``(session, key)`` may
        rely on it. Deleting a row, clearing or deleting its session frees
        its key.
        """
        raise NotImplementedError

    # -- optional: vectors (with keeps_vectors) ---------------------------------------------

    def vector_model(self, session_id: str) -> tuple[str, int] | None:
        """Return the ``(model, dimension)`` recorded for a session's vectors, or ``None``."""
        return None

    def vector_pages(
        self, session_id: str, fields: str, size: int
    ) -> Iterator[list[tuple[int, bytes]]]:
        """Yield ``(seq, vector)`` of the vector rows over ``fields`` in seq order, at most ``size`` at a time."""
        yield from ()

    def vector_matrix(
        self, session_id: str, fields: str
    ) -> tuple[Sequence[int], Sequence[int], bytes | memoryview] | None:
        """Return every vector row over ``fields`` at once, or ``None`` (the default) to have them read by :meth:`vector_pages`.

        The rows as ``(seqs, lengths, vectors)``: the seqs ascending, each
        row's byte length, and the rows' bytes one after the other, the same
        rows :meth:`vector_pages` yields. A backend that holds them in one
        block (JSONL's vector file, mapped) hands them over without making
        an object a row.
        """
        return None

    def vector_count(self, session_id: str, fields: str) -> int:
        """Return how many items have a vector row over ``fields`` (asked before every semantic query; default: count the pages)."""
        return sum(len(page) for page in self.vector_pages(session_id, fields, 4096))

    def vector_bytes(self, session_id: str, fields: str) -> int:
        """Return the bytes of the session's vector rows over ``fields`` together (default: sum the pages)."""
        return sum(
            len(vector)
            for page in self.vector_pages(session_id, fields, 4096)
            for _, vector in page
        )

    def vector_counts(self, session_id: str, fields: str) -> tuple[int, int]:
        """Return how many items have a vector row over ``fields``, and how many of those rows are not empty."""
        rows = [row for page in self.vector_pages(session_id, fields, 4096) for row in page]
        return len(rows), sum(1 for _, vector in rows if vector)

    def vectors_version(self, session_id: str, fields: str) -> Hashable | None:
        """Return a value that changes whenever the session's vector rows over ``fields`` may have changed, or ``None``.

        The store keeps the vectors a semantic query read in memory, per
        session, and scores the next queries from them while this value
        compares equal (``==``); once it differs they are read again. It
        must change with every write to those rows, by this handle or by
        any other handle or process, and it is read before the vectors it
        vouches for. A value that changes more often than needed (at every
        commit to the file) is correct, only slower. By default ``None``:
        nothing is kept, the vectors are read at each query.
        """
        return None

    def vector_changes(
        self, session_id: str, fields: str, since: Hashable, now: Hashable
    ) -> set[int] | None:
        """Return the seqs whose vector rows over ``fields`` may have changed from version ``since`` to ``now``, or ``None`` if it cannot tell.

        ``since`` and ``now`` are values :meth:`vectors_version` gave, ``since``
        first. A store that kept a session's vectors at ``since`` reads the
        rows of the seqs returned again (the rows of seqs written after
        ``now`` may come with them) instead of every row. A set that holds
        more seqs than changed is correct, only slower; one that misses a
        changed row serves a stale vector, so return ``None`` for any write
        the backend cannot name, whoever made it (SQLite and PostgreSQL
        read a change log their triggers write in every vector write's
        transaction; JSONL reads its log's records). By default ``None``:
        every row is read again. The contract suite checks the answers
        (``BackendContract``).
        """
        return None

    def vectors_of(
        self, session_id: str, fields: str, seqs: Sequence[int]
    ) -> list[tuple[int, bytes]]:
        """Return ``(seq, vector)`` of the vector rows over ``fields`` with these seqs, in seq order."""
        wanted = set(seqs)
        return [
            row
            for page in self.vector_pages(session_id, fields, 4096)
            for row in page
            if row[0] in wanted
        ]

    def nearest(
        self, session_id: str, fields: str, query: bytes, limit: int, among: Sequence[int]
    ) -> list[tuple[int, float | None, int]] | None:
        """Return cosines the engine computes where the vectors lie, or ``None`` (the default) to have the store read them.

        ``query`` is the unit query vector laid out as stored vectors are.
        The rows returned are ``(seq, cosine, length)`` of the session's
        non-empty vector rows over ``fields`` among the best ``limit`` by
        cosine (with every row tied with the last) or whose seq is in
        ``among``, and of every row whose byte length is not ``len(query)``,
        with cosine ``None`` (reported as damage).
        """
        return None

    def ranks_vectors(self, session_id: str, fields: str) -> bool:
        """Return whether :meth:`nearest` ranks the session's vector rows over ``fields`` now (it would not return ``None``).

        The store asks it of vectors of whole items only (one vector a row,
        the only ones it hands to :meth:`nearest`; vectors cut into parts
        are always scored with numpy), after :meth:`vectors_version` and
        before reading them all (``Store.read_vectors``, as a
        ``StoredMemory`` does as it opens): where the answer is ``True``,
        it keeps no copy of them in memory for numpy to score, since a
        query never scores from one. ``True`` where :meth:`nearest` then
        gives ``None`` is correct, only slower (the first query reads the
        vectors again); ``False``, the default, keeps the copy.
        """
        return False

    def unembedded_pages(
        self, session_id: str, fields: str, size: int
    ) -> Iterator[list[tuple[int, bytes]]]:
        """Yield ``(seq, data)`` of the rows with no vector row over ``fields``, in seq order, at most ``size`` at a time."""
        have = {seq for page in self.vector_pages(session_id, fields, 4096) for seq, _ in page}
        for page in self.read_pages(session_id, size):
            missing = [row for row in page if row[0] not in have]
            if missing:
                yield missing

    def claim_vector_model(
        self, tx: Transaction, session_id: str, model: str, dimension: int
    ) -> tuple[str, int]:
        """Record ``(model, dimension)`` for a session that has none; return the one recorded."""
        raise NotImplementedError

    def put_vectors(
        self,
        tx: Transaction,
        session_id: str,
        fields: str,
        rows: Sequence[tuple[int, bytes, bytes]],
    ) -> int:
        """Write ``(seq, data, vector)`` rows over ``fields`` where item ``seq`` still holds ``data``; return how many."""
        raise NotImplementedError

    def delete_vectors(self, tx: Transaction, session_id: str, seqs: Sequence[int]) -> None:
        """Delete the vectors (over every ``fields``) of these seqs."""

    def drop_vectors(self, tx: Transaction, session_id: str) -> int:
        """Delete every vector of a session and its recorded model; return how many vector rows went."""
        return 0
