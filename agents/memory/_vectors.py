"""Semantic search's shared ground: the embedder protocol, vector checks, top-k cosines and the hybrid blend.

Both the in-RAM index (``agents.memory.search``) and the stores (which keep
vectors with their items and score a session page by page) embed the same
text of an item, check an embedder's output the same way, pick the best
cosines with the same rule for ties, and blend keyword and semantic scores
with the same function, so that they rank alike. numpy is imported on first
use (the ``semantic`` or ``numpy`` extra).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol, runtime_checkable

from agents.memory import _codec
from agents.memory._text import item_texts
from agents.memory.exceptions import EmbeddingError, InvalidQueryError, missing_dependency

__all__ = [
    "HYBRID_KEYWORD_WEIGHT",
    "HYBRID_POOL",
    "VECTOR_DTYPE",
    "Embedder",
    "SearchMode",
    "best_cosines",
    "blend",
    "checked_vectors",
    "checked_weight",
    "embed_text",
    "fields_text",
    "numpy",
    "progress_bar",
    "top_rows",
]

SearchMode = Literal["keyword", "semantic", "hybrid"]
"""How a search ranks: BM25 over words, cosine over embeddings, or a blend of both."""

HYBRID_KEYWORD_WEIGHT = 0.7
"""The share of the keyword score in a hybrid score (the rest is the semantic one).

Both are put on a 0..1 scale first: BM25 divided by the query's ceiling
(the score of an item holding every query word very often, so a match on
common words alone stays low), the cosine min-max scaled over the
candidates. In ``benchmarks/bench_search.py`` this weight was the one
that matched the better of keyword and semantic search on both query sets
(weights 0.3 to 0.8 came within a few queries); reciprocal rank fusion and
a blend scaling BM25 by the best hit fell well behind on paraphrases.
"""

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


def embed_text(fields: Mapping[str, Any], keys: tuple[str, ...] | None) -> str:
    """Return the text of an item that gets embedded: its strings (in ``keys``), one per line.

    An item whose text is blank gets no vector and is never a semantic hit.
    """
    return "\n".join(text for _, text in item_texts(fields, keys))


def fields_text(keys: tuple[str, ...] | None) -> str:
    """Return how a store files the vectors embedded over ``keys``: ``"*"`` for every field."""
    if keys is None:
        return "*"
    return _codec.dumps(list(keys)).decode("utf-8")


def top_rows(sims: Any, limit: int | None) -> Any:
    """Return the positions of the ``limit`` highest values of ``sims`` and of every value tied with the last, ascending.

    ``-inf`` marks a position that is not an item and is never returned.
    Returning ties whole lets the caller keep session order among them;
    ``limit=None`` returns every position.
    """
    np = numpy()
    size = len(sims)
    valid = sims > -np.inf
    count = int(valid.sum())
    if limit is None or limit >= count:
        return np.flatnonzero(valid)
    cut = sims[np.argpartition(sims, size - limit)[size - limit]]
    return np.flatnonzero(sims >= cut)


def best_cosines(
    pages: Iterable[tuple[Sequence[int], Any]],
    query: Any,
    limit: int | None,
    among: Iterable[int] = (),
) -> dict[int, float]:
    """Return the cosine with the unit ``query`` of the best ``limit`` items (with ties) and of ``among``, by key.

    ``pages`` yields ``(keys, matrix)``: the items' unit vectors a block at a
    time, so a session is scored without holding all its vectors; only the
    cosines (4 bytes an item) are kept until the best are picked by
    :func:`top_rows`, as over one matrix.
    """
    np = numpy()
    every: list[int] = []
    parts = []
    for keys, matrix in pages:
        if len(keys):
            every.extend(keys)
            parts.append(matrix @ query)
    if not parts:
        return {}
    sims = np.concatenate(parts)
    rows = top_rows(sims, limit)
    out = {every[row]: float(sims[row]) for row in rows.tolist()}
    wanted = set(among) - out.keys()
    if wanted:
        for position, key in enumerate(every):
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


def blend(
    keyword: dict[int, float], ceiling: float, semantic: dict[int, float], w: float
) -> dict[int, float]:
    """Mix scaled BM25 and scaled cosine over the keyword hits and the best semantic ones.

    Args:
        keyword: BM25 scores by key.
        ceiling: The query's BM25 ceiling (scales BM25 to 0..1).
        semantic: Cosines by key (the best ones, and those of the keyword hits).
        w: The keyword share, 0 to 1.

    Returns:
        The blended score (0..1) of every candidate, by key.
    """
    candidates = dict.fromkeys([*keyword, *semantic])
    if not candidates:
        return {}
    cosines = [semantic.get(key, 0.0) for key in candidates]
    low, high = min(cosines), max(cosines)
    spread = (high - low) or 1.0
    return {
        key: w * keyword.get(key, 0.0) / ceiling
        + (1.0 - w) * (semantic.get(key, low) - low) / spread
        for key in candidates
    }


def progress_bar(done: int, total: int) -> None:
    """Draw ``Embedding items [###...] done/total`` on stderr (``progress=True``)."""
    width = 30
    filled = width * done // total if total else width
    sys.stderr.write(f"\rEmbedding items [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()
