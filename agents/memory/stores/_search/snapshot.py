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
from array import array
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from agents.memory.search._scan import kept_terms_joined, ranked_postings

__all__ = ["MAGIC", "KeywordSnapshot", "load", "read_snapshot", "snapshot_bytes", "write_snapshot"]

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
    if joined is None:
        return None
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


def snapshot_bytes(seqs: Sequence[int], terms: Sequence[str]) -> bytes | None:
    """Return the snapshot of the rows ``seqs`` (ascending) with their kept ``terms``, or ``None`` where they cannot be snapshot (terms a scan would not take, or more rows than a u32 counts)."""
    digest = _rows_digest(seqs, terms)
    if digest is None or len(seqs) >= 2**32 or list(seqs) != sorted(set(seqs)):
        return None
    lengths, postings = _postings(terms)
    words = sorted(postings)
    if any("\n" in word or not word for word in words):
        return None
    text = "\n".join(words).encode()
    text += b"\x00" * (-len(text) % 8)
    starts = [0]
    places: list[int] = []
    counts: list[int] = []
    for word in words:
        at, many = postings[word]
        places.extend(at)
        counts.extend(many)
        starts.append(len(places))
    if counts and max(counts) >= 2**32:
        return None
    body = b"".join(
        (
            _HEAD.pack(len(seqs), len(words), len(text)),
            text,
            _little("Q", starts),
            _little("I", lengths),
            _little("I", places),
            _little("I", counts),
        )
    )
    return MAGIC + digest + hashlib.sha1(body, usedforsecurity=False).digest() + body


def write_snapshot(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a file beside it, then renamed over it), making its folder.

    Raises:
        OSError: if the folder or the file cannot be written.
    """
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".snapshot-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


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
