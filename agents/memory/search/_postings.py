"""The keyword index of a search index: postings, texts, lengths, field statistics, ranker and filter values.

:class:`KeywordPostings` holds the terms of the items a
:class:`~agents.memory.search._index.SearchIndex` has filed so far; the index
decides when to file (its memory's changes, marked, are filed by the next
query), under its own lock, and starts a new one when its memory's whole
content is replaced. A build ahead makes the same postings off the lock and
the index takes them (:class:`BuiltPostings`, :meth:`KeywordPostings.take`).

The stores' in-process backend (``memory://``) keeps a ``KeywordPostings``
too, keyed by row, filed from the terms each write hands it
(:meth:`KeywordPostings.file_spaced`): it ranks as ``Memory.search`` does
because it ranks with the same postings and the same code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from agents.memory._item import MemoryItem, item_fields
from agents.memory._text import Tokenizer, bm25_average_length, bm25_weight, field_texts
from agents.memory.search._bm25 import QueryTerm, Ranker, exhaustive_among, exhaustive_top
from agents.memory.search._bulk import file_in_bulk
from agents.memory.search._values import FiledValues

__all__ = ["BuiltPostings", "Fields", "KeywordPostings", "Lengths", "Tokenize", "file_items"]

Tokenize = Callable[[str], list[str]]
"""How a text is split into terms: a :class:`~agents.memory._text.Tokenizer`, or ``str.split`` for terms already split out and joined by spaces."""


class Lengths:
    """Each item's length (its number of terms) over some fields, by key."""

    def __init__(self) -> None:
        self.of: dict[int, int] = {}

    def put(self, key: int, length: int) -> None:
        self.of[key] = length

    def drop(self, key: int) -> int:
        """Forget the item's length and return it (0 for an item not filed)."""
        return self.of.pop(key, 0)


_KEYED_LENGTHS = 8  # sets of searched fields whose lengths are kept (the most recently used)


class Fields:
    """Keyword statistics per field: postings, each item's field lengths, totals, lengths over key sets."""

    def __init__(self) -> None:
        self.postings: dict[str, dict[str, dict[int, int]]] = {}  # field -> term -> {key: tf}
        self.sizes: dict[int, tuple[int, ...]] = {}  # key -> its fields' lengths, in doc order
        self.total: Counter[str] = Counter()
        # Lengths over the fields of a query's keys: made by the first query with
        # those keys, kept up to date from then on (the most recent few sets).
        self.lengths: dict[tuple[str, ...], Lengths] = {}

    def file(self, key: int, doc: tuple[tuple[str, str], ...], tokenize: Tokenize) -> list[str]:
        """File the item's terms field by field; return all its terms, in field order."""
        every: list[str] = []
        sizes = []
        for field, text in doc:
            terms = tokenize(text)
            sizes.append(len(terms))
            self.total[field] += len(terms)
            every += terms
            postings = self.postings.get(field)
            if postings is None:
                postings = self.postings[field] = {}
            for term, count in Counter(terms).items():
                posting = postings.get(term)
                if posting is None:
                    postings[term] = {key: count}
                else:
                    posting[key] = count
        self.sizes[key] = tuple(sizes)
        for keys, lengths in self.lengths.items():
            lengths.put(
                key, sum(size for (field, _), size in zip(doc, sizes, strict=True) if field in keys)
            )
        return every

    def unfile(self, key: int, doc: tuple[tuple[str, str], ...], tokenize: Tokenize) -> set[str]:
        """Forget the item's terms field by field; return the set of all its terms."""
        every: set[str] = set()
        for (field, text), size in zip(doc, self.sizes.pop(key), strict=True):
            self.total[field] -= size
            terms = set(tokenize(text))
            every |= terms
            _drop(self.postings[field], terms, key)
        for lengths in self.lengths.values():
            lengths.drop(key)
        return every

    def lengths_in(
        self, keys: tuple[str, ...], docs: Mapping[int, tuple[tuple[str, str], ...]]
    ) -> Lengths:
        """Return the items' lengths over the fields ``keys``, made on first use and kept from then on."""
        lengths = self.lengths.pop(keys, None)
        if lengths is None:
            lengths = Lengths()
            for key, doc in docs.items():
                sizes = self.sizes[key]
                lengths.put(
                    key,
                    sum(size for (field, _), size in zip(doc, sizes, strict=True) if field in keys),
                )
            if len(self.lengths) >= _KEYED_LENGTHS:
                del self.lengths[next(iter(self.lengths))]  # the least recently used
        self.lengths[keys] = lengths  # last: the most recently used
        return lengths


class KeywordPostings:
    """The keyword index of the items filed so far: what BM25 ranks a query by.

    Not thread-safe: its owner (``SearchIndex``) calls it under its lock.

    Attributes:
        docs: Each item's ``(field, text)`` pairs by key: the text is kept (a
            reference, not a copy), so deleting or re-indexing the item later
            finds its old terms from it.
        lengths: Each item's length over every field.
        postings: ``{term: {key: tf}}`` over every field.
        total: The lengths' sum.
        fields: The statistics per field, made by the first query with keys.
        ranker: The pruned top-k (numpy), made by the first keyword query when numpy is there.
        values: The values filters named, by item.
    """

    def __init__(self) -> None:
        self.docs: dict[int, tuple[tuple[str, str], ...]] = {}
        self.lengths = Lengths()
        self.postings: dict[str, dict[int, int]] = {}
        self.total = 0
        self.fields: Fields | None = None
        self.ranker: Ranker | None = None
        self.values = FiledValues()

    def file(self, pairs: Iterable[tuple[int, MemoryItem]], tokenize: Tokenizer) -> None:
        """Tokenize each ``(key, item)`` and file its terms."""
        ranker = self.ranker
        if ranker is not None:
            ranker.next_generation()
        done, total = file_items(
            pairs,
            tokenize,
            (self.postings, self.docs, self.lengths.of),
            self.fields,
            self.values,
        )
        if ranker is not None:
            ranker.indexed(done)
        self.total += total

    def file_spaced(self, rows: Iterable[tuple[int, str]]) -> None:
        """File items given by their terms, joined by whitespace (as the stores keep them), each as one text.

        What :meth:`file` files for an item whose terms they are, less its
        filter values (no item is given). The item is filed under the field
        name ``""``; take it out with ``unfile(key, str.split)``.
        """
        ranker = self.ranker
        if ranker is not None:
            ranker.next_generation()
        fields = self.fields
        postings, docs, lengths = self.postings, self.docs, self.lengths.of
        done = []
        total = 0
        for key, text in rows:
            doc = (("", text),)
            terms = text.split() if fields is None else fields.file(key, doc, str.split)
            _post(postings, key, terms)
            docs[key] = doc
            lengths[key] = len(terms)
            total += len(terms)
            done.append(key)
        if ranker is not None:
            ranker.indexed(done)
        self.total += total

    def take(
        self, built: BuiltPostings, items: Mapping[int, MemoryItem], tokenize: Tokenize
    ) -> None:
        """Take the postings a build ahead made as these, which hold none yet.

        The per-field statistics and the filter values, if made already,
        get the built items too (``items`` holds each by key); the ranker is
        the built one, or told of the built items if there is one already.
        """
        self.docs = built.docs
        self.lengths.of = built.lengths
        self.postings = built.postings
        self.total = built.total
        fields = self.fields
        if fields is not None:  # a query with keys made them before: file into them too
            for key, doc in built.docs.items():
                fields.file(key, doc, tokenize)
        if self.values.fields:
            for key in built.docs:
                self.values.add(key, items[key])
        if self.ranker is not None:
            self.ranker.next_generation()
            self.ranker.indexed(list(built.docs))
        else:
            self.ranker = built.ranker

    def unfile(self, key: int, tokenize: Tokenize) -> None:
        """Take the item under ``key`` out of the postings, the statistics and the ranker (nothing for an item not filed).

        ``tokenize`` is the one the item was filed with (``str.split`` for :meth:`file_spaced`).
        """
        doc = self.docs.pop(key, None)
        if doc is None:
            return
        if self.ranker is not None:
            self.ranker.removed(key)
        self.values.drop(key)
        self.total -= self.lengths.drop(key)
        if self.fields is not None:
            terms = self.fields.unfile(key, doc, tokenize)
        else:
            terms = set(tokenize("\n".join([text for _, text in doc])))
        _drop(self.postings, terms, key)

    def query_terms(
        self,
        terms: Sequence[str],
        keys: tuple[str, ...] | None,
        n_items: int,
        tokenize: Tokenize,
    ) -> tuple[list[QueryTerm], Lengths, float]:
        """Return the query terms some item holds as ``(term, postings, weight)``, the lengths and the average length.

        ``n_items`` counts every item of the memory (also items without text).
        """
        if not n_items:
            return [], self.lengths, 1.0
        by_field = None
        if keys is None:
            total = self.total
            sizes = self.lengths
        else:
            fields = self.fields_now(tokenize)
            by_field = fields.postings
            total = sum(fields.total[field] for field in keys)
            sizes = fields.lengths_in(keys, self.docs)
        average = bm25_average_length(total, n_items)
        query: list[QueryTerm] = []
        seen: dict[str, tuple[dict[int, int], float]] = {}
        for term in terms:
            found = seen.get(term)
            if found is None:
                matches = _matches(self.postings, by_field, term, keys)
                found = seen[term] = (matches, bm25_weight(n_items, len(matches)))
            if found[0]:
                query.append((term, *found))
        return query, sizes, average

    def top(
        self,
        query: Sequence[QueryTerm],
        keys: tuple[str, ...] | None,
        lengths: Mapping[int, int],
        average: float,
        k: int,
    ) -> list[tuple[int, float]]:
        """Return the best ``k`` ``(key, score)`` for ``query`` (from :meth:`query_terms`), best first, ties by key.

        With numpy the ranker scores only the items that can still be among
        the best; without it every item holding a term is scored: the same
        items and floats either way.
        """
        ranker = self.ranker_now()
        if ranker is not None:
            return ranker.top(query, keys, lengths, average, k)
        return exhaustive_top(query, lengths, average, k)

    def top_among(
        self,
        query: Sequence[QueryTerm],
        among: Collection[int],
        lengths: Mapping[int, int],
        average: float,
        k: int,
    ) -> list[tuple[int, float]]:
        """Return the best ``k`` ``(key, score)`` of the items ``among`` only, scored as :meth:`top` scores them (every one holding a term)."""
        return exhaustive_among(query, among, lengths, average, k)

    def ranker_now(self) -> Ranker | None:
        """Return the numpy ranker, made on first use (``None`` without numpy: rank exhaustively)."""
        if self.ranker is None:
            try:
                import numpy as np  # optional: the pure-Python ranking needs none
            except ImportError:
                return None
            ranker = self.ranker = Ranker(np)
            ranker.next_generation()
            ranker.indexed(list(self.docs))
        return self.ranker

    def fields_now(self, tokenize: Tokenize) -> Fields:
        """Return the statistics per field, made on the first query with keys and kept from then on."""
        fields = self.fields
        if fields is None:
            fields = self.fields = Fields()
            for key, doc in self.docs.items():
                fields.file(key, doc, tokenize)
        return fields


class BuiltPostings:
    """Postings made off the search index's lock by a build ahead, for some items: what :meth:`KeywordPostings.take` takes.

    In bulk with numpy (``file_in_bulk``), with the ranker and the arrays of
    the commonest terms made ahead too; item by item without it.
    """

    def __init__(
        self,
        items: list[tuple[int, MemoryItem]],
        tokenize: Tokenizer,
        give_way: Callable[[], None] = lambda: None,
    ) -> None:
        self.items: list[tuple[int, MemoryItem]] = []  # those filed, with the item read
        self.docs: dict[int, tuple[tuple[str, str], ...]] = {}
        self.lengths: dict[int, int] = {}
        self.postings: dict[str, dict[int, int]] = {}
        self.total = 0
        self.ranker: Ranker | None = None
        np: Any = None
        try:
            import numpy  # optional: without it, queries rank exhaustively

            np = numpy
        except ImportError:
            pass
        bulk = None if np is None else file_in_bulk(np, items, tokenize, give_way=give_way)
        if bulk is not None:  # the same postings, counted in numpy
            self.docs, self.lengths, self.postings = bulk.docs, bulk.lengths, bulk.postings
            self.total = bulk.total
            filed = bulk.keys
        else:
            filed, self.total = file_items(
                items,
                tokenize,
                (self.postings, self.docs, self.lengths),
                None,
                None,
                skip_errors=True,
            )
        held = dict(items)
        self.items = [(key, held[key]) for key in filed]
        if np is None:
            return
        # The numpy ranker, and the arrays of the commonest terms (those cost a first query most).
        give_way()
        ranker = self.ranker = Ranker(np)
        ranker.next_generation()
        ranker.indexed(list(self.docs))
        ranker.build_common(self.postings, self.lengths, bulk)

    def unfile(self, key: int, tokenize: Tokenizer) -> None:
        """Take the item under ``key`` out again (it changed while it was read)."""
        doc = self.docs.pop(key, None)
        if doc is None:
            return
        self.total -= self.lengths.pop(key)
        postings = self.postings
        if self.ranker is not None:
            self.ranker.removed(key)
        _drop(postings, set(tokenize("\n".join([text for _, text in doc]))), key)


def _matches(
    postings: dict[str, dict[int, int]],
    by_field: dict[str, dict[str, dict[int, int]]] | None,
    term: str,
    keys: tuple[str, ...] | None,
) -> dict[int, int]:
    """Return ``{key: tf}`` of the items holding ``term`` (in ``keys``, from ``by_field``); do not change it."""
    if keys is None or by_field is None:
        return postings.get(term) or {}
    found = [posting for field in keys if (posting := by_field.get(field, {}).get(term))]
    if len(found) == 1:
        return found[0]
    out: dict[int, int] = {}
    get = out.get
    for posting in found:
        for key, tf in posting.items():
            out[key] = get(key, 0) + tf
    return out


def file_items(
    pairs: Iterable[tuple[int, MemoryItem]],
    tokenize: Tokenizer,
    into: tuple[dict[str, dict[int, int]], dict[int, tuple[tuple[str, str], ...]], dict[int, int]],
    fields: Fields | None,
    values: FiledValues | None,
    *,
    skip_errors: bool = False,
) -> tuple[list[int], int]:
    """Tokenize each item and file its terms ``into`` (postings, docs, lengths); return the keys filed and their total length.

    ``skip_errors``: an item whose fields cannot be read (changed while read
    on another thread) is left out instead of raising.
    """
    postings, docs, lengths = into
    done = []
    total = 0
    for key, item in pairs:
        try:
            doc = tuple(field_texts(item_fields(item)))
        except Exception:
            if not skip_errors:
                raise
            continue
        done.append(key)
        if fields is not None:
            terms = fields.file(key, doc, tokenize)
        elif len(doc) == 1:
            terms = tokenize(doc[0][1])
        else:
            # One text: a newline never joins the terms around it.
            terms = tokenize("\n".join([text for _, text in doc]))
        _post(postings, key, terms)
        docs[key] = doc
        lengths[key] = len(terms)
        total += len(terms)
        if values is not None:
            values.add(key, item)
    return done, total


def _post(postings: dict[str, dict[int, int]], key: int, terms: Sequence[str]) -> None:
    """File each of an item's terms (repeats counted) in its posting under ``key``."""
    for term, count in Counter(terms).items():
        try:
            postings[term][key] = count
        except KeyError:
            postings[term] = {key: count}


def _drop(postings: dict[str, dict[int, int]], terms: Iterable[str], key: int) -> None:
    """Take ``key`` out of each term's posting, and a posting left empty out of ``postings``."""
    for term in terms:
        posting = postings.get(term)
        if posting is not None:
            posting.pop(key, None)
            if not posting:
                del postings[term]
