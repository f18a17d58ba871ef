"""What every store shares: the base class, session-id rules, encoding of rows, migrations.

A store keeps *sessions* and *rows*. A session has a step key (the field that
names an item's step), the time it was created and its metadata (the codec's
bytes for a dict). A row is one item: its encoded bytes (the codec's wire
form, exactly what ``Memory.to_json`` writes for that item), a *step text*
(the item's step value encoded in one canonical way, so that step filters can
be answered by the store without decoding items), the time the row was
written, and a *seq*: a number the store gives the row when it is inserted.
Within a session, rows are read in seq order, which is the order in which
their inserts committed. A seq is never given twice in a session, not even
after the session was deleted and created again.

:class:`BaseStore` is the one base of every store. It owns everything that
is the same for all of them: session-id and argument checks, encoding and
decoding through the codec, the step-key check, read-only refusal, and the
wrapper that turns the driver's errors into :class:`StoreError`. A backend
implements only the row primitives listed in :class:`BaseStore`'s docstring.
"""

from __future__ import annotations

import abc
import contextlib
import datetime as dt
import heapq
import itertools
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs
from typing_extensions import Self

from agents.memory import _codec
from agents.memory._codec import OnUnencodable
from agents.memory._item import (
    MemoryItem,
    OnUnknownClass,
    item_fields,
)
from agents.memory._text import (
    BM25_B,
    BM25_K1,
    MIN_IDF,
    Tokenizer,
    bm25_idf,
    check_k,
    checked_keys,
    checked_query,
)
from agents.memory._vectors import (
    HYBRID_POOL,
    VECTOR_DTYPE,
    Embedder,
    SearchMode,
    best_cosines,
    blend,
    checked_vectors,
    checked_weight,
    embed_text,
    fields_text,
    keyword_scale,
    numpy,
)
from agents.memory.exceptions import (
    CorruptSessionError,
    CorruptStoreError,
    EmbedderMismatchError,
    InvalidQueryError,
    InvalidSessionIdError,
    InvalidStoreURLError,
    StoreArgumentError,
    StoreError,
)
from agents.memory.stores._encoding import (
    SEQ_MAX,
    IndexEntry,
    Row,
    RowUpdate,
    SessionRow,
    StoredRecord,
    check_seq,
    decode_pairs,
    decode_rows,
    encode_metadata,
    encode_rows,
    rows_terms,
    step_text,
    step_texts,
)
from agents.memory.stores._keyword import (
    Terms,
    item_terms,
    keyword_matches,
    keyword_query,
    rank_pages,
)
from agents.memory.stores._migrations import check_schema_version, migrate

__all__ = [
    "SESSION_ID_MAX_LENGTH",
    "BaseStore",
    "IndexEntry",
    "Row",
    "RowUpdate",
    "SessionInfo",
    "SessionRow",
    "StoreHit",
    "StoredRecord",
    "Terms",
    "VectorModel",
    "WriteBatch",
    "check_schema_version",
    "check_session_id",
    "check_store_path",
    "decode_pairs",
    "decode_rows",
    "encode_metadata",
    "encode_rows",
    "item_terms",
    "migrate",
    "step_text",
]

SESSION_ID_MAX_LENGTH: Final = 128
"""The longest session id a store accepts, in characters."""
_SESSION_ID: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
_EMPTY_METADATA: Final = b"{}"


def check_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a valid session id, else raise.

    A session id is 1 to 128 characters among ASCII letters, digits, ``_``,
    ``.`` and ``-``, and does not start with ``.`` or ``-``. It is matched
    exactly (no prefix or wildcard), and is safe as a file name and as a bound
    SQL parameter.

    Raises:
        InvalidSessionIdError: naming the id and the rule it breaks.
    """
    if type(session_id) is not str:
        msg = (
            f"A session id must be a string, got {session_id!r} ({type(session_id).__name__}); "
            "every store call names the session it reads or writes."
        )
        raise InvalidSessionIdError(msg)
    if not session_id:
        msg = "A session id must not be empty; pick a name such as 'run-1'."
        raise InvalidSessionIdError(msg)
    if len(session_id) > SESSION_ID_MAX_LENGTH:
        msg = (
            f"Session id {session_id[:40]!r}... is {len(session_id)} characters long; "
            f"the limit is {SESSION_ID_MAX_LENGTH}."
        )
        raise InvalidSessionIdError(msg)
    if _SESSION_ID.fullmatch(session_id) is None:
        msg = (
            f"Session id {session_id!r} holds characters a store does not accept; use ASCII "
            "letters, digits, '_', '.' and '-' (not first), with no path separators, quotes or spaces."
        )
        raise InvalidSessionIdError(msg)
    return session_id


def check_store_path(path: str | os.PathLike[str]) -> str:
    """Return ``path`` as text if a store may live there, else raise.

    A NUL character cannot be part of a file name; the operating system would
    cut the path at it and open another file, so it is refused outright.

    Raises:
        InvalidStoreURLError: if the path is empty or holds a NUL character.
    """
    text = os.fspath(path)
    if type(text) is not str:
        msg = f"A store path must be text, got {path!r}."
        raise InvalidStoreURLError(msg)
    if "\x00" in text:
        msg = (
            f"Store path {text!r} holds a NUL character, which no file name can contain; remove it."
        )
        raise InvalidStoreURLError(msg)
    if not text:
        msg = "The store path is empty; pass a file or directory path."
        raise InvalidStoreURLError(msg)
    return text


@attrs.frozen
class SessionSummary:
    """Counts of a session, as ``kvmemory stats`` prints them (see :meth:`BaseStore.summary`)."""

    items: int
    """How many items the session holds."""
    steps: int
    """How many distinct steps its items name (items without a step are not counted)."""
    first_step: Any
    """The step of the first item that has one, or ``None``."""
    last_step: Any
    """The last step to appear for the first time, or ``None``."""
    cost: float
    """The sum of the numeric (``int`` or ``float``, not ``bool``) values of the cost field."""
    fields: dict[str, int]
    """How many items hold each field, most common first (ties in order of first appearance)."""

    @classmethod
    def of(
        cls,
        pages: Iterable[Sequence[MemoryItem]],
        *,
        step_key: str = "step",
        cost_key: str = "cost",
    ) -> SessionSummary:
        """Count a session from its items, given in order in pages (holding one page at a time).

        Args:
            pages: The items, in pages (lists) of any size; an iterator is read once.
            step_key: The field that names an item's step.
            cost_key: The numeric field summed as cost.
        """
        items = 0
        cost = 0.0
        fields: Counter[str] = Counter()
        steps: dict[Any, None] = {}
        unhashable: list[Any] = []
        for page in pages:
            items += len(page)
            for item in page:
                fields.update(item.keys())
                value = item.get_value(cost_key)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    cost += value
                if step_key not in item:
                    continue
                step = item[step_key]
                try:
                    steps.setdefault(step, None)
                except TypeError:  # a list or dict step: kept in order, compared by value
                    if step not in unhashable:
                        unhashable.append(step)
        order = [*steps, *unhashable]
        return cls(
            items=items,
            steps=len(order),
            first_step=order[0] if order else None,
            last_step=order[-1] if order else None,
            cost=cost,
            fields=dict(fields.most_common()),
        )


@attrs.frozen
class VectorModel:
    """The embedding model a session's stored vectors came from (see :meth:`BaseStore.vector_model`)."""

    name: str
    """The embedder's ``name``."""
    dimension: int
    """The length of each vector."""


@attrs.frozen
class StoreHit:
    """One item found by :meth:`BaseStore.search`: its seq, the item and its score (BM25, cosine or the hybrid blend)."""

    seq: int
    item: MemoryItem
    score: float


_TOKENIZER: Final = Tokenizer()


@attrs.frozen
class SessionInfo:
    """What a store knows about one session, apart from its items.

    Attributes:
        session_id: The session's id.
        step_key: The field that names an item's step in this session.
        metadata: The free-form data saved with :meth:`BaseStore.set_metadata`
            (a fresh dict, decoded through the codec).
        created: When the session was created (UTC).
    """

    session_id: str
    step_key: str
    metadata: dict[str, Any]
    created: dt.datetime


class BaseStore(abc.ABC):
    """The base of every store: the public calls, built on a few row primitives.

    A backend subclasses this and implements the primitives below; the public
    calls, the checks and the error wrapping are done here, once, for every
    store. The split follows what a storage engine can do in one step, so
    that each primitive has one job and no option flags:

    * Reading (no transaction): :meth:`_read_session`, :meth:`_fetch`,
      :meth:`_count`, :meth:`_sessions` (and optionally :meth:`_fetch_keys`).
    * Writing: :meth:`_transaction` opens one exclusive write transaction on
      one session and yields a handle; inside it :meth:`_lock_session`,
      :meth:`_create_session`, :meth:`_set_metadata`, :meth:`_insert_rows`,
      :meth:`_update_rows`, :meth:`_delete_rows`, :meth:`_clear_rows` and
      :meth:`_row_index` take that handle. What they do becomes visible to
      other handles all together when the block exits cleanly, and not at
      all when it raises.
    * :meth:`_delete_session` (its own transaction; the store must remember
      the session's last seq so that a recreated session never reuses one),
      and :meth:`_close`.
    * Optionally :meth:`_append_rows`: a plain append in one step, for an
      engine where the transaction would cost extra round trips.
    * Optionally the vectors of semantic search: reading with
      :meth:`_vector_model`, :meth:`_vector_pages` and
      :meth:`_unembedded_pages` (and, for speed, :meth:`_vector_count`,
      :meth:`_vector_counts`, :meth:`_fetch_vectors`, and :meth:`_nearest` where
      the database computes cosines itself); writing, inside a transaction, with
      :meth:`_claim_vector_model`, :meth:`_put_vectors`,
      :meth:`_delete_vectors` and :meth:`_drop_vectors`; and
      :meth:`_delete_session` removes them too. The defaults keep no
      vectors: keyword search works, semantic search raises
      :class:`StoreError`. The base deletes the vectors of rows it deletes,
      updates or clears, in the same transaction.

    Why this split rather than one ``write(add=, delete=, update=, clear=)``
    call: a flag-driven call makes every backend re-implement the same
    ordering, step-key check and bookkeeping, and hides which of its jobs a
    backend got wrong. With one transaction and single-job primitives, the
    rules live here once (``WriteBatch`` composes clear, deletes, updates,
    appends and trims in a fixed order), each primitive maps to one
    statement in SQL or one record kind in a log, and the contract suite can
    name the primitive that breaks.

    Primitives may assume a valid session id and checked arguments, and let
    the driver's own errors escape: every public call runs them inside
    :meth:`_errors`, which turns the exception types listed in
    :attr:`driver_errors` into :class:`StoreError` naming the store, the
    session and the action. Compound operations (``delete_steps``,
    ``keep_last``, ``expire``) are composed here from :meth:`_row_index` and
    :meth:`_delete_rows`, so a backend does not write them.

    A backend also keeps its layout versioned the way :func:`migrate` says,
    and passes the contract suite in :mod:`agents.memory.stores.testing`.

    Args:
        url: The URL the store was opened with (passwords hidden).
        read_only: Refuse every write call.
    """

    schema_version: int = 2
    """The layout version this kvmemory writes."""

    driver_errors: tuple[type[BaseException], ...] = (OSError,)
    """Exceptions of the storage driver that :meth:`_errors` turns into :class:`StoreError`."""

    keeps_terms: bool = False
    """Whether writes hand the rows' search terms to :meth:`_insert_indexed` and :meth:`_update_indexed`.

    A store that keeps a keyword index sets this; :class:`WriteBatch` then
    tokenizes each item once, where it is encoded.
    """

    def __init__(self, url: str, *, read_only: bool = False) -> None:
        self._url = url
        self.read_only = read_only
        self._closed = False
        self._close_lock = threading.Lock()

    # -- primitives: reading ---------------------------------------------------------

    @abc.abstractmethod
    def _read_session(self, session_id: str) -> SessionRow | None:
        """Return the session's ``(step_key, created, metadata)``, or ``None`` if it does not exist."""

    @abc.abstractmethod
    def _fetch(
        self, session_id: str, *, steps: Sequence[str] | None, after: int | None
    ) -> list[tuple[int, bytes]]:
        """Return ``(seq, data)`` of the rows whose step text is in ``steps`` (all if ``None``) and seq above ``after``, in seq order."""

    def _fetch_keys(
        self, session_id: str, keys: Sequence[str], *, steps: Sequence[str] | None
    ) -> list[tuple[int, bytes]]:
        """Return ``(seq, data)`` of matching rows, where ``data`` may hold only ``keys``.

        A store that can cut rows down to some keys in its query language,
        exactly as the codec wrote them, overrides this; by default whole
        rows are read and cut in Python.
        """
        return self._fetch(session_id, steps=steps, after=None)

    def _fetch_last(
        self, session_id: str, n: int, *, steps: Sequence[str] | None
    ) -> list[tuple[int, bytes]]:
        """Return ``(seq, data)`` of the last ``n`` (> 0) matching rows, in seq order.

        A store that can read the end of a session without the rest overrides
        this; by default the whole session is read and its end kept.
        """
        return self._fetch(session_id, steps=steps, after=None)[-n:]

    def _fetch_pages(self, session_id: str, size: int) -> Iterator[list[tuple[int, bytes]]]:
        """Yield ``(seq, data)`` of a session's rows in seq order, at most ``size`` (> 0) at a time.

        A store that can read a session a page at a time overrides this, so
        that a reader holds one page at once; by default the session is read
        in one go and handed out in pages.
        """
        rows = self._fetch(session_id, steps=None, after=None)
        for start in range(0, len(rows), size):
            yield rows[start : start + size]

    @abc.abstractmethod
    def _count(self, session_id: str) -> int:
        """Return the number of rows of a session (0 if it does not exist)."""

    @abc.abstractmethod
    def _sessions(self) -> list[str]:
        """Return the ids of every session, sorted by code point."""

    # -- primitives: writing -----------------------------------------------------------

    @abc.abstractmethod
    def _transaction(self, session_id: str) -> contextlib.AbstractContextManager[Any]:
        """Open one exclusive write transaction on a session and yield a handle for the primitives."""

    def _append_rows(
        self,
        session_id: str,
        step_key: str,
        rows: Sequence[Row],
        terms: Sequence[Terms] | None = None,
    ) -> list[int] | None:
        """Optionally append rows in one step and return their seqs, or ``None`` to decline.

        A store whose engine can create-or-lock the session, check its step key
        and insert the rows in one statement overrides this (PostgreSQL: one
        round trip instead of four). It must decline, writing nothing, unless
        the session is new or live with this ``step_key``; :class:`WriteBatch`
        then runs the general transaction, which raises or recreates. By
        default every append takes the general transaction. ``terms`` are
        the rows' search terms when the store :attr:`keeps_terms`.
        """
        return None

    @abc.abstractmethod
    def _lock_session(self, tx: Any, session_id: str) -> SessionRow | None:
        """Return the session inside the transaction (``None`` if it does not exist), keeping other writers out of it."""

    @abc.abstractmethod
    def _create_session(self, tx: Any, session_id: str, step_key: str, created: float) -> None:
        """Create a session that does not exist, with empty metadata."""

    @abc.abstractmethod
    def _set_metadata(self, tx: Any, session_id: str, metadata: bytes) -> None:
        """Replace the encoded metadata of an existing session."""

    @abc.abstractmethod
    def _insert_rows(self, tx: Any, session_id: str, rows: Sequence[Row]) -> list[int]:
        """Insert rows into an existing session and return their new seqs, increasing."""

    @abc.abstractmethod
    def _update_rows(self, tx: Any, session_id: str, rows: Sequence[RowUpdate]) -> list[int]:
        """Replace the step text and data of rows by seq; return the seqs that existed."""

    def _insert_indexed(
        self, tx: Any, session_id: str, rows: Sequence[Row], terms: Sequence[Terms]
    ) -> list[int]:
        """Insert rows as :meth:`_insert_rows` does, with their search terms (see :attr:`keeps_terms`)."""
        return self._insert_rows(tx, session_id, rows)

    def _update_indexed(
        self, tx: Any, session_id: str, rows: Sequence[RowUpdate], terms: Sequence[Terms]
    ) -> list[int]:
        """Update rows as :meth:`_update_rows` does, with their new search terms (see :attr:`keeps_terms`)."""
        return self._update_rows(tx, session_id, rows)

    @abc.abstractmethod
    def _delete_rows(self, tx: Any, session_id: str, seqs: Sequence[int]) -> list[int]:
        """Delete rows by seq; return the seqs that existed."""

    @abc.abstractmethod
    def _clear_rows(self, tx: Any, session_id: str) -> int:
        """Delete every row of a session and return how many there were."""

    @abc.abstractmethod
    def _row_index(self, tx: Any, session_id: str) -> list[IndexEntry]:
        """Return ``(seq, step_text, created)`` of every row of a session, in seq order."""

    @abc.abstractmethod
    def _delete_session(self, session_id: str) -> bool:
        """Delete a session and its rows in one transaction; return whether it existed.

        The store keeps what it needs so that a session created again later
        under the same id continues with seqs above every seq of this one.
        """

    @abc.abstractmethod
    def _close(self) -> None:
        """Release connections and files."""

    # -- primitives: vectors (optional; the defaults keep none) -------------------------

    def _vector_model(self, session_id: str) -> tuple[str, int] | None:
        """Return the ``(model, dimension)`` recorded for a session's vectors, or ``None``."""
        return None

    def _vector_count(self, session_id: str, fields: str) -> int:
        """Return how many items of a session have a vector row over ``fields`` (empty rows included).

        Semantic search compares it with :meth:`_count` before every query,
        so a store that can count without reading the vectors overrides this.
        """
        return sum(len(page) for page in self._vector_pages(session_id, fields, 4096))

    def _vector_counts(self, session_id: str, fields: str) -> tuple[int, int]:
        """Return how many items of a session have a vector row over ``fields``, and how many of those rows are not empty."""
        rows = [row for page in self._vector_pages(session_id, fields, 4096) for row in page]
        return len(rows), sum(1 for _, vector in rows if vector)

    def _vector_pages(
        self, session_id: str, fields: str, size: int
    ) -> Iterator[list[tuple[int, bytes]]]:
        """Yield ``(seq, vector)`` of a session's vector rows over ``fields`` in seq order, at most ``size`` at a time.

        ``vector`` is ``4 * dimension`` bytes of little-endian float32, or
        empty for an item without text (embedded, but never a hit).
        """
        yield from ()

    def _fetch_vectors(
        self, session_id: str, fields: str, seqs: Sequence[int]
    ) -> list[tuple[int, bytes]]:
        """Return ``(seq, vector)`` of the vector rows over ``fields`` with these seqs, in seq order.

        A store that can read rows by seq overrides this; by default every
        vector row of the session is read and the wanted ones kept.
        """
        wanted = set(seqs)
        return [
            row
            for page in self._vector_pages(session_id, fields, 4096)
            for row in page
            if row[0] in wanted
        ]

    def _unembedded_pages(
        self, session_id: str, fields: str, size: int
    ) -> Iterator[list[tuple[int, bytes]]]:
        """Yield ``(seq, data)`` of the rows without a vector row over ``fields``, in seq order, at most ``size`` at a time.

        A store that can find them in its query language overrides this; by
        default the seqs holding a vector are read first, then the session
        a page at a time.
        """
        have = {seq for page in self._vector_pages(session_id, fields, 4096) for seq, _ in page}
        for page in self._fetch_pages(session_id, size):
            missing = [row for row in page if row[0] not in have]
            if missing:
                yield missing

    def _claim_vector_model(
        self, tx: Any, session_id: str, model: str, dimension: int
    ) -> tuple[str, int]:
        """Record ``(model, dimension)`` for a session that has none, and return the one recorded."""
        msg = (
            f"{type(self).__name__} {self._url} keeps no vectors: its backend does not implement "
            "BaseStore._claim_vector_model and _put_vectors. Search it by keyword, or load the "
            "session into a Memory for semantic search."
        )
        raise StoreError(msg)

    def _put_vectors(
        self, tx: Any, session_id: str, fields: str, rows: Sequence[tuple[int, bytes, bytes]]
    ) -> int:
        """Write ``(seq, data, vector)`` rows over ``fields`` (replacing old ones); return how many were written.

        A row is written only if the item ``seq`` still exists and still
        holds ``data``: a vector computed from an item that another handle
        changed or deleted meanwhile is dropped, never stored.
        """
        msg = f"{type(self).__name__} {self._url} keeps no vectors: its backend does not implement BaseStore._put_vectors."
        raise StoreError(msg)

    def _nearest(
        self, session_id: str, fields: str, query: bytes, limit: int, among: Sequence[int]
    ) -> list[tuple[int, float | None, int]] | None:
        """Return cosines that the database computes where the vectors lie, or ``None`` if it cannot.

        A store whose database can compute the cosine of two stored vectors
        overrides this, so that a query does not read every vector.
        ``query`` is the unit query vector laid out as stored vectors are.
        The rows returned are ``(seq, cosine, length)`` of the session's
        non-empty vector rows over ``fields`` that are among the best
        ``limit`` by cosine (with every row tied with the last) or whose seq
        is in ``among``, and of every row whose byte length is not
        ``len(query)``, with cosine ``None`` (the base reports it as damage):
        what :func:`best_cosines` keeps of the same cosines. By default
        (``None``) the base reads the vectors with :meth:`_vector_pages` and
        computes the cosines with numpy.
        """
        return None

    def _delete_vectors(self, tx: Any, session_id: str, seqs: Sequence[int]) -> None:
        """Delete the vectors (over every ``fields``) of these seqs, deleted or changed in this transaction."""
        return  # a store that keeps no vectors has none to delete

    def _drop_vectors(self, tx: Any, session_id: str) -> int:
        """Delete every vector of a session and the model recorded for it; return how many vector rows went."""
        return 0

    def _error(self, action: str, where: str, exc: BaseException) -> StoreError:
        """Return the :class:`StoreError` for a driver error (override to tell corruption apart)."""
        msg = f"Cannot {action}{where} {self._url}: {exc}; nothing was changed."
        return StoreError(msg)

    # -- public calls -----------------------------------------------------------

    @property
    def url(self) -> str:
        """The URL the store was opened with (passwords hidden)."""
        return self._url

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def keyword_index(self) -> bool:
        """Whether :meth:`search` without ``keys`` is answered by a keyword index the store keeps.

        ``True`` for SQLite (FTS5) and PostgreSQL (``tsvector``); ``False``
        for the JSONL and in-memory stores, and for an SQLite file of an
        older layout opened read-only, which read the session and tokenize
        it on every search. Either way the ranking is the same.
        """
        return False

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

    def read(
        self,
        session_id: str,
        *,
        steps: Iterable[Any] | None = None,
        after: int | None = None,
        on_unknown_class: OnUnknownClass = "error",
    ) -> list[MemoryItem]:
        """Return a session's items in seq order.

        Args:
            session_id: The session to read; an unknown session reads as empty.
            steps: Only items whose step is one of these (answered by the store).
            after: Only items with a seq greater than this.
            on_unknown_class: ``"base"`` reads items whose class cannot be
                imported as plain ``MemoryItem`` instead of raising.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``after`` is not an int seq.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        records = self.records(
            session_id, steps=steps, after=after, on_unknown_class=on_unknown_class
        )
        return [record.item for record in records]

    def records(
        self,
        session_id: str,
        *,
        steps: Iterable[Any] | None = None,
        after: int | None = None,
        on_unknown_class: OnUnknownClass = "error",
    ) -> list[StoredRecord]:
        """Return :meth:`read`'s items with their seqs.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``after`` is not an int seq.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        sid = self._check(session_id)
        texts = None if steps is None else step_texts(steps)
        if after is not None:
            after = check_seq(after, "after")
        if texts == []:
            return []
        with self._errors("read", sid):
            rows = self._fetch(sid, steps=texts, after=after)
        return decode_rows(rows, f"session {sid!r} of {self._url}", on_unknown_class)

    def project(
        self, session_id: str, keys: Iterable[str], *, steps: Iterable[Any] | None = None
    ) -> list[dict[str, Any]]:
        """Return, for each item of a session, a new dict of its fields among ``keys``.

        The store's side of ``Memory.filter_memory_from_keys``: one dict per
        item in seq order, ``{}`` for an item that holds none of the keys,
        fields in the order of ``keys``, values decoded through the codec
        exactly as :meth:`read` would give them. PostgreSQL cuts large rows
        down to ``keys`` on the server, so big fields that are not asked for
        (screenshots, long pages) are never sent. SQLite reads whole rows: its
        JSON functions measured slower than decoding whole rows in Python
        (``benchmarks/bench_stores.py``).

        Args:
            session_id: The session to read; an unknown session reads as empty.
            keys: The field keys to keep.
            steps: Only items whose step is one of these.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if a key is not a string.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        sid = self._check(session_id)
        wanted = list(keys) if not isinstance(keys, str) else [keys]
        for key in wanted:
            if type(key) is not str:
                msg = f"project() takes string keys, got {key!r} ({type(key).__name__})."
                raise StoreArgumentError(msg)
        texts = None if steps is None else step_texts(steps)
        if texts == []:
            return []
        with self._errors("read", sid):
            rows = self._fetch_keys(sid, wanted, steps=texts)
        pairs = decode_pairs(rows, f"session {sid!r} of {self._url}", "base")
        return [
            {k: f[k] for k in wanted if k in f} for f in (item_fields(item) for _, item in pairs)
        ]

    def tail(
        self,
        session_id: str,
        n: int,
        *,
        steps: Iterable[Any] | None = None,
        on_unknown_class: OnUnknownClass = "error",
    ) -> list[StoredRecord]:
        """Return the last ``n`` items of a session (among ``steps``, when given), oldest first.

        SQLite and PostgreSQL read only those rows, so the cost follows ``n``,
        not the length of the session (``kvmemory show --last`` and ``replay
        --last`` use this); the JSONL and in-memory stores read the session
        and keep its end.

        Args:
            session_id: The session to read; an unknown session reads as empty.
            n: How many items, counted from the newest; 0 gives none.
            steps: Only items whose step is one of these.
            on_unknown_class: ``"base"`` reads items whose class cannot be
                imported as plain ``MemoryItem`` instead of raising.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``n`` is not an int, or negative.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        sid = self._check(session_id)
        if type(n) is not int or n < 0:
            msg = f"tail() takes a number of items, 0 or more, got {n!r}."
            raise StoreArgumentError(msg)
        texts = None if steps is None else step_texts(steps)
        if n == 0 or texts == []:
            return []
        with self._errors("read", sid):
            rows = self._fetch_last(sid, n, steps=texts)
        return decode_rows(rows, f"session {sid!r} of {self._url}", on_unknown_class)

    def pages(
        self,
        session_id: str,
        *,
        size: int = 1000,
        on_unknown_class: OnUnknownClass = "error",
    ) -> Iterator[list[StoredRecord]]:
        """Yield a session's items in seq order, ``size`` at a time, to go through it without holding it.

        SQLite and PostgreSQL read one page per query (items appended while
        the pages are read are included); the JSONL and in-memory stores read
        the session once and decode it a page at a time.

        Args:
            session_id: The session to read; an unknown session yields nothing.
            size: The most items in one page.
            on_unknown_class: ``"base"`` reads items whose class cannot be
                imported as plain ``MemoryItem`` instead of raising.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``size`` is not a positive int.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        sid = self._check(session_id)
        if type(size) is not int or size < 1:
            msg = f"pages() takes a page size of 1 or more items, got {size!r}."
            raise StoreArgumentError(msg)
        return self._decoded_pages(sid, size, on_unknown_class)

    def _decoded_pages(
        self, sid: str, size: int, on_unknown_class: OnUnknownClass
    ) -> Iterator[list[StoredRecord]]:
        source = f"session {sid!r} of {self._url}"
        fetched = self._fetch_pages(sid, size)
        while True:
            with self._errors("read", sid):
                rows = next(fetched, None)
            if rows is None:
                return
            if rows:
                yield decode_rows(rows, source, on_unknown_class)

    def search(
        self,
        session_id: str,
        query: str,
        k: int = 5,
        *,
        keys: Iterable[str] | None = None,
        on_unknown_class: OnUnknownClass = "error",
        mode: SearchMode = "keyword",
        embedder: Embedder | None = None,
        hybrid_weight: float | None = None,
    ) -> list[StoreHit]:
        """Return the ``k`` items of a session that best match ``query``, best first: by BM25 unless ``mode`` says otherwise.

        The ranking is the one ``Memory.search(query, k, keys=keys)`` gives
        for the same items (default :class:`~agents.memory.search.Tokenizer`,
        FTS5's ``k1``, ``b`` and IDF floor, statistics of this session alone),
        within ties, which keep session order. SQLite and PostgreSQL answer
        it from a keyword index they keep with the rows (FTS5, ``tsvector``)
        and read only the ``k`` items found; with ``keys``, and in the JSONL
        and in-memory stores, the session is read a page at a time and
        tokenized, keeping only the items holding a query term (see
        :attr:`keyword_index`). Either way a stored session is searched
        without loading it into a ``Memory``.

        Args:
            session_id: The session to search; an unknown session has no hits.
            query: The words to look for.
            k: How many hits at most.
            keys: Search only these fields (default: every string field, nested strings included).
            on_unknown_class: ``"base"`` reads items whose class cannot be
                imported as plain ``MemoryItem`` instead of raising.
            mode: ``"keyword"`` (BM25, the default), ``"semantic"`` (exact
                cosine over the vectors stored with the items, read a page
                at a time) or ``"hybrid"`` (the blend ``Memory.search``
                uses). Semantic and hybrid modes first embed and store the
                items that have no vector yet (see :meth:`index_embeddings`;
                a read-only handle embeds them without storing), and rank
                as ``Memory.search`` with the same embedder does.
            embedder: The model, for semantic and hybrid modes (required there).
            hybrid_weight: The keyword share of a hybrid score, 0 to 1
                (default ``HYBRID_KEYWORD_WEIGHT``).

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            InvalidQueryError: for an empty query or one without words, ``k`` outside 1 to 2**63 - 1,
                keys that are not field names, an unknown mode, or no embedder
                in semantic and hybrid modes.
            EmbedderMismatchError: if the session holds vectors of another model.
            EmbeddingError: if the embedder returns the wrong shape or NaN.
            MissingDependencyError: naming the extra when numpy is missing.
            CorruptSessionError: if a stored item cannot be decoded.
            CorruptStoreError: if a stored vector has the wrong length, or the
                store's keyword index is damaged or missing (the message names
                the call that rebuilds it).
            StoreError: if the store cannot be read.
        """
        sid = self._check(session_id)
        if mode != "keyword":
            text = checked_query(query)
            check_k(k)
            fields = checked_keys(keys)
            if mode not in ("semantic", "hybrid"):
                msg = f"search() takes mode='keyword', 'semantic' or 'hybrid', got {mode!r}."
                raise InvalidQueryError(msg)
            weight = checked_weight(hybrid_weight)
            return self._vector_search(
                sid, text, k, fields, mode, embedder, weight, on_unknown_class
            )
        terms, fields = keyword_query(query, k, keys)
        with self._errors("search", sid):
            best, found = self._keyword_top(sid, terms, fields, k, on_unknown_class)
        missing = [seq for _, seq in best if seq not in found]
        if missing:
            with self._errors("search", sid):
                rows = self._fetch_seqs(sid, missing)
            found = {
                **found,
                **dict(decode_pairs(rows, f"session {sid!r} of {self._url}", on_unknown_class)),
            }
        # An item deleted between the two reads is left out rather than failing the search.
        return [StoreHit(seq, found[seq], score) for score, seq in best if seq in found]

    def ranking(
        self, session_id: str, query: str, k: int = 5, *, keys: Iterable[str] | None = None
    ) -> list[tuple[int, float]]:
        """Return ``(seq, score)`` of the ``k`` items that best match ``query``, best first, without reading them.

        The ranking of :meth:`search` (ties in seq order), for a caller that
        holds the items already (``StoredMemory.search`` keeps them in RAM)
        or wants only their seqs. A store with a keyword index reads no
        item; the others read the session as :meth:`search` does.

        Args:
            session_id: The session to search; an unknown session has no hits.
            query: The words to look for.
            k: How many seqs at most.
            keys: Search only these fields.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            InvalidQueryError: as :meth:`search`.
            CorruptSessionError: if the store reads items and one cannot be decoded.
            CorruptStoreError: if the store's keyword index is damaged or missing.
            StoreError: if the store cannot be read.
        """
        sid = self._check(session_id)
        terms, fields = keyword_query(query, k, keys)
        with self._errors("search", sid):
            best, _ = self._keyword_top(sid, terms, fields, k, "base")
        return [(seq, score) for score, seq in best]

    def _keyword_top(
        self,
        sid: str,
        terms: Sequence[str],
        keys: tuple[str, ...] | None,
        k: int,
        on_unknown_class: OnUnknownClass,
    ) -> tuple[list[tuple[float, int]], dict[int, MemoryItem]]:
        """Return the ``k`` best ``(score, seq)``, best first (ties by seq), and any of those items already decoded.

        This base version reads the session a page at a time and scores it
        in Python (:func:`~agents.memory.stores._keyword.rank_pages`); a
        store with a keyword index overrides it to score in its own query
        language and return no items (they are then read with
        :meth:`_fetch_seqs`).
        """
        return rank_pages(self._decoded_pages(sid, 1000, on_unknown_class), terms, keys, k)

    def _fetch_seqs(self, session_id: str, seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        """Return ``(seq, data)`` of the rows with these seqs that exist, in seq order.

        A store that can read rows by seq overrides this; by default the
        session is read and the rows kept.
        """
        wanted = set(seqs)
        return [row for row in self._fetch(session_id, steps=None, after=None) if row[0] in wanted]

    def summary(self, session_id: str, *, cost_key: str = "cost") -> SessionSummary:
        """Return a session's counts: items, distinct steps, cost and how often each field occurs.

        Steps are read from the session's own step key. The session is read a
        page at a time (:meth:`pages`), so its length does not matter to
        memory (``kvmemory stats`` uses this). Counting in SQL with SQLite's
        JSON functions measured twice as slow as decoding the pages in
        Python, so SQLite does not. The answer is :meth:`SessionSummary.of`
        of the session's items.

        Args:
            session_id: The session to count; an unknown session counts as empty.
            cost_key: The numeric field summed as cost.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        sid = self._check(session_id)
        with self._errors("read", sid):
            row = self._read_session(sid)
        if row is None:
            return SessionSummary.of([])
        pages = self._decoded_pages(sid, 1000, "base")
        return SessionSummary.of(
            ([record.item for record in page] for page in pages),
            step_key=row[0],
            cost_key=cost_key,
        )

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
        return WriteBatch(self, self._check_write(session_id), step_key, on_unencodable)

    def count(self, session_id: str) -> int:
        """Return the number of items of a session (0 for an unknown session).

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be read.
        """
        sid = self._check(session_id)
        with self._errors("count", sid):
            return self._count(sid)

    def session_info(self, session_id: str) -> SessionInfo | None:
        """Return what the store knows about a session, or ``None`` if it does not exist.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            CorruptStoreError: if the stored session cannot be decoded.
            StoreError: if the store cannot be read.
        """
        sid = self._check(session_id)
        with self._errors("read", sid):
            row = self._read_session(sid)
        return None if row is None else self._session_info(sid, row)

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
        sid = self._check_write(session_id)
        data = encode_metadata(metadata, sid)
        with self._errors("write metadata of", sid), self._transaction(sid) as tx:
            self._open_session(tx, sid, step_key)
            self._set_metadata(tx, sid, data)

    def delete_steps(self, session_id: str, steps: Iterable[Any]) -> int:
        """Delete every item whose step is in ``steps`` and return how many went.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        sid = self._check_write(session_id)
        wanted = frozenset(step_texts(steps))
        if not wanted:
            return 0
        with self._errors("delete steps from", sid), self._transaction(sid) as tx:
            if self._lock_session(tx, sid) is None:
                return 0
            seqs = [entry[0] for entry in self._row_index(tx, sid) if entry[1] in wanted]
            gone = self._delete_rows(tx, sid, seqs) if seqs else []
            if gone:
                self._delete_vectors(tx, sid, gone)
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
        sid = self._check_write(session_id)
        with self._errors("clear", sid), self._transaction(sid) as tx:
            if self._lock_session(tx, sid) is None:
                return 0
            self._drop_vectors(tx, sid)
            return self._clear_rows(tx, sid)

    def sessions(self) -> list[str]:
        """Return the ids of every session in the store, sorted.

        Raises:
            StoreError: if the store cannot be read.
        """
        self._check_open()
        with self._errors("list sessions of", None):
            return self._sessions()

    def delete_session(self, session_id: str) -> bool:
        """Delete a session with its items; return whether it existed.

        Seqs are not reused: if the session is created again, its items get
        seqs above every seq it had before.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        sid = self._check_write(session_id)
        with self._errors("delete", sid):
            return self._delete_session(sid)

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

    # -- vectors: semantic and hybrid search ---------------------------------------------

    def vector_model(self, session_id: str) -> VectorModel | None:
        """Return the embedding model a session's vectors came from, or ``None`` if it has none.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be read.
        """
        sid = self._check(session_id)
        with self._errors("read the vector model of", sid):
            found = self._vector_model(sid)
        return None if found is None else VectorModel(found[0], found[1])

    def index_embeddings(
        self,
        session_id: str,
        embedder: Embedder,
        *,
        keys: Iterable[str] | None = None,
        batch_size: int = 256,
        progress: Callable[[int, int], object] | None = None,
    ) -> int:
        """Embed the items of a session that have no vector yet, store the vectors, and return how many items hold one.

        The session is read a page at a time; the items without a vector
        (over ``keys``) are embedded ``batch_size`` texts per call and their
        vectors written with the items, one transaction per batch, so each
        item is embedded once however often it is searched or reopened. The
        first call records the embedder's ``name`` and ``dimension`` for the
        session; a later call or query with another model is refused. An
        item without text gets an empty vector row (never a semantic hit).
        A vector computed from an item that another handle changed or
        deleted meanwhile is not stored.

        Args:
            session_id: The session to embed.
            embedder: The model (see :class:`~agents.memory.search.Embedder`).
            keys: Embed the text of these fields only (as ``search(keys=...)`` will ask).
            batch_size: Texts per embedder call.
            progress: Called as ``progress(done, total)`` after each batch
                (``total`` counts the items that had no vector).

        Returns:
            How many items of the session hold a vector over ``keys``.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``batch_size`` < 1 or ``embedder`` has no
                ``name`` and ``dimension``.
            InvalidQueryError: if keys are not field names.
            EmbedderMismatchError: if the session holds vectors of another
                model; nothing is changed.
            EmbeddingError: if the embedder returns the wrong shape or NaN;
                that batch writes nothing (earlier batches keep their vectors).
            MissingDependencyError: naming the extra when numpy is missing.
            StoreError: if the store is read-only or cannot be written.
        """
        sid = self._check_write(session_id)
        fields = checked_keys(keys)
        if type(batch_size) is not int or batch_size < 1:
            msg = f"index_embeddings() takes batch_size >= 1, got {batch_size!r}."
            raise StoreArgumentError(msg)
        _check_embedder(embedder)
        self._checked_model(sid, embedder)
        filed = fields_text(fields)
        self._embed_missing(sid, embedder, fields, batch_size, progress)
        with self._errors("read the vectors of", sid):
            return self._vector_counts(sid, filed)[1]

    def _embed_missing(
        self,
        sid: str,
        embedder: Embedder,
        fields: tuple[str, ...] | None,
        batch_size: int,
        progress: Callable[[int, int], object] | None,
    ) -> None:
        """Embed and store the items without a vector over ``fields`` (two counts when there are none)."""
        filed = fields_text(fields)
        with self._errors("read the vectors of", sid):
            covered = self._vector_count(sid, filed)
            count = self._count(sid)
        if covered >= count:
            return
        total = count - covered
        source = f"session {sid!r} of {self._url}"
        pending: list[tuple[int, bytes, str]] = []
        done = 0
        pages = self._unembedded_pages(sid, filed, max(batch_size, 256))
        while True:
            with self._errors("read", sid):
                rows = next(pages, None)
            if rows is not None:
                pairs = decode_pairs(rows, source, "base")
                pending += [
                    (seq, data, embed_text(item_fields(item), fields))
                    for (seq, data), (_, item) in zip(rows, pairs, strict=True)
                ]
            while pending and (len(pending) >= batch_size or rows is None):
                chunk = pending[:batch_size]
                del pending[:batch_size]
                self._store_vectors(sid, embedder, filed, chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, max(total, done))
            if rows is None:
                break

    def read_vectors(
        self,
        session_id: str,
        embedder: Embedder,
        *,
        keys: Iterable[str] | None = None,
        seqs: Iterable[int] | None = None,
    ) -> dict[int, Any]:
        """Return the stored unit vectors of a session's items (over ``keys``), by seq.

        Items without text, and items not embedded yet, are left out.

        Args:
            session_id: The session to read.
            embedder: The model the vectors must come from.
            keys: The fields the vectors were embedded over.
            seqs: Only these items (default: every item).

        Returns:
            ``{seq: float32 array of shape (dimension,)}`` in seq order.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            EmbedderMismatchError: if the session holds vectors of another model.
            CorruptStoreError: if a stored vector has the wrong length.
            StoreError: if the store cannot be read.
        """
        sid = self._check(session_id)
        fields = checked_keys(keys)
        _check_embedder(embedder)
        if self._checked_model(sid, embedder) is None:
            return {}
        filed = fields_text(fields)
        out: dict[int, Any] = {}
        if seqs is None:
            pages = self._vector_pages(sid, filed, 4096)
        else:
            wanted = [check_seq(seq, "seq") for seq in seqs]
            with self._errors("read the vectors of", sid):
                pages = iter([self._fetch_vectors(sid, filed, wanted)] if wanted else [])
        while True:
            with self._errors("read the vectors of", sid):
                rows = next(pages, None)
            if rows is None:
                return out
            keys_of, matrix = self._decoded_vectors(sid, embedder, rows)
            out.update(zip(keys_of, matrix, strict=True))

    def drop_vectors(self, session_id: str) -> int:
        """Delete every vector of a session and forget its model; return how many vector rows went.

        The items stay. Do this to embed the session again with another
        model (``index_embeddings`` refuses one while vectors of another
        are stored).

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        sid = self._check_write(session_id)
        with self._errors("drop the vectors of", sid), self._transaction(sid) as tx:
            if self._lock_session(tx, sid) is None:
                return 0
            return self._drop_vectors(tx, sid)

    def _vector_search(
        self,
        sid: str,
        text: str,
        k: int,
        fields: tuple[str, ...] | None,
        mode: str,
        embedder: Embedder | None,
        weight: float,
        on_unknown_class: OnUnknownClass,
    ) -> list[StoreHit]:
        """Rank a session by exact cosine over its stored vectors (semantic), or blended with BM25 (hybrid)."""
        if embedder is None:
            msg = f"search(mode={mode!r}) of a store needs embedder=...: the model the session's vectors come from (for example HashingEmbedder() or WordLlamaEmbedder())."
            raise InvalidQueryError(msg)
        _check_embedder(embedder)
        self._checked_model(sid, embedder)
        query = checked_vectors(embedder, [text])[0]
        if not self.read_only:
            self._embed_missing(sid, embedder, fields, 256, None)
        found: dict[int, MemoryItem] = {}
        if mode == "semantic":
            scores = self._best_cosines(sid, embedder, fields, query, k, {})
        else:
            terms = _TOKENIZER(text)
            keyword: dict[int, float] = {}
            scale = 1.0
            if terms:
                keyword, scale, found = self._hybrid_keyword(sid, terms, fields, on_unknown_class)
            pool = max(10 * k, HYBRID_POOL)
            cosines = self._best_cosines(sid, embedder, fields, query, pool, keyword)
            scores = blend(keyword, scale, cosines, weight)
        best = heapq.nsmallest(k, scores.items(), key=lambda hit: (-hit[1], hit[0]))
        missing = [seq for seq, _ in best if seq not in found]
        if missing:
            with self._errors("search", sid):
                rows = self._fetch_seqs(sid, missing)
            found = {
                **found,
                **dict(decode_pairs(rows, f"session {sid!r} of {self._url}", on_unknown_class)),
            }
        return [StoreHit(seq, found[seq], score) for seq, score in best if seq in found]

    def _hybrid_keyword(
        self,
        sid: str,
        terms: Sequence[str],
        fields: tuple[str, ...] | None,
        on_unknown_class: OnUnknownClass,
    ) -> tuple[dict[int, float], float, dict[int, MemoryItem]]:
        """Return the keyword side of a hybrid query: BM25 by seq, the corpus's keyword scale, items read.

        As the search index does it for ``Memory.search``: items holding
        only common terms (floored IDF) are left out, the others summed over
        the rarer terms first, then the common ones, in query order.
        """
        with self._errors("search", sid):
            n_items, total, matches, found = keyword_matches(
                self._decoded_pages(sid, 1000, on_unknown_class), terms, fields
            )
        if not n_items:
            return {}, 1.0, found
        df = Counter(term for _, _, counts in matches for term in counts)
        avgdl = total / n_items if total else 1.0
        flat = BM25_K1 * (1.0 - BM25_B)
        slope = BM25_K1 * BM25_B / avgdl
        idf = {term: bm25_idf(n_items, df[term]) for term in df}
        rare = [term for term in terms if term in idf and idf[term] != MIN_IDF]
        common = [term for term in terms if term in idf and idf[term] == MIN_IDF]
        scores: dict[int, float] = {}
        for seq, length, counts in matches:
            if not any(term in counts for term in rare):
                continue
            score = 0.0
            for term in (*rare, *common):
                tf = counts.get(term)
                if tf:
                    score += idf[term] * (BM25_K1 + 1.0) * tf / (tf + flat + slope * length)
            scores[seq] = score
        return scores, keyword_scale(n_items), found

    def _best_cosines(
        self,
        sid: str,
        embedder: Embedder,
        fields: tuple[str, ...] | None,
        query: Any,
        limit: int,
        among: Iterable[int],
    ) -> dict[int, float]:
        """Return the cosines of the best ``limit`` items (with ties) and of ``among``, by seq.

        The database computes them where it can (:meth:`_nearest`); else the
        vectors are read a page at a time and scored with numpy. A read-only
        handle also embeds, without storing, the items that have no vector
        yet, so its ranking is the same as a writer's; it then scores every
        item with numpy, so that the items embedded now and those stored
        are compared by one computation (a tie is a tie in both).
        """
        filed = fields_text(fields)
        wanted = list(among)
        with self._errors("search", sid):
            rows = self._nearest(sid, filed, query.astype(VECTOR_DTYPE).tobytes(), limit, wanted)
            if rows is not None and self.read_only:
                rows = rows if self._vector_count(sid, filed) >= self._count(sid) else None
        if rows is None:
            pages = itertools.chain(
                self._stored_cosine_pages(sid, embedder, filed),
                self._unembedded_cosine_pages(sid, embedder, fields),
            )
            return best_cosines(pages, query, limit, wanted)
        scored: dict[int, float] = {}
        for seq, cosine, length in rows:
            if cosine is None:
                raise self._damaged_vector(sid, seq, length, embedder)
            scored[seq] = cosine
        return scored

    def _stored_cosine_pages(
        self, sid: str, embedder: Embedder, filed: str
    ) -> Iterator[tuple[list[int], Any]]:
        """Yield ``(seqs, unit vectors)`` of the stored vectors of a session a page at a time."""
        pages = self._vector_pages(sid, filed, 4096)
        while True:
            with self._errors("search", sid):
                rows = next(pages, None)
            if rows is None:
                return
            yield self._decoded_vectors(sid, embedder, rows)

    def _unembedded_cosine_pages(
        self, sid: str, embedder: Embedder, fields: tuple[str, ...] | None
    ) -> Iterator[tuple[list[int], Any]]:
        """Yield ``(seqs, unit vectors)`` of the items without a vector, embedded now (read-only handles only)."""
        if not self.read_only:
            return
        filed = fields_text(fields)
        source = f"session {sid!r} of {self._url}"
        unembedded = self._unembedded_pages(sid, filed, 1024)
        while True:
            with self._errors("search", sid):
                rows = next(unembedded, None)
            if rows is None:
                return
            texts = [
                (seq, embed_text(item_fields(item), fields))
                for seq, item in decode_pairs(rows, source, "base")
            ]
            texts = [(seq, text) for seq, text in texts if text.strip()]
            if texts:
                yield [seq for seq, _ in texts], checked_vectors(embedder, [t for _, t in texts])

    def _decoded_vectors(
        self, sid: str, embedder: Embedder, rows: Sequence[tuple[int, bytes]]
    ) -> tuple[list[int], Any]:
        """Return the seqs and the matrix of the non-empty vector rows; a row of the wrong length is damage."""
        np = numpy()
        size = 4 * embedder.dimension
        vectors = [vector for _, vector in rows]
        lengths = list(map(len, vectors))
        if lengths and min(lengths) == max(lengths) == size:  # the usual page: all whole vectors
            matrix = np.frombuffer(b"".join(vectors), dtype=VECTOR_DTYPE).reshape(len(rows), -1)
            return [seq for seq, _ in rows], matrix.astype(np.float32, copy=False)
        seqs: list[int] = []
        blobs: list[bytes] = []
        for seq, vector in rows:
            if len(vector) == size:
                seqs.append(seq)
                blobs.append(bytes(vector))
            elif len(vector):
                raise self._damaged_vector(sid, seq, len(vector), embedder)
        matrix = np.frombuffer(b"".join(blobs), dtype=VECTOR_DTYPE).reshape(
            len(blobs), embedder.dimension
        )
        return seqs, matrix.astype(np.float32, copy=False)

    def _damaged_vector(
        self, sid: str, seq: int, length: int, embedder: Embedder
    ) -> CorruptStoreError:
        """Return the error for a stored vector of the wrong byte length."""
        msg = (
            f"The vector of item {seq} of session {sid!r} of {self._url} holds "
            f"{length} bytes; expected {4 * embedder.dimension} ({embedder.dimension} float32 of "
            f"model {embedder.name!r}). The store is damaged: drop the session's vectors with "
            f"drop_vectors({sid!r}) and index them again."
        )
        return CorruptStoreError(msg)

    def _store_vectors(
        self, sid: str, embedder: Embedder, filed: str, chunk: Sequence[tuple[int, bytes, str]]
    ) -> None:
        """Embed one batch and write its vectors in one transaction (nothing if the embedder fails)."""
        blobs = [b""] * len(chunk)
        texted = [position for position, (_, _, text) in enumerate(chunk) if text.strip()]
        if texted:
            unit = checked_vectors(embedder, [chunk[position][2] for position in texted])
            for position, vector in zip(texted, unit, strict=True):
                blobs[position] = vector.astype(VECTOR_DTYPE).tobytes()
        rows = [(seq, data, blob) for (seq, data, _), blob in zip(chunk, blobs, strict=True)]
        with self._errors("write the vectors of", sid), self._transaction(sid) as tx:
            if self._lock_session(tx, sid) is None:
                return
            found = self._claim_vector_model(tx, sid, embedder.name, embedder.dimension)
            if found != (embedder.name, embedder.dimension):
                raise EmbedderMismatchError(self._mismatch(sid, found, embedder))
            self._put_vectors(tx, sid, filed, rows)

    def _checked_model(self, sid: str, embedder: Embedder) -> tuple[str, int] | None:
        """Return the session's recorded model; raise if ``embedder`` is another one."""
        with self._errors("read the vector model of", sid):
            found = self._vector_model(sid)
        if found is not None and found != (embedder.name, embedder.dimension):
            raise EmbedderMismatchError(self._mismatch(sid, found, embedder))
        return found

    def _mismatch(self, sid: str, found: tuple[str, int], embedder: Embedder) -> str:
        return (
            f"Session {sid!r} of {self._url} holds vectors of embedding model {found[0]!r} "
            f"({found[1]} dimensions), and this call uses {embedder.name!r} "
            f"({embedder.dimension} dimensions); vectors of two models cannot be compared. "
            f"Use the same embedder, or embed the session again: drop_vectors({sid!r}), then "
            f"index_embeddings({sid!r}, embedder). Nothing was changed."
        )

    def close(self) -> None:
        """Release the store's connections and files; closing twice is harmless."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " read-only" if self.read_only else ""
        state += " closed" if self._closed else ""
        return f"<{type(self).__name__} {self._url!r}{state}>"

    # -- the shared machinery ------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(self, action: str, session_id: str | None) -> Iterator[None]:
        """Turn the driver's errors raised inside the block into :class:`StoreError`."""
        try:
            yield
        except StoreError:
            raise
        except self.driver_errors as exc:
            where = f" session {session_id!r} of" if session_id else ""
            raise self._error(action, where, exc) from exc

    def _check_open(self) -> None:
        if self._closed:
            msg = f"Store {self._url} is closed; open it again with open_store()."
            raise StoreError(msg)

    def _check(self, session_id: object) -> str:
        self._check_open()
        return check_session_id(session_id)

    def _check_write(self, session_id: object) -> str:
        sid = self._check(session_id)
        if self.read_only:
            msg = f"Store {self._url} is open read-only; open it without read_only (or ?mode=ro) to change session {sid!r}. Nothing was changed."
            raise StoreError(msg)
        return sid

    def _open_session(self, tx: Any, session_id: str, step_key: str) -> None:
        """Create the session in ``tx`` if it does not exist, else check its step key."""
        row = self._lock_session(tx, session_id)
        if row is None:
            self._create_session(tx, session_id, step_key, time.time())
        elif row[0] != step_key:
            msg = (
                f"Session {session_id!r} of {self._url} files steps under {row[0]!r}, "
                f"not {step_key!r}; open it with step_key={row[0]!r}. Nothing was written."
            )
            raise StoreError(msg)

    def _session_info(self, session_id: str, row: SessionRow) -> SessionInfo:
        step_key, created, data = row
        source = f"the metadata of session {session_id!r} of {self._url}"
        try:
            if type(step_key) is not str or type(created) not in (int, float):
                msg = f"{source}: the session row holds step key {step_key!r} and created {created!r}, expected text and a number"
                raise CorruptSessionError(msg)
            metadata = _codec.decode_value(_codec.loads(data, source=source))
            if type(metadata) is not dict:
                msg = f"{source} is a JSON {type(metadata).__name__}, expected an object"
                raise CorruptSessionError(msg)
            when = dt.datetime.fromtimestamp(created, dt.timezone.utc)
        except (CorruptSessionError, OverflowError, ValueError, OSError, TypeError) as exc:
            msg = f"Cannot read {source}: {exc}; the store is damaged."
            raise CorruptStoreError(msg) from exc
        return SessionInfo(session_id, step_key, metadata, when)


class WriteBatch:
    """Writes to one session, staged by its calls and applied in one transaction when the ``with`` block ends.

    Each call checks and encodes at once, so a value the codec refuses or a
    bad argument raises before anything is written. On a clean exit one
    transaction applies the staged writes in this order: clear, deletes,
    updates, appends, then ``keep_last`` and ``expire``; leaving the block
    with an exception writes nothing. Get one from :meth:`BaseStore.batch`.

    After the block, :attr:`appended` holds the seqs given to the appended
    items (in order), :attr:`updated` the seqs of the updated rows that
    existed, and :attr:`deleted` the seqs removed by ``delete``,
    ``keep_last`` and ``expire`` (not by ``clear``), increasing.
    """

    def __init__(
        self, store: BaseStore, session_id: str, step_key: str, on_unencodable: OnUnencodable
    ) -> None:
        self._store = store
        self.session_id = session_id
        self.step_key = step_key
        self._on_unencodable: OnUnencodable = on_unencodable
        self._clear = False
        self._delete: dict[int, None] = {}
        self._update: list[RowUpdate] = []
        self._append: list[Row] = []
        # The search terms of _append and _update, when the store keeps them (BaseStore.keeps_terms).
        self._append_terms: list[Terms] | None = [] if store.keeps_terms else None
        self._update_terms: list[Terms] | None = [] if store.keeps_terms else None
        self._keep_last: int | None = None
        self._older_than: float | None = None
        self.appended: list[int] = []
        self.updated: list[int] = []
        self.deleted: list[int] = []

    def append(self, items: Iterable[MemoryItem]) -> None:
        """Stage appending ``items``, in order.

        Raises:
            StoreArgumentError: if an element is not a ``MemoryItem``; nothing is staged.
            SerializationError: if a value cannot be encoded; nothing is staged.
        """
        batch = list(items)
        for position, item in enumerate(batch):
            if not isinstance(item, MemoryItem):
                msg = f"Element {position} is a {type(item).__name__}, not a MemoryItem; nothing was written to session {self.session_id!r}."
                raise StoreArgumentError(msg)
        rows = encode_rows(batch, self.step_key, self._on_unencodable)
        if self._append_terms is not None:
            self._append_terms.extend(rows_terms(batch, rows, self._on_unencodable))
        self._append.extend(rows)

    def update(self, items: Mapping[int, MemoryItem]) -> None:
        """Stage replacing the stored fields of the rows ``items`` names by seq.

        Raises:
            StoreArgumentError: if a seq is not an int in the store's range.
            SerializationError: if a value cannot be encoded; nothing is staged.
        """
        seqs = [check_seq(seq, "seq") for seq in items]
        batch = list(items.values())
        rows = encode_rows(batch, self.step_key, self._on_unencodable)
        if self._update_terms is not None:
            self._update_terms.extend(rows_terms(batch, rows, self._on_unencodable))
        self._update.extend(
            (seq, step, data) for seq, (step, _, data) in zip(seqs, rows, strict=True)
        )

    def delete(self, seqs: Iterable[int]) -> None:
        """Stage deleting the rows ``seqs`` names (seqs that do not exist are ignored).

        Raises:
            StoreArgumentError: if a seq is not an int in the store's range; nothing is staged.
        """
        checked = [check_seq(seq, "seq") for seq in seqs]
        self._delete.update(dict.fromkeys(checked))

    def clear(self) -> None:
        """Stage deleting every row of the session (applied before the other writes)."""
        self._clear = True
        self._delete.clear()
        self._update.clear()
        if self._update_terms is not None:
            self._update_terms.clear()

    def keep_last(self, n: int) -> None:
        """Stage deleting all but the last ``n`` rows (applied after the appends).

        Raises:
            StoreArgumentError: if ``n`` is not an int >= 0.
        """
        if type(n) is not int or not 0 <= n <= SEQ_MAX:
            msg = f"keep_last() takes n >= 0 (an int), got {n!r}."
            raise StoreArgumentError(msg)
        self._keep_last = n

    def expire(self, older_than: dt.timedelta | float) -> None:
        """Stage deleting the rows written more than ``older_than`` ago (applied last).

        Raises:
            StoreArgumentError: if ``older_than`` is negative or not a duration.
        """
        if isinstance(older_than, dt.timedelta):
            seconds = older_than.total_seconds()
        elif type(older_than) in (int, float):
            try:
                seconds = float(older_than)
            except OverflowError:
                seconds = float("inf")
        else:
            msg = f"expire() takes older_than as a timedelta or seconds, got {older_than!r}."
            raise StoreArgumentError(msg)
        if not seconds >= 0:
            msg = f"expire() takes a non-negative age, got {older_than!r}."
            raise StoreArgumentError(msg)
        self._older_than = seconds

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is not None:
            return
        if not (
            self._clear
            or self._delete
            or self._update
            or self._append
            or self._keep_last is not None
            or self._older_than is not None
        ):
            return
        store = self._store
        sid = self.session_id
        store._check_write(sid)
        only_appends = not (
            self._clear
            or self._delete
            or self._update
            or self._keep_last is not None
            or self._older_than is not None
        )
        if only_appends:
            with store._errors("write to", sid):
                appended = (
                    store._append_rows(sid, self.step_key, self._append)
                    if self._append_terms is None
                    else store._append_rows(sid, self.step_key, self._append, self._append_terms)
                )
            if appended is not None:
                self.appended = appended
                return
        with store._errors("write to", sid), store._transaction(sid) as tx:
            if self._append:
                store._open_session(tx, sid, self.step_key)
            elif store._lock_session(tx, sid) is None:
                return
            deleted: list[int] = []
            if self._clear:
                store._clear_rows(tx, sid)
                store._drop_vectors(tx, sid)
            if self._delete:
                deleted += store._delete_rows(tx, sid, list(self._delete))
            if self._update:
                if self._update_terms is None:
                    self.updated = store._update_rows(tx, sid, self._update)
                else:
                    self.updated = store._update_indexed(tx, sid, self._update, self._update_terms)
                if self.updated:
                    # A vector belongs to the fields it was embedded from.
                    store._delete_vectors(tx, sid, self.updated)
            if self._append:
                if self._append_terms is None:
                    self.appended = store._insert_rows(tx, sid, self._append)
                else:
                    self.appended = store._insert_indexed(tx, sid, self._append, self._append_terms)
            if self._keep_last is not None:
                index = store._row_index(tx, sid)
                old = [entry[0] for entry in index[: max(len(index) - self._keep_last, 0)]]
                deleted += store._delete_rows(tx, sid, old) if old else []
            if self._older_than is not None:
                cutoff = time.time() - self._older_than
                index = store._row_index(tx, sid)
                old = [entry[0] for entry in index if entry[2] < cutoff]
                deleted += store._delete_rows(tx, sid, old) if old else []
            if deleted:
                store._delete_vectors(tx, sid, deleted)
            self.deleted = sorted(deleted)


def _check_embedder(embedder: object) -> None:
    name = getattr(embedder, "name", None)
    dimension = getattr(embedder, "dimension", None)
    if (
        type(name) is not str
        or type(dimension) is not int
        or dimension < 1
        or not callable(embedder)
    ):
        msg = f"embedder must be an Embedder (a callable with a str name and an int dimension >= 1), got {embedder!r}."
        raise StoreArgumentError(msg)
