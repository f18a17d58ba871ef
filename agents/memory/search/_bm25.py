"""BM25 top-k for the search index: exhaustive in pure Python, pruned and exact with numpy.

Every ranking here is the one of ``agents.memory._text``: an item's score is
the sum, over the query's terms in query order (repeats counted), of
:func:`~agents.memory._text.bm25_term_score`, and ties keep session order
(lower key first). The two ways to get the best ``k`` give the same items
and the same floats:

- :func:`exhaustive_top` scores every item that holds a query term (pure
  Python, the path without numpy);
- :class:`Ranker` (numpy) scores only the items that can still be among the
  best ``k``, as MaxScore does: each term's postings are kept in *impact
  order* (by count, then by length, so within one count the item with the
  highest share comes first and a share threshold is a binary search), a
  first threshold comes from each term's own best items, and an item whose
  best possible score stays below it is never scored. The items that are
  scored get their exact score, summed in query order.

Upkeep stays incremental: a term's arrays are built by the first query that
needs them; items indexed later sit in a *tail* that queries read from the
postings, items removed later are masked by a generation number, and the
arrays are rebuilt lazily once the tail or the removals grow past a small
share of the memory.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping, Sequence
from itertools import chain
from typing import Any, Final

from agents.memory._text import (
    BM25_B,
    BM25_FLOOR,
    BM25_K1,
    bm25_average_length,
    bm25_term_score,
    bm25_weight,
)
from agents.memory.search._bulk import Filed

__all__ = ["QueryTerm", "Ranker", "exhaustive_among", "exhaustive_top", "shares"]

QueryTerm = tuple[str, Mapping[int, int], float]
"""A query term as the rankers take it: ``(term, {key: tf}, weight)``, in query order, repeats kept."""

_FLAT: Final = BM25_K1 * (1.0 - BM25_B)
_SMALL: Final = 256  # postings shorter than this are read from the dict at each query
_GROUPS: Final = 48  # counts below this get a segment each; higher counts share the last one
_GONE: Final = 2**62  # the generation of a removed row: newer than any array
# A share computed in floats may differ from the exact one by a few ulps; every
# bound is loosened by this much (relative) so that pruning never drops a tie.
_SLACK: Final = 1e-9
_SPAN: Final = 2.0**32  # above any item length: segment number * _SPAN + length orders entries
_FEW: Final = 64  # this many items or fewer are scored from the postings dicts
_WORTH: Final = 0.02  # a term whose bound is below this share of the threshold is not summed early


def _best_first(pair: tuple[int, float]) -> tuple[float, int]:
    return -pair[1], pair[0]


def shares(weight: Any, slope: float, tf: Any, dl: Any) -> Any:
    """Return each entry's share of a score (numpy arrays of counts and lengths, as floats): ``bm25_term_score``'s floats.

    Its operations in its order, ``slope`` being ``BM25_K1 * BM25_B / average``,
    so that each float is the one it gives; ``weight`` a float or an array.
    """
    return weight * (tf / (tf + _FLAT + slope * dl) + BM25_FLOOR)


def exhaustive_top(
    terms: Sequence[QueryTerm], lengths: Mapping[int, int], average: float, k: int
) -> list[tuple[int, float]]:
    """Return the best ``k`` ``(key, score)``, best first, ties by key, scoring every item holding a term."""
    scores: dict[int, float] = {}
    for _, posting, weight in terms:
        get = scores.get
        scores.update(
            {
                key: get(key, 0.0) + bm25_term_score(weight, tf, lengths[key], average)
                for key, tf in posting.items()
            }
        )
    if k >= len(scores):
        return sorted(scores.items(), key=_best_first)
    return heapq.nsmallest(k, scores.items(), key=_best_first)


def exhaustive_among(
    terms: Sequence[QueryTerm],
    among: Collection[int],
    lengths: Mapping[int, int],
    average: float,
    k: int,
) -> list[tuple[int, float]]:
    """Return :func:`exhaustive_top`'s best ``k`` of the items ``among`` only: the weights and lengths of the ranking of every item, summed in its order."""
    kept = [
        (term, {key: posting[key] for key in among if key in posting}, weight)
        for term, posting, weight in terms
    ]
    return exhaustive_top(kept, lengths, average, k)


class _Impacts:
    """One term's postings as arrays in impact order (count, then length), built at one generation."""

    __slots__ = (
        "by_row",
        "contrib",
        "counts",
        "dl",
        "epoch",
        "heads",
        "log_pos",
        "mixed",
        "ordered",
        "removals",
        "rows",
        "segments",
        "starts",
        "tf",
    )

    def __init__(
        self,
        np: Any,
        rows: Any,
        tf: Any,
        dl: Any,
        generation: tuple[int, int, int],
        ordered: Any = None,
    ) -> None:
        # rows, tf and dl come in impact order (see _impact_order); `ordered` too, when given.
        self.rows = rows
        self.tf = tf
        self.dl = dl
        clipped = np.minimum(tf, _GROUPS)
        firsts = [0, *(np.flatnonzero(clipped[1:] != clipped[:-1]) + 1).tolist()]
        values = clipped[firsts]
        starts = firsts
        ends = [*starts[1:], len(clipped)]
        self.segments = [
            (start, end, int(value) if value < _GROUPS else 0)
            for start, end, value in zip(starts, ends, values.tolist(), strict=True)
        ]
        # The segments of one count, as arrays, and the key that orders every entry:
        # segment number * 2**32 + length, so one search finds each segment's cut.
        single = [segment for segment in self.segments if segment[2]]
        self.starts = np.array([start for start, _, _ in single], dtype=np.int64)
        self.counts = np.array([count for _, _, count in single], dtype=np.float64)
        self.mixed = next(((start, end) for start, end, count in self.segments if not count), None)
        if ordered is None:
            segment_of = np.repeat(
                np.arange(len(self.segments), dtype=np.float64),
                [end - start for start, end, _ in self.segments],
            )
            ordered = segment_of * _SPAN + self.dl
        self.ordered = ordered
        self.heads: dict[int, Any] = {}  # positions of each segment's first n entries, by n
        # (slope, weight, each entry's share of a score): kept while neither changes.
        self.contrib: tuple[float, float, Any] | None = None
        # (slope, weight, removals, rows in use, the shares laid out by row, 0.0 where
        # the term is missing): for a common term, read by row instead of searched.
        self.by_row: tuple[float, float, int, int, Any] | None = None
        self.epoch, self.log_pos, self.removals = generation


def _impact_order(np: Any, rows: Any, tf: Any, dl: Any) -> tuple[Any, Any, Any]:
    """Return ``rows``, ``tf`` and ``dl`` in impact order: by count (the high ones as one), then by length."""
    order = np.lexsort((dl, np.minimum(tf, _GROUPS)))
    return rows[order], tf[order], dl[order]


class _Common:
    """The impact arrays of every term held by at least ``_SMALL`` items, made at one generation in one sort.

    A build ahead makes them (see ``Ranker.build_common``), with each
    entry's share of a score at the statistics of the items built (what a
    query computes first, while nothing changed); a query takes a term's
    arrays from them, with no sort and no reading of the postings. Rows,
    counts and lengths are kept as 32-bit integers (the scores computed
    from them are the same floats).
    """

    __slots__ = ("made",)

    def __init__(
        self,
        np: Any,
        entries: tuple[list[str], Any, Any, Any, Any],
        lengths: Mapping[int, int],
        generation: tuple[int, int, int],
    ) -> None:
        # entries: the terms, how many items hold each, and their entries' rows, counts and
        # lengths (int32), term by term in that order (see _entries and _filed_entries).
        common, sizes, rows, tf, dl = entries
        total = len(rows)
        # One sort: by term, then impact order within each term.
        term_of = np.repeat(np.arange(len(common), dtype=np.int32), sizes)
        clipped = np.minimum(tf, _GROUPS)
        order = np.lexsort((dl, clipped, term_of))
        rows, tf, dl = rows[order], tf[order], dl[order]
        clipped, term_of = clipped[order], term_of[order]
        del order
        # Each entry's segment within its term (one per count), for `_Impacts.ordered`.
        ends = np.cumsum(sizes)
        begins = ends - sizes
        new = np.ones(total, dtype=bool)
        new[1:] = clipped[1:] != clipped[:-1]
        new[begins] = True
        segment = np.cumsum(new) - 1
        segment -= np.repeat(segment[begins], sizes)
        ordered = segment * _SPAN + dl
        del segment, new, clipped, term_of
        # Each entry's share at the statistics of now, in bm25_term_score's order (Part.contrib's floats).
        n_items = len(lengths)
        average = bm25_average_length(sum(lengths.values()), n_items)
        slope = BM25_K1 * BM25_B / average
        weights = [bm25_weight(n_items, int(size)) for size in sizes.tolist()]
        contrib = shares(np.repeat(np.array(weights, dtype=np.float64), sizes), slope, tf, dl)
        self.made: dict[str, _Impacts] = {}
        for term, weight, begin, end in zip(
            common, weights, begins.tolist(), ends.tolist(), strict=True
        ):
            cut = slice(begin, end)
            impacts = _Impacts(np, rows[cut], tf[cut], dl[cut], generation, ordered[cut])
            impacts.contrib = (slope, weight, contrib[cut])
            self.made[term] = impacts


def _entries(
    np: Any,
    postings: Mapping[str, Mapping[int, int]],
    lengths: Mapping[int, int],
    row_of: Mapping[int, int],
) -> tuple[list[str], Any, Any, Any, Any]:
    """Return the entries of every term held by at least ``_SMALL`` items, read from the postings dicts (see ``_Common``)."""
    common = [term for term, posting in postings.items() if len(posting) >= _SMALL]
    sizes = np.fromiter((len(postings[term]) for term in common), np.int64, len(common))
    total = int(sizes.sum())
    keys = np.fromiter(chain.from_iterable(postings[t] for t in common), np.int64, total)
    tf = np.fromiter(chain.from_iterable(postings[t].values() for t in common), np.int32, total)
    # Each key's row and length, looked up in numpy through the keys sorted.
    held = np.fromiter(row_of, np.int64, len(row_of))
    by_key = np.argsort(held)
    held = held[by_key]
    row = np.fromiter(row_of.values(), np.int64, len(row_of))[by_key]
    length = np.fromiter(map(lengths.__getitem__, row_of), np.int32, len(row_of))[by_key]
    at = np.searchsorted(held, keys)
    return common, sizes, row[at].astype(np.int32), tf, length[at]


def _filed_entries(
    np: Any, filed: Filed, row_of: Mapping[int, int]
) -> tuple[list[str], Any, Any, Any, Any]:
    """Return the entries of every term held by at least ``_SMALL`` items, taken from the arrays of a bulk filing."""
    held = filed.sizes >= _SMALL
    common = [term for term, many in zip(filed.terms, held.tolist(), strict=True) if many]
    chosen = np.repeat(held, filed.sizes)
    places = filed.items[chosen]
    count = len(filed.keys)
    row = np.fromiter(map(row_of.__getitem__, filed.keys), np.int32, count)
    length = np.fromiter(map(filed.lengths.__getitem__, filed.keys), np.int32, count)
    return common, filed.sizes[held], row[places], filed.tf[chosen], length[places]


class _Part:
    """Postings of one query term read at query time: arrays, their shares, an impact order or none."""

    __slots__ = ("dl", "impacts", "rows", "share", "tf", "valid")

    def __init__(self, rows: Any, tf: Any, dl: Any, impacts: _Impacts | None, valid: Any) -> None:
        self.rows = rows
        self.tf = tf
        self.dl = dl
        self.impacts = impacts
        self.valid = valid  # a mask of entries still current, or None when all are
        # The per-entry share at unit weight less BM25_FLOOR, for parts read whole.
        self.share: Any = None

    def contrib(self, weight: float, slope: float) -> Any:
        """Return each entry's share of a score for one occurrence of the term: ``bm25_term_score``'s floats."""
        impacts = self.impacts
        if impacts is not None and impacts.contrib is not None:
            seen_slope, seen_weight, contrib = impacts.contrib
            if seen_slope == slope and seen_weight == weight:
                return contrib
        contrib = shares(weight, slope, self.tf, self.dl)
        if impacts is not None:
            impacts.contrib = (slope, weight, contrib)
        return contrib


class Ranker:
    """The numpy side of a search index: rows for item keys, term arrays in impact order, and the pruned top-k.

    The index tells it each item it (re)indexes (:meth:`indexed`, in
    batches opened by :meth:`next_generation`) and each item it removes
    (:meth:`removed`); :meth:`top` ranks.
    """

    def __init__(self, np: Any) -> None:
        self.np = np
        self.row_of: dict[int, int] = {}
        self.key_at = np.zeros(64, dtype=np.int64)
        self.gen = np.full(64, _GONE, dtype=np.int64)
        self.used = 0
        self.free: list[int] = []
        self.epoch = 0
        self.log: list[int] = []  # keys indexed since the arrays were last dropped, in order
        self.removals = 0  # rows removed since then
        self.impacts: dict[tuple[tuple[str, ...] | None, str], _Impacts] = {}
        self.entries = 0  # the entries of the arrays in `impacts`
        self.laid_out: dict[int, _Impacts] = {}  # the arrays holding a `by_row`, oldest first
        self.ahead: _Common | None = None  # every common term's arrays, built ahead (all fields)

    # -- upkeep -----------------------------------------------------------------------

    def next_generation(self) -> None:
        """Open a batch of (re)indexed items: arrays built before it do not hold them."""
        self.epoch += 1

    def indexed(self, keys: list[int]) -> None:
        """File ``keys`` as (re)indexed in the current batch."""
        row_of = self.row_of
        free = self.free
        rows = []
        used = self.used
        for key in keys:
            row = row_of.get(key)
            if row is None:
                if free:
                    row = free.pop()
                else:
                    row = used
                    used += 1
                row_of[key] = row
            rows.append(row)
        self._grow(used)
        at = self.np.array(rows, dtype=self.np.int64)
        self.key_at[at] = keys
        self.gen[at] = self.epoch
        self.log += keys

    def removed(self, key: int) -> None:
        """Forget ``key``: its entries in existing arrays no longer count."""
        row = self.row_of.pop(key, None)
        if row is not None:
            self.gen[row] = _GONE
            self.free.append(row)
            self.removals += 1

    def _grow(self, used: int) -> None:
        """Hold ``used`` rows (all rows from ``self.used`` on handed out at once, not one by one)."""
        np = self.np
        row = self.used
        if used > len(self.key_at):
            size = len(self.key_at)
            while size < used:
                size *= 2
            key_at = np.zeros(size, dtype=np.int64)
            key_at[:row] = self.key_at[:row]
            gen = np.full(size, _GONE, dtype=np.int64)
            gen[:row] = self.gen[:row]
            self.key_at, self.gen = key_at, gen
        self.used = used

    def build_common(
        self,
        postings: Mapping[str, Mapping[int, int]],
        lengths: Mapping[int, int],
        filed: Filed | None = None,
    ) -> None:
        """Build ahead the arrays of every term held by at least 256 items (those a first query pays for), over all fields.

        They are made in one sort (see ``_Common``), and a query takes a
        term's arrays from them without reading its postings. The arrays
        built before are dropped first, as a rebuild drops them: the new ones
        hold every item indexed so far, so no tail is kept. They go when
        the tails or the removals outgrow a small share of the items.
        """
        self._tidy(0, every=True)
        np = self.np
        entries = (
            _entries(np, postings, lengths, self.row_of)
            if filed is None
            else _filed_entries(np, filed, self.row_of)
        )
        ahead = self.ahead = _Common(
            np, entries, lengths, (self.epoch, len(self.log), self.removals)
        )
        # The words most items hold are read by row: lay out as many as are kept.
        room = max(4, 2**23 // max(self.used, 1))
        for impacts in sorted(ahead.made.values(), key=lambda i: len(i.rows), reverse=True)[:room]:
            if impacts.contrib is not None:
                slope, weight, _ = impacts.contrib
                self._by_row(
                    _Part(impacts.rows, impacts.tf, impacts.dl, impacts, None), weight, slope
                )

    # -- ranking -------------------------------------------------------------------------

    def top(
        self,
        terms: Sequence[QueryTerm],
        scope: tuple[str, ...] | None,
        lengths: Mapping[int, int],
        average: float,
        k: int,
    ) -> list[tuple[int, float]]:
        """Return the best ``k`` ``(key, score)``, best first, ties by key: :func:`exhaustive_top`'s answer.

        Args:
            terms: The query terms any item holds, in query order, repeats kept.
            scope: The searched fields (``None``: all), naming the arrays kept per term.
            lengths: Each item's length over the searched fields, by key.
            average: The average length.
            k: How many.
        """
        np = self.np
        self._tidy(len(lengths))
        slope = BM25_K1 * BM25_B / average
        # Distinct terms, their summed weight (for bounds) and their parts.
        distinct: dict[str, tuple[list[_Part], float]] = {}
        single: dict[str, float] = {}  # the weight of one occurrence
        for term, posting, weight in terms:
            seen = distinct.get(term)
            if seen is None:
                distinct[term] = (self._parts(term, posting, scope, lengths), weight)
                single[term] = weight
            else:
                distinct[term] = (seen[0], seen[1] + weight)
        # Each term's highest share, and seeds: the items with each term's best shares
        # (more of them for the term with the highest, which the best items likely hold).
        wide = max(2 * k, 16)
        bounds: dict[str, float] = {}
        heads: dict[str, tuple[Any, Any]] = {}
        for term, (parts, weight) in distinct.items():
            picked = [self._heads(part, slope, wide) for part in parts]
            shares = np.concatenate([shares for shares, _ in picked])
            rows = np.concatenate([rows for _, rows in picked])
            heads[term] = (shares, rows)
            best = float(shares.max()) if len(shares) else 0.0
            bounds[term] = weight * best * (1.0 + _SLACK)
        seeds: set[int] = set()
        first = max(bounds, key=bounds.__getitem__)
        for term, (shares, rows) in heads.items():
            many = wide if term == first else k
            if len(shares) > many:
                rows = rows[np.argpartition(shares, len(shares) - many)[len(shares) - many :]]
            seeds.update(self.key_at[rows].tolist())
        threshold = self._kth_score(terms, seeds, lengths, average, k)
        # MaxScore, a term at a time, terms by bound (highest first). An item first
        # met at a term scores at most its share there plus the bounds of the terms
        # after it: items that cannot reach the threshold are never taken, and taken
        # ones are dropped once they cannot. `got` sums what the taken items hold of
        # the terms seen (a lower bound of their score), which raises the threshold.
        mark = np.zeros(self.used, dtype=bool)
        where = np.empty(self.used, dtype=np.int64)  # a taken row's place in `taken`
        taken = np.zeros(0, dtype=np.int64)
        got = np.zeros(0, dtype=np.float64)
        after = sum(bounds.values())
        skipped = 0.0  # the bounds of the terms not added to `got`
        for term in sorted(distinct, key=bounds.__getitem__, reverse=True):
            after -= bounds[term]
            parts, weight = distinct[term]
            need = (threshold - after) * (1.0 - _SLACK) - _SLACK
            unit = need / weight if need > 0.0 else 0.0
            reaching = [self._reaching(part, slope, unit) for part in parts]
            if len(taken) + sum(len(at) for at in reaching) > self.used // 4:
                # A quarter of the items may still be among the best (the query's words
                # are common and spread alike): scoring every posting costs less.
                return self._dense_top(terms, distinct, slope, k)
            times = weight / single[term]  # how many times the query holds it
            # Adding this term's shares to `got` pays while many items are taken, for a
            # term that can move a score (a word in every item adds almost nothing).
            update = len(taken) > _FEW and bounds[term] >= _WORTH * threshold
            if not update and len(taken):
                skipped += bounds[term]  # the items taken so far may hold it
            new_rows = []
            new_got = []
            for part, at in zip(parts, reaching, strict=True):
                if update:
                    by_row = self._by_row(part, single[term], slope)
                    if by_row is not None:
                        got += times * by_row[taken]
                    else:
                        held = self._held(part, mark)
                        got[where[part.rows[held]]] += (
                            times * part.contrib(single[term], slope)[held]
                        )
                if part.valid is not None:
                    at = at[part.valid[at]]
                rows = part.rows[at]
                fresh = ~mark[rows]
                new_rows.append(rows[fresh])
                new_got.append(times * part.contrib(single[term], slope)[at[fresh]])
            added = np.concatenate(new_rows)
            if len(added):
                where[added] = np.arange(len(taken), len(taken) + len(added))
                mark[added] = True
                taken = np.concatenate((taken, added))
                got = np.concatenate((got, np.concatenate(new_got)))
            if len(taken) > k:
                threshold = max(threshold, float(np.partition(got, len(got) - k)[len(got) - k]))
                keep = got + (after + skipped) >= threshold * (1.0 - _SLACK) - _SLACK
                if not keep.all():
                    mark[taken[~keep]] = False
                    taken = taken[keep]
                    got = got[keep]
                    where[taken] = np.arange(len(taken))
        # The exact score of every item still taken, summed in query order.
        if len(taken) <= _FEW:
            return self._exact_top(terms, self.key_at[taken].tolist(), lengths, average, k)
        scores = np.zeros(len(taken), dtype=np.float64)
        for term, _, weight in terms:
            for part in distinct[term][0]:
                by_row = self._by_row(part, weight, slope)
                if by_row is not None:
                    scores += by_row[taken]  # adding 0.0 where the term is missing changes nothing
                else:
                    at = self._held(part, mark)
                    scores[where[part.rows[at]]] += part.contrib(weight, slope)[at]
        if len(scores) > k:
            best = scores >= np.partition(scores, len(scores) - k)[len(scores) - k]
            taken = taken[best]
            scores = scores[best]
        keys = self.key_at[taken]
        ranked = np.lexsort((keys, -scores))[:k]
        return list(zip(keys[ranked].tolist(), scores[ranked].tolist(), strict=True))

    def _dense_top(
        self,
        terms: Sequence[QueryTerm],
        distinct: Mapping[str, tuple[list[_Part], float]],
        slope: float,
        k: int,
    ) -> list[tuple[int, float]]:
        """Return the best ``k`` by scoring every entry of every term into one array by row."""
        np = self.np
        scores = self._dense_scores(terms, distinct, slope)
        held = scores[scores > 0.0]
        if len(held) > k:  # selected among the items holding a term: numpy's selection
            # slows many times over the zeros of the items that hold none
            cut = np.partition(held, len(held) - k)[len(held) - k]
            rows = np.flatnonzero(scores >= cut)
        else:
            rows = np.flatnonzero(scores > 0.0)
        found = scores[rows]
        keys = self.key_at[rows]
        ranked = np.lexsort((keys, -found))[:k]
        return list(zip(keys[ranked].tolist(), found[ranked].tolist(), strict=True))

    def all_scores(
        self,
        terms: Sequence[QueryTerm],
        scope: tuple[str, ...] | None,
        lengths: Mapping[int, int],
        average: float,
    ) -> dict[int, float]:
        """Return the score of every item holding a query term, by key (the floats :meth:`top` gives)."""
        np = self.np
        self._tidy(len(lengths))
        slope = BM25_K1 * BM25_B / average
        distinct: dict[str, tuple[list[_Part], float]] = {}
        for term, posting, weight in terms:
            if term not in distinct:
                distinct[term] = (self._parts(term, posting, scope, lengths), weight)
        scores = self._dense_scores(terms, distinct, slope)
        rows = np.flatnonzero(scores)
        return dict(zip(self.key_at[rows].tolist(), scores[rows].tolist(), strict=True))

    def _dense_scores(
        self,
        terms: Sequence[QueryTerm],
        distinct: Mapping[str, tuple[list[_Part], float]],
        slope: float,
    ) -> Any:
        """Return every row's score: each term's entries added into one array, in query order."""
        np = self.np
        scores = np.zeros(self.used, dtype=np.float64)
        for term, _, weight in terms:
            for part in distinct[term][0]:
                by_row = self._by_row(part, weight, slope)
                if by_row is not None:
                    scores += by_row  # adding 0.0 where the term is missing changes nothing
                    continue
                rows, contrib = part.rows, part.contrib(weight, slope)
                if part.valid is not None:
                    rows, contrib = rows[part.valid], contrib[part.valid]
                scores[rows] += contrib
        return scores

    def _by_row(self, part: _Part, weight: float, slope: float) -> Any:
        """Return the part's current shares laid out by row, for a common term's arrays (else ``None``)."""
        impacts = part.impacts
        if impacts is None or len(part.rows) <= self.used // 8:
            return None
        seen = impacts.by_row
        if seen is not None and seen[:4] == (slope, weight, self.removals, self.used):
            return seen[4]
        np = self.np
        rows, contrib = part.rows, part.contrib(weight, slope)
        if part.valid is not None:
            rows, contrib = rows[part.valid], contrib[part.valid]
        by_row = np.zeros(self.used, dtype=np.float64)
        by_row[rows] = contrib
        impacts.by_row = (slope, weight, self.removals, self.used, by_row)
        laid_out = self.laid_out
        laid_out.pop(id(impacts), None)
        laid_out[id(impacts)] = impacts
        # At most about 64 MiB of them: the oldest give theirs up.
        while len(laid_out) > max(4, 2**23 // self.used):
            laid_out.pop(next(iter(laid_out))).by_row = None
        return by_row

    def _held(self, part: _Part, mark: Any) -> Any:
        """Return the positions in the part of current entries whose row is marked."""
        hit = mark[part.rows]
        if part.valid is not None:
            hit &= part.valid
        return self.np.flatnonzero(hit)

    @staticmethod
    def _exact_top(
        terms: Sequence[QueryTerm],
        keys: list[int],
        lengths: Mapping[int, int],
        average: float,
        k: int,
    ) -> list[tuple[int, float]]:
        """Return the best ``k`` of ``keys`` by exact score, read from the postings (for few keys)."""
        scored = []
        for key in keys:
            score = 0.0
            for _, posting, weight in terms:
                tf = posting.get(key)
                if tf:
                    score += bm25_term_score(weight, tf, lengths[key], average)
            if score > 0.0:
                scored.append((key, score))
        return heapq.nsmallest(k, scored, key=_best_first)

    def _parts(
        self,
        term: str,
        posting: Mapping[int, int],
        scope: tuple[str, ...] | None,
        lengths: Mapping[int, int],
    ) -> list[_Part]:
        """Return the term's postings as parts: its impact arrays and their tail, or one part read now."""
        if len(posting) < _SMALL:
            return [self._read(posting, posting, lengths)]
        impacts = None if self.ahead is None or scope is not None else self.ahead.made.get(term)
        if impacts is None:  # not built ahead: built now, and kept while used recently
            impacts = self.impacts.pop((scope, term), None)
            if impacts is None:
                impacts = self._build(posting, lengths)
                self.entries += len(impacts.rows)
            self.impacts[scope, term] = impacts  # last: the most recently used
            # The least recently used go while all hold more than 2**20 entries and twice the rows.
            while len(self.impacts) > 1 and self.entries > max(1 << 20, 2 * self.used):
                oldest = self.impacts.pop(next(iter(self.impacts)))
                self.entries -= len(oldest.rows)
                self.laid_out.pop(id(oldest), None)
        # Rows removed since the build (or reused by another item) are masked out.
        valid = None
        if self.removals != impacts.removals:
            valid = self.gen[impacts.rows] <= impacts.epoch
        parts = [_Part(impacts.rows, impacts.tf, impacts.dl, impacts, valid)]
        tail = [key for key in dict.fromkeys(self.log[impacts.log_pos :]) if key in posting]
        if tail:
            parts.append(self._read(tail, posting, lengths))
        return parts

    def _read(self, keys: Any, posting: Mapping[int, int], lengths: Mapping[int, int]) -> _Part:
        np = self.np
        count = len(keys)
        rows = np.fromiter(map(self.row_of.__getitem__, keys), np.int64, count)
        tf = np.fromiter(map(posting.__getitem__, keys), np.float64, count)
        dl = np.fromiter(map(lengths.__getitem__, keys), np.float64, count)
        return _Part(rows, tf, dl, None, None)

    def _build(self, posting: Mapping[int, int], lengths: Mapping[int, int]) -> _Impacts:
        np = self.np
        count = len(posting)
        rows = np.fromiter(map(self.row_of.__getitem__, posting), np.int64, count)
        tf = np.fromiter(posting.values(), np.float64, count)
        dl = np.fromiter(map(lengths.__getitem__, posting), np.float64, count)
        rows, tf, dl = _impact_order(np, rows, tf, dl)
        return _Impacts(np, rows, tf, dl, (self.epoch, len(self.log), self.removals))

    def _tidy(self, n_items: int, *, every: bool = False) -> None:
        """Drop every term's arrays once the tails or the removals outgrow a small share of the items (or ``every`` time)."""
        limit = max(1024, n_items // 32)
        if every or len(self.log) > limit or self.removals > limit:
            self.impacts = {}
            self.entries = 0
            self.laid_out = {}
            self.ahead = None
            self.log = []
            self.removals = 0

    def _heads(self, part: _Part, slope: float, k: int) -> tuple[Any, Any]:
        """Return the unit-weight shares and rows of candidates for the part's best ``k`` (its highest share among them)."""
        np = self.np
        impacts = part.impacts
        if impacts is None:
            tf = part.tf
            part.share = tf / (tf + _FLAT + slope * part.dl)
            return part.share + BM25_FLOOR, part.rows
        at = impacts.heads.get(k)
        if at is None:
            at = impacts.heads[k] = np.concatenate(
                [
                    np.arange(start, end if count == 0 else min(end, start + k))
                    for start, end, count in impacts.segments
                ]
            )
        tf = impacts.tf[at]
        return tf / (tf + _FLAT + slope * impacts.dl[at]) + BM25_FLOOR, impacts.rows[at]

    def _reaching(self, part: _Part, slope: float, need: float) -> Any:
        """Return the positions in the part of the entries whose unit-weight share is at least ``need``."""
        np = self.np
        impacts = part.impacts
        # Every entry's share holds BM25_FLOOR: what is left of `need` is the part that
        # grows with the count and falls with the length (`part.share`, `share` below).
        need -= BM25_FLOOR
        if need <= 0.0:
            return np.arange(len(part.rows))
        if impacts is None:
            return np.flatnonzero(part.share >= need)
        picks = []
        if need < 1.0 and len(impacts.starts):  # a share is always below 1
            # count / (count + flat + slope * dl) >= need  <=>  dl <= (count / need - count - flat) / slope
            counts = impacts.counts
            longest = (counts / need - counts - _FLAT) / slope
            # Lengths are whole numbers: 1e-3 more keeps a tie whatever the rounding.
            longest = np.clip(longest * (1.0 + _SLACK) + 1e-3, -1.0, _SPAN - 1.0)
            segment = np.arange(len(counts), dtype=np.float64)  # the mixed segment is last
            stops = np.searchsorted(impacts.ordered, segment * _SPAN + longest, side="right")
            sizes = np.maximum(stops - impacts.starts, 0)
            total = int(sizes.sum())
            if total:
                # The ranges [start, start + size) of every segment, in one array.
                offsets = np.repeat(impacts.starts - (np.cumsum(sizes) - sizes), sizes)
                picks.append(np.arange(total) + offsets)
        if impacts.mixed is not None:
            start, end = impacts.mixed
            tf = impacts.tf[start:end]
            share = tf / (tf + _FLAT + slope * impacts.dl[start:end])
            picks.append(start + np.flatnonzero(share >= need))
        if not picks:
            return np.zeros(0, dtype=np.int64)
        return picks[0] if len(picks) == 1 else np.concatenate(picks)

    def _kth_score(
        self,
        terms: Sequence[QueryTerm],
        keys: set[int],
        lengths: Mapping[int, int],
        average: float,
        k: int,
    ) -> float:
        """Return the ``k``-th best exact score among ``keys`` (0.0 with fewer than ``k`` holding a term)."""
        if len(keys) < k:
            return 0.0
        scores = []
        for key in keys:
            score = 0.0
            for _, posting, weight in terms:
                tf = posting.get(key)
                if tf:
                    score += bm25_term_score(weight, tf, lengths[key], average)
            if score > 0.0:
                scores.append(score)
        if len(scores) < k:
            return 0.0
        return heapq.nlargest(k, scores)[-1]
