"""A keyword snapshot: a session's postings saved beside a store, for the first query of a ``Memory`` read from it.

A plain ``Memory`` read whole (``Store.read_memory``) answers its first
keyword query from the terms the store keeps for each row (SQLite), which
means finding the query's words among every word of the session (at
100,000 steps 80-125 ms of CPU, 25-40x a warm query). A snapshot holds, for
every term of the session, the places of the rows holding it and how many
times each does, and each row's number of terms: the first query reads
the query words' postings and ranks them (:func:`ranked_postings`, the
floats of the memory's own index) in a few milliseconds.

It is a cache, never trusted: its header names a digest of the rows it
was made from (their seqs and kept terms, in seq order) and a digest of
its body. :func:`load` takes it only where the body checks out and the
first rows read now are those it was made from; rows appended since are
caught up from their kept terms; any other change (a row updated or
deleted, by any handle or process), a damaged or foreign file, and the
snapshot is not used: the memory scans the kept terms as without it.

A save counts the postings in numpy where it is installed
(:func:`_numpy_parts`: no Python object a term; at 100,000 steps about
half the CPU of the Python count, more on an idle machine), else in
Python; the bytes are the same. An SQLite handle saves the snapshots of
the sessions it wrote as it closes (``agents.memory.stores._sqlite.snapshots``).

The file: :data:`MAGIC`, the rows' digest (20 bytes), the body's digest
(20 bytes), then the body: the number of rows and of terms and the length
of the terms' text (three little-endian u64), the terms joined by
newlines (padded to 8 bytes), each term's start in the postings (u64,
one more than the terms), each row's number of terms (u32), and the
postings: every term's places (u32), then every term's counts (u32).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import sys
import tempfile
import time
from array import array
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from agents.memory.search._scan import kept_terms_joined, ranked_postings

__all__ = [
    "MAGIC",
    "KeywordSnapshot",
    "load",
    "read_snapshot",
    "save_snapshot",
    "saved_rows",
    "snapshot_bytes",
    "write_snapshot",
]

MAGIC: Final = b"kvmkwsn1"
_DIGEST: Final = 20  # sha1
_HEAD: Final = struct.Struct("<QQQ")
_START: Final = len(MAGIC) + 2 * _DIGEST
# Rows appended after the save that a read catches up (tens of microseconds a row, in Python),
# beyond a fiftieth of the rows saved: further behind, the kept terms' scan costs less.
_BEHIND: Final = 1_000


class _Malformed(Exception):
    """A snapshot's body holds what no save writes (the read does not take it)."""


def _rows_digest(seqs: Sequence[int], terms: Sequence[str]) -> bytes | None:
    """Return the digest of the rows ``seqs`` with their kept ``terms``, or ``None`` where the terms cannot be joined (see ``kept_terms_joined``)."""
    joined = kept_terms_joined(terms)
    return None if joined is None else _joined_digest(seqs, joined)


def _joined_digest(seqs: Sequence[int], joined: bytes) -> bytes:
    """Return the digest of the rows ``seqs`` whose kept terms ``kept_terms_joined`` joined as ``joined``."""
    digest = hashlib.sha1(struct.pack("<Q", len(seqs)), usedforsecurity=False)
    digest.update(_little("q", seqs))
    digest.update(joined)
    return digest.digest()


def _little(code: str, values: Sequence[int]) -> bytes:
    """Return ``values`` as little-endian integers of the ``array`` type ``code``."""
    packed = array(code, values)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def _postings(
    terms: Sequence[str], first: int = 0
) -> tuple[list[int], dict[str, tuple[list[int], list[int]]]]:
    """Return each row's number of terms and every term's places (from ``first``) and counts, from the rows' kept terms."""
    lengths = []
    postings: dict[str, tuple[list[int], list[int]]] = {}
    for place, kept in enumerate(terms, first):
        words = kept.split(" ") if kept else []
        lengths.append(len(words))
        for word, count in Counter(words).items():
            posting = postings.get(word)
            if posting is None:
                posting = postings[word] = ([], [])
            posting[0].append(place)
            posting[1].append(count)
    return lengths, postings


# The parts of a snapshot's body after its head: the terms in order, then (as little-endian
# bytes) each term's start in the postings, each row's length, the places and the counts.
_Parts = tuple[
    list[str], bytes | memoryview, bytes | memoryview, bytes | memoryview, bytes | memoryview
]


def _python_parts(terms: Sequence[str]) -> _Parts | None:
    """Return the body's parts from the rows' kept ``terms``, in Python, or ``None`` for an empty term (``"a  b"``)."""
    lengths, postings = _postings(terms)
    words = sorted(postings)
    if any(not word for word in words):
        return None
    starts = [0]
    places: list[int] = []
    counts: list[int] = []
    for word in words:
        at, many = postings[word]
        places.extend(at)
        counts.extend(many)
        starts.append(len(places))
    return (
        words,
        _little("Q", starts),
        _little("I", lengths),
        _little("I", places),
        _little("I", counts),
    )


# Rows whose terms the numpy save takes at once: its arrays (about 110 terms a row, 8 bytes
# each) stay in a core's cache. Over the whole session at once, every pass reads and writes
# memory: at 100,000 steps 4.1 s of CPU on a loaded machine, no faster than the Python save.
_CHUNK: Final = 2_048
_ALL: Final = 2**64 - 1


def _numpy_parts(np: Any, terms: Sequence[str]) -> _Parts | None:
    """Return :func:`_python_parts`'s parts, byte for byte, from arrays: no Python object a term.

    Each chunk of rows is joined as ``kept_terms_joined`` joins them (a
    NUL word after each row's terms); a term of up to 8 bytes is the
    number its bytes make (exact: no term holds a NUL, so a shorter one's
    zero bytes after it tell it apart), and the few longer ones are read
    as bytes. The session's terms are those numbers' (found by one sort)
    and those bytes', sorted as text; every term's posting then is the
    run of its (term, row) pairs, sorted as one 64-bit number each. The
    caller has checked that the terms can be joined.
    """
    u64 = np.uint64
    masks = np.array([_ALL >> (64 - 8 * size) if size else 0 for size in range(9)], dtype=u64)
    keys: list[Any] = []  # each chunk's terms as numbers (0: a row's end, or a long term)
    rows: list[Any] = []  # the row of each
    ends: list[Any] = []  # where each row of a chunk ends among its terms
    longs: list[bytes] = []  # the terms of over 8 bytes, in order
    long_at: list[Any] = []  # their places among all the terms
    seen: list[Any] = []  # each chunk's numbers, once each
    n_tokens = 0
    for first in range(0, len(terms), _CHUNK):
        chunk = terms[first : first + _CHUNK]
        empty = chunk.count("")
        data = (" " + " \x00 ".join(chunk) + " \x00 ").encode()
        # An empty term ("a  b", " a") makes spaces no row without terms accounts for.
        if data.count(b"  ") != empty or b"   " in data:
            return None
        codes = np.frombuffer(data, dtype=np.uint8)
        spaces = np.flatnonzero(codes == 32)
        start = spaces[:-1] + 1
        length = spaces[1:] - start
        if empty:
            held = np.flatnonzero(length)
            start, length = start[held], length[held]
        padded = data + bytes(8)
        wide = np.ndarray((len(data),), dtype="<u8", buffer=padded, strides=(1,))
        key = wide[start]
        key &= masks[np.minimum(length, 8)]  # a term's bytes, not those after it
        end = np.flatnonzero(key == 0)  # the NUL word after each row's terms
        if len(end) != len(chunk):
            return None
        long = np.flatnonzero(length > 8)
        if len(long):
            tails = (start[long] + length[long]).tolist()
            longs.extend(
                data[at:tail] for at, tail in zip(start[long].tolist(), tails, strict=True)
            )
            long_at.append(long + n_tokens)
            key[long] = 0  # not a term of up to 8 bytes; named after the sort, by its bytes
        row = np.zeros(len(key), dtype=np.int64)
        row[end[:-1] + 1] = 1
        np.cumsum(row, out=row)
        row += first
        keys.append(key)
        rows.append(row)
        ends.append(end)
        ordered = np.sort(key)  # (a sort: several times np.unique's hashing here)
        step = np.empty(len(ordered), dtype=bool)
        step[:1] = True
        np.not_equal(ordered[1:], ordered[:-1], out=step[1:])
        seen.append(ordered[step])
        n_tokens += len(key)
    known = np.unique(np.concatenate((np.zeros(1, dtype=u64), *seen)))
    lookup = _Lookup(np, known)
    long_terms = dict.fromkeys(longs)
    # The terms: "" (the rows' ends and the long terms' place) first, then the short ones, the long.
    names = [""]
    names += [key.to_bytes(8, "little").rstrip(b"\x00").decode() for key in known[1:].tolist()]
    names += [word.decode() for word in long_terms]
    order = sorted(range(1, len(names)), key=names.__getitem__)
    rank = np.zeros(len(names), dtype=np.int64)
    rank[np.array(order, dtype=np.int64)] = np.arange(1, len(names), dtype=np.int64)
    # Each (term, row) pair as one number: the term's rank above, the row below.
    every = np.empty(n_tokens, dtype=np.int64)
    numbered = {word: at for at, word in enumerate(long_terms, len(known))}
    long_ids = np.fromiter(map(numbered.__getitem__, longs), dtype=np.int64, count=len(longs))
    at_long = np.concatenate(long_at) if long_at else np.zeros(0, dtype=np.int64)
    done = 0
    for key, row in zip(keys, rows, strict=True):
        ids = lookup.ids(key)
        mine = slice(*np.searchsorted(at_long, (done, done + len(key))))
        ids[at_long[mine] - done] = long_ids[mine]
        pair = every[done : done + len(key)]
        np.take(rank, ids, out=pair)
        pair <<= 32
        pair |= row
        done += len(key)
    del keys, rows
    every.sort()
    every = every[len(terms) :]  # the rows' ends: rank 0
    new = np.empty(len(every), dtype=bool)
    new[:1] = True
    np.not_equal(every[1:], every[:-1], out=new[1:])
    firsts = np.flatnonzero(new)
    counts = np.empty(len(firsts), dtype="<u4")
    np.subtract(firsts[1:], firsts[:-1], out=counts[:-1], casting="unsafe")
    counts[-1:] = len(every) - firsts[-1:]
    every = every[firsts]
    places = every.astype("<u4")  # the low 32 bits: the row
    every >>= 32
    starts = np.searchsorted(every, np.arange(1, len(names) + 1)).astype("<u8")
    lengths = np.concatenate([np.diff(end, prepend=-1) - 1 for end in ends]) if ends else []
    return (
        [names[at] for at in order],
        starts.data,
        np.ascontiguousarray(lengths, dtype="<u4").data,
        places.data,
        counts.data,
    )


class _Lookup:
    """The place of each of a sorted array's numbers: a table by hash, a binary search where two share a slot.

    ``np.searchsorted`` over 60,000 terms costs ~80 ns a term read (the
    save's most); the table, one multiply and two reads.
    """

    _BITS: Final = 20  # 1M slots (4 MB) for tens of thousands of terms: few share one

    def __init__(self, np: Any, known: Any) -> None:
        self._np = np
        self._known = known
        self._mult = np.uint64(0x9E3779B97F4A7C15)  # odd: a multiply-shift hash
        slots = self._slot(known)
        table = np.full(1 << self._BITS, -1, dtype=np.int64)
        table[slots] = np.arange(len(known), dtype=np.int64)
        shared = np.bincount(slots, minlength=1 << self._BITS) > 1
        table[shared] = -1  # two numbers' slot: they are searched
        self._table = table

    def _slot(self, keys: Any) -> Any:
        np = self._np
        slot = keys * self._mult
        slot >>= np.uint64(64 - self._BITS)
        return slot.astype(np.intp)

    def ids(self, keys: Any) -> Any:
        """Return each of ``keys``' place among the known numbers (every key must be one)."""
        np = self._np
        ids = self._table[self._slot(keys)]
        missed = np.flatnonzero(ids < 0)
        if len(missed):
            ids[missed] = np.searchsorted(self._known, keys[missed])
        return ids


def _numpy_parts_or_none(terms: Sequence[str]) -> _Parts | None:
    """Return :func:`_numpy_parts`'s parts, or ``None`` without numpy."""
    try:
        import numpy as np  # optional: without it, the postings are counted in Python
    except ImportError:
        return None
    return _numpy_parts(np, terms)


def snapshot_bytes(
    seqs: Sequence[int], terms: Sequence[str], *, use_numpy: bool = True
) -> bytes | None:
    """Return the snapshot of the rows ``seqs`` (ascending) with their kept ``terms``, or ``None`` where they cannot be snapshot (terms a scan would not take, or more rows than a u32 counts).

    With numpy (unless ``use_numpy`` is false) the postings are counted
    in arrays (:func:`_numpy_parts`: at 100,000 steps ~4x faster), else
    in Python; the bytes are the same.
    """
    joined = kept_terms_joined(terms)
    if joined is None or len(seqs) >= 2**32 or list(seqs) != sorted(set(seqs)):
        return None
    digest = _joined_digest(seqs, joined)
    del joined
    parts = _numpy_parts_or_none(terms) if use_numpy else None
    if parts is None:
        parts = _python_parts(terms)
    if parts is None:
        return None
    words, starts, lengths, places, counts = parts
    text = "\n".join(words).encode()
    text += b"\x00" * (-len(text) % 8)
    body = b"".join(
        (_HEAD.pack(len(seqs), len(words), len(text)), text, starts, lengths, places, counts)
    )
    return MAGIC + digest + hashlib.sha1(body, usedforsecurity=False).digest() + body


_TEMPORARY: Final = ".snapshot-"  # the prefix of a save's file until it is renamed in place
_LEFT: Final = 3600.0  # seconds after which a save's file not renamed was left by a killed save


def write_snapshot(path: str, data: bytes | Sequence[bytes | memoryview]) -> None:
    """Write ``data`` (bytes, or pieces of it written one after the other) to ``path`` whole or not at all (a file beside it, then renamed over it), making its folder (0700: the file, 0600, holds the session's words or vectors).

    A save's file that a killed process left beside it (never read: only
    a renamed file is) is removed once an hour old.

    Raises:
        OSError: if the folder or the file cannot be written.
    """
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    _remove_left(folder)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=_TEMPORARY)
    try:
        with os.fdopen(fd, "wb") as out:
            for piece in [data] if isinstance(data, bytes) else data:
                out.write(piece)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _remove_left(folder: str) -> None:
    """Remove the files of saves that were never renamed in place and are over an hour old (their process was killed)."""
    try:
        names = [name for name in os.listdir(folder) if name.startswith(_TEMPORARY)]
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to remove
            if time.time() - os.stat(path).st_mtime > _LEFT:
                os.unlink(path)


def save_snapshot(path: str, rows: Sequence[tuple[int, Any, str]] | None) -> bool:
    """Save the snapshot of ``rows`` (``(seq, data, kept terms)`` in seq order, as ``Backend.read_rows_terms`` gives them) to ``path``; return whether one was saved.

    ``False`` (nothing written) where the rows cannot be snapshot (see
    :func:`snapshot_bytes`) or ``rows`` is ``None`` (no terms kept).

    Raises:
        OSError: if the file cannot be written (see :func:`write_snapshot`).
    """
    if rows is None:
        return False
    data = snapshot_bytes([row[0] for row in rows], [row[2] for row in rows])
    if data is None:
        return False
    write_snapshot(path, data)
    return True


def saved_rows(path: str) -> int | None:
    """Return how many rows the snapshot at ``path`` says it holds (its head alone, unchecked), or ``None`` where there is no file that starts as one."""
    try:
        with open(path, "rb") as snapshot:
            head = snapshot.read(_START + 8)
    except OSError:
        return None
    if len(head) < _START + 8 or head[: len(MAGIC)] != MAGIC:
        return None
    return int(struct.unpack_from("<Q", head, _START)[0])


class KeywordSnapshot:
    """The postings of a session's rows as read (a ``SearchIndex`` ``RankingSource``): ``(place, score)`` of the best rows for a query's terms.

    Made by :func:`load`. ``place`` is the row's among the rows read.
    """

    def __init__(
        self,
        np: Any,
        words: dict[str, int],
        starts: Any,
        lengths: Any,
        places: Any,
        counts: Any,
        tail: dict[str, tuple[list[int], list[int]]],
    ) -> None:
        self._np = np
        self._words = words
        self._starts = starts
        self._lengths = lengths
        self._total = int(lengths.sum())
        self._places = places
        self._counts = counts
        self._tail = tail  # the postings of the rows appended after the snapshot was made
        self._rows = np.arange(len(lengths), dtype=np.int64)

    def posting(self, term: str) -> tuple[Any, Any] | None:
        """Return the places of the rows holding ``term`` (ascending) and how many times each does, or ``None`` for a term none holds."""
        np = self._np
        at = self._words.get(term)
        tail = self._tail.get(term)
        if at is None:
            if tail is None:
                return None
            return np.array(tail[0], dtype=np.int64), np.array(tail[1], dtype=np.int64)
        start, end = int(self._starts[at]), int(self._starts[at + 1])
        places, counts = self._places[start:end], self._counts[start:end]
        if tail is not None:
            places = np.concatenate((places, np.array(tail[0], dtype=places.dtype)))
            counts = np.concatenate((counts, np.array(tail[1], dtype=counts.dtype)))
        return places, counts

    def __call__(self, terms: Sequence[str], k: int) -> list[tuple[int, float]]:
        """Return ``(place, score)`` of the ``k`` best rows for the query ``terms``, best first, ties by place (``Memory.search``'s floats)."""
        lengths = self._lengths
        return ranked_postings(
            self._np, self.posting, self._rows, lengths, self._total, terms, len(lengths), k
        )


def read_snapshot(
    path: str | None, seqs: Sequence[int], terms: Sequence[str]
) -> KeywordSnapshot | None:
    """Return the snapshot kept at ``path`` for the rows read now (:func:`load`), or ``None`` where there is none, it cannot be read or it does not vouch for them."""
    if path is None:
        return None
    try:
        with open(path, "rb") as snapshot:
            data = snapshot.read()
    except OSError:  # none kept, or unreadable: the memory scans the kept terms
        return None
    return load(data, seqs, terms)


def load(data: bytes, seqs: Sequence[int], terms: Sequence[str]) -> KeywordSnapshot | None:
    """Return the snapshot in ``data`` for the rows read now (``seqs`` ascending, their kept ``terms``), or ``None`` where it cannot vouch for them.

    ``None`` without numpy, for a file that is not a snapshot or whose
    body does not match its digest, where the first rows read now are
    not the rows it was made from (a row updated or deleted since, or
    another session's file), and where more than ``_BEHIND`` rows and a
    fiftieth of those were appended since. Rows after those are caught up
    from their terms.
    """
    try:
        import numpy as np  # optional: without it, the memory scans the kept terms
    except ImportError:
        return None
    if len(data) < _START + _HEAD.size or data[: len(MAGIC)] != MAGIC:
        return None
    digest, body = data[len(MAGIC) : len(MAGIC) + _DIGEST], memoryview(data)[_START:]
    if hashlib.sha1(body, usedforsecurity=False).digest() != data[len(MAGIC) + _DIGEST : _START]:
        return None
    n_rows, n_words, n_text = _HEAD.unpack_from(body)
    if (
        n_rows > len(seqs)
        or len(seqs) - n_rows > _BEHIND + n_rows // 50
        or _rows_digest(seqs[:n_rows], terms[:n_rows]) != digest
    ):
        return None
    try:
        return _parsed(np, body, n_rows, n_words, n_text, terms)
    except (
        _Malformed,
        ValueError,
        UnicodeDecodeError,
    ):  # postings not as written, sizes past the body
        return None


def _parsed(
    np: Any, body: memoryview, n_rows: int, n_words: int, n_text: int, terms: Sequence[str]
) -> KeywordSnapshot:
    """Return the snapshot of a checked ``body`` (see :func:`load`), the rows after its ``n_rows`` caught up from their ``terms``."""
    at = _HEAD.size
    words = bytes(body[at : at + n_text]).rstrip(b"\x00").decode().split("\n") if n_words else []
    if len(words) != n_words:
        raise _Malformed("the terms' count")
    at += n_text
    starts = np.frombuffer(body, dtype="<u8", count=n_words + 1, offset=at)
    at += 8 * (n_words + 1)
    lengths = np.frombuffer(body, dtype="<u4", count=n_rows, offset=at)
    at += 4 * n_rows
    n_postings = int(starts[-1])
    places = np.frombuffer(body, dtype="<u4", count=n_postings, offset=at)
    counts = np.frombuffer(body, dtype="<u4", count=n_postings, offset=at + 4 * n_postings)
    _check_postings(np, starts, lengths, places, counts)
    more, tail = _postings(terms[n_rows:], n_rows)
    lengths = np.concatenate((lengths.astype(np.int64), np.array(more, dtype=np.int64)))
    indexed = dict(zip(words, range(len(words)), strict=True))
    return KeywordSnapshot(np, indexed, starts, lengths, places, counts, tail)


def _check_postings(np: Any, starts: Any, lengths: Any, places: Any, counts: Any) -> None:
    """Raise :class:`_Malformed` unless the postings are such as :func:`snapshot_bytes` writes, whatever the digests say (a file is untrusted: one made to match them must not break or bend a query).

    Each term's places lie among the rows and ascend (no row twice), each
    count is at least one, and the counts sum to the rows' lengths: ~12 ms
    for 8 million postings, against the body's digest's ~60.
    """
    n_postings = len(places)
    if int(starts[0]) != 0 or not bool((starts[1:] >= starts[:-1]).all()):
        raise _Malformed("the terms' starts")
    if not n_postings:
        return
    if int(places.max()) >= len(lengths) or int(counts.min()) < 1:
        raise _Malformed("a place past the rows, or a count of none")
    if int(counts.sum(dtype=np.uint64)) != int(lengths.sum(dtype=np.uint64)):
        raise _Malformed("the counts against the rows' lengths")
    rising = places[1:] > places[:-1]
    # Where a term's places begin, they need not rise over the last term's.
    begins = starts[1:-1].astype(np.int64) - 1
    rising[begins[(begins >= 0) & (begins < n_postings - 1)]] = True
    if not bool(rising.all()):
        raise _Malformed("a term's places do not ascend")
