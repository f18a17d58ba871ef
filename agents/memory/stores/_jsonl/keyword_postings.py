"""Packed postings of a keyword index: each term's seqs and counts as native unsigned arrays, checked when read.

The shared parts of :mod:`agents.memory.stores._jsonl.keyword_index` (which
holds them) and :mod:`agents.memory.stores._jsonl.keyword_file` (which
writes and reads them): :class:`Base`, the terms (sorted), each one's
``(start, count, crc)`` and the bytes they point into, in memory or read
from an open file when a term is first asked for.
"""

from __future__ import annotations

import bisect
import itertools
import os
import weakref
import zlib
from array import array
from collections.abc import Iterable, Sequence
from typing import Final

from agents.memory.stores._jsonl.files import pread

__all__ = [
    "POSTING_CODES",
    "Base",
    "DamagedIndexError",
    "StoredOffsets",
    "ints",
    "pack",
    "width",
]


class DamagedIndexError(Exception):
    """A keyword index file that is not one, or whose bytes do not check out (it is then rebuilt)."""


def _code(size: int) -> str:
    """Return the array type code of unsigned ints of ``size`` bytes on this platform."""
    return next(code for code in "HILQ" if array(code).itemsize == size)


POSTING_CODES: Final = {2: _code(2), 4: _code(4), 8: _code(8)}


def ints(view: memoryview, size: int) -> memoryview[int]:
    """Return the bytes of ``view`` as native unsigned ints of ``size`` bytes, not copied."""
    # One of the int codes, which mypy cannot tell from a str.
    cast: memoryview[int] = view.cast(POSTING_CODES[size])  # type: ignore[call-overload]
    return cast


def width(largest: int) -> int:
    """Return the byte width of unsigned ints that hold every value up to ``largest``."""
    return 2 if largest < 1 << 16 else 4 if largest < 1 << 32 else 8


class Base:
    """Packed postings: the terms (sorted), each one's ``(start, count, crc)``, and the bytes they point into.

    The bytes are in memory (``data``) or read when asked from an open
    file (``fd``, from ``at``), which this object closes when it goes.
    """

    def __init__(
        self,
        terms: Sequence[str],
        entries: array[int] | memoryview[int],
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
        return pread(self._fd, self._at + start, self._at + end)

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


class StoredOffsets:
    """The record offsets of a file's items, in the order of their seqs (``seqs``, ascending), each read from the file when asked.

    They are not checked here (they carry no CRC): each is checked where it
    is used, against the record it points at. This object reads from its
    own duplicate of ``fd`` (from ``at``), which it closes when it goes.
    """

    def __init__(self, seqs: Sequence[int], fd: int, at: int) -> None:
        self.seqs = seqs
        self._fd = os.dup(fd)
        self._at = at
        weakref.finalize(self, os.close, self._fd)

    def get(self, seq: int) -> int | None:
        """Return item ``seq``'s record offset (``None``: no item of the file).

        Raises:
            DamagedIndexError: if the file was cut short.
        """
        number = bisect.bisect_left(self.seqs, seq)
        if number == len(self.seqs) or self.seqs[number] != seq:
            return None
        got = pread(self._fd, self._at + 8 * number, self._at + 8 * number + 8)
        if len(got) != 8:
            raise DamagedIndexError("record offsets")
        return int(array(POSTING_CODES[8], got)[0])

    def every(self) -> dict[int, int]:
        """Return every item's record offset, by seq.

        Raises:
            DamagedIndexError: if the file was cut short.
        """
        got = pread(self._fd, self._at, self._at + 8 * len(self.seqs))
        if len(got) != 8 * len(self.seqs):
            raise DamagedIndexError("record offsets")
        return dict(zip(self.seqs, array(POSTING_CODES[8], got), strict=True))


def pack(
    postings: Iterable[tuple[str, Sequence[int], Sequence[int]]], widths: tuple[int, int]
) -> Base:
    """Return the packed postings of ``(term, seqs, counts)``."""
    terms: list[str] = []
    entries: array[int] = array(POSTING_CODES[8])
    parts: list[bytes] = []
    at = 0
    seq_code, tf_code = POSTING_CODES[widths[0]], POSTING_CODES[widths[1]]
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
