"""The store-wide search calls of a store: one ranking over many sessions, and recall across them.

:class:`SessionSearchCalls` is the part of :class:`~agents.memory.stores.Store`
that searches several sessions at once; the work is done by
:class:`~agents.memory.stores._search.sessions.SessionSearch`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from agents.memory._filter import Filter, Where
from agents.memory._item import MemoryItem, OnUnknownClass
from agents.memory._vectors import Embedder, EmbedParts, SearchMode
from agents.memory.stores._core.engine import Engine
from agents.memory.stores._core.terms import keyword_query
from agents.memory.stores._core.values import SessionHit
from agents.memory.stores._search.arguments import checked_parts, checked_vector_query
from agents.memory.stores._search.keyword import KeywordSearch
from agents.memory.stores._search.sessions import SessionSearch, check_metadata_filter
from agents.memory.stores._search.vector_cache import VectorCache
from agents.memory.stores._search.vectors import VectorSearch

if TYPE_CHECKING:
    from agents.memory.prompt import Window

__all__ = ["SessionSearchCalls"]


class SessionSearchCalls:
    """A store's calls that search many sessions at once (a base of :class:`~agents.memory.stores.Store`).

    Args:
        engine: The store's engine.
        cache: The vectors the store's semantic searches keep between queries.
    """

    def __init__(self, engine: Engine, cache: VectorCache) -> None:
        self._across = SessionSearch(engine, VectorSearch(engine, KeywordSearch(engine), cache))

    def search_sessions(
        self,
        query: str,
        k: int = 5,
        *,
        sessions: Iterable[str] | None = None,
        prefix: str | None = None,
        metadata: Where | None = None,
        keys: Iterable[str] | None = None,
        where: Where | None = None,
        mode: SearchMode = "keyword",
        embedder: Embedder | None = None,
        hybrid_weight: float | None = None,
        parts: EmbedParts | None = None,
        on_unknown_class: OnUnknownClass = "error",
    ) -> list[SessionHit]:
        """Return the ``k`` items of many sessions that best match ``query``, best first, in one ranking.

        The sessions searched are those of the store that meet every scope
        argument given (none given: every session): ``sessions`` (these
        ids; unknown ones add nothing), ``prefix`` (ids that start with it)
        and ``metadata`` (sessions whose metadata, saved with
        :meth:`set_metadata`, passes the filter). The ranking is the one
        ``Memory.search(query, k, keys=keys, where=where, mode=mode)`` gives
        over one memory holding the items of all those sessions, session
        after session in session-id order (by code point), each in seq
        order: in keyword mode the statistics (item count, average length,
        how many items hold each term) are those of exactly the sessions
        searched, so a word common in one large session and rare
        elsewhere weighs what it weighs in all of them, and the scores
        equal that memory's; equal scores go by session id, then seq.
        SQLite and PostgreSQL answer keyword mode (without ``keys``) from
        their keyword index, in the database, and read only the hits.

        Args:
            query: The words to look for.
            k: How many hits at most.
            sessions: Search only these sessions.
            prefix: Search only the sessions whose id starts with this.
            metadata: Search only the sessions whose metadata passes this
                filter (the language of ``where``, see
                :class:`~agents.memory.search.Filter`; a function is given
                the metadata as a ``MemoryItem``).
            keys: Search only these fields.
            where: Keep only items that pass this filter, as :meth:`search` does.
            mode: ``"keyword"`` (BM25, the default), ``"semantic"`` or ``"hybrid"``, as :meth:`search`.
            embedder: The model, for semantic and hybrid modes (required there).
            hybrid_weight: The keyword share of a hybrid score, 0 to 1 (times ``q**8`` between them; 1: keyword alone, 0: semantic alone; as :meth:`search`).
            parts: How items are cut into the texts that get embedded (see :meth:`search`).
            on_unknown_class: ``"base"`` reads items whose class cannot be
                imported as plain ``MemoryItem`` instead of raising.

        Returns:
            Up to ``k`` hits, each naming its session and seq.

        Raises:
            InvalidSessionIdError: if an id of ``sessions`` is not a valid id.
            StoreArgumentError: if ``sessions`` is a string, ``prefix`` is not
                one, or ``parts`` is not an ``EmbedParts``.
            InvalidQueryError: as :meth:`search`, and for a ``metadata`` filter that is not understood.
            EmbedderMismatchError: if a session holds vectors of another model.
            CorruptSessionError: if a stored item cannot be decoded.
            CorruptStoreError: if the store's keyword index is damaged or missing.
            StoreError: if the store cannot be read.
        """
        across = self._across
        keep = Filter.of(where)
        scoped = check_metadata_filter(metadata)
        if mode == "keyword":
            terms, fields = keyword_query(query, k, keys)
            scope = across.scope(sessions, prefix, scoped)
            return across.keyword(scope, terms, fields, k, keep, on_unknown_class)
        text, fields, weight = checked_vector_query(
            "search_sessions", query, k, keys, mode, hybrid_weight
        )
        chosen = checked_parts(parts)
        scope = across.scope(sessions, prefix, scoped)
        return across.vectors(
            scope, text, k, fields, mode, embedder, weight, keep, chosen, on_unknown_class
        )

    def recall_sessions(
        self,
        query: str,
        k: int = 3,
        *,
        sessions: Iterable[str] | None = None,
        prefix: str | None = None,
        metadata: Where | None = None,
        recent: Window | None = None,
        keys: Iterable[str] | None = None,
        where: Where | None = None,
        mode: SearchMode = "keyword",
        embedder: Embedder | None = None,
        hybrid_weight: float | None = None,
        parts: EmbedParts | None = None,
        on_unknown_class: OnUnknownClass = "error",
    ) -> dict[str, list[MemoryItem]]:
        """Return the top ``k`` hits across sessions and each session's ``recent`` window, once each, by session.

        What ``Memory.recall`` (and ``StoredMemory.recall``) gives for one
        session, over the sessions :meth:`search_sessions` would search:
        the ``k`` best hits of one ranking over all of them, then, with
        ``recent``, the items that window keeps of each session of the scope
        (each session's own window: narrow the scope to the sessions that
        matter, since every one is read). With one session in the scope the
        items are those ``StoredMemory(store, id).recall(...)`` returns.

        Args:
            query: The words to look for.
            k: How many search hits at most, over all the sessions.
            sessions: Search only these sessions.
            prefix: Search only the sessions whose id starts with this.
            metadata: Search only the sessions whose metadata passes this filter.
            recent: The window of recent items to add from each session (see
                ``select_window``); ``None`` adds none.
            keys: Search only these fields.
            where: Keep only hits that pass this filter (the windows are not filtered).
            mode: ``"keyword"``, ``"semantic"`` or ``"hybrid"``.
            embedder: The model for semantic and hybrid modes.
            hybrid_weight: The keyword share of a hybrid score, 0 to 1 (times ``q**8`` between them; 1: keyword alone, 0: semantic alone; as :meth:`search`).
            parts: How items are cut into the texts that get embedded.
            on_unknown_class: ``"base"`` reads items whose class cannot be
                imported as plain ``MemoryItem`` instead of raising.

        Returns:
            ``{session_id: items}`` of the sessions that give an item, in
            session-id order, each session's items in seq order.

        Raises:
            InvalidQueryError: as :meth:`search_sessions`.
            BudgetExceededError: if a window's pinned items alone break its bounds.
            StoreError: as :meth:`search_sessions`.
        """
        if sessions is not None and not isinstance(sessions, (str, bytes)):
            sessions = list(sessions)  # read twice: for the hits, then for the windows
        hits = self.search_sessions(
            query,
            k,
            sessions=sessions,
            prefix=prefix,
            metadata=metadata,
            keys=keys,
            where=where,
            mode=mode,
            embedder=embedder,
            hybrid_weight=hybrid_weight,
            parts=parts,
            on_unknown_class=on_unknown_class,
        )
        scope = (
            self._across.scope(sessions, prefix, check_metadata_filter(metadata))
            if recent is not None
            else []
        )
        return self._across.recall(scope, hits, recent, on_unknown_class)
