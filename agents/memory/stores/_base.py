"""What every store shares: the protocol, session-id rules, encoding of rows.

A store keeps *rows*: one per item, holding the item's encoded bytes (the
codec's wire form, exactly what ``Memory.to_json`` writes for that item), a
*step text* (the item's step value encoded in one canonical way, so that step
filters can be answered by the store without decoding items), the time the
row was written, and a *seq*: a number the store gives the row when it is
appended. Within a session, rows are read in seq order, which is the order in
which their appends committed.

Concrete stores implement a handful of row-level primitives (``_write``,
``_fetch``, ...); :class:`BaseStore` turns items into rows and back through
the codec, validates session ids and arguments, and offers the public calls.
"""

from __future__ import annotations

import abc
import datetime as dt
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol, runtime_checkable

import attrs
import orjson
from typing_extensions import Self

from agents.memory import _codec
from agents.memory._codec import OnUnencodable
from agents.memory._item import NOTHING, MemoryItem, OnUnknownClass, decode_items, dumps_item
from agents.memory.exceptions import (
    CorruptSessionError,
    CorruptStoreError,
    InvalidSessionIdError,
    StoreError,
)

__all__ = [
    "SESSION_ID_MAX_LENGTH",
    "BaseStore",
    "Row",
    "Store",
    "StoredRecord",
    "WriteBatch",
    "check_session_id",
    "step_text",
]

SESSION_ID_MAX_LENGTH: Final = 128
_SESSION_ID: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")

Row = tuple[str | None, float, bytes]
"""One row to write: ``(step_text, created_unix_time, encoded_item)``."""


def check_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a valid session id, else raise.

    A session id is 1 to 128 characters among ASCII letters, digits, ``_``,
    ``.`` and ``-``, and does not start with ``.`` or ``-``. It is matched
    exactly (no prefix or wildcard), and is safe as a file name and as a bound
    SQL parameter.

    Raises:
        InvalidSessionIdError: naming the id and the rule it breaks.
    """
    if type(session_id) is not str:
        msg = (
            f"A session id must be a string, got {session_id!r} ({type(session_id).__name__}); "
            "every store call names the session it reads or writes."
        )
        raise InvalidSessionIdError(msg)
    if not session_id:
        msg = "A session id must not be empty; pick a name such as 'run-1'."
        raise InvalidSessionIdError(msg)
    if len(session_id) > SESSION_ID_MAX_LENGTH:
        msg = (
            f"Session id {session_id[:40]!r}... is {len(session_id)} characters long; "
            f"the limit is {SESSION_ID_MAX_LENGTH}."
        )
        raise InvalidSessionIdError(msg)
    if _SESSION_ID.fullmatch(session_id) is None:
        msg = (
            f"Session id {session_id!r} holds characters a store does not accept; use ASCII "
            "letters, digits, '_', '.' and '-' (not first), with no path separators, quotes or spaces."
        )
        raise InvalidSessionIdError(msg)
    return session_id


def step_text(value: Any) -> str | None:
    """Return the canonical text a store files a step value under (``None`` for no step).

    Numbers that Python counts as equal (``1``, ``1.0``, ``True``) get the same
    text, as they share one entry in ``Memory``'s step index; other values are
    written as their compact codec JSON.
    """
    if value is NOTHING:
        return None
    cls = type(value)
    if cls is int:
        return str(value)  # the common case, and what the codec would write
    if cls is bool:
        return "1" if value else "0"
    if cls is float and value.is_integer():
        return str(int(value))
    return _codec.dumps(_codec.encode_value(value, on_unencodable="repr")).decode("utf-8")


@attrs.frozen
class StoredRecord:
    """One item as a store holds it: its seq in the session and the decoded item."""

    seq: int
    item: MemoryItem


@runtime_checkable
class Store(Protocol):
    """The calls every kvmemory store answers the same way.

    Every call names its session; there is no call that reads "all sessions"
    by leaving the id out.
    """

    @property
    def url(self) -> str:
        """The URL the store was opened with (passwords hidden)."""
        ...

    def append(
        self,
        session_id: str,
        items: Iterable[MemoryItem],
        *,
        step_key: str = "step",
        on_unencodable: OnUnencodable = "error",
    ) -> list[int]:
        """Append ``items`` to a session in one transaction and return their seqs."""
        ...

    def read(
        self,
        session_id: str,
        *,
        steps: Iterable[Any] | None = None,
        after: int | None = None,
        on_unknown_class: OnUnknownClass = "error",
    ) -> list[MemoryItem]:
        """Return a session's items in order, optionally only some steps or those after a seq."""
        ...

    def records(
        self,
        session_id: str,
        *,
        steps: Iterable[Any] | None = None,
        after: int | None = None,
        on_unknown_class: OnUnknownClass = "error",
    ) -> list[StoredRecord]:
        """Return :meth:`read`'s items with their seqs."""
        ...

    def project(
        self, session_id: str, keys: Iterable[str], *, steps: Iterable[Any] | None = None
    ) -> list[dict[str, Any]]:
        """Return one dict of the chosen keys per item, in order."""
        ...

    def count(self, session_id: str) -> int:
        """Return the number of items of a session."""
        ...

    def delete_steps(self, session_id: str, steps: Iterable[Any]) -> int:
        """Delete every item of ``steps`` from a session and return how many went."""
        ...

    def delete_seqs(self, session_id: str, seqs: Iterable[int]) -> int:
        """Delete items by seq from a session and return how many went."""
        ...

    def clear(self, session_id: str) -> int:
        """Delete every item of a session (the session stays listed) and return how many went."""
        ...

    def sessions(self) -> list[str]:
        """Return the ids of the sessions in the store, sorted."""
        ...

    def delete_session(self, session_id: str) -> bool:
        """Delete a session and its items; return whether it existed."""
        ...

    def keep_last(self, session_id: str, n: int) -> int:
        """Delete all but the last ``n`` items of a session and return how many went."""
        ...

    def expire(self, session_id: str, older_than: dt.timedelta | float) -> int:
        """Delete the items of a session written more than ``older_than`` ago."""
        ...

    def close(self) -> None:
        """Release the store's connections and files."""
        ...


class BaseStore(abc.ABC):
    """The shared half of every store: validation, encoding and decoding.

    Subclasses implement the row-level primitives. All of them may assume a
    valid session id; :class:`BaseStore` checks it before calling them.
    """

    schema_version: int = 1
    """The layout version this kvmemory writes."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._closed = False
        self._close_lock = threading.Lock()

    # -- row-level primitives, one set per store ------------------------------

    @abc.abstractmethod
    def _write(
        self,
        session_id: str,
        step_key: str,
        *,
        add: Sequence[Row] = (),
        delete: Sequence[int] = (),
        update: Sequence[tuple[int, str | None, bytes]] = (),
        clear: bool = False,
    ) -> tuple[list[int], int]:
        """Apply one transaction: clear, delete seqs, update rows, then append rows.

        ``step_key`` is checked against (or recorded for) the session only when
        rows are added. Returns the seqs given to the appended rows, in order,
        and the number of rows deleted by ``delete``.
        """

    @abc.abstractmethod
    def _fetch(
        self, session_id: str, *, steps: Sequence[str] | None, after: int | None
    ) -> list[tuple[int, bytes]]:
        """Return ``(seq, data)`` of matching rows in seq order."""

    def _fetch_keys(
        self, session_id: str, keys: Sequence[str], *, steps: Sequence[str] | None
    ) -> list[tuple[int, bytes]]:
        """Return ``(seq, data)`` of matching rows, where ``data`` may hold only ``keys``.

        A store that can cut rows down to some keys in its query language
        overrides this; by default whole rows are read and cut in Python.
        """
        return self._fetch(session_id, steps=steps, after=None)

    @abc.abstractmethod
    def _count(self, session_id: str) -> int: ...

    @abc.abstractmethod
    def _delete_steps(self, session_id: str, steps: Sequence[str]) -> list[int]: ...

    @abc.abstractmethod
    def _clear(self, session_id: str) -> int: ...

    @abc.abstractmethod
    def _sessions(self) -> list[str]: ...

    @abc.abstractmethod
    def _delete_session(self, session_id: str) -> bool: ...

    @abc.abstractmethod
    def _keep_last(self, session_id: str, n: int) -> list[int]: ...

    @abc.abstractmethod
    def _expire(self, session_id: str, cutoff: float) -> list[int]: ...

    @abc.abstractmethod
    def _close(self) -> None: ...

    # -- public calls -----------------------------------------------------------

    @property
    def url(self) -> str:
        """The URL the store was opened with (passwords hidden)."""
        return self._url

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def append(
        self,
        session_id: str,
        items: Iterable[MemoryItem],
        *,
        step_key: str = "step",
        on_unencodable: OnUnencodable = "error",
    ) -> list[int]:
        """Append ``items`` to a session in one transaction and return their seqs.

        The session is created on its first append and remembers ``step_key``.

        Args:
            session_id: The session to append to.
            items: The items, in order.
            step_key: The field that names an item's step.
            on_unencodable: The codec's policy for values JSON cannot hold.

        Returns:
            The seqs given to the items, increasing.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            TypeError: if an element is not a ``MemoryItem``; nothing is written.
            SerializationError: if a value cannot be encoded; nothing is written.
            StoreError: if the store cannot be written, or the session was
                created with another ``step_key``; nothing is written.
        """
        sid = self._check(session_id)
        batch = list(items)
        for position, item in enumerate(batch):
            if not isinstance(item, MemoryItem):
                msg = f"Element {position} is a {type(item).__name__}, not a MemoryItem; nothing was written to session {sid!r}."
                raise TypeError(msg)
        rows = encode_rows(batch, step_key, on_unencodable)
        return self._write(sid, step_key, add=rows)[0]

    def read(
        self,
        session_id: str,
        *,
        steps: Iterable[Any] | None = None,
        after: int | None = None,
        on_unknown_class: OnUnknownClass = "error",
    ) -> list[MemoryItem]:
        """Return a session's items in seq order.

        Args:
            session_id: The session to read; an unknown session reads as empty.
            steps: Only items whose step is one of these (answered by the store).
            after: Only items with a seq greater than this.
            on_unknown_class: ``"base"`` reads items whose class cannot be
                imported as plain ``MemoryItem`` instead of raising.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        records = self.records(
            session_id, steps=steps, after=after, on_unknown_class=on_unknown_class
        )
        return [record.item for record in records]

    def records(
        self,
        session_id: str,
        *,
        steps: Iterable[Any] | None = None,
        after: int | None = None,
        on_unknown_class: OnUnknownClass = "error",
    ) -> list[StoredRecord]:
        """Return :meth:`read`'s items with their seqs.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        sid = self._check(session_id)
        texts = None if steps is None else _step_texts(steps)
        if after is not None and type(after) is not int:
            msg = f"after must be an int seq or None, got {after!r}."
            raise TypeError(msg)
        if texts == []:
            return []
        rows = self._fetch(sid, steps=texts, after=after)
        return decode_rows(rows, f"session {sid!r} of {self._url}", on_unknown_class)

    def project(
        self, session_id: str, keys: Iterable[str], *, steps: Iterable[Any] | None = None
    ) -> list[dict[str, Any]]:
        """Return, for each item of a session, a new dict of its fields among ``keys``.

        The store's side of ``Memory.filter_memory_from_keys``: one dict per
        item in seq order, ``{}`` for an item that holds none of the keys,
        fields in the order of ``keys``, values decoded through the codec.
        PostgreSQL cuts large rows down to ``keys`` on the server, so big
        fields that are not asked for (screenshots, long pages) are never
        sent. SQLite reads whole rows: its JSON functions measured slower
        than decoding whole rows in Python (``benchmarks/bench_stores.py``).

        Args:
            session_id: The session to read; an unknown session reads as empty.
            keys: The field keys to keep.
            steps: Only items whose step is one of these.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            TypeError: if a key is not a string.
            CorruptSessionError: if a stored item cannot be decoded.
            StoreError: if the store cannot be read.
        """
        sid = self._check(session_id)
        wanted = list(keys) if not isinstance(keys, str) else [keys]
        for key in wanted:
            if type(key) is not str:
                msg = f"project() takes string keys, got {key!r} ({type(key).__name__})."
                raise TypeError(msg)
        texts = None if steps is None else _step_texts(steps)
        if texts == []:
            return []
        rows = self._fetch_keys(sid, wanted, steps=texts)
        pairs = decode_pairs(rows, f"session {sid!r} of {self._url}", "base")
        return [{k: f[k] for k in wanted if k in f} for f in (item._fields for _, item in pairs)]

    def batch(
        self,
        session_id: str,
        *,
        step_key: str = "step",
        on_unencodable: OnUnencodable = "error",
    ) -> WriteBatch:
        """Return a batch of writes to one session, applied together when its ``with`` block ends.

        Example::

            with store.batch("run-1") as batch:
                batch.delete([3, 4])
                batch.append([MemoryItem(step=5)])
            batch.appended   # the seqs the new items got

        Args:
            session_id: The session to write.
            step_key: The field that names an item's step.
            on_unencodable: The codec's policy for values JSON cannot hold.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
        """
        return WriteBatch(self, self._check(session_id), step_key, on_unencodable)

    def count(self, session_id: str) -> int:
        """Return the number of items of a session (0 for an unknown session).

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
        """
        return self._count(self._check(session_id))

    def delete_steps(self, session_id: str, steps: Iterable[Any]) -> int:
        """Delete every item whose step is in ``steps`` and return how many went.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        sid = self._check(session_id)
        texts = _step_texts(steps)
        return len(self._delete_steps(sid, texts)) if texts else 0

    def delete_seqs(self, session_id: str, seqs: Iterable[int]) -> int:
        """Delete items by seq and return how many of them existed.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        sid = self._check(session_id)
        wanted = sorted(set(seqs))
        if not wanted:
            return 0
        return self._write(sid, "", delete=wanted)[1]

    def clear(self, session_id: str) -> int:
        """Delete every item of a session and return how many went; the session stays listed.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        return self._clear(self._check(session_id))

    def sessions(self) -> list[str]:
        """Return the ids of every session in the store, sorted.

        Raises:
            StoreError: if the store cannot be read.
        """
        return self._sessions()

    def delete_session(self, session_id: str) -> bool:
        """Delete a session with its items; return whether it existed.

        Raises:
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        return self._delete_session(self._check(session_id))

    def keep_last(self, session_id: str, n: int) -> int:
        """Delete all but the last ``n`` items of a session and return how many went.

        Raises:
            ValueError: if ``n`` is not an int >= 0.
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        return len(self._retain_last(session_id, n))

    def expire(self, session_id: str, older_than: dt.timedelta | float) -> int:
        """Delete the items of a session written more than ``older_than`` ago.

        Args:
            session_id: The session to trim.
            older_than: An age, as a ``timedelta`` or a number of seconds.

        Returns:
            How many items were deleted.

        Raises:
            ValueError: if ``older_than`` is negative or not a duration.
            InvalidSessionIdError: if ``session_id`` is not a valid id.
            StoreError: if the store cannot be written; nothing is deleted.
        """
        return len(self._retain_younger(session_id, older_than))

    def close(self) -> None:
        """Release the store's connections and files; closing twice is harmless."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<{type(self).__name__} {self._url!r}{state}>"

    # -- helpers shared with StoredMemory ------------------------------------------

    def _check(self, session_id: object) -> str:
        if self._closed:
            msg = f"Store {self._url} is closed; open it again with open_store()."
            raise StoreError(msg)
        return check_session_id(session_id)

    def _retain_last(self, session_id: str, n: int) -> list[int]:
        sid = self._check(session_id)
        if type(n) is not int or n < 0:
            msg = f"keep_last() takes n >= 0 (an int), got {n!r}."
            raise ValueError(msg)
        return self._keep_last(sid, n)

    def _retain_younger(self, session_id: str, older_than: dt.timedelta | float) -> list[int]:
        sid = self._check(session_id)
        if isinstance(older_than, dt.timedelta):
            seconds = older_than.total_seconds()
        elif type(older_than) in (int, float):
            seconds = float(older_than)
        else:
            msg = f"expire() takes older_than as a timedelta or seconds, got {older_than!r}."
            raise ValueError(msg)
        if not seconds >= 0:
            msg = f"expire() takes a non-negative age, got {older_than!r}."
            raise ValueError(msg)
        return self._expire(sid, time.time() - seconds)


class WriteBatch:
    """Writes to one session, staged by its calls and applied when the ``with`` block ends.

    Each call encodes at once, so a value the codec refuses raises before
    anything is written. On a clean exit the staged writes are applied in
    this order: clear, deletes, updates, appends, then ``keep_last`` and
    ``expire``; leaving the block with an exception writes nothing. Get one
    from :meth:`BaseStore.batch`.

    After the block, :attr:`appended` holds the seqs given to the appended
    items (in order) and :attr:`deleted` the seqs removed by ``keep_last``
    and ``expire``.
    """

    def __init__(
        self, store: BaseStore, session_id: str, step_key: str, on_unencodable: OnUnencodable
    ) -> None:
        self._store = store
        self.session_id = session_id
        self.step_key = step_key
        self._on_unencodable: OnUnencodable = on_unencodable
        self._clear = False
        self._delete: list[int] = []
        self._update: list[tuple[int, str | None, bytes]] = []
        self._append: list[Row] = []
        self._keep_last: int | None = None
        self._older_than: dt.timedelta | float | None = None
        self.appended: list[int] = []
        self.deleted: list[int] = []

    def append(self, items: Sequence[MemoryItem]) -> None:
        """Stage appending ``items``, in order.

        Raises:
            SerializationError: if a value cannot be encoded; nothing is staged.
        """
        self._append.extend(encode_rows(items, self.step_key, self._on_unencodable))

    def update(self, items: Mapping[int, MemoryItem]) -> None:
        """Stage replacing the stored fields of the rows ``items`` names by seq.

        Raises:
            SerializationError: if a value cannot be encoded; nothing is staged.
        """
        seqs = list(items)
        rows = encode_rows(list(items.values()), self.step_key, self._on_unencodable)
        self._update.extend(
            (seq, step, data) for seq, (step, _, data) in zip(seqs, rows, strict=True)
        )

    def delete(self, seqs: Iterable[int]) -> None:
        """Stage deleting the rows ``seqs`` names (seqs that do not exist are ignored)."""
        self._delete.extend(seqs)

    def clear(self) -> None:
        """Stage deleting every row of the session (applied before the other writes)."""
        self._clear = True
        self._delete.clear()
        self._update.clear()

    def keep_last(self, n: int) -> None:
        """Stage deleting all but the last ``n`` rows (applied after the appends)."""
        self._keep_last = n

    def expire(self, older_than: dt.timedelta | float) -> None:
        """Stage deleting the rows written more than ``older_than`` ago (applied last)."""
        self._older_than = older_than

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is not None:
            return
        store = self._store
        sid = self.session_id
        if self._clear or self._delete or self._update or self._append:
            self.appended, _ = store._write(
                sid,
                self.step_key,
                add=self._append,
                delete=sorted(set(self._delete)),
                update=self._update,
                clear=self._clear,
            )
        if self._keep_last is not None:
            self.deleted.extend(store._retain_last(sid, self._keep_last))
        if self._older_than is not None:
            self.deleted.extend(store._retain_younger(sid, self._older_than))


def encode_rows(
    items: Sequence[MemoryItem], step_key: str, on_unencodable: OnUnencodable
) -> list[Row]:
    """Encode items into rows through the codec (all or nothing).

    Raises:
        SerializationError: naming the key and step of a value that cannot be encoded.
    """
    now = time.time()
    rows: list[Row] = []
    for item in items:
        step = item._fields.get(step_key, NOTHING)
        data = dumps_item(item, step_key=step_key, on_unencodable=on_unencodable)
        rows.append((step_text(step), now, data))
    return rows


def decode_rows(
    rows: Iterable[tuple[int, bytes]], source: str, on_unknown_class: OnUnknownClass = "error"
) -> list[StoredRecord]:
    """Decode ``(seq, data)`` rows into records through the codec.

    Raises:
        CorruptStoreError: naming the seq and session of a row that is not valid JSON.
        CorruptSessionError: naming the seq and session of a row that is not a valid item.
    """
    pairs = decode_pairs(rows, source, on_unknown_class)
    return [StoredRecord(seq, item) for seq, item in pairs]


def decode_pairs(
    rows: Iterable[tuple[int, bytes]], source: str, on_unknown_class: OnUnknownClass = "error"
) -> list[tuple[int, MemoryItem]]:
    """Decode ``(seq, data)`` rows into ``(seq, item)`` pairs (the fast path of :func:`decode_rows`).

    Raises:
        CorruptStoreError: naming the seq and session of a row that is not valid JSON.
        CorruptSessionError: naming the seq and session of a row that is not a valid item.
    """
    rows = rows if isinstance(rows, list) else list(rows)
    seqs = [seq for seq, _ in rows]
    try:
        # One C-level pass; the loop below only runs to name a damaged row.
        wires = list(map(orjson.loads, [data for _, data in rows]))
    except orjson.JSONDecodeError:
        for seq, data in rows:
            try:
                _codec.loads(data, source=source)
            except CorruptSessionError as exc:
                msg = f"Item {seq} of {source} is damaged: {exc}"
                raise CorruptStoreError(msg) from exc
        raise  # pragma: no cover - the loop above finds the row orjson refused
    items = decode_items(
        wires, where=lambda i: f"item {seqs[i]} of {source}", on_unknown_class=on_unknown_class
    )
    return list(zip(seqs, items, strict=True))


def _step_texts(steps: Iterable[Any]) -> list[str]:
    if isinstance(steps, (str, bytes)):
        msg = f"steps must be an iterable of step values, got the single value {steps!r}; wrap it: [{steps!r}]."
        raise TypeError(msg)
    out: dict[str, None] = {}
    for step in steps:
        text = step_text(step)
        if text is not None:
            out[text] = None
    return list(out)
