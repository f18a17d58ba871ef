"""Ranking by BM25 from a :class:`~agents.memory.stores._jsonl.keyword_index.KeywordIndex`: ``Memory.search``'s scores and order.

One session's best ``k`` (:func:`top`, over numpy's arrays where numpy is
installed, else item by item with MaxScore), chosen items only
(:func:`score_among`), and several sessions as one corpus (:func:`rank_together`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any, Final

from agents.memory._text import BM25_B, BM25_FLOOR, BM25_K1, bm25_average_length
from agents.memory.stores._core.terms import (
    KeywordMatch,
    bm25_score,
    held_by_row,
    query_weights,
    rank_matches,
)
from agents.memory.stores._jsonl.keyword_index import KeywordIndex, numpy_module

__all__ = ["frequencies", "held_terms", "matches", "rank_together", "score_among", "top"]

_FLAT: Final = BM25_K1 * (1.0 - BM25_B)
"""``bm25_term_score``'s constant part of the denominator, computed as it computes it."""


def matches(
    index: KeywordIndex, terms: Sequence[str], among: set[int] | None = None
) -> tuple[dict[str, int], list[KeywordMatch]]:
    """Return each query term's document frequency, and the items (of ``among``, if given) holding one.

    Raises:
        DamagedIndexError: if the base's postings of a term do not check out.
    """
    live = {term: index.postings(term) for term in dict.fromkeys(terms)}
    df = {term: len(found) for term, found in live.items()}
    if among is None:
        among = set().union(*live.values())
    lengths = index.lengths
    out: list[KeywordMatch] = []
    for seq in among:
        counts = {term: found[seq] for term, found in live.items() if seq in found}
        if counts:
            out.append((seq, lengths[seq], counts))
    return df, out


def top(index: KeywordIndex, terms: Sequence[str], k: int) -> list[tuple[float, int]]:
    """Return the ``k`` best ``(score, seq)`` by BM25, ties by seq: ``Memory.search``'s ranking.

    Exact, but not every item holding a query word is scored: the items
    holding the query's best-weighted word give a ``k``-th score, and
    the words whose greatest possible shares sum below it (common
    words) add no item of their own to those scored (MaxScore).

    Raises:
        DamagedIndexError: if the base's postings of a term do not check out.
    """
    np = numpy_module()
    if np is not None:
        return _top_numpy(index, np, terms, k)
    live = {term: index.postings(term) for term in dict.fromkeys(terms)}
    df = {term: len(found) for term, found in live.items() if found}
    if not df:
        return []
    n_items = index.count
    weighted = query_weights(terms, df, n_items)
    average = bm25_average_length(index.total, n_items)
    lengths = index.lengths
    held = [(term, found) for term, found in live.items() if found]

    def scored(seqs: Iterable[int]) -> list[tuple[float, int]]:
        out = []
        for seq in seqs:
            counts = {term: found[seq] for term, found in held if seq in found}
            out.append((bm25_score(counts, lengths[seq], weighted, average), seq))
        return heapq.nsmallest(k, out, key=_best_first)

    # Each word's greatest share: its weight (once per time the query holds it) times 1 + floor.
    bound: dict[str, float] = {}
    for term, weight in weighted:
        bound[term] = bound.get(term, 0.0) + weight * (1.0 + BM25_FLOOR)
    order = sorted(df, key=lambda term: (bound[term], term))
    seed = scored(live[order[-1]])
    if len(seed) < k:
        return scored(set().union(*live.values()))
    # Below the k-th score (less a margin for the order of float sums) no item can enter.
    threshold = seed[-1][0] * (1.0 - 1e-9)
    common = 0.0
    essential = order
    for at, term in enumerate(order):
        if common + bound[term] >= threshold:
            essential = order[at:]
            break
        common += bound[term]
    return scored(set().union(*(live[term] for term in essential)))


def _top_numpy(
    index: KeywordIndex, np: Any, terms: Sequence[str], k: int
) -> list[tuple[float, int]]:
    """Return :meth:`top`'s ranking, each share summed in query order over arrays (the same floats)."""
    scored = _scores_numpy(index, np, terms)
    if scored is None:
        return []
    seqs, score = scored
    held = np.flatnonzero(score > 0.0)
    if len(held) > k:
        kth = np.partition(score[held], len(held) - k)[len(held) - k]
        held = held[score[held] >= kth]
    best = held[np.lexsort((seqs[held], -score[held]))][:k]
    # tolist: the same floats and ints as float() and int() of each, in one call
    return list(zip(score[best].tolist(), seqs[best].tolist(), strict=True))


def _scores_numpy(index: KeywordIndex, np: Any, terms: Sequence[str]) -> tuple[Any, Any] | None:
    """Return numpy's (live seqs ascending, each one's BM25 score: 0 where it holds no term), each share summed in query order; ``None`` where no item holds a term."""
    seqs, lengths = index.dense_arrays(np)
    arrays = {term: index.arrays_of(np, term, seqs) for term in dict.fromkeys(terms)}
    df = {term: len(got[0]) for term, got in arrays.items() if len(got[0])}
    if not df:
        return None
    weighted = query_weights(terms, df, len(seqs))
    average = bm25_average_length(index.total, len(seqs))
    score = np.zeros(len(seqs))
    scale = BM25_K1 * BM25_B / average  # as bm25_term_score: (k1 * b / average) * length
    for term, weight in weighted:
        at, tf = arrays[term]
        score[at] += weight * (tf / (tf + _FLAT + scale * lengths[at]) + BM25_FLOOR)
    return seqs, score


def frequencies(index: KeywordIndex, terms: Sequence[str]) -> dict[str, int]:
    """Return how many live items hold each of ``terms``.

    Raises:
        DamagedIndexError: if the base's postings of a term do not check out.
    """
    np = numpy_module()
    if np is None:
        return {term: len(index.postings(term)) for term in dict.fromkeys(terms)}
    seqs, _ = index.dense_arrays(np)
    return {term: len(index.arrays_of(np, term, seqs)[0]) for term in dict.fromkeys(terms)}


def held_terms(
    index: KeywordIndex, terms: Sequence[str], seqs: Sequence[int]
) -> dict[int, set[str]]:
    """Return the terms among ``terms`` each live item among ``seqs`` holds, by seq (items holding none left out).

    Raises:
        DamagedIndexError: if the base's postings of a term do not check out.
    """
    np = numpy_module()
    if np is None:
        return held_by_row(((term, index.postings(term)) for term in dict.fromkeys(terms)), seqs)
    # The arrays the ranking keeps, looked up in numpy: a fresh handle's hybrid query then
    # makes no dict of a term's postings (60 ms for its words at 100,000 steps).
    live, _ = index.dense_arrays(np)
    order = list(seqs)
    wanted = np.fromiter(order, dtype=np.int64, count=len(order))
    flags: list[tuple[str, list[bool]]] = []
    for term in dict.fromkeys(terms):
        holding = np.sort(live[index.arrays_of(np, term, live)[0]])
        if not len(holding):
            continue
        place = np.searchsorted(holding, wanted).clip(0, len(holding) - 1)
        flags.append((term, (holding[place] == wanted).tolist()))
    out: dict[int, set[str]] = {}
    for number, seq in enumerate(order):
        held = {term for term, holds in flags if holds[number]}
        if held:
            out[seq] = held
    return out


def _best_first(hit: tuple[float, int]) -> tuple[float, int]:
    """Sort key of ``(score, seq)``: the higher score first, then the lower seq."""
    return -hit[0], hit[1]


def rank_together(
    indexes: Sequence[KeywordIndex], terms: Sequence[str], k: int
) -> list[tuple[float, int, int]]:
    """Return the ``k`` best ``(score, index number, seq)`` by BM25 over several sessions as one corpus.

    The statistics are the sessions' summed; ties go by index number, then seq.

    Raises:
        DamagedIndexError: if the postings of a term do not check out.
    """
    n_items = sum(index.count for index in indexes)
    total = sum(index.total for index in indexes)
    every: list[KeywordMatch] = []
    shift = 1 + max((max(index.lengths, default=0) for index in indexes), default=0).bit_length()
    for number, index in enumerate(indexes):
        _, found = matches(index, terms)
        every.extend(((number << shift) | seq, length, counts) for seq, length, counts in found)
    mask = (1 << shift) - 1
    return [
        (score, key >> shift, key & mask)
        for score, key in rank_matches(n_items, total, every, terms, k)
    ]


def score_among(
    index: KeywordIndex, terms: Sequence[str], seqs: Sequence[int]
) -> list[tuple[float, int]]:
    """Return ``(score, seq)`` of the items among ``seqs`` holding a query term, best first (ties by seq), with the session's statistics.

    Raises:
        DamagedIndexError: if the postings of a term do not check out.
    """
    np = numpy_module()
    if np is not None:
        # The arrays the unfiltered ranking keeps (a filter's first query then reads no
        # postings into dicts: 15 ms of a 19 ms query at 10,000 steps), the same floats.
        dense = _scores_numpy(index, np, terms)
        if dense is None:
            return []
        live, score = dense
        chosen = sorted(set(seqs))  # not np.unique: its first call imports a module (25-40 ms)
        wanted = np.fromiter(chosen, dtype=np.int64, count=len(chosen))
        at = np.searchsorted(live, wanted).clip(0, max(len(live) - 1, 0))
        at = at[(live[at] == wanted) & (score[at] > 0.0)] if len(live) else at[:0]
        at = at[np.lexsort((live[at], -score[at]))]
        return list(zip(score[at].tolist(), live[at].tolist(), strict=True))
    df, found = matches(index, terms, set(seqs))
    n_items = index.count
    weighted = query_weights(terms, df, n_items)
    average = bm25_average_length(index.total, n_items)
    scored = [(bm25_score(counts, length, weighted, average), seq) for seq, length, counts in found]
    return sorted(scored, key=lambda hit: (-hit[0], hit[1]))
