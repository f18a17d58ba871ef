"""The search calls: ``search``, ``recall``, ``index_embeddings`` and the hit they return."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from agents.memory._item import NOTHING, MemoryItem
from agents.memory._text import Tokenizer, check_k, checked_keys, checked_query
from agents.memory.exceptions import EmbedderMismatchError, InvalidQueryError
from agents.memory.search._embed import Embedder, WordLlamaEmbedder
from agents.memory.search._index import SearchIndex

if TYPE_CHECKING:
    from agents.memory.memory import Memory
    from agents.memory.prompt import Window

__all__ = [
    "HYBRID_KEYWORD_WEIGHT",
    "HYBRID_POOL",
    "Hit",
    "SearchMode",
    "Where",
    "index_embeddings",
    "recall",
    "search",
    "search_index",
]

SearchMode = Literal["keyword", "semantic", "hybrid"]
"""How :func:`search` ranks: BM25 over words, cosine over embeddings, or a blend of both."""

Where = Mapping[str, Any] | Callable[[MemoryItem], bool]
"""A filter applied before ranking: ``{field: value}`` (all must hold) or a predicate.

A value matches a field that holds an equal value; a ``range`` matches a
field whose value lies in it (``{"step": range(10, 20)}``). Items without
the field never match.
"""

HYBRID_KEYWORD_WEIGHT = 0.7
"""The share of the keyword score in a hybrid score (the rest is the semantic one).

Both are put on a 0..1 scale first: BM25 divided by the query's ceiling
(the score of an item holding every query word very often, so a match on
common words alone stays low), the cosine min-max scaled over the
candidates. In ``benchmarks/bench_search.py`` this weight was the one
that matched the better of keyword and semantic search on both query sets
(weights 0.3 to 0.8 came within a few queries); reciprocal rank fusion and
a blend scaling BM25 by the best hit fell well behind on paraphrases.
"""

HYBRID_POOL = 100
"""Hybrid mode blends the keyword hits with this many best semantic ones (at least ``10 * k``)."""

_MODES = ("keyword", "semantic", "hybrid")
_default_embedder: Embedder | None = None


@attrs.frozen
class Hit:
    """One search result: the item, its score, and the fields that hold a query word.

    Attributes:
        item: The (live) item found.
        score: Higher is better; BM25 in keyword mode, cosine in semantic
            mode, the blend (0..1) in hybrid mode.
        fields: The fields of the item that hold a query term, in field order
            (may be empty in semantic mode).
    """

    item: MemoryItem
    score: float
    fields: tuple[str, ...]


def search_index(memory: Memory, *, tokenizer: Tokenizer | None = None) -> SearchIndex:
    """Return the search index of ``memory``, creating it on first use.

    Args:
        memory: The memory to search.
        tokenizer: Use this tokenizer; an index made with another one is
            replaced (its items are tokenized again on the next query).

    Returns:
        The index, an observer of ``memory``.
    """
    for observer in memory.observers:
        if isinstance(observer, SearchIndex):
            if tokenizer is None or tokenizer == observer.tokenizer:
                return observer
            memory.remove_observer(observer)
            break
    index = SearchIndex(tokenizer)
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
            (default :data:`HYBRID_KEYWORD_WEIGHT`).

    Returns:
        Up to ``k`` hits.

    Raises:
        InvalidQueryError: for an empty query (or one with no words in
            keyword mode), ``k`` < 1, an unknown mode, or a bad filter or keys.
        EmbeddingError: if the embedder returns the wrong shape or NaN.
        EmbedderMismatchError: if the memory was embedded with another model.
        MissingDependencyError: naming the extra when numpy or wordllama is missing.
    """
    text = checked_query(query)
    check_k(k)
    wanted = checked_keys(keys)
    predicate = _predicate(where)
    if mode not in _MODES:
        msg = f"search() takes mode='keyword', 'semantic' or 'hybrid', got {mode!r}."
        raise InvalidQueryError(msg)
    weight = HYBRID_KEYWORD_WEIGHT if hybrid_weight is None else hybrid_weight
    if type(weight) not in (int, float) or not 0.0 <= weight <= 1.0:
        msg = f"hybrid_weight must be a number from 0 to 1, got {hybrid_weight!r}."
        raise InvalidQueryError(msg)
    index = search_index(memory)
    terms = index.tokenizer(text)
    if mode == "keyword":
        if not terms:
            msg = f"Query {query!r} holds no word to search for; keyword search matches letters and digits."
            raise InvalidQueryError(msg)
        scores, rest = index.keyword_scores(terms, wanted, skip_common=True)
        top = index.top(scores, k, predicate)
        if len(top) < k or (rest and top[-1][2] <= rest):
            # Items holding only common words could still make the top k: score them all.
            scores, _ = index.keyword_scores(terms, wanted)
    elif mode == "semantic":
        model = _embedder_for(index, embedder)
        limit = k
        while True:
            # Only the best cosines are read; a filter that drops some asks for more.
            scores = index.semantic_scores(model, text, wanted, limit=limit)
            if predicate is None or len(scores) < limit:
                break
            if len(index.top(scores, k, predicate)) == k:
                break
            limit *= 4
        index.embedder = model  # remembered once it worked
    else:
        model = _embedder_for(index, embedder)
        # Items holding only common words add under 1e-5 to a blended score; they are not read.
        keyword = index.keyword_scores(terms, wanted, skip_common=True)[0] if terms else {}
        ceiling = index.keyword_ceiling(terms, wanted) if terms else 1.0
        semantic = index.semantic_scores(
            model, text, wanted, limit=max(10 * k, HYBRID_POOL), among=keyword
        )
        scores = _blend(keyword, ceiling, semantic, weight)
        index.embedder = model
    return [
        Hit(item, score, index.matched_fields(key, terms, wanted))
        for key, item, score in index.top(scores, k, predicate)
    ]


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
    report = _progress_bar if progress is True else (progress or None)
    vectors = index.embed(model, wanted, batch_size=batch_size, progress=report)
    index.embedder = model
    return len(vectors.row_of)


# -- internals -----------------------------------------------------------------------


def _predicate(where: Where | None) -> Callable[[MemoryItem], bool] | None:
    if where is None or callable(where):
        return where
    if not isinstance(where, Mapping):
        msg = f"where must be a mapping of field to value or a function of the item, got {where!r}."
        raise InvalidQueryError(msg)
    tests = list(where.items())
    for field, _ in tests:
        if type(field) is not str:
            msg = f"where takes field names (strings) as keys, got {field!r}."
            raise InvalidQueryError(msg)

    def matches(item: MemoryItem) -> bool:
        for field, wanted in tests:
            value = item.get_value(field, NOTHING)
            if value is NOTHING:
                return False
            if isinstance(wanted, range):
                if not (type(value) is int and value in wanted):
                    return False
            elif value != wanted:
                return False
        return True

    return matches


checked_where = _predicate
"""Return the predicate of a :data:`Where` filter (``None`` for no filter), else raise :class:`InvalidQueryError`.

For the stores room: ``StoredMemory.search`` filters the store's ranking with it.
"""


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


def _blend(
    keyword: dict[int, float], ceiling: float, semantic: dict[int, float], w: float
) -> dict[int, float]:
    """Mix scaled BM25 and scaled cosine over the keyword hits and the best semantic ones."""
    candidates = dict.fromkeys([*keyword, *semantic])
    if not candidates:
        return {}
    cosines = [semantic.get(key, 0.0) for key in candidates]
    low, high = min(cosines), max(cosines)
    spread = (high - low) or 1.0
    return {
        key: w * keyword.get(key, 0.0) / ceiling
        + (1.0 - w) * (semantic.get(key, low) - low) / spread
        for key in candidates
    }


def _progress_bar(done: int, total: int) -> None:
    width = 30
    filled = width * done // total if total else width
    sys.stderr.write(f"\rEmbedding items [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()
