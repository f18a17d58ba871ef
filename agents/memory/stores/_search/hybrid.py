"""The hybrid ranking of a store with a keyword index, walked only as deep as the blend needs.

Where every item holds a common query word, blending every keyword hit
reads and scores the whole session at each query (9-11 s a query at 100,000
items on SQLite). :func:`bounded_blend` ranks the keyword side ever deeper
instead, and stops once no item past the depth reached can blend above the
``k + SHARED_TOP``-th best found (the ``k`` best, and as many again as the
blend may rank first, :func:`~agents.memory._vectors.kept_first`, lifted
from the best score of the others): an item outside the best keyword
``depth`` and outside the semantic pool scores at most the blend of the ``depth``-th keyword score
and the pool's last cosine. The candidates it returns hold every item of
the ``k`` best, with the floats :func:`~agents.memory._vectors.blend` gives
them over all the hits.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from agents.memory._vectors import SHARED_TOP, blend, blend_ceiling
from agents.memory.stores._search.vector_cache import Vectors

__all__ = ["bounded_blend", "held_pool"]

DEEPER: Final = 8
"""How many times deeper each keyword ranking is than the one before."""
_MARGIN: Final = 1.0 + 1e-9
"""How far a bound summed in another order may be from an item's blended score, as a ratio (float rounding)."""


def bounded_blend(
    k: int,
    pool: int,
    keyword_top: Callable[[int], Sequence[tuple[float, int]]],
    keyword_among: Callable[[Sequence[int]], dict[int, float] | None],
    cosines: Callable[[Iterable[int]], dict[int, float]],
    scale: float,
    weight: float,
    coverage: float,
    together: bool = True,
    also: Sequence[int] = (),
) -> dict[int, float] | None:
    """Return the blended scores of candidates that hold the ``k`` best of a hybrid ranking, or ``None``.

    Args:
        k: How many hits the search returns.
        pool: How many best cosines the semantic side holds (``max(10 * k, HYBRID_POOL)``).
        keyword_top: The ``depth`` best ``(bm25, key)`` by BM25, best first (ties by key).
        keyword_among: BM25 by key of the keys among some that hold a query
            term (the scores ``keyword_top`` gives them), or ``None`` when the
            backend cannot say (the caller then blends every hit).
        cosines: The best ``pool`` cosines (with ties) and those of the keys given, by key.
        scale: The corpus's keyword scale.
        weight: The keyword share of a hybrid score.
        coverage: The share of the query's IDF weight the keyword leader holds.
        together: Whether one of the query's best keyword hits holds its
            words together (``blend``'s ``together``).
        also: Keys to score as well where they are candidates of the full
            blend (keyword hits, or in the semantic pool), whatever their
            rank: the rows a filter may pass.

    Returns:
        The blended score of each candidate: every keyword hit and every
        item of the semantic pool whose score can reach the ``k``-th best,
        and the candidates among ``also``, scored as :func:`blend` scores
        them over all the hits; ``None`` where ``keyword_among`` cannot answer.
    """

    def blended(keyword: dict[int, float], semantic: dict[int, float]) -> dict[int, float]:
        return blend(keyword, scale, semantic, weight, coverage, together)

    depth = pool
    while True:
        top = keyword_top(depth)
        keyword = {key: score for score, key in top}
        semantic = cosines(list(keyword))
        others = [key for key in semantic if key not in keyword]
        extra = keyword_among(others) if others else {}
        if extra is None:
            return None
        keyword.update(extra)
        scores = blended(keyword, semantic)
        if len(top) < depth:
            return scores  # every keyword hit is in: the candidates of the full blend
        # Past the k best and the items the blend may lift (kept_first keeps at most
        # SHARED_TOP, each lifted from the best score of the others): an item left out
        # then changes neither the k best nor the score they are lifted from.
        if len(scores) >= k + SHARED_TOP:
            cut = heapq.nlargest(k + SHARED_TOP, scores.values())[-1]
            bound = _bound(top[-1][0], keyword, semantic, pool, scale, weight, coverage, together)
            if bound * _MARGIN < cut:
                if not also:
                    return scores
                return _with_also(also, keyword_among, cosines, keyword, semantic, scores, blended)
        depth *= DEEPER


def _with_also(
    also: Sequence[int],
    keyword_among: Callable[[Sequence[int]], dict[int, float] | None],
    cosines: Callable[[Iterable[int]], dict[int, float]],
    keyword: dict[int, float],
    semantic: dict[int, float],
    scores: dict[int, float],
    blended: Callable[[dict[int, float], dict[int, float]], dict[int, float]],
) -> dict[int, float] | None:
    """Return the blend of the walk's candidates and the keyword hits among ``also``, or ``None`` where the backend cannot score them.

    Every statistic :func:`blend` takes from its candidates is one of the
    top of a side: the semantic background (the ``SEMANTIC_REFERENCE``-th
    cosine of the pool), the keyword background (the ``KEYWORD_BACKGROUND``-th
    BM25), whether two hits or more hold a query word, the items
    :func:`~agents.memory._vectors.kept_first` keeps (each side's best
    ``SHARED_TOP``) and the best score of the others they are lifted from
    (the walk stopped where no item left out could reach it). The walk
    holds each of those as the full blend finds them, so adding the
    other rows of ``also`` that are candidates (keyword hits; the pool's
    are in already) gives each of them the float of the full blend.
    """
    wanted = [key for key in also if key not in keyword]
    extra = keyword_among(wanted) if wanted else {}
    if extra is None:
        return None
    if not extra:
        return scores
    keyword = {**keyword, **extra}
    semantic = {**semantic, **cosines(list(extra))}
    return blended(keyword, semantic)


def held_pool(
    pool: int,
    best: Callable[[Sequence[int]], tuple[dict[int, float], Vectors | None]],
    query: Any,
) -> Callable[[Iterable[int]], dict[int, float]]:
    """Return a hybrid query's ``cosines`` (the pool's best and those of the keys given) that ranks the pool once.

    :func:`bounded_blend` asks for the pool at each depth of its walk and
    once more for the rows a filter may pass; ranking the session's
    vectors again at each call cost a rare filter's hybrid query a second
    semantic ranking. The first call ranks; the next ones take its pool
    and score only the keys given that lie outside it, from the kept
    table the first scored from (``Vectors.scores_of``: the same floats).
    Where it scored from none (the backend's own cosines, or vectors read
    page by page), each call ranks again.

    Args:
        pool: How many best cosines the pool holds (with ties).
        best: The best ``pool`` cosines (with ties) and those of the keys
            given, with the kept table they were scored from, if any.
        query: The unit query vector.
    """
    held: list[tuple[dict[int, float], Vectors | None]] = []

    def cosines(among: Iterable[int]) -> dict[int, float]:
        wanted = list(among)
        table = held[0][1] if held else None
        if table is not None:
            ranked = held[0][0]
            missing = [key for key in wanted if key not in ranked]
            return {**ranked, **table.scores_of(query, missing)} if missing else dict(ranked)
        found, table = best(wanted)
        if not held:
            # The pool: the session's best `pool` are the best of those found.
            cut = heapq.nlargest(pool, found.values())[-1] if len(found) >= pool else None
            ranked = found if cut is None else {key: c for key, c in found.items() if c >= cut}
            held.append((ranked, table))
        return found

    return cosines


def _bound(
    last: float,
    keyword: dict[int, float],
    semantic: dict[int, float],
    pool: int,
    scale: float,
    weight: float,
    coverage: float,
    together: bool,
) -> float:
    """Return the most an item outside the keyword ranking so far and outside the semantic pool can blend to.

    Its BM25 is at most ``last`` (the ranking's last score) and its cosine at
    most the ``pool``-th best (or none, 0, where the pool holds every item
    with a vector): :func:`blend_ceiling` of the two, over the same
    candidates (``keyword`` holds the ranking's best hits).
    """
    cosine = 0.0
    if len(semantic) >= pool:
        cosine = heapq.nlargest(pool, semantic.values())[-1]
    return blend_ceiling(last, cosine, keyword, scale, semantic, weight, coverage, together)
