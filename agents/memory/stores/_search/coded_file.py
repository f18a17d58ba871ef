"""A session's coded part vectors (:class:`CompactVectors`) saved beside an SQLite file, for a fresh handle's first semantic query.

A handle builds the coded table of a session whose part vectors pass the
kept-vector budget from every stored vector (100,000 UFO-shaped steps cut
into parts: 2.1 GiB read and coded, ~5-6 s of CPU over the first two
queries). It saves the table as it builds it (:func:`save_coded`); a fresh
handle's first query loads it (:func:`load_coded`) where its tag's subject
is that of the session now: the session, the fields (and parts) the
vectors were computed over, the model and its dimension. The tag also
holds the session's vectors version it was saved at
(:meth:`Backend.vectors_version`, which every vector write changes): a file
of the version now answers as it is; a stale one (steps appended, updated,
deleted or embedded again since, by any handle) is caught up where the
backend names the items changed since (:meth:`Backend.vector_changes`) and
they are few (``vector_cache.follows``): those items are read and coded
again, as a kept table follows writes; else the table is built.

The file is untrusted. Its body is authenticated with an HMAC-SHA256 whose
key is a digest of the session's first stored vector rows (read from the
database, a few kilobytes; not the vector count, which each append
changes, so that a stale file still authenticates): a damaged, cut or
foreign file, one of another session or database, and one made by someone
who cannot read the database, fail it and are not used (the table is
built as without it). A change to one of those first rows (an update, a
deletion) changes the key: the file fails, and is built again.
What it cannot guard against is someone who can read the database and
write beside it, who could as well write the database. A loaded table is
also checked as :func:`~agents.memory.stores._search.compact.compact_table`
makes one (lengths, refs within the rows, keys ascending, slacks not
negative, scales finite), so that even a file that passes the digest
cannot break a query.

The body is authenticated in chunks of :data:`CHUNK` bytes, each with
an HMAC-SHA256 of its own (over its index, the body's length and its
bytes), and the file holds the HMAC-SHA256 of those chunks' HMACs, all
under the one key: a load checks the chunks on a few threads (hashlib
lets go of the GIL over a large buffer), so its wall time is about that
of one chunk group, its CPU the same as one HMAC over the body (100,000
steps cut into parts: a 299 MB body, ~230 ms of CPU). The same threads
take each row's scale and slack from each piece (:data:`PIECE`) just
hashed, while its bytes are in the core's cache. Forging a file
that passes still takes the key: each chunk's HMAC is keyed, and the top
HMAC, over the chunks' HMACs in order, binds each chunk to its place and
the body to its length (each chunk's HMAC also covers its index and the
body's length). A file of an earlier format (:data:`MAGIC` ``kvmvcod1``: one
HMAC over the body; ``kvmvcod2``: keyed by the vector count too, the
version in the subject) is not read: its magic differs, the table is
built again and saved in this format. A file this process authenticated
and that is unchanged since (``_Seen``: its device, inode, size,
modification and change times, under the same key and stored HMAC) is
not hashed again by a later handle of the process; a fresh process
hashes it (HMAC-SHA256 is the cheapest keyed check the standard library
has on a CPU with SHA instructions: 1.1 GB/s, keyed BLAKE2b 0.8).

The file: :data:`MAGIC`, the HMAC (32 bytes), then the body: five
little-endian u64 (the tag's length, the coded rows, the bytes a row, the
parts, the items), the tag (the subject's ``repr``, a newline, the
version's ``repr``; padded to 8 bytes), the coded rows (codes,
scale and slack, see ``compact._quantized``; padded to 8 bytes), the coded
row of each part (i64), each item's first part (i64) and each item's key
(i64).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import hmac
import mmap
import os
import struct
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

from agents.memory._vectors import EmbedParts, numpy
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._search.compact import CompactVectors, CosinesOf, coded_row_bytes
from agents.memory.stores._search.snapshot import write_snapshot

__all__ = [
    "CHUNK",
    "MAGIC",
    "SEEN_KEPT",
    "CodedFile",
    "coded_name",
    "load_coded",
    "remove_coded",
    "save_coded",
    "saved_tag",
    "snapshot_key",
    "version_of",
]

MAGIC: Final = b"kvmvcod3"
"""The first bytes of a coded file of this format (chunked HMACs keyed by the first vector rows only, the version apart in the tag); ``kvmvcod2`` keyed by the vector count too, ``kvmvcod1`` was one HMAC over the body."""

CHUNK: Final = 8 << 20
"""The bytes of the body each chunk HMAC covers (the last chunk fewer)."""

MAC_THREADS: Final = 4
"""The threads that check a loaded file's chunks at most (fewer where the process may run on fewer cores)."""

PIECE: Final = 256 << 10
"""The bytes a thread that checks a loaded file's chunks hashes at a time, then takes the scales and slacks of the rows in them from (while they are in its core's cache: 10-20 ms of CPU less than a pass of their own over a file of 100,000 steps cut into parts, which reads a line from memory a row; 512 KiB pieces lose it)."""

SEEN_KEPT: Final = 64
"""The coded files a process remembers it authenticated (see ``_Seen``): a fresh handle of the same process loads an unchanged one without hashing it again."""

_SETTLED_NS: Final = 2_000_000_000  # a file changed this recently is hashed at each load

_MAC: Final = 32  # sha256
_HEAD: Final = struct.Struct("<QQQQQ")
_START: Final = len(MAGIC) + _MAC
_FINITE_BITS: Final = 0x7F7FFFFF  # the bits of the largest finite float32 (read as an int32)
_KEY_ROWS: Final = 16  # the first stored vector rows whose digest keys a file's HMAC
_VERSION_TEXT: Final = (
    256  # the longest version (its repr) a tag holds: backends give an int or a short tuple
)


class CodedFile:
    """The coded table file of one session over some fields, kept at one version of its vectors: :meth:`load` for a first query, :meth:`save` as a table is built.

    ``path`` is ``None`` where the backend keeps none
    (:meth:`Backend.vector_snapshot_path`). The tag is the ``subject``
    (the session, the fields, the model and its dimension), a newline and
    the ``repr`` of the version: a file saved at an older version of the
    same subject is stale, and a reader may catch it up
    (:meth:`Backend.vector_changes`).
    """

    def __init__(
        self, backend: Backend, sid: str, filed: str, version: Hashable, model: str, width: int
    ) -> None:
        self._backend, self.session_id, self.filed = backend, sid, filed
        self.path = backend.vector_snapshot_path(sid, filed)
        self.model, self.width = model, width
        self.version = version
        self.subject = repr((sid, filed, model, width)).encode()
        self.tag = self.subject + b"\n" + repr(version).encode()

    def key(self) -> bytes:
        """Return the key of the file's HMAC: a digest of the session's first stored vector rows (:func:`snapshot_key`)."""
        pages = self._backend.vector_pages(self.session_id, self.filed, _KEY_ROWS)
        try:
            first = next(pages, [])
        finally:
            close = getattr(pages, "close", None)
            if close is not None:
                close()
        return snapshot_key(first)

    def load(
        self, budget: int, parts: EmbedParts, cosines_of: CosinesOf
    ) -> tuple[CompactVectors, Hashable] | None:
        """Return the table saved for this subject (:func:`load_coded`) and the version it was saved at (this one, or an older one to catch up), or ``None`` (no file, or not sound or within ``budget``)."""
        if self.path is None or not os.path.exists(self.path):
            return None
        loaded = load_coded(
            self.path, self.subject, self.key(), budget, self.model, parts, self.width, cosines_of
        )
        if loaded is None:
            return None
        table, version = loaded
        at = self.version if version == repr(self.version).encode() else version_of(version)
        return None if at is None else (table, at)

    def saved_version(self) -> Hashable | None:
        """Return the version the file of this subject was saved at, or ``None`` where there is none (its head read only, not checked: a load checks it)."""
        tag = None if self.path is None else saved_tag(self.path)
        if tag is None or not tag.startswith(self.subject + b"\n"):
            return None
        return version_of(tag[len(self.subject) + 1 :])

    def current(self) -> bool:
        """Return whether a file of this tag is saved (its head read only: a load checks the rest)."""
        return self.path is not None and saved_tag(self.path) == self.tag

    def save(self, table: CompactVectors) -> None:
        """Save ``table``, just built, where the backend saves them (:attr:`Backend.saves_vector_snapshots`), and tell it (:meth:`Backend.vector_snapshot_saved`); a file that cannot be written leaves fresh handles to build it (the backend is told: :meth:`Backend.vector_snapshot_unsaved`)."""
        if self.path is None or not self._backend.saves_vector_snapshots:
            return
        try:
            written = save_coded(self.path, table, self.tag, self.key())
        except OSError as exc:
            self._backend.vector_snapshot_unsaved(self.path, exc)
            return
        if written:
            with contextlib.suppress(OSError):
                self._backend.vector_snapshot_saved(self.path)


def coded_name(session_id: str, fields: str) -> str:
    """Return the name of a session's coded file over ``fields`` in its folder: ``<sha1 of the session id>-<sha1 of the fields>``."""
    return f"{_sha1(session_id)}-{_sha1(fields)}"


def remove_coded(folder: str, session_id: str) -> None:
    """Remove the session's coded files (over any fields) from ``folder``; what cannot be removed stays (they are caches)."""
    prefix = f"{_sha1(session_id)}-"
    with contextlib.suppress(OSError):  # no folder: nothing saved
        for name in os.listdir(folder):
            if name.startswith(prefix):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


def version_of(text: bytes) -> Hashable | None:
    """Return the version a tag holds (the ``repr`` of an int, a string or a tuple of them, as backends give), or ``None`` where it is none such."""
    if len(text) > _VERSION_TEXT:
        return None
    try:
        value = ast.literal_eval(text.decode("ascii"))
        hash(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, UnicodeDecodeError):
        return None
    return value if repr(value).encode() == text else None


def snapshot_key(first_rows: Iterable[tuple[int, bytes]]) -> bytes:
    """Return the key that authenticates a session's coded file: a digest of its first stored vector rows.

    Not of the vector count (format 2 was): steps appended after the save
    leave the key as it was, so that a reader can authenticate the stale
    file and catch it up. Rows changed or deleted among the first change
    the key: such a file fails and the table is built again.
    """
    digest = hashlib.sha256(b"kvmemory coded vectors 3\0")
    for seq, vector in first_rows:
        digest.update(struct.pack("<qQ", seq, len(vector)))
        digest.update(vector)
    return digest.digest()


def saved_tag(path: str) -> bytes | None:
    """Return the tag of the coded file at ``path``, or ``None`` where there is none of this format (its head read only)."""
    try:
        with open(path, "rb") as file:
            head = file.read(_START + _HEAD.size)
            if len(head) < _START + _HEAD.size or head[: len(MAGIC)] != MAGIC:
                return None
            length = _HEAD.unpack_from(head, _START)[0]
            tag = file.read(min(length, 1 << 16))
    except OSError:
        return None
    return tag if len(tag) == length else None


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 8)


def save_coded(path: str, table: CompactVectors, tag: bytes, key: bytes) -> bool:
    """Write ``table`` to ``path`` under ``tag``, authenticated with ``key``, whole or not at all (``write_snapshot``: a file beside it renamed over it); return whether it was written.

    ``False`` for a table some of whose items changed since it was built
    or loaded (it holds dead rows): its :meth:`CompactVectors.live` copy is
    saved instead.

    Raises:
        OSError: if the folder or the file cannot be written.
    """
    np = numpy()
    slots = len(table.key_at)
    if not bool(table.alive[:slots].all()):
        return False
    rows = [memoryview(np.ascontiguousarray(block)).cast("B") for block in table.rows()]
    refs = np.ascontiguousarray(table.part_rows(), dtype=np.int64)
    pieces: list[bytes | memoryview] = [
        _HEAD.pack(len(tag), table.used, table.matrix.shape[1], table.refs, slots),
        _pad(tag),
        *rows,
        b"\0" * (-sum(row.nbytes for row in rows) % 8),
        memoryview(refs).cast("B"),
        memoryview(np.ascontiguousarray(table.start[:slots], dtype=np.int64)).cast("B"),
        memoryview(np.ascontiguousarray(table.key_at[:slots], dtype=np.int64)).cast("B"),
    ]
    write_snapshot(path, [MAGIC + _body_mac(key, pieces), *pieces])
    return True


def _chunks(pieces: Sequence[bytes | memoryview]) -> Iterable[list[memoryview]]:
    """Yield the body that ``pieces`` make, one after the other, as chunks of :data:`CHUNK` bytes (each a list of slices of them)."""
    chunk: list[memoryview] = []
    room = CHUNK
    for piece in pieces:
        view = memoryview(piece).cast("B")
        while len(view):
            taken, view = view[:room], view[room:]
            chunk.append(taken)
            room -= len(taken)
            if room == 0:
                yield chunk
                chunk, room = [], CHUNK
    if chunk:
        yield chunk


def _chunk_mac(key: bytes, index: int, total: int, chunk: Iterable[bytes | memoryview]) -> bytes:
    """Return the HMAC of the body's chunk ``index`` (of a body of ``total`` bytes)."""
    mac = hmac.new(key, struct.pack("<QQ", index, total), hashlib.sha256)
    for piece in chunk:
        mac.update(piece)
    return mac.digest()


def _body_mac(key: bytes, pieces: Sequence[bytes | memoryview]) -> bytes:
    """Return the file's HMAC of the body ``pieces`` make: the HMAC of its chunks' HMACs, in order."""
    total = sum(memoryview(piece).nbytes for piece in pieces)
    macs = [_chunk_mac(key, at, total, chunk) for at, chunk in enumerate(_chunks(pieces))]
    return hmac.new(key, b"".join(macs), hashlib.sha256).digest()


class _BodyMac:
    """The HMAC of a loaded body (:func:`_body_mac`), its chunks' HMACs computed on up to :data:`MAC_THREADS` threads (:meth:`start`) while the load goes on; :meth:`digest` waits for them."""

    def __init__(self, key: bytes, body: memoryview) -> None:
        self._key, self._body = key, body
        self._pool: ThreadPoolExecutor | None = None
        self._groups: list[Future[bytes]] = []
        self._then: Callable[[int, int], object] = lambda begin, end: None

    def start(self, then: Callable[[int, int], object]) -> None:
        """Start hashing the chunks on threads, each :data:`PIECE` bytes of the body followed by ``then(begin, end)`` on that thread (its bytes are in the core's cache still)."""
        self._then = then
        count = -(-len(self._body) // CHUNK)
        threads = max(1, min(count, MAC_THREADS, _cores()))
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="kvmemory-coded-mac")
        groups = [range(count * t // threads, count * (t + 1) // threads) for t in range(threads)]
        self._groups = [self._pool.submit(self._macs, group) for group in groups]

    def _macs(self, group: range) -> bytes:
        total = len(self._body)
        return b"".join(
            _chunk_mac(self._key, at, total, self._pieces(at * CHUNK, min((at + 1) * CHUNK, total)))
            for at in group
        )

    def _pieces(self, begin: int, end: int) -> Iterator[memoryview]:
        """Yield the body from ``begin`` to ``end``, :data:`PIECE` bytes at a time, each followed (once hashed) by ``then`` over it."""
        for at in range(begin, end, PIECE):
            stop = min(at + PIECE, end)
            yield self._body[at:stop]
            self._then(at, stop)

    def digest(self) -> bytes:
        """Return the body's HMAC, once its chunks' are computed."""
        try:
            joined = b"".join(group.result() for group in self._groups)
        finally:
            if self._pool is not None:
                self._pool.shutdown()
        return hmac.new(self._key, joined, hashlib.sha256).digest()


class _Seen:
    """A coded file as the system describes it (device, inode, size, modification and change times) with the key and HMAC it was loaded under: :meth:`known` where this process authenticated that very file already (:meth:`note`), so that it is not hashed again.

    A file's bytes change only with its change time (which no user can
    set), and a file put in its place is another inode: a file that
    answers to all of these is the one hashed. The key and the stored
    HMAC are part of it, so that a file authenticated under one key
    vouches for nothing under another. A file changed in the last
    :data:`_SETTLED_NS` is not remembered: a file system stamps times at a
    coarse tick, and a write in the tick of the last change would leave
    them as they were.
    """

    _lock: Final = threading.Lock()
    _known: Final[OrderedDict[tuple[int, ...], bytes]] = OrderedDict()

    def __init__(self, stat: os.stat_result, key: bytes, stored: bytes) -> None:
        self._identity = (
            stat.st_dev,
            stat.st_ino,
            stat.st_size,
            stat.st_mtime_ns,
            stat.st_ctime_ns,
        )
        self._seal = hashlib.sha256(key + stored).digest()
        self._changed = stat.st_ctime_ns

    def known(self) -> bool:
        """Return whether this process authenticated this file, unchanged, under this key."""
        with self._lock:
            seal = self._known.get(self._identity)
        return seal is not None and hmac.compare_digest(seal, self._seal)

    def note(self) -> None:
        """Remember this file as authenticated (the last :data:`SEEN_KEPT` files), unless it changed just now."""
        if time.time_ns() - self._changed < _SETTLED_NS:
            return
        with self._lock:
            self._known.pop(self._identity, None)
            self._known[self._identity] = self._seal
            while len(self._known) > SEEN_KEPT:
                self._known.popitem(last=False)


def _cores() -> int:
    """Return the cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def load_coded(
    path: str,
    subject: bytes,
    key: bytes,
    budget: int,
    model: str,
    parts: EmbedParts,
    width: int,
    cosines_of: CosinesOf,
) -> tuple[CompactVectors, bytes] | None:
    """Return the table saved at ``path`` under a tag of ``subject`` and ``key``, with the version text of its tag (authenticated); ``None`` where there is none, it is of another subject, it fails its HMAC or its checks, or it passes ``budget`` bytes."""
    np = numpy()
    try:
        with open(path, "rb") as file:
            stat = os.fstat(file.fileno())
            size = stat.st_size
            if size < _START + _HEAD.size or size % 8:
                return None
            data = _mapped(file.fileno())
    except (OSError, ValueError):
        return None
    view = memoryview(data)
    if bytes(view[: len(MAGIC)]) != MAGIC:
        return None
    body = view[_START:]
    # The head and tag first (another subject costs no digest), then the HMAC of the whole body.
    tag_length, used, row_bytes, refs, slots = _HEAD.unpack_from(body)
    at = _HEAD.size
    sizes = [tag_length + (-tag_length % 8), used * row_bytes, refs * 8, slots * 8, slots * 8]
    sizes[1] += -sizes[1] % 8
    if row_bytes != coded_row_bytes(width) or at + sum(sizes) != len(body):
        return None
    tag = bytes(body[at : at + tag_length])
    if not tag.startswith(subject + b"\n") or used * row_bytes > budget:
        return None
    stored = bytes(view[len(MAGIC) : _START])
    seen = _Seen(stat, key, stored)
    laid = _Laid(np, data, at + sizes[0], sizes, (used, row_bytes, refs, slots), width)
    mac = None if seen.known() else _BodyMac(key, body)
    if mac is None:
        laid.take_tails(0, len(body))
    else:  # on threads, each piece's scales and slacks taken as it is hashed
        mac.start(laid.take_tails)
    try:
        slotted = _sound_slots(np, used, laid.ref_row, laid.start, laid.key_at)
    finally:
        sound = mac is None or hmac.compare_digest(mac.digest(), stored)
    if not sound or not slotted or not (slots == 0 or _sound_tails(np, laid.tails[:used])):
        return None
    seen.note()
    matrix, start, key_at, ref_row = laid.matrix, laid.start, laid.key_at, laid.ref_row
    slack, scale = laid.tails[:, 1], laid.tails[:, 0]
    compact = CompactVectors(model, parts, width, matrix, slack, cosines_of, scale)
    compact.lay_out_items(start, key_at, ref_row)
    return compact, tag[len(subject) + 1 :]


class _Laid:
    """A loaded body's parts as arrays over its mapped pages (from ``at``, the tag's end): the coded rows, each part's row, each item's first part and key; and ``tails``, each row's scale and slack, as :meth:`take_tails` copies them."""

    def __init__(
        self,
        np: Any,
        data: mmap.mmap,
        at: int,
        sizes: list[int],
        shape: tuple[int, int, int, int],
        width: int,
    ) -> None:
        used, row_bytes, refs, slots = shape
        self._rows_at, self._row_bytes, self._used, self._width = at, row_bytes, used, width
        self.matrix = np.frombuffer(data, np.int8, used * row_bytes, _START + at)
        self.matrix = self.matrix.reshape(used, row_bytes)
        at += sizes[1]
        self.ref_row = np.frombuffer(data, np.int64, refs, _START + at)
        at += sizes[2]
        self.start = np.frombuffer(data, np.int64, slots, _START + at)
        self.key_at = np.frombuffer(data, np.int64, slots, _START + at + sizes[3])
        # Each row's scale and slack copied once, into one array with room for the rows a catch-up
        # codes (``compact._room``); the table's scales and slacks are its two columns (no copy).
        self.tails = np.empty((used + used // 8 + 64, 2), dtype=np.float32)
        self._np = np

    def take_tails(self, begin: int, end: int) -> None:
        """Copy the scale and slack of the rows that begin from ``begin`` to ``end`` of the body into :attr:`tails` (on any thread: each row's once, as the body's ranges are taken once)."""
        first = min(self._used, max(0, -(-(begin - self._rows_at) // self._row_bytes)))
        last = min(self._used, max(0, -(-(end - self._rows_at) // self._row_bytes)))
        if first >= last:
            return
        np, width, rows = self._np, self._width, self.matrix[first:last]
        if width % 8 == 0:  # each row's scale and slack one 8-byte word: copied a word a row
            self.tails[first:last].view(np.uint64)[:, 0] = rows.view(np.uint64)[:, width // 8]
        else:
            self.tails[first:last] = np.ascontiguousarray(rows[:, width : width + 8]).view(
                np.float32
            )


def _mapped(fd: int) -> mmap.mmap:
    """Return the file ``fd`` mapped read-only, its pages mapped at once where the system can (no copy of the page cache's bytes).

    A file is never changed in place (a save renames a new one over it),
    so the pages mapped stay those checked.
    """
    if sys.platform == "win32":
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    return mmap.mmap(fd, 0, flags=flags, prot=mmap.PROT_READ)


def _sound(np: Any, tail: Any, ref_row: Any, start: Any, key_at: Any) -> bool:
    """Return whether the parts of a loaded table are such as ``compact_table`` makes (whatever the HMAC says: a file must not break a query); ``tail`` holds each row's scale and slack: the rules in one call, as :func:`load_coded` applies them in two (:func:`_sound_slots` while the body is hashed, then :func:`_sound_tails` where the table holds items)."""
    if not _sound_slots(np, len(tail), ref_row, start, key_at):
        return False
    return len(start) == 0 or _sound_tails(np, tail)


def _sound_slots(np: Any, used: int, ref_row: Any, start: Any, key_at: Any) -> bool:
    """Return whether a loaded table's items lie in its parts and its parts in its ``used`` rows: the first part of each item from 0 up, and their keys, strictly ascending, each part's row within the rows.

    One pass over each array, no copy of any (a file of 100,000 steps cut
    into parts: 2.15 million refs). The starts and keys are compared, not
    subtracted: a difference of two int64 may wrap (a start of
    ``2**63 - 1`` then ``-2`` would read as ascending).
    """
    refs = len(ref_row)
    if len(start) == 0:
        return refs == 0
    if refs == 0 or int(start[0]) != 0 or int(start[-1]) >= refs:
        return False
    if bool((start[1:] <= start[:-1]).any()) or bool((key_at[1:] <= key_at[:-1]).any()):
        return False
    # Read as unsigned, a negative ref is past every row: one bound checks both ends.
    return int(ref_row.view(np.uint64).max()) < used


def _sound_tails(np: Any, tail: Any) -> bool:
    """Return whether each of a loaded table's rows (at least one) has a scale finite and above 0 and a slack 0 or more, ``tail`` holding each row's scale and slack."""
    # A scale finite and above 0 is one whose float32 bits, read as an int32, lie from 1 (the
    # least subnormal) to 0x7F7FFFFF (the largest finite): two integer passes, no float tests.
    scale = tail.view(np.int32)[:, 0]
    if int(scale.min()) < 1 or int(scale.max()) > _FINITE_BITS:
        return False
    # A slack is a bound: never negative nor NaN (an infinite one scores its row exactly).
    return not bool((~(tail[:, 1] >= 0)).any())
