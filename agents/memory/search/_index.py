"""The search index of one memory: BM25 postings and vectors, kept up to date by key.

The index is an observer of its memory (``Memory.add_observer``): it hears
every add, delete, field change and whole-content load by item key, after the
change is applied. Hearing costs almost nothing: the memory tells adds in
batches (the index asks for them before each read), a changed item is only
marked, and the marked items are (re)tokenized or (re)embedded by the next
query that needs them. So building a memory stays fast, a query never
rebuilds what did not change, and a memory that is never searched pays nothing.

The index decides what is filed and when; the terms filed (postings, texts,
lengths, field statistics, the numpy ranker, filter values) are a
``KeywordPostings`` of ``_postings`` (a build ahead makes a ``BuiltPostings``
off the lock, which the postings take), and the vectors an ``ItemVectors``.

Lock order: the memory's lock before the index's. Public reads ask the
memory for its pending adds (``_follow``) before they take the index's lock.
"""

from __future__ import annotations

import contextlib
import heapq
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agents.memory._codec import collector_paused
from agents.memory._item import MemoryItem, item_fields
from agents.memory._text import (
    BM25_B,
    BM25_DELTA,
    BM25_K1,
    PROXIMITY_TOP,
    Tokenizer,
    bm25_term_score,
    field_texts,
    query_coverage,
    query_together,
)
from agents.memory._vectors import (
    Embedder,
    EmbedParts,
    checked_vectors,
    keyword_scale,
)
from agents.memory.exceptions import EmbedderMismatchError, InvalidArgumentError
from agents.memory.search._bm25 import QueryTerm, exhaustive_top
from agents.memory.search._item_vectors import ItemVectors, Vectors, made_screens
from agents.memory.search._pause import BuildPause
from agents.memory.search._postings import BuiltPostings, KeywordPostings, Lengths
from agents.memory.search._scan import TextScan

if TYPE_CHECKING:
    from agents.memory.memory import Memory

__all__ = ["BM25_B", "BM25_DELTA", "BM25_K1", "SearchIndex"]


Predicate = Callable[[MemoryItem], bool]
Progress = Callable[[int, int], object]
VectorSource = Callable[[EmbedParts], "tuple[Embedder, Mapping[int, Any]] | None"]
"""Where a build ahead reads vectors made elsewhere: given how the index cuts items, the model and ``{key: vectors}`` over all fields (or ``None``)."""
RankingSource = Callable[[Sequence[str], int], "Sequence[tuple[int, float]] | None"]
"""A keyword ranking asked of whoever read a memory's items (a store: ``Store.read_memory``), given the query's terms and ``k``: ``(place, score)`` best first, ``place`` that of the item among those handed, or ``None`` once it cannot vouch for them."""


def _best_first(pair: tuple[int, float]) -> tuple[float, int]:
    """Sort key of ``(key, score)``: higher score first, then session order."""
    return -pair[1], pair[0]


_BULK = 1024  # a first query filing this many items or more files them in bulk
_SCAN_ITEMS = 2048  # a first query over this many items or more is answered by a TextScan
_FEW = 16  # a filter that at most one item in this many may pass ranks only those items
_SCREEN_TRIES = (
    3  # screens made off the lock and thrown away (rows changed) before one is made under it
)


class SearchIndex:
    """The BM25 index and the vectors of one memory, kept in step with it by item key.

    Get it with :func:`agents.memory.search.search_index`; ``Memory.search``
    creates it on first use. It is a ``MemoryWriter``-shaped observer of
    the memory (see ``Memory.add_observer``).

    Args:
        tokenizer: How text is split into terms.
        parts: How items are cut into the texts that get embedded (default
            ``EmbedParts()``: each field, long ones in windows of 8 words, an
            item ranked by its best part, as the stores cut them;
            ``EmbedParts.WHOLE`` embeds each item as one text).

    Attributes:
        filter_tests: How many times a search filter was asked of an item (see :meth:`passing`).
    """

    def __init__(
        self, tokenizer: Tokenizer | None = None, *, parts: EmbedParts | None = None
    ) -> None:
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer()
        self.embedder: Embedder | None = None
        self._lock = threading.RLock()
        self._memory: weakref.ref[Memory] | None = None
        self._items: dict[int, MemoryItem] = {}
        self._pending: dict[int, None] = {}
        self._keyword = KeywordPostings()  # the terms of the items filed so far
        # The vectors over each set of keys embedded, and the items that wait for one.
        self._vectors = ItemVectors(parts if parts is not None else EmbedParts())
        self.filter_tests = 0
        # The keyword index built ahead on another thread (see build_ahead), while one is.
        self._ahead: _Ahead | None = None
        self._watching: set[_Ahead] = set()  # builds installed that read vectors or screen
        self._generation = 0  # bumped by each whole-content replacement
        self._pause = BuildPause()  # queries answered elsewhere that a build gives way to
        # The items' terms joined, answering queries till their build is in (_scanned_top).
        self._scan: TextScan | None = None
        # The scan of the terms a store keeps, for the first query (see take_terms).
        self._handed: TextScan | None = None
        # The keys handed to a store's ranking and that ranking, till the postings are in (take_ranking).
        self._ranked: tuple[list[int], RankingSource] | None = None

    # -- observer calls (MemoryWriter shape), under the memory's lock -------------

    def write_add(
        self, memory: Memory, added: Sequence[tuple[int, MemoryItem]], evicted: Sequence[int]
    ) -> None:
        """Mark the added items for indexing and drop the evicted ones."""
        with self._lock:
            self._scan = self._handed = self._ranked = None  # held for the items read, no others
            items = self._items
            pending = self._pending
            for key, item in added:
                items[key] = item
                pending[key] = None
            self._vectors.added(added)
            for key in evicted:
                self._drop(key)
            _changed(self, evicted)

    def write_delete(self, memory: Memory, keys: Sequence[int]) -> None:
        """Drop the deleted items from the postings and the vectors."""
        with self._lock:
            self._scan = self._handed = self._ranked = None
            for key in keys:
                self._drop(key)
            _changed(self, keys)

    def write_update(self, memory: Memory, keys: Sequence[int], item: MemoryItem) -> None:
        """Mark a changed item for re-indexing; its old terms and vectors go now."""
        with self._lock:
            self._scan = self._ranked = None
            self._handed = None  # a changed item keeps its key: its kept terms are stale
            for key in keys:
                self._keyword.unfile(key, self.tokenizer)
                self._pending[key] = None
                self._vectors.changed(key)
            _changed(self, keys)

    def write_replace(self, memory: Memory, added: Sequence[tuple[int, MemoryItem]]) -> None:
        """Start over with ``added`` as the whole content (all marked for indexing)."""
        with self._lock:
            self._memory = weakref.ref(memory)
            self._generation += 1  # a build ahead of the old content is not installed
            self._scan = self._handed = self._ranked = None
            self._ahead = None
            self._watching = set()
            self._items = dict(added)
            self._pending = dict.fromkeys(self._items)
            self._keyword = KeywordPostings()
            self._vectors.reset()

    # -- building ahead ------------------------------------------------------------

    def build_ahead(self, *, wait: bool = False, vectors: VectorSource | None = None) -> None:
        """Start building the keyword index of the items held now on another thread, so that the first query need not.

        A query that needs the keyword index before the build is done waits
        for it; the hits and scores are those of an index built by a query,
        whatever changes meanwhile (see docs/search.md, "The first query").
        Nothing is started when the index has filed items already, when
        nothing waits to be filed, or while a build runs.

        Args:
            wait: Return only once the build is done, its vectors taken (``False``: at once).
            vectors: Then read, on the same thread, the vectors a store keeps
                for these items, and take them as :meth:`adopt_vectors` would
                (all fields), less items changed meanwhile: the first semantic
                query need not read them (one that comes first does, without waiting).
        """
        self._follow()
        with self._lock:
            ahead = self._ahead
            if ahead is None and self._pending and not self._keyword.docs:
                keys, values = _waiting(self._pending, self._items)
                ahead = self._ahead = _Ahead(self, keys, values, self._generation, vectors)
                ahead.start()
            running = [ahead, *self._watching] if ahead is not None else [*self._watching]
        if wait:  # for the vectors read after the keyword index too
            with self._pause.lifted():
                _join(running)

    def take_terms(self, items: Sequence[MemoryItem], terms: Sequence[str]) -> bool:
        """Take the terms a store keeps for the memory's items (``Store.read_with_terms``), for the first keyword query's join.

        ``items`` are the memory's items now, in its order, and ``terms[i]``
        the default tokenizer's terms of ``items[i]`` joined by single
        spaces. Their words are found now (``TextScan.kept``); the first query
        over all fields ranks from them, with the hits and scores of the items'
        texts (docs/search.md); any change of the memory before it drops them.

        Returns:
            Whether they were taken (not without numpy, for another tokenizer,
            other items, an index that filed items or builds ahead, or other spacing).
        """
        if type(self.tokenizer) is not Tokenizer or self.tokenizer != Tokenizer():
            return False  # the stores keep the default tokenizer's terms
        self._follow()
        with self._lock:
            if not _unfiled(self, items, terms):
                return False
            self._handed = TextScan.kept(list(self._items), terms)
            return self._handed is not None

    def take_ranking(self, items: Sequence[MemoryItem], ranking: RankingSource) -> bool:
        """Have the keyword queries over all fields without a filter ask ``ranking`` (the store that read ``items``) until the postings are in.

        ``items`` are the memory's items now, in its order. A query then
        ranks by ``ranking`` (``place`` indexes ``items``) and starts the
        build ahead; any change of the memory, or a ``None`` from the
        ranking (the store changed or closed), drops it for good and the
        query is answered as without it (docs/search.md).

        Returns:
            Whether it was taken (not for another tokenizer, other items, or an index that filed items or builds ahead).
        """
        if type(self.tokenizer) is not Tokenizer or self.tokenizer != Tokenizer():
            return False  # the stores rank by the default tokenizer's terms
        self._follow()
        with self._lock:
            if not _unfiled(self, items, items):  # (no terms: one entry an item)
                return False
            self._ranked = (list(self._items), ranking)
            return True

    def building(self) -> bool:
        """Return whether a build ahead is still in flight: its keyword index not installed, or the vectors it reads not taken yet.

        Not while it screens the vectors (off the lock): a query made then
        is answered in RAM without the screen, to the same floats.
        """
        return self._ahead is not None or any(ahead.reading for ahead in [*self._watching])

    def build_paused(self) -> contextlib.AbstractContextManager[None]:
        """Return a context in which a build ahead stops at its next slice, for a query answered elsewhere (see ``BuildPause.held``)."""
        return self._pause.held()

    def _await_ahead(self) -> None:
        """Wait for a build ahead in flight (never under the index's lock: the build takes it to install)."""
        ahead = self._ahead
        if ahead is not None and ahead.thread is not threading.current_thread():
            with self._pause.lifted():  # a query holding the build, now waiting for it
                ahead.thread.join()

    # -- keyword search ------------------------------------------------------------

    def keyword_top(
        self, terms: Sequence[str], keys: tuple[str, ...] | None, k: int, where: Predicate | None
    ) -> list[tuple[int, MemoryItem, float]]:
        """Return the ``k`` best ``(key, item, score)`` by BM25 among items ``where`` keeps, best first; ties by session order.

        The ranking is exactly that of scoring every item holding a query
        term (in ``keys``) with :func:`~agents.memory._text.bm25_term_score`,
        the terms summed in query order: with numpy only the items that can
        still be among the best are scored (see ``_bm25.Ranker``), without
        it every item holding a term is. The statistics (number of items,
        average length, how many items hold a term) are those of the whole
        memory over the searched fields. ``where`` is asked of the best items
        only (each once), more of them while too few pass: as many as the
        pass rate seen needs; when that reaches a quarter of the items
        holding a query term, ``where`` is asked of every item holding one
        and only those that pass are scored.
        """
        if where is None and keys is None:
            found = _handed_top(self, terms, k)
            if found is not None or (found := _scanned_top(self, terms, k)) is not None:
                return found
        with _caught_up(self):
            query, sizes, average = self._query_terms(terms, keys)
            if not query:
                return []
            items = self._items
            if where is not None and (few := self._few(where)) is not None:  # score only those
                ranked = self._keyword.top_among(query, few, sizes.of, average, k)
                return [(key, items[key], score) for key, score in ranked]
            return _ranked_top(self, query, keys, sizes, average, k, where)

    def passing(self, where: Predicate) -> set[int] | None:
        """Return the keys of the items that pass ``where`` if one in 16 at most may, by the values of the fields it names, else ``None``."""
        with _caught_up(self):
            return self._few(where)

    def _few(self, where: Predicate) -> set[int] | None:
        keyword = self._keyword
        keys = keyword.values.few(where, self._items, keyword.docs, len(self._items) // _FEW)
        self.filter_tests += len(keys or ())
        return None if keys is None else {key for key in keys if where(self._items[key])}

    def keyword_scores(
        self,
        terms: Sequence[str],
        keys: tuple[str, ...] | None,
        *,
        skip_common: bool = False,
        limit: int | None = None,
    ) -> tuple[dict[int, float], float]:
        """Return the BM25 score of every item that holds a query term (in ``keys``), by key.

        The scores are those :meth:`keyword_top` ranks by. ``skip_common`` and
        ``limit`` are accepted for callers of the FTS5-style ranking, whose
        IDF let items holding only common words be skipped; with Lucene's IDF
        every item holding a term is scored, and the second value is always
        ``0.0`` (no item was left out).
        """
        with _caught_up(self):
            query, sizes, average = self._query_terms(terms, keys)
            lengths = sizes.of
            ranker = self._keyword.ranker_now()
            if ranker is not None and query:
                return ranker.all_scores(query, keys, lengths, average), 0.0
            scores: dict[int, float] = {}
            for _, matches, weight in query:
                get = scores.get
                scores.update(
                    {
                        key: get(key, 0.0) + bm25_term_score(weight, tf, lengths[key], average)
                        for key, tf in matches.items()
                    }
                )
            return scores, 0.0

    def _query_terms(
        self, terms: Sequence[str], keys: tuple[str, ...] | None
    ) -> tuple[list[QueryTerm], Lengths, float]:
        """Return the query terms some item holds, the lengths and the average length (``KeywordPostings.query_terms``)."""
        return self._keyword.query_terms(terms, keys, len(self._items), self.tokenizer)

    def keyword_scale(self) -> float:
        """Return the BM25 score a hybrid blend maps to 0.5 in this memory (see ``keyword_scale`` of the vectors room)."""
        self._follow()
        with self._lock:
            return keyword_scale(len(self._items))

    def coverage(
        self, terms: Sequence[str], keys: tuple[str, ...] | None, key: int | None
    ) -> float:
        """Return the share of the IDF weight of ``terms`` some item holds (in ``keys``) that item ``key`` holds (``1.0`` if no item holds one); a hybrid query scales its keyword weight by its leader's (``blend``)."""
        with _caught_up(self):
            query = self._query_terms(terms, keys)[0]
            df = {term: len(posting) for term, posting, _ in query}
            held = {term for term, posting, _ in query if key in posting}
            return query_coverage(terms, df, held, len(self._items))

    def together(
        self, terms: Sequence[str], keys: tuple[str, ...] | None, keyword: Mapping[int, float]
    ) -> bool:
        """Return whether one of the best ``keyword`` hits holds the query's words together (``query_together``); a hybrid query whose hits do not ranks by stand-out (``blend``).

        Only the hits whose query terms (from the postings) hold enough of
        the query's weight are tokenized, each field in ``keys`` apart.
        """
        best = heapq.nsmallest(PROXIMITY_TOP, keyword.items(), key=lambda hit: (-hit[1], hit[0]))
        with _caught_up(self):
            query = self._query_terms(terms, keys)[0]
            df = {term: len(posting) for term, posting, _ in query}
            n_items = len(self._items)
            items = {key: item_fields(self._items[key]) for key, _ in best if key in self._items}

        def holds(key: int) -> set[str]:
            return {term for term, posting, _ in query if key in posting}

        hits = [key for key, _ in best]
        return query_together(terms, df, n_items, hits, items, keys, self.tokenizer, holds)

    def matched_fields(
        self, key: int, terms: Iterable[str], keys: tuple[str, ...] | None
    ) -> tuple[str, ...]:
        """Return the fields of the item under ``key`` that hold a query term, in field order."""
        self._follow()
        with self._lock:
            item = self._items.get(key)
        return () if item is None else _fields_holding(item, set(terms), keys, self.tokenizer)

    # -- semantic search -------------------------------------------------------------

    def semantic_scores(
        self,
        embedder: Embedder,
        query: str,
        keys: tuple[str, ...] | None,
        *,
        limit: int | None = None,
        among: Iterable[int] = (),
        only: Iterable[int] | None = None,
        batch_size: int = 256,
        progress: Progress | None = None,
        vector: Any = None,
    ) -> dict[int, float]:
        """Return the cosine between the query and the best ``limit`` items with text (and ``among``), by key.

        Items without a vector are embedded first. ``limit=None`` scores every item, ``only`` just those; ``vector``: the query's, embedded before.
        """
        query_vector = checked_vectors(embedder, [query])[0] if vector is None else vector
        self._follow()
        with self._lock:
            vectors = self._vectors.embed(
                embedder, keys, self._items, batch_size=batch_size, progress=progress
            )
            if only is not None:
                return vectors.scores_of(query_vector, only)
            return vectors.scores(query_vector, limit, among)

    def embed(
        self,
        embedder: Embedder,
        keys: tuple[str, ...] | None,
        *,
        batch_size: int = 256,
        progress: Progress | None = None,
    ) -> Vectors:
        """Embed the items that have no vector yet (over ``keys``) and return the vectors.

        Raises:
            EmbedderMismatchError: if the stored vectors have another dimension.
            EmbeddingError: if the embedder returns the wrong shape or NaN.
        """
        self._follow()
        with self._lock:
            return self._vectors.embed(
                embedder, keys, self._items, batch_size=batch_size, progress=progress
            )

    def missing_vectors(self, keys: tuple[str, ...] | None) -> list[int]:
        """Return the keys of the items that wait for a vector over ``keys`` (every item before the first embedding)."""
        self._follow()
        with self._lock:
            return self._vectors.missing(keys, self._items)

    def adopt_vectors(
        self,
        embedder: Embedder,
        keys: tuple[str, ...] | None,
        vectors: Mapping[int, Any],
        *,
        screen: bool = True,
    ) -> int:
        """Take unit vectors made elsewhere by ``embedder`` (a store keeps them) for items waiting for one.

        Each value is an item's parts, one row a part, cut as :attr:`parts`
        cuts them (a 1-D vector is one part). Vectors of items that do not
        wait for one (already embedded, or gone) are ignored. Pass them in
        key order, so that the rows are laid out as embedding the items here
        would lay them out. Into an index that holds no vector yet (a session
        just opened) they are taken in bulk, from one matrix.

        Args:
            embedder: The model the vectors come from.
            keys: The fields they were embedded over (``None``: all).
            vectors: Each item's vectors, by key.
            screen: Screen a large table now (see ``Vectors.prepare``);
                ``False`` leaves that to a build ahead in flight, which
                screens once its keyword index is installed, so that a
                query made meanwhile need not wait for it (the scores are
                the same either way).

        Returns:
            How many vectors were taken.

        Raises:
            EmbedderMismatchError: if the index holds vectors of another dimension.
        """
        self._follow()
        with self._lock:
            return self._vectors.adopt(embedder, keys, vectors, self._items, screen=screen)

    @property
    def parts(self) -> EmbedParts:
        """How items are cut into the texts that get embedded."""
        return self._vectors.parts

    @parts.setter
    def parts(self, parts: EmbedParts) -> None:
        """Cut items another way from now on; vectors cut the old way are forgotten."""
        if not isinstance(parts, EmbedParts):
            msg = f"SearchIndex.parts takes an EmbedParts, got {parts!r}."
            raise InvalidArgumentError(msg)
        with self._lock:
            if parts != self._vectors.parts:
                self._vectors = ItemVectors(parts)

    def vector_model(self) -> str | None:
        """Return the name of the model the stored vectors came from, or ``None``."""
        with self._lock:
            return self._vectors.model()

    def drop_vectors(self) -> None:
        """Forget every vector (to embed again with another model)."""
        with self._lock:
            self._vectors.reset()

    # -- reads -------------------------------------------------------------------------

    def items(self, keys: Iterable[int]) -> list[MemoryItem]:
        """Return the items under ``keys``, in their order (the memory's untold adds heard once)."""
        self._follow()
        return [self._items[key] for key in keys]

    def keys_of(self, items: Iterable[MemoryItem]) -> dict[int, int]:
        """Return ``{id(item): key}`` for ``items``, scanning the index from its newest item."""
        wanted = {id(item) for item in items}
        found: dict[int, int] = {}
        self._follow()
        with self._lock:
            for key in reversed(self._items):
                held = id(self._items[key])
                if held in wanted and held not in found:
                    found[held] = key
                    if len(found) == len(wanted):
                        break
        return found

    def top(
        self, scores: dict[int, float], k: int, where: Predicate | None
    ) -> list[tuple[int, MemoryItem, float]]:
        """Return the ``k`` best ``(key, item, score)`` among items ``where`` keeps; ties by session order.

        Only the best scores are sorted: the ``k``-th best score is found
        first, and ``where`` is asked of the best items only, more of them
        while too few pass; once the pass rate seen says ``k`` passing items
        need the whole ranking (twice over), ``where`` is asked of every
        scored item once and the best ``k`` that pass are taken.
        """
        self._follow()
        with self._lock:
            counted = None if where is None else _counting(self, where)
            return top_items(self._items, scores, k, counted)

    # -- internals -----------------------------------------------------------------------

    def _follow(self) -> None:
        """Hear the adds the memory has not told yet (it tells them in batches); never under the index's lock."""
        memory = self._memory() if self._memory is not None else None
        if memory is not None:
            memory.notify_observers()

    def _catch_up(self) -> None:
        """Tokenize the items marked since the last query and file their terms.

        Into an index that holds no terms yet (a memory's first query), many
        items are filed in bulk, as a build ahead files them (see ``BuiltPostings``).
        """
        if not self._pending:
            return
        items = self._items
        pairs = [(key, items[key]) for key in self._pending if key in items]
        keyword = self._keyword
        if len(pairs) >= _BULK and not keyword.docs:
            built = BuiltPostings(pairs, self.tokenizer)
            keyword.take(built, items, self.tokenizer)
            # An item the bulk filing could not read is filed one by one (which says why).
            pairs = [(key, item) for key, item in pairs if key not in built.docs]
        keyword.file(pairs, self.tokenizer)
        self._pending = {}

    def _drop(self, key: int) -> None:
        self._items.pop(key, None)
        self._pending.pop(key, None)
        self._keyword.unfile(key, self.tokenizer)
        self._vectors.dropped(key)


def _waiting(
    pending: dict[int, None], items: dict[int, MemoryItem]
) -> tuple[list[int], list[MemoryItem]]:
    """Return the keys of the items waiting to be filed and those items, for a build ahead (``SearchIndex.build_ahead``).

    Two lists, not pairs: the build makes the pairs on its own thread (at
    100,000 steps 10 ms of the query that starts it, the first over a
    memory read whole, against 1 ms for the lists).
    """
    with collector_paused(len(pending)):  # kept lists: no garbage to look for
        keys = list(pending)
        if keys == list(items):  # every item waits, in order (as read): no lookups
            return keys, list(items.values())
        keys = [key for key in keys if key in items]
        return keys, [items[key] for key in keys]


def _unfiled(index: SearchIndex, items: Sequence[MemoryItem], terms: Sequence[object]) -> bool:
    """Return whether ``items`` are the index's items in its order, one term string each, none filed nor building yet (``SearchIndex.take_terms``)."""
    held = index._items
    return (
        not index._keyword.docs
        and index._ahead is None
        and len(index._pending) == len(held) == len(items) == len(terms)
        and all(ours is theirs for ours, theirs in zip(held.values(), items, strict=True))
    )


def _changed(index: SearchIndex, keys: Iterable[int]) -> None:
    """Note items changed or gone while a build ahead runs (or still reads vectors): it must not take what it read of them."""
    watching = index._watching
    for ahead in [index._ahead, *watching] if watching else [index._ahead]:
        if ahead is not None:
            ahead.changed.update(keys)


def _handed_top(
    index: SearchIndex, terms: Sequence[str], k: int
) -> list[tuple[int, MemoryItem, float]] | None:
    """Answer a query over all fields without a filter from the ranking of the store that read the items (``SearchIndex.take_ranking``), or return ``None``.

    Until the postings are in, where no scan of kept terms answers (at
    100,000 steps SQLite's ranking took 180-270 ms of CPU, the scan of its
    kept terms about 100 ms); the first answer starts the build ahead. A
    ``None`` from the ranking drops it: the query is answered as without it.
    """
    index._follow()
    with index._lock:
        handed = index._ranked
        if handed is None or index._scan is not None or index._handed is not None:
            return None  # a store's kept terms, scanned, answer first: they cost less (SQLite)
        if index._keyword.docs:  # filed (the build is in): the postings answer
            index._ranked = None
            return None
        keys, ranking = handed
        with index._pause.held():  # a build in flight stops at its next slice meanwhile
            ranked = ranking(terms, min(k, len(keys)))
        if ranked is None:
            index._ranked = None
            return None
        items = index._items
        out = [(keys[place], items[keys[place]], score) for place, score in ranked]
    index.build_ahead()
    return out


def _scanned_top(
    index: SearchIndex, terms: Sequence[str], k: int
) -> list[tuple[int, MemoryItem, float]] | None:
    """Answer a query over all fields without a filter from the items' terms joined (``TextScan``), or return ``None``.

    The first such query of a memory that holds no terms yet and waits to
    file at least ``_SCAN_ITEMS`` items (one just read whole) joins
    them, and starts filing them on another thread (``SearchIndex.build_ahead``);
    until that is in or the memory changes, such queries are answered
    from the join, with the hits and scores of the postings. With a
    tokenizer the join cannot vouch for (a stemmer), without numpy, or
    once the items are filed, ``None``: the query files them.
    """
    index._follow()
    start = False
    with index._lock:
        scan = index._scan
        if index._keyword.docs:  # filed (the build is in): the postings answer
            index._scan = scan = None
            index._handed = None
            return None
        if scan is None:
            pending = index._pending
            # A store's ranking that answered till now started the build; its kept terms still answer.
            kept = index._handed is not None and index._handed.keys == list(pending)
            if (index._ahead is not None and not kept) or len(pending) < max(
                _SCAN_ITEMS, len(index._items)
            ):
                return None  # a build in flight is awaited, a few items are filed at once
            try:
                import numpy as np  # optional: without it, the query files the items
            except ImportError:
                return None
            items = index._items
            # Nothing made here is garbage; the collector would walk every item read for none
            # (a full collection after a read of 100,000 steps: 0.5-1.2 s inside this query).
            handed, index._handed = index._handed, None  # used once: the scan holds the join
            with collector_paused(len(pending)):
                if handed is not None and handed.keys == list(pending):  # the items read, as read
                    scan = handed
                else:
                    scan = TextScan.of(np, [(key, items[key]) for key in pending], index.tokenizer)
            if scan is None:
                return None
            index._scan = scan
            start = True
        with index._pause.held():  # a build in flight stops at its next slice meanwhile
            ranked = scan.top(terms, len(index._items), k)
        out = [(key, index._items[key], score) for key, score in ranked]
    if start:
        index.build_ahead()
    return out


@contextlib.contextmanager
def _caught_up(index: SearchIndex) -> Iterator[None]:
    """Hold the index's lock with every change of its memory filed (a build ahead awaited first, outside the lock)."""
    index._follow()
    index._await_ahead()
    with index._lock:
        index._catch_up()
        yield


class _Ahead:
    """A build ahead in flight: its thread, the content generation it read, and the items changed since."""

    def __init__(
        self,
        index: SearchIndex,
        keys: list[int],
        items: list[MemoryItem],
        generation: int,
        vectors: VectorSource | None,
    ) -> None:
        self.generation = generation
        self.changed: set[int] = set()
        self.reads_vectors = vectors is not None
        self.reading = True  # until its keyword index is in and the vectors it reads are taken
        self.started = threading.Event()
        """Set once the thread that started the build has seen it start (the build waits for it)."""
        self.thread = threading.Thread(
            target=self._run,
            args=(index, keys, items, vectors),
            name="kvmemory-index-ahead",
            daemon=True,
        )

    def start(self) -> None:
        """Start the thread; the build goes on once this one has seen it start (and lets it: :meth:`_run`)."""
        self.thread.start()
        self.started.set()

    def _run(
        self,
        index: SearchIndex,
        keys: list[int],
        items: list[MemoryItem],
        vectors: VectorSource | None,
    ) -> None:
        built: BuiltPostings | None
        # The thread that started this one (a first query, inside it) goes on first: started,
        # a thread keeps the interpreter up to the switch interval (5 ms) while the starter
        # waits for it, and that query's time and CPU held the build's (JSONL at 100,000
        # steps: a third of the first query's CPU). Waiting lets the interpreter go.
        self.started.wait()
        try:
            with collector_paused(len(keys)):  # kept pairs: no garbage to look for
                pairs = list(zip(keys, items, strict=True))
            del keys, items
            built = BuiltPostings(pairs, index.tokenizer, index._pause.give_way)
        except Exception:  # nothing is installed: the next query files every item
            built = None
        self.install(index, built)
        with index._lock:  # a semantic query that came first took them: nothing to read
            wanted = vectors is not None and bool(index._vectors.missing(None, index._items))
        if vectors is not None and wanted:
            parts = index.parts
            index._pause.give_way()  # the read holds the store's connection: not under a query's nose
            try:
                found = vectors(parts)
            except Exception:  # nothing is taken: the first semantic query reads them
                found = None
            if found is not None:
                self.adopt(index, parts, *found)
        index._pause.give_way()
        # Vectors taken in bulk (as a session opened) are screened here, not by a query.
        self.screen(index)

    def install(self, index: SearchIndex, built: BuiltPostings | None) -> None:
        """File what a build ahead made, less the items changed meanwhile (they stay marked for the next query)."""
        with index._lock:
            if index._ahead is not self:
                return  # a reload replaced the content it read
            index._ahead = None
            self.reading = self.reads_vectors  # building until they are taken (see building)
            # Watched until its vectors are read (they must still leave out items changed) and screened.
            index._watching.add(self)
            if built is None or self.generation != index._generation or index._keyword.docs:
                return
            items = index._items
            tokenize = index.tokenizer
            for key, item in built.items:
                if key in self.changed or items.get(key) is not item:
                    built.unfile(key, tokenize)
            index._keyword.take(built, items, tokenize)
            index._scan = None  # the postings answer from now on: the join's memory goes back
            pending = index._pending
            for key in built.docs:
                pending.pop(key, None)

    def adopt(
        self, index: SearchIndex, parts: EmbedParts, model: Embedder, vectors: Mapping[int, Any]
    ) -> None:
        """Take the vectors read ahead, less those of items changed since the build started, for the content it read (screened by :meth:`screen`)."""
        with index._lock:
            self.reading = False
            if self.generation != index._generation or index.parts != parts:
                return  # a reload replaced the content, or the items are cut another way now
            changed = self.changed
            kept = {key: vector for key, vector in vectors.items() if key not in changed}
            try:
                index._vectors.adopt(model, None, kept, index._items, screen=False)
            except EmbedderMismatchError:
                return  # the index holds vectors of another model: the query will say so

    def screen(self, index: SearchIndex) -> None:
        """Screen the index's large tables (``ItemVectors.screen``); then the build is done.

        The screens are made off the index's lock, from the rows read under
        it, and taken under it if no row changed meanwhile (else made
        again): a query made meanwhile scores every row exactly, as it
        does before the build screens, and need not wait for the lock.
        ``build_ahead(wait=True)`` waits until they are taken.
        """
        self.reading = False
        try:
            for _ in range(_SCREEN_TRIES):
                with index._lock:
                    vectors = index._vectors
                    due = vectors.screens_due()
                made = made_screens(due)
                with index._lock:
                    if index._vectors is vectors and vectors.take_screens(due, made):
                        return
            with index._lock:  # rows kept changing: screened under the lock, as a query would
                index._vectors.screen()
        finally:
            with index._lock:
                index._watching.discard(self)


def _fields_holding(
    item: MemoryItem, wanted: set[str], keys: tuple[str, ...] | None, tokenize: Tokenizer
) -> tuple[str, ...]:
    """Return the fields of ``item`` (in ``keys``) holding a term of ``wanted``, in field order.

    From the item, not the keyword index: a semantic hit's fields never depend on it.
    """
    out: dict[str, None] = {}
    for field, text in field_texts(item_fields(item)):
        if (keys is None or field in keys) and not wanted.isdisjoint(tokenize(text)):
            out[field] = None
    return tuple(out)


def _join(builds: Iterable[_Ahead]) -> None:
    """Wait for each build's thread (but never from that thread itself)."""
    for build in builds:
        if build.thread is not threading.current_thread():
            build.thread.join()


def _passing_top(
    query: Sequence[QueryTerm],
    items: Mapping[int, MemoryItem],
    where: Predicate,
    passed: dict[int, bool],
    sizes: Lengths,
    average: float,
    k: int,
) -> list[tuple[int, MemoryItem, float]]:
    """Return the best ``k`` items holding a query term that pass ``where`` (asked once each; ``passed`` holds the answers so far).

    The terms, weights and lengths are those of the ranking of every item, summed in the same order.
    """
    keep = set()
    for _, posting, _ in query:
        for key in posting:
            if _passes(where, passed, key, items[key]):
                keep.add(key)
    among = [
        (term, {key: tf for key, tf in posting.items() if key in keep}, weight)
        for term, posting, weight in query
    ]
    return [(key, items[key], score) for key, score in exhaustive_top(among, sizes.of, average, k)]


def _ranked_top(
    index: SearchIndex,
    query: list[QueryTerm],
    keys: tuple[str, ...] | None,
    sizes: Lengths,
    average: float,
    k: int,
    where: Predicate | None,
) -> list[tuple[int, MemoryItem, float]]:
    """Return ``SearchIndex.keyword_top``'s hits from the postings (under the index's lock, caught up): the best, asking ``where`` of as few as its pass rate needs."""
    items = index._items
    where = None if where is None else _counting(index, where)
    passed: dict[int, bool] = {}  # each item is asked once, however many rounds
    wanted = k
    while True:
        ranked = index._keyword.top(query, keys, sizes.of, average, wanted)
        out = []
        for key, score in ranked:
            item = items[key]
            if where is not None and not _passes(where, passed, key, item):
                continue
            out.append((key, item, score))
            if len(out) == k:
                return out
        if len(ranked) < wanted:
            return out  # every item holding a term was asked
        # At least four times as many, and as many as the pass rate seen needs, twice over.
        wanted = max(4 * wanted, 2 * k * len(ranked) // max(len(out), 1))
        if where is not None and 4 * wanted >= max(len(p) for _, p, _ in query):
            # Few pass: ask each item holding a term once, and score only those that pass.
            return _passing_top(query, items, where, passed, sizes, average, k)


def _passes(where: Predicate, passed: dict[int, bool], key: int, item: MemoryItem) -> bool:
    """Return whether ``where`` keeps ``item``, asking it once per key (its verdict kept in ``passed``)."""
    verdict = passed.get(key)
    if verdict is None:
        verdict = passed[key] = where(item)
    return verdict


def _counting(index: SearchIndex, where: Predicate) -> Predicate:
    """Return ``where``, counting each item it is asked of in ``index.filter_tests``."""

    def counted(item: MemoryItem) -> bool:
        index.filter_tests += 1
        return where(item)

    return counted


def top_items(
    items: Mapping[int, MemoryItem],
    scores: dict[int, float],
    k: int,
    where: Predicate | None,
) -> list[tuple[int, MemoryItem, float]]:
    """Return the ``k`` best ``(key, item, score)`` among ``items`` that ``where`` keeps (see ``SearchIndex.top``)."""
    out: list[tuple[int, MemoryItem, float]] = []
    passed: dict[int, bool] = {}  # each item is asked once, however many rounds
    wanted = k
    while True:
        if wanted < len(scores):
            cut = heapq.nlargest(wanted, scores.values())[-1]
            chosen = [(key, score) for key, score in scores.items() if score >= cut]
        else:
            chosen = list(scores.items())
        out = []
        # The best `wanted` by (score, session order); ties past them wait for a later round.
        for key, score in heapq.nsmallest(wanted, chosen, key=_best_first):
            item = items.get(key)
            if item is None:
                continue
            if where is not None and not _passes(where, passed, key, item):
                continue
            out.append((key, item, score))
            if len(out) == k:
                return out
        if wanted >= len(scores):
            return out  # every item was asked
        if where is not None and 2 * k * wanted >= len(scores) * max(len(out), 1):
            # Few pass: ask each scored item once and rank those that pass, rather
            # than sorting ever longer prefixes of the ranking.
            kept = []
            for key, score in scores.items():
                item = items.get(key)
                if item is not None and _passes(where, passed, key, item):
                    kept.append((key, score))
            return [
                (key, items[key], score) for key, score in heapq.nsmallest(k, kept, key=_best_first)
            ]
        wanted *= 4
