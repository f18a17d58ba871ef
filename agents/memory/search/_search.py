"""The search calls: ``search``, ``recall``, ``index_embeddings`` and the hit they return."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from agents.memory._filter import Filter, Where
from agents.memory._hybrid import Pruning, bounded_blend
from agents.memory._item import MemoryItem
from agents.memory._text import PROXIMITY_TOP, Tokenizer, check_k, checked_keys, checked_query
from agents.memory._vectors import (
    HYBRID_KEYWORD_WEIGHT,
    HYBRID_POOL,
    EmbedParts,
    SearchMode,
    blend,
    checked_vectors,
    checked_weight,
    numpy,
    progress_bar,
    ranked_top,
    stands_out,
)
from agents.memory.exceptions import EmbedderMismatchError, InvalidArgumentError, InvalidQueryError
from agents.memory.search._embed import Embedder, WordLlamaEmbedder
from agents.memory.search._index import Predicate, SearchIndex

if TYPE_CHECKING:
    from agents.memory.memory import Memory
    from agents.memory.prompt import Window

_Cosines = Callable[[int, Sequence[int]], dict[int, float]]
"""``cosines(pool, keys)``: a hybrid query's best ``pool`` cosines (with ties) and those of ``keys``, by item key."""
_Bounds = Callable[[Sequence[int]], dict[int, float] | None]
"""``bounds(keys)``: an upper bound of the cosine of each of ``keys`` that holds a vector, by item key, or ``None``."""

__all__ = [
    "HYBRID_KEYWORD_WEIGHT",
    "HYBRID_POOL",
    "EmbedParts",
    "Filter",
    "Hit",
    "SearchMode",
    "Where",
    "embedder_for",
    "index_embeddings",
    "recall",
    "search",
    "search_index",
]


_MODES = ("keyword", "semantic", "hybrid")
_default_embedder: Embedder | None = None


@attrs.frozen
class Hit:
    """One search result: the item, its score, and the fields that hold a query word.

    Attributes:
        item: The (live) item found.
        score: Higher is better; BM25 in keyword mode, cosine in semantic
            mode (of the item's best part), the blend (0..1) in hybrid mode.
        fields: The fields of the item that hold a query term, in field order
            (may be empty in semantic mode).
    """

    item: MemoryItem
    score: float
    fields: tuple[str, ...]


def search_index(
    memory: Memory, *, tokenizer: Tokenizer | None = None, parts: EmbedParts | None = None
) -> SearchIndex:
    """Return the search index of ``memory``, creating it on first use.

    Args:
        memory: The memory to search.
        tokenizer: Use this tokenizer; an index made with another one is
            replaced (its items are tokenized again on the next query).
        parts: Cut items this way for semantic search (see :class:`EmbedParts`);
            vectors cut another way are forgotten (embedded again on the next
            semantic query).

    Returns:
        The index, an observer of ``memory``.

    Raises:
        InvalidArgumentError: if ``parts`` is not an :class:`EmbedParts`.
    """
    for observer in memory.observers:
        if isinstance(observer, SearchIndex):
            if tokenizer is None or tokenizer == observer.tokenizer:
                if parts is not None:
                    observer.parts = parts
                return observer
            memory.remove_observer(observer)
            if parts is None:
                parts = observer.parts
            break
    if parts is not None and not isinstance(parts, EmbedParts):
        msg = f"search_index(parts=...) takes an EmbedParts, got {parts!r}."
        raise InvalidArgumentError(msg)
    index = SearchIndex(tokenizer, parts=parts)
    memory.add_observer(index)
    return index


def search(
    memory: Memory,
    query: str,
    k: int = 5,
    *,
    keys: Iterable[str] | None = None,
    mode: SearchMode = "keyword",
    where: Where | None = None,
    embedder: Embedder | None = None,
    hybrid_weight: float | None = None,
    cosines: _Cosines | None = None,
    bounds: _Bounds | None = None,
) -> list[Hit]:
    """Return the ``k`` items of ``memory`` that best match ``query``, best first.

    Equal scores keep session order. See ``Memory.search``, which calls this.

    Args:
        memory: The memory to search.
        query: The text to look for.
        k: How many hits at most.
        keys: Search only these fields (default: every string field, nested strings included).
        mode: ``"keyword"`` (BM25), ``"semantic"`` (cosine of embeddings) or ``"hybrid"``.
        where: Keep only items that pass this filter (see :data:`Where`).
        embedder: The model for semantic and hybrid modes (default: the one
            the memory was embedded with, else :class:`WordLlamaEmbedder`).
        hybrid_weight: The keyword share of a hybrid score, 0 to 1
            (default :data:`HYBRID_KEYWORD_WEIGHT`), times ``q**8``, ``q`` the
            share of the query's IDF weight the best keyword hit holds. 1
            ranks by keyword alone (BM25 on the blend's 0..1 scale), 0 by
            the semantic side alone.
        cosines: In hybrid mode, ``cosines(pool, keys)``: the best ``pool``
            cosines with the query (with ties: every item scoring the
            ``pool``-th best) and those of ``keys``, by item key
            (``SearchIndex.keys_of``), computed elsewhere from the same
            vectors (a store's, ``Store.cosines``): the memory's index then
            embeds nothing and holds no vector. ``None``: the index's.
        bounds: With ``cosines``, ``bounds(keys)``: an upper bound of the
            cosine of each of ``keys`` that holds a vector (``None`` where
            it cannot bound them), from the same source
            (``Store.cosine_ceilings``): a filter many items may pass then
            has ``cosines`` asked for the keyword hits that can still rank
            only, not every one.

    Returns:
        Up to ``k`` hits.

    Raises:
        InvalidQueryError: for an empty query (or one with no words in
            keyword mode), ``k`` outside 1 to 2**63 - 1, an unknown mode, or a bad filter or keys.
        EmbeddingError: if the embedder returns the wrong shape or NaN.
        EmbedderMismatchError: if the memory was embedded with another model.
        MissingDependencyError: naming the extra when numpy or wordllama is missing.
    """
    text = checked_query(query)
    check_k(k)
    wanted = checked_keys(keys)
    predicate = Filter.of(where)
    if mode not in _MODES:
        msg = f"search() takes mode='keyword', 'semantic' or 'hybrid', got {mode!r}."
        raise InvalidQueryError(msg)
    weight = checked_weight(hybrid_weight)
    index = search_index(memory)
    terms = index.tokenizer(text)
    if mode == "keyword":
        if not terms:
            msg = f"Query {query!r} holds no word to search for; keyword search matches letters and digits."
            raise InvalidQueryError(msg)
        top = index.keyword_top(terms, wanted, k, predicate)
    elif mode == "semantic":
        model = _embedder_for(index, embedder)
        few = None if predicate is None else index.passing(predicate)
        if few is not None:  # few items pass: score only those
            top = index.top(index.semantic_scores(model, text, wanted, only=few), k, predicate)
        else:
            top = _semantic_top(index, model, text, wanted, k, predicate)
        index.embedder = model  # remembered once it worked
    else:
        model = _embedder_for(index, embedder)
        blended = _hybrid_scores(
            index, model, text, terms, wanted, k, weight, predicate, cosines, bounds
        )
        top = index.top(blended, k, predicate)
        index.embedder = model
    return [Hit(item, score, index.matched_fields(key, terms, wanted)) for key, item, score in top]


def _hybrid_scores(
    index: SearchIndex,
    model: Embedder,
    text: str,
    terms: Sequence[str],
    wanted: tuple[str, ...] | None,
    k: int,
    weight: float,
    predicate: Predicate | None,
    given: _Cosines | None = None,
    bounds: _Bounds | None = None,
) -> dict[int, float]:
    """Return a hybrid query's blended scores by key: candidates that hold its ``k`` best (among the few ``predicate`` may pass).

    The keyword side is walked only as deep as the blend needs
    (:func:`~agents.memory._hybrid.bounded_blend`, as the stores walk it),
    not every item holding a query word: the candidates it returns carry
    the floats of blending every hit, and hold the ``k`` best of that
    blend. A filter that many items may pass keeps its ``k`` best anywhere
    in the ranking: every hit is blended then.
    """
    pool = max(10 * k, HYBRID_POOL)
    # Items holding only common words add under 1e-5 to a blended score; they are not read.
    keyword = index.keyword_scores(terms, wanted, skip_common=True)[0] if terms else {}
    if given is None:
        vector = checked_vectors(model, [text])[0]  # embedded once, for each depth of the walk

    def cosines(among: Iterable[int]) -> dict[int, float]:
        if given is not None:
            return given(pool, list(among))
        return index.semantic_scores(model, text, wanted, limit=pool, among=among, vector=vector)

    ranked = _Ranking(keyword)
    first = ranked(max(pool, PROXIMITY_TOP))
    # The keyword side weighs by how much of the query its best hit holds (taken before `where`).
    covered = index.coverage(terms, wanted, first[0][1]) if first else 1.0
    # Its words scattered over every hit, each side counts by how it stands out.
    best = {key: score for score, key in first[:PROXIMITY_TOP]}
    together = not stands_out(keyword, weight) or index.together(terms, wanted, best)
    scale = index.keyword_scale()
    few = None if predicate is None else index.passing(predicate)

    def among(keys: Sequence[int]) -> dict[int, float]:
        return {key: keyword[key] for key in keys if key in keyword}

    if predicate is not None and few is None:
        if bounds is None:
            return blend(keyword, scale, cosines(keyword), weight, covered, together)
        # Each keyword hit's cosine read from a store: only those that can still rank.
        args = (scale, weight, covered, together)
        return _pruned_passing(
            index, predicate, k, pool, ranked, among, cosines, keyword, args, bounds
        )

    also = () if few is None else sorted(few)
    scores = bounded_blend(k, pool, ranked, among, cosines, scale, weight, covered, together, also)
    assert scores is not None  # `among` always answers: the walk never gives up
    if few is not None:  # few items pass: rank only those
        scores = {key: score for key, score in scores.items() if key in few}
    return scores


def _pruned_passing(
    index: SearchIndex,
    predicate: Predicate,
    k: int,
    pool: int,
    ranked: Callable[[int], Sequence[tuple[float, int]]],
    among: Callable[[Sequence[int]], dict[int, float]],
    cosines: Callable[[Iterable[int]], dict[int, float]],
    keyword: dict[int, float],
    args: tuple[float, float, float, bool],
    bounds: _Bounds,
) -> dict[int, float]:
    """Return blended scores holding the ``k`` best hits that pass ``predicate`` (a filter many items may pass), reading the cosines of only the keyword hits that can rank among them.

    Blending every keyword hit read each one's cosine from the store (1.6-1.9 s
    at 50,000 steps, against 0.12-0.21 s in RAM). The walk
    (:func:`~agents.memory._hybrid.bounded_blend`) blends the keyword hits
    beside its own candidates, each scored only while the ceiling of its
    blend (its BM25 and ``bounds``, an upper bound of its cosine) can reach
    the ``k``-th best score that passes so far
    (:class:`~agents.memory._hybrid.Pruning`; the filter asked of the best
    scored items only, as :meth:`SearchIndex.top` asks it: asked of every
    keyword hit, it took half the query).
    Items outside the keyword hits are candidates only in the semantic pool,
    which the walk scores. The filter is asked of the keyword hits about to
    be scored before their cosines are read (``Pruning.passing``): one that
    no keyword hit passes gives no ``k``-th passing score to prune by, and
    every keyword hit's cosine was read (1.6-1.9 s at 50,000 steps). Each
    item is asked once a query (its verdict kept for the floor's ranking).
    """
    verdicts: dict[int, bool] = {}  # by id(item): the items are the index's, held meanwhile

    def kept(item: MemoryItem) -> bool:
        verdict = verdicts.get(id(item))
        if verdict is None:
            verdict = verdicts[id(item)] = bool(predicate(item))
        return verdict

    def floor(scores: dict[int, float]) -> tuple[float, int] | None:
        hits = index.top(scores, k, kept)  # the filter asked of the best only
        return (hits[-1][2], hits[-1][0]) if len(hits) == k else None

    def passing(keys: Sequence[int]) -> list[int]:
        return [key for key, item in zip(keys, index.items(keys), strict=True) if kept(item)]

    pruning = Pruning(bounds, floor, passing)
    also = sorted(keyword)
    scores = bounded_blend(k, pool, ranked, among, cosines, *args, also=also, pruning=pruning)
    assert scores is not None  # `among` always answers: the walk never gives up
    return scores


@attrs.define
class _Ranking:
    """The ``depth`` best ``(bm25, key)`` of a query's keyword scores, best first, ties by key: the walk's keyword side.

    Ranked in numpy (a hybrid query needs it for its cosines) from the
    scores laid out as arrays once; a depth within one ranked before is a
    slice of it (the order is total: score, then key).
    """

    scores: dict[int, float]
    _arrays: tuple[Any, Any] | None = None
    _ranked: list[tuple[float, int]] = attrs.Factory(list)
    _depth: int = 0

    def __call__(self, depth: int) -> list[tuple[float, int]]:
        """Return the ``depth`` best ``(bm25, key)``, best first (fewer where fewer items hold a query word)."""
        if depth > self._depth and len(self._ranked) == self._depth and self.scores:
            if self._arrays is None:
                np = numpy()
                size = len(self.scores)
                keys = np.fromiter(self.scores, dtype=np.int64, count=size)
                values = np.fromiter(self.scores.values(), dtype=np.float64, count=size)
                self._arrays = (keys, values)
            ranked = ranked_top(*self._arrays, depth)
            self._ranked = [(score, key) for key, score in ranked]
            self._depth = depth
        return self._ranked[:depth]


def recall(
    memory: Memory,
    query: str,
    k: int = 3,
    *,
    recent: Window | None = None,
    keys: Iterable[str] | None = None,
    mode: SearchMode = "keyword",
    where: Where | None = None,
    embedder: Embedder | None = None,
) -> list[MemoryItem]:
    """Return the top ``k`` hits for ``query`` merged with the most recent items, in session order.

    Each item appears once. The result is a list of items, ready for
    ``project(result, keys)`` or a renderer. See ``Memory.recall``.

    Args:
        memory: The memory to search.
        query: The text to look for.
        k: How many search hits at most.
        recent: The window of recent items to add (see ``select_window``); ``None`` adds none.
        keys: Search only these fields.
        mode: ``"keyword"``, ``"semantic"`` or ``"hybrid"``.
        where: Keep only hits that pass this filter (the window is not filtered).
        embedder: The model for semantic and hybrid modes.

    Raises:
        InvalidQueryError: as :func:`search`.
        BudgetExceededError: if the window's pinned items alone break its bounds.
    """
    hits = search(memory, query, k, keys=keys, mode=mode, where=where, embedder=embedder)
    chosen = [hit.item for hit in hits]
    if recent is not None:
        from agents.memory.prompt import select_window

        chosen.extend(select_window(memory, recent).items)
    index = search_index(memory)
    order = index.keys_of(chosen)
    unique = {order[id(item)]: item for item in chosen if id(item) in order}
    return [unique[key] for key in sorted(unique)]


def index_embeddings(
    memory: Memory,
    embedder: Embedder | None = None,
    *,
    keys: Iterable[str] | None = None,
    batch_size: int = 256,
    progress: bool | Callable[[int, int], object] = False,
) -> int:
    """Embed every item that has no vector yet, in batches; return how many items hold a vector.

    Semantic search embeds missing items on its own; calling this first
    moves the cost of a large session out of the first query and can show
    progress. With an embedder of another model than the stored vectors,
    the vectors are dropped and every item is embedded again.

    Args:
        memory: The memory to embed.
        embedder: The model (default: the memory's, else :class:`WordLlamaEmbedder`).
        keys: Embed the text of these fields only (as ``search(keys=...)`` will ask).
        batch_size: Texts per embedder call.
        progress: ``True`` draws a progress bar on stderr; a callable is
            called as ``progress(done, total)`` after each batch.

    Raises:
        InvalidQueryError: if ``batch_size`` < 1 or keys are not strings.
        EmbeddingError: if the embedder returns the wrong shape or NaN
            (batches before the bad one keep their vectors).
        MissingDependencyError: naming the extra when numpy or wordllama is missing.
    """
    if type(batch_size) is not int or batch_size < 1:
        msg = f"index_embeddings() takes batch_size >= 1, got {batch_size!r}."
        raise InvalidQueryError(msg)
    wanted = checked_keys(keys)
    index = search_index(memory)
    if embedder is not None and index.vector_model() not in (None, embedder.name):
        index.drop_vectors()
    model = _embedder_for(index, embedder)
    report = progress_bar if progress is True else (progress or None)
    vectors = index.embed(model, wanted, batch_size=batch_size, progress=report)
    index.embedder = model
    return len(vectors.rows_of)


# -- internals -----------------------------------------------------------------------


def _semantic_top(
    index: SearchIndex,
    model: Embedder,
    text: str,
    wanted: tuple[str, ...] | None,
    k: int,
    predicate: Filter | None,
) -> list[tuple[int, MemoryItem, float]]:
    """Return the best ``k`` by cosine that pass ``predicate``, asking for longer rankings while too few pass."""
    limit = k
    while True:
        # Only the best cosines are read; a filter that drops some asks for more.
        scores = index.semantic_scores(model, text, wanted, limit=limit)
        top = index.top(scores, k, predicate)
        if predicate is None or len(scores) < limit or len(top) == k:
            return top
        limit *= 4


def embedder_for(memory: Memory, embedder: Embedder | None = None) -> Embedder:
    """Return the embedder a semantic search of ``memory`` uses.

    That is ``embedder`` when given, else the one the memory was last
    searched or embedded with, else the shared :class:`WordLlamaEmbedder`
    (loaded once per process).

    Raises:
        EmbedderMismatchError: if the memory holds vectors of another model.
        MissingDependencyError: naming the extra when wordllama is needed and missing.
    """
    return _embedder_for(search_index(memory), embedder)


def _embedder_for(index: SearchIndex, embedder: Embedder | None) -> Embedder:
    global _default_embedder
    if embedder is None:
        embedder = index.embedder
    if embedder is None:
        if _default_embedder is None:
            _default_embedder = WordLlamaEmbedder()
        embedder = _default_embedder
    stored = index.vector_model()
    if stored is not None and stored != embedder.name:
        msg = (
            f"The memory's vectors were made by embedding model {stored!r}, and the query uses "
            f"{embedder.name!r}; vectors of two models cannot be compared. Query with the same "
            "embedder, or embed again with memory.index_embeddings(new_embedder)."
        )
        raise EmbedderMismatchError(msg)
    return embedder
