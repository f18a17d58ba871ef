"""The value file beside a session log, ``<session_id>.values``: the rows filed by the values of their items, so that a fresh handle tells which rows may pass a filter without reading the log.

A handle that reads a session's log whole files every row by the scalar
values of its item (:class:`~agents.memory.stores._core.value_index.ValueIndex`,
kept by the log's rows): reading and filing 100,000 rows costs 2.5-4 s,
where a hybrid query from the vector and keyword files costs some 50 ms. A
fresh handle's first hybrid query with a rare filter needs to know which
rows of the whole session may pass (``Backend.filter_few``): without this
file it read the log whole for that. A writable handle that has read the log
whole for a filter saves its index here (:meth:`SessionValueFiles.save`);
the next handle reads the file's header and only the parts of the paths a
filter names (:meth:`SessionValueFiles.judge`). A handle that reads the
log whole takes the file's index for the rows up to its offset
(:meth:`SessionValueFiles.whole_index`) rather than filing them again.

The file: a JSON header line, then each path's filed values (its values as
JSON, then the count of seqs under each and the seqs, as native arrays) and
the rows read loosely (:meth:`ValueIndex.packed`). The header names
the format, the blake2b of the log's header line, the length of the log it
covers with a hash of the :data:`~agents.memory.stores._jsonl.side_file.TAIL`
bytes before that offset (:mod:`~agents.memory.stores._jsonl.side_file`), and
each part's place, length and CRC-32. The file is only a cache and untrusted: it
is used only while the log still starts with exactly those bytes; a part is
checked against its CRC and its JSON against the shapes the index writes
before it is used; anything else (a missing, damaged, foreign or stale
file) answers ``None`` and the caller reads the log as it did before.
Records appended after the file's offset, by any handle or process, are
read from the log (:func:`touched`): the rows they add, change or delete
are judged by the caller from their current bytes; a log cleared or
written anew (a new header) makes the file stale.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from typing import Final

import orjson

from agents.memory import _codec
from agents.memory._filter import FilterNode
from agents.memory.exceptions import StoreError
from agents.memory.stores._core.filter_values import JudgedFilters
from agents.memory.stores._core.value_index import ValueIndex
from agents.memory.stores._jsonl import side_file
from agents.memory.stores._jsonl.files import open_file, pread
from agents.memory.stores._jsonl.log import split_item_record

__all__ = ["FORMAT", "Judged", "SessionValueFiles", "touched"]

FORMAT: Final = "kvmemory.jsonl-values"
_VERSION: Final = 1
_HEADER_READ: Final = 65536
"""How much of the file is read first for its header line."""
_HEADER_MAX: Final = 1 << 20
"""The longest header line read (it names every path filed)."""

Judged = tuple[set[int], int]
"""What a value file answers: the rows it filed that may pass a filter, and the offset of the log it covers."""


class _Kept:
    """The parts of one session's file read so far: its header line and the index of the paths taken."""

    __slots__ = ("head", "index", "line", "taken")

    def __init__(self, line: bytes, head: dict[str, object], index: ValueIndex) -> None:
        self.line = line
        self.head = head
        self.index = index
        self.taken: set[str] = set()


class SessionValueFiles:
    """The value files of a store's sessions: saved by a writable handle, read by any.

    The caller holds the store's lock.

    Args:
        directory: The store directory.
        read_only: Never write a file.
    """

    def __init__(self, directory: str, *, read_only: bool) -> None:
        self.directory = directory
        self.read_only = read_only
        self._kept: dict[str, _Kept] = {}
        self._saved: dict[str, tuple[bytes, int]] = {}  # the log version each file was saved at
        self._judged: dict[str, JudgedFilters] = {}

    def judged_filters(self, session_id: str) -> JudgedFilters:
        """Return the answers this handle's filters had from the session's file, kept while the log stays at one version (the caller's stamp)."""
        judged = self._judged.get(session_id)
        if judged is None:
            judged = self._judged[session_id] = JudgedFilters()
        return judged

    def path(self, session_id: str) -> str:
        """Return the path of a session's value file."""
        return os.path.join(self.directory, f"{session_id}.values")

    def judge(
        self, session_id: str, tree: FilterNode, log_path: str, header: bytes, end: int
    ) -> Judged | None:
        """Return the rows the session's file filed that may pass ``tree``, and the log offset it covers, for the log at ``log_path`` that starts with ``header`` and is ``end`` bytes long (as read); ``None`` where the file is missing, damaged, of another log or longer one, or cannot judge ``tree``."""
        try:
            fd = open_file(self.path(session_id), os.O_RDONLY, "value file")
        except (OSError, StoreError):
            return None
        kept: _Kept | None = None
        index = None
        try:
            kept = self._checked(session_id, fd, log_path, header, end)
            if kept is not None:
                index = self._taken(kept, fd, ValueIndex.paths_of(tree))
        except OSError:
            pass  # the file is not used: the log is read as before
        finally:
            os.close(fd)
        if kept is None or index is None:
            self._kept.pop(session_id, None)
            return None
        may = index.candidates(tree)
        if may is None:
            return None
        offset = kept.head["offset"]
        assert type(offset) is int  # checked
        return may, offset

    def current(self, session_id: str, log_path: str, header: bytes, end: int) -> bool:
        """Return whether the session's file checks out for the log at ``log_path`` that starts with ``header`` and is ``end`` bytes long, covering all of it."""
        try:
            fd = open_file(self.path(session_id), os.O_RDONLY, "value file")
        except (OSError, StoreError):
            return False
        try:
            kept = self._checked(session_id, fd, log_path, header, end)
        except OSError:
            kept = None
        finally:
            os.close(fd)
        return kept is not None and kept.head["offset"] == end

    def whole_index(
        self, session_id: str, log_path: str, header: bytes, end: int
    ) -> tuple[ValueIndex, int] | None:
        """Return the session's file read whole into an index of its own (every path, each group checked in order, so that rows set and removed after are filed and unfiled in it), and the log offset it covers, for the log at ``log_path`` that starts with ``header`` and is ``end`` bytes long; ``None`` where the file does not check out.

        A handle reading the log whole takes this index for the rows up to
        that offset (filing 100,000 rows again costs about 2 s, taking the
        file some 0.2 s) and files those the records after it set.
        """
        try:
            fd = open_file(self.path(session_id), os.O_RDONLY, "value file")
        except (OSError, StoreError):
            return None
        index: ValueIndex | None = None
        try:
            kept = self._checked(session_id, fd, log_path, header, end)
            if kept is not None:
                index = self._whole(kept, fd)
        except OSError:
            kept = None
        finally:
            os.close(fd)
        if kept is None or index is None:
            self._kept.pop(session_id, None)  # not read: the log read whole saves it again
            return None
        offset = kept.head["offset"]
        assert type(offset) is int  # checked
        return index, offset

    @staticmethod
    def _whole(kept: _Kept, fd: int) -> ValueIndex | None:
        """Return a new index of every part of the checked file (groups checked in order); ``None`` if a part does not check out."""
        sets, places = kept.head["sets"], kept.head["paths"]
        assert type(sets) is list  # checked
        assert type(places) is dict
        index = ValueIndex()
        if not index.take_sets(_part(fd, *sets)):
            return None
        for path, place in places.items():
            if not index.take_path(path, _part(fd, *place), ordered=True):
                return None
        return index

    def unread_bytes(self, session_id: str, tree: FilterNode) -> int:
        """Return the bytes of the file's parts that ``tree``'s paths name and this handle has not read yet (0 where no file was checked: :meth:`current`)."""
        kept = self._kept.get(session_id)
        if kept is None:
            return 0
        places = kept.head["paths"]
        assert type(places) is dict  # checked
        unread = (places.get(path) for path in ValueIndex.paths_of(tree) - kept.taken)
        return sum(place[1] for place in unread if place is not None)

    def _checked(
        self, session_id: str, fd: int, log_path: str, header: bytes, end: int
    ) -> _Kept | None:
        """Return what is kept of the open file (its header line read and checked, and the log bytes it names); ``None`` if it does not check out."""
        found = side_file.head_line(fd, _HEADER_MAX, first=_HEADER_READ)  # it names every path
        if found is None:
            return None
        line, cut = found
        kept = self._kept.get(session_id)
        if kept is None or kept.line != line:
            try:
                head = side_file.parse(line, FORMAT)
            except orjson.JSONDecodeError:
                return None
            if head is None or not _good_head(head, os.fstat(fd).st_size, cut + 1):
                return None
            start, length, crc = head["sets"]
            index = ValueIndex()
            if not index.take_sets(_part(fd, start, length, crc)):
                return None
            kept = _Kept(line, head, index)
        if not side_file.of_log(kept.head, header, end):
            return None
        log_fd = _log_fd(log_path)
        if log_fd is None:
            return None
        try:
            same = side_file.same_tail(kept.head, lambda start, stop: pread(log_fd, start, stop))
        finally:
            os.close(log_fd)
        if not same:
            return None
        self._kept[session_id] = kept
        return kept

    @staticmethod
    def _taken(kept: _Kept, fd: int, paths: set[str]) -> ValueIndex | None:
        """Return the kept index with ``paths`` taken from the file (those it filed); ``None`` if a part does not check out."""
        places = kept.head["paths"]
        assert type(places) is dict
        for path in sorted(paths - kept.taken):
            place = places.get(path)
            if place is not None:
                start, length, crc = place
                if not kept.index.take_path(path, _part(fd, start, length, crc)):
                    return None
            kept.taken.add(path)
        return kept.index

    def due(self, session_id: str, header: bytes, offset: int) -> bool:
        """Return whether a writable handle should save the file of the log read whole (``header``, ``offset``): none saved or read of this log, or one that covers less than 63/64 of it."""
        if self.read_only:
            return False
        saved = self._saved.get(session_id)
        if saved is None:
            kept = self._kept.get(session_id)
            if kept is not None and kept.head["log"] == side_file.log_hash(header):
                covered = kept.head["offset"]
                assert type(covered) is int
                saved = (header, covered)
        if saved is None or saved[0] != header or saved[1] > offset:
            return True
        return (offset - saved[1]) * 64 > offset

    def save(
        self, session_id: str, index: ValueIndex, header: bytes, offset: int, tail: bytes
    ) -> None:
        """Write the file of ``index``, the rows of the log that starts with ``header``, read to ``offset`` (``tail`` the bytes before it); a cache that cannot be written is left to the next handle."""
        if self.read_only:
            return
        packed = index.packed()
        if packed is None:
            return
        sets, paths = packed
        names = sorted(paths)
        at = 0
        places: dict[str, list[int]] = {}
        for name in names:
            places[name] = [at, len(paths[name]), zlib.crc32(paths[name])]
            at += len(paths[name])
        head = {
            **side_file.stamp(FORMAT, _VERSION, header, offset, tail),
            "sets": [at, len(sets), zlib.crc32(sets)],
            "paths": places,
        }
        # Places count from the end of the header line: its length is known only once written.
        line = orjson.dumps(head) + b"\n"
        try:
            _codec.atomic_write(self.path(session_id), [line, *(paths[n] for n in names), sets])
        except OSError:
            return
        self._saved[session_id] = (header, offset)
        self._kept.pop(session_id, None)

    def forget(self, session_id: str, *, remove: bool = False) -> None:
        """Drop what is kept of a session's file (and, if ``remove``, the file)."""
        self._kept.pop(session_id, None)
        self._saved.pop(session_id, None)
        self._judged.pop(session_id, None)
        if remove:
            with contextlib.suppress(OSError):
                os.unlink(self.path(session_id))

    def clear(self) -> None:
        """Drop what is kept of every file."""
        self._kept.clear()
        self._saved.clear()
        self._judged.clear()


def touched(chunk: bytes) -> set[int] | None:
    """Return the seqs of the items the records of ``chunk`` (whole lines of a log) add, change or delete; ``None`` where one clears the log or a line is not a record."""
    out: set[int] = set()
    try:
        for line in chunk.split(b"\n")[:-1]:
            if not line.strip():
                continue
            split = split_item_record(line)
            if split is not None:
                seq = orjson.loads(split[0])["seq"]
                if type(seq) is not int:
                    return None
                out.add(seq)
                continue
            head = orjson.loads(line)
            if type(head) is not dict or "clear" in head:
                return None
            gone = head.get("del")
            if gone is not None:
                if type(gone) is not list or any(type(seq) is not int for seq in gone):
                    return None
                out.update(gone)
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    return out


def _good_head(head: dict[str, object], size: int, body: int) -> bool:
    """Return whether a header line of this format read from a file of ``size`` bytes, whose parts start at ``body``, is one :meth:`SessionValueFiles.save` writes."""
    if not side_file.native(head, _VERSION):
        return False  # another layout, or the seqs are native arrays of another machine
    places = head.get("paths")
    sets = head.get("sets")
    if not (
        type(head.get("log")) is str
        and type(head.get("tail")) is str
        and type(head.get("offset")) is int
        and type(places) is dict
        and _place(sets)
        and all(type(name) is str and _place(place) for name, place in places.items())
    ):
        return False
    assert type(sets) is list
    # Every part lies in the file: the sets last, ending it.
    parts = [*places.values(), sets]
    if any(place[0] + place[1] > size - body for place in parts):
        return False
    for place in parts:
        place[0] += body
    return bool(sets[0] + sets[1] == size)


def _place(value: object) -> bool:
    return type(value) is list and len(value) == 3 and all(type(x) is int and x >= 0 for x in value)


def _part(fd: int, start: int, length: int, crc: int) -> bytes:
    """Return a part of the file if it checks out against its CRC, else ``b""`` (which reads as no part)."""
    data = pread(fd, start, start + length)
    return data if len(data) == length and zlib.crc32(data) == crc else b""


def _log_fd(log_path: str) -> int | None:
    try:
        return open_file(log_path, os.O_RDONLY, "log")
    except (OSError, StoreError):
        return None
