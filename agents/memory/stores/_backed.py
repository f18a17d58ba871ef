"""``StoredMemory``: a ``Memory`` whose every change is written through to a store.

The store is the durable copy; RAM serves the reads. Each change is written
to the store *first*, in one transaction, and applied in RAM only once the
store has it, so a failed write (disk full, database locked past the
timeout, a value the codec cannot encode) raises and leaves both copies as
they were:

* ``add_memory_item`` / ``add_memory_items``: one transaction that appends the
  items and, under ``max_items``, deletes the items evicted to make room.
* ``delete_memory_item`` and ``clear``: the store deletes first.
* ``load`` and the other whole-content replacements: one transaction that
  clears the session and appends the new items.
* Changing a field of an item that the memory holds (``item.set_value``,
  ``item["k"] = v``, ``del item["k"]``), including from a change callback, is
  written at once as an update of that item's row; if the write fails the
  field change is undone and the error raised. Mutating a value *in place*
  (``item["tags"].append(x)``) cannot be seen: call :meth:`StoredMemory.save_item`.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from typing_extensions import Self

from agents.memory._codec import OnUnencodable
from agents.memory._item import NOTHING, MemoryItem
from agents.memory.memory import ChangeCallback, Memory, MemoryChange
from agents.memory.stores._base import (
    BaseStore,
    check_session_id,
    decode_pairs,
    decode_rows,
    encode_rows,
    step_text,
)

__all__ = ["StoredMemory"]


class StoredMemory(Memory):
    """A ``Memory`` backed by a durable store, one session of it.

    Opening loads the session's items (same classes, same order); every add,
    delete, clear and field change is written through before the call
    returns. Reads are served from RAM. :meth:`refresh` fetches what other
    processes appended since.

    Args:
        store: An open store (see :func:`agents.memory.stores.open_store`).
        session_id: The session to open or create.
        step_key: The field that names an item's step.
        max_items: Keep at most this many items, in RAM and in the store.
        callbacks: Run after each change as ``callback(memory, change)``.
        on_unencodable: The codec's policy for values JSON cannot hold.
        metadata: Free-form data about the session (kept in RAM, saved by ``save``).
        owns_store: Close the store when the memory is closed.

    Raises:
        InvalidSessionIdError: if ``session_id`` is not a valid id.
        StoreError: if the store cannot be read.
        CorruptSessionError: if a stored item cannot be decoded.
    """

    def __init__(
        self,
        store: BaseStore,
        session_id: str,
        *,
        step_key: str = "step",
        max_items: int | None = None,
        callbacks: Iterable[ChangeCallback] = (),
        on_unencodable: OnUnencodable = "error",
        metadata: Mapping[str, Any] | None = None,
        owns_store: bool = False,
    ) -> None:
        sid = check_session_id(session_id)
        if not isinstance(store, BaseStore):
            msg = f"StoredMemory takes a store from open_store(), got {type(store).__name__}."
            raise TypeError(msg)
        self._sid = sid
        super().__init__(
            step_key=step_key,
            max_items=max_items,
            callbacks=callbacks,
            session_id=sid,
            metadata=metadata,
        )
        self._store = store
        self._owns_store = owns_store
        self._on_unencodable: OnUnencodable = on_unencodable
        # memory seq -> store seq, and back; the store seq of every item in RAM.
        self._to_store: dict[int, int] = {}
        self._from_store: dict[int, int] = {}
        # The highest store seq read from the store (not counting own appends).
        self._synced = -1
        self._load_records(self._read_pairs())

    # -- identity ---------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """The session this memory reads and writes (fixed when it is opened)."""
        return self._sid

    @session_id.setter
    def session_id(self, value: str | None) -> None:
        if value != self._sid:
            msg = f"The session id of a stored memory is fixed ({self._sid!r}); open another session with open_memory(url, {value!r})."
            raise AttributeError(msg)

    @property
    def store(self) -> BaseStore:
        """The store that holds this memory's session."""
        return self._store

    # -- writes --------------------------------------------------------------------

    def _add(self, batch: list[MemoryItem]) -> None:
        """Write the batch (and the evictions ``max_items`` implies) to the store, then to RAM.

        Raises:
            SerializationError: if a value cannot be encoded; nothing is added.
            StoreError: if the store cannot be written; nothing is added.
        """
        with self._lock:
            rows = encode_rows(batch, self._step_key, self._on_unencodable)
            bound = self._max_items
            evict_seqs: list[int] = []
            skip = 0
            if bound is not None:
                excess = len(self._items) + len(batch) - bound
                if excess > 0:
                    evict_seqs = list(itertools.islice(self._items, excess))
                    # Items of the batch that would be evicted at once are not written.
                    skip = max(excess - len(self._items), 0)
            store_seqs, _ = self._store._write(
                self._sid,
                self._step_key,
                add=rows[skip:],
                delete=[self._to_store[seq] for seq in evict_seqs],
            )
            start = self._next_seq
            for item in batch:
                self._append(item)
            for offset, store_seq in enumerate(store_seqs, start=start + skip):
                self._map(offset, store_seq)
            evicted = self._evict()
            self._forget(evict_seqs)
            self._announce_add(batch, evicted)

    def delete_memory_item(self, step: Any) -> int:
        """Delete every item of ``step``, in the store first, and return how many went.

        Raises:
            StoreError: if the store cannot be written; nothing is deleted.
            CallbackError: if a callback raised; the items stay deleted.
        """
        with self._lock:
            seqs = self._seqs_of_steps((step,))
            if not seqs:
                return 0
            self._store._write(self._sid, self._step_key, delete=[self._to_store[s] for s in seqs])
            self._forget(seqs)
            return super().delete_memory_item(step)

    def clear(self) -> None:
        """Remove every item, from the store first.

        Raises:
            StoreError: if the store cannot be written; nothing is removed.
            CallbackError: if a callback raised; the memory stays cleared.
        """
        with self._lock:
            self._store._write(self._sid, self._step_key, clear=True)
            self._to_store.clear()
            self._from_store.clear()
            super().clear()

    def save_item(self, item: MemoryItem) -> None:
        """Write ``item``'s current fields to the store (after mutating a value in place).

        Raises:
            ValueError: if ``item`` is not held by this memory.
            SerializationError: if a value cannot be encoded; the store is unchanged.
            StoreError: if the store cannot be written.
        """
        with self._lock:
            seqs = self._seqs_holding(item, item._fields.get(self._step_key, NOTHING))
            if not seqs:
                msg = f"{item!r} is not an item of stored session {self._sid!r}; add it with add_memory_item()."
                raise ValueError(msg)
            self._write_update(item, seqs)

    # -- retention and other processes -------------------------------------------------

    def keep_last(self, n: int) -> int:
        """Delete all but the last ``n`` items, in the store and in RAM; return how many went.

        Raises:
            ValueError: if ``n`` is not an int >= 0.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        with self._lock:
            return self._drop_store_seqs(self._store._retain_last(self._sid, n))

    def expire(self, older_than: dt.timedelta | float) -> int:
        """Delete the items written more than ``older_than`` ago, in the store and in RAM.

        Raises:
            ValueError: if ``older_than`` is negative.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        with self._lock:
            return self._drop_store_seqs(self._store._retain_younger(self._sid, older_than))

    def refresh(self) -> int:
        """Fetch the items other processes appended since the last read, and return how many.

        Only rows newer than the last one read are fetched. They are added
        after the items this memory holds and the callbacks run with an
        ``"add"`` change. Deletions made by other processes are seen by
        :meth:`reload`.

        Raises:
            StoreError: if the store cannot be read.
            CorruptSessionError: if a stored item cannot be decoded.
        """
        with self._lock:
            sid = self._sid
            after = None if self._synced < 0 else self._synced
            rows = self._store._fetch(sid, steps=None, after=after)
            if not rows:
                return 0
            # Rows this memory appended itself are already here; decode only the others'.
            known = self._from_store
            records = decode_rows(
                [row for row in rows if row[0] not in known],
                f"session {sid!r} of {self._store.url}",
            )
            self._synced = max(self._synced, rows[-1][0])
            if not records:
                return 0
            start = self._next_seq
            for offset, record in enumerate(records, start=start):
                self._append(record.item)
                self._map(offset, record.seq)
            evicted = self._evict()
            if evicted:
                self._forget_missing()
            self._announce_add([record.item for record in records], evicted)
            return len(records)

    def reload(self) -> None:
        """Replace the content with the session as the store holds it now (no callbacks run).

        Raises:
            StoreError: if the store cannot be read.
            CorruptSessionError: if a stored item cannot be decoded; the memory is unchanged.
        """
        pairs = self._read_pairs()
        with self._lock:
            self._load_records(pairs)

    def close(self) -> None:
        """Close the store if this memory opened it (``open_memory`` with a URL)."""
        if self._owns_store:
            self._store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<StoredMemory {self._sid!r} of {self._store.url}: {len(self._items)} items, step_key={self._step_key!r}>"

    # -- hooks of Memory ---------------------------------------------------------------

    def _replace(self, items: list[MemoryItem]) -> None:
        with self._lock:
            bound = self._max_items
            kept = items if bound is None else items[max(len(items) - bound, 0) :]
            rows = encode_rows(kept, self._step_key, self._on_unencodable)
            store_seqs, _ = self._store._write(self._sid, self._step_key, clear=True, add=rows)
            self._to_store.clear()
            self._from_store.clear()
            super()._replace(items)
            self._index()
            first = self._next_seq - len(kept)
            for offset, store_seq in enumerate(store_seqs, start=first):
                self._map(offset, store_seq)

    def _apply_header(self, header: Mapping[str, Any]) -> None:
        # A loaded file's session id and step key do not move a stored memory
        # to another session or re-file its rows; metadata and creation time do apply.
        if header:
            kept = {k: v for k, v in header.items() if k not in ("session_id", "step_key")}
            super()._apply_header(kept)

    def _reset(self) -> None:
        super()._reset()
        self._index()  # keep items linked, so that field changes reach _item_changed

    def _item_changed(self, item: MemoryItem, key: str, old: Any, new: Any) -> None:
        with self._lock:
            step = old if key == self._step_key else item._fields.get(self._step_key, NOTHING)
            seqs = self._seqs_holding(item, step)
            if seqs:
                try:
                    self._write_update(item, seqs)
                except BaseException:
                    _undo(item, key, old)
                    raise
            super()._item_changed(item, key, old, new)

    # -- internals ---------------------------------------------------------------------

    def _read_pairs(self) -> list[tuple[int, MemoryItem]]:
        sid = self._sid
        rows = self._store._fetch(sid, steps=None, after=None)
        return decode_pairs(rows, f"session {sid!r} of {self._store.url}")

    def _load_records(self, pairs: list[tuple[int, MemoryItem]]) -> None:
        Memory._replace(self, [item for _, item in pairs])
        self._index()
        self._to_store.clear()
        self._from_store.clear()
        kept = pairs[len(pairs) - len(self._items) :] if self._items else []
        to_store = self._to_store
        for seq, (store_seq, _) in zip(self._items, kept, strict=True):
            to_store[seq] = store_seq
        self._from_store = {store_seq: seq for seq, store_seq in to_store.items()}
        self._synced = pairs[-1][0] if pairs else -1

    def _map(self, seq: int, store_seq: int) -> None:
        self._to_store[seq] = store_seq
        self._from_store[store_seq] = seq

    def _forget(self, seqs: Iterable[int]) -> None:
        for seq in seqs:
            store_seq = self._to_store.pop(seq, None)
            if store_seq is not None:
                self._from_store.pop(store_seq, None)

    def _forget_missing(self) -> None:
        gone = [seq for seq in self._to_store if seq not in self._items]
        self._forget(gone)

    def _seqs_holding(self, item: MemoryItem, step: Any) -> list[int]:
        self._index()
        items = self._items
        return [seq for seq in self._slot(step) if items.get(seq) is item]

    def _write_update(self, item: MemoryItem, seqs: list[int]) -> None:
        rows = encode_rows([item], self._step_key, self._on_unencodable)
        text = step_text(item._fields.get(self._step_key, NOTHING))
        data = rows[0][2]
        self._store._write(
            self._sid,
            self._step_key,
            update=[(self._to_store[seq], text, data) for seq in seqs if seq in self._to_store],
        )

    def _drop_store_seqs(self, store_seqs: list[int]) -> int:
        seqs = [self._from_store[s] for s in store_seqs if s in self._from_store]
        if not seqs:
            return 0
        removed = [self._remove_seq(seq) for seq in seqs]
        self._forget(seqs)
        self._list = None
        if self._callbacks:
            self._run_callbacks(MemoryChange("delete", tuple(removed)))
        return len(removed)


def _undo(item: MemoryItem, key: str, old: Any) -> None:
    fields = item._fields
    if old is NOTHING:
        fields.pop(key, None)
    else:
        fields[key] = old
    item._plain = None
