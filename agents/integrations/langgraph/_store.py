"""``KVMemoryStore`` and ``AsyncKVMemoryStore``: LangGraph's ``BaseStore`` over a kvmemory store."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Iterable

from langgraph.store.base import BaseStore, IndexConfig, Op, Result, TTLConfig
from typing_extensions import Self

from agents.integrations.langgraph._ops import Operations, QueryMode
from agents.memory.exceptions import AgentMemoryError, StoreError
from agents.memory.stores import AsyncStore, Store, open_async_store, open_store

__all__ = ["AsyncKVMemoryStore", "KVMemoryStore", "LoopThreadError"]

_PRIVATE = "memory://"


class LoopThreadError(AgentMemoryError, asyncio.InvalidStateError):
    """A sync call of :class:`AsyncKVMemoryStore` was made on its event loop's thread (it would wait on itself)."""


class KVMemoryStore(BaseStore):
    """LangGraph's long-term memory store, kept by kvmemory.

    ``KVMemoryStore()`` keeps its items in this process, where LangGraph's
    ``InMemoryStore()`` would (same ``index=`` and ``ttl=`` arguments);
    ``KVMemoryStore("sqlite:///agent.db")`` (or any URL or path
    ``open_store`` takes: ``postgresql://...``, ``jsonl:///...``) keeps them
    in that store, where every namespace is a session that ``kvmemory show``,
    ``kvmemory serve`` and ``kvmemory mcp`` show. Use it as a context manager
    (or call :meth:`close`) to close a store it opened.

    Example::

        with KVMemoryStore("sqlite:///agent.db") as store:
            store.put(("users", "ann"), "language", {"value": "Danish"})
            graph = builder.compile(store=store)

    Beyond LangGraph: ``search(query=...)`` ranks by kvmemory's BM25 when the
    store has no ``index`` (LangGraph's stores then ignore the query), and
    ``query_mode="hybrid"`` blends BM25 with the index's vectors.

    Args:
        url: The store: a URL or path, an open :class:`~agents.memory.stores.Store`
            (left open by :meth:`close`), or ``None`` for a private in-process store.
        index: LangGraph's index configuration (``dims``, ``embed``,
            ``fields``) for semantic search; needs numpy.
        ttl: LangGraph's TTL configuration (``default_ttl`` in minutes,
            ``refresh_on_read``, ``sweep_interval_minutes``).
        query_mode: How a search query ranks: ``"keyword"`` (BM25; the
            default without ``index``), ``"semantic"`` (the default with
            one) or ``"hybrid"``.

    Raises:
        InvalidQueryError: for a ``query_mode`` that is not one of those, or a
            vector mode without ``index``.
        StoreError: and the other errors of ``open_store``, if the store cannot be opened.
    """

    supports_ttl = True

    def __init__(
        self,
        url: str | os.PathLike[str] | Store | None = None,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        query_mode: QueryMode | None = None,
    ) -> None:
        self.owns_store = not isinstance(url, Store)
        self.store = url if isinstance(url, Store) else open_store(_PRIVATE if url is None else url)
        try:
            self.operations = Operations(self.store, index, ttl, query_mode)
        except BaseException:
            if self.owns_store:
                self.store.close()
            raise
        self.index_config = index
        self.ttl_config = ttl
        self._sweeper: tuple[threading.Thread, threading.Event] | None = None
        if ttl and ttl.get("sweep_interval_minutes"):
            self.start_ttl_sweeper()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Answer LangGraph operations in order (reads first, then writes; see the module of ``Operations``)."""
        return self.operations.run(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Answer LangGraph operations on a worker thread, without blocking the event loop."""
        return await asyncio.to_thread(self.operations.run, list(ops))

    def sweep_ttl(self) -> int:
        """Delete every item whose TTL has run out, and return how many went.

        Expired items are never returned by ``get`` or ``search`` even before
        a sweep deletes them.
        """
        return self.operations.sweep(self.operations.clock())

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Sweep expired items every ``sweep_interval_minutes`` (the TTL configuration's by default) on a daemon thread."""
        if self._sweeper is not None:
            return
        minutes = (
            sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        )
        stop = threading.Event()

        def sweep() -> None:
            while not stop.wait(float(minutes) * 60.0):
                try:
                    self.sweep_ttl()
                except StoreError:  # a closed or unreachable store: try again next time
                    continue

        thread = threading.Thread(target=sweep, name="kvmemory-ttl-sweeper", daemon=True)
        self._sweeper = (thread, stop)
        thread.start()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; return whether it ended within ``timeout`` seconds."""
        if self._sweeper is None:
            return True
        thread, stop = self._sweeper
        stop.set()
        thread.join(timeout)
        self._sweeper = None
        return not thread.is_alive()

    def close(self) -> None:
        """Stop the TTL sweeper and close the store if this object opened it; closing twice is harmless."""
        self.stop_ttl_sweeper()
        if self.owns_store:
            self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KVMemoryStore({self.store.url!r})"


class AsyncKVMemoryStore(BaseStore):
    """:class:`KVMemoryStore` for asyncio programs, on kvmemory's asyncio stores: ``async with``.

    Example::

        async with AsyncKVMemoryStore("sqlite:///agent.db") as store:
            await store.aput(("users", "ann"), "language", {"value": "Danish"})

    Each batch runs as one call of the :class:`~agents.memory.stores.AsyncStore`
    (PostgreSQL on psycopg's asyncio driver, the others on the store's worker
    thread). The store opens on ``async with`` (or :meth:`setup`, or the
    first operation); the sync ``batch`` works from threads other than the
    event loop's.

    Args:
        url: A URL or path, or ``None`` for a private in-process store.
        index: LangGraph's index configuration, as :class:`KVMemoryStore`.
        ttl: LangGraph's TTL configuration, as :class:`KVMemoryStore`.
        query_mode: ``"keyword"``, ``"semantic"`` or ``"hybrid"``, as :class:`KVMemoryStore`.
    """

    supports_ttl = True

    def __init__(
        self,
        url: str | os.PathLike[str] | None = None,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        query_mode: QueryMode | None = None,
    ) -> None:
        self.url = _PRIVATE if url is None else os.fspath(url)
        self.index_config = index
        self.ttl_config = ttl
        self.query_mode = query_mode
        self.async_store: AsyncStore | None = None
        self.operations: Operations | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._opening = asyncio.Lock()

    async def setup(self) -> None:
        """Open the store (once); ``async with`` and the first operation call it."""
        async with self._opening:
            if self.operations is not None:
                return
            async_store = await open_async_store(self.url)
            try:
                self.operations = Operations(
                    async_store.store, self.index_config, self.ttl_config, self.query_mode
                )
            except BaseException:
                await async_store.aclose()
                raise
            self.async_store = async_store
            self.loop = asyncio.get_running_loop()

    async def opened(self) -> tuple[AsyncStore, Operations]:
        """Return the open asyncio store and the operations over it, opening them first if need be."""
        await self.setup()
        if (
            self.async_store is None or self.operations is None
        ):  # pragma: no cover  # setup() sets both
            msg = f"AsyncKVMemoryStore({self.url!r}) could not be opened."
            raise StoreError(msg)
        return self.async_store, self.operations

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Answer LangGraph operations in order, as one call of the asyncio store."""
        async_store, operations = await self.opened()
        return await async_store.run(functools.partial(operations.run, list(ops)))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Answer LangGraph operations from a thread other than the event loop's.

        Raises:
            LoopThreadError: if called on the event loop's thread (await ``abatch`` there).
            StoreError: if called before the store was opened on a loop.
        """
        loop = self.loop
        if loop is None:
            msg = "AsyncKVMemoryStore.batch() needs the store opened first: use 'async with AsyncKVMemoryStore(...)'."
            raise StoreError(msg)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            msg = "AsyncKVMemoryStore.batch() was called on the event loop's thread; await abatch() (or aget, aput, asearch) there."
            raise LoopThreadError(msg)
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), loop).result()

    async def sweep_ttl(self) -> int:
        """Delete every item whose TTL has run out, and return how many went."""
        async_store, operations = await self.opened()
        return await async_store.run(lambda: operations.sweep(operations.clock()))

    async def aclose(self) -> None:
        """Close the store; closing twice is harmless."""
        if self.async_store is not None:
            await self.async_store.aclose()

    async def __aenter__(self) -> Self:
        await self.setup()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AsyncKVMemoryStore({self.url!r})"
