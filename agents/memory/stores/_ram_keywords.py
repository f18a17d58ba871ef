"""The keyword index of an in-process (``memory://``) session: each row's terms, and BM25 postings over them.

Every write hands the backend each row's search terms (``item_terms``: the
terms ``Memory.search`` counts, joined by spaces). :class:`SessionKeywords`
keeps them by seq and, from the session's first keyword query on, the
postings of the search room's ``KeywordPostings`` filed from them, kept
current by every later write: an append files its rows, an update files
the new terms in place of the old, a delete takes the rows out. Every
handle of one ``memory://NAME`` shares the session, so a write by one is
in the next query of another. A query ranks those postings with the code
that ranks ``Memory.search``'s (the numpy ranker, or every item holding a
term without numpy), so the hits and the floats are the same.

A write rolled back puts the terms back and drops the postings; the next
query files them again from the terms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agents.memory.search._postings import KeywordPostings
from agents.memory.stores._core.terms import KeywordMatch, Terms, held_by_row, rank_matches

__all__ = ["SessionKeywords", "rank_sessions"]

Undo = Callable[[], None]


class SessionKeywords:
    """The search terms of one ``memory://`` session's rows, and the postings filed from them once searched.

    Not thread-safe: the backend calls it under its space's lock.

    Attributes:
        terms: Each row's terms joined by spaces, by seq (every row of the session).
    """

    def __init__(self) -> None:
        self.terms: dict[int, str] = {}
        self._postings: KeywordPostings | None = None

    # -- writes: each returns how to undo it ----------------------------------------------

    def inserted(self, seqs: Sequence[int], terms: Sequence[Terms]) -> Undo:
        """Keep the terms of rows just inserted (and file them, once searched)."""
        rows = [(seq, text) for seq, (text, _) in zip(seqs, terms, strict=True)]
        self.terms.update(rows)
        if self._postings is not None:
            self._postings.file_spaced(rows)

        def undo() -> None:
            for seq, _ in rows:
                self.terms.pop(seq, None)
            self._postings = None

        return undo

    def updated(self, rows: Sequence[tuple[int, Terms]]) -> Undo:
        """Keep the new terms of rows just updated in place of their old ones."""
        old = {seq: self.terms[seq] for seq, _ in rows}
        new = [(seq, text) for seq, (text, _) in rows]
        self.terms.update(new)
        postings = self._postings
        if postings is not None:
            for seq, _ in new:
                postings.unfile(seq, str.split)
            postings.file_spaced(new)

        def undo() -> None:
            self.terms.update(old)
            self._postings = None

        return undo

    def deleted(self, seqs: Sequence[int]) -> Undo:
        """Forget the terms of rows just deleted (a seq the session does not hold is ignored)."""
        gone = {seq: self.terms.pop(seq) for seq in seqs if seq in self.terms}
        postings = self._postings
        if postings is not None:
            for seq in gone:
                postings.unfile(seq, str.split)

        def undo() -> None:
            self.terms.update(gone)
            self._postings = None

        return undo

    def cleared(self) -> Undo:
        """Forget every row's terms."""
        gone = self.terms
        self.terms = {}
        self._postings = None

        def undo() -> None:
            self.terms = {**gone, **self.terms}
            self._postings = None

        return undo

    # -- queries ---------------------------------------------------------------------------

    def postings(self) -> KeywordPostings:
        """Return the postings of every row, filed in seq order by the first query that asks."""
        postings = self._postings
        if postings is None:
            postings = self._postings = KeywordPostings()
            postings.file_spaced(sorted(self.terms.items()))
        return postings

    def top(self, terms: Sequence[str], k: int) -> list[tuple[float, int]]:
        """Return the ``k`` best ``(score, seq)`` by BM25, ties by seq: ``Memory.search``'s ranking (``Backend.keyword_top``)."""
        postings = self.postings()
        query, lengths, average = postings.query_terms(terms, None, len(self.terms), str.split)
        if not query:
            return []
        return [(score, seq) for seq, score in postings.top(query, None, lengths.of, average, k)]

    def among(self, terms: Sequence[str], seqs: Sequence[int]) -> list[tuple[float, int]]:
        """Return ``(score, seq)`` of the rows among ``seqs`` holding a query term, with the session's statistics, best first (``Backend.keyword_among``)."""
        postings = self.postings()
        query, lengths, average = postings.query_terms(terms, None, len(self.terms), str.split)
        chosen = set(seqs)
        if not query or not chosen:
            return []
        ranked = postings.top_among(query, chosen, lengths.of, average, len(chosen))
        return [(score, seq) for seq, score in ranked]

    def held(self, terms: Sequence[str], seqs: Sequence[int]) -> dict[int, set[str]]:
        """Return the terms among ``terms`` each row among ``seqs`` holds, by seq (``Backend.keyword_held``)."""
        postings = self.postings().postings
        return held_by_row(
            ((term, postings.get(term) or ()) for term in dict.fromkeys(terms)), seqs
        )

    def frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        """Return how many rows hold each of ``terms`` (``Backend.keyword_frequencies``)."""
        held = self.postings().postings
        return {term: len(held.get(term) or ()) for term in dict.fromkeys(terms)}


def rank_sessions(
    sessions: Sequence[SessionKeywords], terms: Sequence[str], k: int
) -> list[tuple[float, int, int]]:
    """Return the ``k`` best ``(score, number, seq)`` over several sessions ranked as one, ``number`` the session's place in ``sessions``.

    The statistics (rows, their terms in all, each term's rows) are those of
    all the sessions together; ties go by place, then seq
    (``Backend.keyword_top_sessions``).
    """
    distinct = list(dict.fromkeys(terms))
    span = 1 + max((max(session.terms, default=0) for session in sessions), default=0)
    n_items = total = 0
    matches: list[KeywordMatch] = []
    for number, session in enumerate(sessions):
        postings = session.postings()
        n_items += len(session.terms)
        total += postings.total
        found: dict[int, dict[str, int]] = {}
        for term in distinct:
            for seq, tf in (postings.postings.get(term) or {}).items():
                found.setdefault(seq, {})[term] = tf
        lengths = postings.lengths.of
        matches += [(number * span + seq, lengths[seq], counts) for seq, counts in found.items()]
    return [
        (score, key // span, key % span)
        for score, key in rank_matches(n_items, total, matches, terms, k)
    ]
