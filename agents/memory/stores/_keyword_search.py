"""Keyword search of a stored session: BM25 from the backend's index, or over the session read a page at a time.

The ranking is the one ``Memory.search`` gives for the same items. A backend
that keeps a keyword index answers :meth:`Backend.keyword_top` and only the
hits are read; otherwise (and for a search of some fields) the session is
read a page at a time and scored in Python
(:func:`~agents.memory.stores._keyword.rank_pages`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from agents.memory._item import MemoryItem, OnUnknownClass
from agents.memory._text import BM25_B, BM25_K1, MIN_IDF, bm25_idf
from agents.memory._vectors import keyword_scale
from agents.memory.stores._engine import Engine
from agents.memory.stores._keyword import keyword_matches, keyword_query, rank_pages
from agents.memory.stores._values import StoreHit

__all__ = ["KeywordSearch"]


class KeywordSearch:
    """The keyword side of a store's search calls, over its :class:`Engine`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def search(
        self,
        sid: str,
        query: str,
        k: int,
        keys: Iterable[str] | None,
        on_unknown_class: OnUnknownClass,
    ) -> list[StoreHit]:
        """Return the ``k`` best hits by BM25, best first (``Store.search`` in keyword mode)."""
        terms, fields = keyword_query(query, k, keys)
        engine = self._engine
        with engine.errors("search", sid):
            best, found = self.top(sid, terms, fields, k, on_unknown_class)
        missing = [seq for _, seq in best if seq not in found]
        if missing:
            found = {**found, **engine.read_items(sid, missing, on_unknown_class)}
        # An item deleted between the two reads is left out rather than failing the search.
        return [StoreHit(seq, found[seq], score) for score, seq in best if seq in found]

    def ranking(
        self, sid: str, query: str, k: int, keys: Iterable[str] | None
    ) -> list[tuple[int, float]]:
        """Return ``(seq, score)`` of the ``k`` best items, best first, reading as few items as the backend allows."""
        terms, fields = keyword_query(query, k, keys)
        with self._engine.errors("search", sid):
            best, _ = self.top(sid, terms, fields, k, "base")
        return [(seq, score) for score, seq in best]

    def top(
        self,
        sid: str,
        terms: Sequence[str],
        keys: tuple[str, ...] | None,
        k: int,
        on_unknown_class: OnUnknownClass,
    ) -> tuple[list[tuple[float, int]], dict[int, MemoryItem]]:
        """Return the ``k`` best ``(score, seq)``, best first (ties by seq), and any of those items already decoded.

        The backend's index answers where it has one (no items read); with
        ``keys`` (per-field statistics are in no index) or without an
        index, the session is read a page at a time and scored here.
        """
        if keys is None:
            best = self._engine.backend.keyword_top(sid, terms, k)
            if best is not None:
                return best, {}
        pages = self._engine.decoded_pages(sid, 1000, on_unknown_class)
        return rank_pages(pages, terms, keys, k)

    def hybrid(
        self,
        sid: str,
        terms: Sequence[str],
        fields: tuple[str, ...] | None,
        on_unknown_class: OnUnknownClass,
    ) -> tuple[dict[int, float], float, dict[int, MemoryItem]]:
        """Return the keyword side of a hybrid query: BM25 by seq, the corpus's keyword scale, items read.

        As the search index does it for ``Memory.search``: items holding
        only common terms (floored IDF) are left out, the others summed over
        the rarer terms first, then the common ones, in query order.
        """
        with self._engine.errors("search", sid):
            n_items, total, matches, found = keyword_matches(
                self._engine.decoded_pages(sid, 1000, on_unknown_class), terms, fields
            )
        if not n_items:
            return {}, 1.0, found
        df = Counter(term for _, _, counts in matches for term in counts)
        avgdl = total / n_items if total else 1.0
        flat = BM25_K1 * (1.0 - BM25_B)
        slope = BM25_K1 * BM25_B / avgdl
        idf = {term: bm25_idf(n_items, df[term]) for term in df}
        rare = [term for term in terms if term in idf and idf[term] != MIN_IDF]
        common = [term for term in terms if term in idf and idf[term] == MIN_IDF]
        scores: dict[int, float] = {}
        for seq, length, counts in matches:
            if not any(term in counts for term in rare):
                continue
            score = 0.0
            for term in (*rare, *common):
                tf = counts.get(term)
                if tf:
                    score += idf[term] * (BM25_K1 + 1.0) * tf / (tf + flat + slope * length)
            scores[seq] = score
        return scores, keyword_scale(n_items), found
