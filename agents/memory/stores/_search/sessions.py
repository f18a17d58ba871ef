"""Search over many sessions of a store at once: one ranking, with the statistics of the sessions searched.

:class:`SessionSearch` is what :meth:`Store.search_sessions` and
:meth:`Store.recall_sessions` run. The sessions searched (the *scope*) are
sorted by id; their items rank as ``Memory.search`` ranks a memory holding
them one session after the other, each in seq order, so equal scores go by
session id, then seq. Within this module an item is named by one int key,
``position << 64 | seq`` (``position``: its session's place in the scope),
which sorts in that order and lets the filtering walk of ``filtering``
serve many sessions as it serves one.

Keyword search asks the backend for the ranking over all the sessions at
once (:meth:`Backend.keyword_top_sessions`: SQLite and PostgreSQL answer
from their keyword index, reading only the hits); without an index, and for
a search of some fields, the sessions are read a page at a time and scored
here with their summed statistics. Semantic scores do not depend on the
other items, so each session's best are found as ``Store.search`` finds
them and merged; a hybrid query blends the union's BM25 with those cosines
as ``Memory.search`` blends them.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from agents.memory._filter import Filter
from agents.memory._item import MemoryItem, OnUnknownClass
from agents.memory._text import Tokenizer, bm25_average_length
from agents.memory._vectors import (
    HYBRID_POOL,
    Embedder,
    EmbedParts,
    blend,
    checked_vectors,
    keyword_scale,
    stands_out,
)
from agents.memory.exceptions import InvalidQueryError, StoreArgumentError
from agents.memory.stores._core.engine import Engine
from agents.memory.stores._core.terms import (
    KeywordMatch,
    bm25_score,
    keyword_matches,
    match_coverage,
    match_together,
    query_weights,
    rank_matches,
)
from agents.memory.stores._core.values import SessionHit, session_info
from agents.memory.stores._search.filtering import ALL, Passing, widening
from agents.memory.stores._search.vectors import VectorSearch, check_embedder

if TYPE_CHECKING:
    from agents.memory.prompt import Window

__all__ = ["SessionSearch"]

_SHIFT: Final = 64
"""Bits of an item key below its session's position: room for any seq (below 2**63)."""
_SEQ_MASK: Final = (1 << _SHIFT) - 1
_LARGEST_K: Final = 2**62
_TOKENIZER: Final = Tokenizer()


def _best_first(hit: tuple[int, float]) -> tuple[float, int]:
    """Sort key of ``(key, score)``: the higher score first, then session id and seq."""
    return -hit[1], hit[0]


class SessionSearch:
    """Keyword, semantic and hybrid search, and recall, over the sessions of a scope.

    Args:
        engine: The store's engine.
        vectors: The store's vector search, which embeds and scores each session.
    """

    def __init__(self, engine: Engine, vectors: VectorSearch) -> None:
        self._engine = engine
        self._vectors = vectors

    # -- the scope ---------------------------------------------------------------------

    def scope(
        self,
        sessions: Iterable[str] | None,
        prefix: str | None,
        metadata: Filter | None,
    ) -> list[str]:
        """Return the ids of the existing sessions in all the scope's conditions, sorted by code point.

        Raises:
            StoreArgumentError: if ``sessions`` is a string, or ``prefix`` is not one.
            InvalidSessionIdError: if an id of ``sessions`` is not a valid id.
        """
        engine = self._engine
        engine.check_open()
        wanted: set[str] | None = None
        if sessions is not None:
            if isinstance(sessions, (str, bytes)):
                msg = f"sessions takes an iterable of session ids, got the string {sessions!r}; pass [{sessions!r}] for one session."
                raise StoreArgumentError(msg)
            wanted = {engine.check(sid) for sid in sessions}
        if prefix is not None and type(prefix) is not str:
            msg = f"prefix takes the start of a session id as a str, got {prefix!r} ({type(prefix).__name__})."
            raise StoreArgumentError(msg)
        if wanted is not None and not wanted:
            return []
        with engine.errors("list the sessions of", None):
            every = engine.backend.sessions()
        chosen = sorted(
            sid
            for sid in every
            if (wanted is None or sid in wanted) and (prefix is None or sid.startswith(prefix))
        )
        if metadata is None or not chosen:
            return chosen
        with engine.errors("read the sessions of", None):
            rows = engine.backend.read_sessions(chosen)
        return [
            sid
            for sid in chosen
            if sid in rows
            and metadata(MemoryItem(**session_info(sid, rows[sid], engine.url).metadata))
        ]

    def step_keys(self, scope: Sequence[str]) -> dict[str, str]:
        """Return each session's step key."""
        with self._engine.errors("read the sessions of", None):
            rows = self._engine.backend.read_sessions(scope)
        return {sid: row[0] for sid, row in rows.items()}

    # -- keyword ---------------------------------------------------------------------------

    def keyword(
        self,
        scope: Sequence[str],
        terms: Sequence[str],
        fields: tuple[str, ...] | None,
        k: int,
        keep: Filter | None,
        on_unknown_class: OnUnknownClass,
    ) -> list[SessionHit]:
        """Return the ``k`` best hits by BM25 over the scope's items (that pass ``keep``), best first."""
        if not scope:
            return []
        found: dict[int, MemoryItem] = {}
        first = k if keep is None else max(4 * k, 64)
        indexed = self._indexed(scope, terms, fields, first)
        if indexed is None:
            ranked, items = self._scored(scope, terms, fields, ALL if keep else k, on_unknown_class)
            found.update(items)

            def rank(limit: int) -> list[tuple[int, float]]:
                return ranked[:limit]

            first = ALL
        else:
            asked = {first: indexed}

            def rank(limit: int) -> list[tuple[int, float]]:
                if limit not in asked:
                    asked[limit] = self._indexed(scope, terms, fields, limit) or []
                return asked[limit]

        return self._hits(scope, rank, k, keep, found, on_unknown_class, first)

    def _indexed(
        self, scope: Sequence[str], terms: Sequence[str], fields: tuple[str, ...] | None, k: int
    ) -> list[tuple[int, float]] | None:
        """Return the backend's ranking of the scope (``(key, score)``, best first), or ``None`` if it has no index."""
        if fields is not None:
            return None  # per-field statistics are in no index
        with self._engine.errors("search", None):
            best = self._engine.backend.keyword_top_sessions(scope, terms, min(k, _LARGEST_K))
        if best is None:
            return None
        position = {sid: place for place, sid in enumerate(scope)}
        return [(position[sid] << _SHIFT | seq, score) for score, sid, seq in best]

    def _scored(
        self,
        scope: Sequence[str],
        terms: Sequence[str],
        fields: tuple[str, ...] | None,
        k: int,
        on_unknown_class: OnUnknownClass,
    ) -> tuple[list[tuple[int, float]], dict[int, MemoryItem]]:
        """Rank the scope read a page at a time, with the statistics of all its sessions; return the ``k`` best and their items."""
        n_items, total, matches, found = self._matches(scope, terms, fields, on_unknown_class)
        best = rank_matches(n_items, total, matches, terms, k)
        return [(key, score) for score, key in best], {key: found[key] for _, key in best}

    def _matches(
        self,
        scope: Sequence[str],
        terms: Sequence[str],
        fields: tuple[str, ...] | None,
        on_unknown_class: OnUnknownClass,
    ) -> tuple[int, int, list[KeywordMatch], dict[int, MemoryItem]]:
        """Return what BM25 needs of the scope's items: counts summed, matches and their items by key."""
        n_items = 0
        total = 0
        matches: list[KeywordMatch] = []
        found: dict[int, MemoryItem] = {}
        for place, sid in enumerate(scope):
            base = place << _SHIFT
            pages = self._engine.decoded_pages(sid, 1000, on_unknown_class)
            n, length, held, items = keyword_matches(pages, terms, fields)
            n_items += n
            total += length
            matches.extend((base | seq, size, counts) for seq, size, counts in held)
            found.update((base | seq, item) for seq, item in items.items())
        return n_items, total, matches, found

    # -- semantic and hybrid ---------------------------------------------------------------

    def vectors(
        self,
        scope: Sequence[str],
        text: str,
        k: int,
        fields: tuple[str, ...] | None,
        mode: str,
        embedder: Embedder | None,
        weight: float,
        keep: Filter | None,
        parts: EmbedParts,
        on_unknown_class: OnUnknownClass,
    ) -> list[SessionHit]:
        """Return the ``k`` best hits by cosine (semantic) or the hybrid blend over the scope's items, best first."""
        if embedder is None:
            msg = f"search_sessions(mode={mode!r}) needs embedder=...: the model the sessions' vectors come from (for example HashingEmbedder() or WordLlamaEmbedder())."
            raise InvalidQueryError(msg)
        check_embedder(embedder)
        if not scope:
            return []
        query = checked_vectors(embedder, [text])[0]
        found: dict[int, MemoryItem] = {}
        if mode == "semantic":

            def rank(limit: int) -> list[tuple[int, float]]:
                scored = [
                    (place << _SHIFT | seq, cosine)
                    for place, sid in enumerate(scope)
                    for seq, cosine in self._vectors.cosines(
                        sid, embedder, fields, query, limit, (), parts
                    ).items()
                ]
                return heapq.nsmallest(limit, scored, key=_best_first)

            return self._hits(scope, rank, k, keep, found, on_unknown_class, k)
        scores = self._hybrid(
            scope, text, k, fields, embedder, weight, query, parts, found, on_unknown_class
        )
        ranked = sorted(scores.items(), key=_best_first)
        return self._hits(
            scope, lambda limit: ranked[:limit], k, keep, found, on_unknown_class, ALL
        )

    def _hybrid(
        self,
        scope: Sequence[str],
        text: str,
        k: int,
        fields: tuple[str, ...] | None,
        embedder: Embedder,
        weight: float,
        query: Any,
        parts: EmbedParts,
        found: dict[int, MemoryItem],
        on_unknown_class: OnUnknownClass,
    ) -> dict[int, float]:
        """Return the hybrid blend of every candidate by key, as ``Memory.search`` blends over the union of the scope.

        The keyword side is BM25 of every item holding a query term, with
        the statistics of all the sessions; the semantic side each session's
        best cosines (and those of the keyword hits), cut to the best
        ``max(10 * k, HYBRID_POOL)`` of them all (with ties), as one memory
        would pick them. The keyword share follows the share of the query's
        IDF weight the best keyword hit holds (ties to the first session's
        oldest item), as ``Memory.search`` takes it.
        """
        terms = _TOKENIZER(text)
        keyword: dict[int, float] = {}
        scale = 1.0
        covered = 1.0
        together = True
        if terms:
            n_items, total, matches, items = self._matches(scope, terms, fields, on_unknown_class)
            found.update(items)
            if n_items:
                df = Counter(term for _, _, counts in matches for term in counts)
                weighted = query_weights(terms, df, n_items)
                average = bm25_average_length(total, n_items)
                keyword = {
                    key: bm25_score(counts, length, weighted, average)
                    for key, length, counts in matches
                }
                scale = keyword_scale(n_items)
                covered = match_coverage(terms, df, matches, keyword, n_items)
                if stands_out(keyword, weight):
                    together = match_together(terms, df, matches, keyword, items, n_items, fields)
        pool = max(10 * k, HYBRID_POOL)
        cosines: dict[int, float] = {}
        for place, sid in enumerate(scope):
            base = place << _SHIFT
            among = [key & _SEQ_MASK for key in keyword if key >> _SHIFT == place]
            got = self._vectors.cosines(sid, embedder, fields, query, pool, among, parts)
            cosines.update((base | seq, cosine) for seq, cosine in got.items())
        if len(cosines) > pool:
            cut = heapq.nlargest(pool, cosines.values())[-1]
            cosines = {key: c for key, c in cosines.items() if c >= cut or key in keyword}
        return blend(keyword, scale, cosines, weight, covered, together)

    # -- hits ---------------------------------------------------------------------------

    def _hits(
        self,
        scope: Sequence[str],
        rank: Any,
        k: int,
        keep: Filter | None,
        found: dict[int, MemoryItem],
        on_unknown_class: OnUnknownClass,
        first: int,
    ) -> list[SessionHit]:
        """Return the first ``k`` hits of the ranking whose items exist (and pass ``keep``)."""

        def read(keys: Sequence[int]) -> dict[int, MemoryItem]:
            return self._read(scope, keys, on_unknown_class)

        if keep is not None:
            passing: Passing = widening(rank, k, keep, found, read, first=first)
        else:
            best = rank(k)[:k]
            missing = [key for key, _ in best if key not in found]
            if missing:
                found.update(read(missing))
            # An item deleted between the ranking and the read is left out.
            passing = [(key, score, found[key]) for key, score in best if key in found]
        return [
            SessionHit(scope[key >> _SHIFT], key & _SEQ_MASK, item, score)
            for key, score, item in passing
        ]

    def _read(
        self, scope: Sequence[str], keys: Sequence[int], on_unknown_class: OnUnknownClass
    ) -> dict[int, MemoryItem]:
        """Read and decode the items of some keys (those that exist), by key."""
        by_session: dict[int, list[int]] = {}
        for key in keys:
            by_session.setdefault(key >> _SHIFT, []).append(key & _SEQ_MASK)
        out: dict[int, MemoryItem] = {}
        for place, seqs in by_session.items():
            base = place << _SHIFT
            items = self._engine.read_items(scope[place], sorted(seqs), on_unknown_class)
            out.update((base | seq, item) for seq, item in items.items())
        return out

    # -- recall -------------------------------------------------------------------------

    def recall(
        self,
        scope: Sequence[str],
        hits: Sequence[SessionHit],
        recent: Window | None,
        on_unknown_class: OnUnknownClass,
    ) -> dict[str, list[MemoryItem]]:
        """Return the hits' items and each session's ``recent`` window, once each, by session (in id order), each in seq order."""
        chosen: dict[str, dict[int, MemoryItem]] = {}
        for hit in hits:
            chosen.setdefault(hit.session_id, {})[hit.seq] = hit.item
        if recent is not None and scope:
            from agents.memory.prompt import select_window

            step_keys = self.step_keys(scope)
            for sid in scope:
                records = [
                    record
                    for page in self._engine.decoded_pages(sid, 1000, on_unknown_class)
                    for record in page
                ]
                if not records:
                    continue
                seq_of = {id(record.item): record.seq for record in records}
                kept = select_window(
                    [record.item for record in records],
                    recent,
                    step_key=step_keys.get(sid, "step"),
                ).items
                mine = chosen.setdefault(sid, {})
                for item in kept:
                    seq = seq_of.get(id(item))
                    if seq is not None:
                        mine.setdefault(seq, item)
        return {
            sid: [items[seq] for seq in sorted(items)]
            for sid in sorted(chosen)
            if (items := chosen[sid])
        }


def check_metadata_filter(metadata: object) -> Filter | None:
    """Return the compiled metadata filter of a scope (``None``: none), else raise :class:`InvalidQueryError`."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping) and not callable(metadata):
        msg = f"metadata takes a filter (a mapping in the filter language, or a function), got {metadata!r}."
        raise InvalidQueryError(msg)
    return Filter.of(metadata)
