"""The search index of one memory: BM25 postings and vectors, kept up to date by key.

The index is an observer of its memory (``Memory.add_observer``): it hears
every add, delete, field change and whole-content load by item key, after the
change is applied. Hearing costs almost nothing: the memory tells adds in
batches (the index asks for them before each read), a changed item is only
marked, and the marked items are (re)tokenized or (re)embedded by the next
query that needs them. So building a memory stays fast, a query never
rebuilds what did not change, and a memory that is never searched pays nothing.

Lock order: the memory's lock before the index's. Public reads ask the
memory for its pending adds (``_follow``) before they take the index's lock.
"""

from __future__ import annotations

import heapq
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agents.memory._item import MemoryItem
from agents.memory._text import BM25_B, BM25_K1, MIN_IDF, Tokenizer, bm25_idf, item_texts
from agents.memory._vectors import Embedder, checked_vectors, embed_text, numpy, top_rows
from agents.memory.exceptions import EmbedderMismatchError

if TYPE_CHECKING:
    from agents.memory.memory import Memory

__all__ = ["BM25_B", "BM25_K1", "SearchIndex"]


Predicate = Callable[[MemoryItem], bool]
Progress = Callable[[int, int], object]


class _Vectors:
    """One model's unit vectors for the items, rows reused as items come and go."""

    def __init__(self, model: str, dimension: int) -> None:
        np = numpy()
        self.model = model
        self.matrix = np.zeros((64, dimension), dtype=np.float32)
        self.valid = np.zeros(64, dtype=bool)
        self.row_of: dict[int, int] = {}
        self.key_at: list[int] = []
        self.free: list[int] = []

    def put(self, keys: Sequence[int], vectors: Any) -> None:
        np = numpy()
        for key, vector in zip(keys, vectors, strict=True):
            self.drop(key)  # a key embedded again keeps one row
            row = self.free.pop() if self.free else len(self.key_at)
            if row == len(self.key_at):
                self.key_at.append(key)
            else:
                self.key_at[row] = key
            if row >= len(self.matrix):
                grown = np.zeros((2 * len(self.matrix), self.matrix.shape[1]), dtype=np.float32)
                grown[: len(self.matrix)] = self.matrix
                self.matrix = grown
                valid = np.zeros(len(grown), dtype=bool)
                valid[: len(self.valid)] = self.valid
                self.valid = valid
            self.matrix[row] = vector
            self.valid[row] = True
            self.row_of[key] = row

    def drop(self, key: int) -> None:
        row = self.row_of.pop(key, None)
        if row is not None:
            self.valid[row] = False
            self.free.append(row)

    def scores(
        self, query: Any, limit: int | None = None, among: Iterable[int] = ()
    ) -> dict[int, float]:
        """Return the cosine with the unit ``query`` vector of the best ``limit`` items and of ``among``, by key.

        Items tied with the ``limit``-th best are all returned, so that ties
        can keep session order; ``limit=None`` returns every item.
        """
        np = numpy()
        used = len(self.key_at)
        if not used:
            return {}
        sims = self.matrix[:used] @ query
        sims[~self.valid[:used]] = -np.inf
        rows = top_rows(sims, limit)
        key_at = self.key_at
        out = {key_at[row]: float(sims[row]) for row in rows.tolist()}
        row_of = self.row_of
        for key in among:
            row = row_of.get(key)
            if row is not None:
                out[key] = float(sims[row])
        return out


def _best_first(pair: tuple[int, float]) -> tuple[float, int]:
    """Sort key of ``(key, score)``: higher score first, then session order."""
    return -pair[1], pair[0]


class _Lengths:
    """Each item's length (its number of terms) over some fields, and the items of each length."""

    def __init__(self) -> None:
        self.of: dict[int, int] = {}
        self.by_length: dict[int, dict[int, None]] = {}

    def put(self, key: int, length: int) -> None:
        self.of[key] = length
        bucket = self.by_length.get(length)
        if bucket is None:
            self.by_length[length] = {key: None}
        else:
            bucket[key] = None

    def drop(self, key: int) -> int:
        """Forget the item's length and return it (0 for an item not filed)."""
        length = self.of.pop(key, None)
        if length is None:
            return 0
        bucket = self.by_length[length]
        del bucket[key]
        if not bucket:
            del self.by_length[length]
        return length


_KEYED_LENGTHS = 8  # sets of searched fields whose lengths are kept (the most recently used)


class SearchIndex:
    """The BM25 index and the vectors of one memory, kept in step with it by item key.

    Get it with :func:`agents.memory.search.search_index`; ``Memory.search``
    creates it on first use. It is a ``MemoryWriter``-shaped observer of
    the memory (see ``Memory.add_observer``).

    Args:
        tokenizer: How text is split into terms.
    """

    def __init__(self, tokenizer: Tokenizer | None = None) -> None:
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer()
        self.embedder: Embedder | None = None
        self._lock = threading.RLock()
        self._memory: weakref.ref[Memory] | None = None
        self._items: dict[int, MemoryItem] = {}
        self._pending: dict[int, None] = {}
        self._docs: dict[int, tuple[tuple[str, str, int], ...]] = {}
        self._lengths = _Lengths()  # over every field
        # The same over the fields of a query's keys: made by the first query with
        # those keys, kept up to date from then on (the most recent few sets).
        self._keyed_lengths: dict[tuple[str, ...], _Lengths] = {}
        self._postings: dict[str, dict[int, int]] = {}
        # field -> term -> {key: tf}: built by the first query with keys.
        self._by_field: dict[str, dict[str, dict[int, int]]] | None = None
        self._total = 0
        self._field_total: Counter[str] = Counter()
        self._vectors: dict[tuple[str, ...] | None, _Vectors] = {}
        self._unembedded: dict[tuple[str, ...] | None, dict[int, None]] = {}

    # -- observer calls (MemoryWriter shape), under the memory's lock -------------

    def write_add(
        self, memory: Memory, added: Sequence[tuple[int, MemoryItem]], evicted: Sequence[int]
    ) -> None:
        """Mark the added items for indexing and drop the evicted ones."""
        with self._lock:
            items = self._items
            pending = self._pending
            for key, item in added:
                items[key] = item
                pending[key] = None
            for waiting in self._unembedded.values():
                waiting.update((key, None) for key, _ in added)
            for key in evicted:
                self._drop(key)

    def write_delete(self, memory: Memory, keys: Sequence[int]) -> None:
        """Drop the deleted items from the postings and the vectors."""
        with self._lock:
            for key in keys:
                self._drop(key)

    def write_update(self, memory: Memory, keys: Sequence[int], item: MemoryItem) -> None:
        """Mark a changed item for re-indexing; its old terms and vectors go now."""
        with self._lock:
            for key in keys:
                self._unindex(key)
                self._pending[key] = None
                for keys_of, vectors in self._vectors.items():
                    vectors.drop(key)
                    self._unembedded[keys_of][key] = None

    def write_replace(self, memory: Memory, added: Sequence[tuple[int, MemoryItem]]) -> None:
        """Start over with ``added`` as the whole content (all marked for indexing)."""
        with self._lock:
            self._memory = weakref.ref(memory)
            self._items = dict(added)
            self._pending = dict.fromkeys(self._items)
            self._docs = {}
            self._lengths = _Lengths()
            self._keyed_lengths = {}
            self._postings = {}
            self._by_field = None
            self._total = 0
            self._field_total = Counter()
            self._vectors = {}
            self._unembedded = {}

    # -- keyword search ------------------------------------------------------------

    def keyword_scores(
        self,
        terms: Sequence[str],
        keys: tuple[str, ...] | None,
        *,
        skip_common: bool = False,
        limit: int | None = None,
    ) -> tuple[dict[int, float], float]:
        """Return the BM25 score of the items that hold a query term (in ``keys``), by key.

        The statistics (number of items, average length, how many items hold
        a term) are those of the whole memory over the searched fields; each
        query term counts once per occurrence in the query, as in SQLite FTS5.

        With ``skip_common``, items that hold only *common* terms (in more than
        half of the items, whose IDF is floored near zero) are left out, and
        the second value is the highest score such an item can have (``0.0``
        when none was left out); items that are scored get their full score.
        Stop words then cost nothing unless the rarer words match too few items.

        With ``limit``, the scores returned hold every item that can be among
        the best ``limit`` (ties with the last included), not every item that
        holds a term: items holding only common terms are scored shortest
        first (by their length over ``keys``) while they can still reach the
        ``limit``-th best score (see :meth:`_add_common_only`).
        """
        self._follow()
        with self._lock:
            self._catch_up()
            n_items = len(self._items)
            if not n_items:
                return {}, 0.0
            if keys is None:
                total = self._total
                sizes = self._lengths
            else:
                total = sum(self._field_total[field] for field in keys)
                sizes = self._lengths_in(keys)
            lengths = sizes.of
            avgdl = total / n_items if total else 1.0
            # BM25 per (term, item): idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)).
            flat = BM25_K1 * (1.0 - BM25_B)
            slope = BM25_K1 * BM25_B / avgdl
            bounded = limit is not None and not skip_common
            prune = skip_common or bounded
            # (postings, idf * (k1 + 1), common) of each query term any item holds, in query order.
            weighted: list[tuple[dict[int, int], float, bool]] = []
            for term in terms:
                matches = self._matches(term, keys)
                if matches:
                    idf = bm25_idf(n_items, len(matches))
                    weighted.append((matches, idf * (BM25_K1 + 1.0), prune and idf == MIN_IDF))
            common = [(matches, lift) for matches, lift, is_common in weighted if is_common]
            # Pruning common terms, only the items holding a rarer term are scored here.
            candidates: dict[int, int] = {}
            if common:
                for matches, _, is_common in weighted:
                    if not is_common:
                        candidates.update(matches)
            # Each item's score is summed in query order, whatever path scores it,
            # so that every path gives the same float.
            scores: dict[int, float] = {}
            for matches, lift, is_common in weighted:
                get = scores.get
                if is_common:
                    scores.update(
                        {
                            key: get(key, 0.0) + lift * tf / (tf + flat + slope * lengths[key])
                            for key in candidates
                            if (tf := matches.get(key))
                        }
                    )
                else:
                    scores.update(
                        {
                            key: get(key, 0.0) + lift * tf / (tf + flat + slope * lengths[key])
                            for key, tf in matches.items()
                        }
                    )
            if bounded and common:
                assert limit is not None  # bounded implies it
                self._add_common_only(scores, common, limit, flat, slope, sizes.by_length)
                return scores, 0.0
            # tf / (tf + norm) < 1, so an item holding only common terms scores below this.
            return scores, sum(lift for _, lift in common)

    def _add_common_only(
        self,
        scores: dict[int, float],
        common: list[tuple[dict[int, int], float]],
        limit: int,
        flat: float,
        slope: float,
        by_length: dict[int, dict[int, None]],
    ) -> None:
        """Score the items holding only common terms that can still be among the best ``limit``.

        An item of length ``dl`` scores at most the sum over the common terms
        of ``lift * most / (most + flat + slope * dl)``, ``most`` being the
        term's highest count in any item: the same float operations on
        larger counts, so the bound holds in floats too, and it falls as
        ``dl`` grows. Items are visited by length, shortest first, and by key
        within a length; the visit stops once no item left can beat the
        ``limit``-th best ``(score, key)`` (a higher score, or an equal score
        and an earlier key). Each item's score is summed in query order, as
        a full scoring sums it.
        """
        # The best `limit` so far as (score, -key): the root is the worst of them.
        best = heapq.nlargest(limit, ((score, -key) for key, score in scores.items()))
        heapq.heapify(best)
        highest = [(matches, lift, max(matches.values())) for matches, lift in common]
        for length in sorted(by_length):
            bound = 0.0
            for _, lift, most in highest:
                bound += lift * most / (most + flat + slope * length)
            if len(best) == limit and bound < best[0][0]:
                return  # longer items have lower bounds still
            for key in sorted(by_length[length]):
                if len(best) == limit and (bound, -key) < best[0]:
                    break  # no later key of this length can beat the worst kept
                if key in scores:
                    continue  # holds a rare term: scored in full already
                score = 0.0
                held = False
                for matches, lift, _ in highest:
                    tf = matches.get(key)
                    if tf:
                        score += lift * tf / (tf + flat + slope * length)
                        held = True
                if not held:
                    continue
                scores[key] = score
                if len(best) < limit:
                    heapq.heappush(best, (score, -key))
                elif (score, -key) > best[0]:
                    heapq.heapreplace(best, (score, -key))

    def keyword_ceiling(self, terms: Sequence[str], keys: tuple[str, ...] | None) -> float:
        """Return the BM25 score an item would get holding every query term very often: the scale of a query.

        It is the sum over query terms of ``idf * (k1 + 1)``, with the IDF of
        a term no item holds taken for ``n = 0``. Dividing a score by it puts
        scores of different queries on one 0..1 scale, low when an item
        matches only common words.
        """
        self._follow()
        with self._lock:
            self._catch_up()
            n_items = len(self._items)
            if not n_items:
                return 1.0
            ceiling = 0.0
            for term in terms:
                df = len(self._matches(term, keys))
                ceiling += bm25_idf(n_items, df)
            return ceiling * (BM25_K1 + 1.0) or 1.0

    def matched_fields(
        self, key: int, terms: Iterable[str], keys: tuple[str, ...] | None
    ) -> tuple[str, ...]:
        """Return the fields of the item under ``key`` that hold a query term, in field order."""
        self._follow()
        with self._lock:
            wanted = set(terms)
            out: dict[str, None] = {}
            for field, text, _ in self._docs.get(key, ()):
                if (keys is None or field in keys) and not wanted.isdisjoint(self.tokenizer(text)):
                    out[field] = None
            return tuple(out)

    # -- semantic search -------------------------------------------------------------

    def semantic_scores(
        self,
        embedder: Embedder,
        query: str,
        keys: tuple[str, ...] | None,
        *,
        limit: int | None = None,
        among: Iterable[int] = (),
        batch_size: int = 256,
        progress: Progress | None = None,
    ) -> dict[int, float]:
        """Return the cosine between the query and the best ``limit`` items with text (and ``among``), by key.

        Items without a vector are embedded first. ``limit=None`` scores every item.
        """
        query_vector = checked_vectors(embedder, [query])[0]
        self._follow()
        with self._lock:
            vectors = self._embed(embedder, keys, batch_size=batch_size, progress=progress)
            return vectors.scores(query_vector, limit, among)

    def embed(
        self,
        embedder: Embedder,
        keys: tuple[str, ...] | None,
        *,
        batch_size: int = 256,
        progress: Progress | None = None,
    ) -> _Vectors:
        """Embed the items that have no vector yet (over ``keys``) and return the vectors.

        Raises:
            EmbedderMismatchError: if the stored vectors have another dimension.
            EmbeddingError: if the embedder returns the wrong shape or NaN.
        """
        self._follow()
        with self._lock:
            return self._embed(embedder, keys, batch_size=batch_size, progress=progress)

    def _embed(
        self,
        embedder: Embedder,
        keys: tuple[str, ...] | None,
        *,
        batch_size: int,
        progress: Progress | None,
    ) -> _Vectors:
        """:meth:`embed`, under the index's lock."""
        vectors = self._table(embedder, keys)
        waiting = self._unembedded[keys]
        todo: list[tuple[int, str]] = []
        for key in list(waiting):
            item = self._items.get(key)
            if item is None:
                del waiting[key]
                continue
            text = embed_text(item.to_dict(), keys)
            if text.strip():
                todo.append((key, text))
            else:
                del waiting[key]  # no text, no vector: never a semantic hit
        done = 0
        for start in range(0, len(todo), batch_size):
            chunk = todo[start : start + batch_size]
            unit = checked_vectors(embedder, [text for _, text in chunk])
            chunk_keys = [key for key, _ in chunk]
            vectors.put(chunk_keys, unit)
            for key in chunk_keys:
                del waiting[key]
            done += len(chunk)
            if progress is not None:
                progress(done, len(todo))
        return vectors

    def missing_vectors(self, keys: tuple[str, ...] | None) -> list[int]:
        """Return the keys of the items that wait for a vector over ``keys`` (every item before the first embedding)."""
        self._follow()
        with self._lock:
            waiting = self._unembedded.get(keys)
            if waiting is None:
                return list(self._items)
            return [key for key in waiting if key in self._items]

    def adopt_vectors(
        self, embedder: Embedder, keys: tuple[str, ...] | None, vectors: Mapping[int, Any]
    ) -> int:
        """Take unit vectors made elsewhere by ``embedder`` (a store keeps them) for items waiting for one.

        Vectors of items that do not wait for one (already embedded, or
        gone) are ignored. Pass them in key order, so that the rows are laid
        out as embedding the items here would lay them out.

        Returns:
            How many vectors were taken.

        Raises:
            EmbedderMismatchError: if the index holds vectors of another dimension.
        """
        self._follow()
        with self._lock:
            table = self._table(embedder, keys)
            waiting = self._unembedded[keys]
            chosen = [key for key in vectors if key in waiting and key in self._items]
            if chosen:
                table.put(chosen, [vectors[key] for key in chosen])
                for key in chosen:
                    del waiting[key]
            return len(chosen)

    def vector_model(self) -> str | None:
        """Return the name of the model the stored vectors came from, or ``None``."""
        with self._lock:
            for vectors in self._vectors.values():
                return vectors.model
            return None

    def drop_vectors(self) -> None:
        """Forget every vector (to embed again with another model)."""
        with self._lock:
            self._vectors = {}
            self._unembedded = {}

    # -- reads -------------------------------------------------------------------------

    def item(self, key: int) -> MemoryItem:
        """Return the item under ``key``."""
        self._follow()
        return self._items[key]

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
            items = self._items
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
                    if where is not None:
                        verdict = passed.get(key)
                        if verdict is None:
                            verdict = passed[key] = where(item)
                        if not verdict:
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
                        if item is None:
                            continue
                        verdict = passed.get(key)
                        if verdict is None:
                            verdict = where(item)
                        if verdict:
                            kept.append((key, score))
                    return [
                        (key, items[key], score)
                        for key, score in heapq.nsmallest(k, kept, key=_best_first)
                    ]
                wanted *= 4

    # -- internals -----------------------------------------------------------------------

    def _follow(self) -> None:
        """Hear the adds the memory has not told yet (it tells them in batches); never under the index's lock."""
        memory = self._memory() if self._memory is not None else None
        if memory is not None:
            memory.notify_observers()

    def _table(self, embedder: Embedder, keys: tuple[str, ...] | None) -> _Vectors:
        """Return the vectors over ``keys``, created for ``embedder`` on first use; refuse another dimension."""
        vectors = self._vectors.get(keys)
        if vectors is None:
            vectors = self._vectors[keys] = _Vectors(embedder.name, embedder.dimension)
            self._unembedded[keys] = dict.fromkeys(self._items)
        if vectors.matrix.shape[1] != embedder.dimension:
            msg = (
                f"The memory's vectors from model {vectors.model!r} have {vectors.matrix.shape[1]} "
                f"dimensions; embedder {embedder.name!r} gives {embedder.dimension}. Embed again "
                "with memory.index_embeddings(embedder) under a name of its own."
            )
            raise EmbedderMismatchError(msg)
        return vectors

    def _catch_up(self) -> None:
        """Tokenize the items marked since the last query and file their terms."""
        if not self._pending:
            return
        tokenize = self.tokenizer
        postings = self._postings
        field_total = self._field_total
        for key in self._pending:
            item = self._items.get(key)
            if item is None:
                continue
            doc = []
            every: list[str] = []
            for field, text in item_texts(item.to_dict(), None):
                terms = tokenize(text)
                size = len(terms)
                # The text itself is kept (a reference, not a copy): deleting or
                # re-indexing the item later finds its old terms from it.
                doc.append((field, text, size))
                field_total[field] += size
                every += terms
            for term, count in Counter(every).items():
                posting = postings.get(term)
                if posting is None:
                    postings[term] = {key: count}
                else:
                    posting[key] = count
            self._docs[key] = tuple(doc)
            if self._by_field is not None:
                self._file_fields(key, self._docs[key])
            self._lengths.put(key, len(every))
            for keys, sizes in self._keyed_lengths.items():
                sizes.put(key, sum(size for field, _, size in doc if field in keys))
            self._total += len(every)
        self._pending = {}

    def _unindex(self, key: int) -> None:
        doc = self._docs.pop(key, None)
        if doc is None:
            return
        self._total -= self._lengths.drop(key)
        for sizes in self._keyed_lengths.values():
            sizes.drop(key)
        postings = self._postings
        terms: set[str] = set()
        by_field = self._by_field
        for field, text, size in doc:
            self._field_total[field] -= size
            words = self.tokenizer(text)
            terms.update(words)
            if by_field is not None:
                field_postings = by_field[field]
                for word in words:
                    posting = field_postings.get(word)
                    if posting is not None:
                        posting.pop(key, None)
                        if not posting:
                            del field_postings[word]
        for term in terms:
            posting = postings.get(term)
            if posting is not None:
                posting.pop(key, None)
                if not posting:
                    del postings[term]

    def _drop(self, key: int) -> None:
        self._items.pop(key, None)
        self._pending.pop(key, None)
        self._unindex(key)
        for keys_of, vectors in self._vectors.items():
            vectors.drop(key)
            self._unembedded[keys_of].pop(key, None)

    def _lengths_in(self, keys: tuple[str, ...]) -> _Lengths:
        """Return the items' lengths over the fields ``keys``, made on first use and kept from then on."""
        sizes = self._keyed_lengths.pop(keys, None)
        if sizes is None:
            sizes = _Lengths()
            for key, doc in self._docs.items():
                sizes.put(key, sum(size for field, _, size in doc if field in keys))
            if len(self._keyed_lengths) >= _KEYED_LENGTHS:
                del self._keyed_lengths[next(iter(self._keyed_lengths))]  # the least recently used
        self._keyed_lengths[keys] = sizes  # last: the most recently used
        return sizes

    def _matches(self, term: str, keys: tuple[str, ...] | None) -> dict[int, int]:
        """Return ``{key: tf}`` of the items holding ``term`` (in ``keys``); do not change it."""
        if keys is None:
            return self._postings.get(term) or {}
        by_field = self._field_postings()
        found = [posting for field in keys if (posting := by_field.get(field, {}).get(term))]
        if len(found) == 1:
            return found[0]
        out: dict[int, int] = {}
        get = out.get
        for posting in found:
            for key, tf in posting.items():
                out[key] = get(key, 0) + tf
        return out

    def _field_postings(self) -> dict[str, dict[str, dict[int, int]]]:
        """Return the postings per field, built on the first query with ``keys`` and kept from then on."""
        by_field = self._by_field
        if by_field is None:
            by_field = self._by_field = {}
            for key, doc in self._docs.items():
                self._file_fields(key, doc)
        return by_field

    def _file_fields(self, key: int, doc: tuple[tuple[str, str, int], ...]) -> None:
        by_field = self._by_field
        assert by_field is not None  # only called while the per-field postings exist
        tokenize = self.tokenizer
        for field, text, _ in doc:
            postings = by_field.get(field)
            if postings is None:
                postings = by_field[field] = {}
            for term in tokenize(text):
                posting = postings.get(term)
                if posting is None:
                    postings[term] = {key: 1}
                else:
                    posting[key] = posting.get(key, 0) + 1
