"""The search calls of a store: keyword, semantic and hybrid search, and the vectors they use.

:class:`SearchCalls` is the part of :class:`~agents.memory.stores.Store`
that searches; the work is done by :class:`KeywordSearch` and
:class:`VectorSearch` over the store's :class:`Engine`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from agents.memory._filter import Filter, Where
from agents.memory._item import MemoryItem, OnUnknownClass
from agents.memory._text import Tokenizer, checked_keys
from agents.memory._vectors import HYBRID_POOL, Embedder, EmbedParts, SearchMode, fields_text
from agents.memory.exceptions import StoreError
from agents.memory.memory import Memory
from agents.memory.stores._core.engine import Engine
from agents.memory.stores._core.reading import records_with_terms
from agents.memory.stores._core.values import StoreHit, VectorModel
from agents.memory.stores._search.arguments import checked_parts, checked_vector_query
from agents.memory.stores._search.handoff import HandedRanking
from agents.memory.stores._search.keyword import KeywordSearch
from agents.memory.stores._search.snapshot import read_snapshot, save_snapshot
from agents.memory.stores._search.vector_cache import VectorCache
from agents.memory.stores._search.vectors import VectorSearch, over_budget

__all__ = ["SearchCalls"]


class SearchCalls:
    """A store's search calls (a base of :class:`~agents.memory.stores.Store`).

    Args:
        engine: The store's engine.
        cache: The vectors the store's semantic searches keep between queries.
    """

    def __init__(self, engine: Engine, cache: VectorCache) -> None:
        self._search_engine = engine
        self._keyword = KeywordSearch(engine)
        self._vectors = VectorSearch(engine, self._keyword, cache)
        self._vector_cache = cache

    def _closing_saves(self) -> Callable[[], None] | None:
        """Return the saves of coded files due as the store closes (``VectorSearch.closing_saves``), or ``None``."""
        return self._vectors.closing_saves()

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
        where: Where | None = None,
        parts: EmbedParts | None = None,
    ) -> list[StoreHit]:
        """Return the ``k`` items of a session that best match ``query``, best first: by BM25 unless ``mode`` says otherwise.

        The ranking is the one ``Memory.search(query, k, keys=keys)`` gives
        for the same items (default :class:`~agents.memory.search.Tokenizer`,
        BM25+ with Lucene's IDF, ``k1`` = 1.2, ``b`` = 0.75, statistics of this session
        alone), with the same scores; ties keep session order. SQLite and PostgreSQL answer
        it from a keyword index they keep with the rows (FTS5, ``tsvector``),
        JSONL from an index file beside each log and ``memory://`` from
        postings it keeps per session, reading only the ``k`` items found;
        with ``keys`` (and in a backend that keeps no keyword index) the
        session is read a page at a time and tokenized, keeping only the
        items holding a query term (see :attr:`keyword_index`). Either way a stored session is searched
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
                (default ``HYBRID_KEYWORD_WEIGHT``), times ``q**8``, ``q`` the
                share of the query's IDF weight the best keyword hit holds.
                1 ranks by keyword alone (BM25 on the blend's 0..1 scale), 0
                by the semantic side alone.
            where: Keep only items that pass this filter (see
                :class:`~agents.memory.search.Filter`): the best ``k`` of the
                ranking that pass, the hits ``Memory.search(where=...)``
                gives. The ranking is walked best first and its items are
                decoded and tested until ``k`` pass; SQLite and PostgreSQL
                first skip, in SQL, rows that cannot pass once few do (see
                docs/search.md, "Filters").
            parts: How items are cut into the texts that get embedded (see
                :class:`~agents.memory.search.EmbedParts`; default
                ``EmbedParts()``, a vector per field and per window of 8
                words of a long one, as ``Memory.search`` cuts them). Vectors
                cut two ways are stored apart: a session embedded whole (the
                default before parts) gets its parts embedded and stored
                beside its whole-item vectors by the first call that needs
                them, and ``parts=EmbedParts.WHOLE`` still searches those.
                Parts are scored with numpy; sqlite-vec and pgvector rank
                ``EmbedParts.WHOLE`` vectors only.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``parts`` is not an ``EmbedParts``.
            InvalidQueryError: for an empty query or one without words, ``k`` outside 1 to 2**63 - 1,
                keys that are not field names, an unknown mode, no embedder
                in semantic and hybrid modes, or a filter that is not understood.
            EmbedderMismatchError: if the session holds vectors of another model.
            EmbeddingError: if the embedder returns the wrong shape or NaN.
            MissingDependencyError: naming the extra when numpy is missing.
            CorruptSessionError: if a stored item cannot be decoded.
            CorruptStoreError: if a stored vector has the wrong length, or the
                store's keyword index is damaged or missing (the message names
                the call that rebuilds it).
            StoreError: if the store cannot be read.
        """
        sid = self._search_engine.check(session_id)
        # One query's calls share what the backend computed (Backend.search_scope).
        with self._search_engine.backend.search_scope(sid):
            keep = Filter.of(where)
            if mode == "keyword":
                return self._keyword.search(sid, query, k, keys, on_unknown_class, keep)
            text, fields, weight = checked_vector_query(
                "search", query, k, keys, mode, hybrid_weight
            )
            return self._vectors.search(
                sid,
                text,
                k,
                fields,
                mode,
                embedder,
                weight,
                on_unknown_class,
                keep,
                checked_parts(parts),
            )

    def ranking(
        self,
        session_id: str,
        query: str,
        k: int = 5,
        *,
        keys: Iterable[str] | None = None,
        where: Where | None = None,
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
            where: Keep only items that pass this filter, as :meth:`search`
                does; the candidates' items are then read to be tested
                (classes the process does not know read as ``MemoryItem``).

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            InvalidQueryError: as :meth:`search`.
            CorruptSessionError: if the store reads items and one cannot be decoded.
            CorruptStoreError: if the store's keyword index is damaged or missing.
            StoreError: if the store cannot be read.
        """
        sid = self._search_engine.check(session_id)
        with self._search_engine.backend.search_scope(sid):
            return self._keyword.ranking(sid, query, k, keys, Filter.of(where))

    def keyword_version(self, session_id: str) -> Hashable | None:
        """Return a value that changes whenever the session's rows may have changed, by any handle or process, or ``None`` where the store cannot tell.

        SQLite's changes at every commit to the file (``PRAGMA
        data_version`` and the handle's own changes); PostgreSQL's at every
        write of the session's rows (its session row); JSONL's at every
        write to the session's log (its header and length); ``memory://``'s
        at every write to its space; the others give ``None``. See
        :meth:`ranking_at` and ``Backend.keyword_version``.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store is closed or cannot be read.
        """
        sid = self._search_engine.check(session_id)
        if not self._search_engine.backend.keyword_index:
            return None
        with self._search_engine.errors("read", sid):
            return self._search_engine.backend.keyword_version(sid)

    def ranking_at(
        self, session_id: str, query: str, k: int = 5, *, version: Hashable
    ) -> list[tuple[int, float]] | None:
        """Return :meth:`ranking` over all fields if the session is as it was when :meth:`keyword_version` gave ``version``, else ``None``.

        The version is read before and after the ranking: both equal to
        ``version``, no row of the session changed since, and the ranking
        is that of the rows then (what a ``Memory`` read with
        :meth:`read_memory` asks). ``None`` for a ``version`` of ``None``.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            InvalidQueryError: as :meth:`search`.
            CorruptStoreError: if the store's keyword index is damaged or missing.
            StoreError: if the store is closed or cannot be read.
        """
        if version is None or self.keyword_version(session_id) != version:
            return None
        ranked = self.ranking(session_id, query, k)
        return ranked if self.keyword_version(session_id) == version else None

    def read_memory(
        self,
        session_id: str,
        *,
        step_key: str = "step",
        on_unknown_class: OnUnknownClass = "error",
    ) -> Memory:
        """Return a session's items as a plain ``Memory`` whose first keyword queries ask the store.

        The memory is that of ``Memory(store.read(session_id))``: not
        backed by the store (see ``open_memory`` for one that writes its
        changes through). Where the store keeps each row's search terms
        (SQLite), they are read with the rows (:meth:`read_with_terms`) and
        handed to the memory's search index (``SearchIndex.take_terms``):
        the first keyword query over all fields then scans them instead of
        reading every item's texts, with the same hits and scores; they are
        held until that query (about the size of the session's text).
        Where a keyword snapshot saved beside the store
        (:meth:`save_keyword_snapshot`) vouches for the rows read, neither:
        the memory's queries over all fields without a filter rank from its
        postings (``SearchIndex.take_ranking``) till its own index is in.
        Where none are scanned (PostgreSQL, JSONL, ``memory://``, or
        without numpy) and the store can tell that a session is unchanged
        (:meth:`keyword_version`), the memory's keyword queries over all
        fields without a filter are ranked by the store (:meth:`ranking_at`,
        rows mapped to items by seq; ``SearchIndex.take_ranking``) while
        neither the memory nor the session changed since the read and the
        store is open, till the memory's own index, built ahead from the
        first such query, is in: the hits and scores are ``Memory.search``'s.
        Handed a ranking, the backend is asked to make its keyword index
        ready where that is cheap (``Backend.keyword_ready``: JSONL loads a
        ``<session>.keywords`` that checks out, never building one). A
        change of the memory drops both.

        Args:
            session_id: The session to read; an unknown session reads as empty.
            step_key: The field that names an item's step.
            on_unknown_class: ``"base"`` reads items whose class cannot be
                imported as plain ``MemoryItem`` instead of raising.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        from agents.memory.search import search_index  # the search room, beside this one

        sid = self._search_engine.check(session_id)
        version = self.keyword_version(sid)
        records, terms = records_with_terms(self._search_engine, sid, on_unknown_class)
        items = [record.item for record in records]
        memory = Memory(items, step_key=step_key)
        if not items:
            return memory
        seqs = [record.seq for record in records]
        if terms is not None:
            # The session's postings saved beside the store, where they vouch for the rows read.
            path = self._search_engine.backend.keyword_snapshot_path(sid)
            snapshot = read_snapshot(path, seqs, terms) if seqs == sorted(seqs) else None
            if snapshot is not None and search_index(memory).take_ranking(items, snapshot):
                return memory
            search_index(memory).take_terms(items, terms)
        # The rows of one version, in seq order (so an item's place is its row's among the seqs).
        if version is not None and self.keyword_version(sid) == version and seqs == sorted(seqs):
            ranking_at = self._ranking_at
            handed = HandedRanking(ranking_at, sid, seqs, version)
            if search_index(memory).take_ranking(items, handed):
                # Its first query need not load the index (JSONL: 4 of its 10 ms at 100,000 steps).
                with self._search_engine.errors("read", sid):
                    self._search_engine.backend.keyword_ready(sid)
        return memory

    def save_keyword_snapshot(self, session_id: str) -> bool:
        """Save the session's keyword postings beside the store, so that the first keyword query of a ``Memory`` read later (:meth:`read_memory`) need not find its words among the session's.

        The snapshot is a cache, checked against the rows each read gives
        (their seqs and kept terms): rows appended since are caught up as
        the memory is read; after an update or delete of one of the rows
        it holds (by any handle or process), or if its file is damaged, it
        is not used (the first query scans the kept terms, as without it)
        until it is saved again. It costs about the session's kept terms
        in time and disk (100,000 steps: ~2 s of CPU with numpy, ~4 s
        without, ~66 MB). Where the store keeps no terms or no file
        (PostgreSQL, JSONL, ``memory://``, an in-memory SQLite store),
        nothing is saved. :meth:`delete_session` removes it with the
        session. An SQLite handle also saves it unasked as it closes, for
        the sessions of 1,000 rows or more it wrote (its
        ``keyword_snapshot`` option).

        Returns:
            Whether a snapshot was saved.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store is read-only or cannot be read, or the snapshot cannot be written.
        """
        sid = self._search_engine.check_write(session_id)
        backend = self._search_engine.backend
        path = backend.keyword_snapshot_path(sid)
        if path is None:
            return False
        with self._search_engine.errors("read", sid):
            rows = backend.read_rows_terms(sid)
        try:
            return save_snapshot(path, rows)
        except OSError as exc:
            msg = f"Cannot save the keyword snapshot of session {sid!r} to {path!r}: {exc}; the store is unchanged (its memories scan their kept terms)."
            raise StoreError(msg) from exc

    def _ranking_at(
        self, session_id: str, query: str, k: int, version: Hashable
    ) -> list[tuple[int, float]] | None:
        return self.ranking_at(session_id, query, k, version=version)

    def hybrid_ranking(
        self,
        session_id: str,
        query: str,
        k: int = 5,
        *,
        embedder: Embedder,
        cosines: Callable[[int, Sequence[int]], dict[int, float]],
        hybrid_weight: float | None = None,
        items: Callable[[Sequence[int]], Mapping[int, MemoryItem]] | None = None,
    ) -> list[tuple[int, float]]:
        """Return ``(seq, score)`` of a hybrid query's ``k`` best, best first, with the cosines the caller holds.

        The ranking of ``search(mode="hybrid", parts=...)`` (ties in seq
        order), its keyword side from the store's index, for a caller that
        holds the session's vectors already (a ``StoredMemory`` opened on
        it): the store reads and scores no vector and reads the items only
        where the blend weighs how the best hits hold the query's words.
        With the cosines ``Memory.search`` computes, the scores are its own,
        float for float.

        Args:
            session_id: The session to search.
            query: The words to look for (at least one).
            k: How many seqs at most.
            embedder: The model the caller's vectors came from: checked
                against the session's stored vectors, never called.
            cosines: ``cosines(pool, seqs)``: the best ``pool`` cosines
                with the unit query vector (with ties: every item scoring the
                ``pool``-th best) and those of ``seqs``, by seq.
            hybrid_weight: The keyword share of a hybrid score (as :meth:`search`).
            items: ``items(seqs)``: the items of those rows the caller holds
                (its copy of the session's, by seq), which the blend takes
                where it weighs how the best hits hold the query's words,
                instead of reading them; the rest are read. ``None``: all are read.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            InvalidQueryError: as :meth:`search`.
            EmbedderMismatchError: if the session holds vectors of another model.
            CorruptStoreError: if the store's keyword index is damaged or missing.
            StoreError: if the store cannot be read.
        """
        sid = self._search_engine.check(session_id)
        text, _, weight = checked_vector_query(
            "hybrid_ranking", query, k, None, "hybrid", hybrid_weight
        )
        self._vectors.read(sid, embedder, None, [], EmbedParts.WHOLE)  # refuses another model
        pool = max(10 * k, HYBRID_POOL)
        with self._search_engine.backend.search_scope(sid):
            scores, _ = self._keyword.hybrid_scores(
                sid,
                Tokenizer()(text),
                None,
                k,
                lambda among: cosines(pool, list(among)),
                weight,
                "base",
                True,
                own=items,
            )
        return heapq.nsmallest(k, scores.items(), key=lambda hit: (-hit[1], hit[0]))

    def vector_model(self, session_id: str) -> VectorModel | None:
        """Return the embedding model a session's vectors came from, or ``None`` if it has none.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be read.
        """
        return self._vectors.model(self._search_engine.check(session_id))

    def index_embeddings(
        self,
        session_id: str,
        embedder: Embedder,
        *,
        keys: Iterable[str] | None = None,
        batch_size: int = 256,
        progress: Callable[[int, int], object] | None = None,
        parts: EmbedParts | None = None,
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
            parts: Cut items this way (see :meth:`search`); an item's parts
                are stored together, in one vector row.

        Returns:
            How many items of the session hold a vector over ``keys``.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``batch_size`` < 1, ``embedder`` has no
                ``name`` and ``dimension``, or ``parts`` is not an ``EmbedParts``.
            InvalidQueryError: if keys are not field names.
            EmbedderMismatchError: if the session holds vectors of another
                model; nothing is changed.
            EmbeddingError: if the embedder returns the wrong shape or NaN;
                that batch writes nothing (earlier batches keep their vectors).
            MissingDependencyError: naming the extra when numpy is missing.
            StoreError: if the store is read-only or cannot be written.
        """
        sid = self._search_engine.check_write(session_id)
        fields = checked_keys(keys)
        return self._vectors.index(
            sid, embedder, fields, batch_size, progress, checked_parts(parts)
        )

    def read_vectors(
        self,
        session_id: str,
        embedder: Embedder,
        *,
        keys: Iterable[str] | None = None,
        seqs: Iterable[int] | None = None,
        parts: EmbedParts | None = None,
    ) -> dict[int, Any]:
        """Return the stored unit vectors of a session's items (over ``keys``), by seq.

        Items without text, and items not embedded yet, are left out.

        Args:
            session_id: The session to read.
            embedder: The model the vectors must come from.
            keys: The fields the vectors were embedded over.
            seqs: Only these items (default: every item).
            parts: How the vectors were cut (see :meth:`search`).

        Returns:
            ``{seq: float32 array of shape (n_parts, dimension)}`` in seq
            order; with ``parts=EmbedParts.WHOLE``, of shape ``(dimension,)``.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            EmbedderMismatchError: if the session holds vectors of another model.
            CorruptStoreError: if a stored vector has the wrong length.
            StoreError: if the store cannot be read.
        """
        sid = self._search_engine.check(session_id)
        return self._vectors.read(sid, embedder, checked_keys(keys), seqs, checked_parts(parts))

    def vectors_over_budget(
        self, session_id: str, *, keys: Iterable[str] | None = None, parts: EmbedParts | None = None
    ) -> bool:
        """Return whether the session's stored vectors (over ``keys``, cut as ``parts``) pass the bytes a handle keeps as float32.

        Such a session is kept as int8 codes (or read page by page); a
        ``StoredMemory`` leaves its vectors in the store, which answers its
        semantic and hybrid queries exactly (see ``StoredMemory.search``).

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be read.
        """
        sid = self._search_engine.check(session_id)
        filed = fields_text(checked_keys(keys), checked_parts(parts))
        return over_budget(self._search_engine, self._vector_cache, sid, filed)

    def drop_vectors(self, session_id: str) -> int:
        """Delete every vector of a session and forget its model; return how many vector rows went.

        The items stay. Do this to embed the session again with another
        model (``index_embeddings`` refuses one while vectors of another
        are stored).

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        return self._vectors.drop(self._search_engine.check_write(session_id))
