"""The keyword index of one session log in memory: :class:`KeywordIndex`, its postings kept current as the log grows.

The index's ranking is :mod:`agents.memory.stores._jsonl.keyword_ranking`,
its file :mod:`agents.memory.stores._jsonl.keyword_file`, and when it is
built, loaded, followed and saved :mod:`agents.memory.stores._jsonl.keywords`.
"""

from __future__ import annotations

import zlib
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, Final

import orjson

from agents.memory.stores._core.encoding import decode_pairs
from agents.memory.stores._core.terms import item_terms
from agents.memory.stores._jsonl.keyword_postings import (
    POSTING_CODES,
    Base,
    DamagedIndexError,
    StoredOffsets,
    pack,
    width,
)
from agents.memory.stores._jsonl.log import split_item_record

__all__ = ["KeywordIndex", "numpy_module", "terms_of"]

_BUILD_PAGE: Final = 4096


class KeywordIndex:
    """The postings of one session log read up to :attr:`offset`: a packed base, and the items changed since.

    The base is the postings as saved (or built), a :class:`Base`. Items added or changed since are
    held apart (``added``: seq -> {term: count}); ``removed`` are the base's
    seqs no longer live. ``lengths`` holds every live item's length, and
    ``offsets`` where the record holding its current bytes starts in the
    log (so that a hit can be read alone: :meth:`record_at`).
    """

    def __init__(
        self,
        header: bytes,
        offset: int,
        lengths: dict[int, int] | tuple[Sequence[int], Sequence[int]],
        base: Base,
        offsets: dict[int, int] | StoredOffsets,
        *,
        total: int | None = None,
    ) -> None:
        self.header = header
        self.offset = offset
        if isinstance(lengths, dict):
            self._lengths: dict[int, int] | None = lengths
            self._length_arrays: tuple[Sequence[int], Sequence[int]] | None = None
            self.total = sum(lengths.values())
        else:  # as read from a file (seqs ascending): made a dict when first needed
            self._lengths, self._length_arrays = None, lengths
            self.total = sum(lengths[1]) if total is None else total
        # As read from a file: a dict when first changed (or packed).
        self._offsets: dict[int, int] | StoredOffsets = offsets
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
    def offsets(self) -> dict[int, int]:
        """Where the record of every live item's current bytes starts in the log, by seq.

        Raises:
            DamagedIndexError: if they are read from a file cut short.
        """
        if isinstance(self._offsets, StoredOffsets):
            self._offsets = self._offsets.every()
        return self._offsets

    @offsets.setter
    def offsets(self, offsets: dict[int, int]) -> None:
        self._offsets = offsets

    def record_at(self, seq: int) -> int | None:
        """Return where the record of live item ``seq``'s current bytes starts in the log (``None``: not live), to be checked there.

        Raises:
            DamagedIndexError: if it is read from a file cut short.
        """
        return self._offsets.get(seq)

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
        seqs: array[int] = array(POSTING_CODES[self.widths[0]])
        counts: array[int] = array(POSTING_CODES[self.widths[1]])
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

    def dense_arrays(self, np: Any) -> tuple[Any, Any]:
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

    def arrays_of(self, np: Any, term: str, seqs: Any) -> tuple[Any, Any]:
        """Return a term's live postings as (positions in ``seqs``, counts as floats), kept while nothing changes.

        Raises:
            DamagedIndexError: if the base's postings of the term do not check out.
        """
        got = self._arrays.get(term)
        if got is None:
            got = self._arrays[term] = self._term_arrays(np, term, seqs)
        return got

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
        # The bytes read as arrays, checked (each term's seqs ascend) as they are, before
        # they are widened (half the bytes to look at: a term most items hold is read faster).
        seq_bytes, count_bytes = self._slice(term)
        raw = np.frombuffer(seq_bytes, dtype=f"=u{self.widths[0]}")
        raw_tf = np.frombuffer(count_bytes, dtype=f"=u{self.widths[1]}")
        if len(raw) and (raw_tf.min() < 1 or (raw[1:] <= raw[:-1]).any()):
            raise DamagedIndexError(term)
        at, tf = raw.astype(np.int64), raw_tf.astype(np.float64)
        if not len(at):
            return at, tf
        if len(seqs) and seqs[-1] - seqs[0] == len(seqs) - 1:
            # Seqs without a gap (nothing deleted): a seq's place is its distance from the first.
            at -= seqs[0]
            if at[0] < 0 or at[-1] >= len(seqs):
                raise DamagedIndexError(term)
            return at, tf
        where = np.searchsorted(seqs, at)
        if where[-1] >= len(seqs) or (seqs[where] != at).any():
            raise DamagedIndexError(term)
        return where, tf

    # -- following the log ---------------------------------------------------------------

    def _drop(self, seq: int) -> None:
        length = self.lengths.pop(seq, None)
        if length is None:
            return
        self.offsets.pop(seq, None)
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

    def _put(self, seq: int, terms: tuple[str, int], at: int) -> None:
        self._drop(seq)
        self.offsets[seq] = at
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
        dense, np = self._dense, numpy_module()
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
        changes: list[tuple[int, bool, bytes, int] | list[int] | None] = []
        at = self.offset  # where the next line starts
        try:
            for line in chunk.split(b"\n")[:-1]:
                start, at = at, at + len(line) + 1
                if not line.strip():
                    continue
                split = split_item_record(line)
                if split is not None:
                    head = orjson.loads(split[0])
                    seq = head["seq"]
                    if type(seq) is not int:
                        raise DamagedIndexError(source)
                    changes.append((seq, bool(head.get("u")), split[1], start))
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
                seq, update, _, start = change
                got = next(terms)
                if not update or seq in self.lengths:  # the log ignores an update of no live item
                    self._put(seq, got, start)
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
        widths = (width(max(self.lengths, default=0)), width(tf_max))
        if self.removed or any(new > old for new, old in zip(widths, self.widths, strict=True)):
            parts = (
                (term, self.postings(term))
                for term in set(self.base.terms) | set(self.added_by_term)
            )
            found = [(term, list(p), list(p.values())) for term, p in parts if p]
            widths = (widths[0], width(max((max(c) for _, _, c in found), default=1)))
            base = pack(found, widths)
        else:
            base = self._appended(self.widths)
        index = KeywordIndex(self.header, self.offset, dict(self.lengths), base, dict(self.offsets))
        index.unsaved, index.file_stale = self.unsaved, self.file_stale
        return index

    def _appended(self, widths: tuple[int, int]) -> Base:
        """Pack the base with the added items' postings after each term's (nothing removed): the base's bytes are copied."""
        terms: list[str] = []
        entries: array[int] = array(POSTING_CODES[8])
        parts: list[bytes] = []
        at = 0
        seq_code, tf_code = POSTING_CODES[widths[0]], POSTING_CODES[widths[1]]
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


def numpy_module() -> Any:
    """Return numpy, or ``None`` where it is not installed (the index then scores in Python)."""
    try:
        import numpy  # optional: without it, the items are scored one by one
    except ImportError:
        return None
    return numpy


def terms_of(rows: Sequence[tuple[int, bytes]], source: str) -> Iterator[tuple[str, int]]:
    """Yield the search terms of stored rows ``(seq, data)``, as the store indexes them, in order.

    Raises:
        CorruptStoreError: if a row cannot be decoded.
    """
    for at in range(0, len(rows), _BUILD_PAGE):
        for _, item in decode_pairs(list(rows[at : at + _BUILD_PAGE]), source, "base"):
            yield item_terms(item)
