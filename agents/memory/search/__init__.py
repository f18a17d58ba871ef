"""Find the items of a memory that matter now: keyword (BM25), semantic and hybrid search.

``memory.search(query)`` and ``memory.recall(query, recent=Window(...))``
call into this room; the index behind them is built on first use and then
kept in step with the memory item by item (see :class:`SearchIndex`).
Semantic search needs numpy and an :class:`Embedder`; the offline default,
:class:`WordLlamaEmbedder`, comes with ``pip install 'kvmemory[semantic]'``.
"""

from agents.memory._filter import Filter
from agents.memory._text import Tokenizer
from agents.memory.search._embed import Embedder, HashingEmbedder, WordLlamaEmbedder
from agents.memory.search._index import BM25_B, BM25_DELTA, BM25_K1, SearchIndex
from agents.memory.search._search import (
    HYBRID_KEYWORD_WEIGHT,
    HYBRID_POOL,
    EmbedParts,
    Hit,
    SearchMode,
    Where,
    embedder_for,
    index_embeddings,
    recall,
    search,
    search_index,
)

__all__ = [
    "BM25_B",
    "BM25_DELTA",
    "BM25_K1",
    "HYBRID_KEYWORD_WEIGHT",
    "HYBRID_POOL",
    "EmbedParts",
    "Embedder",
    "Filter",
    "HashingEmbedder",
    "Hit",
    "SearchIndex",
    "SearchMode",
    "Tokenizer",
    "Where",
    "WordLlamaEmbedder",
    "embedder_for",
    "index_embeddings",
    "recall",
    "search",
    "search_index",
]
