"""The optional search operations of a :class:`~agents.memory.stores.backend.Backend`.

A backend answers a search where its rows lie by overriding these: rank by
keyword from an index it keeps, count each query word's items, and narrow a
filtered search to the rows that may pass. Each returns ``None`` by default,
and the store then does the work itself from the row operations (reads the
session a page at a time and scores it, or tests each row), so a backend
overrides only what its engine does better. :class:`Backend` inherits them;
a backend subclasses :class:`Backend`, never this class alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Sequence
from typing import TypeAlias

from agents.memory._filter import FilterNode

__all__ = ["SearchOperations"]

_SomeRows: TypeAlias = "list[tuple[int, bytes]] | None"


class SearchOperations:
    """The optional keyword and filter operations of a backend, each answering ``None`` (the store does the work) by default."""

    # -- optional: one search's calls as one snapshot -------------------------------------

    def search_scope(self, session_id: str) -> contextlib.AbstractContextManager[None]:
        """Return the context of one search of a session: the backend may answer its later calls from what its earlier statements computed.

        ``Store.search`` and ``Store.ranking`` enter it once around every
        call one query makes of the session (a keyword ranking, the words'
        document frequencies, the scores of chosen rows, ...). Inside it a
        backend may keep what one statement returned (a ranking's item
        count and each term's document frequency) and answer a later call
        of the same query from it, as of that statement's snapshot; it
        keeps nothing past the block, so the next query sees every write
        made meanwhile, by any handle. By default nothing is kept.
        """
        return contextlib.nullcontext()

    # -- optional: keyword search from an index the backend keeps -------------------------

    @property
    def keyword_index(self) -> bool:
        """Whether :meth:`keyword_top` answers keyword searches (by default: whether it is overridden)."""
        return type(self).keyword_top is not SearchOperations.keyword_top

    def keyword_top(
        self, session_id: str, terms: Sequence[str], k: int
    ) -> list[tuple[float, int]] | None:
        """Return the ``k`` best ``(score, seq)`` by BM25 (ties by seq), or ``None`` to have the store score the session.

        ``terms`` are the query's terms with repeats. A backend that keeps a
        keyword index (from the terms each insert hands it) answers here
        with the ranking ``Memory.search`` gives; by default the store reads
        the session a page at a time and scores it.
        """
        return None

    def keyword_top_sessions(
        self, session_ids: Sequence[str], terms: Sequence[str], k: int
    ) -> list[tuple[float, str, int]] | None:
        """Return the ``k`` best ``(score, session_id, seq)`` by BM25 over several sessions at once, or ``None``.

        ``session_ids`` are existing sessions, sorted by code point; the
        ranking is the one ``Memory.search`` gives over a memory holding
        their items one session after the other (in that order, each in
        seq order): the statistics (item count, average length, each term's
        document frequency) are those of all of them together, and ties go
        by session id, then seq. ``None`` (the default) has the store read
        the sessions a page at a time and score them; a backend that keeps a
        keyword index answers here without reading the items.
        """
        return None

    def keyword_among(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> list[tuple[float, int]] | None:
        """Return ``(score, seq)`` by BM25 of the rows among ``seqs`` that hold a query term, best first (ties by seq), or ``None``.

        The scores are those :meth:`keyword_top` gives the same rows: the
        statistics (item count, average length, each term's document
        frequency) are the whole session's, not those of ``seqs``. A seq
        the session does not hold, or whose row holds no query term, is
        left out. A filtered keyword search asks this with the rows that
        may pass a rare filter (:meth:`filter_candidates`) rather than
        ranking the whole session ever deeper. ``None`` (the default, and
        whenever the backend cannot answer from one consistent snapshot):
        the store ranks the session with :meth:`keyword_top` instead.
        """
        return None

    def keyword_frequencies(self, session_id: str, terms: Sequence[str]) -> dict[str, int] | None:
        """Return each term's document frequency in the session (``keyword_top``'s; a term no item holds may be left out), or ``None`` to have the store rank each term alone to count its items."""
        return None

    def keyword_held(
        self, session_id: str, terms: Sequence[str], seqs: Sequence[int]
    ) -> dict[int, set[str]] | None:
        """Return the terms among ``terms`` that each row among ``seqs`` holds, by seq, or ``None`` to have the store read the rows.

        The terms are those the row's keyword index entry holds (the ones
        :meth:`keyword_top` counts). A row holding none of ``terms``, or one
        the session does not hold, may be left out. A hybrid search asks
        this of its best keyword hits to read and tokenize only those that
        hold enough of the query to hold its words together
        (:func:`~agents.memory._text.may_stand_together`). ``None`` (the
        default): the store reads and tokenizes every one of them.
        """
        return None

    def keyword_top_where(
        self, session_id: str, terms: Sequence[str], k: int, tree: FilterNode
    ) -> list[tuple[float, int]] | None:
        """Return the ``k`` best ``(score, seq)`` by BM25 among the rows that may pass a search filter, or ``None``.

        :meth:`keyword_top` with the rows that cannot pass ``tree`` (the
        parsed filter, :attr:`~agents.memory.search.Filter.tree`) left out
        of the ranking but not of the statistics: the scores are those
        :meth:`keyword_top` gives the same rows. As with
        :meth:`filter_candidates`, a backend may keep rows that do not
        pass (they are tested in Python), never leave out one that does;
        a ranking shorter than ``k`` holds every row that may pass. ``None``
        (the default, and whenever the backend cannot judge the filter):
        the store ranks with :meth:`keyword_top` and filters the ranking.
        """
        return None

    def keyword_snapshot_path(self, session_id: str) -> str | None:
        """Return the file where the session's keyword snapshot is kept beside the store, or ``None`` where none is kept (the default).

        ``Store.save_keyword_snapshot`` writes it, ``Store.read_memory``
        reads it; it is a cache checked against the rows read (see
        ``agents.memory.stores._search.snapshot``), so any file name that
        no other session's snapshot shares will do.
        """
        return None

    def vector_snapshot_path(self, session_id: str, fields: str) -> str | None:
        """Return the file where the session's coded part vectors are kept beside the store, or ``None`` where none is kept (the default).

        A handle whose kept table of a session is coded as int8 (its part
        vectors pass the kept-vector budget) saves it there as it builds it,
        where :attr:`saves_vector_snapshots`, and a closing handle codes and
        saves it for the sessions whose vectors it wrote (``Store.close``
        then calls :meth:`close` on a thread, after those saves); a fresh handle's first query
        loads it where it is current, or catches a stale one up
        (:meth:`vector_changes`). It is a cache checked against the
        session (see ``agents.memory.stores._search.coded_file``), so any
        file name that no other session's (and fields') file shares will do.
        """
        return None

    @property
    def saves_vector_snapshots(self) -> bool:
        """Whether this handle writes the files :meth:`vector_snapshot_path` names (``False``, the default: it only reads them)."""
        return False

    def vector_snapshot_saved(self, path: str) -> None:
        """Note that the file at ``path`` (named by :meth:`vector_snapshot_path`) was just saved whole; by default nothing.

        A backend whose files share a folder of bounded size removes the
        files used least recently here (PostgreSQL's ``vector_cache``).
        """

    def vector_snapshot_unsaved(self, path: str, error: OSError) -> None:
        """Note that the file at ``path`` (named by :meth:`vector_snapshot_path`) could not be written (``error``); by default nothing.

        The save is a cache's: the query or close that made it goes on,
        and fresh handles read the vectors as without a file. A backend
        whose folder the user chose or defaults to tells the user here
        (PostgreSQL's ``vector_cache`` warns, once per folder and process).
        """

    def keyword_version(self, session_id: str) -> Hashable | None:
        """Return a value that changes whenever the session's rows may have changed, or ``None`` where the backend cannot tell.

        ``Store.read_memory`` reads it before and after reading a session;
        if both compare equal (``==``), the memory it gives asks the store's
        keyword ranking (:meth:`keyword_top`) for its first queries, and each
        such query reads it before and after the ranking: equal to the
        read's, the ranking is that of the rows read. It must change with
        every insert, update or delete of the session's rows, by this handle
        or any other handle or process. A value that changes more often
        (at every commit to the store) is correct, only slower. By default
        ``None``: the memory ranks its items itself.
        """
        return None

    def keyword_ready(self, session_id: str) -> None:
        """Make the session's keyword index ready for the next :meth:`keyword_top` where that is cheap; never build it.

        ``Store.read_memory`` calls it once it has handed the memory the
        store's ranking (:meth:`keyword_version` unchanged over the read),
        so that the memory's first query does not pay for it. What it may
        do must cost little beside reading the session (load an index
        already kept current, not build one) and change no row; failing
        quietly is fine: :meth:`keyword_top` does what it needs then. By
        default nothing. JSONL loads and checks ``<session>.keywords``.
        """

    # -- optional: the terms kept for each row ---------------------------------------------

    def read_rows_terms(self, session_id: str) -> list[tuple[int, bytes, str]] | None:
        """Return every row of a session in seq order as ``(seq, data, terms)``, read in one snapshot, or ``None`` where the backend keeps no terms.

        ``terms`` is the first of the :data:`~agents.memory.stores.Terms`
        the insert or update of the row handed the backend (the default
        tokenizer's terms, joined by single spaces; ``""`` for a row without
        text). ``Store.read_with_terms`` reads a session with it, so that a
        ``Memory`` made from it takes the terms rather than reading each
        item's texts at its first query (``SearchIndex.take_terms``). The
        data and the terms must be those of one snapshot: a row changed
        between two reads would hand the terms of its old content. ``None``
        (the default): the store reads the rows alone.
        """
        return None

    # -- optional: narrowing a filtered search ------------------------------------------

    def filter_candidates(self, session_id: str, tree: FilterNode) -> set[int] | None:
        """Return the seqs of the rows that may pass a search filter, or ``None`` to have every row tested.

        ``tree`` is the parsed filter (:attr:`~agents.memory.search.Filter.tree`).
        A backend that can judge (part of) it where the rows lie returns a
        superset of those that pass (a row left out is never tested), each
        still tested in Python. By default ``None``.
        """
        return None

    def filter_few(self, session_id: str, tree: FilterNode, most: int) -> set[int] | None:
        """Return :meth:`filter_candidates`'s answer where it holds ``most`` seqs at most, else ``None``.

        A search that ranks only the rows that may pass when few may (one
        in 16 of the session's at most) asks this: a backend that can stop
        at the row past ``most`` (SQL's ``LIMIT``) makes a filter most rows
        pass cost that many rows, not every row that passes. By default
        :meth:`filter_candidates`, then its size compared.
        """
        allowed = self.filter_candidates(session_id, tree)
        return None if allowed is None or len(allowed) > most else allowed

    def walks_filtered(self, session_id: str, tree: FilterNode, most: int) -> bool:
        """Return whether a filtered search should walk its ranking, reading and testing rows, rather than ask :meth:`filter_few` (``tree``, ``most``).

        ``True`` where asking which rows of the session may pass costs
        reading every row and reading a row alone is cheap: a JSONL handle
        that has not read the session's log answers its queries from the
        files beside it and reads the hits by their offsets (where a value
        file beside the log names the rows that pass, only for a filter
        more than ``most`` rows pass). By default ``False``.
        """
        return False

    def filter_named(self, tree: FilterNode) -> bool:
        """Return whether an index names the rows :meth:`filter_candidates` answers for a filter (a few ms at any size), where else it may read every row.

        A semantic search through a kept vector table whose first slice
        holds too few rows that pass asks :meth:`filter_candidates` only
        where this is true; otherwise it goes on judging the rows of its
        ranking a slice at a time (:meth:`filter_among`). By default ``False``.
        """
        return False

    def filter_few_kept(self, session_id: str, tree: FilterNode, most: int) -> set[int] | None:
        """Return :meth:`filter_few`'s answer (``tree``, ``most``) where this handle keeps which rows may pass, else ``None`` without judging a row.

        A semantic search through a kept vector table asks this before it
        scores every row: where the answer is kept and few may pass, only
        their vectors are scored (the same floats), with no walk of the
        ranking. A backend that judges a filter by reading every row may
        judge it here on the filter's second ask and keep the answer (as
        SQLite does, ``JudgedFilters.asked_again``). By default
        :meth:`filter_few` where an index names the filter's rows
        (:meth:`filter_named`), else ``None``.
        """
        return self.filter_few(session_id, tree, most) if self.filter_named(tree) else None

    def filter_among(
        self, session_id: str, tree: FilterNode, seqs: Sequence[int]
    ) -> set[int] | None:
        """Return the seqs among ``seqs`` of the rows that may pass a search filter, or ``None`` to have them all tested.

        :meth:`filter_candidates` asked of some rows only (a filtered search
        asks it of each slice of a ranking before reading the items): a
        superset of the rows among ``seqs`` that pass (a seq the session
        does not hold may be left out). By default ``None``.
        """
        return None

    def filter_among_rows(
        self, session_id: str, tree: FilterNode, seqs: Sequence[int]
    ) -> _SomeRows:
        """Return ``(seq, data)`` of the rows :meth:`filter_among` answers, read by the same statement, or ``None`` (the default: the two are asked apart)."""
        return None
