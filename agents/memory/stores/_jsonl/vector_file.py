"""The vector file beside a session log, ``<session_id>.vectors``: a fresh handle's semantic query without reading the log.

The vectors of a JSONL session are ``vec`` records inside its log, so a
handle that holds no view of the log would read and parse all of it (100,000
steps: some 150 MB, 2.5 s) before its first semantic query. The file holds
what that query needs of the log as it was up to a byte offset: the vector
model, each live item's seq and the offset of its record (to count the items
and read the hits alone), and, per fields key, the seqs that hold a vector
with each one's float32 bytes, one after the other. A handle maps it
(:func:`load`), follows the records appended to the log since
(:meth:`VectorView.follow`, as reading the log does: a ``u`` or ``del``
record forgets the vectors of its items, ``vdrop`` every vector) and answers
from it (:class:`VectorView`).

The file: a JSON header line (padded to 8 bytes) naming the log's header and
the length of the log it covers, with a hash of the
:data:`~agents.memory.stores._jsonl.side_file.TAIL` bytes before that offset
(:mod:`~agents.memory.stores._jsonl.side_file`), the model, the sizes of the
parts, the bytes of a block and the CRC-32 of the table of sums; then that
table, the sum of each :data:`CHECK_BLOCK` bytes of each part in turn
(:func:`block_sums`, native u8); then the parts, native unsigned arrays:
the live seqs (ascending), their record offsets, and per fields key its
seqs (ascending), each one's vector length in bytes (u8), and the vectors
(padded to 8 bytes).

:func:`load` checks the header, the table of sums and every part but the
vectors, whole; the vectors' blocks are checked as they are first read
(once each per handle): a semantic query that ranks from the coded table
reads a few rows, not the 2.2 GB of vectors of 100,000 steps cut into
parts (whose sums, checked at the load of version 1, cost ~190 ms). It is a
cache, never the source of truth: a file that is not one, is of another
version, is damaged, cut, or of another log or of a log written anew raises
:class:`DamagedVectorFileError` and the log is read whole; so does a
block of vectors that does not check out when it is first read, before
any of its bytes is used (the caller then drops the view and answers from
the log read whole: ``vector_backend``). A record after it that this
module does not follow (a ``clear``, a damaged line) makes
:meth:`VectorView.follow` give up, and the log is read whole as well (its
errors then raised as ever). Deleting the file is always safe.

A file of version 1 (each part's :func:`checksum` in the header, no table
of sums) is read as that version was: every part checked whole at the load
(~340 ms at 100,000 steps), then served as a version 2 one; the view says
so (:attr:`VectorView.outdated`), and a writable handle saves it again in
version 2 from that view, not from the log
(``vector_views.SessionVectors.unviewed``).
"""

from __future__ import annotations

import bisect
import itertools
import mmap
import os
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

import orjson

from agents.memory.exceptions import CorruptSessionError
from agents.memory.stores._jsonl import side_file
from agents.memory.stores._jsonl.keyword_index import numpy_module
from agents.memory.stores._jsonl.keyword_postings import POSTING_CODES, ints
from agents.memory.stores._jsonl.log import SessionLog, model_of, split_item_record, vector_of

__all__ = [
    "CHECK_BLOCK",
    "FORMAT",
    "DamagedVectorFileError",
    "VectorView",
    "block_sums",
    "checksum",
    "covered",
    "file_bytes",
    "load",
]

FORMAT: Final = "kvmemory.jsonl-vectors"
_VERSION: Final = 2
_VERSION_1: Final = 1
"""The layout before :data:`_VERSION`, still read (:func:`load`), never written."""
CHECK_BLOCK: Final = 16384
"""The bytes of a part each sum of the file covers (the last block of a part fewer): a vector first read checks the blocks it lies in, some microseconds each (100,000 steps cut into parts: 22 KB a step, 2.2 GB of vectors, a table of sums of 1 MB)."""
_WORDS: Final = CHECK_BLOCK // 8
_HEADER_MAX: Final = 65536
_U8: Final = POSTING_CODES[8]


class DamagedVectorFileError(Exception):
    """A vector file that is not one, or whose bytes do not check out (the log is then read whole)."""


class _Blocks:
    """A part of the file and the sum of each of its :data:`CHECK_BLOCK` bytes (:func:`block_sums`): each block checked once, when first read (:meth:`check`)."""

    def __init__(self, np: Any, data: memoryview, sums: Any) -> None:
        self._np = np
        self._data = data
        self._sums = sums
        self._checked = bytearray(len(sums))  # 1: checked (a race checks a block twice: harmless)
        self._whole = not len(sums)

    def check(self, begin: int, end: int) -> int:
        """Check the blocks that bytes ``begin`` to ``end`` lie in (those not checked yet); return where the last of them ends (the bytes up to there need no check).

        Raises:
            DamagedVectorFileError: if one does not check out (no byte of it was used).
        """
        if self._whole or begin >= end:
            return len(self._data) if self._whole else end
        first, last = begin // CHECK_BLOCK, (end - 1) // CHECK_BLOCK + 1
        checked = self._checked
        while first < last and checked[first]:
            first += 1
        while last > first and checked[last - 1]:
            last -= 1
        if first < last:
            data = self._data[first * CHECK_BLOCK : last * CHECK_BLOCK]
            if not self._np.array_equal(block_sums(self._np, data), self._sums[first:last]):
                raise DamagedVectorFileError(f"blocks {first} to {last - 1} of a part")
            checked[first:last] = b"\1" * (last - first)
        return min(len(self._data), ((end - 1) // CHECK_BLOCK + 1) * CHECK_BLOCK)

    def whole(self) -> None:
        """Check every block not checked yet (see :meth:`check`)."""
        if not self._whole:
            self.check(0, len(self._data))
            self._whole = True


class _Table:
    """The vectors over one fields key: the file's (seqs ascending, lengths, bytes), and the changes followed since.

    ``blocks`` checks the blocks of ``blob`` (a vector file's part, which
    may run past ``blob``, padded) as a row of it is first read; ``None``:
    bytes trusted already (none of a file, or a version 1 file's, checked
    whole at its load).
    """

    def __init__(
        self,
        seqs: Sequence[int],
        lengths: Sequence[int],
        blob: memoryview,
        blocks: _Blocks | None = None,
    ) -> None:
        self.seqs = seqs
        self.lengths = lengths
        self.blob = blob
        self._blocks = _Blocks(None, blob, ()) if blocks is None else blocks
        self._starts: Sequence[int] | None = None
        self.put: dict[int, bytes] = {}
        self.gone: set[int] = set()
        self.count = len(seqs)

    def _in_file(self, seq: int) -> int | None:
        number = bisect.bisect_left(self.seqs, seq)
        return number if number < len(self.seqs) and self.seqs[number] == seq else None

    def has(self, seq: int) -> bool:
        """Return whether item ``seq`` holds a vector here."""
        return seq in self.put or (seq not in self.gone and self._in_file(seq) is not None)

    def get(self, seq: int) -> bytes | None:
        """Return item ``seq``'s vector bytes (``None``: none).

        Raises:
            DamagedVectorFileError: if the file's block it lies in does not check out.
        """
        if seq in self.put:
            return self.put[seq]
        number = None if seq in self.gone else self._in_file(seq)
        if number is None:
            return None
        if self._starts is None:
            self._starts = _starts_of(self.lengths)
        start, end = int(self._starts[number]), int(self._starts[number + 1])
        self._blocks.check(start, end)
        return bytes(self.blob[start:end])

    def set(self, seq: int, vector: bytes) -> None:
        """Take a ``vec`` record of item ``seq``."""
        if not self.has(seq):
            self.count += 1
        self.put[seq] = vector

    def drop(self, seq: int) -> None:
        """Forget item ``seq``'s vector, if it holds one."""
        if self.has(seq):
            self.count -= 1
            self.put.pop(seq, None)
            self.gone.add(seq)

    def pages(self, size: int) -> Iterator[list[tuple[int, bytes]]]:
        """Return an iterator of the rows ``(seq, vector)`` in seq order, ``size`` at a time, as they are now (changes followed later are not seen).

        The file's rows are read (and their blocks checked) as the pages
        are taken: the first page of a session of any size costs a few rows
        (the key of its coded file). Taking a page raises
        :class:`DamagedVectorFileError` where a block of it does not check
        out (the pages before are sound).
        """
        put, gone = sorted(self.put.items()), set(self.gone)
        if self._starts is None:
            self._starts = _starts_of(self.lengths)
        seqs, starts, blob, blocks = self.seqs, self._starts, self.blob, self._blocks

        def rows() -> Iterator[tuple[int, bytes]]:
            taken = 0
            sound = 0  # the blob's bytes checked up to here
            for number, seq in enumerate(seqs):
                while taken < len(put) and put[taken][0] < seq:
                    yield put[taken]
                    taken += 1
                if seq not in gone and (taken == len(put) or put[taken][0] != seq):
                    start, end = int(starts[number]), int(starts[number + 1])
                    if end > sound:
                        sound = blocks.check(max(start, sound), end)
                    yield seq, bytes(blob[start:end])
            yield from put[taken:]

        def paged() -> Iterator[list[tuple[int, bytes]]]:
            found = rows()
            while page := list(itertools.islice(found, size)):
                yield page

        return paged()

    def block(self) -> tuple[Sequence[int], Sequence[int], bytes | memoryview]:
        """Return the seqs (ascending), each one's vector length and the vectors, one after the other.

        The file's rows are handed over as they lie where nothing changed
        since; else in runs between the rows changed since, each taken
        whole (the changes are few: past some, the file is saved again).

        Raises:
            DamagedVectorFileError: if a block of the file's rows does not check out.
        """
        if not self.put and not self.gone:
            self._blocks.whole()
            return self.seqs, self.lengths, self.blob
        if self._starts is None:
            self._starts = _starts_of(self.lengths)
        starts = self._starts
        dropped = {
            number
            for seq in itertools.chain(self.gone, self.put)
            if (number := self._in_file(seq)) is not None
        }
        puts: dict[int, list[int]] = {}  # the new rows before each row of the file, by seq
        for seq in sorted(self.put):
            puts.setdefault(bisect.bisect_left(self.seqs, seq), []).append(seq)
        seqs: list[bytes] = []
        lengths: list[bytes] = []
        blob: list[bytes | memoryview] = []
        low = 0
        for cut in sorted(dropped | puts.keys() | {len(self.seqs)}):
            if low < cut:  # the file's rows [low, cut) unchanged: one run
                begin, end = int(starts[low]), int(starts[cut])
                self._blocks.check(begin, end)
                seqs.append(_raw(self.seqs, low, cut))
                lengths.append(_raw(self.lengths, low, cut))
                blob.append(self.blob[begin:end])
            for seq in puts.get(cut, ()):
                seqs.append(array(_U8, [seq]).tobytes())
                lengths.append(array(_U8, [len(self.put[seq])]).tobytes())
                blob.append(self.put[seq])
            low = cut + 1 if cut in dropped else cut
        return (
            ints(memoryview(b"".join(seqs)), 8),
            ints(memoryview(b"".join(lengths)), 8),
            b"".join(blob),
        )


def _starts_of(lengths: Sequence[int]) -> Sequence[int]:
    """Return where each row starts in a table's bytes, and where the last ends, from the rows' lengths: numpy's array where they are a file's (0.3 ms of 100,000 rows, 5-16 ms as a list of ints; each taken with ``int()``)."""
    np = numpy_module() if isinstance(lengths, memoryview) else None
    if np is None:
        return [0, *itertools.accumulate(lengths)]
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.frombuffer(lengths, dtype="=u8"), out=starts[1:], dtype=np.int64)
    return starts  # type: ignore[no-any-return]  # numpy's ndarray, indexed as a sequence


def _raw(values: Sequence[int], low: int, high: int) -> bytes:
    """Return the bytes of ``values[low:high]`` (native u8: a memoryview of a file, or an array)."""
    if isinstance(values, memoryview):
        return values[low:high].tobytes()
    return array(_U8, values[low:high]).tobytes()


class VectorView:
    """What a vector file holds of a log up to :attr:`offset`, and the records followed since.

    ``header`` is the log's first line, ``model`` the vector model (``None``:
    none), :attr:`count` the live items; ``outdated``: read from a file of
    version 1.
    """

    def __init__(
        self,
        header: bytes,
        offset: int,
        model: tuple[str, int] | None,
        live: tuple[Sequence[int], Sequence[int]],
        tables: dict[str, _Table],
        *,
        outdated: bool = False,
    ) -> None:
        self.header = header
        self.offset = offset
        self.model = model
        self._live_seqs, self._live_at = live
        self._put: dict[int, int] = {}
        self._gone: set[int] = set()
        self.count = len(self._live_seqs)
        self.tables = tables
        self.followed = 0
        """Bytes of the log followed since the file (a writable handle saves it again past some)."""
        self.outdated = outdated
        """Read from a file of version 1, not saved since (a writable handle saves it in this version)."""

    def record_at(self, seq: int) -> int | None:
        """Return where the record of live item ``seq``'s current bytes starts in the log (``None``: no live item)."""
        if seq in self._put:
            return self._put[seq]
        if seq in self._gone:
            return None
        number = bisect.bisect_left(self._live_seqs, seq)
        if number < len(self._live_seqs) and self._live_seqs[number] == seq:
            return self._live_at[number]
        return None

    def vectors_of(self, fields: str, seqs: Iterable[int]) -> list[tuple[int, bytes]]:
        """Return ``(seq, vector)`` of the items among ``seqs`` with a vector over ``fields``, in seq order.

        Raises:
            DamagedVectorFileError: if a block of the file they lie in does not check out.
        """
        table = self.tables.get(fields)
        if table is None:
            return []
        out = []
        for seq in sorted(set(seqs)):
            vector = table.get(seq)
            if vector is not None:
                out.append((seq, vector))
        return out

    def embedded(self, fields: str) -> bool:
        """Return whether every live item holds a vector over ``fields`` (``False`` also where numpy, which tells, is missing)."""
        table = self.tables.get(fields)
        if table is None:
            return self.count == 0
        np = numpy_module()
        if np is None or table.count < self.count:
            return False
        live = np.frombuffer(self._live_seqs, dtype=np.uint64)
        have = np.frombuffer(table.seqs, dtype=np.uint64)
        # Every live item is a live one of the file (with a vector there, or among these)
        # or one added since: each of these must hold a vector now.
        maybe = itertools.chain(live[~np.isin(live, have)].tolist(), table.gone, self._put)
        return all(self.record_at(seq) is None or table.has(seq) for seq in maybe)

    def spread(self, most: int) -> list[int]:
        """Return up to ``most`` seqs of the file's live items, evenly spread over them (some may have gone since)."""
        seqs = self._live_seqs
        step = max(1, -(-len(seqs) // max(most, 1)))
        return [int(seq) for seq in seqs[::step]]

    def live(self) -> dict[int, int]:
        """Return every live item's record offset, by seq."""
        out = {
            seq: at
            for seq, at in zip(self._live_seqs, self._live_at, strict=True)
            if seq not in self._gone
        }
        out.update(self._put)
        return out

    def follow(self, chunk: bytes) -> bool:
        """Apply the records of ``chunk``, the log's whole lines after :attr:`offset`, as reading the log does; ``False`` where one is not followed here.

        A line that does not parse as a record, or a ``clear`` record,
        gives up (``False``): the view is then left half changed, and the
        caller drops it and reads the log whole.
        """
        at = self.offset
        try:
            for line in chunk.split(b"\n")[:-1]:
                start, at = at, at + len(line) + 1
                if line.strip() and not self._apply(line, start):
                    return False
        except (orjson.JSONDecodeError, CorruptSessionError):
            return False
        self.offset += len(chunk)
        self.followed += len(chunk)
        return True

    def _apply(self, line: bytes, start: int) -> bool:
        split = split_item_record(line)
        if split is not None:
            head = orjson.loads(split[0])
            if type(head) is not dict:
                return False
            seq, created, step, key = head.get("seq"), head.get("t"), head.get("s"), head.get("k")
            if (
                type(seq) is not int
                or not isinstance(created, (int, float))
                or not (step is None or type(step) is str)
                or not (key is None or (type(key) is str and key))
            ):
                return False
            if head.get("u"):
                if self.record_at(seq) is not None:
                    self._put[seq] = start
                self._drop_vectors((seq,))
            else:
                if self.record_at(seq) is None:
                    self.count += 1
                self._gone.discard(seq)
                self._put[seq] = start
            return True
        head = orjson.loads(line)
        if type(head) is not dict:
            return False
        if "del" in head:
            gone = head["del"]
            if type(gone) is not list or any(type(seq) is not int for seq in gone):
                return False
            for seq in gone:
                if self.record_at(seq) is not None:
                    self.count -= 1
                self._put.pop(seq, None)
                self._gone.add(seq)
            self._drop_vectors(gone)
            return True
        if "clear" in head:
            return False
        if "vec" in head:
            seq, fields, vector = vector_of(head["vec"])
            table = self.tables.get(fields)
            if table is None:
                table = self.tables[fields] = _Table(array(_U8), array(_U8), memoryview(b""))
            table.set(seq, vector)
            return True
        if "vm" in head:
            self.model = model_of(head["vm"])
            return True
        if "vdrop" in head:
            self.tables = {}
            self.model = None
            return True
        return "meta" in head and type(head["meta"]) is dict

    def _drop_vectors(self, seqs: Iterable[int]) -> None:
        for table in self.tables.values():
            for seq in seqs:
                table.drop(seq)


def block_sums(np: Any, data: bytes | memoryview) -> Any:
    """Return the sum of each :data:`CHECK_BLOCK` bytes of a part (the last fewer), a whole number of 8-byte words: their 64-bit sum (little-endian u8, wrapping), by numpy (a CRC-32 costs five times as much).

    Each block is checked against its own sum, in its place: a flipped bit,
    a zeroed or changed word, blocks swapped or a part cut or moved fail
    (words swapped within a block do not); it is no defence against someone
    who writes the file on purpose (who could as well write the log).
    """
    words = np.frombuffer(data, dtype="<u8")
    if not len(words):
        return np.zeros(0, dtype=np.uint64)
    return np.add.reduceat(words, np.arange(0, len(words), _WORDS), dtype=np.uint64)


_BLOCK_1: Final = 512
"""Words of 8 bytes a block of :func:`checksum` (its second sum weighs each block by its place)."""


def checksum(np: Any, data: bytes | memoryview) -> list[int]:
    """Return the checksum of a part of a version 1 file (a whole number of 8-byte words): two 64-bit sums computed by numpy, checked whole at its load.

    The sum of the words (little-endian u8, wrapping), and the sum of
    each block of :data:`_BLOCK_1` words times its place (1, 2, ...): a
    flipped bit, a zeroed or changed word, blocks swapped or a part cut or
    moved change it; it is no defence against someone who writes the file
    on purpose (who could as well write the log).
    """
    words = np.frombuffer(data, dtype="<u8")
    if not len(words):
        return [0, 0]
    blocks = np.add.reduceat(words, np.arange(0, len(words), _BLOCK_1), dtype=np.uint64)
    places = np.arange(1, len(blocks) + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        weighed = (blocks * places).sum(dtype=np.uint64)
    return [int(blocks.sum(dtype=np.uint64)), int(weighed)]


def _padded(data: bytes | memoryview) -> bytes | memoryview:
    """Return ``data`` padded to whole 8-byte words; not copied where it is whole already (a mapped file's part: the 2.2 GB of vectors of 100,000 steps cut into parts copied cost ~1 s of a save)."""
    return data if not len(data) % 8 else bytes(data) + b"\0" * (-len(data) % 8)


def file_bytes(np: Any, log: SessionLog | VectorView, tail: bytes) -> list[bytes | memoryview]:
    """Return the file of a log view (read whole) or of a followed :class:`VectorView`, ``tail`` being the log's bytes just before its offset (``np``: numpy, for the sums).

    Raises:
        DamagedVectorFileError: if a block of the view's file does not check out.
    """
    if isinstance(log, SessionLog):
        live = sorted(log.offsets.items())
        tables: list[tuple[str, Sequence[int], Sequence[int], bytes | memoryview]] = []
        for fields, table in sorted(log.vectors.items()):
            rows = sorted(table.items())
            tables.append(
                (
                    fields,
                    [seq for seq, _ in rows],
                    [len(vector) for _, vector in rows],
                    b"".join(vector for _, vector in rows),
                )
            )
    else:
        live = sorted(log.live().items())
        tables = [(fields, *table.block()) for fields, table in sorted(log.tables.items())]
    parts: list[bytes | memoryview] = [
        array(_U8, [seq for seq, _ in live]).tobytes(),
        array(_U8, [at for _, at in live]).tobytes(),
    ]
    names = []
    for fields, seqs, lengths, blob in tables:
        names.append([fields, len(seqs)])
        parts += [array(_U8, seqs).tobytes(), array(_U8, lengths).tobytes(), _padded(blob)]
    sums = b"".join(block_sums(np, part).astype("=u8").tobytes() for part in parts)
    head = {
        **side_file.stamp(FORMAT, _VERSION, log.header, log.offset, tail),
        "model": None if log.model is None else list(log.model),
        "items": len(live),
        "tables": names,
        "parts": [len(part) for part in parts],
        "block": CHECK_BLOCK,
        "sums": zlib.crc32(sums),
    }
    line = orjson.dumps(head)
    line += b" " * (-(len(line) + 1) % 8) + b"\n"
    return [line, sums, *parts]


def _sums_size(parts: Sequence[int]) -> int:
    """Return the bytes of the table of sums of parts of these lengths."""
    return 8 * sum(-(-length // CHECK_BLOCK) for length in parts)


def covered(fd: int) -> tuple[str, int] | None:
    """Return the hash of the log header and the log length a file names in its header line (``None``: not a vector file of this version, which is saved again as a missing one is)."""
    line = side_file.head_line(fd, _HEADER_MAX)
    try:
        head = None if line is None else side_file.parse(line[0], FORMAT)
    except orjson.JSONDecodeError:
        return None
    if head is None or not side_file.native(head, _VERSION):
        return None
    log, offset = head.get("log"), head.get("offset")
    return (log, offset) if type(log) is str and type(offset) is int else None


def load(
    fd: int, header: bytes, end_of_log: int, read_log: Callable[[int, int], bytes]
) -> VectorView:
    """Return the view an open file holds, if it covers a prefix of the log that starts with ``header`` and is ``end_of_log`` bytes long; the file is mapped, not copied, and ``fd`` left open.

    ``read_log(start, end)`` returns the log file's bytes in that range.
    Every part but the vectors is checked here, against the sums of its
    blocks; each block of the vectors when it is first read (a
    :class:`DamagedVectorFileError` then). A file of version 1 has every
    part checked here, whole, against its :func:`checksum`.

    Raises:
        DamagedVectorFileError: if the file is not one of this log, or is damaged.
    """
    np = numpy_module()
    if np is None:
        raise DamagedVectorFileError("numpy is not installed")  # semantic search needs it
    try:
        size = os.fstat(fd).st_size
        head, end = side_file.read_head(
            fd, FORMAT, _HEADER_MAX, DamagedVectorFileError, "vector file"
        )
        offset, items, names, parts, model = (
            head["offset"],
            head["items"],
            head["tables"],
            head["parts"],
            head["model"],
        )
        first = side_file.native(head, _VERSION_1)
        if not (
            (first or side_file.native(head, _VERSION))
            and side_file.of_log(head, header, end_of_log)
            and type(items) is int
            and items >= 0
            and (model is None or (type(model) is list and len(model) == 2))
            and type(names) is list
            and all(
                type(name) is list
                and len(name) == 2
                and type(name[0]) is str
                and type(name[1]) is int
                and name[1] >= 0
                for name in names
            )
            and type(parts) is list
            and len(parts) == 2 + 3 * len(names)
            and (end + 1) % 8 == 0
        ):
            raise DamagedVectorFileError("header")
        lengths = _lengths_1(parts) if first else _lengths(head, parts)
        start = end + 1 + (0 if first else _sums_size(lengths))
        if not (start + sum(lengths) == size and lengths[0] == lengths[1] == 8 * items):
            raise DamagedVectorFileError("header")
        if model is not None and not (type(model[0]) is str and type(model[1]) is int):
            raise DamagedVectorFileError("model")
        if not side_file.same_tail(head, read_log):
            raise DamagedVectorFileError("another log")
        if first:
            chunks, checks = _parts_1(np, fd, size, start, parts)
        else:
            chunks, checks = _parts(np, fd, size, end, head["sums"], lengths)
        live_seqs = np.frombuffer(chunks[0], dtype="=u8")
        tables = {}
        ascending = [live_seqs]
        for number, (fields, count) in enumerate(names):
            seqs, row_lengths, blob = chunks[2 + 3 * number : 5 + 3 * number]
            if len(seqs) != len(row_lengths) or len(seqs) != 8 * count:
                raise DamagedVectorFileError("table")
            total = int(np.frombuffer(row_lengths, dtype="=u8").sum(dtype=np.uint64))
            if not total <= len(blob) < total + 8:
                raise DamagedVectorFileError("table")
            ascending.append(np.frombuffer(seqs, dtype="=u8"))
            tables[fields] = _Table(
                ints(seqs, 8), ints(row_lengths, 8), blob[:total], checks[4 + 3 * number]
            )
        if any((seqs[1:] <= seqs[:-1]).any() for seqs in ascending):
            raise DamagedVectorFileError("seqs not ascending")
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, DamagedVectorFileError):
            raise
        raise DamagedVectorFileError(str(exc)) from exc
    return VectorView(
        header,
        offset,
        None if model is None else (model[0], model[1]),
        (ints(chunks[0], 8), ints(chunks[1], 8)),
        tables,
        outdated=first,
    )


def _lengths(head: dict[str, Any], parts: list[Any]) -> list[int]:
    """Return the lengths of the parts a version 2 header names (``parts``: its ``parts``).

    Raises:
        DamagedVectorFileError: if they, the block or the table's CRC-32 are not those of a file.
    """
    if not (
        all(type(part) is int and part >= 0 and part % 8 == 0 for part in parts)
        and type(head["sums"]) is int
        and head["block"] == CHECK_BLOCK
    ):
        raise DamagedVectorFileError("header")
    return parts


def _lengths_1(parts: list[Any]) -> list[int]:
    """Return the lengths of the parts a version 1 header names (``parts``: its ``[length, *checksum]`` each).

    Raises:
        DamagedVectorFileError: if they are not those of a file.
    """
    if not all(
        type(part) is list and len(part) == 3 and all(type(x) is int and x >= 0 for x in part)
        for part in parts
    ):
        raise DamagedVectorFileError("header")
    return [part[0] for part in parts]


def _parts(
    np: Any, fd: int, size: int, end: int, sums_crc: int, lengths: list[int]
) -> tuple[list[memoryview], list[_Blocks | None]]:
    """Return the parts of a version 2 file (its header line ``end`` bytes long) and the checks of their blocks: all but the vectors' done here.

    Raises:
        DamagedVectorFileError: if the table of sums or a part but the vectors does not check out.
    """
    # Mapped, not copied, its pages as they are read: a query reads a few rows of the
    # vectors (the pages of 2.2 GB mapped at once cost ~40 ms, version 1 mapped them so).
    mapped = memoryview(mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ))
    at = end + 1 + _sums_size(lengths)
    table_of_sums = mapped[end + 1 : at]
    if zlib.crc32(table_of_sums) != sums_crc:
        raise DamagedVectorFileError("table of sums")
    sums = np.frombuffer(table_of_sums, dtype="=u8")
    chunks: list[memoryview] = []
    checks: list[_Blocks | None] = []
    first = 0  # the first sum of the part
    for number, length in enumerate(lengths):
        chunk = mapped[at : at + length]
        blocks = -(-length // CHECK_BLOCK)
        check = _Blocks(np, chunk, sums[first : first + blocks])
        if number < 2 or number % 3 != 1:  # all but the vectors: checked now
            check.whole()
        chunks.append(chunk)
        checks.append(check)
        at += length
        first += blocks
    return chunks, checks


def _parts_1(
    np: Any, fd: int, size: int, at: int, parts: list[list[int]]
) -> tuple[list[memoryview], list[_Blocks | None]]:
    """Return the parts of a version 1 file (the first at ``at``), each checked whole against its :func:`checksum` (no block left to check: ``None`` each).

    Raises:
        DamagedVectorFileError: if a part does not check out.
    """
    # Mapped, not copied; its pages are brought in at once (every one is read by the checks).
    populate = getattr(mmap, "MAP_POPULATE", 0)
    mapped = memoryview(mmap.mmap(fd, size, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ))
    chunks: list[memoryview] = []
    for length, *sums in parts:
        if length % 8:
            raise DamagedVectorFileError("part length")
        chunk = mapped[at : at + length]
        if checksum(np, chunk) != sums:
            raise DamagedVectorFileError("checksum")
        chunks.append(chunk)
        at += length
    return chunks, [None] * len(chunks)
