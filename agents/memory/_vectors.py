"""Semantic search's shared ground: the embedder protocol, vector checks, top-k cosines and the hybrid blend.

Both the in-RAM index (``agents.memory.search``) and the stores (which keep
vectors with their items and score a session page by page) embed the same
text of an item, check an embedder's output the same way, pick the best
cosines with the same rule for ties, and blend keyword and semantic scores
with the same function, so that they rank alike. numpy is imported on first
use (the ``semantic`` or ``numpy`` extra).
"""

from __future__ import annotations

import heapq
import importlib
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from typing import Any, ClassVar, Final, Literal, Protocol, runtime_checkable

import attrs

from agents.memory import _codec
from agents.memory._text import field_texts as field_texts_of
from agents.memory._text import lucene_idf
from agents.memory.exceptions import (
    EmbeddingError,
    InvalidArgumentError,
    InvalidQueryError,
    missing_dependency,
)

__all__ = [
    "COVERAGE_POWER",
    "HYBRID_KEYWORD_WEIGHT",
    "HYBRID_POOL",
    "KEYWORD_BACKGROUND",
    "LEADER_LEAD",
    "SEMANTIC_REFERENCE",
    "SHARED_TOP",
    "TEXTS_KEPT",
    "VECTOR_DTYPE",
    "EmbedParts",
    "Embedder",
    "SearchMode",
    "best_cosines",
    "blend",
    "blend_ceiling",
    "blend_ceilings",
    "checked_vectors",
    "checked_weight",
    "cosines",
    "embed_parts",
    "embed_text",
    "fields_text",
    "kept_first",
    "keyword_leader",
    "keyword_scale",
    "keyword_share",
    "numpy",
    "progress_bar",
    "ranked_top",
    "semantic_discount",
    "stand_out",
    "stands_out",
    "top_rows",
    "vectors_once",
]

SearchMode = Literal["keyword", "semantic", "hybrid"]
"""How a search ranks: BM25 over words, cosine over embeddings, or a blend of both."""

HYBRID_KEYWORD_WEIGHT = 0.6
"""The share of the keyword score in a hybrid score (the rest is the semantic one).

Scaled by ``q ** COVERAGE_POWER``, ``q`` being how much of the query the
best keyword hit holds (:data:`COVERAGE_POWER`): the whole share when it
holds every query word.

Both are on an absolute 0..1 scale. BM25 is scaled against the corpus,
not the query (:func:`keyword_share`: ``x**3 / (1 + x**3)``, ``x`` being
BM25 over :func:`keyword_scale`, twice the IDF of a word only one item
holds), so words of the query that no item holds change nothing and a
match on common words alone stays near 0. The cosine is taken as it is
(below 0 as 0) and discounted by how crowded the top of the query's
cosine ranking is (:func:`semantic_discount`). Where no keyword hit
holds the query's words together, each side counts by how it stands out
over the query's own background instead (:func:`stand_out`). In
``benchmarks/bench_search.py
--sections hybrid`` this blend came within 0.02 of the better of keyword
and semantic search on lexical and paraphrased queries, statements and
questions, short and long steps, facts in a field or at the start, middle
or end of a page, with vectors of parts (the default) and of whole items
(see docs/search.md).
"""

COVERAGE_POWER: Final = 8
"""A hybrid query's keyword share is ``HYBRID_KEYWORD_WEIGHT * q ** COVERAGE_POWER``.

``q`` is the share of the query's IDF weight (its distinct words some item
holds) that the best keyword hit holds (:func:`blend`). A leader holding
every word keeps the whole keyword share; one holding half of the weight
keeps 1/256 of it, and the semantic side decides. An explicit
``hybrid_weight`` of 0 or 1 is not scaled: one side alone ranks. Chosen on
the tuning corpora of ``benchmarks/bench_blend.py`` (see docs/search.md).
"""

SHARED_TOP: Final = 5
"""A hybrid query whose keyword leader holds every query word ranks first every item both sides rank among their best this many (:func:`kept_first`)."""

LEADER_LEAD: Final = 0.8
"""A hybrid query ranks its keyword leader first when it holds every query word and the runner-up's BM25 is at most this share of its own (:func:`kept_first`)."""

KEYWORD_BACKGROUND: Final = 5
"""The rank whose keyword share is a hybrid query's keyword background where no hit holds its words together (:func:`stand_out`)."""

SEMANTIC_REFERENCE = 100
"""The rank whose cosine is a hybrid query's background (:func:`semantic_discount`)."""

HYBRID_POOL = 100
"""Hybrid mode blends the keyword hits with this many best semantic ones (at least ``10 * k``)."""

VECTOR_DTYPE: Final = "<f4"
"""How a stored vector is laid out: little-endian float32, ``4 * dimension`` bytes."""


def numpy() -> Any:
    """Return the numpy module, or raise naming the extra that installs it."""
    try:
        return importlib.import_module("numpy")
    except ImportError as exc:
        raise missing_dependency("numpy", "semantic") from exc


@runtime_checkable
class Embedder(Protocol):
    """Turns a batch of texts into one vector per text: what semantic search calls.

    An embedder is a callable from a sequence of ``n`` texts to a float32
    numpy array of shape ``(n, dimension)``, with a ``name`` (the model, as
    recorded with the vectors: vectors of one model are never compared with
    a query embedded by another) and the ``dimension`` of its vectors.
    Vectors need not be normalised; search compares them by cosine.
    """

    @property
    def name(self) -> str:
        """The model's name, for example ``"wordllama-l2_supercat-256"``."""
        ...

    @property
    def dimension(self) -> int:
        """The length of each vector."""
        ...

    def __call__(self, texts: Sequence[str], /) -> Any:
        """Return a float32 array of shape ``(len(texts), dimension)``."""
        ...


def checked_vectors(embedder: Embedder, texts: Sequence[str]) -> Any:
    """Call ``embedder`` on ``texts`` and return its vectors as float32, unit length.

    Raises:
        EmbeddingError: naming the embedder and what it returned, if the
            result is not ``(len(texts), dimension)`` finite numbers.
    """
    np = numpy()
    name = getattr(embedder, "name", repr(embedder))
    try:
        raw = embedder(list(texts))
        vectors = np.asarray(raw, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        msg = f"Embedder {name!r} returned {type(exc).__name__}: {exc}; it must return a float32 array of shape (n, dimension)."
        raise EmbeddingError(msg) from exc
    expected = (len(texts), embedder.dimension)
    if vectors.shape != expected:
        msg = f"Embedder {name!r} returned an array of shape {vectors.shape} for {len(texts)} texts; expected {expected} (n texts by its dimension)."
        raise EmbeddingError(msg)
    finite = np.isfinite(vectors).all(axis=1)
    if not finite.all():
        bad = int(np.argmin(finite))
        msg = f"Embedder {name!r} returned NaN or infinite values for text {bad} ({texts[bad][:40]!r}); nothing was indexed."
        raise EmbeddingError(msg)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = (
        1.0  # an all-zero vector (text without words) stays zero: cosine 0 with anything
    )
    return vectors / norms


TEXTS_KEPT: Final = 16384
"""Distinct texts whose vectors one embedding run keeps for the items after (:func:`vectors_once`); past it, it starts afresh."""


def vectors_once(
    embedder: Embedder, texts: Sequence[str], known: dict[str, Any] | None = None
) -> Any:
    """Return the unit vectors of ``texts`` (:func:`checked_vectors`), embedding each distinct text once.

    The parts of a session's items repeat word for word (a status, an
    application, a control's name), so a batch embeds each distinct text
    once, and none that ``known`` holds: ``known`` maps a text to its unit
    vector and is filled here, with at most :data:`TEXTS_KEPT` texts (it is
    emptied when full), so that one run over many batches embeds a
    repeated part once.

    Raises:
        EmbeddingError: if the embedder returns the wrong shape or NaN.
    """
    np = numpy()
    seen = {} if known is None else known
    distinct = list(dict.fromkeys(texts))
    fresh = [text for text in distinct if text not in seen]
    unit: Any = checked_vectors(embedder, fresh) if fresh else None
    held = [text for text in distinct if text in seen]
    # Each distinct text's vector once (the fresh ones first), then each text's row of it.
    blocks = [] if unit is None else [unit]
    if held:
        blocks.append(np.stack([seen[text] for text in held]))
    every = np.concatenate(blocks) if blocks else np.zeros((0, embedder.dimension), np.float32)
    place = dict(zip([*fresh, *held], range(len(distinct)), strict=True))
    out = every[np.fromiter(map(place.__getitem__, texts), np.int64, len(texts))]
    if known is not None and fresh:
        at = 0
        while at < len(fresh):  # filled in order, emptied whenever full
            if len(known) >= TEXTS_KEPT:
                known.clear()
            room = TEXTS_KEPT - len(known)
            known.update(zip(fresh[at : at + room], unit[at : at + room], strict=True))
            at += room
    return out.astype(np.float32, copy=False)


def embed_text(fields: Mapping[str, Any], keys: tuple[str, ...] | None) -> str:
    """Return the text of an item that gets embedded: its strings (in ``keys``), one per line.

    An item whose text is blank gets no vector and is never a semantic hit.
    """
    return "\n".join(text for _, text in _texts_by_field(fields, keys))


def _texts_by_field(
    fields: Mapping[str, Any], keys: tuple[str, ...] | None
) -> list[tuple[str, str]]:
    """Return ``(field, its strings joined by newlines)`` as ``_text.item_texts`` reads them: in ``keys`` order (a key named twice read twice), in one walk."""
    if keys is None:
        return field_texts_of(fields)
    text_of = dict(field_texts_of({key: fields[key] for key in keys if key in fields}))
    return [(key, text_of[key]) for key in keys if key in text_of]


def _check_overlap(instance: EmbedParts, attribute: attrs.Attribute[Any], value: int) -> None:
    if (
        type(value) is not int
        or value < 0
        or (instance.chunk_words is not None and value >= instance.chunk_words)
    ):
        msg = f"EmbedParts(overlap=...) takes an int from 0 to chunk_words - 1 ({instance.chunk_words}), got {value!r}."
        raise InvalidArgumentError(msg)


def _check_chunk(instance: EmbedParts, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (type(value) is not int or value < 1):
        msg = f"EmbedParts(chunk_words=...) takes an int >= 1, or None for whole fields; got {value!r}."
        raise InvalidArgumentError(msg)


@attrs.frozen
class EmbedParts:
    """How an item is cut into the texts that get embedded; an item ranks by its best part.

    Each top-level field's strings (nested ones included), joined, are one
    text; a text of more than ``chunk_words`` words (split at white space)
    is cut into windows of ``chunk_words`` words, each window starting
    ``chunk_words - overlap`` words after the one before, the last one
    reaching the text's end. A fact that is a small part of a long step
    then has a vector of its own instead of being averaged away. Semantic
    search scores an item by the highest cosine of its parts.

    Args:
        chunk_words: Words per part of a long field; ``None`` embeds each
            field whole.
        overlap: Words two neighbouring windows share (0 to ``chunk_words - 1``),
            so a phrase that straddles a cut is still whole in one window.
        whole: Also embed the item's whole text (every field, one per line)
            as one more part. With ``chunk_words=None`` and one field, or
            ``EmbedParts.WHOLE``, this is the item as one text.
        fields: Embed the fields as parts; ``False`` embeds only the whole
            text (:attr:`EmbedParts.WHOLE`, how items were embedded before).

    Raises:
        InvalidArgumentError: for a ``chunk_words`` below 1 or an ``overlap``
            outside 0 to ``chunk_words - 1``.
    """

    chunk_words: int | None = attrs.field(default=8, validator=_check_chunk)
    overlap: int = attrs.field(default=0, validator=_check_overlap)
    whole: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    fields: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))

    WHOLE: ClassVar[EmbedParts]
    """One part per item: its whole text, as kvmemory embedded items before parts."""

    def label(self) -> str:
        """Return how stores file vectors cut this way: ``"8/4"``, ``"field"``, ``"whole"``, with ``"+whole"`` when both."""
        if not self.fields:
            return "whole"
        cut = "field" if self.chunk_words is None else f"{self.chunk_words}/{self.overlap}"
        return f"{cut}+whole" if self.whole else cut

    def texts(self, fields: Mapping[str, Any], keys: tuple[str, ...] | None) -> list[str]:
        """Return the parts of an item with these fields (over ``keys``), in field order; none for an item without text."""
        pairs = _texts_by_field(fields, keys)
        out: list[str] = []
        if self.fields:
            joined: dict[str, str] = {}
            for name, text in pairs:
                joined[name] = f"{joined[name]}\n{text}" if name in joined else text
            size = self.chunk_words
            for text in joined.values():
                words = text.split()
                if not words:
                    continue
                if size is None or len(words) <= size:
                    out.append(" ".join(words))
                    continue
                # Windows start every size - overlap words; the last is the first to reach the end.
                stride = size - self.overlap
                out += [
                    " ".join(words[at : at + size])
                    for at in range(0, len(words) - self.overlap, stride)
                ]
        if self.whole or not self.fields:
            text = "\n".join(text for _, text in pairs)
            if text.strip():
                out.append(text)
        return out


EmbedParts.WHOLE = EmbedParts(chunk_words=None, overlap=0, whole=True, fields=False)


def embed_parts(
    fields: Mapping[str, Any], keys: tuple[str, ...] | None, parts: EmbedParts
) -> list[str]:
    """Return the texts embedded for an item with these fields: :meth:`EmbedParts.texts`."""
    return parts.texts(fields, keys)


def keyword_scale(n_items: int) -> float:
    """Return the BM25 score that a hybrid blend maps to 0.5: twice the IDF of a word one item of ``n_items`` holds.

    An item holding such a word once, at the average length, scores that
    IDF; so two rare query words matched score 0.5, and words most items
    hold add next to nothing. The scale depends on the corpus, not on the
    query, so words of the query that no item holds ("what", "which") do
    not shrink the keyword share of a blend.
    """
    return 2.0 * lucene_idf(max(n_items, 1), 1)


def fields_text(keys: tuple[str, ...] | None, parts: EmbedParts | None = None) -> str:
    """Return how a store files the vectors embedded over ``keys``, cut as ``parts``.

    ``"*"`` for every field, else the keys as JSON; vectors cut otherwise
    than one per item (:attr:`EmbedParts.WHOLE`, how every vector was
    filed before parts) add ``"|"`` and :meth:`EmbedParts.label`, so
    vectors cut two ways are kept apart.
    """
    filed = "*" if keys is None else _codec.dumps(list(keys)).decode("utf-8")
    if parts is None or parts == EmbedParts.WHOLE:
        return filed
    return f"{filed}|{parts.label()}"


def cosines(matrix: Any, query: Any) -> Any:
    """Return ``matrix @ query`` (unit rows, a unit query: their cosines), each row's value independent of the others.

    BLAS's matrix-vector product rounds a row differently depending on
    where it falls in its blocks of rows (the last few rows of a matrix
    take another path), so a part scored in a block of candidates could
    differ in its last bit from the same part scored with every row.
    numpy's ``einsum`` sums each row alone, always in one order: a cosine
    is the same float whichever rows it was computed with, in RAM and in
    every store. It is as fast as BLAS here (the product is bound by
    reading the matrix) and uses no thread pool.
    """
    return numpy().einsum("ij,j->i", matrix, query)


def top_rows(sims: Any, limit: int | None) -> Any:
    """Return the positions of the ``limit`` highest values of ``sims`` and of every value tied with the last, ascending.

    ``-inf`` marks a position that is not an item and is never returned.
    Returning ties whole lets the caller keep session order among them;
    ``limit=None`` returns every position.
    """
    np = numpy()
    size = len(sims)
    if limit is not None and limit > 0:
        cut = _sampled_cut(np, sims, limit)
        if cut is not None:
            return np.flatnonzero(sims >= cut)
    valid = sims > -np.inf
    count = int(valid.sum())
    if limit is None or limit >= count:
        return np.flatnonzero(valid)
    # numpy's selection slows tens of times where most values are equal (the -inf
    # a screened table leaves at every item it did not score): select among the rest.
    values = sims if count == size else sims[valid]
    cut = np.partition(values, count - limit)[count - limit]
    return np.flatnonzero(sims >= cut)


TOP_SAMPLE: Final = 2048
"""How many of a long array's values :func:`top_rows` reads first to find a value that only its best few reach."""


def _sampled_cut(np: Any, sims: Any, limit: int) -> Any | None:
    """Return the ``limit``-th highest of ``sims`` found among the values at least a sample's high one, or ``None`` where that does not pay.

    Selecting among 100,000 values costs about 1 ms, most of a query that
    scores them in 6: every ``len(sims) // TOP_SAMPLE``-th value is read,
    and one that about ``4 * limit`` values reach in proportion is the
    threshold. When at least ``limit`` values reach it, the ``limit``-th
    highest of those is the ``limit``-th highest of all, exactly; when
    fewer do (or it is ``-inf``, or a quarter of the values reach it), the
    caller selects among all of them.
    """
    size = len(sims)
    if size < 4 * TOP_SAMPLE or 64 * limit > size:
        return None
    sample = sims[:: size // TOP_SAMPLE]
    count = len(sample)
    rank = min(count, -(-4 * limit * count // size) + 1)
    threshold = np.partition(sample, count - rank)[count - rank]
    if threshold == -np.inf:
        return None
    above = sims[sims >= threshold]
    if len(above) < limit or 4 * len(above) > size:
        return None
    return np.partition(above, len(above) - limit)[len(above) - limit]


def ranked_top(keys: Any, sims: Any, limit: int) -> list[tuple[int, float]]:
    """Return ``(key, sim)`` of the ``limit`` highest ``sims``, highest first, ties in ascending key order.

    What ``heapq.nsmallest(limit, ..., key=lambda hit: (-hit[1], hit[0]))``
    returns over the same pairs, picked in numpy: the highest ``limit`` and
    every value tied with the last (:func:`top_rows`), then that slice
    sorted. ``-inf`` marks a position that is not an item and is never
    returned.

    Args:
        keys: The key of each position (distinct integers).
        sims: The value of each position (``-inf``: none).
        limit: How many at most.

    Returns:
        Up to ``limit`` ``(key, value)`` pairs, best first.
    """
    np = numpy()
    rows = top_rows(sims, limit)
    rows = rows[np.lexsort((keys[rows], -sims[rows]))[:limit]]
    return list(zip(keys[rows].tolist(), sims[rows].tolist(), strict=True))


def best_per_key(keys: Any, sims: Any) -> tuple[Any, Any]:
    """Return the distinct ``keys`` (ascending) and the highest of ``sims`` among each key's rows.

    ``keys`` holds the owner of each row (an item's parts are several rows
    with one key).
    """
    np = numpy()
    if len(keys) > 1 and (keys[1:] >= keys[:-1]).all():
        # Keys in order (a store's pages): each key's rows lie together, its best one
        # reduced where its run starts (the same floats as below, without a sort).
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        if len(starts) == len(keys):  # one row a key: each its own best
            return keys, sims
        return keys[starts], np.maximum.reduceat(sims, starts)
    distinct, slot = np.unique(keys, return_inverse=True)
    best = np.full(len(distinct), -np.inf, dtype=sims.dtype)
    np.maximum.at(best, slot, sims)
    return distinct, best


def best_cosines(
    pages: Iterable[tuple[Sequence[int], Any]],
    query: Any,
    limit: int | None,
    among: Iterable[int] = (),
) -> dict[int, float]:
    """Return the best cosine over its parts with the unit ``query`` of the best ``limit`` items (with ties) and of ``among``, by key.

    ``pages`` yields ``(keys, matrix)``: unit vectors of parts a block at a
    time, ``keys[i]`` owning row ``i`` (an item's parts may span pages), so
    a session is scored without holding all its vectors; only the cosines
    (4 bytes a part) are kept until each item's best part is taken and the
    best items picked by :func:`top_rows`, as over one matrix.
    """
    np = numpy()
    every = []
    parts = []
    for keys, matrix in pages:
        if len(keys):
            every.append(np.asarray(keys, dtype=np.int64))  # a page's keys, an array at once
            parts.append(cosines(matrix, query))
    if not parts:
        return {}
    owners, sims = best_per_key(np.concatenate(every), np.concatenate(parts))
    rows = top_rows(sims, limit)
    keys_at = owners.tolist()
    out = {keys_at[row]: float(sims[row]) for row in rows.tolist()}
    wanted = set(among) - out.keys()
    if wanted:
        for position, key in enumerate(keys_at):
            if key in wanted:
                out[key] = float(sims[position])
    return out


def checked_weight(weight: object) -> float:
    """Return the keyword share of a hybrid score (``None``: the default), else raise :class:`InvalidQueryError`."""
    if weight is None:
        return HYBRID_KEYWORD_WEIGHT
    if isinstance(weight, (int, float)) and not isinstance(weight, bool) and 0.0 <= weight <= 1.0:
        return float(weight)
    msg = f"hybrid_weight must be a number from 0 to 1, got {weight!r}."
    raise InvalidQueryError(msg)


def keyword_share(bm25: float, scale: float) -> float:
    """Return BM25 on the 0..1 scale of a hybrid blend: ``x**3 / (1 + x**3)`` with ``x = bm25 / scale``.

    0.5 at ``scale`` (:func:`keyword_scale`: two rare query words matched
    once), rising steeply through it: a match on one rare word or on common
    words alone (``x`` about 0.3 to 0.5) counts 0.03 to 0.1, two or three rare
    words 0.5 to 0.8. The cube keeps a partial keyword match of a
    paraphrase from outvoting its semantic match, and a full one from
    being outvoted.
    """
    x = bm25 / scale
    cube = x * x * x
    return cube / (1.0 + cube)


def semantic_discount(semantic: Mapping[int, float]) -> float:
    """Return the factor a hybrid blend weighs the cosines by: ``(1 - c) ** 2``, ``c`` the query's background cosine.

    ``c`` is the cosine of the :data:`SEMANTIC_REFERENCE`-th best item (of the
    worst one in a smaller memory), at least 0: how close the crowd comes.
    Where a hundred items come close to the query (as when each item ranks
    by the best of its many parts), a high cosine says little about this
    item in particular and the keyword side keeps its say; where few do, a
    high cosine stands out and counts nearly in full.

    ``semantic`` holds the best cosines of the query (and may hold others,
    lower ones): both the in-RAM index and the stores pass at least the best
    ``HYBRID_POOL`` (>= :data:`SEMANTIC_REFERENCE`), so they find the same ``c``.
    """
    if not semantic:
        return 1.0
    values = semantic.values()
    if len(semantic) > SEMANTIC_REFERENCE:
        background = heapq.nlargest(SEMANTIC_REFERENCE, values)[-1]
    else:
        background = min(values)
    room = 1.0 - min(max(background, 0.0), 1.0)
    return room * room


def keyword_leader(keyword: Mapping[int, float]) -> int | None:
    """Return the key of the best BM25 score (ties to the smallest key, the oldest item), or ``None`` without hits."""
    if not keyword:
        return None
    best = max(keyword.values())
    return min(key for key, score in keyword.items() if score == best)


def blend(
    keyword: dict[int, float],
    scale: float,
    semantic: dict[int, float],
    w: float,
    coverage: float = 1.0,
    together: bool = True,
) -> dict[int, float]:
    """Mix BM25 and cosine over the keyword hits and the best semantic ones.

    Each candidate scores ``w' * keyword_share(bm25, scale) + (1 - w') * d * max(cos, 0)``,
    ``d`` being the query's :func:`semantic_discount`: both parts on an
    absolute scale, not one stretched over the candidates, so a side whose
    best candidate is a poor match (words only common ones match, or every
    cosine alike) adds little and cannot outvote the other. A keyword hit
    without a cosine (no text embedded over the searched fields) counts
    cosine 0. ``w' = w * coverage ** COVERAGE_POWER`` for ``0 < w < 1``:
    ``coverage`` is the share of the query's IDF weight the keyword leader
    holds (:func:`~agents.memory._text.query_coverage`), so a keyword side
    whose best hit matches only part of the query gives way to the semantic
    one; a leader holding every query word keeps ``w``. The ends are taken
    as asked, whatever the coverage: ``w = 1`` ranks by the keyword side
    alone (each candidate scores its ``keyword_share``), ``w = 0`` by the
    semantic side alone.

    Args:
        keyword: BM25 scores by key.
        scale: The corpus's :func:`keyword_scale` (the BM25 that maps to 0.5).
        semantic: Cosines by key (the best ones, at least the best
            ``HYBRID_POOL``, and those of the keyword hits).
        w: The keyword share, 0 to 1 (0 and 1 are not scaled by ``coverage``).
        coverage: The share of the query's IDF weight the keyword leader
            holds, 0 to 1 (``1.0``: the leader holds every query word).
        together: Whether one of the query's best keyword hits holds its
            words together (:func:`~agents.memory._text.query_together`);
            where none does and ``0 < w < 1``, each side counts by how it
            stands out instead (:func:`stand_out`).

    Returns:
        The blended score (0..1) of every candidate, by key.
    """
    covered = min(max(coverage, 0.0), 1.0)
    if not together and stands_out(keyword, w):
        return stand_out(keyword, scale, semantic, w * covered**COVERAGE_POWER)
    out = {}
    kept: set[int] = set()
    if 0.0 < w < 1.0:  # an explicit 0 or 1 asks for one side alone
        kept = kept_first(keyword, semantic, covered)
        w = w * covered**COVERAGE_POWER
    rest = (1.0 - w) * semantic_discount(semantic)
    for key in dict.fromkeys([*keyword, *semantic]):
        out[key] = w * keyword_share(keyword.get(key, 0.0), scale) + rest * max(
            semantic.get(key, 0.0), 0.0
        )
    if kept:
        others = max((score for key, score in out.items() if key not in kept), default=0.0)
        if min(out[key] for key in kept) <= others:
            room = 1.0 - others
            for key in kept:  # above every other candidate, in their own order
                out[key] = others + room * max(out[key], _LIFT_FLOOR)
    return out


def stands_out(keyword: Sized, w: float) -> bool:
    """Return whether a hybrid query whose words no keyword hit holds together ranks by :func:`stand_out` (it has two keyword hits or more, and ``0 < w < 1``).

    Where it does not, :func:`blend` ranks as it always does, so the
    callers need not read the hits' words (:func:`~agents.memory._text.query_together`).
    """
    return 0.0 < w < 1.0 and len(keyword) >= 2  # the keyword hits, as a mapping or ranking


def stand_out(
    keyword: Mapping[int, float], scale: float, semantic: Mapping[int, float], w: float
) -> dict[int, float]:
    """Mix each side's stand-out over the query's own background: the blend where no keyword hit holds the query's words together.

    ``w * max(k - k5, 0) / (1 - k5) + (1 - w) * max(cos - c, 0) / (1 - c)``:
    ``k`` an item's :func:`keyword_share`, ``k5`` that of the query's
    :data:`KEYWORD_BACKGROUND`-th best keyword hit (0 with fewer hits), ``c``
    the query's background cosine (that of :func:`semantic_discount`, at
    least 0). Every keyword hit then holds the query's words scattered (over
    an item's entries, a page's sentences) or only some of them, so a high
    BM25 says little unless it stands out from the others; the semantic
    side counts by how far it rises above the crowd.
    """
    background = _keyword_background(keyword, scale)
    c = _background_cosine(semantic)
    out = {}
    for key in dict.fromkeys([*keyword, *semantic]):
        out[key] = w * _lead(keyword_share(keyword.get(key, 0.0), scale), background) + (
            1.0 - w
        ) * _rise(semantic.get(key, 0.0), c)
    return out


def blend_ceiling(
    bm25: float,
    cosine: float,
    keyword: Mapping[int, float],
    scale: float,
    semantic: Mapping[int, float],
    w: float,
    coverage: float = 1.0,
    together: bool = True,
) -> float:
    """Return the most :func:`blend` (same arguments) gives an item whose BM25 is at most ``bm25`` and cosine at most ``cosine``.

    Before rank protection (:func:`kept_first`) lifts its few items: a bound
    for the items a ranking walked only part of the way has not reached.
    ``keyword`` must hold the query's :data:`KEYWORD_BACKGROUND` best hits.
    """
    return blend_ceilings(keyword, scale, semantic, w, coverage, together)(bm25, cosine)


def blend_ceilings(
    keyword: Mapping[int, float],
    scale: float,
    semantic: Mapping[int, float],
    w: float,
    coverage: float = 1.0,
    together: bool = True,
) -> Callable[[float, float], float]:
    """Return :func:`blend_ceiling` of some ``(bm25, cosine)`` over these candidates, their backgrounds taken once (for thousands of rows a filter passes)."""
    apart, w = _weighed(keyword, w, coverage, together)
    if apart:
        background = _keyword_background(keyword, scale)
        crowd = _background_cosine(semantic)

        def stood_out(bm25: float, cosine: float) -> float:
            lead = _lead(keyword_share(bm25, scale), background)
            return w * lead + (1.0 - w) * _rise(cosine, crowd)

        return stood_out
    rest = (1.0 - w) * semantic_discount(semantic)

    def blended(bm25: float, cosine: float) -> float:
        return w * keyword_share(bm25, scale) + rest * max(cosine, 0.0)

    return blended


_SHARE_ROUNDING: Final = 1e-12
"""More than :func:`keyword_share` may differ between two BM25 scores in either order (float rounding: it rises with BM25, but not at every float)."""


def blend_zeros(
    keyword: Mapping[int, float],
    scale: float,
    semantic: Mapping[int, float],
    w: float,
    coverage: float = 1.0,
    together: bool = True,
) -> Callable[[float, float], bool]:
    """Return ``zero(bm25, cosine)``: whether :func:`blend` (same arguments) gives exactly 0 to every item whose BM25 is at most ``bm25`` (0 or more) and cosine at most ``cosine``, before rank protection (:func:`kept_first`).

    Where :func:`blend_ceiling` bounds a row by a BM25 above its own, a
    ceiling of 0 is not exact: the keyword share rounds up at some floats
    where its BM25 rises, so a row below the bound may lead the keyword
    background by a float's last bit. Each side here is 0 at every BM25
    and cosine up to the bound, past rounding: the keyword side is off
    (``w`` 0), 0 at the bound, or (where no hit holds the words together)
    below the background by more than rounding; the cosine side is off,
    at most 0, or at most the background cosine. ``keyword`` must hold the
    query's :data:`KEYWORD_BACKGROUND` best hits.
    """
    apart, w = _weighed(keyword, w, coverage, together)
    if apart:
        background = _keyword_background(keyword, scale)
        crowd = _background_cosine(semantic)

        def stood_out(bm25: float, cosine: float) -> bool:
            share = keyword_share(bm25, scale)
            lead = w == 0.0 or share + _SHARE_ROUNDING <= background
            return lead and (w == 1.0 or crowd >= 1.0 or cosine <= crowd)

        return stood_out
    rest = (1.0 - w) * semantic_discount(semantic)

    def blended(bm25: float, cosine: float) -> bool:
        return (w == 0.0 or keyword_share(bm25, scale) == 0.0) and (rest == 0.0 or cosine <= 0.0)

    return blended


def _weighed(
    keyword: Mapping[int, float], w: float, coverage: float, together: bool
) -> tuple[bool, float]:
    """Return whether :func:`blend` ranks these keyword hits by :func:`stand_out`, and its keyword weight ``w`` scaled by the coverage (as :func:`blend` scales it)."""
    apart = not together and stands_out(keyword, w)
    if 0.0 < w < 1.0:
        w = w * min(max(coverage, 0.0), 1.0) ** COVERAGE_POWER
    return apart, w


def _keyword_background(keyword: Mapping[int, float], scale: float) -> float:
    """Return the keyword share of the query's :data:`KEYWORD_BACKGROUND`-th best hit (0 with fewer hits)."""
    best = heapq.nlargest(KEYWORD_BACKGROUND, keyword.values())
    return keyword_share(best[-1], scale) if len(best) == KEYWORD_BACKGROUND else 0.0


def _background_cosine(semantic: Mapping[int, float]) -> float:
    """Return the query's background cosine, 0 to 1: that of the :data:`SEMANTIC_REFERENCE`-th best item (the worst of fewer), 0 without any."""
    if not semantic:
        return 0.0
    values = semantic.values()
    if len(semantic) > SEMANTIC_REFERENCE:
        return min(max(heapq.nlargest(SEMANTIC_REFERENCE, values)[-1], 0.0), 1.0)
    return min(max(min(values), 0.0), 1.0)


def _lead(share: float, background: float) -> float:
    """Return a keyword share's lead over the background, as a share of the room above it."""
    return max(share - background, 0.0) / (1.0 - background)


def _rise(cosine: float, background: float) -> float:
    """Return a cosine's rise over the background, as a share of the room above it (0 with no room)."""
    return max(cosine - background, 0.0) / (1.0 - background) if background < 1.0 else 0.0


_LIFT_FLOOR: Final = 1e-9
"""The least blended score a kept item is lifted from, so that one blended to 0 still passes the others."""


def kept_first(
    keyword: Mapping[int, float], semantic: Mapping[int, float], coverage: float
) -> set[int]:
    """Return the candidates a hybrid blend ranks above all others: those both sides agree on, and a keyword leader that stands out.

    Only where the keyword leader holds every query word (``coverage`` 1:
    where it holds part of the query, the keyword ranking is a partial match
    and the semantic side decides, :data:`COVERAGE_POWER`). Then an item
    both the keyword and the semantic side rank among their best
    :data:`SHARED_TOP` (BM25 and cosine, ties to the smaller key) is kept:
    two independent rankings put it near the top, and the absolute blend
    can still drop it below items only one side likes. The keyword leader
    is kept as well when its runner-up scores at most :data:`LEADER_LEAD` of
    its BM25: a lexical match that stands out from the other keyword hits,
    which the semantic side of a crowd of look-alike items would otherwise
    push down. Both rules read only the blend's own arguments, so the
    stores and the in-RAM index keep the same items.

    Args:
        keyword: BM25 scores by key (every item holding a query term).
        semantic: Cosines by key (at least the best ``HYBRID_POOL``).
        coverage: The share of the query's IDF weight the keyword leader holds.

    Returns:
        The keys to rank first (possibly none).
    """
    if not keyword or coverage < 1.0:
        return set()
    best = heapq.nsmallest(SHARED_TOP, keyword.items(), key=lambda hit: (-hit[1], hit[0]))
    near = heapq.nsmallest(SHARED_TOP, semantic.items(), key=lambda hit: (-hit[1], hit[0]))
    kept = {key for key, _ in best} & {key for key, _ in near}
    if len(best) == 1 or best[1][1] <= LEADER_LEAD * best[0][1]:
        kept.add(best[0][0])
    return kept


def progress_bar(done: int, total: int) -> None:
    """Draw ``Embedding items [###...] done/total`` on stderr (``progress=True``)."""
    width = 30
    filled = width * done // total if total else width
    sys.stderr.write(f"\rEmbedding items [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()
