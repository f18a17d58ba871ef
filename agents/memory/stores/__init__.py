"""Durable homes for sessions: one :class:`Store` API over backends (:class:`Backend`).

Open a store by URL and a memory backed by one of its sessions::

    from agents.memory.stores import open_memory

    with open_memory("sqlite:///runs.db", "run-1") as memory:
        memory.add_memory_item(MemoryItem(step=1, action="click"))   # on disk on return

URLs:

* ``sqlite:///path/to/file.db`` or a bare path: SQLite, the embedded default
  (options ``?synchronous=full|normal|off``, ``?timeout=SECONDS``, ``?mode=ro``,
  ``?sqlite_vec=auto|on|off``).
* ``jsonl:///path/to/dir``: one append-only JSONL log per session
  (option ``?fsync=always|never``).
* ``postgresql://user:password@host:port/dbname``: PostgreSQL, for many
  processes on many machines (needs ``pip install 'kvmemory[postgres]'``;
  options ``?pgvector=auto|off``, and the pool's ``?pool_min=N`` (default 1),
  ``?pool_max=N`` (default 4) and ``?pool_timeout=SECONDS`` (default 30);
  the rest of the URL goes to libpq, ``?connect_timeout=SECONDS`` included).
  A connection the server drops (a kill, a restart) raises
  :class:`~agents.memory.StoreConnectionLostError`, never damage, and is
  replaced before the next call uses it.
* ``memory://`` (private) or ``memory://NAME`` (shared in this process).
* ``SCHEME://...`` of a backend of another package, registered with
  :func:`register_backend` or declared in the entry-point group
  ``kvmemory.backends`` (see :mod:`agents.memory.stores.backend`).

After ``sqlite://`` and ``jsonl://`` comes the path as written, so
``sqlite:///tmp/a.db`` is the absolute ``/tmp/a.db`` and ``sqlite://a.db`` the
relative ``a.db``.
"""

from __future__ import annotations

import importlib
import os
import typing

from agents.memory._filter import FilterNode
from agents.memory.stores._backed import SessionWriter, StoredMemory
from agents.memory.stores._base import (
    SESSION_ID_MAX_LENGTH,
    BaseStore,
    IndexEntry,
    Row,
    RowUpdate,
    SessionHit,
    SessionInfo,
    SessionRow,
    SessionSummary,
    StoredRecord,
    StoreHit,
    VectorModel,
    WriteBatch,
    check_session_id,
    check_store_path,
    migrate,
)
from agents.memory.stores._core.backend import Backend, Transaction
from agents.memory.stores._core.encoding import KeyedRow
from agents.memory.stores._core.records import KeyedRecord
from agents.memory.stores._core.terms import Terms
from agents.memory.stores._open import (
    ENTRY_POINT_GROUP,
    BackendOpener,
    open_store,
    register_backend,
)
from agents.memory.stores._ram import InMemoryStore
from agents.memory.stores._sqlite.backend import SQLiteBackend, SQLiteStore
from agents.memory.stores._store import Store

# Names only annotations use, kept out of the package's namespace.
if typing.TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

    from agents.memory._codec import OnUnencodable
    from agents.memory._item import OnUnknownClass
    from agents.memory._vectors import EmbedParts
    from agents.memory.memory import ChangeCallback
    from agents.memory.stores._async.store import (
        AsyncOpener,
        AsyncStore,
        AsyncStoredMemory,
        AsyncWriteBatch,
    )
    from agents.memory.stores._jsonl.backend import JSONLStore
    from agents.memory.stores._postgres.backend import PostgresBackend, PostgresStore

__all__ = [
    "ENTRY_POINT_GROUP",
    "SESSION_ID_MAX_LENGTH",
    "AsyncOpener",
    "AsyncStore",
    "AsyncStoredMemory",
    "AsyncWriteBatch",
    "Backend",
    "BackendOpener",
    "BaseStore",
    "FilterNode",
    "InMemoryStore",
    "IndexEntry",
    "JSONLStore",
    "KeyedRecord",
    "KeyedRow",
    "PostgresBackend",
    "PostgresStore",
    "Row",
    "RowUpdate",
    "SQLiteBackend",
    "SQLiteStore",
    "SessionHit",
    "SessionInfo",
    "SessionRow",
    "SessionSummary",
    "SessionWriter",
    "Store",
    "StoreHit",
    "StoredMemory",
    "StoredRecord",
    "Terms",
    "Transaction",
    "VectorModel",
    "WriteBatch",
    "check_session_id",
    "check_store_path",
    "migrate",
    "open_async_memory",
    "open_async_store",
    "open_memory",
    "open_store",
    "register_backend",
]

# Imported on first use, so that importing this package loads neither the
# JSONL store's fcntl-based locking nor, above all, psycopg.
_LAZY = {
    "AsyncOpener": "agents.memory.stores._async.store",
    "AsyncStore": "agents.memory.stores._async.store",
    "AsyncStoredMemory": "agents.memory.stores._async.store",
    "AsyncWriteBatch": "agents.memory.stores._async.store",
    "JSONLStore": "agents.memory.stores._jsonl.backend",
    "PostgresBackend": "agents.memory.stores._postgres.backend",
    "PostgresStore": "agents.memory.stores._postgres.backend",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)  # attribute protocol: the module has no such name
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def open_memory(
    store: str | os.PathLike[str] | Store,
    session_id: str,
    *,
    step_key: str = "step",
    max_items: int | None = None,
    callbacks: Iterable[ChangeCallback] = (),
    on_unencodable: OnUnencodable = "error",
    on_unknown_class: OnUnknownClass = "error",
    metadata: Mapping[str, Any] | None = None,
    index_ahead: bool | None = None,
    parts: EmbedParts | None = None,
) -> StoredMemory:
    """Open ``session_id`` of a store as a ``Memory`` that writes every change through.

    Args:
        store: A store URL or path (the memory then owns the store and closes
            it with ``close()``), or an open store (left open).
        session_id: The session to open; created on its first item.
        step_key: The field that names an item's step.
        max_items: Keep at most this many items, in RAM and in the store.
        callbacks: Run after each change as ``callback(memory, change)``.
        on_unencodable: The codec's policy for values JSON cannot hold.
        on_unknown_class: ``"base"`` reads items whose class is unknown as plain ``MemoryItem``.
        metadata: Free-form data about the session, saved in the store; ``None``
            (the default) keeps what the store holds.
        index_ahead: Build the in-RAM keyword index on another thread as the
            session opens (see ``StoredMemory``); ``None``: for sessions of
            at least 2,048 items.
        parts: How the memory's search index cuts items for semantic search
            (see ``EmbedParts``; default ``EmbedParts()``): the session's
            vectors stored for that cut are taken as it opens.

    Returns:
        The memory, holding the session's items in their stored order.

    Raises:
        InvalidSessionIdError: if ``session_id`` is not a valid id; no store is opened.
        InvalidStoreURLError: for an unknown scheme or option.
        StoreError: if the store cannot be opened or read.
    """
    check_session_id(session_id)
    owns_store = not isinstance(store, Store)
    opened = store if isinstance(store, Store) else open_store(store)
    try:
        return StoredMemory(
            opened,
            session_id,
            step_key=step_key,
            max_items=max_items,
            callbacks=callbacks,
            on_unencodable=on_unencodable,
            on_unknown_class=on_unknown_class,
            metadata=metadata,
            owns_store=owns_store,
            index_ahead=index_ahead,
            parts=parts,
        )
    except BaseException:
        if owns_store:
            opened.close()
        raise


def open_async_store(
    url: str | os.PathLike[str] | Store, *, read_only: bool = False
) -> AsyncOpener[AsyncStore]:
    """Open a store for asyncio programs: ``async with open_async_store(url) as store:``.

    Takes the URLs and paths :func:`open_store` takes (a scheme of
    :func:`register_backend` included), or an open :class:`Store`. Every
    call of the store is awaitable and runs the sync store's code without
    blocking the event loop: PostgreSQL on psycopg's asyncio driver (the
    ``async`` extra), the others (a backend of your own included) on a
    worker thread of the store's own, one call at a time (see
    :class:`AsyncStore`). ``store = await open_async_store(url)`` opens it
    without a block; close it then with ``await store.aclose()``.

    Args:
        url: A store URL, a filesystem path for a SQLite file, or an open
            :class:`Store` (``Store(MyBackend(...))``), which the async
            store then owns and closes.
        read_only: Open for inspection, as :func:`open_store`.

    Returns:
        An opener to ``await`` or to use with ``async with``.

    Raises:
        MissingDependencyError: for a PostgreSQL URL without the ``async``
            extra (when awaited or entered).
        What :func:`open_store` raises, when awaited or entered.
    """
    from agents.memory.stores._async.store import AsyncOpener, AsyncStore

    return AsyncOpener(lambda: AsyncStore.open(url, read_only=read_only))


def open_async_memory(
    store: str | os.PathLike[str] | AsyncStore,
    session_id: str,
    *,
    step_key: str = "step",
    max_items: int | None = None,
    callbacks: Iterable[ChangeCallback] = (),
    on_unencodable: OnUnencodable = "error",
    on_unknown_class: OnUnknownClass = "error",
    metadata: Mapping[str, Any] | None = None,
) -> AsyncOpener[AsyncStoredMemory]:
    """Open a session for asyncio programs: ``async with open_async_memory(url, sid) as memory:``.

    The async twin of :func:`open_memory`, with its arguments: ``await
    memory.add_memory_item(item)`` and the other writing calls return once
    the store holds the change and ``memory.view`` (the in-RAM memory, read
    with plain calls) shows it.

    Args:
        store: A store URL or path (the memory then owns the store and
            closes it), or an open :class:`AsyncStore` (left open).
        session_id: The session to open; created on its first item.
        step_key: The field that names an item's step.
        max_items: Keep at most this many items, in RAM and in the store.
        callbacks: Run after each change as ``callback(memory, change)``.
        on_unencodable: The codec's policy for values JSON cannot hold.
        on_unknown_class: ``"base"`` reads items whose class is unknown as plain ``MemoryItem``.
        metadata: Free-form data about the session, saved in the store.

    Returns:
        An opener to ``await`` or to use with ``async with``.

    Raises:
        InvalidSessionIdError: if ``session_id`` is not a valid id (at once; no store is opened).
        What :func:`open_memory` raises, when awaited or entered.
    """
    from agents.memory.stores._async.store import AsyncOpener, AsyncStore, open_memory_on

    check_session_id(session_id)

    async def opening() -> AsyncStoredMemory:
        owns_store = not isinstance(store, AsyncStore)
        opened = store if isinstance(store, AsyncStore) else await AsyncStore.open(store)
        try:
            return await open_memory_on(
                opened,
                session_id,
                owns_store=owns_store,
                step_key=step_key,
                max_items=max_items,
                callbacks=callbacks,
                on_unencodable=on_unencodable,
                on_unknown_class=on_unknown_class,
                metadata=metadata,
            )
        except BaseException:
            if owns_store:
                await opened.aclose()
            raise

    return AsyncOpener(opening)
