"""The file of a keyword index, ``<session_id>.keywords``: writing it, and reading it back checked.

The file: a JSON header line (sizes and CRC-32s of the parts), the terms
(sorted, one a line), each term's ``(start, count, crc)`` in the postings,
the items' seqs (ascending) and lengths, the postings (each term's seqs,
ascending, then its counts), and each item's record offset in the log
(where the record of its current bytes starts, in the order of the seqs:
version 2; a version 1 file, without them, is built again), all as native
unsigned arrays. The offsets are read one by one when a hit is read, and
carry no CRC: each is checked against the record it points at. The header names
the log's header and the length of the log it covers, with a hash of the
:data:`~agents.memory.stores._jsonl.side_file.TAIL` bytes before that offset
(:mod:`~agents.memory.stores._jsonl.side_file`); :func:`load` checks every byte before
it is used, and a file that does not check out raises
:class:`~agents.memory.stores._jsonl.keyword_postings.DamagedIndexError`.
"""

from __future__ import annotations

import itertools
import os
import zlib
from array import array
from collections.abc import Callable, Sequence
from typing import Final, overload

import orjson

from agents.memory.stores._jsonl import side_file
from agents.memory.stores._jsonl.files import pread
from agents.memory.stores._jsonl.keyword_index import KeywordIndex, numpy_module
from agents.memory.stores._jsonl.keyword_postings import (
    POSTING_CODES,
    Base,
    DamagedIndexError,
    StoredOffsets,
    ints,
    width,
)

__all__ = ["FORMAT", "file_bytes", "load"]

FORMAT: Final = "kvmemory.jsonl-keywords"
_VERSION: Final = 2
_HEADER_MAX: Final = 4096


class _Terms(Sequence[str]):
    """The sorted terms of a file, each decoded when looked at (bisection looks at a few)."""

    def __init__(self, data: bytes, starts: Sequence[int]) -> None:
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


def load(
    fd: int, header: bytes, end_of_log: int, read_log: Callable[[int, int], bytes]
) -> KeywordIndex:
    """Return the index an open file holds, if it covers a prefix of the log that starts with ``header`` and is ``end_of_log`` bytes long (as read).

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
        head, end = side_file.read_head(fd, FORMAT, _HEADER_MAX, DamagedIndexError, "keyword index")
        offset, items, n_terms, seq_width = (
            head["offset"],
            head["items"],
            head["terms"],
            head["seq_width"],
        )
        widths, parts, postings = head["widths"], head["parts"], head["postings"]
        if not (
            side_file.native(head, _VERSION)
            and side_file.of_log(head, header, end_of_log)
            and all(type(x) is int and x >= 0 for x in (items, n_terms, postings))
            and seq_width in POSTING_CODES
            and type(widths) is list
            and len(widths) == 2
            and all(w in POSTING_CODES and type(w) is int for w in widths)
            and type(parts) is list
            and len(parts) == 4
            and all(type(part) is list and len(part) == 2 for part in parts)
            and all(type(x) is int and x >= 0 for part in parts for x in part)
            and parts[1][0] == (n_terms + 1) * 4
            and parts[2][0] == n_terms * 3 * 8
            and parts[3][0] == items * (seq_width + 4)
            and end + 1 + sum(part[0] for part in parts) + postings + 8 * items == size
        ):
            raise DamagedIndexError("header")
        if not side_file.same_tail(head, read_log):
            raise DamagedIndexError("another log")
        at = end + 1
        read = memoryview(pread(fd, at, at + sum(part[0] for part in parts)))
        chunks = []
        for length, crc in parts:
            chunk = read[at - end - 1 : at - end - 1 + length]
            if zlib.crc32(chunk) != crc:
                raise DamagedIndexError("checksum")
            chunks.append(chunk)
            at += length
        # The parts are read as they lie in what was read, cast (not copied).
        terms = _Terms(bytes(chunks[0]), ints(chunks[1], 4))
        entries = ints(chunks[2], 8)
        seqs = ints(chunks[3][: items * seq_width], seq_width)
        counts = ints(chunks[3][items * seq_width :], 4)
        offsets = StoredOffsets(seqs, fd, at + postings)
        base = Base(terms, entries, (widths[0], widths[1]), fd=fd, at=at, size=postings)
        np = numpy_module()
        if np is None:
            lengths: dict[int, int] | tuple[Sequence[int], Sequence[int]] = dict(
                zip(seqs, counts, strict=True)
            )
            if any(a >= b for a, b in itertools.pairwise(seqs)):
                raise DamagedIndexError("seqs not ascending")
            index = KeywordIndex(header, offset, lengths, base, offsets)
        else:
            # The file's seqs ascend (checked): numpy's arrays of them come from its bytes.
            dense = np.frombuffer(chunks[3][: items * seq_width], dtype=f"=u{seq_width}")
            if (dense[1:] <= dense[:-1]).any():
                raise DamagedIndexError("seqs not ascending")
            lengths_at = np.frombuffer(chunks[3][items * seq_width :], "=u4")
            total = int(lengths_at.sum(dtype=np.int64))  # summed by numpy, not item by item
            index = KeywordIndex(header, offset, (seqs, counts), base, offsets, total=total)
            index.dense_from(dense.astype(np.int64), lengths_at.astype(np.float64))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError) as exc:
        os.close(fd)
        if isinstance(exc, DamagedIndexError):
            raise
        raise DamagedIndexError(str(exc)) from exc
    except BaseException:
        os.close(fd)
        raise
    return index


def file_bytes(index: KeywordIndex, tail: bytes) -> list[bytes]:
    """Return the file of a packed index (:meth:`KeywordIndex.packed`), ``tail`` being the log's bytes just before :attr:`offset`."""
    assert not index.added
    assert not index.removed
    seqs = sorted(index.lengths)
    seq_width = width(seqs[-1] if seqs else 0)
    lengths_part = (
        array(POSTING_CODES[seq_width], seqs).tobytes()
        + array(POSTING_CODES[4], [index.lengths[seq] for seq in seqs]).tobytes()
    )
    offsets = index.offsets
    base = index.base
    encoded = [term.encode() for term in base.terms]
    terms_part = b"".join(encoded)
    starts: array[int] = array(POSTING_CODES[4], [0])
    starts.extend(itertools.accumulate(map(len, encoded)))
    starts_part = starts.tobytes()
    entries_part = base.entries.tobytes()
    head = {
        **side_file.stamp(FORMAT, _VERSION, index.header, index.offset, tail),
        "items": len(seqs),
        "terms": len(base.terms),
        "seq_width": seq_width,
        "widths": list(index.widths),
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
        array(POSTING_CODES[8], [offsets[seq] for seq in seqs]).tobytes(),
    ]
