"""The cosines a store's hybrid query hands the bounded walk: its semantic pool, ranked once.

The walk itself (:func:`~agents.memory._hybrid.bounded_blend`) is shared
with the in-RAM index; this module holds what only a store needs of it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agents.memory._hybrid import DEEPER, Pruning
from agents.memory._item import MemoryItem
from agents.memory._vectors import SHARED_TOP
from agents.memory.stores._search.compact import CompactVectors
from agents.memory.stores._search.vector_cache import Table

__all__ = ["HeldPool", "held_pool", "held_ranking", "walked_passing"]

Scored = Callable[
    [int, bool, Sequence[int] | None, Pruning | None],
    tuple[dict[int, float], dict[int, MemoryItem]],
]
"""``scored(depth, bounded, among, pruning)``: a hybrid query's blend (``KeywordSearch.hybrid_scores``) at a depth, its candidates among some rows only (``also``) or all (``None``), those that cannot rank left out (``pruning``)."""

Pass = Callable[[Sequence[tuple[int, float]], dict[int, MemoryItem]], list[Any]]
"""``passing(ranked, found)``: the first ``k`` of a ranking (best first) that pass the filter."""


def held_pool(
    pool: int,
    best: Callable[[Sequence[int]], tuple[dict[int, float], Table | None]],
    query: Any,
) -> HeldPool:
    """Return a hybrid query's ``cosines`` (the pool's best and those of the keys given) that ranks the pool once (:class:`HeldPool`).

    Args:
        pool: How many best cosines the pool holds (with ties).
        best: The best ``pool`` cosines (with ties) and those of the keys
            given, with the kept table they were scored from, if any.
        query: The unit query vector.
    """
    return HeldPool(pool, best, query)


class HeldPool:
    """A hybrid query's ``cosines``: the pool's best and those of the keys given, the pool ranked once, each other key scored once.

    :func:`bounded_blend` asks for the pool at each depth of its walk and
    once more for the rows a filter may pass; ranking the session's
    vectors again at each call cost a rare filter's hybrid query a second
    semantic ranking. The first call ranks; the next ones take its pool
    and score only the keys given that lie outside it, from the kept
    table the first scored from (``Vectors.scores_of``: the same floats),
    each once: a filtered query's walk asks again for the keys it scored
    at a shallower depth (on a coded table each is read from the store).
    Where it scored from none (the backend's own cosines, or vectors read
    page by page), each call ranks again.
    """

    def __init__(
        self,
        pool: int,
        best: Callable[[Sequence[int]], tuple[dict[int, float], Table | None]],
        query: Any,
    ) -> None:
        self._pool = pool
        self._best = best
        self._query = query
        self._held: list[tuple[dict[int, float], Table | None]] = []
        self._scored: dict[int, float] = {}  # the keys outside the pool scored so far, by key

    def __call__(self, among: Iterable[int]) -> dict[int, float]:
        """Return the pool's best cosines (with ties) and those of ``among``, by key."""
        held, scored = self._held, self._scored
        wanted = list(among)
        table = held[0][1] if held else None
        if table is not None:
            ranked = held[0][0]
            missing = [key for key in wanted if key not in ranked and key not in scored]
            if missing:
                scored.update(table.scores_of(self._query, missing))
            return {**ranked, **{key: scored[key] for key in wanted if key in scored}}
        found, table = self._best(wanted)
        if not held:
            # The pool: the session's best `pool` are the best of those found.
            pool = self._pool
            cut = heapq.nlargest(pool, found.values())[-1] if len(found) >= pool else None
            ranked = found if cut is None else {key: c for key, c in found.items() if c >= cut}
            held.append((ranked, table))
            scored.update({key: c for key, c in found.items() if key not in ranked})
        return found

    def ceilings(self, keys: Sequence[int]) -> dict[int, float] | None:
        """Return an upper bound of the cosine of each of ``keys`` that holds a vector (:attr:`Pruning.ceilings`), or ``None`` before the pool is ranked from a kept table.

        A coded table bounds each from its codes (``CompactVectors.ceilings``:
        nothing read); a float table scores it exactly (in RAM); a key
        scored already gives its cosine.
        """
        table = self._held[0][1] if self._held else None
        if table is None:
            return None
        ranked, scored = self._held[0][0], self._scored
        known = {key: c for key in keys if (c := ranked.get(key, scored.get(key))) is not None}
        rest = [key for key in keys if key not in known]
        if isinstance(table, CompactVectors):
            return {**table.ceilings(self._query, rest), **known}
        return {**table.scores_of(self._query, rest), **known}


def held_ranking(
    rank: Callable[[int], Sequence[tuple[float, int]] | None],
) -> Callable[[int], Sequence[tuple[float, int]] | None]:
    """Return ``rank`` (a keyword ranking's ``depth`` best, best first, ties by key; ``None`` where the backend cannot rank) asked once for each depth it has not reached.

    A filtered query's walk (:func:`walked_passing`) blends again at each
    depth, and each blend ranks the keyword side from the pool's depth
    on: the deepest ranking held answers every depth it covers with its
    first ``depth`` (the same hits and floats, ties by key), and every
    depth once it held fewer than it asked for (every hit).
    """
    held: list[tuple[int, Sequence[tuple[float, int]] | None]] = []

    def ranking(depth: int) -> Sequence[tuple[float, int]] | None:
        if held:
            asked, ranked = held[0]
            if ranked is None or asked >= depth or len(ranked) < asked:
                return None if ranked is None else ranked[:depth]
        ranked = rank(depth)
        held[:] = [(depth, ranked)]
        return ranked

    return ranking


def walked_passing(
    scored: Scored,
    k: int,
    walks: bool,
    passing: Pass,
    among: Sequence[int] | None = None,
    fewer: Callable[[], Sequence[int] | None] | None = None,
    ceilings: Callable[[Sequence[int]], dict[int, float] | None] | None = None,
) -> list[Any]:
    """Return the first ``k`` hits of a filtered hybrid query that pass, walking the blend only as deep as they need.

    Where the backend can take the bounded walk (``walks``), the blend is
    ranked ``2 * k`` deep, then deeper each time
    fewer than ``k`` of that many pass, as deep as the share that passed
    needs (twice at least, :data:`~agents.memory._hybrid.DEEPER` times at
    most: :func:`_deeper`): the walk's best
    ``depth`` are the full blend's, with its floats, so the first ``k`` that
    pass among them are the full blend's (a filter most items pass blended
    every keyword hit: 5.7x the unfiltered query on SQLite at 10,000 steps).
    A walk that returns fewer than ``depth + SHARED_TOP`` candidates
    returned them all. Otherwise every keyword hit is blended once, or
    only the candidates ``among`` the rows that may pass.

    Where a depth falls short with at most half of it passing (asked
    once), ``fewer()`` gives the rows that may pass where at most half may (``HYBRID_FEW``), or ``None``: then only those are
    blended, beside the query's own walk, instead of walking deeper (a
    filter that one step in ten passes walked to every keyword hit, and
    scored each one's cosine: 0.95 s against 0.05 s unfiltered, SQLite,
    10,000 steps, coded vectors).

    Blending those rows, only the ones that can still rank among the ``k``
    best that pass get their exact cosines, given ``ceilings`` (an upper
    bound of each row's cosine, :meth:`HeldPool.ceilings`; see
    :class:`~agents.memory._hybrid.Pruning`): the ``k``-th best passing
    score so far rules the others out, best ceiling first (a filter 30%
    of 30,000 steps pass read the stored vectors of every passing keyword
    hit: half the query's time).
    """

    def ranking(scores: dict[int, float]) -> list[tuple[int, float]]:
        return sorted(scores.items(), key=lambda hit: (-hit[1], hit[0]))

    depth, asked = 2 * k, fewer is None
    while walks:
        scores, found = scored(depth, True, None, None)
        ranked = ranking(scores)
        if len(ranked) < depth + SHARED_TOP:
            return passing(ranked, found)  # every candidate of the full blend
        hits = passing(ranked[:depth], found)
        if len(hits) >= k:
            return hits
        if not asked and 2 * len(hits) <= depth and fewer is not None:
            asked = True
            among = fewer()
            walks = among is None
        depth = _deeper(depth, k, len(hits))
    pruning = None
    seen: dict[int, MemoryItem] = {}  # the rows the floor judged, read once
    if among is not None and ceilings is not None:
        rows = set(among)

        def floor(blended: dict[int, float]) -> tuple[float, int] | None:
            hits = passing(ranking({key: s for key, s in blended.items() if key in rows}), seen)
            return (float(hits[-1][1]), int(hits[-1][0])) if len(hits) >= k else None

        pruning = Pruning(ceilings, floor)
    scores, found = scored(k, False, among, pruning)
    return passing(ranking(scores), {**seen, **found})


def _deeper(depth: int, k: int, passed: int) -> int:
    """Return the next depth of a filtered walk that found ``passed`` (fewer than ``k``) passing among its best ``depth``: as deep as that share needs ``k`` to pass, twice as deep at least and ``DEEPER`` times at most.

    The walk's depth is the blend's ``k`` (:meth:`KeywordSearch.hybrid_scores`):
    it stops only once the ``depth + SHARED_TOP``-th score is above what
    it has not reached, and a query of common words whose blend is 0 past
    its best few reaches every keyword hit at a depth past them (a filter
    99% of 50,000 steps pass: 20 deep, 3.3-4.9 s against 0.12-0.19 s
    unfiltered), where the ``k`` that pass lie among the few.
    """
    wanted = -(-depth * k // passed) if passed else DEEPER * depth
    return min(DEEPER * depth, max(2 * depth, wanted))
