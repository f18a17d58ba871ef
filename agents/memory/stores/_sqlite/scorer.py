"""BM25 top-k of one session of an SQLite store, scored over the FTS5 postings.

:class:`FTSScorer` is what :class:`~agents.memory.stores._sqlite.keyword.SQLiteKeywordIndex`
runs when every row of the store is in the FTS5 table: it finds the ``k``
best items of a session as ``Memory.search`` ranks them (BM25+ with Lucene's IDF, floored, over
the library tokenizer's terms), reading the postings of common query terms
only when it must (MaxScore).
"""

from __future__ import annotations

import heapq
import itertools
import math
import sqlite3
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Final

from agents.memory._text import (
    BM25_B,
    BM25_FLOOR,
    BM25_K1,
    bm25_average_length,
    bm25_term_score,
)
from agents.memory.stores._core.terms import bm25_score, query_weights
from agents.memory.stores._sql.dialect import SQLITE
from agents.memory.stores._sqlite.schema import MARK

__all__ = ["FTSScorer", "score_rows"]


class FTSScorer:
    """The ``k`` best items of one session by BM25, as ``Memory.search`` scores them, from the FTS5 postings.

    Exact scores come from the terms each row keeps (:meth:`_exact`, summed
    as :func:`~agents.memory.stores._core.terms.bm25_score` sums them, so they
    are the in-RAM index's floats); SQL over the postings (``_score_sql``)
    finds which rows to score, its sums equal to those to float rounding
    (they are compared with a margin of :data:`_MARGIN`).

    Every term counts (Lucene's IDF is above zero for any document
    frequency), so a query's common words would make SQL read most of the
    postings. :meth:`best` reads them only when it must, as MaxScore does:
    the rarest terms are scored first; an item holding none of them scores
    at most the sum of the other terms' upper bounds (:meth:`_bound`), so
    once the ``k``-th best over the rare terms alone beats that sum, only
    the items holding a rare term can make the top ``k``, and only those
    whose rare score plus the bounds for their length can reach it are
    scored in full. One pass over the rare terms' postings finds those items
    (SQL keeps the rows within the others' bound of the ``k``-th); the other
    terms are counted in the terms those rows keep where that reads less
    than their postings (FTS5 walks a term's postings whole, whatever items
    are asked), so a word every item holds is never read (its IDF floor
    keeps rows within reach: :func:`_by_bound` and :func:`_near` prune
    them). Which rare terms go first is chosen by the postings each reads:
    a cheap run of them is tried as it comes, then only the longest run
    within a quarter of the query's postings (a failed try reads them twice).

    Args:
        con: The connection, inside the read transaction the statistics were read in.
        sids: The sessions searched (one, or several ranked as one corpus:
            a store-wide search).
        prefixes: Each session's key and mark, which begin each of its terms in the FTS table.
        terms: The query's terms, with repeats.
        vocab: ``{term: (items holding it, occurrences)}`` in the sessions, for
            the query terms they hold.
        n_items: The sessions' item count.
        total: The sessions' term count.

    Attributes:
        alone: Whether the session is the only one in the FTS5 table (its
            statistics are then the session's own, and a one-term query is
            ranked by FTS5's ``bm25()``); ``False`` unless set.
        lengths_indexed: Whether the session index holds each row's length (schema
            version 9: a word every item holds once ranks by length); ``False`` unless set.
    """

    def __init__(
        self,
        con: sqlite3.Connection,
        sids: Sequence[str],
        prefixes: Sequence[str],
        terms: Sequence[str],
        vocab: dict[str, tuple[int, int]],
        n_items: int,
        total: int,
    ) -> None:
        self.con = con
        self.sids = list(sids)
        self.prefixes = list(prefixes)
        self.many = len(self.sids) > 1
        self.sid = self.sids[0] if not self.many else ", ".join(self.sids)
        self.bound_sids = SQLITE.bind_list(self.sids)
        self.n_items = n_items
        self.average = bm25_average_length(total, n_items)
        self.df = {term: docs for term, (docs, _) in vocab.items()}
        self.held = {term: count for term, (_, count) in vocab.items()}  # postings to read
        self.weighted = query_weights(terms, self.df, n_items)
        repeats = Counter(term for term, _ in self.weighted)
        weights = dict(self.weighted)
        # A term repeated in the query counts once per repeat: SQL multiplies instead.
        self.lifts = {term: repeats[term] * weight for term, weight in weights.items()}
        # The most times one item can hold a term: its occurrences past one per holder, plus one.
        self.most = {term: max(count - docs + 1, 1) for term, (docs, count) in vocab.items()}
        self.order = sorted(weights, key=lambda term: (self.df[term], term))  # rarest first
        self.alone = False  # whether the session is the only one in the FTS5 table
        self.table: tuple[int, int] | None = None  # the FTS5 table's rows and tokens, if known
        self.lengths_indexed = False  # whether the session index holds the rows' lengths

    def best(self, k: int, order: Sequence[str] | None = None) -> list[tuple[float, int]]:
        """Return the ``k`` best ``(score, seq)``, best first, ties by seq.

        With ``order`` (some of the query's terms, rarest first), the best by
        those terms alone; their scores are exact for the items that hold
        none of the other terms.
        """
        order = self.order if order is None else order
        if len(order) > _COLUMN_TERMS:
            # A column per term would pass SQLite's limits on columns and expression depth.
            return self._in_python(k)
        held = sum(self.held[term] for term in order)
        read = list(itertools.accumulate(self.held[term] for term in order))
        for n_rare in range(1, len(order)):
            rare, rest = order[:n_rare], order[n_rare:]
            if _RARE_SHARE * read[n_rare - 1] > held:
                # Past that share of the postings, scoring the rare terms first saves
                # too little of what scoring them all reads to risk reading them twice.
                break
            if _CHEAP * read[n_rare - 1] > held and _RARE_SHARE * read[n_rare] <= held:
                # A failed try costs a pass over the rare postings: past a cheap one, try only
                # the most rare terms the share allows (the others' bound is then the least).
                continue
            rest_most = sum(self._bound(term) for term in rest) * _MARGIN
            if sum(self._bound(term) for term in rare) <= rest_most:
                continue  # no item's rare score can beat what the others may add
            found = self._rare_first(rare, rest, rest_most, k)
            if found is not None:
                return found
        if not (len(order) == 1 and (self.alone or self._lengths_settle(order[0]))):
            found = self._fts5_first(k, order)
            if found is not None:
                return found
        return self._all(k, order)

    def _bound(self, term: str, length: int | None = None) -> float:
        """Return the most ``term`` can add to the score of an item (of ``length`` terms, if known).

        A term's share ``lift * (tf / (tf + flat + slope * length) + floor)`` grows with
        ``tf`` and falls with ``length``, and ``tf <= length``: so it is at
        most its value at ``tf = length = most``, or for a known length at
        ``tf = min(most, length)``.
        """
        most = self.most[term]
        if length is None:
            return bm25_term_score(self.lifts[term], most, most, self.average)
        tf = min(most, length)
        return bm25_term_score(self.lifts[term], tf, length, self.average)

    def _rare_first(
        self, rare: Sequence[str], rest: Sequence[str], rest_most: float, k: int
    ) -> list[tuple[float, int]] | None:
        """Return the ``k`` best from the items holding a ``rare`` term, or ``None`` if that cannot settle them."""
        # The items whose rare score and the others' largest bound can reach the k-th best
        # rare score (no item below can make the k best), in one pass over the postings.
        early: list[tuple[float, int]] = []

        def exact_kth(read: list[Any]) -> float | None:
            # The first rows read scored in full: their k-th raises the cut (see _near).
            if read[0][3] == 1:  # else the index is damaged: _scores says so
                early[:] = self._first(k, self._whole(_rows_alike(read, rare), rest))
            return early[-1][0] if len(early) == k else None

        rows = self._scores(rare, _CANDIDATES_READ, near=(k, rest_most * _MARGIN, exact_kth))
        if len(rows) == _CANDIDATES_READ:
            return None  # too many to score one by one: a rarer term set will come
        if len(rows) < k:
            # Fewer than k items hold a rare term: they and the best by the other
            # terms (whose scores are whole for the items without a rare term).
            few = self._whole(rows, rest)
            taken = {seq for _, seq in few}
            others = [hit for hit in self.best(k + len(few), rest) if hit[1] not in taken]
            return self._first(k, few + others)
        theta = rows[k - 1][1] / _MARGIN
        if len(early) == k:
            theta = max(theta, early[-1][0] / _MARGIN)
        reach = _reaching(rows, theta, rest_most, {seq for _, seq in early}, self._rest_most(rest))

        def whole(rows: list[_Row], best: list[tuple[float, int]]) -> list[tuple[float, int]]:
            return self._first(k, best + self._whole(rows, rest))

        best = _by_bound(reach, theta, k, early, whole)
        if best is None or len(best) < k or rest_most >= best[-1][0] / _MARGIN:
            return None  # an item holding only the other terms may still beat the k-th
        return best

    def _rest_most(self, rest: Sequence[str]) -> Callable[[int], float]:
        """Return the most the terms ``rest`` can add to an item of a given length (with the margin)."""
        return lambda length: sum(self._bound(term, length) for term in rest) * _MARGIN

    def _fts5_first(self, k: int, order: Sequence[str]) -> list[tuple[float, int]] | None:
        """Return the ``k`` best by the terms ``order`` from the items FTS5's ``bm25()`` ranks first, or ``None`` if that cannot settle them.

        FTS5's ``bm25()`` of an item is a sum over the terms matched of
        ``idf5 * (k1 + 1) * tf / (tf + k1 * (1 - b + b * length / average5))``,
        with FTS5's IDF and the FTS table's statistics (:attr:`table`), and
        this library's score over those terms is at most a rising function
        of it (:meth:`_fts5_bound`). FTS5 matches the rarest terms whose
        others' bound is a small share of any of them
        (:data:`_OTHERS_SHARE`: a word most items hold weighs next to
        nothing here, where FTS5's IDF floor makes it weigh as much as any
        other such word); one pass of FTS5 over their postings (a direct
        FTS5 query's cost) ranks the items: the first ``k`` plus
        :data:`_SPARE` of them, and every item tied with the last of those,
        are scored exactly from the terms their rows keep, then the others
        read whose bound reaches the ``k``-th exact score. Once the bound of
        the best item not read falls below it, the ``k`` best are settled;
        else one more pass reads every item whose ``bm25()`` can reach it.
        ``None`` (the caller scores every item) when that passes
        :data:`_CANDIDATES` items, or when fewer than ``k`` items hold a
        term FTS5 matched.
        """
        if self.table is None or self.many or sum(self.held[t] for t in order) < _FTS5_FROM:
            return None
        matched, others = self._fts5_terms(order)
        bound = self._fts5_bound(matched, others)
        if bound is None:
            return None
        ranked, below = self._fts5_near(matched, k + _SPARE)
        if ranked is None:
            return None
        best = self._exact_matched([seq for seq, _ in ranked[: k + _SPARE]], k, order, matched)
        if len(best) < k:
            return best if not others else None
        theta = best[-1][0] / _MARGIN
        if sum(self._bound(term) for term in others) * _MARGIN >= theta:
            return None  # an item holding none of the terms matched may still beat the k-th
        reach = [
            seq for seq, fts5 in ranked[k + _SPARE :] if bound(fts5 * _MARGIN) * _MARGIN >= theta
        ]
        if reach:
            best = self._first(k, best + self._exact_matched(reach, k, order, matched))
            theta = best[-1][0] / _MARGIN
        if below is None or bound(below * _MARGIN) * _MARGIN < theta:
            return best
        cut = _least_reaching(bound, below, theta / _MARGIN)
        if cut is None:
            return None
        more = self._fts5_any(matched, _CANDIDATES + 1, cut=cut / _MARGIN)
        if len(more) > _CANDIDATES:
            return None
        return self._exact_matched([seq for seq, _ in more], k, order, matched)

    def _fts5_terms(self, order: Sequence[str]) -> tuple[list[str], list[str]]:
        """Split ``order`` (rarest first) into the terms FTS5 matches and the others: the fewest rarest whose others' bound is at most :data:`_OTHERS_SHARE` of the least floor among them."""
        for n in range(1, len(order)):
            floor = min(self.lifts[term] for term in order[:n]) * BM25_FLOOR
            if sum(self._bound(term) for term in order[n:]) <= _OTHERS_SHARE * floor:
                return list(order[:n]), list(order[n:])
        return list(order), []

    def _fts5_bound(
        self, matched: Sequence[str], others: Sequence[str]
    ) -> Callable[[float], float] | None:
        """Return the most this library's score can be for an item whose FTS5 ``bm25()`` over ``matched`` is at most the argument (see :func:`_bound_from_fts5`)."""
        if self.table is None:
            return None
        terms = [(self.lifts[term], self.df[term], self._bound(term)) for term in matched]
        others_most = sum(self._bound(term) for term in others)
        return _bound_from_fts5(self.table, self.average, terms, others_most)

    def _all(self, k: int, order: Sequence[str]) -> list[tuple[float, int]]:
        """Return the ``k`` best by the terms ``order``: every item holding one scored in SQL, the best again exactly."""
        once = self._once(order[0]) if len(order) == 1 and not self.many else None
        if once and self._lengths_settle(order[0]):
            return _by_length(self.con, self.sid, once, k)
        by_sql = self.lengths_indexed and self.held[order[0]] < _FTS5_FROM  # SQL reads less
        if len(order) == 1 and self.alone and not by_sql:
            # One term in a table of one session: FTS5's bm25() is its share times a
            # constant (the two IDFs' ratio), the same order at a direct query's cost.
            ranked = self._fts5_any(order, k + _SPARE)
            if len(ranked) == k + _SPARE and ranked[-1][1] >= ranked[k - 1][1] / _MARGIN**2:
                ranked = self._fts5_any(order, -1, cut=ranked[k - 1][1] / _MARGIN**2)
            if len(ranked) > k:
                cut = ranked[k - 1][1] / _MARGIN**2
                ranked = [row for row in ranked if row[1] >= cut]
            if once and len(ranked) > k + _SPARE:
                # Many items tie with the k-th, each holding the term once: their
                # lengths alone settle their scores (no row's terms need reading).
                return _of_lengths(self.con, self.sid, once, [seq for seq, _ in ranked], k)
            return self._exact([seq for seq, _ in ranked], k)
        # Few postings: one pass keeps every item tied with the k-th to rounding (not two).
        few = sum(self.held[t] for t in order) < _FTS5_FROM
        rows = self._scores(order, None, near=(k, 0.0)) if few else self._scores(order, k + _SPARE)
        if len(rows) == k + _SPARE and rows[-1][1] >= rows[k - 1][1] / _MARGIN**2:
            # Items tie with the k-th to rounding past the spare rows: take every one.
            rows = self._scores(order, None, cut=rows[k - 1][1] / _MARGIN**2)
        if len(rows) > k:
            cut = rows[k - 1][1] / _MARGIN**2
            rows = [row for row in rows if row[1] >= cut]
        # The counts are every query term's for the items holding none but these; rows
        # alike share their counts dict (see _scores), scored once.
        exact: dict[tuple[int, int], float] = {}
        scored = []
        for seq, _, length, counts in rows:
            alike = (length, id(counts))
            score = exact.get(alike)
            if score is None:
                score = exact[alike] = bm25_score(counts, length, self.weighted, self.average)
            scored.append((score, seq))
        return self._first(k, scored)

    def _whole(self, rows: Sequence[_Row], rest: Sequence[str]) -> list[tuple[float, int]]:
        """Return ``(score, seq)`` of ``rows`` (scored over some terms) over every query term, exactly.

        The counts of the ``rest`` of the terms come from their FTS5 postings,
        read for these items only.
        """
        if not rows:
            return []
        more: dict[int, dict[str, int]] = {}
        if rest and sum(row[2] for row in rows) < _ROW_WORDS * sum(self.held[t] for t in rest):
            # The rows' own terms cost less to read than the other terms' postings
            # (which FTS5 walks whole, whatever docs are asked).
            more = _counted(self.con, self.bound_sids, rows, rest)
        elif rest:
            names = self._names(rest)
            for doc, name, tf in self.con.execute(
                "SELECT doc, term, count(*) FROM kvmemory_fts_instance"
                " WHERE term IN (SELECT value FROM json_each(?))"
                " AND doc IN (SELECT value FROM json_each(?)) GROUP BY doc, term",
                (SQLITE.bind_list(list(names)), SQLITE.bind_list([row[0] for row in rows])),
            ):
                more.setdefault(int(doc), {})[names[name]] = int(tf)
        out = []
        for seq, _, length, counts in rows:
            extra = more.get(seq)
            held = {**counts, **extra} if extra else counts
            if length < sum(held.values()):
                msg = f"the index holds item {seq}, which session {self.sid!r} does not hold with those terms"
                raise sqlite3.DatabaseError(msg)
            out.append((bm25_score(held, length, self.weighted, self.average), seq))
        return out

    def _scores(
        self,
        terms: Sequence[str],
        limit: int | None,
        cut: float | None = None,
        near: tuple[int, float]
        | tuple[int, float, Callable[[list[Any]], float | None]]
        | None = None,
    ) -> list[_Row]:
        """Return ``(seq, score over terms, length, {term: count})`` of the items holding one of ``terms``, best first.

        ``limit``: the best that many only; ``cut``: those scoring at least
        it only; ``near`` (``(n, slack, exact)``): those scoring at least the
        ``n``-th best score less ``slack`` only (every one, if fewer than
        ``n``), that score raised to what ``exact`` (if given) returns of the
        first rows read, as SQL gives them (see :func:`_near`).
        """
        params: dict[str, object] = {
            "sid": self.sid,
            "sids": self.bound_sids,
            "flat": BM25_K1 * (1.0 - BM25_B),
            "slope": BM25_K1 * BM25_B / self.average,
            "floor": BM25_FLOOR,
            "k": -1 if limit is None or near is not None else limit,
            "cut": cut,
        }
        for j, term in enumerate(terms):
            params[f"term{j}"] = term if self.many else self.prefixes[0] + term
            params[f"lift{j}"] = self.lifts[term]
        if self.many:
            params["names"] = SQLITE.bind_list(list(self._names(terms)))
        sql = _score_sql(len(terms), cut is not None, self.many, self.lengths_indexed)
        cursor = self.con.execute(sql, params)
        rows = cursor.fetchall() if near is None else _near(cursor, *near, limit=limit)
        if rows and rows[0][3] != 1:
            msg = f"the index holds item {rows[0][0]}, which session {self.sid!r} does not hold with those terms"
            raise sqlite3.DatabaseError(msg)
        return _rows_alike(rows, terms)

    def _fts5_any(
        self, matched: Sequence[str], limit: int, cut: float | None = None
    ) -> list[tuple[int, float]]:
        """Return ``(seq, FTS5's bm25() negated)`` of the items holding a term of ``matched``, best first (ties by seq).

        ``limit``: the best that many only (``-1``: all); ``cut``: those scoring at least it only.
        """
        params = (self._match(matched), math.inf if cut is None else -cut, limit)
        return [(int(seq), -float(score)) for seq, score in self.con.execute(_BM25, params)]

    def _fts5_near(
        self, matched: Sequence[str], n: int
    ) -> tuple[list[tuple[int, float]] | None, float | None]:
        """Return ``(seq, FTS5's bm25() negated)`` of the ``n`` items holding a term of ``matched`` that FTS5 ranks first and of every item tied with the ``n``-th, best first (ties by seq), then the best score of the items left out (``None`` if none is).

        One pass over the postings. ``(None, None)`` if that is more than :data:`_CANDIDATES` items.
        """
        params = {
            "match": self._match(matched),
            "nth": n - 1,
            "margin": _MARGIN,
            "cap": _CANDIDATES + 1,
        }
        rows = self.con.execute(_FTS5_NEAR, params).fetchall()
        if len(rows) > _CANDIDATES:
            return None, None
        below = rows[0][2] if rows else None
        return [(int(seq), float(score)) for seq, score, _ in rows], below

    def _match(self, terms: Sequence[str]) -> str:
        """Return the FTS5 query matching any of ``terms`` in the session (each once)."""
        return " OR ".join(f'"{self.prefixes[0]}{term}"' for term in dict.fromkeys(terms))

    def _exact(
        self, seqs: Sequence[int], k: int, order: Sequence[str] | None = None
    ) -> list[tuple[float, int]]:
        """Return the ``k`` best ``(score, seq)`` of the items ``seqs``, scored over the terms ``order`` (default: all) from the terms their rows keep."""
        if not seqs:
            return []
        rows = self.con.execute(
            "SELECT seq, n_terms, terms FROM kvmemory_items WHERE seq IN (SELECT value FROM"
            " json_each(?)) AND session_id IN (SELECT value FROM json_each(?))",
            (SQLITE.bind_list(list(seqs)), self.bound_sids),
        ).fetchall()
        if len(rows) != len(seqs):
            held = {row[0] for row in rows}
            seq = next(seq for seq in seqs if seq not in held)
            msg = f"the index holds item {seq}, which session {self.sid!r} does not hold"
            raise sqlite3.DatabaseError(msg)
        patterns = _patterns(self.order if order is None else order)
        scored = []
        for seq, length, text in rows:
            counts = _counts(text, patterns)
            if not counts:
                msg = f"the index holds item {seq} for a query term its row does not hold"
                raise sqlite3.DatabaseError(msg)
            scored.append((bm25_score(counts, length, self.weighted, self.average), seq))
        return self._first(k, scored)

    def _exact_matched(
        self, seqs: Sequence[int], k: int, order: Sequence[str], matched: Sequence[str]
    ) -> list[tuple[float, int]]:
        """Return :meth:`_exact` of items FTS5 matched for ``matched``, from their lengths where those settle it.

        They do when one term was matched and every item holding a term of
        ``order`` holds it once, the others held by every item: each item
        then holds each term once ("WINWORD.EXE": 2,667 items tied, whose
        terms are 120 words each).
        """
        once = len(matched) == 1 and all(self.most[term] == 1 for term in order)
        if not once or any(self.df[term] != self.n_items for term in order if term != matched[0]):
            return self._exact(seqs, k, order)
        held = dict.fromkeys(order, 1)
        return _of_lengths(
            self.con, self.sid, lambda n: bm25_score(held, n, self.weighted, self.average), seqs, k
        )

    def _lengths_settle(self, term: str) -> bool:
        """Whether every item of the one session searched holds ``term`` once and the session index holds their lengths (:func:`_by_length` ranks it)."""
        sole = self.lengths_indexed and not self.many and self.most[term] == 1
        return sole and self.df[term] == self.n_items

    def _once(self, term: str) -> Callable[[int], float] | None:
        """Return the score by ``term`` of an item of a given length holding it once (as :meth:`_exact` sums it), or ``None`` if an item holds it more than once."""
        once = self.most[term] == 1
        return (lambda n: bm25_score({term: 1}, n, self.weighted, self.average)) if once else None

    def _first(self, k: int, scored: Sequence[tuple[float, int]]) -> list[tuple[float, int]]:
        """Return the ``k`` best ``(score, seq)``, best first: ties by seq, or over several sessions by session id, then seq.

        A store's seqs rise in commit order across its sessions, so over
        several sessions the items tied with the ``k``-th are ordered by
        their session's place among the sessions searched (read for those
        items only), as one memory holding the sessions in id order would.
        """
        best = heapq.nsmallest(k, scored, key=_best_first)
        if not self.many or len(scored) <= k:
            return best
        last = best[-1][0]
        tied = [seq for score, seq in scored if score == last]
        if len(tied) < 2:
            return best
        place = {sid: position for position, sid in enumerate(sorted(self.sids))}
        owner = {
            int(seq): place[sid]
            for seq, sid in self.con.execute(
                "SELECT seq, session_id FROM kvmemory_items WHERE seq IN (SELECT value FROM json_each(?))",
                (SQLITE.bind_list(tied),),
            )
        }
        return heapq.nsmallest(k, scored, key=lambda hit: (-hit[0], owner.get(hit[1], -1), hit[1]))

    def _names(self, terms: Sequence[str]) -> dict[str, str]:
        """Return ``{term as the FTS table files it: term}`` of ``terms`` in every session searched."""
        return {prefix + term: term for prefix in self.prefixes for term in terms}

    def _in_python(self, k: int) -> list[tuple[float, int]]:
        """Return the best ``k`` ``(score, seq)``, for any number of terms: counts from SQL, scores in Python.

        One query counts each query term in each item holding one (the FTS5
        postings, as :meth:`_scores` reads them); the scores are summed here
        as :meth:`_exact` sums them.
        """
        names = self._names(self.order)
        held: dict[int, dict[str, int]] = {}
        for doc, name, tf in self.con.execute(
            "SELECT doc, term, count(*) FROM kvmemory_fts_instance"
            " WHERE term IN (SELECT value FROM json_each(?)) GROUP BY doc, term",
            (SQLITE.bind_list(list(names)),),
        ):
            held.setdefault(int(doc), {})[names[name]] = int(tf)
        if not held:
            return []
        lengths = {
            int(seq): int(n)
            for seq, n in self.con.execute(
                "SELECT seq, n_terms FROM kvmemory_items WHERE seq IN (SELECT value FROM"
                " json_each(?)) AND session_id IN (SELECT value FROM json_each(?))",
                (SQLITE.bind_list(list(held)), self.bound_sids),
            )
        }
        scored = []
        for seq, counts in held.items():
            length = lengths.get(seq)
            if length is None or length < sum(counts.values()):
                msg = f"the index holds item {seq}, which session {self.sid!r} does not hold with those terms"
                raise sqlite3.DatabaseError(msg)
            scored.append((bm25_score(counts, length, self.weighted, self.average), seq))
        return self._first(k, scored)


def _counted(
    con: sqlite3.Connection, bound_sids: object, rows: Sequence[_Row], terms: Sequence[str]
) -> dict[int, dict[str, int]]:
    """Return ``{seq: {term: count}}`` of ``terms`` in ``rows`` (of the sessions ``bound_sids``, a JSON list), from the terms each row keeps (those holding none left out)."""
    patterns = _patterns(terms)
    out: dict[int, dict[str, int]] = {}
    for seq, text in con.execute(
        "SELECT seq, terms FROM kvmemory_items WHERE seq IN (SELECT value FROM json_each(?))"
        " AND session_id IN (SELECT value FROM json_each(?))",
        (SQLITE.bind_list([row[0] for row in rows]), bound_sids),
    ):
        counts = _counts(text, patterns)
        if counts:
            out[int(seq)] = counts
    return out


def _near(
    cursor: sqlite3.Cursor,
    n: int,
    slack: float,
    raise_cut: Callable[[list[Any]], float | None] | None = None,
    *,
    limit: int | None,
) -> list[Any]:
    """Return the rows of ``cursor`` (``_score_sql``'s: unsound first, then best first) through the ``n``-th sound one, then those scoring at least its score less ``slack`` (all, if fewer than ``n``); at most ``limit``.

    The ``n``-th's score is lowered by the margin twice (the caller's cut is
    lowered by it once). The rows are read only as far as the cut: SQLite
    sorts the scored rows once, where a statement that found the ``n``-th
    itself sorted them twice (the 618 items holding one of "92 66 71",
    20,000 steps: 1.26 ms of CPU against 1.58-1.75 ms). Once ``n`` plus
    :data:`_SPARE` sound rows are read, ``raise_cut`` of them (if given: a
    score some ``n`` items reach, or ``None``) raises the ``n``-th's score
    if above it: :meth:`FTSScorer._rare_first` scores those rows over every
    query term, whose ``n``-th is at least the ``n``-th over the rare terms.
    """
    rows: list[Any] = []
    cut = None
    sound = 0
    for row in cursor:
        if row[3] == 1:
            if cut is not None and row[1] < cut:
                break
            sound += 1
            if sound == n:
                cut = row[1] / _MARGIN / _MARGIN - slack
        rows.append(row)
        if raise_cut is not None and sound == n + _SPARE and row[3] == 1:
            higher = raise_cut(rows)
            if higher is not None and cut is not None:
                cut = max(cut, higher / _MARGIN / _MARGIN - slack)
        if len(rows) == limit:
            break
    cursor.close()
    return rows


def _reaching(
    rows: Sequence[_Row],
    theta: float,
    rest_most: float,
    done: set[int],
    most_at: Callable[[int], float],
) -> list[tuple[float, _Row]]:
    """Return ``(bound, row)`` of the ``rows`` (scored over the rare terms) not ``done`` whose score plus the most the other terms can add (``rest_most``, or ``most_at`` their length) reaches ``theta``."""
    bounds: dict[int, float] = {}
    reach = []
    for row in rows:
        seq, score, length, _ = row
        if score + rest_most < theta or seq in done:
            continue
        most = bounds.get(length)
        if most is None:
            most = bounds[length] = most_at(length)
        if score + most >= theta:
            reach.append((score + most, row))
    return reach


def _by_bound(
    reach: list[tuple[float, _Row]],
    theta: float,
    k: int,
    best: list[tuple[float, int]],
    whole: Callable[[list[_Row], list[tuple[float, int]]], list[tuple[float, int]]],
) -> list[tuple[float, int]] | None:
    """Return the ``k`` best ``(score, seq)`` of the rows of ``reach`` (``(bound, row)``, the most each can score) scored in full by ``whole`` (of some rows and the best so far), or ``None`` past :data:`_CANDIDATES` rows.

    The rows are scored best bound first, a batch at a time (the first
    ``k`` plus :data:`_SPARE`, each next :data:`_BATCH_GROWTH` times the
    last): the ``k``-th exact score (at least ``theta``, the ``k``-th over
    the rare terms) rises, and the rows whose bound falls below it are never
    read. The words most items hold weigh at least the IDF floor
    (``keyword_idf``), so their bound lifts most rows holding a rare term
    near the ``k``-th: crowded-steps at 20,000 steps scores 117 rows a query
    (mean) of the 963 within the bound, where scoring all cost 2.6x the CPU.
    """
    reach.sort(key=lambda pair: -pair[0])
    done, batch = 0, k + _SPARE
    while done < len(reach) and reach[done][0] >= theta:
        if min(done + batch, len(reach)) > _CANDIDATES:
            return None  # more rows than are scored one by one (counted, not rounded up to a batch)
        best = whole([row for _, row in reach[done : done + batch]], best)
        done += batch
        batch *= _BATCH_GROWTH
        if len(best) == k:
            theta = max(theta, best[-1][0] / _MARGIN)
    return best


def _rows_alike(rows: Sequence[Sequence[Any]], terms: Sequence[str]) -> list[_Row]:
    """Return ``(seq, score, length, {term: count})`` of rows of ``_score_sql`` (seq, score, length, sound, one count per term).

    Rows alike in length and counts (ties: hundreds, for a query of numbers)
    share one counts dict, built once (the callers only read it).
    """
    shared: dict[tuple[object, ...], dict[str, int]] = {}
    out = []
    for row in rows:
        alike = tuple(row[2:])
        counts = shared.get(alike)
        if counts is None:
            counts = shared[alike] = {
                term: int(tf) for term, tf in zip(terms, row[4:], strict=True) if tf
            }
        out.append((int(row[0]), float(row[1]), int(row[2]), counts))
    return out


def _by_length(
    con: sqlite3.Connection, sid: str, score: Callable[[int], float], k: int
) -> list[tuple[float, int]]:
    """Return the ``k`` best ``(score, seq)`` of a session whose every item holds a term once, from the items' lengths alone.

    The term's postings say so (its document frequency is the item count,
    its occurrences as many), so an item's score is ``score`` of its length
    and no posting needs reading: one pass over the session index (which
    holds the lengths from schema version 9) counts the items of each
    length, another reads the first seqs of the best lengths.

    Raises:
        sqlite3.DatabaseError: if an item holds no term (the postings and the rows disagree).
    """
    counted = con.execute(_LENGTHS, (sid,)).fetchall()
    if any(length < 1 for length, _ in counted):
        msg = f"the index holds every item of session {sid!r} for a query term, and one of them holds no term"
        raise sqlite3.DatabaseError(msg)
    of = {int(length): score(int(length)) for length, _ in counted}
    held: dict[float, int] = {}
    for length, n in counted:
        held[of[int(length)]] = held.get(of[int(length)], 0) + int(n)
    best: list[tuple[float, int]] = []
    for value in sorted(held, reverse=True):  # each score's first items by seq, best first
        lengths = [length for length, scored in of.items() if scored == value]
        bound = (sid, SQLITE.bind_list(lengths), k - len(best))
        best.extend((value, int(seq)) for (seq,) in con.execute(_OF_LENGTHS, bound))
        if len(best) >= k:
            break
    return best


def _of_lengths(
    con: sqlite3.Connection,
    sid: str,
    score: Callable[[int], float],
    seqs: Sequence[int],
    k: int,
) -> list[tuple[float, int]]:
    """Return the ``k`` best ``(score, seq)`` of the session's items ``seqs``, each holding a term once, from their lengths (``score`` of each, ties by seq).

    The lengths are read from the session index (schema version 9; an
    older file read-only reads its rows), each length scored once.
    """
    lengths = dict(con.execute(_SEQ_LENGTHS, (sid, SQLITE.bind_list(list(seqs)))).fetchall())
    of: dict[int, float] = {}
    scored = []
    for seq in seqs:
        length = lengths.get(seq)
        if length is None or length < 1:
            msg = (
                f"the index holds item {seq}, which session {sid!r} does not hold with those terms"
            )
            raise sqlite3.DatabaseError(msg)
        if length not in of:
            of[length] = score(int(length))
        scored.append((of[length], seq))
    return heapq.nsmallest(k, scored, key=_best_first)


def _patterns(terms: Sequence[str]) -> list[tuple[str, str, str]]:
    """Return each distinct term of ``terms`` with what :func:`_counts` looks for: itself between spaces, and twice in a row."""
    return [(term, f" {term} ", f" {term} {term} ") for term in dict.fromkeys(terms)]


def _counts(text: str, patterns: Sequence[tuple[str, str, str]]) -> dict[str, int]:
    """Return how many times a row's kept terms (``text``, joined by spaces) hold each term of ``patterns``, those held only.

    ``str.count`` of the term between spaces, which reads the text in C
    without splitting it (three times faster over 170 terms); where the
    term stands twice in a row (the two share a space, and ``count``
    counts the first only), the words are counted one by one.
    """
    padded = f" {text} "
    counts = {}
    for term, once, twice in patterns:
        n = padded.count(once)
        if n:
            counts[term] = text.split(" ").count(term) if twice in padded else n
    return counts


def _bound_from_fts5(
    table: tuple[int, int],
    average: float,
    terms: Sequence[tuple[float, int, float]],
    others_most: float,
) -> Callable[[float], float] | None:
    """Return the most an item's score can be given its FTS5 ``bm25()`` (negated) over some query terms.

    A term's saturation ``tf / (tf + k1 * (1 - b) + k1 * b * length /
    average)`` is at most ``max(1, average / average5)`` times FTS5's (the
    two differ only in the average length), and at most its value at the
    most times one item holds the term; so the score over the terms FTS5
    matched is at most a fractional knapsack (FTS5's score spent on the
    terms whose share it lifts most, up to each term's largest share) plus
    every term's floor, and the other terms add at most ``others_most``.

    Args:
        table: The FTS5 table's rows and tokens (its ``bm25()`` statistics).
        average: The session's average length.
        terms: Each term FTS5 matched: ``(lift, document frequency, bound)``
            (:meth:`FTSScorer._bound`, with its floor).
        others_most: The most the query's other terms can add.

    Returns:
        The bound as a function of FTS5's score, or ``None`` if the table holds no term.
    """
    rows, tokens = table
    if rows <= 0 or tokens <= 0:
        return None
    lift_most = max(1.0, average / bm25_average_length(tokens, rows))
    fixed = others_most
    shares = []  # (this library's share per unit of FTS5's, the most that term's share can be)
    for lift, df, most in terms:
        fixed += lift * BM25_FLOOR
        idf5 = _fts5_idf(rows, df)
        shares.append((lift * lift_most / (idf5 * (BM25_K1 + 1.0)), most - lift * BM25_FLOOR))
    shares.sort(reverse=True)

    def bound(fts5: float) -> float:
        score, left = 0.0, fts5
        for per, most in shares:
            spent = min(left, most / per)
            score += per * spent
            left -= spent
            if left <= 0.0:
                break
        return score + fixed

    return bound


def _fts5_idf(rows: int, df: int) -> float:
    """Return FTS5's IDF of a term ``df`` of the FTS table's ``rows`` hold, as its ``bm25()`` computes it (``1e-6`` where the logarithm is not above zero)."""
    idf = math.log((rows - df + 0.5) / (df + 0.5))
    return idf if idf > 0.0 else 1e-6


def _least_reaching(bound: Callable[[float], float], high: float, theta: float) -> float | None:
    """Return an FTS5 score below which ``bound`` stays under ``theta`` (between 0 and ``high``), or ``None`` if even 0 may reach it."""
    if bound(0.0) * _MARGIN >= theta:
        return None
    low = 0.0
    for _ in range(60):  # bisection: the bound is piecewise linear and rising
        middle = (low + high) / 2
        if bound(middle * _MARGIN) * _MARGIN < theta:
            low = middle
        else:
            high = middle
    return low


def score_rows(
    rows: Sequence[tuple[int, int, str]],
    terms: Sequence[str],
    df: dict[str, int],
    n_items: int,
    total: int,
) -> list[tuple[float, int]]:
    """Return ``(score, seq)`` of the rows holding a query term, best first (ties by seq), from the terms they keep.

    Args:
        rows: ``(seq, n_terms, terms)`` as ``kvmemory_items`` keeps them
            (``terms``: the row's terms joined by spaces, repeats kept).
        terms: The query's terms, with repeats.
        df: Each query term's document frequency in the session (terms no
            item holds may be left out).
        n_items: The session's item count.
        total: The session's term count.

    Returns:
        The scores :class:`FTSScorer` gives the same rows (the same sums, in
        the same order, of the same weights).
    """
    weighted = query_weights(terms, df, n_items)
    average = bm25_average_length(total, n_items)
    scored = []
    for seq, length, text in rows:
        held = Counter(text.split(" "))
        counts = {term: held[term] for term in df if term in held}
        if counts:
            scored.append((bm25_score(counts, int(length), weighted, average), int(seq)))
    return sorted(scored, key=_best_first)


_Row = tuple[int, float, int, dict[str, int]]
"""An item SQL scored: ``(seq, score over some terms, length, {term: count} of those terms)``."""


def _best_first(hit: tuple[float, int]) -> tuple[float, int]:
    """Sort key of ``(score, seq)``: the higher score first, then the lower seq."""
    return -hit[0], hit[1]


_LENGTHS: Final = (
    "SELECT n_terms, count(*) FROM kvmemory_items WHERE session_id = ? GROUP BY n_terms"
)
"""How many items of a session have each length."""
_OF_LENGTHS: Final = (
    "SELECT seq FROM kvmemory_items WHERE session_id = ?"
    " AND n_terms IN (SELECT value FROM json_each(?)) ORDER BY seq LIMIT ?"
)
"""The first items by seq of a session whose length is one of some lengths."""
_SEQ_LENGTHS: Final = (
    "SELECT seq, n_terms FROM kvmemory_items WHERE session_id = ?"
    " AND seq IN (SELECT value FROM json_each(?))"
)
"""The lengths of some items of a session."""
_COLUMN_TERMS: Final = 256
"""The most distinct query terms scored in SQL with a column each; more are scored by :meth:`FTSScorer._in_python`."""
_MARGIN: Final = 1.0 + 1e-9
"""How far SQL's sums may be from the exact ones, as a ratio (they differ by float rounding)."""
_CANDIDATES: Final = 16_384
"""The most items :meth:`FTSScorer._rare_first` scores in full before it tries with one more rare term."""
_BATCH_GROWTH: Final = 4
"""How many times larger each batch :meth:`FTSScorer._rare_first` scores in full is than the last (the first: ``k`` plus :data:`_SPARE`)."""
_CANDIDATES_READ: Final = 4 * _CANDIDATES
"""The most items :meth:`FTSScorer._rare_first` reads whose rare score, plus the others' largest bound, reaches the ``k``-th."""
_ROW_WORDS: Final = 2
"""A row's kept term costs about this many times less to read than an FTS5 posting (12,715 rows of 100,000, two common terms: 200-320 ms from the rows, 330-540 ms from the postings)."""
_RARE_SHARE: Final = 4
"""Rare terms are scored first (MaxScore) while their postings are at most one in this many of the query's."""
_CHEAP: Final = 64
"""Rare terms whose postings are at most one in this many of the query's are tried first whatever the others' bound; past that, only the longest run of rare terms within :data:`_RARE_SHARE`."""
_FTS5_FROM: Final = 4096
"""The fewest postings of a query's terms for which :meth:`FTSScorer._fts5_first` ranks by FTS5's ``bm25()`` first (below, SQL reads them all for less)."""
_OTHERS_SHARE: Final = 0.01
"""The most the terms FTS5 does not match may add, as a share of the least floor of those it matches (:meth:`FTSScorer._fts5_terms`)."""
_SPARE: Final = 64
"""Rows past the ``k``-th that :meth:`FTSScorer._all` reads, to catch the items that tie with it to rounding."""


# BM25 of the items holding a query term, from the FTS5 postings (the session's own,
# by their prefix): one pass over the query terms' occurrences counts each term's tf
# per item, and each term's lift (its IDF times k1 + 1, times its repeats in the
# query) is bound as a value. "sound" is 0 when the index names an item the session
# does not hold (or not with that many terms): such rows sort first and are refused.
def _score_sql(n_terms: int, cut: bool = False, many: bool = False, lengths: bool = False) -> str:
    terms = range(n_terms)
    # Over several sessions (many), each posting's term is compared without its session's
    # prefix (the key and the mark, which no term holds), and the rows may be any of theirs.
    counts = ", ".join(
        f"count(*) FILTER (WHERE w = :term{j}) AS tf{j}"
        if many
        else f"count(*) FILTER (WHERE j = {j}) AS tf{j}"
        for j in terms
    )
    score = " + ".join(
        f"(CASE WHEN t.tf{j} THEN :lift{j} * (t.tf{j}"
        f" / (t.tf{j} + :flat + :slope * i.n_terms) + :floor) ELSE 0.0 END)"
        for j in terms
    )
    held = " + ".join(f"t.tf{j}" for j in terms)
    tfs = ", ".join(f"t.tf{j}" for j in terms)
    postings = (
        f"(SELECT doc, substr(term, instr(term, '{MARK}') + 1) AS w FROM kvmemory_fts_instance"
        " WHERE term IN (SELECT value FROM json_each(:names)))"
        if many
        # One term a branch: FTS5's vocabulary table reads a term it is given as equal
        # once (an IN list costs 1.7x: 1,239 postings of three terms, 1.19 ms against 0.70).
        else "("
        + " UNION ALL ".join(
            f"SELECT doc, {j} AS j FROM kvmemory_fts_instance WHERE term = :term{j}" for j in terms
        )
        + ")"
    )
    session = (
        "i.session_id IN (SELECT value FROM json_each(:sids))" if many else "i.session_id = :sid"
    )
    # With the lengths in the session index (schema version 9), the rows' n_terms are read
    # from it (3-4x less time: the rows' terms and data lie on overflow pages).
    items = (
        "kvmemory_items AS i INDEXED BY kvmemory_items_session ON i.session_id = :sid AND"
        if lengths and not many
        else "kvmemory_items AS i ON"
    )
    scored = f"""
    SELECT t.doc, {score} AS score, i.n_terms,
        coalesce({session} AND i.n_terms >= {held}, 0) AS sound, {tfs}
    FROM (
        SELECT doc, {counts} FROM {postings} GROUP BY doc
    ) AS t LEFT JOIN {items} i.seq = t.doc
"""
    return f"""
SELECT * FROM ({scored}) {"WHERE sound = 0 OR score >= :cut" if cut else ""}
ORDER BY sound, score DESC, doc
LIMIT :k
"""


# FTS5's own BM25 of one term's items, best first (ties by rowid, as BM25 ties keep seq order).
_BM25: Final = (
    "SELECT * FROM (SELECT rowid, bm25(kvmemory_fts) AS score FROM kvmemory_fts"
    " WHERE kvmemory_fts MATCH ?) WHERE score <= ? ORDER BY score, rowid LIMIT ?"
)


# Every item holding a query term scored by FTS5's bm25() (negated), in one pass: the n best
# (ranked by score, then rowid) and those tied with the nth to rounding, with the best score
# of the rest (NULL if none) on each row.
_FTS5_NEAR: Final = """
WITH s AS MATERIALIZED (
    SELECT rowid AS doc, -bm25(kvmemory_fts) AS score FROM kvmemory_fts
    WHERE kvmemory_fts MATCH :match
), t AS MATERIALIZED (
    SELECT coalesce((SELECT score FROM s ORDER BY score DESC LIMIT 1 OFFSET :nth)
        / :margin / :margin, -1e308) AS cut
)
SELECT doc, score, (SELECT max(score) FROM s WHERE score < (SELECT cut FROM t))
FROM s WHERE score >= (SELECT cut FROM t)
ORDER BY score DESC, doc
LIMIT :cap
"""
