"""Semantic and hybrid search of a stored session, over the vectors stored with its items.

Vectors are embedded once per item (:meth:`VectorSearch.index`), kept by the
backend's vector operations, and ranked by exact cosine: in the engine where
the backend computes them (:meth:`Backend.nearest`), else read a page at a
time and scored with numpy. A hybrid query blends those cosines with the
keyword side (:meth:`KeywordSearch.hybrid`) as ``Memory.search`` does.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from agents.memory._filter import Filter
from agents.memory._hybrid import Pruning
from agents.memory._item import MemoryItem, OnUnknownClass, item_fields
from agents.memory._text import Tokenizer
from agents.memory._vectors import (
    HYBRID_POOL,
    VECTOR_DTYPE,
    Embedder,
    EmbedParts,
    best_cosines,
    checked_vectors,
    fields_text,
    numpy,
    ranked_top,
    vectors_once,
)
from agents.memory.exceptions import (
    CorruptStoreError,
    EmbedderMismatchError,
    InvalidQueryError,
    StoreArgumentError,
    StoreError,
)
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._core.encoding import check_seq, decode_pairs
from agents.memory.stores._core.engine import Engine
from agents.memory.stores._core.values import StoreHit, VectorModel
from agents.memory.stores._search.coded_file import CodedFile
from agents.memory.stores._search.coded_saves import CodedSaves, Written
from agents.memory.stores._search.compact import CompactVectors, CosinesOf, compact_table
from agents.memory.stores._search.filtering import (
    ALL,
    FEW,
    HYBRID_FEW,
    NARROW_AT,
    Passing,
    Screener,
    first_passing,
    narrower,
    reader,
    widening,
)
from agents.memory.stores._search.hybrid import held_pool, held_ranking, walked_passing
from agents.memory.stores._search.keyword import KeywordSearch, QueryReads
from agents.memory.stores._search.vector_cache import Table, VectorCache, Vectors, follows

__all__ = ["VectorSearch", "check_embedder", "over_budget"]

_FIRST_SLICE: Final = 64
"""The rows of a kept ranking screened before an index is asked which rows may pass a filter (or ``2 * k``): the first slice of :func:`first_passing`."""


def _run_ends(keys: Sequence[int]) -> list[int]:
    """Return the positions where a run of equal keys ends (each but the last run)."""
    return [position for position in range(1, len(keys)) if keys[position] != keys[position - 1]]


def _parts_by_seq(keys: Sequence[int], matrix: Any) -> dict[int, Any]:
    """Return each seq's rows of ``matrix`` (its part vectors), ``keys`` holding the seq of each row, an item's rows together."""
    out: dict[int, Any] = {}
    start = 0
    for end in [*_run_ends(keys), len(keys)] if keys else []:
        out[keys[start]] = matrix[start:end]
        start = end
    return out


def _table_of(
    pages: Iterable[tuple[list[int], Any]],
    embedder: Embedder,
    parts: EmbedParts,
    budget: int,
    exact: CosinesOf | None = None,
) -> Table | None:
    """Return the vectors of ``pages`` (seqs and their unit vectors) as one table; ``None`` where they pass ``budget`` bytes.

    A session whose vectors as stored pass the budget is still read up to
    :data:`_DISTINCT_READ` budgets and kept with each distinct part vector
    once (a field every step repeats), where that fits: parts cut from
    look-alike steps repeat (30,000 UFO-shaped steps cut into parts hold
    616,000 part vectors, 631 MB, of which 340,000 distinct, 348 MB), and a
    table that is not kept is read again page by page at every query.
    Where even that passes the budget, and ``exact`` gives the exact
    cosines of some seqs (read from the file), they are
    coded as int8 (:func:`compact_table`): the pages read so far, then the
    rest, as they come.
    """
    compact = None
    if exact is not None:
        compact = functools.partial(
            compact_table,
            model=embedder.name,
            parts=parts,
            width=embedder.dimension,
            budget=budget,
            cosines_of=exact,
        )
    held: list[tuple[list[int], Any]] = []
    size = 0
    pages = iter(pages)
    for page_keys, matrix in pages:
        held.append((page_keys, matrix))
        size += int(matrix.nbytes)
        if size > _DISTINCT_READ * budget:
            # Too large to keep as float32: coded, else read page by page at each query.
            return None if compact is None else compact(_drained(held, pages))
    np = numpy()
    blocks = [matrix for _, matrix in held]
    if len(held) == 1:  # one block (Backend.vector_matrix): neither copied nor a key at a time
        keys: Any = held[0][0]
        matrix = blocks[0]
    else:
        keys = [key for page_keys, _ in held for key in page_keys]
        matrix = np.concatenate(blocks) if blocks else np.zeros((0, embedder.dimension))
    del held, blocks
    if size <= budget:
        return Vectors.of_rows(embedder.name, parts, keys, matrix)
    table = Vectors.of_rows(embedder.name, parts, keys, matrix, distinct=True)
    if int(table.matrix.nbytes) <= budget:
        return table
    del table
    return None if compact is None else compact([(keys, matrix)])


def _drained(
    held: list[tuple[list[int], Any]], pages: Iterable[tuple[list[int], Any]]
) -> Iterator[tuple[list[int], Any]]:
    """Yield the pages ``held`` (letting each go as it is taken), then the rest of ``pages``."""
    held.reverse()
    while held:
        yield held.pop()
    yield from pages


def _up_to_date(
    table: Table, seqs: set[int] | None, read: Callable[[list[int]], dict[int, Any]]
) -> Table | None:
    """Return a kept ``table`` given the vectors ``read`` gives of the changed ``seqs`` (``Vectors.changed``); ``None`` to read every vector.

    ``None`` where the backend cannot tell what changed (``seqs`` is
    ``None``) and where so many items changed that reading them costs
    about what reading the session does.
    """
    items = table.items if isinstance(table, CompactVectors) else len(table.slot_of)
    if not follows(seqs, items):
        return None
    assert seqs is not None
    changed = sorted(seqs)
    return table.changed(changed, read(changed)) if changed else table


def _caught_up(
    table: CompactVectors,
    saved_at: Hashable,
    kept_as: tuple[Hashable, str, int],
    update: Callable[[Hashable, Table], Table | None],
) -> Table | None:
    """Return a coded file's ``table``, saved at version ``saved_at``, at the version of ``kept_as`` (version, model, dimension): as it is where they are the same, else brought up to date by ``update``, as a kept table follows writes (``None``: it cannot be; the table is built)."""
    if saved_at == kept_as[0]:
        return table
    return update((saved_at, *kept_as[1:]), table)


def over_budget(engine: Engine, cache: VectorCache, sid: str, filed: str) -> bool:
    """Return whether a session's stored vectors over ``filed`` pass the bytes ``cache`` keeps as float32 (``Store.vectors_over_budget``).

    Their bytes are summed once per version of them, then kept beside the
    rows' count (:meth:`VectorCache.counted`): from the coded table the
    handle keeps at that version, where it keeps one (its live part
    vectors, each a row of ``width`` float32: the rows as stored), else by
    a scan of the rows' lengths (80-130 ms of CPU at 100,000 SQLite steps
    cut into parts, 2.15 million part vectors). A ``StoredMemory`` over the
    budget asks at each version: after each write of vectors, and at its
    first query once built, where the store's own queries had kept the
    table at that version already.
    """
    backend = engine.backend

    def size() -> int:
        coded = _coded_bytes(backend, cache, sid, filed, version)
        return backend.vector_bytes(sid, filed) if coded is None else coded

    with engine.errors("read the vectors of", sid):
        version = backend.vectors_version(sid, filed)
        found = cache.counted(sid, f"{filed}\x00bytes", version, size)
    return found > cache.budget


def _coded_bytes(
    backend: Backend, cache: VectorCache, sid: str, filed: str, version: Hashable | None
) -> int | None:
    """Return the bytes of the session's stored vectors over ``filed`` from the coded table ``cache`` keeps at ``version``, or ``None`` where it keeps none."""
    if version is None:
        return None
    model = backend.vector_model(sid)
    if model is None:
        return None
    table = cache.kept(sid, filed, (version, *model))
    if not isinstance(table, CompactVectors):
        return None
    return table.live_parts * table.width * int(numpy().dtype(VECTOR_DTYPE).itemsize)


_TOKENIZER: Final = Tokenizer()

_DISTINCT_READ: Final = 2
"""A session's vectors are read into a table up to this many times the budget, to be kept with equal part vectors once if that fits."""


class VectorSearch:
    """The vector side of a store's calls (embedding, reading and dropping vectors, semantic and hybrid search)."""

    def __init__(
        self, engine: Engine, keyword: KeywordSearch, cache: VectorCache | None = None
    ) -> None:
        self._engine = engine
        self._backend = engine.backend
        self._keyword = keyword
        self._cache = VectorCache() if cache is None else cache
        self._saves = CodedSaves(engine)  # the coded files due as the handle closes

    def closing_saves(self) -> Callable[[], None] | None:
        """Return the saves of the coded files due as the handle closes (:class:`CodedSaves`), to run before its backend closes; ``None`` where none is due."""
        due = self._saves.due(self._cache.budget)
        back = self._saves.back(self._kept_coded)
        if not due and not back:
            return None
        return functools.partial(self._saves.save, due, self._coded, self._cache.budget, back)

    def _kept_coded(self, file: CodedFile) -> CompactVectors | None:
        """Return the coded table this handle keeps of ``file``'s session at its version, or ``None``."""
        kept = self._cache.kept(file.session_id, file.filed, (file.version, file.model, file.width))
        return kept if isinstance(kept, CompactVectors) else None

    def model(self, sid: str) -> VectorModel | None:
        """Return the session's recorded embedding model (``Store.vector_model``)."""
        with self._engine.errors("read the vector model of", sid):
            found = self._backend.vector_model(sid)
        return None if found is None else VectorModel(found[0], found[1])

    def index(
        self,
        sid: str,
        embedder: Embedder,
        fields: tuple[str, ...] | None,
        batch_size: int,
        progress: Callable[[int, int], object] | None,
        parts: EmbedParts,
    ) -> int:
        """Embed and store the missing vectors; return how many items hold one (``Store.index_embeddings``)."""
        if type(batch_size) is not int or batch_size < 1:
            msg = f"index_embeddings() takes batch_size >= 1, got {batch_size!r}."
            raise StoreArgumentError(msg)
        check_embedder(embedder)
        if not self._backend.keeps_vectors:
            msg = (
                f"Store {self._engine.url} keeps no vectors: its backend "
                f"({type(self._backend).__name__}) does not implement the vector operations "
                "(Backend.keeps_vectors), so there is nothing to index. Semantic and hybrid "
                "search still work: they embed the session's items at each query. Nothing was changed."
            )
            raise StoreError(msg)
        self._checked_model(sid, embedder)
        self._embed_missing(sid, embedder, fields, batch_size, progress, parts)
        with self._engine.errors("read the vectors of", sid):
            return self._backend.vector_counts(sid, fields_text(fields, parts))[1]

    def read(
        self,
        sid: str,
        embedder: Embedder,
        fields: tuple[str, ...] | None,
        seqs: Iterable[int] | None,
        parts: EmbedParts,
    ) -> dict[int, Any]:
        """Return the stored unit vectors by seq (``Store.read_vectors``): a matrix of parts each, a vector with ``WHOLE``."""
        check_embedder(embedder)
        if self._checked_model(sid, embedder) is None:
            return {}
        filed = fields_text(fields, parts)
        out: dict[int, Any] = {}
        errors = self._engine.errors
        read: list[tuple[list[int], Any]] | None = None  # every page, for the cache
        if seqs is None:
            with errors("read the vectors of", sid):
                # Read before the vectors, as a query's kept table is: a write after it makes it stale.
                version = self._backend.vectors_version(sid, filed)
                if version is not None and self._stores_vectors():
                    # Unless the backend ranks them itself: no query would score from that table.
                    ranks = parts == EmbedParts.WHOLE and self._backend.ranks_vectors(sid, filed)
                    read = None if ranks else []
            pages = self._backend.vector_pages(sid, filed, 4096)
        else:
            wanted = [check_seq(seq, "seq") for seq in seqs]
            with errors("read the vectors of", sid):
                pages = iter([self._backend.vectors_of(sid, filed, wanted)] if wanted else [])
        while True:
            with errors("read the vectors of", sid):
                rows = next(pages, None)
            if rows is None:
                if read is not None:  # the session's every vector: the next query scores from them
                    made = functools.partial(_table_of, read, embedder, parts)
                    kept_as = (version, embedder.name, embedder.dimension)
                    self._cache.offer(sid, filed, kept_as, made)
                return out
            keys_of, matrix = _decoded_vectors(self._engine.url, sid, embedder, rows)
            if read is not None:
                read.append((keys_of, matrix))
            if parts == EmbedParts.WHOLE:
                out.update(zip(keys_of, matrix, strict=True))
                continue
            out.update(_parts_by_seq(keys_of, matrix))

    def drop(self, sid: str) -> int:
        """Delete a session's vectors and model in one transaction (``Store.drop_vectors``)."""
        backend = self._backend
        self._cache.forget(sid)
        with self._engine.errors("drop the vectors of", sid), backend.transaction(sid) as tx:
            if backend.lock_session(tx, sid) is None:
                return 0
            return backend.drop_vectors(tx, sid)

    def _embed_missing(
        self,
        sid: str,
        embedder: Embedder,
        fields: tuple[str, ...] | None,
        batch_size: int,
        progress: Callable[[int, int], object] | None,
        parts: EmbedParts,
    ) -> int | None:
        """Embed and store the items without a vector over ``fields`` (when none lacks one: the item count, and the vector rows' count once per version of them); return the item count read first, or ``None`` where queries store no vectors (:meth:`_stores_vectors`: nothing is embedded)."""
        if not self._stores_vectors():
            return None
        filed = fields_text(fields, parts)
        backend = self._backend
        with self._engine.errors("read the vectors of", sid):
            version = backend.vectors_version(sid, filed)
            covered = self._cache.counted(
                sid, filed, version, lambda: backend.vector_count(sid, filed)
            )
            count = backend.count(sid)
        if covered >= count:
            return count
        source = f"session {sid!r} of {self._engine.url}"
        pending: list[tuple[int, bytes, list[str]]] = []
        known: dict[str, Any] = {}  # the parts embedded so far, for the items after (bounded)
        done = 0
        written = Written(sid, fields, parts, embedder)
        pages = self._backend.unembedded_pages(sid, filed, max(batch_size, 256))
        while True:
            with self._engine.errors("read", sid):
                rows = next(pages, None)
            if rows is not None:
                pairs = decode_pairs(rows, source, "base")
                pending += [
                    (seq, data, parts.texts(item_fields(item), fields))
                    for (seq, data), (_, item) in zip(rows, pairs, strict=True)
                ]
            while pending and (len(pending) >= batch_size or rows is None):
                chunk = pending[:batch_size]
                del pending[:batch_size]
                size = self._store_vectors(sid, embedder, filed, chunk, known)
                self._saves.wrote(written, len(chunk), size)
                done += len(chunk)
                if progress is not None:
                    progress(done, max(count - covered, done))
            if rows is None:
                return count

    def search(
        self,
        sid: str,
        text: str,
        k: int,
        fields: tuple[str, ...] | None,
        mode: str,
        embedder: Embedder | None,
        weight: float,
        on_unknown_class: OnUnknownClass,
        keep: Filter | None = None,
        parts: EmbedParts | None = None,
    ) -> list[StoreHit]:
        """Rank a session by exact cosine over its stored vectors (semantic), or blended with BM25 (hybrid).

        With ``keep``, the best ``k`` that pass it, as ``Memory.search`` keeps
        them: in semantic mode the best cosines are asked for in longer
        rankings until ``k`` pass; in hybrid mode the blended candidates are
        walked best first.
        """
        if parts is None:
            parts = EmbedParts()
        if embedder is None:
            msg = f"search(mode={mode!r}) of a store needs embedder=...: the model the session's vectors come from (for example HashingEmbedder() or WordLlamaEmbedder())."
            raise InvalidQueryError(msg)
        check_embedder(embedder)
        self._checked_model(sid, embedder)
        query = checked_vectors(embedder, [text])[0]
        counted = self._embed_missing(sid, embedder, fields, 256, None, parts)
        count = _counter(self._backend, sid, counted)  # read once a query, where it is asked
        found: dict[int, MemoryItem] = {}
        read = reader(self._engine, sid, on_unknown_class)
        if mode == "semantic" and keep is not None:
            kept = None
            if parts != EmbedParts.WHOLE and not self._engine.read_only:
                kept = self._kept_table(sid, embedder, fields, parts)
            if kept is not None:
                passing = _kept_passing(
                    self._engine, sid, kept, query, k, keep, found, read, on_unknown_class, count
                )
                return [StoreHit(seq, item, score) for seq, score, item in passing]
            # A backend where asking which rows pass reads them all walks the ranking at once.
            with self._engine.errors("search", sid):
                walks = self._backend.walks_filtered(sid, keep.tree, count() // FEW)
            few = None if walks else _few(self._engine, sid, keep, count)
            if few is not None:  # few rows may pass: score only their vectors
                cosines = self._cosines_of(sid, embedder, fields, query, few, parts)
                ranked = sorted(cosines.items(), key=lambda hit: (-hit[1], hit[0]))
                passing = first_passing(ranked, k, keep, found, read)
                return [StoreHit(seq, item, score) for seq, score, item in passing]

            def rank(limit: int) -> list[tuple[int, float]]:
                cosines = self._best_cosines(sid, embedder, fields, query, limit, {}, parts)
                np = numpy()
                keys = np.fromiter(cosines, dtype=np.int64, count=len(cosines))
                sims = np.fromiter(cosines.values(), dtype=np.float64, count=len(cosines))
                return ranked_top(keys, sims, limit)  # every cosine, for parts: sorted in numpy

            narrow = narrower(self._engine, sid, keep)
            # Parts are scored in numpy, every cosine at each call: one ranking of them all.
            first = ALL if parts != EmbedParts.WHOLE else None
            judged: Screener | None = None
            if walks:
                # Each slice of a ranking as deep as the kept path's is judged before it is read
                # (Backend.filter_among_rows): rows judged before are skipped or read with it.
                judged = Screener(self._engine, sid, keep, found, on_unknown_class)
                first = first or max(k, NARROW_AT)
            passing = widening(
                rank, k, keep, found, read, first=first, narrow=narrow, screen=judged
            )
            return [StoreHit(seq, item, score) for seq, score, item in passing]
        if mode == "semantic":
            scores = self._best_cosines(sid, embedder, fields, query, k, {}, parts)
        else:
            pool = max(10 * k, HYBRID_POOL)

            def ranking(among: Sequence[int]) -> tuple[dict[int, float], Table | None]:
                kept: list[Table] = []  # the kept table it scored from, if any
                found = self._best_cosines(sid, embedder, fields, query, pool, among, parts, kept)
                return found, kept[0] if kept else None

            pooled = held_pool(pool, ranking, query)
            few = None if keep is None else _few(self._engine, sid, keep, count)  # then only those
            terms, reads = _TOKENIZER(text), QueryReads(count)  # read once for every blend
            ranks = held_ranking(functools.partial(self._backend.keyword_top, sid, terms))

            def scored(
                depth: int, bounded: bool, among: Sequence[int] | None, pruning: Pruning | None
            ) -> tuple[dict[int, float], dict[int, MemoryItem]]:
                args = (sid, terms, fields, depth, pooled, weight, on_unknown_class, bounded, among)
                return self._keyword.hybrid_scores(*args, None, pool, ranks, pruning, reads)

            if keep is not None:
                screened = _screened(self._engine, sid, keep, k, read, on_unknown_class)
                walks = few is None and self._keyword.walks(fields)
                fewer = _fewer(self._engine, sid, keep, count)
                hits = walked_passing(scored, k, walks, screened, few, fewer, pooled.ceilings)
                return [StoreHit(seq, item, score) for seq, score, item in hits]
            scores, found = scored(k, True, None, None)
        best = heapq.nsmallest(k, scores.items(), key=lambda hit: (-hit[1], hit[0]))
        missing = [seq for seq, _ in best if seq not in found]
        if missing:
            found = {**found, **self._engine.read_items(sid, missing, on_unknown_class)}
        return [StoreHit(seq, found[seq], score) for seq, score in best if seq in found]

    def cosines(
        self,
        sid: str,
        embedder: Embedder,
        fields: tuple[str, ...] | None,
        query: Any,
        limit: int,
        among: Iterable[int],
        parts: EmbedParts,
    ) -> dict[int, float]:
        """Return a session's best cosines with the unit ``query`` (the best ``limit`` with ties, and ``among``), by seq.

        What a hybrid search over several sessions needs of each: the
        session's model is checked and, on a writable handle, its items
        without a vector are embedded and stored first, as :meth:`search` does.
        """
        self._checked_model(sid, embedder)
        self._embed_missing(sid, embedder, fields, 256, None, parts)
        return self._best_cosines(sid, embedder, fields, query, limit, among, parts)

    def ceilings(self, at: Written, query: Any, among: Iterable[int]) -> dict[int, float] | None:
        """Return an upper bound of the best cosine with the unit ``query`` of each of ``among`` that holds a vector, by seq, from ``at``'s coded table (nothing read); ``None`` where none is kept coded."""
        self._checked_model(at.session_id, at.embedder)
        table = self._kept_table(at.session_id, at.embedder, at.fields, at.parts)
        return table.ceilings(query, among) if isinstance(table, CompactVectors) else None

    def _best_cosines(
        self,
        sid: str,
        embedder: Embedder,
        fields: tuple[str, ...] | None,
        query: Any,
        limit: int,
        among: Iterable[int],
        parts: EmbedParts,
        kept: list[Table] | None = None,
    ) -> dict[int, float]:
        """Return the best cosine of a part of the best ``limit`` items (with ties) and of ``among``, by seq.

        The backend computes them where it can (:meth:`Backend.nearest`); else the
        vectors are read a page at a time and scored with numpy. A read-only
        handle (and a backend that keeps no vectors) also embeds, without
        storing, the items that have no vector yet, so its ranking is the
        same as a writer's; it then scores every
        item with numpy, so that the items embedded now and those stored
        are compared by one computation (a tie is a tie in both). The
        backend computes one cosine per stored row, so vectors cut into
        parts (several vectors a row) are always scored with numpy.
        """
        filed = fields_text(fields, parts)
        wanted = list(among)
        with self._engine.errors("search", sid):
            rows = None
            if parts == EmbedParts.WHOLE:
                rows = self._backend.nearest(
                    sid, filed, query.astype(VECTOR_DTYPE).tobytes(), limit, wanted
                )
            if rows is not None and self._engine.read_only:
                rows = (
                    rows
                    if self._backend.vector_count(sid, filed) >= self._backend.count(sid)
                    else None
                )
        if rows is None:
            table = self._kept_table(sid, embedder, fields, parts)
            if table is not None:
                if kept is not None:
                    kept.append(table)  # the caller may score more items from it (held_pool)
                return table.scores(query, limit, wanted)
            # Not kept: read a page at a time (a backend that cannot vouch, a session over the budget).
            pages = itertools.chain(
                _stored_cosine_pages(self._engine, sid, embedder, filed),
                self._unembedded_cosine_pages(sid, embedder, fields, parts),
            )
            return best_cosines(pages, query, limit, wanted)
        scored: dict[int, float] = {}
        for seq, cosine, length in rows:
            if cosine is None:
                raise _damaged_vector(self._engine.url, sid, seq, length, embedder)
            scored[seq] = cosine
        return scored

    def _kept_table(
        self, sid: str, embedder: Embedder, fields: tuple[str, ...] | None, parts: EmbedParts
    ) -> Table | None:
        """Return the session's vectors as a table kept between queries, or ``None`` to read them (see :class:`VectorCache`).

        ``None`` where the backend cannot vouch for a kept table
        (:meth:`Backend.vectors_version`), and on a read-only handle while
        some items have no vector yet (they are embedded at each query).
        """
        filed = fields_text(fields, parts)
        with self._engine.errors("search", sid):
            version = self._backend.vectors_version(sid, filed)
            if version is None:
                return None
            if not self._stores_vectors() and self._backend.vector_count(
                sid, filed
            ) < self._backend.count(sid):
                return None

        exact = functools.partial(self._cosines_of, sid, embedder, fields, parts=parts)
        file = CodedFile(self._backend, sid, filed, version, embedder.name, embedder.dimension)

        written = Written(sid, fields, parts, embedder)
        load = functools.partial(self._coded, written, file)

        def saved(budget: int) -> Table | None:
            with self._engine.errors("search", sid):
                loaded = file.load(budget, parts, exact)
            return None if loaded is None else _caught_up(*loaded, kept_as, update)

        def update(kept: Hashable, table: Table) -> Table | None:
            if not isinstance(kept, tuple) or kept[1:] != kept_as[1:]:
                return None
            with self._engine.errors("search", sid):
                seqs = self._backend.vector_changes(sid, filed, kept[0], version)
            now = _up_to_date(table, seqs, lambda of: self.read(sid, embedder, fields, of, parts))
            if isinstance(now, CompactVectors) and now is not table:
                self._saves.caught(written)  # saved back as the handle closes, where due
            return now

        kept_as = (version, embedder.name, embedder.dimension)
        return self._cache.table(sid, filed, kept_as, load, update, saved if file.path else None)

    def _coded(self, written: Written, file: CodedFile, budget: int) -> Table | None:
        """Return the session's stored vectors as a table of at most ``budget`` bytes (:func:`_table_of`), a coded one saved to ``file`` as it is built; ``None`` where none fits."""
        sid, embedder, parts = written.session_id, written.embedder, written.parts
        exact = functools.partial(self._cosines_of, sid, embedder, written.fields, parts=parts)
        pages = _stored_cosine_pages(
            self._engine, sid, embedder, fields_text(written.fields, parts)
        )
        table = _table_of(pages, embedder, parts, budget, exact)
        if isinstance(table, CompactVectors):
            with self._engine.errors("search", sid):
                file.save(table)
        return table

    def _cosines_of(
        self,
        sid: str,
        embedder: Embedder,
        fields: tuple[str, ...] | None,
        query: Any,
        seqs: Sequence[int],
        parts: EmbedParts,
    ) -> dict[int, float]:
        """Return the best cosine of a part of each of ``seqs`` that holds a vector, by seq: the floats of scoring every row."""
        filed = fields_text(fields, parts)
        out: dict[int, float] = {}
        for start in range(0, len(seqs), 4096):
            with self._engine.errors("search", sid):
                rows = self._backend.vectors_of(sid, filed, seqs[start : start + 4096])
            if rows:
                out.update(
                    best_cosines(
                        [_decoded_vectors(self._engine.url, sid, embedder, rows)], query, None
                    )
                )
        return out

    def _unembedded_cosine_pages(
        self, sid: str, embedder: Embedder, fields: tuple[str, ...] | None, parts: EmbedParts
    ) -> Iterator[tuple[list[int], Any]]:
        """Yield ``(seqs, unit vectors)`` of the parts of items without vectors, embedded now (handles that store none)."""
        if self._stores_vectors():
            return
        filed = fields_text(fields, parts)
        source = f"session {sid!r} of {self._engine.url}"
        unembedded = self._backend.unembedded_pages(sid, filed, 1024)
        known: dict[str, Any] = {}
        while True:
            with self._engine.errors("search", sid):
                rows = next(unembedded, None)
            if rows is None:
                return
            texts = [
                (seq, text)
                for seq, item in decode_pairs(rows, source, "base")
                for text in parts.texts(item_fields(item), fields)
            ]
            if texts:
                yield (
                    [seq for seq, _ in texts],
                    vectors_once(embedder, [t for _, t in texts], known),
                )

    def _store_vectors(
        self,
        sid: str,
        embedder: Embedder,
        filed: str,
        chunk: Sequence[tuple[int, bytes, list[str]]],
        known: dict[str, Any],
    ) -> int:
        """Embed one batch and write its vectors (an item's parts in one row) in one transaction (nothing if the embedder fails); return the bytes written.

        Each distinct part is embedded once (:func:`vectors_once`), none
        that ``known`` (the parts of the batches before) holds.
        """
        blobs = [b""] * len(chunk)
        texts = [text for _, _, item_texts in chunk for text in item_texts]
        if texts:
            unit = vectors_once(embedder, texts, known).astype(VECTOR_DTYPE)
            row = 0
            for position, (_, _, item_texts) in enumerate(chunk):
                blobs[position] = unit[row : row + len(item_texts)].tobytes()
                row += len(item_texts)
        rows = [(seq, data, blob) for (seq, data, _), blob in zip(chunk, blobs, strict=True)]
        with self._engine.errors("write the vectors of", sid), self._backend.transaction(sid) as tx:
            if self._backend.lock_session(tx, sid) is None:
                return 0
            found = self._backend.claim_vector_model(tx, sid, embedder.name, embedder.dimension)
            if found != (embedder.name, embedder.dimension):
                raise EmbedderMismatchError(_mismatch(self._engine.url, sid, found, embedder))
            self._backend.put_vectors(tx, sid, filed, rows)
        return sum(len(blob) for blob in blobs)

    def _stores_vectors(self) -> bool:
        """Return whether a query stores the vectors it lacks (a writable handle on a backend that keeps them).

        Otherwise (a read-only handle, a backend without the vector
        operations) the items without a vector are embedded at each query
        and scored with the stored ones, so the ranking is the same.
        """
        return not self._engine.read_only and self._backend.keeps_vectors

    def _checked_model(self, sid: str, embedder: Embedder) -> tuple[str, int] | None:
        """Return the session's recorded model; raise if ``embedder`` is another one."""
        with self._engine.errors("read the vector model of", sid):
            found = self._backend.vector_model(sid)
        if found is not None and found != (embedder.name, embedder.dimension):
            raise EmbedderMismatchError(_mismatch(self._engine.url, sid, found, embedder))
        return found


def _stored_cosine_pages(
    engine: Engine, sid: str, embedder: Embedder, filed: str
) -> Iterator[tuple[list[int], Any]]:
    """Yield ``(seqs, unit vectors)`` of the stored vectors of a session a page at a time (all at once where the backend holds them in one block: :meth:`Backend.vector_matrix`)."""
    backend = engine.backend
    with engine.errors("search", sid):
        block = backend.vector_matrix(sid, filed)
    if block is not None:
        yield _block_vectors(engine.url, sid, embedder, block)
        return
    pages = backend.vector_pages(sid, filed, 4096)
    while True:
        with engine.errors("search", sid):
            rows = next(pages, None)
        if rows is None:
            return
        yield _decoded_vectors(engine.url, sid, embedder, rows)


def _decoded_vectors(
    url: str, sid: str, embedder: Embedder, rows: Sequence[tuple[int, bytes]]
) -> tuple[list[int], Any]:
    """Return the seq of each stored vector and their matrix; a row of no whole number of vectors is damage.

    A row holds an item's vectors one after the other: one with
    ``EmbedParts.WHOLE``, one per part otherwise (none for an item
    without text), so its seq is repeated once per vector.
    """
    np = numpy()
    size = 4 * embedder.dimension
    vectors = [vector for _, vector in rows]
    lengths = list(map(len, vectors))
    if lengths and min(lengths) == max(lengths) == size:  # the usual page: all whole vectors
        matrix = np.frombuffer(b"".join(vectors), dtype=VECTOR_DTYPE).reshape(len(rows), -1)
        return [seq for seq, _ in rows], matrix.astype(np.float32, copy=False)
    seqs: list[int] = []
    blobs: list[bytes] = []
    for seq, vector in rows:
        if len(vector) % size:
            raise _damaged_vector(url, sid, seq, len(vector), embedder)
        if len(vector):
            seqs.extend([seq] * (len(vector) // size))
            blobs.append(bytes(vector))
    matrix = np.frombuffer(b"".join(blobs), dtype=VECTOR_DTYPE).reshape(
        len(seqs), embedder.dimension
    )
    return seqs, matrix.astype(np.float32, copy=False)


def _block_vectors(
    url: str,
    sid: str,
    embedder: Embedder,
    block: tuple[Sequence[int], Sequence[int], bytes | memoryview],
) -> tuple[Any, Any]:
    """Return the key of each stored vector and their matrix from one block (:meth:`Backend.vector_matrix`), checked as :func:`_decoded_vectors` checks pages."""
    np = numpy()
    size = 4 * embedder.dimension
    seqs, lengths, blob = block
    seq_array, length_array = _int_array(np, seqs), _int_array(np, lengths)
    odd = np.flatnonzero(length_array % size)
    if len(odd) or len(seq_array) != len(length_array) or int(length_array.sum()) != len(blob):
        at = int(odd[0]) if len(odd) else 0
        seq = int(seq_array[at]) if len(seq_array) else 0
        length = int(length_array[at]) if len(length_array) else len(blob)
        raise _damaged_vector(url, sid, seq, length, embedder)
    keys = np.repeat(seq_array, length_array // size)
    matrix = np.frombuffer(blob, dtype=VECTOR_DTYPE).reshape(len(keys), embedder.dimension)
    return keys, matrix.astype(np.float32, copy=False)


def _int_array(np: Any, values: Sequence[int]) -> Any:
    """Return ``values`` as an int64 array (a memoryview of native unsigned ints read through its buffer)."""
    if isinstance(values, memoryview):
        return np.frombuffer(values, dtype=f"=u{values.itemsize}").astype(np.int64)
    return np.asarray(values, dtype=np.int64)


def _screened(
    engine: Engine,
    sid: str,
    keep: Filter,
    k: int,
    read: Callable[[Sequence[int]], Mapping[int, MemoryItem]],
    on_unknown_class: OnUnknownClass,
) -> Callable[[Sequence[tuple[int, float]], dict[int, MemoryItem]], Passing]:
    """Return ``passing(ranked, found)``: the first ``k`` of a ranking that pass ``keep``, screened a slice at a time (a rare filter reads only the rows that may pass)."""

    def passing(ranked: Sequence[tuple[int, float]], found: dict[int, MemoryItem]) -> Passing:
        screen = Screener(engine, sid, keep, found, on_unknown_class)
        return first_passing(ranked, k, keep, found, read, screen=screen)

    return passing


def _few(
    engine: Engine,
    sid: str,
    keep: Filter,
    count: Callable[[], int],
    *,
    share: int = FEW,
) -> list[int] | None:
    """Return the seqs of the rows that may pass ``keep`` when one in 16 at most may (``Backend.filter_few``), else ``None``.

    A read-only handle, which embeds the items without a vector for each
    query, ranks as before. ``count()`` gives the session's item count
    (:func:`_counter`).
    """
    if engine.read_only:
        return None
    backend = engine.backend
    with engine.errors("search", sid):
        # As many as FEW * len(allowed) <= count allows: the backend stops past them.
        allowed = backend.filter_few(sid, keep.tree, count() // share)
        if allowed is None:
            return None
    return sorted(allowed)


def _counter(backend: Backend, sid: str, count: int | None) -> Callable[[], int]:
    """Return ``count()``: the session's item count, ``count`` where the query has read it, else asked of ``backend`` at the first call only.

    A filtered query sizes its asks by it (``Backend.walks_filtered``,
    ``Backend.filter_few``): a bound, not a result, so one read serves
    them all; the caller asks it inside its ``engine.errors`` block.
    """
    if count is not None:
        return lambda: count
    return functools.cache(lambda: backend.count(sid))


def _fewer(
    engine: Engine, sid: str, keep: Filter, count: Callable[[], int]
) -> Callable[[], list[int] | None] | None:
    """Return ``fewer()`` for a filtered hybrid walk whose first depth falls short: the rows that may pass where at most one in ``HYBRID_FEW`` may (:func:`_few`).

    ``None`` where the backend walks filters (``Backend.walks_filtered``: a
    JSONL handle judging rows by their offsets would read its whole log to
    answer): the walk goes deeper instead, as it reads rows by offset.
    ``count()`` gives the session's item count (:func:`_counter`).
    """
    backend = engine.backend
    with engine.errors("search", sid):
        if backend.walks_filtered(sid, keep.tree, count() // HYBRID_FEW):
            return None
    return functools.partial(_few, engine, sid, keep, count, share=HYBRID_FEW)


def _kept_passing(
    engine: Engine,
    sid: str,
    kept: Table,
    query: Any,
    k: int,
    keep: Filter,
    found: dict[int, MemoryItem],
    read: Callable[[Sequence[int]], Mapping[int, MemoryItem]],
    on_unknown_class: OnUnknownClass,
    count: Callable[[], int],
) -> Passing:
    """Return the best ``k`` that pass ``keep`` by the cosines of the vectors kept in memory (``kept``).

    Where the backend tells which rows may pass without judging every row
    and at most one in :data:`FEW` may (``Backend.filter_few_kept``: an
    index names them, or an answer is kept), only their vectors are scored
    (``scores_of``, the same floats). Else every cosine, costing about what
    the unfiltered query does (scored once, with no screen: a ranking a
    thousand items deep costs a screen more than every row): the ranking is
    walked, asking which rows of each slice may pass, with their items, in
    one call (``Backend.filter_among_rows``); without an answer, which rows
    of the session may pass once ``NARROW_AT`` fall short.
    """
    with engine.errors("search", sid):
        few = engine.backend.filter_few_kept(sid, keep.tree, count() // FEW)
    if few is not None:
        scores = kept.scores_of(query, few)
        ranked = sorted(scores.items(), key=lambda hit: (-hit[1], hit[0]))
        return first_passing(ranked, k, keep, found, read)
    keys, every = kept.every_score(query)

    def rank_kept(limit: int) -> list[tuple[int, float]]:
        return ranked_top(keys, every, limit)

    screen = Screener(engine, sid, keep, found, on_unknown_class)
    start = max(k, NARROW_AT)
    passing = _through_index(engine, sid, keep, k, rank_kept(start), found, read, screen)
    if passing is None:
        narrowed = narrower(engine, sid, keep)
        passing = widening(
            rank_kept, k, keep, found, read, first=start, narrow=narrowed, screen=screen
        )
    return passing


def _through_index(
    engine: Engine,
    sid: str,
    keep: Filter,
    k: int,
    ranked: Sequence[tuple[int, float]],
    found: dict[int, MemoryItem],
    read: Callable[[Sequence[int]], Mapping[int, MemoryItem]],
    screen: Screener,
) -> Passing | None:
    """Return the best ``k`` of ``ranked`` that pass ``keep`` where its first slice settles them, for a filter an index names; ``None`` otherwise.

    The first slice (``max(64, 2k)`` rows) is screened as the walk screens
    it (``screen``: the rows that may pass read with their verdict): a
    filter most rows pass is settled there, without asking the index for
    nearly every row. ``None`` where the index names no such filter
    (``Backend.filter_named``), or the slice holds fewer than ``k``.
    """
    if not engine.backend.filter_named(keep.tree):
        return None
    passing = first_passing(ranked[: max(_FIRST_SLICE, 2 * k)], k, keep, found, read, screen=screen)
    return passing if len(passing) == k else None


def _damaged_vector(
    url: str, sid: str, seq: int, length: int, embedder: Embedder
) -> CorruptStoreError:
    """Return the error for a stored vector of the wrong byte length."""
    msg = (
        f"The vector of item {seq} of session {sid!r} of {url} holds "
        f"{length} bytes; expected {4 * embedder.dimension} ({embedder.dimension} float32 of "
        f"model {embedder.name!r}), or a multiple of it for vectors cut into parts. "
        f"The store is damaged: drop the session's vectors with "
        f"drop_vectors({sid!r}) and index them again."
    )
    return CorruptStoreError(msg)


def _mismatch(url: str, sid: str, found: tuple[str, int], embedder: Embedder) -> str:
    """Return the message for a session whose vectors come from another model than ``embedder``."""
    return (
        f"Session {sid!r} of {url} holds vectors of embedding model {found[0]!r} "
        f"({found[1]} dimensions), and this call uses {embedder.name!r} "
        f"({embedder.dimension} dimensions); vectors of two models cannot be compared. "
        f"Use the same embedder, or embed the session again: drop_vectors({sid!r}), then "
        f"index_embeddings({sid!r}, embedder). Nothing was changed."
    )


def check_embedder(embedder: object) -> None:
    """Raise :class:`StoreArgumentError` unless ``embedder`` looks like an :class:`Embedder`."""
    name = getattr(embedder, "name", None)
    dimension = getattr(embedder, "dimension", None)
    if (
        type(name) is not str
        or type(dimension) is not int
        or dimension < 1
        or not callable(embedder)
    ):
        msg = f"embedder must be an Embedder (a callable with a str name and an int dimension >= 1), got {embedder!r}."
        raise StoreArgumentError(msg)
