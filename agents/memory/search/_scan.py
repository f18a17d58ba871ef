"""A memory's first keyword query answered from its items' terms joined in one byte string, before any posting is made.

A memory read whole (``Memory(store.read(session_id))``) has every item
waiting to be filed, and filing makes a Python object a word and a dict
entry a posting: on 100,000 steps, seconds. The first query needs far
less: each item's length, their sum, and the postings of its own words.
Here every item's terms (``joined_item_terms``) are joined in one byte string,
the lengths are counted by numpy at its spaces, a query word's postings
are found among the words that start with its first byte, and the items holding a query word are
scored in numpy (see ``Ranker._dense_scores``). The counts, lengths and
floats are those of the postings filed item by item, so the hits and
scores are too; the search index files the items in full on another
thread meanwhile (``SearchIndex.build_ahead``), and answers from here
until that is done or the memory changes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Final

from agents.memory._codec import collector_paused
from agents.memory._item import MemoryItem, item_fields
from agents.memory._text import (
    BM25_B,
    BM25_K1,
    Tokenizer,
    bm25_average_length,
    bm25_weight,
    joined_item_terms,
)
from agents.memory.search._bm25 import shares

__all__ = ["TextScan", "kept_terms_joined", "ranked_postings"]

_SPACE: Final = 32  # the only byte between two terms (see spaced_terms)
_END: Final = b"\x00"  # never in a term (not a letter or digit): the word that ends each item
_COMPARED: Final = 12  # up to this many heads, a query's words are picked by comparisons
_SLICE: Final = 1 << 20  # bytes of the join read at a time while finding the words
# Whitespace other than a space, which no kept term string may hold (see kept_terms_joined):
# the ASCII ones as bytes, and any in text that is not all ASCII.
_ASCII_SPACES: Final = (b"\t", b"\n", b"\x0b", b"\x0c", b"\r", b"\x1c", b"\x1d", b"\x1e", b"\x1f")
_OTHER_SPACE: Final = re.compile(r"[^\S ]")


def kept_terms_joined(terms: Sequence[str]) -> bytes | None:
    """Return the join a :class:`TextScan` reads of each item's terms as a store keeps them (joined by single spaces), or ``None`` where they are not.

    That is ``joined_item_terms``'s form: a space, then each item's terms
    followed by ``" \\x00 "``. ``None`` for a value that is not a string
    or one holding a NUL or whitespace other than a space: the scan cuts
    words at single spaces and items at NULs.
    """
    try:
        joined = " " + " \x00 ".join(terms) + " \x00 "
    except TypeError:  # a value that is not a string
        return None
    if not joined.isascii() and _OTHER_SPACE.search(joined):
        return None
    data = joined.encode()
    del joined
    if data.count(0) != len(terms) or any(space in data for space in _ASCII_SPACES):
        return None
    return data


def _head(word: bytes) -> int:
    """Return the first two bytes of ``word`` as one number (a space second for a word of one): the words a term is looked for among."""
    return word[0] << 8 | (word[1] if len(word) > 1 else _SPACE)


class TextScan:
    """Every item's terms in one byte string, for ranking queries before the postings are made.

    Make it with :meth:`of`. Not thread-safe: its owner (``SearchIndex``)
    calls it under its lock, and drops it at the memory's next change.

    Attributes:
        keys: The keys of the items, in filing order.
        lengths: Each item's number of terms (int64, in the order of ``keys``).
        total: The lengths' sum.
    """

    def __init__(self, np: Any, keys: list[int], data: bytes, *, spaced: bool = False) -> None:
        self.np = np
        self.keys = keys
        # " terms of item 0 \x00 terms of item 1 \x00 ": a space on both sides of each word.
        codes = self._codes = np.frombuffer(data, dtype=np.uint8)
        # The eight bytes from each place of the join as one number (little-endian, a view).
        self._wide = (
            np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))
            if len(data) >= 8
            else None
        )
        place = np.int32 if len(data) < 2**31 else np.int64
        # The space before each word (a space followed by a byte that is not one) and the word's
        # first two bytes (a space second for a word of one), found a slice of the join at a
        # time: arrays the size of the join would leave the cache (at 100,000 steps 0.14-0.8 s
        # of CPU, the time swinging with the machine's load; 0.1 s by slices).
        befores, firsts, heads = [], [], []
        last = len(codes) - 1  # the final space is before no word
        for start in range(0, max(last, 1), _SLICE):
            window = codes[start : min(start + _SLICE, last) + 1]
            if spaced:  # words cut by single spaces: every space but the last is before one
                at = np.flatnonzero(window[:-1] == _SPACE).astype(place)
                at += start
                first = codes[at + 1]
                if (double := first == _SPACE).any():  # an item without terms: "\x00  \x00"
                    keep = ~double
                    at, first = at[keep], first[keep]
            else:
                at = np.flatnonzero((window[:-1] == _SPACE) & (window[1:] != _SPACE)).astype(place)
                at += start
                first = codes[at + 1]
            befores.append(at)
            firsts.append(first)
            heads.append(first.astype(np.uint16) << 8 | codes[at + 2])
        before = self._before = np.concatenate(befores)
        first = np.concatenate(firsts)
        del befores, firsts
        ends = np.flatnonzero(first == _END[0])  # each item's last word, ascending
        self._ends = before[ends]  # where each item's terms end
        self.lengths = np.diff(ends, prepend=-1) - 1  # the words between two ends
        self.total = int(self.lengths.sum())
        self._head = np.concatenate(heads)  # a term's candidates: the words of its first two bytes
        self._keys = np.array(keys, dtype=np.int64)
        self._found: dict[str, tuple[Any, Any]] = {}  # term -> (item places, counts), kept

    @classmethod
    def kept(cls, keys: list[int], terms: Sequence[str]) -> TextScan | None:
        """Join the terms a store keeps for the items of ``keys`` (``terms[i]`` those of ``keys[i]``) and find their words, or return ``None`` without numpy or where :func:`kept_terms_joined` gives none.

        Made as a memory is read (``SearchIndex.take_terms``), so that its
        first query finds only the query's words.
        """
        try:
            import numpy as np  # optional: without it, the first query files the items
        except ImportError:
            return None
        data = kept_terms_joined(terms)
        if data is None:
            return None
        with collector_paused(len(keys)):  # arrays, no garbage: nothing to look for
            return cls(np, keys, data, spaced=True)

    @classmethod
    def of(
        cls, np: Any, pairs: Sequence[tuple[int, MemoryItem]], tokenize: Tokenizer
    ) -> TextScan | None:
        """Join the terms of ``pairs`` (in filing order), or return ``None`` where ``tokenize``'s terms cannot be (see ``spaced_terms``) or an item cannot be read.

        The texts are those ``file_items`` (``_postings``) tokenizes: an
        item's field texts joined by newlines (see ``joined_item_terms``).
        """
        try:
            data = joined_item_terms(tokenize, [item_fields(item) for _, item in pairs])
        except Exception:  # the query files the items one by one, which says why
            return None
        if data is None:
            return None
        return cls(np, [key for key, _ in pairs], data)

    def posting(self, term: str) -> tuple[Any, Any]:
        """Return the places (in ``keys``) of the items holding ``term`` and how many times each does, in filing order."""
        found = self._found.get(term)
        if found is None:
            self.find([term])
            found = self._found[term]
        return found

    def find(self, terms: Sequence[str]) -> None:
        """Find the postings of those ``terms`` not found yet (see :meth:`posting`), the words of their first two bytes picked in one pass."""
        np = self.np
        new = {term: _head(term.encode()) for term in terms if term not in self._found}
        if not new:
            return
        if len(new) == 1:
            [(term, head)] = new.items()
            # compress: several times faster than a boolean index over every word.
            self._found[term] = self._occurring(term, np.compress(self._head == head, self._before))
            return
        # The words that start as any of the terms, once, then each term's among them.
        heads = sorted(set(new.values()))
        if len(heads) <= _COMPARED:  # a comparison a head: cheaper than a table's lookups
            mask = self._head == heads[0]
            same = np.empty_like(mask)
            for head in heads[1:]:
                np.equal(self._head, head, out=same)
                mask |= same
        else:
            wanted = np.zeros(1 << 16, dtype=bool)
            wanted[heads] = True
            mask = wanted[self._head]
        picked = np.flatnonzero(mask)
        del mask
        heads, before = self._head[picked], self._before[picked]
        del picked
        for term, head in new.items():
            self._found[term] = self._occurring(term, np.compress(heads == head, before))

    def _occurring(self, term: str, at: Any) -> tuple[Any, Any]:
        """Return the places and counts of the items holding ``term``, from ``at``: the spaces before the words that start with its first two bytes."""
        np = self.np
        codes = self._codes
        word = term.encode()
        spaced = word + b" "  # the term's bytes and the space after it (it ends there)
        wide, cut = self._wide, 0
        if wide is not None and len(spaced) <= 8:
            # The eight bytes after each space, read at once (one read of the join a word,
            # not one a byte), for the words not too close to the join's end.
            cut = int(np.searchsorted(at, len(wide) - 1))
            mask = np.uint64((1 << 8 * len(spaced)) - 1)
            head = at[:cut]
            head = head[wide[head + 1] & mask == np.uint64(int.from_bytes(spaced, "little"))]
        tail = at[cut:]
        for shift, byte in enumerate(spaced[2:], 3):
            tail = tail[codes[tail + shift] == byte]
        at = np.concatenate((head, tail)) if cut else tail
        ends = self._ends
        if len(at) > len(ends):
            # A common term: how many occurrences come before each item's end (as many
            # searches as items, not occurrences: a third of the time for a word of every item).
            # Below as many occurrences as items, searching each occurrence's item is cheaper
            # (100,000 items: 1.0 ms against 3.0 for 38,000 occurrences, even at 120,000).
            counts = np.diff(np.searchsorted(at, ends), prepend=0)
            places = np.flatnonzero(counts)
            return places, counts[places]
        # The occurrences ascend, so their items do: each run of one item is a posting
        # (np.unique would sort them again: 85 ms for a word of every item at 100,000).
        items = np.searchsorted(ends, at)
        new = np.empty(len(items), dtype=bool)
        new[:1] = True
        np.not_equal(items[1:], items[:-1], out=new[1:])
        starts = np.flatnonzero(new)
        return items[starts], np.diff(starts, append=len(items))

    def top(self, terms: Sequence[str], n_items: int, k: int) -> list[tuple[int, float]]:
        """Return the best ``k`` ``(key, score)`` for the query ``terms``, best first, ties by key: ``exhaustive_top``'s answer over the postings filed item by item.

        ``n_items`` counts every item of the memory (also items without text).
        """
        self.find(terms)
        return ranked_postings(
            self.np, self.posting, self._keys, self.lengths, self.total, terms, n_items, k
        )


def ranked_postings(
    np: Any,
    posting: Callable[[str], tuple[Any, Any] | None],
    keys: Any,
    lengths: Any,
    total: int,
    terms: Sequence[str],
    n_items: int,
    k: int,
) -> list[tuple[int, float]]:
    """Return the best ``k`` ``(key, score)`` by BM25 for the query ``terms`` from each term's postings, best first, ties by key.

    ``posting(term)`` gives the places (in ``keys``, ascending) of the items
    holding the term and how many times each does (``None`` or empty: none);
    ``lengths[place]`` is an item's number of terms and ``total`` their sum
    over the ``n_items`` items. The floats are ``exhaustive_top``'s over the
    postings filed item by item (the terms summed in query order, repeats
    counted): :meth:`TextScan.top`, and the keyword snapshot a store keeps
    (``agents.memory.stores._search.snapshot``), rank by this.
    """
    average = bm25_average_length(total, n_items)
    slope = BM25_K1 * BM25_B / average
    scores = np.zeros(len(keys), dtype=np.float64)
    weights: dict[str, float] = {}
    for term in terms:  # in query order, repeats counted: bm25_term_score's sums
        found = posting(term)
        if found is None or not len(found[0]):
            continue
        places, counts = found
        weight = weights.get(term)
        if weight is None:
            weight = weights[term] = bm25_weight(n_items, len(places))
        tf = counts.astype(np.float64)
        dl = lengths[places].astype(np.float64)
        scores[places] += shares(weight, slope, tf, dl)
    held = np.flatnonzero(scores > 0.0)  # every share is above 0: the items holding a term
    found_scores = scores[held]
    if len(found_scores) > k:
        cut = np.partition(found_scores, len(found_scores) - k)[len(found_scores) - k]
        keep = found_scores >= cut
        held, found_scores = held[keep], found_scores[keep]
    held_keys = keys[held]
    ranked = np.lexsort((held_keys, -found_scores))[:k]
    return list(zip(held_keys[ranked].tolist(), found_scores[ranked].tolist(), strict=True))
