"""Keyword search terms as the stores index them: one pass over an item's values.

The terms are those of the default :class:`~agents.memory.search.Tokenizer`,
the ones ``Memory.search`` counts; they are taken once per item, from the
values in hand where the item is encoded, and handed to the backend with
the row, so no store decodes a row it has just encoded to find them.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from agents.memory._item import MemoryItem, item_fields
from agents.memory._text import (
    PROXIMITY_TOP,
    Tokenizer,
    bm25_average_length,
    bm25_term_score,
    bm25_weight,
    check_k,
    checked_keys,
    checked_query,
    field_texts,
    item_texts,
    query_coverage,
    query_together,
    window_weight,
)
from agents.memory._vectors import keyword_leader
from agents.memory.exceptions import InvalidQueryError

if TYPE_CHECKING:
    from agents.memory.stores._core.encoding import StoredRecord

__all__ = [
    "KeywordMatch",
    "Terms",
    "bm25_score",
    "held_by_row",
    "holds_every_word_together",
    "item_terms",
    "items_together",
    "keyword_matches",
    "keyword_query",
    "match_coverage",
    "match_together",
    "query_weights",
    "rank_matches",
    "rank_pages",
    "texts_of",
]

Terms = tuple[str, int]
"""An item's search terms as a store indexes them: ``(terms joined by spaces, how many)``."""

KeywordMatch = tuple[int, int, dict[str, int]]
"""An item holding a query term: ``(seq, length in terms over the searched fields, {query term: count})``."""

_TOKENIZER: Final = Tokenizer()
# For ASCII text the tokenizer's NFKC is the identity, casefold is lower() and its
# terms are the runs of ASCII letters and digits: mapping every other byte to a
# space (and A-Z to a-z) and splitting at spaces gives the same terms, about three
# times faster than a regular expression's findall.
_ASCII_TERMS: Final = bytes(
    c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 else 32 for c in range(256)
)


def texts_of(fields: Mapping[str, Any]) -> list[str]:
    """Return every string of an item's fields, nested strings included, in field order.

    The strings ``item_texts`` yields for all fields (dict values, list,
    tuple and set members; not numbers, dates or bytes), gathered by one
    recursive walk instead of nested generators (four times faster on
    UFO-shaped steps).
    """
    out: list[str] = []
    _walk_values(fields.values(), out)
    return out


def _walk_values(values: Iterable[Any], out: list[str]) -> None:
    # Strings, numbers and plain containers are taken here, without a call per
    # value (one frame per nesting level, as before).
    for value in values:
        cls = type(value)
        if cls is str:
            out.append(value)
        elif cls is dict:
            _walk_values(value.values(), out)
        elif cls is list or cls is tuple:
            _walk_values(value, out)
        elif cls not in _NOT_TEXT:
            _walk_other(value, out)


def _walk_other(value: Any, out: list[str]) -> None:
    # Subclasses, other mappings and sets: what item_texts also reads.
    if isinstance(value, str):
        out.append(str(value))
    elif isinstance(value, Mapping):
        _walk_values(value.values(), out)
    elif isinstance(value, (list, tuple, set, frozenset)):
        _walk_values(value, out)


_NOT_TEXT: Final = frozenset({int, float, bool, type(None), bytes})


def item_terms(item: MemoryItem) -> Terms:
    """Return the terms keyword search counts for ``item``: every string field, nested strings included.

    The terms are those of the default :class:`~agents.memory.search.Tokenizer`
    (the ones ``Memory.search`` counts), in order with repeats, joined by
    single spaces; a term never holds a space. The texts are tokenized
    joined by newlines, which gives the same terms as tokenizing each one
    (a newline separates terms and never combines with a neighbour in NFKC).
    """
    texts = texts_of(item_fields(item))
    if not texts:
        return "", 0
    text = texts[0] if len(texts) == 1 else "\n".join(texts)
    if text.isascii():
        spaced = text.encode("ascii").translate(_ASCII_TERMS)
        # Runs of spaces halve with each pass (a run of n takes log2(n) passes):
        # no object per term, unlike split() and join() (3.6 us against 5.9 us
        # for a UFO step's 175 terms).
        while b"  " in spaced:
            spaced = spaced.replace(b"  ", b" ")
        spaced = spaced.strip(b" ")
        return spaced.decode("ascii"), spaced.count(b" ") + 1 if spaced else 0
    terms = _TOKENIZER(text)
    return " ".join(terms), len(terms)


def keyword_query(
    query: object, k: object, keys: Iterable[str] | None
) -> tuple[list[str], tuple[str, ...] | None]:
    """Check a keyword search's arguments; return the query's terms and the searched fields.

    Raises:
        InvalidQueryError: for an empty query, one without words, ``k`` < 1 or bad keys.
    """
    text = checked_query(query)
    check_k(k)
    fields = checked_keys(keys)
    terms = _TOKENIZER(text)
    if not terms:
        msg = f"Query {text!r} holds no word to search for; keyword search matches letters and digits."
        raise InvalidQueryError(msg)
    return terms, fields


def bm25_score(
    counts: Mapping[str, int],
    length: int,
    weighted: Sequence[tuple[str, float]],
    average_length: float,
) -> float:
    """Return an item's BM25 score as ``Memory.search`` sums it, to the last bit.

    Args:
        counts: The item's count of each query term it holds (others may be missing).
        length: The item's number of terms over the searched fields.
        weighted: The query's terms in query order, repeats kept, each with
            its weight (:func:`~agents.memory._text.bm25_weight`); terms no
            item holds may be left out.
        average_length: The session's average length (:func:`~agents.memory._text.bm25_average_length`).

    Returns:
        The sum of :func:`~agents.memory._text.bm25_term_score` over the
        query's terms the item holds, in query order, from ``0.0``.
    """
    score = 0.0
    for term, weight in weighted:
        tf = counts.get(term)
        if tf:
            score += bm25_term_score(weight, tf, length, average_length)
    return score


def query_weights(
    terms: Sequence[str], df: Mapping[str, int], n_items: int
) -> list[tuple[str, float]]:
    """Return ``(term, weight)`` of the query's terms some item holds, in query order with repeats."""
    weight = {term: bm25_weight(n_items, count) for term, count in df.items() if count}
    return [(term, weight[term]) for term in terms if term in weight]


def rank_pages(
    pages: Iterable[Sequence[StoredRecord]],
    terms: Sequence[str],
    keys: tuple[str, ...] | None,
    k: int,
) -> tuple[list[tuple[float, int]], dict[int, MemoryItem]]:
    """Rank a session read in pages by BM25 as ``Memory.search`` does; return the ``k`` best and their items.

    The best are ``(score, seq)``, best first, ties by seq; the items are
    those of the best, by seq (they were decoded to be scored). Every item
    is tokenized over the fields ``keys`` (``None``: all); the statistics
    are the session's own. This is how a store without a keyword index
    answers a search, and how every store answers one with ``keys``.
    """
    n_items, total, matches, found = keyword_matches(pages, terms, keys)
    best = rank_matches(n_items, total, matches, terms, k)
    return best, {seq: found[seq] for _, seq in best if seq in found}


def rank_matches(
    n_items: int, total: int, matches: Sequence[KeywordMatch], terms: Sequence[str], k: int
) -> list[tuple[float, int]]:
    """Rank the items holding a query term by BM25 as ``Memory.search`` does; return the ``k`` best.

    ``n_items`` and ``total`` (items and their terms in all) are the
    session's; ``matches`` every item of it holding a query term. The best
    are ``(score, seq)``, best first, ties by seq. :func:`rank_pages` ranks
    a session read in pages with it, and the SQLite store the rows its FTS
    table does not hold yet.
    """
    if not matches:
        return []
    df = Counter(term for _, _, counts in matches for term in counts)
    weighted = query_weights(terms, df, n_items)
    average = bm25_average_length(total, n_items)
    scored = [
        (bm25_score(counts, length, weighted, average), seq) for seq, length, counts in matches
    ]
    return heapq.nsmallest(k, scored, key=lambda hit: (-hit[0], hit[1]))


def match_coverage(
    terms: Sequence[str],
    df: Mapping[str, int],
    matches: Sequence[KeywordMatch],
    scores: Mapping[int, float],
    n_items: int,
) -> float:
    """Return the share of the query's IDF weight that the best of ``scores`` holds (ties to the smallest key).

    ``df`` counts the items holding each term; ``matches`` are every item
    holding a query term, as :func:`keyword_matches` gives them, and
    ``scores`` their BM25 by key. The share is the one
    ``SearchIndex.coverage`` gives the keyword leader of ``Memory.search``
    (``1.0`` without hits).
    """
    leader = keyword_leader(scores)
    if leader is None:
        return 1.0
    held = next((counts for key, _, counts in matches if key == leader), {})
    return query_coverage(terms, df, held, n_items)


def match_together(
    terms: Sequence[str],
    df: Mapping[str, int],
    matches: Sequence[KeywordMatch],
    scores: Mapping[int, float],
    items: Mapping[int, MemoryItem],
    n_items: int,
    keys: tuple[str, ...] | None,
) -> bool:
    """Return whether one of the best of ``scores`` holds the query's words together (:func:`~agents.memory._text.query_together`).

    ``matches`` and ``items`` are every item holding a query term and those
    items by key, as :func:`keyword_matches` gives them; a match whose
    counted terms hold too little of the query's weight is not tokenized
    again. As ``SearchIndex.together`` decides it for ``Memory.search``.
    """
    best = heapq.nsmallest(PROXIMITY_TOP, scores.items(), key=lambda hit: (-hit[1], hit[0]))
    held = {key: counts for key, _, counts in matches}
    return items_together(
        terms, df, n_items, [key for key, _ in best], items, keys, held.__getitem__
    )


def items_together(
    terms: Sequence[str],
    df: Mapping[str, int],
    n_items: int,
    hits: Sequence[int],
    items: Mapping[int, MemoryItem],
    keys: tuple[str, ...] | None,
    holds: Callable[[int], Container[str]] | None = None,
) -> bool:
    """Return whether one of ``hits`` (best first, ties by key) holds the query's words together, read from ``items`` with the default tokenizer (:func:`~agents.memory._text.query_together`)."""
    fields = {key: item_fields(items[key]) for key in hits[:PROXIMITY_TOP] if key in items}
    return query_together(terms, df, n_items, hits, fields, keys, _TOKENIZER, holds)


def holds_every_word_together(item: MemoryItem, terms: Sequence[str]) -> bool:
    """Return whether one window of ``PROXIMITY_WINDOW`` consecutive terms of one field of ``item`` holds every one of ``terms``.

    Such an item holds the query's words together
    (:func:`~agents.memory._text.query_together`) whatever their weights,
    so no document frequency need be asked to tell it.
    """
    every = dict.fromkeys(terms, 1.0)
    need = float(len(every))  # a sum of ones: exact
    return any(
        window_weight(_TOKENIZER(text), every, need=need) >= need
        for _, text in field_texts(item_fields(item))
    )


def held_by_row(
    postings: Iterable[tuple[str, Container[int]]], seqs: Iterable[int]
) -> dict[int, set[str]]:
    """Return the terms each of ``seqs`` holds, by seq, from each term's postings (``(term, seqs holding it)``); a seq holding none is left out (``Backend.keyword_held``)."""
    found = list(postings)
    out: dict[int, set[str]] = {}
    for seq in seqs:
        holding = {term for term, posting in found if seq in posting}
        if holding:
            out[seq] = holding
    return out


def keyword_matches(
    pages: Iterable[Sequence[StoredRecord]], terms: Sequence[str], keys: tuple[str, ...] | None
) -> tuple[int, int, list[KeywordMatch], dict[int, MemoryItem]]:
    """Return what BM25 needs of a session read in pages, for ``terms`` over the fields ``keys`` (``None``: all).

    That is: the number of items, their total length in terms, the items
    holding a query term as ``(seq, length, {term: count})``, and those
    items by seq.
    """
    wanted = set(terms)
    tokenize = _TOKENIZER
    n_items = 0
    total = 0
    matches: list[KeywordMatch] = []
    found: dict[int, MemoryItem] = {}
    for page in pages:
        n_items += len(page)
        for record in page:
            length = 0
            counts: dict[str, int] = {}
            for _, field_text in item_texts(record.item.to_dict(), keys):
                words = tokenize(field_text)
                length += len(words)
                for word in words:
                    if word in wanted:
                        counts[word] = counts.get(word, 0) + 1
            total += length
            if counts:
                matches.append((record.seq, length, counts))
                found[record.seq] = record.item
    return n_items, total, matches, found
