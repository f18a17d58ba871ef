"""Keyed records: items filed under a key unique within their session (:class:`RecordCalls`).

A record is an ordinary item of a session that a store also files under a
key, in a column (or map) of its own beside the row, the way it files the
step: so ``get_record`` reads one row, never the session. The stored item
carries its key as its field ``"key"``. Items appended with ``append`` are
not records, whatever fields they hold.

Putting a record under a key that is taken replaces it: the old row goes
(with its keyword and vector entries, as any deleted row's) and the new
item is inserted at the end of the session with a new seq. A replaced
record so reads as a change to every follower that reads "after seq S"
(the live view, ``kvmemory show --follow``, the service's ``after``): a
replacement in place would keep its old seq, and a follower past it would
never see the new value.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import attrs

from agents.memory import _records
from agents.memory._codec import OnUnencodable
from agents.memory._item import MemoryItem, OnUnknownClass
from agents.memory.exceptions import StoreArgumentError, StoreError
from agents.memory.stores._core.encoding import KeyedRow, decode_pairs, encode_rows, rows_terms
from agents.memory.stores._core.engine import Engine, open_session

__all__ = ["KeyedRecord", "RecordCalls", "check_key", "check_keys", "keyed_item"]


@attrs.frozen
class KeyedRecord:
    """One record as a store holds it: its key, seq, the time it was put and the item (see :meth:`Store.read_records`).

    Attributes:
        key: The key the item is filed under, unique within the session.
        seq: The item's seq in the session (a replaced record gets a new one).
        created: When this version was put, as a unix time (seconds).
        item: The item, holding its key in the field ``"key"``.
    """

    key: str
    seq: int
    created: float
    item: MemoryItem


def check_key(key: object, session_id: str) -> str:
    """Return ``key`` if a record may be filed under it in a store, else raise :class:`StoreArgumentError` (see :func:`agents.memory._records.check_key`)."""
    if (
        type(key) is str
        and key
        and key.isascii()
        and len(key) <= _records.KEY_MAX_BYTES
        and "\x00" not in key
    ):
        return key  # plainly within every rule: no message to build
    where = f"session {session_id!r}"
    return _records.check_key(key, where, StoreArgumentError, StoreArgumentError)


def check_keys(keys: Iterable[str], session_id: str) -> list[str]:
    """Return ``keys`` checked, without repeats, in order (a single ``str`` is refused)."""
    if isinstance(keys, (str, bytes)):
        msg = f"keys must be an iterable of record keys, got the single value {keys!r}; wrap it: [{keys!r}]."
        raise StoreArgumentError(msg)
    return list(dict.fromkeys(check_key(key, session_id) for key in keys))


def keyed_item(key: str, item: MemoryItem | Mapping[str, Any], session_id: str) -> MemoryItem:
    """Return ``item`` as the record filed under ``key`` in a store (see :func:`agents.memory._records.keyed_item`)."""
    if type(item) is dict and _records.KEY_FIELD not in item:
        return MemoryItem.from_mapping({_records.KEY_FIELD: key, **item})  # no message to build
    return _records.keyed_item(key, item, f"session {session_id!r}", StoreArgumentError)


class RecordCalls:
    """A store's keyed-record calls (a base of :class:`~agents.memory.stores.Store`).

    Args:
        engine: The store's engine.
    """

    def __init__(self, engine: Engine) -> None:
        self._record_engine = engine

    # -- writing ---------------------------------------------------------------------

    def put_record(
        self,
        session_id: str,
        key: str,
        item: MemoryItem | Mapping[str, Any],
        *,
        step_key: str = "step",
        on_unencodable: OnUnencodable = "error",
    ) -> int:
        """File ``item`` under ``key`` in a session, replacing the record filed there; return its new seq.

        The stored item carries the key in its field ``"key"`` (the caller's
        item is not changed). A replaced record's row is deleted with its
        keyword and vector entries, and the new item is inserted at the end
        of the session with a new seq, so that every reader following the
        session after a seq sees the change; its step is the new item's own
        step field, and its time the time of this call. The session is
        created if it does not exist.

        Args:
            session_id: The session.
            key: The record's key: a non-empty ``str``, unique within the session.
            item: A ``MemoryItem`` or a mapping of fields.
            step_key: The field that names an item's step.
            on_unencodable: The codec's policy for values JSON cannot hold.

        Returns:
            The seq the record now has.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``key`` is not a non-empty ``str``, or the
                item is not an item or mapping, or its ``"key"`` field holds
                another key; nothing is written.
            SerializationError: if a value cannot be encoded; nothing is written.
            StoreError: if the store cannot be written, or its backend keeps
                no keyed rows; nothing is written.
        """
        return self.put_records(
            session_id, {key: item}, step_key=step_key, on_unencodable=on_unencodable
        )[key]

    def put_records(
        self,
        session_id: str,
        records: Mapping[str, MemoryItem | Mapping[str, Any]],
        *,
        step_key: str = "step",
        on_unencodable: OnUnencodable = "error",
        keep: Collection[str] = (),
    ) -> dict[str, int]:
        """Put several records (``{key: item}``) as :meth:`put_record` does, all in one transaction.

        All or nothing: a bad key or item, or a value the codec refuses,
        raises before anything is written. The new rows get seqs in the
        order of ``records``.

        Args:
            session_id: The session.
            records: ``{key: item}``, each item a ``MemoryItem`` or a mapping of fields.
            step_key: The field that names an item's step.
            on_unencodable: The codec's policy for values JSON cannot hold.
            keep: Fields a record keeps when it is replaced: a new item put
                under a key already filed takes the value of each of these
                fields that the old record holds (say its creation time),
                read in the same transaction; the caller's items are not
                changed.

        Returns:
            ``{key: seq}`` of the records written.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``records`` is not a mapping, or a key or
                item is refused (see :meth:`put_record`), or ``keep`` is not a
                collection of field names; nothing is written.
            SerializationError: if a value cannot be encoded; nothing is written.
            StoreError: if the store cannot be written, or its backend keeps
                no keyed rows; nothing is written.
        """
        engine = self._record_engine
        sid = engine.check_write(session_id)
        if not isinstance(records, Mapping):
            msg = f"put_records() takes a mapping of key -> item, got {type(records).__name__}; nothing was written to session {sid!r}."
            raise StoreArgumentError(msg)
        kept = _check_keep(keep, sid)
        keys = [check_key(key, sid) for key in records]
        if not keys:
            return {}
        _check_keeps_records(engine, "put records in")
        items = [keyed_item(key, records[key], sid) for key in keys]
        rows = encode_rows(items, step_key, on_unencodable)
        terms = rows_terms(items, rows, on_unencodable)
        backend = engine.backend
        with engine.errors("put records in", sid), backend.transaction(sid) as tx:
            open_session(backend, tx, sid, step_key)
            if kept:
                found = backend.read_keyed_in(tx, sid, keys)
                old = [seq for _, seq, _, _ in found]
                if found:
                    _pass_on(found, kept, keys, items, engine.source(sid))
                    rows = encode_rows(items, step_key, on_unencodable)
                    terms = rows_terms(items, rows, on_unencodable)
            else:
                old = list(backend.keyed_seqs(tx, sid, keys).values())
            if old:
                backend.delete_rows(tx, sid, old)
                backend.delete_vectors(tx, sid, old)
            seqs = backend.insert_keyed(tx, sid, rows, keys, terms)
        return dict(zip(keys, seqs, strict=True))

    def delete_record(self, session_id: str, key: str) -> bool:
        """Delete the record filed under ``key``; return whether there was one.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``key`` is not a non-empty ``str``.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        return self.delete_records(session_id, [key]) == 1

    def delete_records(self, session_id: str, keys: Iterable[str]) -> int:
        """Delete the records filed under ``keys`` in one transaction; return how many there were.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if a key is not a non-empty ``str``; nothing is deleted.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        engine = self._record_engine
        sid = engine.check_write(session_id)
        wanted = check_keys(keys, sid)
        if not wanted:
            return 0
        _check_keeps_records(engine, "delete records of")
        backend = engine.backend
        with engine.errors("delete records of", sid), backend.transaction(sid) as tx:
            if backend.lock_session(tx, sid) is None:
                return 0
            seqs = list(backend.keyed_seqs(tx, sid, wanted).values())
            gone = backend.delete_rows(tx, sid, seqs) if seqs else []
            if gone:
                backend.delete_vectors(tx, sid, gone)
            return len(gone)

    # -- reading ---------------------------------------------------------------------

    def get_record(
        self, session_id: str, key: str, *, on_unknown_class: OnUnknownClass = "error"
    ) -> MemoryItem | None:
        """Return the item filed under ``key``, or ``None`` if there is none.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``key`` is not a non-empty ``str``.
            CorruptSessionError: if the stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        found = self.read_records(session_id, [key], on_unknown_class=on_unknown_class)
        return found[0].item if found else None

    def get_records(
        self,
        session_id: str,
        keys: Iterable[str],
        *,
        on_unknown_class: OnUnknownClass = "error",
    ) -> dict[str, MemoryItem]:
        """Return ``{key: item}`` of the records filed under ``keys`` that exist, read in one query.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if a key is not a non-empty ``str``.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        engine = self._record_engine
        sid = engine.check(session_id)
        wanted = check_keys(keys, sid)
        if not wanted:
            return {}
        _check_keeps_records(engine, "read records of")
        with engine.errors("read records of", sid):
            rows = engine.backend.read_keyed(sid, wanted)
        if not rows:
            return {}
        return {
            row[0]: item for row, item in _with_items(rows, engine.source(sid), on_unknown_class)
        }

    def read_records(
        self,
        session_id: str,
        keys: Iterable[str] | None = None,
        *,
        prefix: str | None = None,
        on_unknown_class: OnUnknownClass = "error",
    ) -> list[KeyedRecord]:
        """Return the session's records with their keys, seqs and times, sorted by key, read in one query.

        Args:
            session_id: The session; an unknown session has no records.
            keys: Only the records filed under these keys (those that exist);
                all of them if ``None``.
            prefix: Only the records whose key starts with this text.
            on_unknown_class: ``"base"`` reads items whose class cannot be
                imported as plain ``MemoryItem`` instead of raising.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if a key or the prefix is not a ``str``.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        engine = self._record_engine
        sid = engine.check(session_id)
        wanted = None if keys is None else check_keys(keys, sid)
        _check_prefix(prefix, sid)
        if wanted == []:
            return []
        _check_keeps_records(engine, "read records of")
        with engine.errors("read records of", sid):
            rows = engine.backend.read_keyed(sid, wanted, prefix=prefix)
        return _decoded(rows, engine.source(sid), on_unknown_class)

    def record_keys(self, session_id: str, *, prefix: str | None = None) -> list[str]:
        """Return the keys of the session's records (those starting with ``prefix``), sorted by code point.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreArgumentError: if ``prefix`` is not a ``str``.
            StoreError: if the store cannot be read.
        """
        engine = self._record_engine
        sid = engine.check(session_id)
        _check_prefix(prefix, sid)
        _check_keeps_records(engine, "list the records of")
        with engine.errors("list the records of", sid):
            return sorted(engine.backend.record_keys(sid, prefix))


def _check_keep(keep: object, session_id: str) -> tuple[str, ...]:
    if isinstance(keep, (str, bytes)) or not isinstance(keep, Collection):
        msg = f"keep must be a collection of field names such as ('created_at',), got {keep!r}; nothing was written to session {session_id!r}."
        raise StoreArgumentError(msg)
    fields = tuple(keep)
    for field in fields:
        if type(field) is not str:
            msg = f"keep names fields by str, got {field!r} ({type(field).__name__}); nothing was written to session {session_id!r}."
            raise StoreArgumentError(msg)
    return fields


def _pass_on(
    found: Sequence[KeyedRow],
    kept: tuple[str, ...],
    keys: list[str],
    items: list[MemoryItem],
    source: str,
) -> None:
    """Copy the ``kept`` fields of the replaced records (``found``) into their new ``items``, in place."""
    position = {key: index for index, key in enumerate(keys)}
    for (key, _, _, _), before in _with_items(found, source, "base"):
        index = position[key]
        item = items[index].copy()  # never the caller's item
        for field in kept:
            if field in before:
                item.set_value(field, before.get_value(field))
        items[index] = item


def _check_prefix(prefix: object, session_id: str) -> None:
    if prefix is not None and type(prefix) is not str:
        msg = f"A record key prefix must be a str or None, got {prefix!r} ({type(prefix).__name__}) for session {session_id!r}."
        raise StoreArgumentError(msg)


def _check_keeps_records(engine: Engine, action: str) -> None:
    backend = engine.backend
    if not backend.keeps_records:
        msg = (
            f"Cannot {action} {engine.url}: its backend ({type(backend).__name__}) keeps no keyed "
            "rows; implement Backend.read_keyed, Backend.keyed_seqs and Backend.insert_keyed "
            "(see 'Writing a backend' in docs/stores.md) to use keyed records."
        )
        raise StoreError(msg)


def _with_items(
    rows: Sequence[KeyedRow], source: str, on_unknown_class: OnUnknownClass
) -> list[tuple[KeyedRow, MemoryItem]]:
    """Return each keyed row, sorted by key, beside its decoded item (one decoding pass for all)."""
    ordered = sorted(rows)
    pairs = decode_pairs([(seq, data) for _, seq, _, data in ordered], source, on_unknown_class)
    return [(row, item) for row, (_, item) in zip(ordered, pairs, strict=True)]


def _decoded(
    rows: Sequence[KeyedRow], source: str, on_unknown_class: OnUnknownClass
) -> list[KeyedRecord]:
    return [
        KeyedRecord(key, seq, float(created), item)
        for (key, seq, created, _), item in _with_items(rows, source, on_unknown_class)
    ]
