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

The index in memory is :mod:`agents.memory.stores._jsonl.keyword_index`,
its ranking :mod:`agents.memory.stores._jsonl.keyword_ranking`, and its
file (the layout, writing it, reading it back checked)
:mod:`agents.memory.stores._jsonl.keyword_file`.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final

from agents.memory import _codec
from agents.memory.exceptions import CorruptStoreError, StoreError
from agents.memory.stores._jsonl import side_file
from agents.memory.stores._jsonl.files import open_file, pread
from agents.memory.stores._jsonl.keyword_file import file_bytes, load
from agents.memory.stores._jsonl.keyword_index import KeywordIndex, terms_of
from agents.memory.stores._jsonl.keyword_postings import DamagedIndexError, pack, width
from agents.memory.stores._jsonl.log import SessionLog, read_item_at

__all__ = ["SAVE_EVERY", "SessionKeywords", "build", "read_range", "rows_at"]

SAVE_EVERY: Final = 256
"""Items indexed since the last save after which a writable handle saves again (or a 64th of the session, if more)."""
_HEADER_READ: Final = 65536
"""How much of a log is read for its header line where the log is not read whole (:meth:`SessionKeywords.unviewed`)."""


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
        widths = (width(max(lengths, default=0)), width(tf_max))
        base = pack(((t, s, counts_of[t]) for t, s in seqs_of.items()), widths)
    offsets = log.offsets
    index = KeywordIndex(
        log.header, log.offset, lengths, base, {seq: offsets[seq] for seq in lengths}
    )
    index.file_stale = True
    return index


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
            index = self._load_of(session_id, log, log_path)
        if index is not None and index.offset < log.offset:
            try:
                index.follow(read_range(log_path, index.offset, log.offset), log_path)
            except DamagedIndexError:
                index = None
        if index is None:
            index = build(log, f"session {session_id!r} of {log_path!r}")
        self._indexes[session_id] = index
        due = index.unsaved >= max(SAVE_EVERY, index.count // 64)
        if not self.read_only and (due or index.file_stale):
            self._save(session_id, index, log_path)
        return index

    def unviewed(self, session_id: str, log_path: str) -> KeywordIndex | None:
        """Return the session's index caught up with its log file as it is now, for a handle that holds no view of the log; ``None`` where that takes reading the log whole.

        The log is looked at, not read: its length (``fstat``), its header
        line, and the records after the index, if any (followed as
        :meth:`current` follows them). The index held, or else the file's,
        is taken if it is of a log with this header and no longer than it,
        the file checked as :meth:`current` checks it (the hash of the log's
        bytes before the offset it covers among them). ``None`` (the caller
        reads the log whole, as at any other first read) where there is no
        log or file, the file does not check out, the log ends with a line
        cut short, or a record after the index does not read; the index is
        then not kept.
        """
        try:
            fd = open_file(log_path, os.O_RDONLY, "log")
        except (OSError, StoreError):
            return None
        try:
            index = self._unviewed(session_id, fd, log_path)
        except (OSError, DamagedIndexError, CorruptStoreError):
            index = None
        finally:
            os.close(fd)
        if index is None:
            self._indexes.pop(session_id, None)
            return None
        self._indexes[session_id] = index
        if not self.read_only and index.unsaved >= max(SAVE_EVERY, index.count // 64):
            self._save(session_id, index, log_path)
        return self._indexes[session_id]

    def _unviewed(self, session_id: str, fd: int, log_path: str) -> KeywordIndex | None:
        size = os.fstat(fd).st_size
        first = pread(fd, 0, min(size, _HEADER_READ))
        cut = first.find(b"\n")
        if cut < 0:
            return None  # no header line, or a long one: the log is read whole
        header = first[: cut + 1]
        index = self._indexes.get(session_id)
        if index is not None and (index.header != header or index.offset > size):
            index = None
        if index is None:
            index = self._load(session_id, header, size, lambda start, end: pread(fd, start, end))
        if index is None:
            return None
        if index.offset < size:
            chunk = pread(fd, index.offset, size)
            if not chunk.endswith(b"\n"):
                return None  # a line cut short: the read of the log whole warns of it
            index.follow(chunk, log_path)
        return index

    def offsets_from(self, session_id: str, log: SessionLog, log_path: str) -> None:
        """Take the record offsets of ``log`` (the view just read whole) into the session's index, whose own did not check out, and save it.

        Where the index is not of that log at that length, or does not hold
        the same items, it is dropped and its file removed: the next query
        builds it again.
        """
        index = self._indexes.get(session_id)
        if (
            index is None
            or index.header != log.header
            or index.offset != log.offset
            or index.lengths.keys() != log.offsets.keys()
        ):
            self.forget(session_id, remove=not self.read_only)
            return
        index.offsets = dict(log.offsets)
        index.file_stale = True
        if not self.read_only:
            self._save(session_id, index, log_path)

    def loaded(self, session_id: str, log: SessionLog, log_path: str) -> bool:
        """Load the session's index from its file if this handle holds none of ``log``'s and the file checks out; return whether one is held now.

        Only what :meth:`current` would do first, at the next query: the file
        is read and checked whole but for the postings (header, the log's
        bytes it names, terms, entries and lengths against their CRC), and
        a file covering part of the log is taken as :meth:`current` takes
        it (the records after it are followed at the next query). Nothing
        is followed, built or saved here: a missing or damaged file, or one
        of another log, leaves the handle as it was.
        """
        index = self._indexes.get(session_id)
        if index is not None and index.header == log.header and index.offset <= log.offset:
            return True
        index = self._load_of(session_id, log, log_path)
        if index is None:
            return False
        self._indexes[session_id] = index
        return True

    def moved(self, session_id: str, header: bytes, offset: int, log: SessionLog) -> None:
        """Take a compacted log: an index that covered the old one whole (``header``, ``offset``) covers ``log``, the new one."""
        index = self._indexes.get(session_id)
        if index is None or index.header != header or index.offset != offset:
            self._indexes.pop(session_id, None)
            return
        index.header, index.offset, index.file_stale = log.header, log.offset, True
        index.offsets = dict(log.offsets)  # the same items, each at its place in the new log

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

    def _load_of(self, session_id: str, log: SessionLog, log_path: str) -> KeywordIndex | None:
        return self._load(
            session_id, log.header, log.offset, lambda start, end: read_range(log_path, start, end)
        )

    def _load(
        self, session_id: str, header: bytes, size: int, read_log: Callable[[int, int], bytes]
    ) -> KeywordIndex | None:
        """Return the index the session's file holds if it covers a prefix of the log with ``header``, ``size`` bytes long (:func:`load`); ``None`` if not."""
        try:
            fd = open_file(self.path(session_id), os.O_RDONLY, "keyword index")
        except (OSError, StoreError):
            return None  # missing, a link or unreadable: built again
        try:
            return load(fd, header, size, read_log)
        except (OSError, DamagedIndexError):
            return None

    def _save(self, session_id: str, index: KeywordIndex, log_path: str) -> None:
        try:
            packed = index.packed()
        except DamagedIndexError:
            return  # the next query finds the damage and builds the index again
        try:
            tail = read_range(log_path, max(0, packed.offset - side_file.TAIL), packed.offset)
            _codec.atomic_write(self.path(session_id), file_bytes(packed, tail))
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


def read_range(path: str, start: int, end: int) -> bytes:
    """Return the bytes ``[start, end)`` of a log file (fewer if it is shorter)."""
    fd = open_file(path, os.O_RDONLY, "log")
    try:
        return pread(fd, start, end)
    finally:
        os.close(fd)


def rows_at(
    log_path: str, record_at: Callable[[int], int | None], end: int, seqs: Sequence[int]
) -> list[tuple[int, bytes]] | None:
    """Return the live rows of ``seqs`` read by their records' offsets (``record_at``: a keyword index's or a vector file's, current with the log up to ``end``); ``None`` if one does not check out (:func:`read_item_at`) or cannot be read.

    The caller holds the store's lock (the log does not change meanwhile).
    """
    try:
        fd = open_file(log_path, os.O_RDONLY, "log")
    except (OSError, StoreError):
        return None
    try:
        found = []
        for seq in sorted(set(seqs)):
            at = record_at(seq)
            if at is None:
                continue  # not a live item
            data = read_item_at(fd, at, seq, end)
            if data is None:
                return None
            found.append((seq, data))
        return found
    except (OSError, DamagedIndexError):
        return None
    finally:
        os.close(fd)
