"""The keyword ranking a store hands a plain ``Memory`` it read whole (``Store.read_memory``).

The store's keyword index holds what a memory read from it needs for its
first query, exactly consistent with the rows read while the session is
unchanged: :class:`HandedRanking` asks the store's ranking
(``Store.ranking_at``, with the version read with the rows) and maps each
ranked row to the memory's item by its seq. The memory's search index asks
it (``SearchIndex.take_ranking``) till its own postings are in; a change of
the memory drops it there, a change of the session (by any handle or
process) or a closed store makes it answer ``None``, and the index ranks by
itself from then on.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_left
from collections.abc import Callable, Hashable, Sequence

from agents.memory._text import Tokenizer
from agents.memory.exceptions import StoreError

__all__ = ["HandedRanking"]

_TOKENIZER = Tokenizer()

RankingAt = Callable[[str, str, int, Hashable], "list[tuple[int, float]] | None"]
"""``Store.ranking_at`` as ``(session_id, query, k, version)``."""


class HandedRanking:
    """A store's keyword ranking of a session, by the places of its rows among those read (a ``SearchIndex`` ``RankingSource``).

    Args:
        ranking_at: The store's ``ranking_at``.
        session_id: The session read.
        seqs: The seqs of the rows read, ascending (the memory's items, in its order).
        version: ``Store.keyword_version`` of the session as it was read.
    """

    def __init__(
        self, ranking_at: RankingAt, session_id: str, seqs: Sequence[int], version: Hashable
    ) -> None:
        self._ranking_at = ranking_at
        self._sid = session_id
        self._seqs = seqs
        self._version = version
        # The store's ranking (PostgreSQL's posting blocks) and the build ahead its first answer
        # starts use numpy: imported with the read, not inside the first query (at 100,000
        # steps from PostgreSQL, 50 of that query's 65 ms of CPU, 0.1-0.4 s of wall time).
        with contextlib.suppress(ImportError):
            import numpy  # noqa: F401  (optional: imported for its side effect, loading it)

    def __call__(self, terms: Sequence[str], k: int) -> list[tuple[int, float]] | None:
        """Return ``(place, score)`` of the store's ``k`` best rows for ``terms``, or ``None`` where the session changed, the store closed or failed.

        ``place`` is the row's among the seqs read. ``None`` also for terms
        the default tokenizer would not give back from their join (the
        store ranks a query string).
        """
        query = " ".join(terms)
        if _TOKENIZER(query) != list(terms):
            return None
        try:
            ranked = self._ranking_at(self._sid, query, k, self._version)
        except StoreError:  # closed, or failing: the memory ranks its own items
            return None
        if ranked is None:
            return None
        seqs = self._seqs
        out = []
        for seq, score in ranked:
            place = bisect_left(seqs, seq)
            if place == len(seqs) or seqs[place] != seq:
                return None  # a row not read: never at the version read
            out.append((place, score))
        return out
