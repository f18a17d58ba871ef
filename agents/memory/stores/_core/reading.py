"""The read calls of a store: items, records, projections, the tail, pages, counts, sessions.

:class:`ReadCalls` is the part of :class:`~agents.memory.stores.Store`
that reads; each call checks its arguments and reads through the backend's
operations inside the engine's error wrapping.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

from agents.memory._filter import Filter, Where
from agents.memory._item import MemoryItem, OnUnknownClass, item_fields
from agents.memory.exceptions import StoreArgumentError
from agents.memory.stores._core.encoding import (
    StoredRecord,
    check_seq,
    decode_pairs,
    decode_rows,
    step_texts,
)
from agents.memory.stores._core.engine import Engine
from agents.memory.stores._core.values import SessionInfo, SessionSummary, session_info

__all__ = ["ReadCalls", "records_with_terms"]

_MOST_ITEMS: Final = 2**60
"""The largest ``n`` a read asks a backend for (a larger one reads the same: every item)."""


class ReadCalls:
    """A store's read calls (a base of :class:`~agents.memory.stores.Store`).

    Args:
        engine: The store's engine.
    """

    def __init__(self, engine: Engine) -> None:
        self._read_engine = engine

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
        sid = self._read_engine.check(session_id)
        texts = None if steps is None else step_texts(steps)
        if after is not None:
            after = check_seq(after, "after")
        if texts == []:
            return []
        with self._read_engine.errors("read", sid):
            rows = self._read_engine.backend.read_rows(sid, steps=texts, after=after)
        return decode_rows(rows, f"session {sid!r} of {self._read_engine.url}", on_unknown_class)

    def read_with_terms(
        self, session_id: str, *, on_unknown_class: OnUnknownClass = "error"
    ) -> tuple[list[MemoryItem], list[str] | None]:
        """Return :meth:`read`'s items and the search terms the store keeps for each, read in one snapshot.

        The terms of an item are those keyword search counts (the default
        :class:`~agents.memory.search.Tokenizer`'s, in order with repeats),
        joined by single spaces, as the store kept them when the item was
        written: what ``SearchIndex.take_terms`` takes. A store that keeps
        none (JSONL, PostgreSQL, ``memory://``) gives ``None`` for them.

        Args:
            session_id: The session to read; an unknown session reads as empty.
            on_unknown_class: ``"base"`` reads items whose class cannot be
                imported as plain ``MemoryItem`` instead of raising.

        Returns:
            The items in seq order, and their terms in the same order (or ``None``).

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        sid = self._read_engine.check(session_id)
        records, terms = records_with_terms(self._read_engine, sid, on_unknown_class)
        return [record.item for record in records], terms

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
        sid = self._read_engine.check(session_id)
        wanted = list(keys) if not isinstance(keys, str) else [keys]
        for key in wanted:
            if type(key) is not str:
                msg = f"project() takes string keys, got {key!r} ({type(key).__name__})."
                raise StoreArgumentError(msg)
        texts = None if steps is None else step_texts(steps)
        if texts == []:
            return []
        with self._read_engine.errors("read", sid):
            rows = self._read_engine.backend.read_keys(sid, wanted, steps=texts)
        pairs = decode_pairs(rows, f"session {sid!r} of {self._read_engine.url}", "base")
        return [
            {k: f[k] for k in wanted if k in f} for f in (item_fields(item) for _, item in pairs)
        ]

    def tail(
        self,
        session_id: str,
        n: int,
        *,
        steps: Iterable[Any] | None = None,
        where: Where | Filter | None = None,
        on_unknown_class: OnUnknownClass = "error",
    ) -> list[StoredRecord]:
        """Return the last ``n`` items of a session (among ``steps``, and passing ``where``, when given), oldest first.

        SQLite and PostgreSQL read only those rows, so the cost follows ``n``,
        not the length of the session (``kvmemory show --last`` and ``replay
        --last`` use this); the JSONL and in-memory stores read the session
        and keep its end. With ``where``, SQLite and PostgreSQL first ask SQL
        which rows may pass (as a filtered search does) and decode those,
        newest first, until ``n`` pass, so a filter that few items pass does
        not decode the session.

        Args:
            session_id: The session to read; an unknown session reads as empty.
            n: How many items, counted from the newest; 0 gives none, and any
                count past the session's (``sys.maxsize``, past 64 bits) all of it.
            steps: Only items whose step is one of these.
            where: Only items passing this filter (the language of
                :class:`agents.memory.search.Filter`, or a compiled one).
            on_unknown_class: ``"base"`` reads items whose class cannot be
                imported as plain ``MemoryItem`` instead of raising.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            InvalidQueryError: if ``where`` is not a filter kvmemory understands.
            StoreArgumentError: if ``n`` is not an int, or negative.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        sid = self._read_engine.check(session_id)
        if type(n) is not int or n < 0:
            msg = f"tail() takes a number of items, 0 or more, got {n!r}."
            raise StoreArgumentError(msg)
        texts = None if steps is None else step_texts(steps)
        keep = Filter.of(where)
        if n == 0 or texts == []:
            return []
        # SQL takes 64-bit counts, and a filtered read asks for a few times n: no session
        # holds 2**60 items, so a larger n reads the same (every item), in every store.
        n = min(n, _MOST_ITEMS)
        if keep is not None:
            return _tail_passing(self._read_engine, sid, n, texts, keep, on_unknown_class)
        with self._read_engine.errors("read", sid):
            rows = self._read_engine.backend.read_last(sid, n, steps=texts)
        return decode_rows(rows, f"session {sid!r} of {self._read_engine.url}", on_unknown_class)

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
            size: The most items in one page (any size past the session's: one page).
            on_unknown_class: ``"base"`` reads items whose class cannot be
                imported as plain ``MemoryItem`` instead of raising.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``size`` is not a positive int.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        sid = self._read_engine.check(session_id)
        if type(size) is not int or size < 1:
            msg = f"pages() takes a page size of 1 or more items, got {size!r}."
            raise StoreArgumentError(msg)
        return self._read_engine.decoded_pages(sid, min(size, _MOST_ITEMS), on_unknown_class)

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
        sid = self._read_engine.check(session_id)
        with self._read_engine.errors("read", sid):
            row = self._read_engine.backend.read_session(sid)
        if row is None:
            return SessionSummary.of([])
        pages = self._read_engine.decoded_pages(sid, 1000, "base")
        return SessionSummary.of(
            ([record.item for record in page] for page in pages),
            step_key=row[0],
            cost_key=cost_key,
        )

    def count(self, session_id: str) -> int:
        """Return the number of items of a session (0 for an unknown session).

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be read.
        """
        sid = self._read_engine.check(session_id)
        with self._read_engine.errors("count", sid):
            return self._read_engine.backend.count(sid)

    def session_info(self, session_id: str) -> SessionInfo | None:
        """Return what the store knows about a session, or ``None`` if it does not exist.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            CorruptStoreError: if the stored session cannot be decoded.
            StoreError: if the store cannot be read.
        """
        sid = self._read_engine.check(session_id)
        with self._read_engine.errors("read", sid):
            row = self._read_engine.backend.read_session(sid)
        return None if row is None else session_info(sid, row, self._read_engine.url)

    def sessions(self) -> list[str]:
        """Return the ids of every session in the store, sorted.

        Raises:
            StoreError: if the store cannot be read.
        """
        self._read_engine.check_open()
        with self._read_engine.errors("list sessions of", None):
            return self._read_engine.backend.sessions()


def _tail_passing(
    engine: Engine,
    sid: str,
    n: int,
    texts: list[str] | None,
    keep: Filter,
    on_unknown_class: OnUnknownClass,
) -> list[StoredRecord]:
    """The last ``n`` items passing ``keep``, oldest first.

    A window from the end is read first (decoding a few rows costs less
    than asking SQL to judge the session); if too few of it pass, the rows
    SQL says may pass are read newest first, else ever larger windows.
    """
    source = engine.source(sid)
    backend = engine.backend
    size = max(2 * n, 64)
    with engine.errors("read", sid):
        rows = backend.read_last(sid, size, steps=texts)
    records = decode_rows(rows, source, on_unknown_class)
    passing = [record for record in records if keep(record.item)]
    if len(passing) >= n or len(records) < size:
        return passing[-n:]
    allowed = None
    if texts is None:
        with engine.errors("read", sid):
            allowed = backend.filter_candidates(sid, keep.tree)
    if allowed is not None:
        found = passing[::-1]  # newest first
        oldest = records[0].seq
        seqs = sorted((seq for seq in allowed if seq < oldest), reverse=True)
        for start in range(0, len(seqs), size):
            with engine.errors("read", sid):
                rows = backend.read_seqs(sid, seqs[start : start + size])
            pairs = sorted(decode_pairs(rows, source, on_unknown_class), key=_seq, reverse=True)
            found.extend(StoredRecord(seq, item) for seq, item in pairs if keep(item))
            if len(found) >= n:
                break
        return found[:n][::-1]
    while len(passing) < n and len(records) == size:
        size *= 4
        with engine.errors("read", sid):
            rows = backend.read_last(sid, size, steps=texts)
        records = decode_rows(rows, source, on_unknown_class)
        passing = [record for record in records if keep(record.item)]
    return passing[-n:]


def _seq(pair: tuple[int, MemoryItem]) -> int:
    return pair[0]


def records_with_terms(
    engine: Engine, sid: str, on_unknown_class: OnUnknownClass
) -> tuple[list[StoredRecord], list[str] | None]:
    """Return a session's records in seq order and the terms the store keeps for each, read in one snapshot (``None`` for the terms where it keeps none).

    What ``Store.read_with_terms`` and ``Store.read_memory`` read: see
    ``Backend.read_rows_terms``.
    """
    with engine.errors("read", sid):
        rows = engine.backend.read_rows_terms(sid)
    source = engine.source(sid)
    if rows is None:
        with engine.errors("read", sid):
            plain = engine.backend.read_rows(sid)
        return decode_rows(plain, source, on_unknown_class), None
    records = decode_rows([(seq, data) for seq, data, _ in rows], source, on_unknown_class)
    return records, [terms for _, _, terms in rows]
