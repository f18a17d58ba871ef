"""Filing many items at once: their terms counted in numpy instead of one dict update a term.

A build ahead files every item of a memory just opened (100,000 items and
more). Item by item, that is a ``Counter`` and a postings update for each
distinct term of each item, in Python. Here the terms of a slice of items
are split out of one string, numbered by a dict in one pass at C speed, and
counted per item by one sort; the postings dicts are then made whole, one
``dict(zip(...))`` a term. The postings, lengths and totals are those of
filing the items one by one (same keys, counts and orders), and the arrays
of the terms many items hold are handed to the ranker as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import count
from typing import Any, Final

from agents.memory._codec import collector_paused
from agents.memory._item import MemoryItem, item_fields
from agents.memory._text import Tokenizer, field_texts, spaced_terms

__all__ = ["Filed", "file_in_bulk"]

_SLICE: Final = 256  # items whose terms are split out at once (bounds the strings held at once)
_POSTINGS: Final = 16_384  # postings made between two calls of give_way (one dict at most past it)
_END: Final = "\x00"  # never a term (not a letter or digit): marks the end of each item's terms


class Filed:
    """Items filed in bulk: what ``file_items`` (``_postings``) fills, and every posting as sorted arrays.

    Attributes:
        keys: The keys filed, in the order given (items whose fields could not be read left out).
        docs: Each item's ``(field, text)`` pairs, by key.
        lengths: Each item's number of terms, by key.
        postings: ``{term: {key: tf}}``, terms in order of first use, keys in filing order.
        total: The sum of the lengths.
        terms: The terms, in the order of ``postings``.
        sizes: How many items hold each term (int64, in the order of ``terms``).
        items: Each posting's item, as its place in ``keys`` (int32, by term, then filing order).
        tf: Each posting's count (int32, same order).
    """

    def __init__(self) -> None:
        self.keys: list[int] = []
        self.docs: dict[int, tuple[tuple[str, str], ...]] = {}
        self.lengths: dict[int, int] = {}
        self.postings: dict[str, dict[int, int]] = {}
        self.total = 0
        self.terms: list[str] = []
        self.sizes: Any = None
        self.items: Any = None
        self.tf: Any = None


def file_in_bulk(
    np: Any,
    pairs: Sequence[tuple[int, MemoryItem]],
    tokenize: Tokenizer,
    *,
    step: int = _SLICE,
    give_way: Callable[[], None] = lambda: None,
) -> Filed | None:
    """File ``pairs`` in bulk, or return ``None`` where ``tokenize``'s terms cannot be split out of one string (see ``spaced_terms``).

    An item whose fields cannot be read (changed while read on another thread) is left out.
    ``step`` items have their terms split out at once. ``give_way`` is
    called between slices (a build ahead waits there for a query answered
    elsewhere, see ``BuildPause``): every ``step`` items read, every slice
    filed, and every ``_POSTINGS`` postings made.
    """
    filed = Filed()
    # Each term numbered by its first use (the count when the dict first saw it), slice by slice.
    number: dict[str, int] = {}
    ticket = count()
    found: list[tuple[Any, Any, Any]] = []  # (term number, item place, tf) of each slice
    sizes: list[Any] = []  # each slice's lengths
    # Every item's texts stay alive: the collector would walk the growing heap for nothing.
    with collector_paused(len(pairs)):
        # First every item's texts (kept), then the terms slice by slice (not kept): what
        # is kept is not laid out between what is freed, so the freed memory goes back.
        for at, (key, item) in enumerate(pairs):
            if not at % step:
                give_way()
            try:
                doc = tuple(field_texts(item_fields(item)))
            except Exception:
                continue
            filed.keys.append(key)
            filed.docs[key] = doc
        docs = list(filed.docs.values())
        for start in range(0, len(docs), step):  # a slice's terms are freed before the next
            give_way()
            spaced = []
            for doc in docs[start : start + step]:
                text = doc[0][1] if len(doc) == 1 else "\n".join([text for _, text in doc])
                terms = spaced_terms(tokenize, text)
                if terms is None:
                    return None
                spaced.append(terms)
            words = f" {_END} ".join(spaced).split()
            del spaced
            words.append(_END)
            ids = np.fromiter(map(number.setdefault, words, ticket), np.int64, len(words))
            del words
            end = ids == number[_END]
            width = int(end.sum())  # the items of the slice: each one's terms end with one _END
            place = np.cumsum(end) - end  # how many items ended before: the item in the slice
            ids, place = ids[~end], place[~end]
            sizes.append(np.bincount(place, minlength=width))
            code = ids * width + place
            code.sort()  # by term, then item
            if not len(code):
                continue
            first = np.ones(len(code), dtype=bool)
            first[1:] = code[1:] != code[:-1]
            cut = np.flatnonzero(first)
            tf = np.diff(np.append(cut, len(code)))
            pair = code[cut]
            place = (pair % width + start).astype(np.int32)
            found.append((pair // width, place, tf.astype(np.int32)))
    give_way()
    lengths = np.concatenate(sizes) if sizes else np.zeros(0, dtype=np.int64)
    by_number = {value: term for term, value in number.items()}
    if found:
        ids = np.concatenate([ids for ids, _, _ in found])
        order = np.argsort(ids, kind="stable")  # by term; items stay in filing order
        ids = ids[order]
        filed.items = np.concatenate([items for _, items, _ in found])[order]
        filed.tf = np.concatenate([tf for _, _, tf in found])[order]
        del order, found
        first = np.ones(len(ids), dtype=bool)
        first[1:] = ids[1:] != ids[:-1]
        starts = np.flatnonzero(first)
        ends = np.append(starts[1:], len(ids))
        filed.sizes = ends - starts
        filed.terms = [by_number[value] for value in ids[starts].tolist()]
        # The keys given, not new ints: the postings share them, as filing one by one does.
        # Term by term, so that the ints read out of the arrays are freed as they go.
        key_at = filed.keys.__getitem__
        places, counts = filed.items, filed.tf
        postings = filed.postings
        made = 0  # postings made since the build last gave way
        for term, begin, stop in zip(filed.terms, starts.tolist(), ends.tolist(), strict=True):
            made += stop - begin
            if made >= _POSTINGS:
                give_way()
                made = stop - begin
            postings[term] = dict(
                zip(
                    map(key_at, places[begin:stop].tolist()),
                    counts[begin:stop].tolist(),
                    strict=True,
                )
            )
    else:
        filed.sizes = np.zeros(0, dtype=np.int64)
        filed.items = np.zeros(0, dtype=np.int32)
        filed.tf = np.zeros(0, dtype=np.int32)
    filed.lengths = dict(zip(filed.keys, lengths.tolist(), strict=True))
    filed.total = int(lengths.sum())
    return filed
