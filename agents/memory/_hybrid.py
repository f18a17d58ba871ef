"""The hybrid ranking walked only as deep as the blend needs: one routine for the in-RAM index and the stores.

Where every item holds a common query word, blending every keyword hit
scores the whole session at each query (9-11 s a query at 100,000 items on
SQLite; 70 ms of the 117 ms a query took in RAM). :func:`bounded_blend`
ranks the keyword side ever deeper instead, and stops once no item past the
depth reached can blend above the ``k + SHARED_TOP``-th best found (the
``k`` best, and as many again as the blend may rank first,
:func:`~agents.memory._vectors.kept_first`, lifted from the best score of
the others): an item outside the best keyword ``depth`` and outside the
semantic pool scores at most the blend of the ``depth``-th keyword score
and the pool's last cosine (:func:`~agents.memory._vectors.blend_ceiling`).
The candidates it returns hold every item of the ``k`` best, with the
floats :func:`~agents.memory._vectors.blend` gives them over all the hits.
The walk is plain Python: the caller ranks the keyword side (a store's
index, or the in-RAM scores in numpy) and scores the cosines.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import attrs

from agents.memory._vectors import SHARED_TOP, blend, blend_ceiling, blend_ceilings, blend_zeros

__all__ = ["Pruning", "bounded_blend"]

DEEPER: Final = 8
"""How many times deeper each keyword ranking is than the one before."""
_MARGIN: Final = 1.0 + 1e-9
"""How far a bound summed in another order may be from an item's blended score, as a ratio (float rounding)."""
_SETTLE_FIRST: Final = 16
"""How many of the rows asked besides the walk get their exact cosines first (then four times as many each round), best bound first."""

_ASK_AFTER: Final = 4
"""Past this many times :data:`_SETTLE_FIRST` rows besides the walk, the BM25 of the best bounded few is asked first (a floor from them leaves out the rest that cannot reach it)."""


@attrs.frozen
class Pruning:
    """What lets :func:`bounded_blend` score exactly only those of the rows asked besides (``also``) that can still rank.

    A filter that many rows pass asks for thousands of keyword hits past
    the walk, and each one's exact cosine was read (on a coded table, its
    stored vectors: most of the query's time). Each of them blends to at
    most :func:`~agents.memory._vectors.blend_ceiling` of its BM25 (at
    most the walk's last) and an upper bound of its cosine; one whose
    ceiling is below the ``k``-th best score that passes the filter so far
    cannot be one of the ``k`` best that pass, and is left out unscored.

    Attributes:
        ceilings: An upper bound of the cosine of each of some keys that
            holds a vector (a key left out holds none: cosine 0), or
            ``None`` where it cannot bound them (every one is then scored).
        floor: The ``k``-th best hit that passes the filter among some
            blended scores (by key), as ``(score, key)``, or ``None`` where
            fewer than ``k`` pass.
        passing: The keys among some that pass the filter, asked of the
            rows about to be scored before their cosines are read (a row
            that fails cannot rank, and its blend changes no other's), or
            ``None`` where the filter is asked of the best scored only
            (``floor``). Without it, a filter that no keyword hit passes
            has no ``k``-th passing score to prune against, and every
            keyword hit's cosine was read.
    """

    ceilings: Callable[[Sequence[int]], dict[int, float] | None]
    floor: Callable[[dict[int, float]], tuple[float, int] | None]
    passing: Callable[[Sequence[int]], list[int]] | None = None


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
    pruning: Pruning | None = None,
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
        pruning: Where given, the candidates among ``also`` past the walk
            that cannot reach the ``k``-th best score passing the filter
            are left out unscored (:class:`Pruning`).

    Returns:
        The blended score of each candidate: every keyword hit and every
        item of the semantic pool whose score can reach the ``k``-th best,
        and the candidates among ``also`` (with ``pruning``, those that can
        rank among the ``k`` best passing), scored as :func:`blend` scores
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
                if pruning is not None:
                    args = (scale, semantic, weight, coverage, together)
                    bounding = (blend_ceilings(keyword, *args), blend_zeros(keyword, *args))
                    walked = _Walked(keyword, semantic, scores, top[-1][0], k)
                    return _pruned_also(
                        also, keyword_among, cosines, walked, blended, bounding, pruning
                    )
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


@attrs.frozen
class _Walked:
    """Where the walk stopped: its keyword hits and cosines, their blend, its ranking's last BM25, and ``k``."""

    keyword: dict[int, float]
    semantic: dict[int, float]
    scores: dict[int, float]
    last: float
    k: int


def _pruned_also(
    also: Sequence[int],
    keyword_among: Callable[[Sequence[int]], dict[int, float] | None],
    cosines: Callable[[Iterable[int]], dict[int, float]],
    walked: _Walked,
    blended: Callable[[dict[int, float], dict[int, float]], dict[int, float]],
    bounding: tuple[Callable[[float, float], float], Callable[[float, float], bool]],
    pruning: Pruning,
) -> dict[int, float] | None:
    """Return :func:`_with_also`'s blend less the rows of ``also`` that cannot rank among the ``k`` best that pass, whose cosines are never read.

    The rows outside the walk's keyword hits and pool each blend to at
    most ``ceiling`` of their BM25 (at most the walk's ``last``, before
    asking the backend for it) and their cosine's ceiling (``bounding``:
    :func:`~agents.memory._vectors.blend_ceilings`, and
    :func:`~agents.memory._vectors.blend_zeros`, which tells the rows that
    blend to exactly 0 at any BM25 up to ``last``: where the floor is 0,
    only those before it by key can rank, and the others' BM25 is never
    asked; a filter 5% of 30,000 steps pass asked it of every passing
    row, where a fifth of them came before the floor); they are not
    candidates the full blend lifts, nor do they raise the best score of
    the others (:func:`_with_also`), so each one scored gets the float of
    the full blend, whichever others are scored beside it. They are
    scored best ceiling first, a few, then four times as many each round,
    the ``k``-th best passing score (``pruning.floor``) taken again after
    each: a row whose ceiling is below it (by more than float rounding)
    cannot pass into the ``k`` best, and neither can any row after it.
    With ``pruning.passing``, the rows of each round that fail the filter
    are left out before their cosines are read. Where more than
    :data:`_ASK_AFTER` times a first round's rows would be asked for their
    BM25, the first round's (best bounded at the walk's ``last``) are asked
    and scored alone first, and the floor they give leaves out the rest
    that cannot reach it before theirs is asked: a filter 1% of 30,000
    steps pass, with fewer than ``k`` of them in the walk (no floor yet),
    asked the BM25 of about 310 rows, now of 16.
    """
    keyword, semantic = walked.keyword, walked.semantic
    wanted = [key for key in also if key not in keyword and key not in semantic]
    if not wanted:
        return walked.scores
    upper = pruning.ceilings(wanted)
    if upper is None:  # no bounds: every row that passes is scored
        if pruning.passing is not None:
            wanted = pruning.passing(wanted)
        return _with_also(wanted, keyword_among, cosines, keyword, semantic, walked.scores, blended)
    ceiling, zero = bounding
    last = walked.last

    def reaching(keys: Sequence[int], floor: tuple[float, int]) -> list[int]:
        # Before its BM25 is known: bounded by the walk's last. Its ceiling of 0 is not
        # exact there (rounding), but a row that blends to 0 at any BM25 up to it is.
        return [
            key
            for key in keys
            if (
                _reaches(0.0, key, floor)
                if zero(last, cosine := upper.get(key, 0.0))
                else _reaches(ceiling(last, cosine), key, floor, exact=False)
            )
        ]

    floor = pruning.floor(walked.scores)
    if floor is not None:
        wanted = reaching(wanted, floor)
    state = _Scored(dict(keyword), dict(semantic), walked.scores, floor)
    first = max(_SETTLE_FIRST, 2 * walked.k)
    if len(wanted) > _ASK_AFTER * first:
        # Many rows: the BM25 of the best bounded first, scored; the floor they give leaves
        # out the rest that cannot reach it before their BM25 is asked.
        before = {
            key: 0.0 if zero(last, c := upper.get(key, 0.0)) else ceiling(last, c) for key in wanted
        }
        wanted.sort(key=lambda key: (-before[key], key))
        head = keyword_among(wanted[:first])
        if head is None:
            return None
        _score_rounds(head, upper, ceiling, cosines, blended, pruning, state, first)
        wanted = wanted[first:] if state.floor is None else reaching(wanted[first:], state.floor)
    extra = keyword_among(wanted) if wanted else {}
    if extra is None:
        return None
    _score_rounds(extra, upper, ceiling, cosines, blended, pruning, state, first)
    return state.scores


@attrs.define
class _Scored:
    """The keyword hits and cosines blended so far, their blend, and its floor (the ``k``-th best that passes)."""

    keyword: dict[int, float]
    semantic: dict[int, float]
    scores: dict[int, float]
    floor: tuple[float, int] | None


def _score_rounds(
    extra: dict[int, float],
    upper: dict[int, float],
    ceiling: Callable[[float, float], float],
    cosines: Callable[[Iterable[int]], dict[int, float]],
    blended: Callable[[dict[int, float], dict[int, float]], dict[int, float]],
    pruning: Pruning,
    state: _Scored,
    batch: int,
) -> None:
    """Blend the rows of ``extra`` (their BM25) into ``state`` best ceiling first, ``batch`` then four times as many a round, until none left can pass into the ``k`` best (see :func:`_pruned_also`)."""
    bounds = {key: ceiling(bm25, upper.get(key, 0.0)) for key, bm25 in extra.items()}
    order = sorted(extra, key=lambda key: (-bounds[key], key))
    at = 0
    while at < len(order):
        floor = state.floor
        if floor is not None and not _reaches(bounds[order[at]], order[at], floor):
            break  # ranked by ceiling, then key: none after it can pass into the k best
        take = order[at : at + batch]
        if floor is not None:
            take = [key for key in take if _reaches(bounds[key], key, floor)]
        at += batch
        batch *= 4
        if pruning.passing is not None:
            take = pruning.passing(take)  # a row that fails needs no cosine
        if not take:
            continue  # nothing scored: the blend and its floor are as they were
        state.keyword.update((key, extra[key]) for key in take)
        state.semantic.update(cosines(take))
        state.scores = blended(state.keyword, state.semantic)
        state.floor = pruning.floor(state.scores)


def _reaches(ceiling: float, key: int, floor: tuple[float, int], *, exact: bool = True) -> bool:
    """Return whether a row blending to at most ``ceiling`` may rank before the ``floor`` hit ``(score, key)`` (higher score first, then the smaller key).

    Past float rounding (``_MARGIN``), a ceiling below the floor's score
    cannot. A ceiling of 0 taken from the row's own BM25 (``exact``) is
    exact: its keyword side is the blend's own float, 0 (at or below the
    keyword background), and its cosine's bound at most 0 (or at most the
    background cosine) leaves the cosine side 0 too; such a row ties a
    floor of 0 and ranks after it where its key is larger.
    """
    score, last = floor
    if exact and ceiling == 0.0 and score == 0.0:
        return key < last
    return ceiling * _MARGIN >= score


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
