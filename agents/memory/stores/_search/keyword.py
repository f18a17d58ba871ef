"""Keyword search of a stored session: BM25 from the backend's index, or over the session read a page at a time.

The ranking is the one ``Memory.search`` gives for the same items. A backend
that keeps a keyword index answers :meth:`Backend.keyword_top` and only the
hits are read; otherwise (and for a search of some fields) the session is
read a page at a time and scored in Python
(:func:`~agents.memory.stores._core.terms.rank_pages`).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from agents.memory._codec import BULK_VALUES, collector_paused
from agents.memory._filter import Filter
from agents.memory._hybrid import Pruning, bounded_blend
from agents.memory._item import MemoryItem, OnUnknownClass
from agents.memory._text import (
    PROXIMITY_TOP,
    bm25_average_length,
    may_stand_together,
    proximity_weights,
    query_coverage,
)
from agents.memory._vectors import HYBRID_POOL, blend, keyword_scale, stands_out
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._core.engine import Engine
from agents.memory.stores._core.terms import (
    bm25_score,
    holds_every_word_together,
    item_terms,
    items_together,
    keyword_matches,
    keyword_query,
    match_coverage,
    match_together,
    query_weights,
    rank_pages,
)
from agents.memory.stores._core.values import StoreHit
from agents.memory.stores._search.filtering import (
    ALL,
    NARROW_AT,
    Passing,
    narrower,
    reader,
    widening,
)

__all__ = ["KeywordSearch", "QueryReads"]

_LARGEST_K = 2**62

Held = Callable[[Sequence[int]], Mapping[int, MemoryItem]]
"""The items of some seqs a caller holds, by seq (those it holds of them)."""
Ranks = Callable[[int], Sequence[tuple[float, int]] | None]
"""``ranks(depth)``: a hybrid query's keyword ranking, its ``depth`` best ``(bm25, seq)``, best first (``Backend.keyword_top``)."""


class QueryReads:
    """What one hybrid query's blends read of the store once and hand on: the item count, the keyword evidence of its pool, each row's BM25.

    A filtered query blends more than once (:func:`~agents.memory.stores._search.hybrid.walked_passing`:
    its walk's first depth, then the rows that may pass), and each blend
    asked the same things again: the session's item count, the leader's
    words, the query words' frequencies, the best hits' terms and items
    (:meth:`KeywordSearch._indexed_evidence`, of the same ranking), and the
    BM25 of the pool's rows outside the ranking (``Backend.keyword_among``):
    six statements, 4-5 ms on PostgreSQL at 30,000 steps. Each is read
    once a query; the session is the same between them as it is between
    any two statements of a query.

    Args:
        count: The session's item count, where the caller reads it once a
            query (read from the backend otherwise, at most once).
    """

    def __init__(self, count: Callable[[], int] | None = None) -> None:
        self.count = count
        self.evidence: tuple[float, bool, dict[int, MemoryItem]] | None = None
        self.bm25: dict[int, float] = {}  # the rows asked that hold a query term, by seq
        self.asked: set[int] = set()  # every row whose BM25 was asked


class KeywordSearch:
    """The keyword side of a store's search calls, over its :class:`Engine`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def search(
        self,
        sid: str,
        query: str,
        k: int,
        keys: Iterable[str] | None,
        on_unknown_class: OnUnknownClass,
        keep: Filter | None = None,
    ) -> list[StoreHit]:
        """Return the ``k`` best hits by BM25 (that pass ``keep``), best first (``Store.search`` in keyword mode)."""
        terms, fields = keyword_query(query, k, keys)
        if keep is not None:
            passing = self.filtered(sid, terms, fields, k, keep, on_unknown_class)
            return [StoreHit(seq, item, score) for seq, score, item in passing]
        engine = self._engine
        with engine.errors("search", sid):
            best, found = self.top(sid, terms, fields, k, on_unknown_class)
        missing = [seq for _, seq in best if seq not in found]
        if missing:
            found = {**found, **engine.read_items(sid, missing, on_unknown_class)}
        # An item deleted between the two reads is left out rather than failing the search.
        return [StoreHit(seq, found[seq], score) for score, seq in best if seq in found]

    def ranking(
        self, sid: str, query: str, k: int, keys: Iterable[str] | None, keep: Filter | None = None
    ) -> list[tuple[int, float]]:
        """Return ``(seq, score)`` of the ``k`` best items (that pass ``keep``), best first, reading as few items as the backend allows."""
        terms, fields = keyword_query(query, k, keys)
        if keep is not None:
            passing = self.filtered(sid, terms, fields, k, keep, "base")
            return [(seq, score) for seq, score, _ in passing]
        with self._engine.errors("search", sid):
            best, _ = self.top(sid, terms, fields, k, "base")
        return [(seq, score) for score, seq in best]

    def filtered(
        self,
        sid: str,
        terms: Sequence[str],
        fields: tuple[str, ...] | None,
        k: int,
        keep: Filter,
        on_unknown_class: OnUnknownClass,
    ) -> Passing:
        """Return the best ``k`` items by BM25 that pass ``keep``, widening the ranking until they are found.

        A backend that ranks only the rows that may pass, in the statement
        that scores the session (``Backend.keyword_top_where``), is asked
        for ``k`` of them, then longer rankings as the filter drops some.
        Otherwise, a ranking scored in Python (no keyword index, or ``fields``) is asked
        for every candidate at once: it decodes them all to score them
        anyway. An indexed one is asked for :data:`NARROW_AT` (its items
        are read as the walk needs them), then as
        many as the pass rate seen needs. When a ranking falls short with
        at most one in ``FEW`` of its items passing, the backend is asked
        which rows may pass
        (``Backend.filter_candidates``): if at most one in ``FEW`` may,
        only those rows are scored (``Backend.keyword_among``, with the
        whole session's statistics); otherwise the others are skipped
        unread as the ranking widens.
        """
        found: dict[int, MemoryItem] = {}
        engine = self._engine
        if fields is None and _answers_top_where(engine.backend):
            # The backend ranks only the rows that may pass, in the statement that scores them.
            with engine.errors("search", sid):
                best = engine.backend.keyword_top_where(sid, terms, min(k, _LARGEST_K), keep.tree)
            if best is not None:

                def rank_where(limit: int) -> list[tuple[int, float]]:
                    if limit == k:
                        return [(seq, score) for score, seq in best]
                    with engine.errors("search", sid):
                        more = engine.backend.keyword_top_where(
                            sid, terms, min(limit, _LARGEST_K), keep.tree
                        )
                    # The same filter and terms get an answer each time (None only for those).
                    return [(seq, score) for score, seq in more or ()]

                read = reader(engine, sid, on_unknown_class)
                return widening(rank_where, k, keep, found, read)

        def rank(limit: int) -> list[tuple[int, float]]:
            with self._engine.errors("search", sid):
                best, items = self.top(sid, terms, fields, limit, on_unknown_class)
            found.update(items)
            return [(seq, score) for score, seq in best]

        def among(seqs: set[int]) -> list[tuple[int, float]] | None:
            with self._engine.errors("search", sid):
                scored = self._engine.backend.keyword_among(sid, terms, sorted(seqs))
            return None if scored is None else [(seq, score) for score, seq in scored]

        python_ranked = fields is not None or not engine.backend.keyword_index
        return widening(
            rank,
            k,
            keep,
            found,
            reader(engine, sid, on_unknown_class),
            # An indexed ranking of NARROW_AT costs more than one of k (the scorer prunes for a
            # small k), but its items are read only as far as the walk goes: one ranking settles
            # a filter that 1% of the items pass (reading a few hundred), where asking SQL which
            # rows may pass reads every row of the session. A backend that keeps that answer
            # ranks only the passing rows when the filter is asked again (keyword_top_where).
            first=ALL if python_ranked else max(4 * k, NARROW_AT),
            narrow=narrower(engine, sid, keep),
            among=among if not python_ranked and _answers_among(engine.backend) else None,
        )

    def top(
        self,
        sid: str,
        terms: Sequence[str],
        keys: tuple[str, ...] | None,
        k: int,
        on_unknown_class: OnUnknownClass,
    ) -> tuple[list[tuple[float, int]], dict[int, MemoryItem]]:
        """Return the ``k`` best ``(score, seq)``, best first (ties by seq), and any of those items already decoded.

        The backend's index answers where it has one (no items read); with
        ``keys`` (per-field statistics are in no index) or without an
        index, the session is read a page at a time and scored here.
        """
        if keys is None:
            # A backend may ask its engine for a few rows past the k-th: keep that within
            # 64-bit integers (no session holds 2**62 items, so the answer is the same).
            best = self._engine.backend.keyword_top(sid, terms, min(k, _LARGEST_K))
            if best is not None:
                return best, {}
        pages = self._engine.decoded_pages(sid, 1000, on_unknown_class)
        # The scan keeps a match per item until it ranks them: paused, the collector does not
        # walk the whole heap again each time they grow it (a 50,000-item scan paused an
        # async store's event loop up to 107 ms that way); they die young, when ranked.
        with collector_paused(BULK_VALUES):
            return rank_pages(pages, terms, keys, k)

    def hybrid(
        self,
        sid: str,
        terms: Sequence[str],
        fields: tuple[str, ...] | None,
        weight: float,
        on_unknown_class: OnUnknownClass,
        reads: QueryReads | None = None,
    ) -> tuple[dict[int, float], float, float, bool, dict[int, MemoryItem]]:
        """Return the keyword side of a hybrid query: BM25 by seq, the corpus's keyword scale, the leader's coverage, whether a hit holds the words together, items read.

        As the search index scores them for ``Memory.search``: every item
        holding a query term, summed in query order (no IDF is floored, so
        no item can be left out as near zero). A backend that keeps a
        keyword index ranks every item holding a term there
        (:meth:`Backend.keyword_top`), and only the best hit is read (for
        its words); otherwise the session is read a page at a time and
        tokenized. The coverage is
        the share of the query's IDF weight the best hit holds (ties to
        the oldest), as ``SearchIndex.coverage`` gives it; whether the best
        hits hold the query's words together as ``SearchIndex.together``
        decides it (only where the blend asks, ``stands_out``).
        ``reads``: what the query read before (:class:`QueryReads`).
        """
        backend = self._engine.backend
        if fields is None:
            with self._engine.errors("search", sid):
                every = backend.keyword_top(sid, terms, _LARGEST_K)
                n_items = self._count(sid, reads) if every is not None else 0
            if every is not None:
                if not n_items:
                    return {}, 1.0, 1.0, True, {}
                scores = {seq: score for score, seq in every}
                covered, together, read = self._indexed_evidence(
                    sid, terms, every, n_items, weight, on_unknown_class
                )
                return scores, keyword_scale(n_items), covered, together, read
        with self._engine.errors("search", sid):
            n_items, total, matches, found = keyword_matches(
                self._engine.decoded_pages(sid, 1000, on_unknown_class), terms, fields
            )
        if not n_items:
            return {}, 1.0, 1.0, True, found
        df = Counter(term for _, _, counts in matches for term in counts)
        weighted = query_weights(terms, df, n_items)
        average = bm25_average_length(total, n_items)
        scores = {
            seq: bm25_score(counts, length, weighted, average) for seq, length, counts in matches
        }
        together = not stands_out(scores, weight) or match_together(
            terms, df, matches, scores, found, n_items, fields
        )
        return (
            scores,
            keyword_scale(n_items),
            match_coverage(terms, df, matches, scores, n_items),
            together,
            found,
        )

    def hybrid_scores(
        self,
        sid: str,
        terms: Sequence[str],
        fields: tuple[str, ...] | None,
        k: int,
        pooled: Callable[[Iterable[int]], dict[int, float]],
        weight: float,
        on_unknown_class: OnUnknownClass,
        bounded: bool,
        also: Sequence[int] | None = None,
        own: Held | None = None,
        pool: int | None = None,
        ranks: Ranks | None = None,
        pruning: Pruning | None = None,
        reads: QueryReads | None = None,
    ) -> tuple[dict[int, float], dict[int, MemoryItem]]:
        """Return a hybrid query's blended scores by seq (candidates holding its ``k`` best, at least), and the items read.

        ``pooled(among)`` gives the best ``max(10 * k, HYBRID_POOL)`` cosines
        and those of ``among``. With ``bounded`` (no filter), the keyword
        side is ranked only as deep as the blend needs where the backend
        can (:meth:`bounded_hybrid`); otherwise every item holding a query
        term is blended (:meth:`hybrid`). With ``also`` (the few rows a
        filter may pass), only the candidates among them are returned:
        where the backend can, the bounded walk is taken and they are
        scored besides, whatever their rank, each with the float of
        blending every hit (reading and scoring every keyword hit made a
        filtered query 3-4x the unfiltered one). ``own(seqs)`` gives the
        items of some seqs the caller holds (a ``StoredMemory``'s own), which
        the bounded walk takes instead of reading them. ``pool``: the
        semantic pool's size where ``k`` is deeper than the query's own
        (a filtered query walking on past its ``k``; default ``max(10 * k, HYBRID_POOL)``).
        ``ranks(depth)``: the keyword ranking's ``depth`` best, where the
        caller holds one across calls (:func:`~agents.memory.stores._search.hybrid.held_ranking`; default the
        backend's :meth:`Backend.keyword_top`). ``pruning``: the candidates
        among ``also`` that cannot rank among the ``k`` best that pass are
        left out, their cosines never read (:class:`~agents.memory._hybrid.Pruning`,
        on the bounded walk). ``reads``: what the query's blends read once
        and hand on (:class:`QueryReads`; a query that blends more than
        once passes the same one to each).
        """
        if not terms:
            return _among(blend({}, 1.0, pooled([]), weight, 1.0), also), {}
        if bounded or also is not None:
            pool = max(10 * k, HYBRID_POOL) if pool is None else pool
            found = self.bounded_hybrid(
                sid,
                terms,
                fields,
                k,
                pool,
                pooled,
                weight,
                on_unknown_class,
                also or (),
                own,
                ranks,
                pruning,
                reads,
            )
            if found is not None:
                return _among(found[0], also), found[1]
        keyword, scale, covered, together, read = self.hybrid(
            sid, terms, fields, weight, on_unknown_class, reads
        )
        scores = blend(keyword, scale, pooled(keyword), weight, covered, together)
        return _among(scores, also), read

    def walks(self, fields: tuple[str, ...] | None) -> bool:
        """Return whether a hybrid query of ``fields`` may take the bounded walk (:meth:`bounded_hybrid`)."""
        return fields is None and _answers_among(self._engine.backend)

    def bounded_hybrid(
        self,
        sid: str,
        terms: Sequence[str],
        fields: tuple[str, ...] | None,
        k: int,
        pool: int,
        cosines: Callable[[Iterable[int]], dict[int, float]],
        weight: float,
        on_unknown_class: OnUnknownClass,
        also: Sequence[int] = (),
        own: Held | None = None,
        ranks: Ranks | None = None,
        pruning: Pruning | None = None,
        reads: QueryReads | None = None,
    ) -> tuple[dict[int, float], dict[int, MemoryItem]] | None:
        """Return the blended scores of candidates holding a hybrid query's ``k`` best (and those among ``also``), and the items read; or ``None``.

        The keyword side is ranked by the backend's index only as deep as
        the blend needs (:func:`~agents.memory._hybrid.bounded_blend`),
        not every item holding a query term: the same ``k`` best, with the
        same scores, as blending every hit. ``None`` (the caller then blends
        every hit, :meth:`hybrid`) for a search of some fields, and where the
        backend keeps no keyword index or cannot score chosen rows
        (:meth:`Backend.keyword_among`). ``reads``: what an earlier blend
        of the query read (:class:`QueryReads`), each read once: the item
        count, the evidence of the ranking ``pool`` deep, each row's BM25.
        """
        backend = self._engine.backend
        if not self.walks(fields):
            return None
        if ranks is None:
            ranks = functools.partial(backend.keyword_top, sid, terms)
        reads = QueryReads() if reads is None else reads
        with self._engine.errors("search", sid):
            # The pool grows with k (10 * k): keep it within 64-bit integers, as every depth.
            first = ranks(min(pool, _LARGEST_K))
            n_items = self._count(sid, reads) if first is not None else 0
        if first is None or not n_items:
            return None
        if reads.evidence is None:  # the same ranking (pool deep) at each blend of the query
            reads.evidence = self._indexed_evidence(
                sid, terms, first, n_items, weight, on_unknown_class, own
            )
        covered, together, read = reads.evidence

        def top(depth: int) -> Sequence[tuple[float, int]]:
            if depth == pool:
                return first
            with self._engine.errors("search", sid):
                return ranks(min(depth, _LARGEST_K)) or []

        def among(seqs: Sequence[int]) -> dict[int, float] | None:
            bm25, asked = reads.bm25, reads.asked
            wanted = [seq for seq in seqs if seq not in asked]
            if wanted:
                with self._engine.errors("search", sid):
                    scored = backend.keyword_among(sid, terms, wanted)
                if scored is None:
                    return None
                bm25.update((seq, score) for score, seq in scored)
                asked.update(wanted)
            return {seq: bm25[seq] for seq in seqs if seq in bm25}

        scale = keyword_scale(n_items)
        args = (scale, weight, covered, together, also, pruning)
        scores = bounded_blend(k, pool, top, among, cosines, *args)
        return None if scores is None else (scores, read)

    def _count(self, sid: str, reads: QueryReads | None) -> int:
        """Return the session's item count: the one the query read (``reads``), else read once for it."""
        if reads is None:
            return self._engine.backend.count(sid)
        if reads.count is None:
            reads.count = functools.cache(functools.partial(self._engine.backend.count, sid))
        return reads.count()

    def _indexed_evidence(
        self,
        sid: str,
        terms: Sequence[str],
        ranked: Sequence[tuple[float, int]],
        n_items: int,
        weight: float,
        on_unknown_class: OnUnknownClass,
        own: Held | None = None,
    ) -> tuple[float, bool, dict[int, MemoryItem]]:
        """Return, from the keyword index, the share of the query's IDF weight the leader holds, whether a best hit holds the words together, and the items read.

        ``ranked`` is the keyword ranking, best first (ties by seq), at
        least its ``PROXIMITY_TOP`` best. The leader is read and its terms
        counted: holding every query word, it covers the whole query, and
        holding them all within one window it holds them together (no
        weight asked). Otherwise, where the blend asks (``stands_out``),
        the best ``PROXIMITY_TOP`` hits whose indexed terms hold enough of
        the query's weight are read as well (in one statement, after the
        leader, where the leader does not hold the words together;
        :meth:`Backend.keyword_held`), and each word's
        document frequency comes from :meth:`Backend.keyword_frequencies`,
        or where the backend cannot say, from ranking the word's items
        (:meth:`Backend.keyword_top`).
        """
        distinct = list(dict.fromkeys(terms))
        if not ranked or len(distinct) < 2:
            return 1.0, True, {}  # no hit, or every hit holds the only word
        leader = ranked[0][1]
        hits = [seq for _, seq in ranked[:PROXIMITY_TOP]]
        wanted = stands_out(ranked, weight)
        read = self._items(sid, [leader], on_unknown_class, own)
        words = set(item_terms(read[leader])[0].split(" ")) if leader in read else set()
        whole = set(distinct) <= words
        if whole and (not wanted or holds_every_word_together(read[leader], distinct)):
            return 1.0, True, read  # no weight asked: every word in the leader's window
        df, held = self._frequencies(sid, distinct, leader, bool(words))
        covered = 1.0
        if not whole:
            if held is None:
                held = {term for term in distinct if term in words}
            covered = query_coverage(distinct, df, held, n_items)
        together = not wanted or items_together(
            distinct, df, n_items, hits[:1], read, None, lambda _: words
        )
        if not together and len(hits) > 1:  # the leader's words lie apart: read the rest at once
            others = self._holding_enough(sid, distinct, df, n_items, hits[1:])
            rest = self._items(sid, others, on_unknown_class, own) if others else {}
            together = items_together(distinct, df, n_items, others, rest, None)
            read = {**read, **rest}
        return covered, together, read

    def _items(
        self, sid: str, seqs: list[int], on_unknown_class: OnUnknownClass, own: Held | None
    ) -> dict[int, MemoryItem]:
        """Return the items of ``seqs`` that exist, by seq: those ``own`` gives (the caller's own), the rest read from the store in one statement."""
        found = dict(own(seqs)) if own is not None else {}
        rest = [seq for seq in seqs if seq not in found]
        return {**found, **self._engine.read_items(sid, rest, on_unknown_class)} if rest else found

    def _holding_enough(
        self, sid: str, distinct: list[str], df: dict[str, int], n_items: int, hits: list[int]
    ) -> list[int]:
        """Return those of ``hits`` (in order) whose query terms may hold the words together, as the keyword index tells (:meth:`Backend.keyword_held`); all of them where it cannot.

        On a crowded session most of the best hits hold only some of the
        query's words: they are neither read nor tokenized (crowded-steps,
        3,000 items: 0.7 of 99 read on average).
        """
        with self._engine.errors("search", sid):
            held = self._engine.backend.keyword_held(sid, distinct, hits)
        if held is None:
            return hits
        weights, need = proximity_weights(distinct, df, n_items)
        return [seq for seq in hits if may_stand_together(weights, need, held.get(seq, ()))]

    def _frequencies(
        self, sid: str, distinct: list[str], leader: int, read: bool
    ) -> tuple[dict[str, int], set[str] | None]:
        """Return how many items hold each of ``distinct`` (the query's words), from the keyword index, and the words the leader holds where that told them.

        From :meth:`Backend.keyword_frequencies` in one statement where the
        leader was ``read`` and the backend can say (then ``None``: the
        leader's words tell); otherwise from ranking each word's items
        (:meth:`Backend.keyword_top`), which also tells whether the leader
        holds the word.
        """
        backend = self._engine.backend
        with self._engine.errors("search", sid):
            counted = backend.keyword_frequencies(sid, distinct) if read else None
        if counted is not None:  # one statement, not a ranking of each word's items
            return dict(counted), None
        df: dict[str, int] = {}
        held = set()
        with self._engine.errors("search", sid):
            for term in distinct:
                ranked = backend.keyword_top(sid, [term], _LARGEST_K) or []
                df[term] = len(ranked)
                if any(seq == leader for _, seq in ranked):
                    held.add(term)
        return df, held


def _among(scores: dict[int, float], also: Sequence[int] | None) -> dict[int, float]:
    """Return the scores of the keys among ``also`` (every one where ``None``)."""
    if also is None:
        return scores
    allowed = set(also)
    return {key: score for key, score in scores.items() if key in allowed}


def _answers_top_where(backend: Backend) -> bool:
    """Return whether the backend ranks the rows that may pass a filter (overrides :meth:`Backend.keyword_top_where`)."""
    return type(backend).keyword_top_where is not Backend.keyword_top_where


def _answers_among(backend: Backend) -> bool:
    """Return whether the backend scores chosen rows (overrides :meth:`Backend.keyword_among`)."""
    return type(backend).keyword_among is not Backend.keyword_among
