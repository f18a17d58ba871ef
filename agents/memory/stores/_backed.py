"""``StoredMemory``: a ``Memory`` whose every change is written through to a store.

The store is the durable copy; RAM serves the reads. The two meet at one
public seam: ``Memory`` tells its :class:`~agents.memory.memory.MemoryWriter`
of every change, by item key, *before* it applies it, and
:class:`SessionWriter` turns each change into one :class:`WriteBatch` of
the store (one transaction). A failed write (disk full, database locked past
the timeout, a value the codec cannot encode) raises and leaves both copies
as they were:

* ``add_memory_item`` / ``add_memory_items``: the items are appended and,
  under ``max_items``, the items evicted to make room are deleted.
* ``delete_memory_item``, ``delete_items`` and ``clear``: the rows go.
* ``load`` and the other whole-content replacements: the session is cleared
  and the new items appended.
* Changing a field of an item that the memory holds (``item.set_value``,
  ``item["k"] = v``, ``del item["k"]``), including from a change callback,
  is written at once as an update of that item's row; if the write fails,
  the field change is undone and the error raised. Mutating a value *in
  place* (``item["tags"].append(x)``) cannot be seen: call
  ``memory.item_changed(item)`` (or :meth:`StoredMemory.save_item`).

Opening, :meth:`StoredMemory.reload` and :meth:`StoredMemory.refresh` go
through the very same ``Memory`` calls as any load or add (so the step
index, item watching and ``max_items`` hold exactly as for a memory built in
RAM); the writer knows those items are already stored and writes only what
``max_items`` drops. A pure read (opening, reloading, refreshing, searching)
therefore never opens a write batch, and a handle on a read-only store does
all of it; there ``max_items`` bounds only what RAM holds, as the store may
not be changed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from typing_extensions import Self

from agents.memory._codec import BULK_VALUES, OnUnencodable, collector_paused
from agents.memory._item import MemoryItem, OnUnknownClass, item_fields
from agents.memory._records import KEY_FIELD
from agents.memory._text import Tokenizer, check_k, checked_keys, checked_query, item_texts
from agents.memory._vectors import Embedder, EmbedParts, SearchMode, checked_vectors, progress_bar
from agents.memory.exceptions import (
    ArgumentTypeError,
    EmbedderMismatchError,
    EmbeddingError,
    StoreError,
)
from agents.memory.memory import ChangeCallback, Memory
from agents.memory.stores._core.checks import check_session_id
from agents.memory.stores._core.encoding import StoredRecord
from agents.memory.stores._store import Store

if TYPE_CHECKING:
    from agents.memory.prompt import Window
    from agents.memory.search import Hit, SearchIndex, Where

__all__ = ["SessionWriter", "StoredMemory"]

_AHEAD_ITEMS = 2048  # a session of this many items or more has its keyword index built ahead
_WALKED_DEPTH = 16  # a filter of fields is asked of the memory's own items this many times k deep


class SessionWriter:
    """The :class:`~agents.memory.memory.MemoryWriter` that keeps one store session in step with a memory.

    It maps the memory's item keys to the store's row seqs. Items that come
    *from* the store (opening, reloading, refreshing) are announced first
    with :meth:`already_stored`, so that the memory's ordinary load and add
    paths map them instead of writing them again.

    Args:
        store: The store that holds the session.
        session_id: The session to write.
        step_key: The field that names an item's step.
        on_unencodable: The codec's policy for values JSON cannot hold.
    """

    def __init__(
        self, store: Store, session_id: str, step_key: str, on_unencodable: OnUnencodable
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.step_key = step_key
        self.on_unencodable: OnUnencodable = on_unencodable
        self._seq_of: dict[int, int] = {}  # memory key -> store seq
        self._item_at: dict[int, MemoryItem] = {}  # store seq -> the item the memory holds
        self._key_at: dict[int, int] = {}  # store seq -> memory key (as _item_at holds the seq)
        self._stored: dict[int, int] = {}  # id(item) -> seq, for items coming from the store
        self._restoring = False  # within already_stored(): a replacement maps, it does not clear
        self._deleted = False  # within already_deleted(): a delete unmaps, it does not write
        self.last_read = 0  # the highest seq read from the store (own appends not counted)

    @contextlib.contextmanager
    def already_stored(
        self, records: Sequence[StoredRecord], *, read: bool = True
    ) -> Iterator[None]:
        """Within the block, items of ``records`` reaching the writer are mapped, not written.

        ``read``: the records were read from the store (``False``: written by
        this memory itself, as a record put is, which a refresh still reads past).
        """
        seqs = [record.seq for record in records]
        self._stored = dict(zip(map(id, [record.item for record in records]), seqs, strict=True))
        self._restoring = True
        if read:
            self.last_read = max(seqs, default=self.last_read)
        try:
            yield
        finally:
            self._stored = {}
            self._restoring = False

    @contextlib.contextmanager
    def already_deleted(self) -> Iterator[None]:
        """Within the block, deletions reaching the writer only unmap their rows (the store deleted them already)."""
        self._deleted = True
        try:
            yield
        finally:
            self._deleted = False

    def keys_of_rows(self, seqs: Iterable[int]) -> dict[int, int]:
        """Return ``{store seq: memory key}`` for the rows of ``seqs`` the memory holds."""
        key_at = self._key_at
        return {seq: key_at[seq] for seq in seqs if seq in key_at}

    def rows_held(self) -> dict[int, int]:
        """Return ``{store seq: memory key}`` for every row the memory holds."""
        return {seq: key for key, seq in self._seq_of.items()}

    def items_at(self, seqs: Iterable[int]) -> list[MemoryItem]:
        """Return the items the memory holds for the store rows ``seqs``."""
        item_at = self._item_at
        return [item_at[seq] for seq in seqs if seq in item_at]

    def seqs_of(self, keys: Iterable[int]) -> dict[int, int]:
        """Return ``{memory key: store seq}`` for the keys that have a row."""
        seq_of = self._seq_of
        return {key: seq_of[key] for key in keys if key in seq_of}

    def holds_row(self, seq: int) -> bool:
        """Return whether the memory holds the store row ``seq``."""
        return seq in self._item_at

    def item_of_row(self, seq: int) -> MemoryItem | None:
        """Return the item the memory holds for the store row ``seq``, or ``None``."""
        return self._item_at.get(seq)

    def in_memory_order(self, items: Iterable[MemoryItem]) -> list[MemoryItem]:
        """Return ``items`` that the memory holds, once each, in the memory's order.

        The rows are mapped in the memory's order, so the newest are found
        first: ordering hits with a window of recent items reads few of them.
        """
        wanted = {id(item) for item in items}
        found: list[MemoryItem] = []
        for item in reversed(self._item_at.values()):
            if id(item) in wanted:
                found.append(item)
                wanted.discard(id(item))
                if not wanted:
                    break
        found.reverse()
        return found

    # -- MemoryWriter -------------------------------------------------------------

    def write_add(
        self, memory: Memory, added: Sequence[tuple[int, MemoryItem]], evicted: Sequence[int]
    ) -> None:
        """Append the new items and delete the evicted ones, in one transaction."""
        stored = self._stored
        if added and not evicted and not stored:
            # The agent's step: items of its own, none evicted (the general path below, shortened).
            with self.batch() as batch:
                batch.append([item for _, item in added])
            seq_of = self._seq_of
            item_at = self._item_at
            key_at = self._key_at
            for (key, item), seq in zip(added, batch.appended, strict=True):
                seq_of[key] = seq
                item_at[seq] = item
                key_at[seq] = key
            return
        dropped = set(evicted)
        new = [(key, item) for key, item in added if id(item) not in stored and key not in dropped]
        gone = [self._seq_of[key] for key in evicted if key in self._seq_of]
        gone += [stored[id(item)] for key, item in added if key in dropped and id(item) in stored]
        appended: list[int] = []
        if new or (gone and not self._reading_only()):
            # Rows read from the store (a refresh) are mapped, not written: a pure
            # read never opens a write batch, so a read-only handle refreshes too.
            with self.batch() as batch:
                batch.delete(gone)
                batch.append([item for _, item in new])
            appended = batch.appended
        self._forget(evicted)
        for key, item in added:
            if key not in dropped and id(item) in stored:
                self._map(key, stored[id(item)], item)
        for (key, item), seq in zip(new, appended, strict=True):
            self._map(key, seq, item)

    def write_delete(self, memory: Memory, keys: Sequence[int]) -> None:
        """Delete the rows of ``keys``."""
        if not self._deleted:
            with self.batch() as batch:
                batch.delete(self._seq_of[key] for key in keys if key in self._seq_of)
        self._forget(keys)

    def write_update(self, memory: Memory, keys: Sequence[int], item: MemoryItem) -> None:
        """Write ``item``'s fields to the rows of ``keys``."""
        with self.batch() as batch:
            batch.update({self._seq_of[key]: item for key in keys if key in self._seq_of})

    def write_replace(self, memory: Memory, added: Sequence[tuple[int, MemoryItem]]) -> None:
        """Make ``added`` the session's content (mapping rows already stored, writing the rest)."""
        stored = self._stored
        keys = [key for key, _ in added]
        items = [item for _, item in added]
        # The row of each item that came from the store, None for an item to write.
        seqs: list[int | None] = list(map(stored.get, map(id, items)))
        unwritten = [i for i, seq in enumerate(seqs) if seq is None]
        gone: list[int] = []
        if self._restoring and not self._reading_only():
            kept = set(seqs)
            kept.discard(None)
            if len(kept) < len(stored):
                gone = [seq for seq in stored.values() if seq not in kept]
        appended: list[int] = []
        if unwritten or gone or not self._restoring:
            # A reopen of what the store holds writes nothing (only what max_items
            # drops), so it never opens a write batch on a read-only handle.
            with self.batch() as batch:
                if not self._restoring:
                    batch.clear()
                batch.delete(gone)
                batch.append([items[i] for i in unwritten])
            appended = batch.appended
        for i, seq in zip(unwritten, appended, strict=True):
            seqs[i] = seq
        self._seq_of = dict(zip(keys, seqs, strict=True))  # type: ignore[arg-type]  # no None left
        self._item_at = dict(zip(seqs, items, strict=True))  # type: ignore[arg-type]
        self._key_at = dict(zip(seqs, keys, strict=True))  # type: ignore[arg-type]

    # -- internals ----------------------------------------------------------------

    def batch(self) -> Any:
        """Open a write batch on this session with the memory's step key and encoding policy."""
        return self.store.batch(
            self.session_id, step_key=self.step_key, on_unencodable=self.on_unencodable
        )

    def _reading_only(self) -> bool:
        """Whether items read from the store stay there as they are (a read-only handle).

        ``max_items`` then bounds only what the memory holds: the rows it
        drops stay in the store, which this handle may not change.
        """
        return self._restoring and self.store.read_only

    def _map(self, key: int, seq: int, item: MemoryItem) -> None:
        old = self._seq_of.get(key)
        if old is not None and old != seq:
            self._key_at.pop(old, None)  # as keys_of_rows answered from _seq_of: the key moved
        self._seq_of[key] = seq
        self._item_at[seq] = item
        self._key_at[seq] = key

    def _forget(self, keys: Iterable[int]) -> None:
        for key in keys:
            seq = self._seq_of.pop(key, None)
            if seq is not None:
                self._item_at.pop(seq, None)
                self._key_at.pop(seq, None)


class StoredMemory(Memory):
    """A ``Memory`` backed by a durable store, one session of it.

    Opening loads the session's items (same classes, same order) through the
    same path as any load, so every ``Memory`` call behaves as on a memory
    built in RAM; every add, delete, clear and field change is written
    through before the call returns. Reads are served from RAM.
    :meth:`refresh` fetches what other processes appended since.

    Args:
        store: An open store (see :func:`agents.memory.stores.open_store`).
        session_id: The session to open or create.
        step_key: The field that names an item's step.
        max_items: Keep at most this many items, in RAM and in the store
            (enforced on open, on refresh and on every add; on a read-only
            store, in RAM only).
        callbacks: Run after each change as ``callback(memory, change)``.
        on_unencodable: The codec's policy for values JSON cannot hold.
        on_unknown_class: ``"base"`` reads items whose class is unknown as plain ``MemoryItem``.
        metadata: Free-form data about the session, saved in the store (replacing
            what it held); ``None`` keeps the stored metadata.
        owns_store: Close the store when the memory is closed.
        index_ahead: Start building the in-RAM keyword index on another
            thread as the session is opened or reloaded (see
            ``SearchIndex.build_ahead``), so that the first query that needs
            it (keyword on a store without a keyword index such as JSONL,
            keyword with ``keys``, hybrid, a filtered query) does not pay for
            it. ``None`` (the default): when the session holds at least
            2,048 items; ``False``: never (the index is
            built by the first query that needs it).
        parts: How the search index cuts items (``EmbedParts``); with a build
            ahead, the vectors stored for that cut are read as the session opens.

    Raises:
        InvalidSessionIdError: if ``session_id`` is not a valid id.
        StoreError: if the store cannot be read.
        CorruptSessionError: if a stored item cannot be decoded.
    """

    def __init__(
        self,
        store: Store,
        session_id: str,
        *,
        step_key: str = "step",
        max_items: int | None = None,
        callbacks: Iterable[ChangeCallback] = (),
        on_unencodable: OnUnencodable = "error",
        on_unknown_class: OnUnknownClass = "error",
        metadata: Mapping[str, Any] | None = None,
        owns_store: bool = False,
        index_ahead: bool | None = None,
        parts: EmbedParts | None = None,
    ) -> None:
        sid = check_session_id(session_id)
        if index_ahead not in (None, True, False):
            msg = f"StoredMemory(index_ahead=...) takes True, False or None, got {index_ahead!r}."
            raise ArgumentTypeError(msg)
        if not isinstance(store, Store):
            msg = f"StoredMemory takes a store from open_store(), got {type(store).__name__}."
            raise ArgumentTypeError(msg)
        self._sid = sid
        self._session = SessionWriter(store, sid, step_key, on_unencodable)
        self._on_unknown_class: OnUnknownClass = on_unknown_class
        self._owns_store = owns_store
        self._metadata: dict[str, Any] = {}
        self._opened = False  # until then, metadata assignments stay in RAM
        self._index_ahead = index_ahead
        super().__init__(
            step_key=step_key,
            max_items=max_items,
            callbacks=callbacks,
            session_id=sid,
            writer=self._session,
        )
        _cut(self, parts)  # before the vectors are read (and before any write: it may refuse)
        if metadata is not None:
            store.set_metadata(sid, metadata, step_key=step_key)
        self.reload()
        self._opened = True

    # -- identity ---------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """The session this memory reads and writes (fixed when it is opened)."""
        return self._sid

    @session_id.setter
    def session_id(self, value: str | None) -> None:
        if value != self._sid:
            msg = f"The session id of a stored memory is fixed ({self._sid!r}); open another session with open_memory(url, {value!r})."
            raise AttributeError(msg)  # attribute protocol: a read-only attribute was assigned

    @property
    def metadata(self) -> dict[str, Any]:
        """The session's metadata, as saved in the store.

        Assigning a new dict writes it to the store before it takes effect
        (loading a session file does the same with the file's metadata).
        After changing the dict in place, call :meth:`save_metadata`.
        """
        return self._metadata

    @metadata.setter
    def metadata(self, value: Mapping[str, Any]) -> None:
        if self._opened:
            self.store.set_metadata(self._sid, value, step_key=self.step_key)
        self._metadata = dict(value)

    def save_metadata(self) -> None:
        """Write :attr:`metadata` to the store (after changing the dict in place).

        Raises:
            SerializationError: if a value cannot be encoded; the store is unchanged.
            StoreError: if the store cannot be written.
        """
        self.store.set_metadata(self._sid, self._metadata, step_key=self.step_key)

    @property
    def store(self) -> Store:
        """The store that holds this memory's session."""
        return self._session.store

    # -- store-side operations -----------------------------------------------------

    def save_item(self, item: MemoryItem) -> None:
        """Write ``item``'s current fields to the store (after mutating a value in place).

        The same as ``memory.item_changed(item)``.

        Raises:
            ItemNotFoundError: if ``item`` is not held by this memory.
            SerializationError: if a value cannot be encoded; the store is unchanged.
            StoreError: if the store cannot be written.
        """
        self.item_changed(item)

    def keep_last(self, n: int) -> int:
        """Delete all but the last ``n`` items, in the store and in RAM; return how many went.

        Raises:
            ValueError: if ``n`` is not an int >= 0.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        with self._lock:
            with self._session.batch() as batch:
                batch.keep_last(n)
            return self._drop_deleted_rows(batch.deleted)

    def expire(self, older_than: dt.timedelta | float) -> int:
        """Delete the items written more than ``older_than`` ago, in the store and in RAM.

        Raises:
            ValueError: if ``older_than`` is negative.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        with self._lock:
            with self._session.batch() as batch:
                batch.expire(older_than)
            return self._drop_deleted_rows(batch.deleted)

    def refresh(self) -> int:
        """Fetch the items other processes appended since the last read, and return how many.

        They are added after the items this memory holds, through the same
        path as ``add_memory_items`` (callbacks run with an ``"add"`` change,
        ``max_items`` evicts from RAM and store). Deletions made by other
        processes are seen by :meth:`reload`.

        Raises:
            StoreError: if the store cannot be read.
            CorruptSessionError: if a stored item cannot be decoded.
        """
        session = self._session
        with self._lock:
            records = [
                record
                for record in self._records(after=session.last_read)
                if not session.holds_row(record.seq)
            ]
            if not records:
                return 0
            with session.already_stored(records):
                self.add_memory_items([record.item for record in records])
            keys = {record.item.get_value(KEY_FIELD) for record in records}
            self._file_stored_records([key for key in keys if type(key) is str and key])
            return len(records)

    def reload(self) -> None:
        """Replace the content and metadata with the session as the store holds them now (no callbacks run).

        Raises:
            StoreError: if the store cannot be read.
            CorruptSessionError: if a stored item cannot be decoded; the memory is unchanged.
        """
        # One collector pause over read, decode, items and step index: the
        # collector would otherwise walk the growing heap of live items again
        # each time the allocations after the decode trigger it.
        with self._lock, collector_paused(BULK_VALUES):
            info = self.store.session_info(self._sid)
            records = self._records(after=None)
            with self._session.already_stored(records):
                self.load([record.item for record in records])
            self._file_stored_records(None)
            if info is not None:
                self._metadata = info.metadata
                self.created_at = info.created.isoformat()
            # Under the same pause: the build's snapshot of the items allocates too.
            _start_index(self, self._index_ahead, self._session)

    def close(self) -> None:
        """Close the store if this memory opened it (``open_memory`` with a URL)."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<StoredMemory {self._sid!r} of {self.store.url}: {len(self)} items, step_key={self.step_key!r}>"

    # -- search in the store: its keyword index and its vectors ------------------------

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        keys: Iterable[str] | None = None,
        mode: SearchMode = "keyword",
        where: Where | None = None,
        embedder: Embedder | None = None,
    ) -> list[Hit]:
        """Return the ``k`` items that best match ``query``, best first, as ``Memory.search`` does.

        In semantic and hybrid modes the vectors come from the store: the
        items the store holds no vector for are embedded once and their
        vectors stored (unless the store is read-only), and the vectors the
        memory lacks are read from the store rather than computed. So a
        reopened session, or one that another process embedded, is not
        embedded again, and the hits are those of ``Memory.search`` on the
        same items with the same embedder. A session whose stored vectors
        (over ``keys``) pass the store handle's budget
        (``Store.vectors_over_budget``) leaves them in the store, which
        answers those queries to the same hits and floats, a filter function
        asked of the memory's own items; a hybrid query with ``keys`` or a
        filter (a function, or fields) takes its keyword side from the memory's index and
        its cosines from the store, those of the keyword hits that cannot
        rank left unread by the store's bounds (see docs/search.md).

        In keyword mode without ``keys``, a store with a keyword index
        (SQLite, PostgreSQL; see ``Store.keyword_index``) ranks the
        session and the memory's own items are returned, so no in-RAM index
        is built; ``where`` filters the store's ranking, asking it for more
        until ``k`` hits pass (a filter of fields is handed to the store,
        which may skip in SQL the rows that cannot pass; a function of the
        item is asked of the memory's own items). The hits, scores (to float rounding) and
        matched fields are those of ``Memory.search``. With ``keys``, with a
        search index of another tokenizer, and on stores without a keyword
        index, the in-RAM index answers. The store ranks the session as it
        holds it: rows another process appended count once :meth:`refresh`
        brings them in.

        Raises:
            InvalidQueryError: for an empty query, ``k`` outside 1 to 2**63 - 1, an unknown mode or a bad filter.
            CorruptStoreError: if the store's keyword index is damaged or missing.
            EmbeddingError: if the embedder returns the wrong shape or NaN.
            EmbedderMismatchError: if the session's vectors come from another model;
                nothing is changed (see :meth:`drop_vectors`).
            StoreError: if the store cannot be read or written.
        """
        keys = _vector_keys(query, k, keys, mode)
        ahead = _ahead_hits(self, self._session, self._lock, query, k, mode, keys, where, embedder)
        if ahead is not None or _store_ranks(self, mode, keys):
            found = self._store_search(query, k, where) if ahead is None else ahead
            return [hit for _, hit in found]
        # Semantic needs no keyword index: the build waits at its next slice, store check included.
        with _builds_paused(self) if mode == "semantic" else contextlib.nullcontext():
            embedder = self._with_stored_vectors(keys, mode, embedder)
            return super().search(query, k, keys=keys, mode=mode, where=where, embedder=embedder)

    def recall(
        self,
        query: str,
        k: int = 3,
        *,
        recent: Window | None = None,
        keys: Iterable[str] | None = None,
        mode: SearchMode = "keyword",
        where: Where | None = None,
        embedder: Embedder | None = None,
    ) -> list[MemoryItem]:
        """Return the top ``k`` hits and the ``recent`` window's items, once each, in session order.

        Semantic and hybrid modes use the store's vectors, and keyword mode
        the store's keyword index, as :meth:`search` does.

        Raises:
            InvalidQueryError: as :meth:`search`.
            EmbedderMismatchError: if the session's vectors come from another model.
            BudgetExceededError: if the window's pinned items alone break its bounds.
        """
        keys = _vector_keys(query, k, keys, mode)
        ahead = _ahead_hits(self, self._session, self._lock, query, k, mode, keys, where, embedder)
        if ahead is not None or _store_ranks(self, mode, keys):
            with self._lock:
                found = self._store_search(query, k, where) if ahead is None else ahead
                chosen = [hit.item for _, hit in found]
                if recent is not None:
                    from agents.memory.prompt import select_window

                    chosen.extend(select_window(self, recent).items)
                return self._session.in_memory_order(chosen)
        embedder = self._with_stored_vectors(keys, mode, embedder)
        return super().recall(
            query, k, recent=recent, keys=keys, mode=mode, where=where, embedder=embedder
        )

    def _with_stored_vectors(
        self, keys: Iterable[str] | None, mode: SearchMode, embedder: Embedder | None
    ) -> Embedder | None:
        """Before a semantic or hybrid query in RAM (``keys`` checked by :func:`_vector_keys`): have the store embed what it lacks, adopt its vectors; return the embedder to query with."""
        if mode not in ("semantic", "hybrid"):
            return embedder
        return self._vectors_from_store(embedder, checked_keys(keys))

    def index_embeddings(
        self,
        embedder: Embedder | None = None,
        *,
        keys: Iterable[str] | None = None,
        batch_size: int = 256,
        progress: bool | Callable[[int, int], object] = False,
    ) -> int:
        """Embed the items the store holds no vector for, store their vectors, and return how many items hold one.

        Unlike ``Memory.index_embeddings``, an embedder of another model than
        the stored vectors is refused; call :meth:`drop_vectors` first to
        embed the session again with it. Vectors over the store's budget
        stay there (see :meth:`search`); the count is then the store's.

        Args:
            embedder: The model (default: the memory's, else ``WordLlamaEmbedder``).
            keys: Embed the text of these fields only.
            batch_size: Texts per embedder call.
            progress: ``True`` draws a progress bar on stderr; a callable is
                called as ``progress(done, total)`` after each batch.

        Raises:
            EmbedderMismatchError: if the session's vectors come from another model.
            EmbeddingError: if the embedder returns the wrong shape or NaN.
            StoreError: if the store cannot be read or written.
        """
        report = progress_bar if progress is True else (progress or None)
        keys = checked_keys(keys)  # once: an iterator of keys is read here
        with self._lock:  # over the store's budget the vectors stay there: the store's count
            held = _embedded_in_store(self, embedder, keys, batch_size, report)
            if held is None:
                model = self._vectors_from_store(
                    embedder, keys, batch_size=batch_size, progress=report
                )
                held = super().index_embeddings(model, keys=keys, batch_size=batch_size)
            return held

    def drop_vectors(self) -> int:
        """Delete the session's vectors in the store and in RAM, to embed it again with another model.

        Returns:
            How many vector rows the store deleted.

        Raises:
            StoreError: if the store cannot be written.
        """
        from agents.memory import search

        with self._lock:
            gone = self.store.drop_vectors(self._sid)
            search.search_index(self).drop_vectors()
            return gone

    # -- internals -----------------------------------------------------------------

    def _vectors_from_store(
        self,
        embedder: Embedder | None,
        wanted: tuple[str, ...] | None,
        *,
        batch_size: int = 256,
        progress: Callable[[int, int], object] | None = None,
    ) -> Embedder:
        """Give the search index the vectors it lacks from the store, embedding there what the store lacks; return the embedder.

        Every item of the memory has a row in the store, and a change to an
        item reaches both, so when the index lacks no vector there is
        nothing to ask the store (a query then costs what it costs in RAM).
        """
        from agents.memory import search

        with self._lock:
            model = search.embedder_for(self, embedder)
            store = self.store
            index = search.search_index(self)
            parts = index.parts  # the store keeps vectors cut as the index cuts them
            missing = index.missing_vectors(wanted)
            if not missing:
                store.read_vectors(self._sid, model, seqs=[])  # still refuse another model
                return model
            if not store.read_only and store.keeps_vectors:
                store.index_embeddings(
                    self._sid,
                    model,
                    keys=wanted,
                    batch_size=batch_size,
                    progress=progress,
                    parts=parts,
                )
            seq_of = self._session.seqs_of(missing)
            # Many missing (a reopened session): one pass over the vectors beats a list of seqs.
            seqs = None if len(seq_of) > 1000 else list(seq_of.values())
            stored = store.read_vectors(self._sid, model, keys=wanted, seqs=seqs, parts=parts)
            key_of = {seq: key for key, seq in seq_of.items()}
            index.adopt_vectors(
                model,
                wanted,
                {key_of[seq]: vector for seq, vector in stored.items() if seq in key_of},
            )
            return model

    def _records(self, *, after: int | None) -> list[StoredRecord]:
        return self.store.records(
            self._sid, after=after or None, on_unknown_class=self._on_unknown_class
        )

    def _store_search(self, query: str, k: int, where: Where | None) -> list[tuple[int, Hit]]:
        """Return ``(seq, hit)`` of the best ``k`` items by the store's ranking that pass ``where``."""
        from agents.memory.search import Filter

        checked_query(query)
        check_k(k)
        predicate = Filter.of(where)
        tokenizer = Tokenizer()
        wanted = set(tokenizer(query))
        session = self._session
        # A filter of fields goes to the store too, which can skip the rows that cannot pass
        # (in SQL) rather than rank ever deeper; a function of the item is asked here only.
        pushed = predicate if isinstance(where, Mapping) else None
        limit = k
        with self._lock:
            while True:
                with _builds_paused(self):  # the filter, the caller's function, is asked outside
                    ranked = self.store.ranking(self._sid, query, limit, where=pushed)
                hits = _own_hits(session, ranked, wanted, k, predicate)
                if len(hits) == k or len(ranked) < limit:
                    return hits
                limit *= 4  # the filter (or rows this memory does not hold) dropped some

    # -- keyed records: written to the store first, then filed in RAM ---------------------

    def _put_record(self, key: str, record: MemoryItem) -> None:
        """Put the record in the store (one transaction), then replace it in RAM without writing again."""
        session = self._session
        seq = self.store.put_record(
            self._sid, key, record, step_key=self.step_key, on_unencodable=session.on_unencodable
        )
        held = self._record_held(key)
        if held is not None:
            with session.already_deleted():
                self._delete_record(held)
        with session.already_stored([StoredRecord(seq, record)], read=False):
            self._add_record(key, record)

    def _remove_record(self, key: str, held: int) -> None:
        """Delete the record in the store (one transaction), then its item in RAM without writing again."""
        self.store.delete_record(self._sid, key)
        with self._session.already_deleted():
            self._delete_record(held)

    def _file_stored_records(self, keys: Sequence[str] | None) -> None:
        """File in RAM the store's records (those under ``keys``; all if ``None``) whose rows the memory holds."""
        if not self.store.backend.keeps_records or keys == []:
            return
        stored = self.store.read_records(self._sid, keys, on_unknown_class=self._on_unknown_class)
        held = self._session.keys_of_rows(record.seq for record in stored)
        self._file_records((r.key, held[r.seq]) for r in stored if r.seq in held)

    def _drop_deleted_rows(self, seqs: Sequence[int]) -> int:
        """Remove from RAM the items whose rows the store just deleted (the writer's delete finds them gone)."""
        return self.delete_items(self._session.items_at(seqs))


def _cut(memory: StoredMemory, parts: object) -> None:
    """Have the memory's search index cut items as ``parts`` (an ``EmbedParts``; ``None``: as it does)."""
    if parts is None:
        return
    if not isinstance(parts, EmbedParts):
        msg = f"StoredMemory(parts=...) takes an EmbedParts, got {parts!r}."
        raise ArgumentTypeError(msg)
    from agents.memory import search

    search.search_index(memory, parts=parts)


def _store_ranks(memory: StoredMemory, mode: str, keys: Iterable[str] | None) -> bool:
    """Return whether a search goes to the store (keyword mode, all fields, the default tokenizer)."""
    if mode != "keyword" or keys is not None or not memory.store.keyword_index:
        return False
    default = Tokenizer()
    # A search index made with another tokenizer (a stemmer) ranks by other terms.
    return all(getattr(o, "tokenizer", default) == default for o in memory.observers)


def _vector_keys(
    query: str, k: int, keys: Iterable[str] | None, mode: SearchMode
) -> Iterable[str] | None:
    """Return the ``keys`` of a semantic or hybrid query as a checked tuple (read once: an iterator of keys is consumed here), after the query and ``k``; keyword mode passes them through."""
    if mode not in ("semantic", "hybrid"):
        return keys
    checked_query(query)
    check_k(k)
    return checked_keys(keys)


def _builds_paused(memory: StoredMemory) -> contextlib.ExitStack:
    """Return a context that holds the memory's builds ahead in flight while the store ranks (see ``SearchIndex.build_paused``)."""
    from agents.memory.search import SearchIndex

    held = contextlib.ExitStack()
    for observer in memory.observers:
        if isinstance(observer, SearchIndex) and observer.building():
            held.enter_context(observer.build_paused())
    return held


def _ahead_hits(
    memory: StoredMemory,
    session: SessionWriter,
    lock: contextlib.AbstractContextManager[Any],
    query: str,
    k: int,
    mode: SearchMode,
    keys: Iterable[str] | None,
    where: Where | None,
    embedder: Embedder | None,
) -> list[tuple[int, Hit]] | None:
    """Return ``(seq, hit)`` of the store's semantic or hybrid ranking while the in-RAM index is still built ahead, or while the session's vectors stay in the store; else ``None``.

    The store ranks (``Store.search``: its keyword index and its vectors)
    while the build thread makes the index and reads the vectors (all
    fields, no filter or a filter of fields, a query holding a word); once
    that is done, RAM answers, unless the session's vectors stay in the
    store (over its budget: :func:`_left_in_store`), which then answers
    every such query: semantic ones with ``keys`` or a filter function too,
    and whatever words the query holds (hybrid ones with ``keys`` or a
    filter, once built, take the keyword side from the memory's index and the
    store's cosines, pruned by its bounds: :func:`_hybrid_keys_in_store`). Only for the default
    tokenizer and a store with a keyword index that keeps vectors. The
    hits are the memory's own items.
    """
    from agents.memory import search

    store = memory.store
    if mode not in ("semantic", "hybrid"):
        return None
    if not (store.keyword_index and store.keeps_vectors and _store_ranks(memory, "keyword", None)):
        return None
    keys = checked_keys(keys)  # a tuple already (_vector_keys): checked again for its type
    fields_filter = where is None or isinstance(where, Mapping)
    index = search.search_index(memory)
    if mode == "hybrid" and (
        keys is not None or not fields_filter or (where is not None and not index.building())
    ):
        # The keyword side from the memory's index, the cosines from the store: the store's
        # keyword side over a field subset reads and tokenizes every row at each query (its
        # keyword index holds all fields): 4.7 s a warm query at 50,000 steps; its blend walked
        # for a filter function it tests rescores the keyword candidates' cosines from the
        # rows (past its coded table's bounds): 5.5 s. A filter of fields too, once built (its
        # values caught up): the store's filtered walk ranks the blend 4 k deep, and a query of
        # common words whose blend is flat past its best few walked every keyword hit and read
        # each one's vectors (3.5-8.8 s at 50,000 steps, against 0.1 s pruned by the bounds).
        return _hybrid_keys_in_store(memory, index, session, lock, query, k, keys, where, embedder)
    tokenizer = Tokenizer()
    wanted = set(tokenizer(query)) if isinstance(query, str) else set()
    if index.building() and keys is None and fields_filter and wanted:
        if mode == "semantic" and where is None and not index.missing_vectors(None):
            return None  # every vector taken as the session opened: RAM answers, as warm
        model = search.embedder_for(memory, embedder)
        if mode == "hybrid" and where is None and _holds_vectors(index, model):
            return _hybrid_from_ram(memory, session, lock, query, k, model, wanted)
    elif not index.missing_vectors(keys):
        return None  # the index holds every vector: RAM answers (a session under the budget)
    else:
        model = search.embedder_for(memory, embedder)
        if not _left_in_store(memory, index, keys, model):
            return None
    # A filter is asked of the memory's own items down the unfiltered semantic ranking (cosines
    # do not depend on how deep it is ranked), as keyword mode does: a function always; a filter
    # of fields that the index's values say many items pass, while _WALKED_DEPTH * k rows are
    # enough, then the store, which skips in SQL the rows that cannot pass (its filtered ranking
    # scores every row exactly: 1.5-2.0 s at 50,000 steps cut into parts, against 0.15-0.22 s
    # for the walk). A rare filter goes to the store at once (the walk would add 0.3 s).
    predicate = None if where is None or mode != "semantic" else search.Filter.of(where)
    if predicate is not None and fields_filter and not index.building():
        predicate = None if index.passing(predicate) is not None else predicate  # rare: not walked
    pushed = where if predicate is None else None
    limit = k
    # The build stops at its next slice meanwhile: it would hold the interpreter between the
    # store's reads; not while the caller's function is asked (it may search this memory).
    paused = index.build_paused() if fields_filter else contextlib.nullcontext()
    with lock, paused:
        while True:
            found = store.search(
                memory.session_id,
                query,
                limit,
                keys=keys,
                mode=mode,
                embedder=model,
                where=pushed,
                parts=index.parts,
            )
            ranked = [(hit.seq, hit.score) for hit in found]
            hits = _own_hits(session, ranked, wanted, k, predicate, keys)
            if len(hits) == k or len(found) < limit:
                index.embedder = model  # remembered once it worked, as a query in RAM does
                return hits
            if pushed is None and fields_filter and limit >= _WALKED_DEPTH * k:
                # A rare filter of fields: the store's filtered ranking, from k again.
                pushed, predicate, limit = where, None, k
                continue
            limit *= 4


def _hybrid_keys_in_store(
    memory: StoredMemory,
    index: SearchIndex,
    session: SessionWriter,
    lock: contextlib.AbstractContextManager[Any],
    query: str,
    k: int,
    keys: tuple[str, ...] | None,
    where: Where | None,
    embedder: Embedder | None,
) -> list[tuple[int, Hit]] | None:
    """Return ``(seq, hit)`` of a hybrid query over ``keys`` (or with a filter) whose vectors stay in the store: the keyword side from the memory's index, the cosines from the store (``Store.cosines``); ``None`` where the index takes the vectors.

    A filter of fields that the index's values say few items may pass
    (``SearchIndex.passing``) has the blend ask the cosines of those few;
    a filter function, or one many items may pass, has it read the cosines
    of only the keyword hits that pass and can still rank, by the store's
    bounds of them (``Store.cosine_ceilings``, from the coded table), not
    of every keyword hit (tens of thousands read exactly from the rows:
    1.6-1.9 s at 50,000 steps).

    The store's keyword index holds all fields: its keyword side over a
    field subset read and tokenized every row at each query (4.7 s warm at
    50,000 steps). The memory's index holds each field's statistics, and
    the store gives the cosines the blend asks for (its pool and the
    keyword candidates) from its coded table: the hits and floats of
    ``Memory.search`` with the vectors in RAM. ``index`` is the memory's
    search index (``search.search_index(memory)``, as :func:`_ahead_hits`
    took it).
    """
    from agents.memory import search

    if not index.missing_vectors(keys):
        return None  # the index holds every vector: RAM answers (a session under the budget)
    if where is not None and index.building():
        return None  # RAM answers once built (the filter's values are caught up then)
    model = search.embedder_for(memory, embedder)
    if not _left_in_store(memory, index, keys, model):
        return None
    store = memory.store
    vector = checked_vectors(model, [query])[0]  # embedded once, for each depth of the walk

    def cosines(pool: int, among: Sequence[int]) -> dict[int, float]:
        seq_of = session.seqs_of(among)
        wanted = list(seq_of.values())
        # Rows another process appended (not refreshed) may crowd the store's best: asked
        # past them, then the memory's own best `pool` (with ties) kept, as its index ranks.
        limit = pool + max(0, store.count(memory.session_id) - len(memory))
        while True:
            found = store.cosines(
                memory.session_id,
                vector,
                limit,
                embedder=model,
                keys=keys,
                among=wanted,
                parts=index.parts,
            )
            key_of = session.keys_of_rows(found)
            own = {key_of[seq]: cosine for seq, cosine in found.items() if seq in key_of}
            if len(own) - len(wanted) >= pool or len(found) - len(wanted) < limit:
                break
            limit *= 4  # the rows another process appended outnumber the count's guess
        if len(own) > pool:
            cut = heapq.nlargest(pool, own.values())[-1]
            kept = set(among)
            own = {key: cosine for key, cosine in own.items() if cosine >= cut or key in kept}
        return own

    def bounds(among: Sequence[int]) -> dict[int, float] | None:
        seq_of = session.seqs_of(among)
        found = store.cosine_ceilings(
            memory.session_id, vector, seq_of.values(), embedder=model, keys=keys, parts=index.parts
        )
        if found is None:
            return None
        key_of = session.keys_of_rows(found)
        return {key_of[seq]: bound for seq, bound in found.items() if seq in key_of}

    with lock:
        hits = search.search(
            memory,
            query,
            k,
            keys=keys,
            mode="hybrid",
            where=where,
            embedder=model,
            cosines=cosines,
            bounds=bounds,
        )
        index.embedder = model  # remembered once it worked, as a query in RAM does
        key_at = index.keys_of([hit.item for hit in hits])
        seq_of = session.seqs_of(key_at.values())
        return [(seq_of[key_at[id(hit.item)]], hit) for hit in hits]


def _left_in_store(
    memory: StoredMemory, index: Any, keys: tuple[str, ...] | None, model: Embedder
) -> bool:
    """Return whether the session's vectors over ``keys`` stay in the store: the index lacks some and the store's pass its budget.

    Such a session (100,000 steps cut into parts: 2 GiB of float32) is
    kept coded by the store, which answers its semantic and hybrid queries
    exactly (``Store.search``); the index holding them all would cost 26-37 s
    and GiBs at the first query after its build. An index that holds every
    vector answers (a session under the budget); one that misses some
    (opened over the budget, or grown past it) forgets those it holds, so
    that a session grown past the budget while open does not keep them.
    The vectors the store lacks (fields never asked for, steps added since)
    are embedded and stored first, as a query in RAM has the store do, so
    that they count: the first query with new ``keys`` does not read them
    all into RAM to find them over the budget.
    """
    if not index.missing_vectors(keys):
        return False
    store = memory.store
    sid = memory.session_id
    over = store.vectors_over_budget(sid, keys=keys, parts=index.parts)
    if not over and not store.read_only:
        store.index_embeddings(sid, model, keys=keys, parts=index.parts)
        over = store.vectors_over_budget(sid, keys=keys, parts=index.parts)
    if not over:
        return False
    if len(index.missing_vectors(keys)) < len(memory):
        # It held these keys' vectors (grown past the budget since): it forgets them. The
        # vectors of other keys, taken under the budget (or by a hybrid query with keys), stay.
        index.drop_vectors()
    return True


def _embedded_in_store(
    memory: StoredMemory,
    embedder: Embedder | None,
    keys: tuple[str, ...] | None,
    batch_size: int,
    progress: Callable[[int, int], object] | None,
) -> int | None:
    """Embed in the store the items it holds no vector for; return how many items hold one, where the session's vectors over ``keys`` then pass its budget (else ``None``: the index takes them).

    Over the budget the vectors stay in the store (:func:`_left_in_store`),
    which answers the queries; the count is the store's (its rows with a
    vector, the memory's items where no other process appended since).
    """
    from agents.memory import search

    store = memory.store
    if store.read_only or not store.keeps_vectors:
        return None
    index = search.search_index(memory)
    if not index.missing_vectors(keys):
        return None  # the index holds every vector: under the budget
    model = search.embedder_for(memory, embedder)
    held = store.index_embeddings(
        memory.session_id,
        model,
        keys=keys,
        batch_size=batch_size,
        progress=progress,
        parts=index.parts,
    )
    if not _left_in_store(memory, index, keys, model):
        return None
    index.embedder = model
    return held


def _own_hits(
    session: SessionWriter,
    ranked: Iterable[tuple[int, float]],
    wanted: set[str],
    k: int,
    predicate: Callable[[MemoryItem], bool] | None = None,
    keys: tuple[str, ...] | None = None,
) -> list[tuple[int, Hit]]:
    """Return ``(seq, hit)`` of the first ``k`` of a store's ``(seq, score)`` ranking that the memory holds and ``predicate`` passes, with the fields (of ``keys``) holding a query word."""
    from agents.memory.search import Hit

    tokenizer = Tokenizer()
    hits: list[tuple[int, Hit]] = []
    for seq, score in ranked:
        item = session.item_of_row(seq)
        if item is None:
            continue  # a row another process appended: not this memory's
        if predicate is not None and not predicate(item):
            continue
        fields = {
            field: None
            for field, text in item_texts(item_fields(item), None)
            if (keys is None or field in keys) and not wanted.isdisjoint(tokenizer(text))
        }
        hits.append((seq, Hit(item, score, tuple(fields))))
        if len(hits) == k:
            break
    return hits


def _holds_vectors(index: Any, model: Embedder) -> bool:
    """Return whether the memory's index holds a vector of ``model`` for every item (taken as the session opened)."""
    return index.vector_model() == model.name and not index.missing_vectors(None)


def _hybrid_from_ram(
    memory: StoredMemory,
    session: SessionWriter,
    lock: contextlib.AbstractContextManager[Any],
    query: str,
    k: int,
    model: Embedder,
    wanted: set[str],
) -> list[tuple[int, Hit]]:
    """Return ``(seq, hit)`` of a hybrid query whose keyword side the store ranks and whose cosines the memory's index gives.

    The vectors were taken as the session opened, so the cosines are those
    a warm query computes (the same floats), from RAM; the store ranks
    only what the build has not made yet, the keyword side
    (``Store.hybrid_ranking``). The store reads and scores no vector then:
    its own cosines (pgvector) cost about half of its hybrid query.
    """
    from agents.memory import search

    index = search.search_index(memory)
    vector = checked_vectors(model, [query])[0]  # embedded once, for each depth of the walk

    def cosines(pool: int, among: Sequence[int]) -> dict[int, float]:
        keys = session.keys_of_rows(among)  # rows another process appended hold none here
        found = index.semantic_scores(
            model, query, None, limit=pool, among=list(keys.values()), vector=vector
        )
        seq_of = session.seqs_of(found)
        return {seq_of[key]: cosine for key, cosine in found.items() if key in seq_of}

    def held(seqs: Sequence[int]) -> dict[int, MemoryItem]:
        # The memory's own items (the leader and near hits the blend reads): no statement.
        found = ((seq, session.item_of_row(seq)) for seq in seqs)
        return {seq: item for seq, item in found if item is not None}

    limit = k
    with lock, index.build_paused():
        while True:
            ranked = memory.store.hybrid_ranking(
                memory.session_id, query, limit, embedder=model, cosines=cosines, items=held
            )
            hits = _own_hits(session, ranked, wanted, k)
            if len(hits) == k or len(ranked) < limit:
                index.embedder = model
                return hits
            limit *= 4


def _start_index(memory: StoredMemory, ahead: bool | None, session: SessionWriter) -> None:
    """Take the session's stored vectors now and start building the memory's keyword index on another thread, as ``index_ahead`` asks.

    The vectors are read here, before the build starts, so that a semantic
    query made at once after opening is answered in RAM as a warm one is
    (the index takes them in bulk: see ``SearchIndex.adopt_vectors``).
    """
    from agents.memory import search

    if ahead is False or not len(memory) or (ahead is None and len(memory) < _AHEAD_ITEMS):
        return
    index = search.search_index(memory)
    read = _stored_vectors(memory, session)
    if read is not None:
        try:
            # Vectors over the store's budget stay there: it answers the queries (_left_in_store).
            over = memory.store.vectors_over_budget(memory.session_id, parts=index.parts)
            found = None if over else read(index.parts)
        except StoreError:  # nothing is taken: the first semantic query reads them (and says why)
            found = None
        if found is not None:
            with contextlib.suppress(EmbedderMismatchError):  # the query will say so
                # Screened by the build, after its keyword index: not in the open or the first query.
                index.adopt_vectors(found[0], None, found[1], screen=False)
    index.build_ahead()


class _StoredModel:
    """The model a session's stored vectors came from, as the reads of vectors take an embedder: its name and dimension.

    It embeds nothing: vectors read with it were made by the model it names.
    """

    def __init__(self, name: str, dimension: int) -> None:
        self.name = name
        self.dimension = dimension

    def __call__(self, texts: Sequence[str], /) -> Any:
        msg = f"The stored vectors of model {self.name!r} are read, not computed: nothing embeds here."
        raise EmbeddingError(msg)


def _stored_vectors(
    memory: StoredMemory, session: SessionWriter
) -> Callable[[EmbedParts], tuple[Embedder, dict[int, Any]] | None] | None:
    """Return how a build ahead reads the vectors the store keeps for the memory's items now (``None``: it keeps none)."""
    store = memory.store
    if not store.keeps_vectors:
        return None
    sid = memory.session_id
    key_of = session.rows_held()  # the rows as they are now: the build's snapshot

    def read(parts: EmbedParts) -> tuple[Embedder, dict[int, Any]] | None:
        model = store.vector_model(sid)
        if model is None:
            return None
        embedder = _StoredModel(model.name, model.dimension)
        stored = store.read_vectors(sid, embedder, parts=parts)
        return embedder, {key_of[seq]: vector for seq, vector in stored.items() if seq in key_of}

    return read
