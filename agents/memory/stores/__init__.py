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
  option ``?pgvector=auto|off``, the rest of the URL goes to libpq).
* ``memory://`` (private) or ``memory://NAME`` (shared in this process).

After ``sqlite://`` and ``jsonl://`` comes the path as written, so
``sqlite:///tmp/a.db`` is the absolute ``/tmp/a.db`` and ``sqlite://a.db`` the
relative ``a.db``.
"""

from __future__ import annotations

import importlib
import math
import os
import typing
import urllib.parse

from agents.memory import exceptions
from agents.memory.stores._backed import SessionWriter, StoredMemory
from agents.memory.stores._backend import Backend
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
from agents.memory.stores._checks import redact_url as _redact
from agents.memory.stores._memory import InMemoryStore
from agents.memory.stores._sqlite import SQLiteBackend, SQLiteStore
from agents.memory.stores._store import Store

# Names only annotations use, kept out of the package's namespace.
if typing.TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

    from agents.memory._codec import OnUnencodable
    from agents.memory._item import OnUnknownClass
    from agents.memory.memory import ChangeCallback
    from agents.memory.stores._async import (
        AsyncOpener,
        AsyncStore,
        AsyncStoredMemory,
        AsyncWriteBatch,
    )
    from agents.memory.stores._jsonl import JSONLStore
    from agents.memory.stores._postgres import PostgresBackend, PostgresStore

__all__ = [
    "SESSION_ID_MAX_LENGTH",
    "AsyncOpener",
    "AsyncStore",
    "AsyncStoredMemory",
    "AsyncWriteBatch",
    "Backend",
    "BaseStore",
    "InMemoryStore",
    "IndexEntry",
    "JSONLStore",
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
    "VectorModel",
    "WriteBatch",
    "check_session_id",
    "check_store_path",
    "migrate",
    "open_async_memory",
    "open_async_store",
    "open_memory",
    "open_store",
]

# Imported on first use, so that importing this package loads neither the
# JSONL store's fcntl-based locking nor, above all, psycopg.
_LAZY = {
    "AsyncOpener": "agents.memory.stores._async",
    "AsyncStore": "agents.memory.stores._async",
    "AsyncStoredMemory": "agents.memory.stores._async",
    "AsyncWriteBatch": "agents.memory.stores._async",
    "JSONLStore": "agents.memory.stores._jsonl",
    "PostgresBackend": "agents.memory.stores._postgres",
    "PostgresStore": "agents.memory.stores._postgres",
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


_SCHEMES = ("sqlite", "jsonl", "postgresql", "postgres", "memory")


def open_store(url: str | os.PathLike[str], *, read_only: bool = False) -> Store:
    """Open the store named by ``url`` (see the module docs for the forms).

    Args:
        url: A store URL, or a filesystem path for a SQLite file.
        read_only: Open for inspection: nothing is created, migrated or
            written (a missing file or directory is an error, not a new
            store), and every write call raises :class:`StoreError`. Same as
            ``?mode=ro`` on a SQLite URL.

    Returns:
        An open store; close it with ``close()`` or a ``with`` block.

    Raises:
        InvalidStoreURLError: for an unknown scheme, an empty path, a path
            holding a NUL character or an unknown option.
        StoreNotFoundError: for a missing store opened read-only.
        CorruptStoreError: if the file or directory is not a kvmemory store (it is left unchanged).
        SchemaVersionError: if a newer kvmemory wrote the store, or an older
            one needs a migration that ``read_only`` forbids.
        MissingDependencyError: for ``postgresql://`` without the ``postgres``
            extra, or ``?sqlite_vec=on`` without the ``sqlite-vec`` extra.
        StoreUnreachableError: if a PostgreSQL server cannot be reached.
        StoreError: if the store cannot be opened, or ``?sqlite_vec=on`` and
            this Python's ``sqlite3`` cannot load the extension.
    """
    text = os.fspath(url)
    if type(text) is not str:
        msg = f"A store URL must be text, got {url!r}."
        raise exceptions.InvalidStoreURLError(msg)
    if "://" not in text:
        if not text:
            msg = "The store URL is empty; pass 'sqlite:///path/to/file.db' or a file path."
            raise exceptions.InvalidStoreURLError(msg)
        return SQLiteStore(text, read_only=read_only)
    scheme, _, rest = text.partition("://")
    scheme = scheme.lower()
    if scheme not in _SCHEMES:
        msg = (
            f"Unknown store URL scheme {scheme!r} in {_redact(text)!r}; use one of "
            "'sqlite:///path.db', 'jsonl:///dir', 'postgresql://...', 'memory://' or a bare file path."
        )
        raise exceptions.InvalidStoreURLError(msg)
    if scheme in ("postgresql", "postgres"):
        from agents.memory.stores._postgres import PostgresStore

        conninfo, pgvector = _pgvector_option(text)
        _check_libpq_options(conninfo, text)
        return PostgresStore(conninfo, read_only=read_only, pgvector=pgvector)
    raw_path, _, query = rest.partition("?")
    options = _options(text, query)
    path = urllib.parse.unquote(raw_path)
    if scheme == "memory":
        _no_options(text, options, ())
        return InMemoryStore(path, read_only=read_only)
    if not path:
        msg = f"Store URL {text!r} has no path; write {scheme}:///absolute/path or {scheme}://relative/path."
        raise exceptions.InvalidStoreURLError(msg)
    check_store_path(path)
    if scheme == "jsonl":
        from agents.memory.stores._jsonl import JSONLStore

        _no_options(text, options, ("fsync",))
        fsync = options.get("fsync", "always")
        if fsync not in ("always", "never"):
            msg = f"Option fsync={fsync!r} in {text!r} must be 'always' or 'never'."
            raise exceptions.InvalidStoreURLError(msg)
        return JSONLStore(path, fsync=fsync == "always", read_only=read_only, url=text)
    _no_options(text, options, ("synchronous", "timeout", "mode", "sqlite_vec"))
    synchronous = options.get("synchronous", "full").lower()
    if synchronous not in ("full", "normal", "off"):
        msg = f"Option synchronous={synchronous!r} in {text!r} must be 'full', 'normal' or 'off'."
        raise exceptions.InvalidStoreURLError(msg)
    mode = options.get("mode", "rwc")
    if mode not in ("ro", "rw", "rwc"):
        msg = f"Option mode={mode!r} in {text!r} must be 'ro' or 'rwc'."
        raise exceptions.InvalidStoreURLError(msg)
    vec = options.get("sqlite_vec", "auto")
    if vec not in _SQLITE_VEC:
        msg = f"Option sqlite_vec={vec!r} in {text!r} must be 'auto', 'on' or 'off'."
        raise exceptions.InvalidStoreURLError(msg)
    try:
        timeout = float(options.get("timeout", "30"))
    except ValueError:
        timeout = -1.0
    if not (timeout >= 0 and math.isfinite(timeout)):
        msg = f"Option timeout={options.get('timeout')!r} in {text!r} must be a finite number of seconds >= 0."
        raise exceptions.InvalidStoreURLError(msg)
    return SQLiteStore(
        path,
        synchronous=synchronous,  # type: ignore[arg-type]  # checked against the three names above
        timeout=timeout,
        read_only=read_only or mode == "ro",
        url=text,
        sqlite_vec=_SQLITE_VEC[vec],
    )


_SQLITE_VEC: dict[str, bool | None] = {"auto": None, "on": True, "off": False}


def _pgvector_option(text: str) -> tuple[str, bool]:
    """Split kvmemory's own ``pgvector=auto|off`` from a PostgreSQL URL; the rest goes to libpq as it is."""
    base, mark, query = text.partition("?")
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True) if mark else []
    chosen = [value for name, value in pairs if name == "pgvector"]
    if not chosen:
        return text, True
    if len(chosen) > 1 or chosen[0] not in ("auto", "off"):
        msg = f"Option pgvector in {_redact(text)!r} must be given once, as 'auto' or 'off'."
        raise exceptions.InvalidStoreURLError(msg)
    rest = [(name, value) for name, value in pairs if name != "pgvector"]
    conninfo = base + ("?" + urllib.parse.urlencode(rest) if rest else "")
    return conninfo, chosen[0] == "auto"


def _check_libpq_options(conninfo: str, text: str) -> None:
    """Name a connection option libpq does not know before connecting, instead of reporting the server unreachable."""
    try:
        import psycopg.conninfo
    except ImportError:
        return  # PostgresStore names the missing extra
    try:
        psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        msg = (
            f"PostgreSQL URL {_redact(text)!r} cannot be parsed by libpq: {exc}. Check the option "
            "names (libpq's connection parameters, plus kvmemory's pgvector=auto|off)."
        )
        raise exceptions.InvalidStoreURLError(msg) from exc


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
        )
    except BaseException:
        if owns_store:
            opened.close()
        raise


def open_async_store(
    url: str | os.PathLike[str], *, read_only: bool = False
) -> AsyncOpener[AsyncStore]:
    """Open a store for asyncio programs: ``async with open_async_store(url) as store:``.

    Takes the URLs and paths :func:`open_store` takes. Every call of the
    store is awaitable and runs the sync store's code without blocking the
    event loop: PostgreSQL on psycopg's asyncio driver (the ``async``
    extra), the others on a worker thread of the store's own (see
    :class:`AsyncStore`). ``store = await open_async_store(url)`` opens it
    without a block; close it then with ``await store.aclose()``.

    Args:
        url: A store URL, or a filesystem path for a SQLite file.
        read_only: Open for inspection, as :func:`open_store`.

    Returns:
        An opener to ``await`` or to use with ``async with``.

    Raises:
        MissingDependencyError: for a PostgreSQL URL without the ``async``
            extra (when awaited or entered).
        What :func:`open_store` raises, when awaited or entered.
    """
    from agents.memory.stores._async import AsyncOpener, AsyncStore

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
    from agents.memory.stores._async import AsyncOpener, AsyncStore, open_memory_on

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


def _options(url: str, query: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if key in options:
            msg = f"Option {key!r} is given twice in {url!r}."
            raise exceptions.InvalidStoreURLError(msg)
        options[key] = value
    return options


def _no_options(url: str, options: dict[str, str], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        known = ", ".join(allowed) if allowed else "none"
        msg = f"Unknown option {unknown[0]!r} in store URL {url!r}; the options of this store are: {known}."
        raise exceptions.InvalidStoreURLError(msg)
