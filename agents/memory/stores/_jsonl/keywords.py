"""The keyword index beside a session log: ``<session_id>.keywords``, a cache of the log's search terms.

A JSONL log keeps no keyword index of its own, so a keyword search would read
and tokenize every item. :class:`KeywordIndex` holds, for one log read up to
a byte offset, each term's postings (the seqs of the items holding it and
how often) and every item's length in terms: what BM25 needs, the numbers
``Memory.search`` counts. It is built from the log at the first keyword
query of a session, then followed as the log grows: the records appended
since (by any handle or process) are read from the file and their items
tokenized; a log written whole again (compacted, deleted and created again:
a new header) is indexed afresh.

A writable handle saves the index to ``<session_id>.keywords`` beside the
log, so that the next process starts from it instead of tokenizing the
session: after a build, and again once the items indexed since the last
save pass :data:`SAVE_EVERY` (or a 64th of the session). A read-only handle
never writes it. The file is only a cache: it names the log's header and
the length of the log it covers, with a hash of the bytes before that
offset, and is used only while the log still starts with exactly those
bytes; each part of it carries a CRC-32. A file that does not match, is
damaged or is not one is rebuilt, never trusted; deleting it is always safe.

The file: a JSON header line (sizes and CRC-32s of the parts), the terms
(sorted, one a line), each term's ``(start, count, crc)`` in the postings,
the items' seqs (ascending) and lengths, and the postings (each term's seqs,
ascending, then its counts), all as native unsigned arrays.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import heapq
import itertools
import os
import sys
import weakref
import zlib
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, overload

import orjson

from agents.memory import _codec
from agents.memory._text import BM25_B, BM25_FLOOR, BM25_K1, bm25_average_length
from agents.memory.exceptions import StoreError
from agents.memory.stores._core.encoding import decode_pairs
from agents.memory.stores._core.terms import (
    KeywordMatch,
    bm25_score,
    item_terms,
    query_weights,
    rank_matches,
)
from agents.memory.stores._jsonl.files import open_file
from agents.memory.stores._jsonl.log import SessionLog, split_item_record

__all__ = ["FORMAT", "SAVE_EVERY", "KeywordIndex", "SessionKeywords", "rank_together"]

FORMAT: Final = "kvmemory.jsonl-keywords"
_VERSION: Final = 1
_TAIL: Final = 4096
"""How many bytes before the offset an index covers are hashed to tell the same log from another."""
SAVE_EVERY: Final = 256
"""Items indexed since the last save after which a writable handle saves again (or a 64th of the session, if more)."""
_HEADER_MAX: Final = 4096
_FLAT: Final = BM25_K1 * (1.0 - BM25_B)
"""``bm25_term_score``'s constant part of the denominator, computed as it computes it."""
_BUILD_PAGE: Final = 4096


class DamagedIndexError(Exception):
    """A keyword index file that is not one, or whose bytes do not check out (it is then rebuilt)."""


def _code(size: int) -> str:
    """Return the array type code of unsigned ints of ``size`` bytes on this platform."""
    return next(code for code in "HILQ" if array(code).itemsize == size)


_POSTING_CODES: Final = {2: _code(2), 4: _code(4), 8: _code(8)}


def _width(largest: int) -> int:
    return 2 if largest < 1 << 16 else 4 if largest < 1 << 32 else 8


class KeywordIndex:
    """The postings of one session log read up to :attr:`offset`: a packed base, and the items changed since.

    The base is the postings as saved (or built), a :class:`Base`. Items added or changed since are
    held apart (``added``: seq -> {term: count}); ``removed`` are the base's
    seqs no longer live. ``lengths`` holds every live item's length.
    """

    def __init__(
        self,
        header: bytes,
        offset: int,
        lengths: dict[int, int] | tuple[array[int], array[int]],
        base: Base,
    ) -> None:
        self.header = header
        self.offset = offset
        if isinstance(lengths, dict):
            self._lengths: dict[int, int] | None = lengths
            self._length_arrays: tuple[array[int], array[int]] | None = None
            self.total = sum(lengths.values())
        else:  # as read from a file (seqs ascending): made a dict when first needed
            self._lengths, self._length_arrays = None, lengths
            self.total = sum(lengths[1])
        self.base = base
        self.widths = base.widths
        self.removed: set[int] = set()
        self.added: dict[int, dict[str, int]] = {}
        self.added_by_term: dict[str, set[int]] = {}
        self.unsaved = 0
        """Items indexed since the file was written."""
        self.file_stale = False
        """Whether the file beside the log no longer describes this index's log (not written yet, or the log compacted)."""
        self._live: dict[str, dict[int, int]] = {}
        self._arrays: dict[str, tuple[Any, Any]] = {}
        """numpy's (positions in ``_dense``, counts) of a term's live postings, while nothing changed."""
        self._dense: tuple[Any, Any] | None = None
        """numpy's (sorted live seqs, their lengths), while nothing changed."""

    @property
    def lengths(self) -> dict[int, int]:
        """Every live item's length in terms, by seq."""
        if self._lengths is None:
            assert self._length_arrays is not None
            self._lengths = dict(zip(*self._length_arrays, strict=True))
            self._length_arrays = None
        return self._lengths

    @property
    def count(self) -> int:
        """How many items are live."""
        if self._lengths is None:
            assert self._length_arrays is not None
            return len(self._length_arrays[0])
        return len(self._lengths)

    # -- the postings --------------------------------------------------------------------

    def _slice(self, term: str) -> tuple[bytes, bytes]:
        """Return the bytes of a term's base seqs and counts, checked (empty if the base lacks it).

        Raises:
            DamagedIndexError: if the entry or its bytes do not check out.
        """
        return self.base.slice(term)

    def _base(self, term: str) -> tuple[array[int], array[int]]:
        """Return a term's base postings (seqs, counts), checked.

        Raises:
            DamagedIndexError: if the entry or its bytes do not check out.
        """
        seq_bytes, count_bytes = self._slice(term)
        seqs: array[int] = array(_POSTING_CODES[self.widths[0]])
        counts: array[int] = array(_POSTING_CODES[self.widths[1]])
        seqs.frombytes(seq_bytes)
        counts.frombytes(count_bytes)
        # Every seq an item of the base (live, or changed since), every count at least 1.
        if seqs and (min(counts) < 1 or set(seqs).difference(self.lengths, self.removed)):
            raise DamagedIndexError(term)
        return seqs, counts

    def postings(self, term: str) -> dict[int, int]:
        """Return the live items holding ``term``: seq -> count (kept for the next query, and kept current).

        Raises:
            DamagedIndexError: if the base's postings of the term do not check out.
        """
        found = self._live.get(term)
        if found is not None:
            return found
        seqs, counts = self._base(term)
        removed = self.removed
        if removed:
            found = {seq: tf for seq, tf in zip(seqs, counts, strict=True) if seq not in removed}
        else:
            found = dict(zip(seqs, counts, strict=True))
        for seq in self.added_by_term.get(term, ()):
            found[seq] = self.added[seq][term]
        self._live[term] = found
        return found

    def matches(
        self, terms: Sequence[str], among: set[int] | None = None
    ) -> tuple[dict[str, int], list[KeywordMatch]]:
        """Return each query term's document frequency, and the items (of ``among``, if given) holding one.

        Raises:
            DamagedIndexError: if the base's postings of a term do not check out.
        """
        live = {term: self.postings(term) for term in dict.fromkeys(terms)}
        df = {term: len(found) for term, found in live.items()}
        if among is None:
            among = set().union(*live.values())
        lengths = self.lengths
        out: list[KeywordMatch] = []
        for seq in among:
            counts = {term: found[seq] for term, found in live.items() if seq in found}
            if counts:
                out.append((seq, lengths[seq], counts))
        return df, out

    def top(self, terms: Sequence[str], k: int) -> list[tuple[float, int]]:
        """Return the ``k`` best ``(score, seq)`` by BM25, ties by seq: ``Memory.search``'s ranking.

        Exact, but not every item holding a query word is scored: the items
        holding the query's best-weighted word give a ``k``-th score, and
        the words whose greatest possible shares sum below it (common
        words) add no item of their own to those scored (MaxScore).

        Raises:
            DamagedIndexError: if the base's postings of a term do not check out.
        """
        np = _numpy()
        if np is not None:
            return self._top_numpy(np, terms, k)
        live = {term: self.postings(term) for term in dict.fromkeys(terms)}
        df = {term: len(found) for term, found in live.items() if found}
        if not df:
            return []
        n_items = self.count
        weighted = query_weights(terms, df, n_items)
        average = bm25_average_length(self.total, n_items)
        lengths = self.lengths
        held = [(term, found) for term, found in live.items() if found]

        def scored(seqs: Iterable[int]) -> list[tuple[float, int]]:
            out = []
            for seq in seqs:
                counts = {term: found[seq] for term, found in held if seq in found}
                out.append((bm25_score(counts, lengths[seq], weighted, average), seq))
            return heapq.nsmallest(k, out, key=_best_first)

        # Each word's greatest share: its weight (once per time the query holds it) times 1 + floor.
        bound: dict[str, float] = {}
        for term, weight in weighted:
            bound[term] = bound.get(term, 0.0) + weight * (1.0 + BM25_FLOOR)
        order = sorted(df, key=lambda term: (bound[term], term))
        seed = scored(live[order[-1]])
        if len(seed) < k:
            return scored(set().union(*live.values()))
        # Below the k-th score (less a margin for the order of float sums) no item can enter.
        threshold = seed[-1][0] * (1.0 - 1e-9)
        common = 0.0
        essential = order
        for at, term in enumerate(order):
            if common + bound[term] >= threshold:
                essential = order[at:]
                break
            common += bound[term]
        return scored(set().union(*(live[term] for term in essential)))

    def _top_numpy(self, np: Any, terms: Sequence[str], k: int) -> list[tuple[float, int]]:
        """Return :meth:`top`'s ranking, each share summed in query order over arrays (the same floats)."""
        seqs, lengths = self._dense_arrays(np)
        arrays = {term: self._arrays_of(np, term, seqs) for term in dict.fromkeys(terms)}
        df = {term: len(got[0]) for term, got in arrays.items() if len(got[0])}
        if not df:
            return []
        weighted = query_weights(terms, df, len(seqs))
        average = bm25_average_length(self.total, len(seqs))
        score = np.zeros(len(seqs))
        scale = BM25_K1 * BM25_B / average  # as bm25_term_score: (k1 * b / average) * length
        for term, weight in weighted:
            at, tf = arrays[term]
            score[at] += weight * (tf / (tf + _FLAT + scale * lengths[at]) + BM25_FLOOR)
        held = np.flatnonzero(score > 0.0)
        if len(held) > k:
            kth = np.partition(score[held], len(held) - k)[len(held) - k]
            held = held[score[held] >= kth]
        best = held[np.lexsort((seqs[held], -score[held]))][:k]
        return [(float(score[at]), int(seqs[at])) for at in best]

    def _dense_arrays(self, np: Any) -> tuple[Any, Any]:
        """Return numpy's (sorted live seqs, their lengths as floats), kept while nothing changes."""
        if self._dense is None:
            seqs = np.fromiter(self.lengths, dtype=np.int64, count=self.count)
            lengths = np.fromiter(self.lengths.values(), dtype=np.float64, count=len(seqs))
            order = np.argsort(seqs)
            self._dense = (seqs[order], lengths[order])
        return self._dense

    def dense_from(self, seqs: Any, lengths: Any) -> None:
        """Take numpy's arrays of the live seqs (ascending) and their lengths, as read from a file."""
        self._dense = (seqs, lengths)

    def _arrays_of(self, np: Any, term: str, seqs: Any) -> tuple[Any, Any]:
        """Return a term's live postings as (positions in ``seqs``, counts as floats), kept while nothing changes.

        Raises:
            DamagedIndexError: if the base's postings of the term do not check out.
        """
        got = self._arrays.get(term)
        if got is None:
            got = self._arrays[term] = self._term_arrays(np, term, seqs)
        return got

    def frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        """Return how many live items hold each of ``terms``.

        Raises:
            DamagedIndexError: if the base's postings of a term do not check out.
        """
        np = _numpy()
        if np is None:
            return {term: len(self.postings(term)) for term in dict.fromkeys(terms)}
        seqs, _ = self._dense_arrays(np)
        return {term: len(self._arrays_of(np, term, seqs)[0]) for term in dict.fromkeys(terms)}

    def _term_arrays(self, np: Any, term: str, seqs: Any) -> tuple[Any, Any]:
        """Return a term's live postings as (positions in ``seqs``, counts as floats).

        Raises:
            DamagedIndexError: if the base's postings of the term do not check out.
        """
        if self.removed:
            found = self.postings(term)
            at = np.fromiter(found, dtype=np.int64, count=len(found))
            tf = np.fromiter(found.values(), dtype=np.float64, count=len(found))
            return np.searchsorted(seqs, at), tf
        at, tf = self._base_arrays(np, term, seqs)
        more = sorted(self.added_by_term.get(term, ()))
        if more:  # items appended since the base: after its items
            at = np.concatenate((at, np.searchsorted(seqs, np.array(more, dtype=np.int64))))
            counts = [self.added[seq][term] for seq in more]
            tf = np.concatenate((tf, np.array(counts, dtype=np.float64)))
        return at, tf

    def _base_arrays(self, np: Any, term: str, seqs: Any) -> tuple[Any, Any]:
        """Return a term's base postings as (positions in ``seqs``, counts as floats), nothing removed since.

        Raises:
            DamagedIndexError: if the base's postings of the term do not check out.
        """
        # The bytes read as arrays, checked (each term's seqs ascend).
        seq_bytes, count_bytes = self._slice(term)
        at = np.frombuffer(seq_bytes, dtype=f"=u{self.widths[0]}").astype(np.int64)
        tf = np.frombuffer(count_bytes, dtype=f"=u{self.widths[1]}").astype(np.float64)
        if not len(at):
            return at, tf
        if tf.min() < 1 or (at[1:] <= at[:-1]).any():
            raise DamagedIndexError(term)
        if len(seqs) and seqs[-1] - seqs[0] == len(seqs) - 1:
            where = (
                at - seqs[0]
            )  # seqs without a gap (nothing deleted): a seq's place is its distance
            if where[0] < 0 or where[-1] >= len(seqs):
                raise DamagedIndexError(term)
            return where, tf
        where = np.searchsorted(seqs, at)
        if where[-1] >= len(seqs) or (seqs[where] != at).any():
            raise DamagedIndexError(term)
        return where, tf

    # -- following the log ---------------------------------------------------------------

    def _drop(self, seq: int) -> None:
        length = self.lengths.pop(seq, None)
        if length is None:
            return
        self._dense = None
        self._arrays.clear()
        self.total -= length
        counts = self.added.pop(seq, None)
        if counts is None:
            self.removed.add(seq)  # its base postings are stale from now on
            self._live.clear()  # its terms are not known here
        else:
            for term in counts:
                self.added_by_term[term].discard(seq)
                self._live.get(term, {}).pop(seq, None)

    def _put(self, seq: int, terms: tuple[str, int]) -> None:
        self._drop(seq)
        text, length = terms
        counts = dict(Counter(text.split(" "))) if length else {}
        self.added[seq] = counts
        self._appended_arrays(seq, length, counts)
        for term, tf in counts.items():
            self.added_by_term.setdefault(term, set()).add(seq)
            found = self._live.get(term)
            if found is not None:
                found[seq] = tf
        self.lengths[seq] = length
        self.total += length
        self.unsaved += 1

    def _appended_arrays(self, seq: int, length: int, counts: dict[str, int]) -> None:
        """Extend numpy's arrays by an item after every other (appended); forget them for any other change."""
        dense, np = self._dense, _numpy()
        if dense is None or np is None or (len(dense[0]) and seq <= dense[0][-1]):
            self._dense = None
            self._arrays.clear()
            return
        place = len(dense[0])
        self._dense = (np.append(dense[0], seq), np.append(dense[1], float(length)))
        for term, tf in counts.items():
            got = self._arrays.get(term)
            if got is not None:
                self._arrays[term] = (np.append(got[0], place), np.append(got[1], float(tf)))

    def follow(self, chunk: bytes, source: str) -> None:
        """Apply the records of ``chunk``, the log's bytes after :attr:`offset` (whole lines), and move past them.

        Items are tokenized as the store tokenizes them; other records than
        items, deletions and clears do not change the index.

        Raises:
            DamagedIndexError: if a line is not a record (the log view read it, so the file changed under it).
            CorruptStoreError: if an item of the log cannot be decoded.
        """
        changes: list[tuple[int, bool, bytes] | list[int] | None] = []
        try:
            for line in chunk.split(b"\n")[:-1]:
                if not line.strip():
                    continue
                split = split_item_record(line)
                if split is not None:
                    head = orjson.loads(split[0])
                    seq = head["seq"]
                    if type(seq) is not int:
                        raise DamagedIndexError(source)
                    changes.append((seq, bool(head.get("u")), split[1]))
                    continue
                head = orjson.loads(line)
                if type(head) is not dict:
                    raise DamagedIndexError(source)
                if "del" in head:
                    gone = head["del"]
                    if type(gone) is not list or any(type(seq) is not int for seq in gone):
                        raise DamagedIndexError(source)
                    changes.append(gone)
                elif "clear" in head:
                    changes.append(None)
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise DamagedIndexError(source) from exc
        items = [(change[0], change[2]) for change in changes if type(change) is tuple]
        terms = iter(terms_of(items, source))
        for change in changes:
            if change is None:
                for seq in list(self.lengths):
                    self._drop(seq)
            elif type(change) is list:
                for seq in change:
                    self._drop(seq)
            else:
                seq, update, _ = change
                got = next(terms)
                if not update or seq in self.lengths:  # the log ignores an update of no live item
                    self._put(seq, got)
        self.offset += len(chunk)

    # -- packing -------------------------------------------------------------------------

    def packed(self) -> KeywordIndex:
        """Return the same postings as one packed base (nothing added or removed).

        Raises:
            DamagedIndexError: if the base's postings do not check out.
        """
        if not self.added and not self.removed:
            return self
        tf_max = max((tf for counts in self.added.values() for tf in counts.values()), default=1)
        widths = (_width(max(self.lengths, default=0)), _width(tf_max))
        if self.removed or any(new > old for new, old in zip(widths, self.widths, strict=True)):
            parts = (
                (term, self.postings(term))
                for term in set(self.base.terms) | set(self.added_by_term)
            )
            found = [(term, list(p), list(p.values())) for term, p in parts if p]
            widths = (widths[0], _width(max((max(c) for _, _, c in found), default=1)))
            base = _pack(found, widths)
        else:
            base = self._appended(self.widths)
        index = KeywordIndex(self.header, self.offset, dict(self.lengths), base)
        index.unsaved, index.file_stale = self.unsaved, self.file_stale
        return index

    def _appended(self, widths: tuple[int, int]) -> Base:
        """Pack the base with the added items' postings after each term's (nothing removed): the base's bytes are copied."""
        terms: list[str] = []
        entries: array[int] = array(_POSTING_CODES[8])
        parts: list[bytes] = []
        at = 0
        seq_code, tf_code = _POSTING_CODES[widths[0]], _POSTING_CODES[widths[1]]
        for term in sorted({*self.base.terms, *self.added_by_term}):
            seq_bytes, count_bytes = self._slice(term)
            more = sorted(self.added_by_term.get(term, ()))
            if more:
                seq_bytes += array(seq_code, more).tobytes()
                count_bytes += array(tf_code, [self.added[seq][term] for seq in more]).tobytes()
            if not seq_bytes:
                continue
            part = seq_bytes + count_bytes
            terms.append(term)
            entries.extend((at, len(seq_bytes) // widths[0], zlib.crc32(part)))
            parts.append(part)
            at += len(part)
        return Base(terms, entries, widths, b"".join(parts))

    def to_bytes(self, tail: bytes) -> list[bytes]:
        """Return the file of a packed index (:meth:`packed`), ``tail`` being the log's bytes just before :attr:`offset`."""
        assert not self.added
        assert not self.removed
        seqs = sorted(self.lengths)
        width = _width(seqs[-1] if seqs else 0)
        lengths_part = (
            array(_POSTING_CODES[width], seqs).tobytes()
            + array(_POSTING_CODES[4], [self.lengths[seq] for seq in seqs]).tobytes()
        )
        base = self.base
        encoded = [term.encode() for term in base.terms]
        terms_part = b"".join(encoded)
        starts: array[int] = array(_POSTING_CODES[4], [0])
        starts.extend(itertools.accumulate(map(len, encoded)))
        starts_part = starts.tobytes()
        entries_part = base.entries.tobytes()
        head = {
            "format": FORMAT,
            "version": _VERSION,
            "byteorder": sys.byteorder,
            "log": hashlib.blake2b(self.header).hexdigest(),
            "offset": self.offset,
            "tail": hashlib.blake2b(tail).hexdigest(),
            "items": len(seqs),
            "terms": len(base.terms),
            "seq_width": width,
            "widths": list(self.widths),
            "parts": [
                [len(part), zlib.crc32(part)]
                for part in (terms_part, starts_part, entries_part, lengths_part)
            ],
            "postings": base.size,
        }
        blob = base.read(0, base.size)
        return [
            orjson.dumps(head) + b"\n",
            terms_part,
            starts_part,
            entries_part,
            lengths_part,
            blob,
        ]


class _Terms(Sequence[str]):
    """The sorted terms of a file, each decoded when looked at (bisection looks at a few)."""

    def __init__(self, data: bytes, starts: array[int]) -> None:
        self._data = data
        self._starts = starts

    def __len__(self) -> int:
        return len(self._starts) - 1

    @overload
    def __getitem__(self, at: int) -> str: ...
    @overload
    def __getitem__(self, at: slice) -> list[str]: ...
    def __getitem__(self, at: int | slice) -> str | list[str]:
        if isinstance(at, slice):
            return [self[i] for i in range(*at.indices(len(self)))]
        if at < 0:
            at += len(self)
        if not 0 <= at < len(self):
            raise IndexError(at)
        start, end = self._starts[at], self._starts[at + 1]
        if not start <= end <= len(self._data):
            raise DamagedIndexError("term bounds")
        return self._data[start:end].decode("utf-8", errors="replace")


class Base:
    """Packed postings: the terms (sorted), each one's ``(start, count, crc)``, and the bytes they point into.

    The bytes are in memory (``data``) or read when asked from an open
    file (``fd``, from ``at``), which this object closes when it goes.
    """

    def __init__(
        self,
        terms: Sequence[str],
        entries: array[int],
        widths: tuple[int, int],
        data: bytes | None = None,
        *,
        fd: int = -1,
        at: int = 0,
        size: int = 0,
    ) -> None:
        self.terms = terms
        self.entries = entries
        self.widths = widths
        self._data = data
        self._fd = fd
        self._at = at
        self.size = len(data) if data is not None else size
        if fd >= 0:
            weakref.finalize(self, os.close, fd)

    def read(self, start: int, end: int) -> bytes:
        """Return the postings bytes ``[start, end)`` (fewer if the file was cut short)."""
        if self._data is not None:
            return self._data[start:end]
        return _pread(self._fd, self._at + start, self._at + end)

    def slice(self, term: str) -> tuple[bytes, bytes]:
        """Return the bytes of a term's seqs and counts, checked against their CRC (empty if no item holds it).

        Raises:
            DamagedIndexError: if the entry or its bytes do not check out.
        """
        # The terms were written sorted (a file whose CRC holds is taken as written).
        number = bisect.bisect_left(self.terms, term)
        if number == len(self.terms) or self.terms[number] != term:
            return b"", b""
        if 3 * number + 3 > len(self.entries):
            raise DamagedIndexError(term)
        start, count, crc = self.entries[3 * number : 3 * number + 3]
        cut = start + count * self.widths[0]
        end = cut + count * self.widths[1]
        if count < 1 or end > self.size:
            raise DamagedIndexError(term)
        part = self.read(start, end)
        if zlib.crc32(part) != crc:
            raise DamagedIndexError(term)
        return part[: cut - start], part[cut - start :]


def _numpy() -> Any:
    """Return numpy, or ``None`` where it is not installed (the index then scores in Python)."""
    try:
        import numpy  # optional: without it, the items are scored one by one
    except ImportError:
        return None
    return numpy


def _best_first(hit: tuple[float, int]) -> tuple[float, int]:
    """Sort key of ``(score, seq)``: the higher score first, then the lower seq."""
    return -hit[0], hit[1]


def _pack(
    postings: Iterable[tuple[str, Sequence[int], Sequence[int]]], widths: tuple[int, int]
) -> Base:
    """Return the packed postings of ``(term, seqs, counts)``."""
    terms: list[str] = []
    entries: array[int] = array(_POSTING_CODES[8])
    parts: list[bytes] = []
    at = 0
    seq_code, tf_code = _POSTING_CODES[widths[0]], _POSTING_CODES[widths[1]]
    for term, seqs, counts in sorted(postings, key=lambda posting: posting[0]):
        if any(
            a >= b for a, b in itertools.pairwise(seqs)
        ):  # a reader checks each term's seqs ascend
            seqs, counts = zip(*sorted(zip(seqs, counts, strict=True)), strict=True)
        part = array(seq_code, seqs).tobytes() + array(tf_code, counts).tobytes()
        terms.append(term)
        entries.extend((at, len(seqs), zlib.crc32(part)))
        parts.append(part)
        at += len(part)
    return Base(terms, entries, widths, b"".join(parts))


def terms_of(rows: Sequence[tuple[int, bytes]], source: str) -> Iterator[tuple[str, int]]:
    """Yield the search terms of stored rows ``(seq, data)``, as the store indexes them, in order.

    Raises:
        CorruptStoreError: if a row cannot be decoded.
    """
    for at in range(0, len(rows), _BUILD_PAGE):
        for _, item in decode_pairs(list(rows[at : at + _BUILD_PAGE]), source, "base"):
            yield item_terms(item)


def build(log: SessionLog, source: str) -> KeywordIndex:
    """Return the index of a log view, from its items (each decoded and tokenized).

    Raises:
        CorruptStoreError: if an item cannot be decoded.
    """
    rows = [(seq, row[2]) for seq, row in log.rows.items()]
    lengths: dict[int, int] = {}
    seqs_of: dict[str, list[int]] = {}
    counts_of: dict[str, list[int]] = {}
    tf_max = 0
    with _codec.collector_paused(len(rows)):
        for (seq, _), (text, length) in zip(rows, terms_of(rows, source), strict=True):
            lengths[seq] = length
            if not length:
                continue
            for term, tf in Counter(text.split(" ")).items():
                seqs = seqs_of.get(term)
                if seqs is None:
                    seqs_of[term] = [seq]
                    counts_of[term] = [tf]
                else:
                    seqs.append(seq)
                    counts_of[term].append(tf)
                if tf > tf_max:
                    tf_max = tf
        widths = (_width(max(lengths, default=0)), _width(tf_max))
        base = _pack(((t, s, counts_of[t]) for t, s in seqs_of.items()), widths)
    index = KeywordIndex(log.header, log.offset, lengths, base)
    index.file_stale = True
    return index


def load(fd: int, log: SessionLog, read_log: Callable[[int, int], bytes]) -> KeywordIndex:
    """Return the index an open file holds, if it covers a prefix of the log ``log`` views.

    ``read_log(start, end)`` returns the log file's bytes in that range.
    Every byte is checked before it is used: the header, the terms, their
    entries and the lengths here (against their CRC), each term's postings
    when it is first asked for (:meth:`Base.slice`), read from ``fd`` then:
    the index takes the file descriptor and closes it when it goes.

    Raises:
        DamagedIndexError: if the file is not an index of this log, or is damaged.
    """
    try:
        size = os.fstat(fd).st_size
        first = _pread(fd, 0, _HEADER_MAX)
        end = first.find(b"\n")
        if end < 0:
            raise DamagedIndexError("no header line")
        head = orjson.loads(first[:end])
        if type(head) is not dict or head.get("format") != FORMAT:
            raise DamagedIndexError("not a keyword index")
        offset, items, n_terms, seq_width = (
            head["offset"],
            head["items"],
            head["terms"],
            head["seq_width"],
        )
        widths, parts, postings = head["widths"], head["parts"], head["postings"]
        if not (
            head.get("version") == _VERSION
            and head.get("byteorder") == sys.byteorder
            and head.get("log") == hashlib.blake2b(log.header).hexdigest()
            and all(type(x) is int and x >= 0 for x in (offset, items, n_terms, postings))
            and len(log.header) <= offset <= log.offset
            and seq_width in _POSTING_CODES
            and type(widths) is list
            and len(widths) == 2
            and all(w in _POSTING_CODES and type(w) is int for w in widths)
            and type(parts) is list
            and len(parts) == 4
            and all(type(part) is list and len(part) == 2 for part in parts)
            and all(type(x) is int and x >= 0 for part in parts for x in part)
            and parts[1][0] == (n_terms + 1) * 4
            and parts[2][0] == n_terms * 3 * 8
            and parts[3][0] == items * (seq_width + 4)
            and end + 1 + sum(part[0] for part in parts) + postings == size
        ):
            raise DamagedIndexError("header")
        if hashlib.blake2b(read_log(max(0, offset - _TAIL), offset)).hexdigest() != head["tail"]:
            raise DamagedIndexError("another log")
        at = end + 1
        read = _pread(fd, at, at + sum(part[0] for part in parts))
        chunks = []
        for length, crc in parts:
            chunk, read = read[:length], read[length:]
            if zlib.crc32(chunk) != crc:
                raise DamagedIndexError("checksum")
            chunks.append(chunk)
            at += length
        starts: array[int] = array(_POSTING_CODES[4])
        starts.frombytes(chunks[1])
        terms = _Terms(chunks[0], starts)
        entries: array[int] = array(_POSTING_CODES[8])
        entries.frombytes(chunks[2])
        seqs: array[int] = array(_POSTING_CODES[seq_width])
        seqs.frombytes(chunks[3][: items * seq_width])
        counts: array[int] = array(_POSTING_CODES[4])
        counts.frombytes(chunks[3][items * seq_width :])
        base = Base(terms, entries, (widths[0], widths[1]), fd=fd, at=at, size=postings)
        np = _numpy()
        if np is None:
            lengths: dict[int, int] | tuple[array[int], array[int]] = dict(
                zip(seqs, counts, strict=True)
            )
            if len(lengths) != items:
                raise DamagedIndexError("repeated seqs")
            index = KeywordIndex(log.header, offset, lengths, base)
        else:
            # The file's seqs ascend (checked): numpy's arrays of them come from its bytes.
            dense = np.frombuffer(chunks[3][: items * seq_width], dtype=f"=u{seq_width}")
            if (dense[1:] <= dense[:-1]).any():
                raise DamagedIndexError("seqs not ascending")
            index = KeywordIndex(log.header, offset, (seqs, counts), base)
            index.dense_from(
                dense.astype(np.int64),
                np.frombuffer(chunks[3][items * seq_width :], dtype="=u4").astype(np.float64),
            )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError) as exc:
        os.close(fd)
        if isinstance(exc, DamagedIndexError):
            raise
        raise DamagedIndexError(str(exc)) from exc
    except BaseException:
        os.close(fd)
        raise
    return index


def rank_together(
    indexes: Sequence[KeywordIndex], terms: Sequence[str], k: int
) -> list[tuple[float, int, int]]:
    """Return the ``k`` best ``(score, index number, seq)`` by BM25 over several sessions as one corpus.

    The statistics are the sessions' summed; ties go by index number, then seq.

    Raises:
        DamagedIndexError: if the postings of a term do not check out.
    """
    n_items = sum(index.count for index in indexes)
    total = sum(index.total for index in indexes)
    matches: list[KeywordMatch] = []
    shift = 1 + max((max(index.lengths, default=0) for index in indexes), default=0).bit_length()
    for number, index in enumerate(indexes):
        _, found = index.matches(terms)
        matches.extend(((number << shift) | seq, length, counts) for seq, length, counts in found)
    mask = (1 << shift) - 1
    return [
        (score, key >> shift, key & mask)
        for score, key in rank_matches(n_items, total, matches, terms, k)
    ]


def score_among(
    index: KeywordIndex, terms: Sequence[str], seqs: Sequence[int]
) -> list[tuple[float, int]]:
    """Return ``(score, seq)`` of the items among ``seqs`` holding a query term, best first (ties by seq), with the session's statistics.

    Raises:
        DamagedIndexError: if the postings of a term do not check out.
    """
    df, found = index.matches(terms, set(seqs))
    n_items = index.count
    weighted = query_weights(terms, df, n_items)
    average = bm25_average_length(index.total, n_items)
    scored = [(bm25_score(counts, length, weighted, average), seq) for seq, length, counts in found]
    return sorted(scored, key=lambda hit: (-hit[0], hit[1]))


class SessionKeywords:
    """This handle's keyword indexes of the logs of one store, each kept current with its log view.

    Every method expects the caller to hold the store's lock (shared at
    least) and the log view to be current.

    Args:
        directory: The store directory.
        read_only: Never write an index file (indexes are then built in memory).
    """

    def __init__(self, directory: str, *, read_only: bool) -> None:
        self.directory = directory
        self.read_only = read_only
        self._indexes: dict[str, KeywordIndex] = {}

    def path(self, session_id: str) -> str:
        """Return the path of a session's index file."""
        return os.path.join(self.directory, f"{session_id}.keywords")

    def current(self, session_id: str, log: SessionLog, log_path: str) -> KeywordIndex:
        """Return the session's index, caught up with ``log`` (loaded, followed or built, and saved when due).

        Raises:
            CorruptStoreError: if an item of the log cannot be decoded.
        """
        index = self._indexes.get(session_id)
        if index is not None and (index.header != log.header or index.offset > log.offset):
            index = None
        if index is None:
            index = self._load(session_id, log, log_path)
        if index is not None and index.offset < log.offset:
            try:
                index.follow(_read_range(log_path, index.offset, log.offset), log_path)
            except DamagedIndexError:
                index = None
        if index is None:
            index = build(log, f"session {session_id!r} of {log_path!r}")
        self._indexes[session_id] = index
        due = index.unsaved >= max(SAVE_EVERY, index.count // 64)
        if not self.read_only and (due or index.file_stale):
            self._save(session_id, index, log_path)
        return index

    def moved(self, session_id: str, header: bytes, offset: int, log: SessionLog) -> None:
        """Take a compacted log: an index that covered the old one whole (``header``, ``offset``) covers ``log``, the new one."""
        index = self._indexes.get(session_id)
        if index is None or index.header != header or index.offset != offset:
            self._indexes.pop(session_id, None)
            return
        index.header, index.offset, index.file_stale = log.header, log.offset, True

    def rebuilt(self, session_id: str, log: SessionLog, log_path: str) -> KeywordIndex:
        """Forget the session's index (its file did not check out) and build it again from the log.

        Raises:
            CorruptStoreError: if an item of the log cannot be decoded.
        """
        self._indexes.pop(session_id, None)
        index = build(log, f"session {session_id!r} of {log_path!r}")
        self._indexes[session_id] = index
        if not self.read_only:
            self._save(session_id, index, log_path)
        return index

    def _load(self, session_id: str, log: SessionLog, log_path: str) -> KeywordIndex | None:
        try:
            fd = open_file(self.path(session_id), os.O_RDONLY, "keyword index")
        except (OSError, StoreError):
            return None  # missing, a link or unreadable: built again
        try:
            return load(fd, log, lambda start, end: _read_range(log_path, start, end))
        except (OSError, DamagedIndexError):
            return None

    def _save(self, session_id: str, index: KeywordIndex, log_path: str) -> None:
        try:
            packed = index.packed()
        except DamagedIndexError:
            return  # the next query finds the damage and builds the index again
        try:
            tail = _read_range(log_path, max(0, packed.offset - _TAIL), packed.offset)
            _codec.atomic_write(self.path(session_id), packed.to_bytes(tail))
        except OSError:
            return  # a cache that cannot be written is built again by the next process
        packed.unsaved, packed.file_stale = 0, False
        self._indexes[session_id] = packed

    def forget(self, session_id: str, *, remove: bool = False) -> None:
        """Drop the index of a session (and, if ``remove``, its file)."""
        self._indexes.pop(session_id, None)
        if remove:
            with contextlib.suppress(OSError):
                os.unlink(self.path(session_id))

    def clear(self) -> None:
        """Drop every index this handle holds."""
        self._indexes.clear()


def _read_range(path: str, start: int, end: int) -> bytes:
    """Return the bytes ``[start, end)`` of a log file (fewer if it is shorter)."""
    fd = open_file(path, os.O_RDONLY, "log")
    try:
        return _pread(fd, start, end)
    finally:
        os.close(fd)


def _pread(fd: int, start: int, end: int) -> bytes:
    """Return the bytes ``[start, end)`` of an open file (fewer if it is shorter)."""
    out = []
    while start < end:
        got = os.pread(fd, end - start, start)
        if not got:
            break
        out.append(got)
        start += len(got)
    return b"".join(out)
