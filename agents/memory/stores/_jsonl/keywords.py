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

The file: a JSON header line, then the vocabulary (JSON: term -> ``[start,
count, crc]`` in the postings), the items' seqs and lengths, and the
postings (each term's seqs, then its counts, as native unsigned arrays).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import zlib
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final

import orjson

from agents.memory import _codec
from agents.memory._text import bm25_average_length
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

    The base is the postings as saved (or built): ``vocab`` maps a term to
    ``(start, count, crc)`` in ``blob``. Items added or changed since are
    held apart (``added``: seq -> {term: count}); ``removed`` are the base's
    seqs no longer live. ``lengths`` holds every live item's length.
    """

    def __init__(
        self,
        header: bytes,
        offset: int,
        lengths: dict[int, int],
        vocab: dict[str, list[int]],
        blob: bytes,
        widths: tuple[int, int],
    ) -> None:
        self.header = header
        self.offset = offset
        self.lengths = lengths
        self.total = sum(lengths.values())
        self.vocab = vocab
        self.blob = blob
        self.widths = widths
        self.removed: set[int] = set()
        self.added: dict[int, dict[str, int]] = {}
        self.added_by_term: dict[str, set[int]] = {}
        self.unsaved = 0
        """Items indexed since the file was written."""
        self.file_stale = False
        """Whether the file beside the log no longer describes this index's log (not written yet, or the log compacted)."""
        self._decoded: dict[str, tuple[array[int], array[int]]] = {}

    # -- the postings --------------------------------------------------------------------

    def _slice(self, term: str) -> tuple[bytes, bytes]:
        """Return the bytes of a term's base seqs and counts, checked against their CRC (empty if the base lacks it).

        Raises:
            DamagedIndexError: if the entry or its bytes do not check out.
        """
        entry = self.vocab.get(term)
        if entry is None:
            return b"", b""
        if not (type(entry) is list and len(entry) == 3 and all(type(x) is int for x in entry)):
            raise DamagedIndexError(term)
        start, count, crc = entry
        cut = start + count * self.widths[0]
        end = cut + count * self.widths[1]
        if start < 0 or count < 1 or end > len(self.blob):
            raise DamagedIndexError(term)
        if zlib.crc32(self.blob[start:end]) != crc:
            raise DamagedIndexError(term)
        return self.blob[start:cut], self.blob[cut:end]

    def _base(self, term: str) -> tuple[array[int], array[int]]:
        """Return a term's base postings (seqs, counts), checked.

        Raises:
            DamagedIndexError: if the entry or its bytes do not check out.
        """
        got = self._decoded.get(term)
        if got is not None:
            return got
        seq_bytes, count_bytes = self._slice(term)
        seqs: array[int] = array(_POSTING_CODES[self.widths[0]])
        counts: array[int] = array(_POSTING_CODES[self.widths[1]])
        seqs.frombytes(seq_bytes)
        counts.frombytes(count_bytes)
        # Every seq an item of the base (live, or changed since), every count at least 1.
        if seqs and (min(counts) < 1 or set(seqs).difference(self.lengths, self.removed)):
            raise DamagedIndexError(term)
        self._decoded[term] = (seqs, counts)
        return seqs, counts

    def postings(self, term: str) -> dict[int, int]:
        """Return the live items holding ``term``: seq -> count.

        Raises:
            DamagedIndexError: if the base's postings of the term do not check out.
        """
        seqs, counts = self._base(term)
        removed = self.removed
        out = dict(zip(seqs, counts, strict=True)) if not removed else {}
        if removed:
            for seq, tf in zip(seqs, counts, strict=True):
                if seq not in removed:
                    out[seq] = tf
        for seq in self.added_by_term.get(term, ()):
            out[seq] = self.added[seq][term]
        return out

    def matches(
        self, terms: Sequence[str], among: set[int] | None = None
    ) -> tuple[dict[str, int], list[KeywordMatch]]:
        """Return each query term's document frequency, and the items (of ``among``, if given) holding one.

        Raises:
            DamagedIndexError: if the base's postings of a term do not check out.
        """
        df: dict[str, int] = {}
        held: dict[int, dict[str, int]] = {}
        for term in dict.fromkeys(terms):
            found = self.postings(term)
            df[term] = len(found)
            for seq, tf in found.items():
                if among is None or seq in among:
                    counts = held.get(seq)
                    if counts is None:
                        held[seq] = {term: tf}
                    else:
                        counts[term] = tf
        lengths = self.lengths
        return df, [(seq, lengths[seq], counts) for seq, counts in held.items()]

    # -- following the log ---------------------------------------------------------------

    def _drop(self, seq: int) -> None:
        length = self.lengths.pop(seq, None)
        if length is None:
            return
        self.total -= length
        counts = self.added.pop(seq, None)
        if counts is None:
            self.removed.add(seq)  # its base postings are stale from now on
        else:
            for term in counts:
                self.added_by_term[term].discard(seq)

    def _put(self, seq: int, terms: tuple[str, int]) -> None:
        self._drop(seq)
        text, length = terms
        counts = dict(Counter(text.split(" "))) if length else {}
        self.added[seq] = counts
        for term in counts:
            self.added_by_term.setdefault(term, set()).add(seq)
        self.lengths[seq] = length
        self.total += length
        self.unsaved += 1

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
                (term, self.postings(term)) for term in set(self.vocab) | set(self.added_by_term)
            )
            found = [(term, list(p), list(p.values())) for term, p in parts if p]
            widths = (widths[0], _width(max((max(c) for _, _, c in found), default=1)))
            vocab, blob = _pack(found, widths)
        else:
            vocab, blob = self._appended(self.widths)
            widths = self.widths
        index = KeywordIndex(self.header, self.offset, dict(self.lengths), vocab, blob, widths)
        index.unsaved, index.file_stale = self.unsaved, self.file_stale
        return index

    def _appended(self, widths: tuple[int, int]) -> tuple[dict[str, list[int]], bytes]:
        """Pack the base with the added items' postings after each term's (nothing removed): the base's bytes are copied."""
        vocab: dict[str, list[int]] = {}
        parts: list[bytes] = []
        at = 0
        seq_code, tf_code = _POSTING_CODES[widths[0]], _POSTING_CODES[widths[1]]
        for term in dict.fromkeys([*self.vocab, *self.added_by_term]):
            seq_bytes, count_bytes = self._slice(term)
            more = sorted(self.added_by_term.get(term, ()))
            if more:
                seq_bytes += array(seq_code, more).tobytes()
                count_bytes += array(tf_code, [self.added[seq][term] for seq in more]).tobytes()
            if not seq_bytes:
                continue
            part = seq_bytes + count_bytes
            vocab[term] = [at, len(seq_bytes) // widths[0], zlib.crc32(part)]
            parts.append(part)
            at += len(part)
        return vocab, b"".join(parts)

    def to_bytes(self, tail: bytes) -> list[bytes]:
        """Return the file of a packed index (:meth:`packed`), ``tail`` being the log's bytes just before :attr:`offset`."""
        assert not self.added
        assert not self.removed
        seqs = list(self.lengths)
        width = _width(max(seqs, default=0))
        lengths_part = (
            array(_POSTING_CODES[width], seqs).tobytes()
            + array(_POSTING_CODES[4], self.lengths.values()).tobytes()
        )
        vocab_part = orjson.dumps(self.vocab)
        head = {
            "format": FORMAT,
            "version": _VERSION,
            "byteorder": sys.byteorder,
            "log": hashlib.blake2b(self.header).hexdigest(),
            "offset": self.offset,
            "tail": hashlib.blake2b(tail).hexdigest(),
            "items": len(seqs),
            "seq_width": width,
            "widths": list(self.widths),
            "vocab": [len(vocab_part), zlib.crc32(vocab_part)],
            "lengths": [len(lengths_part), zlib.crc32(lengths_part)],
            "postings": len(self.blob),
        }
        return [orjson.dumps(head) + b"\n", vocab_part, lengths_part, self.blob]


def _pack(
    postings: Iterable[tuple[str, Sequence[int], Sequence[int]]], widths: tuple[int, int]
) -> tuple[dict[str, list[int]], bytes]:
    """Return the vocabulary and postings bytes of ``(term, seqs, counts)``."""
    vocab: dict[str, list[int]] = {}
    parts: list[bytes] = []
    at = 0
    seq_code, tf_code = _POSTING_CODES[widths[0]], _POSTING_CODES[widths[1]]
    for term, seqs, counts in postings:
        part = array(seq_code, seqs).tobytes() + array(tf_code, counts).tobytes()
        vocab[term] = [at, len(seqs), zlib.crc32(part)]
        parts.append(part)
        at += len(part)
    return vocab, b"".join(parts)


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
        vocab, blob = _pack(((t, s, counts_of[t]) for t, s in seqs_of.items()), widths)
    index = KeywordIndex(log.header, log.offset, lengths, vocab, blob, widths)
    index.file_stale = True
    return index


def load(data: bytes, log: SessionLog, read_log: Callable[[int, int], bytes]) -> KeywordIndex:
    """Return the index a file holds, if it covers a prefix of the log ``log`` views.

    ``read_log(start, end)`` returns the log file's bytes in that range.
    Every byte is checked before it is used; the postings of each term
    when it is first asked for (:meth:`KeywordIndex.postings`).

    Raises:
        DamagedIndexError: if the file is not an index of this log, or is damaged.
    """
    try:
        end = data.find(b"\n", 0, _HEADER_MAX)
        if end < 0:
            raise DamagedIndexError("no header line")
        head = orjson.loads(data[:end])
        if type(head) is not dict or head.get("format") != FORMAT:
            raise DamagedIndexError("not a keyword index")
        offset, items, seq_width = head["offset"], head["items"], head["seq_width"]
        widths, vocab_at, lengths_at, postings = (
            head["widths"],
            head["vocab"],
            head["lengths"],
            head["postings"],
        )
        if not (
            head.get("version") == _VERSION
            and head.get("byteorder") == sys.byteorder
            and head.get("log") == hashlib.blake2b(log.header).hexdigest()
            and all(type(x) is int and x >= 0 for x in (offset, items, postings))
            and len(log.header) <= offset <= log.offset
            and seq_width in _POSTING_CODES
            and type(widths) is list
            and len(widths) == 2
            and all(w in _POSTING_CODES and type(w) is int for w in widths)
            and type(vocab_at) is list
            and type(lengths_at) is list
            and len(vocab_at) == 2
            and len(lengths_at) == 2
            and all(type(x) is int and x >= 0 for x in (*vocab_at, *lengths_at))
            and lengths_at[0] == items * (seq_width + 4)
            and end + 1 + vocab_at[0] + lengths_at[0] + postings == len(data)
        ):
            raise DamagedIndexError("header")
        if hashlib.blake2b(read_log(max(0, offset - _TAIL), offset)).hexdigest() != head["tail"]:
            raise DamagedIndexError("another log")
        at = end + 1
        vocab_part = data[at : at + vocab_at[0]]
        at += vocab_at[0]
        lengths_part = data[at : at + lengths_at[0]]
        at += lengths_at[0]
        if zlib.crc32(vocab_part) != vocab_at[1] or zlib.crc32(lengths_part) != lengths_at[1]:
            raise DamagedIndexError("checksum")
        vocab = orjson.loads(vocab_part)
        if type(vocab) is not dict:
            raise DamagedIndexError("vocabulary")
        seqs: array[int] = array(_POSTING_CODES[seq_width])
        seqs.frombytes(lengths_part[: items * seq_width])
        counts: array[int] = array(_POSTING_CODES[4])
        counts.frombytes(lengths_part[items * seq_width :])
        lengths = dict(zip(seqs, counts, strict=True))
        if len(lengths) != items:
            raise DamagedIndexError("lengths")
        index = KeywordIndex(log.header, offset, lengths, vocab, data[at:], (widths[0], widths[1]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, DamagedIndexError):
            raise
        raise DamagedIndexError(str(exc)) from exc
    return index


def rank_together(
    indexes: Sequence[KeywordIndex], terms: Sequence[str], k: int
) -> list[tuple[float, int, int]]:
    """Return the ``k`` best ``(score, index number, seq)`` by BM25 over several sessions as one corpus.

    The statistics are the sessions' summed; ties go by index number, then seq.

    Raises:
        DamagedIndexError: if the postings of a term do not check out.
    """
    n_items = sum(len(index.lengths) for index in indexes)
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
    n_items = len(index.lengths)
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
        due = index.unsaved >= max(SAVE_EVERY, len(index.lengths) // 64)
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
        except OSError:
            return None  # missing, a link or unreadable: built again
        try:
            with os.fdopen(fd, "rb") as stream:
                data = stream.read()
            return load(data, log, lambda start, end: _read_range(log_path, start, end))
        except (OSError, DamagedIndexError):
            return None

    def _save(self, session_id: str, index: KeywordIndex, log_path: str) -> None:
        packed = index.packed()
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
        out = []
        while start < end:
            got = os.pread(fd, end - start, start)
            if not got:
                break
            out.append(got)
            start += len(got)
        return b"".join(out)
    finally:
        os.close(fd)
