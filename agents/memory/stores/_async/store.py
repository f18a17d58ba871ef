"""Stores and durable memories for asyncio programs: every call that does I/O is awaitable.

Each awaitable call runs the sync store's own code (its checks, encoding,
batches and SQL: there is no second copy to drift), in one of two ways:

* **PostgreSQL** runs on psycopg's asyncio driver (``AsyncConnection`` and
  ``AsyncConnectionPool``, the ``async`` extra): the call runs on the event
  loop's thread in a greenlet, and every round trip to the server is an
  ``await`` on the loop (see ``bridge.py``), so thousands of sessions share
  one thread and the pool's connections.
* **SQLite, JSONL and in-process stores** run each call on one worker
  thread of the store's own (SQLite writes are serialised anyway; measured
  against aiosqlite, which makes every statement a thread hop, one hop per
  call is cheaper: see docs/stores.md).

A call whose await is cancelled still runs to its end: its transaction
commits or rolls back as a whole, and for an :class:`AsyncStoredMemory`
the in-RAM view changes in the same step as the store, so after a
cancellation the write either happened (in the store and in RAM) or did
not (in neither). Calls made through one memory run in the order they
were made, a cancelled one included; calls on an :class:`AsyncStore` run
concurrently (PostgreSQL) or in turn (the others).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import os
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
)
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar

from agents.memory._item import MemoryItem
from agents.memory.exceptions import StoreArgumentError, missing_dependency
from agents.memory.stores._backed import StoredMemory
from agents.memory.stores._core.batch import WriteBatch
from agents.memory.stores._core.encoding import StoredRecord
from agents.memory.stores._store import Store

if TYPE_CHECKING:
    from types import ModuleType, TracebackType

    from typing_extensions import Self

    from agents.memory._codec import OnUnencodable
    from agents.memory._item import OnUnknownClass
    from agents.memory.memory import ChangeCallback

__all__ = ["AsyncOpener", "AsyncStore", "AsyncStoredMemory", "AsyncWriteBatch"]

P = ParamSpec("P")
R = TypeVar("R")
Closable = TypeVar("Closable", "AsyncStore", "AsyncStoredMemory")


def _bridge_module() -> ModuleType:
    """Import the asyncio bridge for PostgreSQL, naming the extra when greenlet is missing."""
    try:
        from agents.memory.stores._async import bridge
    except ImportError as exc:
        name = exc.name or "greenlet"
        raise missing_dependency(
            name, "postgres" if name.startswith("psycopg") else "async"
        ) from exc
    return bridge


def _embedder_off_loop(
    method: Callable[..., Any],
) -> Callable[[bool, tuple[Any, ...], dict[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]:
    """Return how to pass a call's ``embedder`` so that it runs on a thread, not on the event loop.

    A PostgreSQL store runs its calls on the loop's thread; an embedder (a
    model, or a call to an embedding service) would stall the loop there,
    so it is wrapped to run on the loop's default executor. SQLite and the
    others already run every call on a worker thread.
    """
    signature = inspect.signature(method)
    if "embedder" not in signature.parameters:
        return lambda on_loop, args, kwargs: (args, kwargs)

    def arguments(
        on_loop: bool, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if not on_loop:
            return args, kwargs
        try:
            bound = signature.bind(None, *args, **kwargs)
        except TypeError:
            return args, kwargs  # the call itself names what is wrong
        embedder = bound.arguments.get("embedder")
        if embedder is None:
            return args, kwargs
        bound.arguments["embedder"] = _bridge_module().OffLoop(embedder)
        return bound.args[1:], bound.kwargs

    return arguments


def _store_call(
    method: Callable[Concatenate[Store, P], R],
) -> Callable[Concatenate[AsyncStore, P], Awaitable[R]]:
    """Make an awaitable twin of a store method, run for the loop by :meth:`AsyncStore.run`."""
    name = method.__name__
    arguments = _embedder_off_loop(method)

    async def call(self: AsyncStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        passed, named = arguments(self.runs_on_loop, args, kwargs)
        return await self.run(functools.partial(getattr(self.store, name), *passed, **named))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = (
        f"Await :meth:`Store.{name}`: the same arguments, result and errors, "
        "computed without blocking the event loop."
    )
    return call


def _memory_call(
    method: Callable[Concatenate[StoredMemory, P], R],
) -> Callable[Concatenate[AsyncStoredMemory, P], Awaitable[R]]:
    """Make an awaitable twin of a durable memory's method, run for the loop by its store."""
    name = method.__name__
    arguments = _embedder_off_loop(method)

    async def call(self: AsyncStoredMemory, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound = getattr(self.view, name)
        passed, named = arguments(self.async_store.runs_on_loop, args, kwargs)
        return await self.run(functools.partial(bound, *passed, **named))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = (
        f"Await :meth:`StoredMemory.{name}`: the store is written and the in-RAM view "
        "changed in one step, without blocking the event loop."
    )
    return call


def _take_outcome(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class AsyncStore:
    """A store for asyncio programs: the sync store's calls, awaitable.

    Open one with :func:`open_async_store` (``async with``). Each call takes
    the arguments of the :class:`Store` call of the same name and
    returns what it returns, once the write is as durable as the sync call
    makes it. ``store`` is the sync store underneath, for calls that do no
    I/O (``url``, ``closed``, ``keyword_index``); on PostgreSQL its calls
    that do I/O raise :class:`StoreError` (they run only awaited).
    """

    def __init__(
        self, store: Store, executor: concurrent.futures.ThreadPoolExecutor | None
    ) -> None:
        self.store = store
        # None: the store's I/O is awaited on the loop (PostgreSQL through the bridge).
        self._executor = executor
        self._running: set[asyncio.Future[Any]] = set()
        self._closing: asyncio.Future[None] | None = None

    @property
    def runs_on_loop(self) -> bool:
        """Whether calls run on the event loop's thread, awaiting each server call (PostgreSQL), not on a worker thread."""
        return self._executor is None

    @classmethod
    async def open(
        cls, url: str | os.PathLike[str] | Store, *, read_only: bool = False
    ) -> AsyncStore:
        """Open the store ``url`` names (any form :func:`open_store` takes) without blocking the loop.

        An open :class:`Store` (over a backend of your own, say) is taken as
        it is: its calls run on a worker thread of the async store's own,
        one at a time, and :meth:`aclose` closes it.

        Raises:
            MissingDependencyError: for a PostgreSQL URL without the ``async``
                extra (greenlet) or the ``postgres`` extra.
            StoreArgumentError: for ``read_only=True`` with a writable :class:`Store`.
            What :func:`open_store` raises.
        """
        from agents.memory.stores._open import open_store

        if isinstance(url, Store):
            if read_only and not url.read_only:
                msg = f"open_async_store(store, read_only=True) was given the writable store {url.url}; open the store read-only."
                raise StoreArgumentError(msg)
            worker = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="kvmemory-store"
            )
            return cls(url, worker)
        text = os.fspath(url)
        if text.lower().startswith(("postgresql://", "postgres://")):
            bridge = _bridge_module()
            from agents.memory.stores._postgres.pool import DRIVERS, Drivers

            def open_bridged() -> Store:
                DRIVERS.set(Drivers(bridge.connect, bridge.Pool))  # this greenlet's own context
                return open_store(text, read_only=read_only)

            return cls(await bridge.run_bridged(open_bridged), None)
        executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="kvmemory-store"
        )
        try:
            loop = asyncio.get_running_loop()
            store = await loop.run_in_executor(
                executor, functools.partial(open_store, text, read_only=read_only)
            )
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(store, executor)

    async def run(self, call: Callable[[], R]) -> R:
        """Run ``call`` (no arguments, the sync store's code) for the loop, and await its result.

        PostgreSQL runs it on the loop's thread, awaiting each server call;
        the other stores run it on the store's worker thread. Cancelling the
        await does not stop the call, even one not yet started: it runs to
        its end (so the calls queued behind it keep their order).
        """
        if self._closing is not None:
            await asyncio.shield(self._closing)
            # Closed: the store's call raises its StoreError at once, before any I/O.
            return call()
        running: asyncio.Future[R]
        if self._executor is None:
            running = asyncio.ensure_future(_bridge_module().run_bridged(call))
        else:
            running = asyncio.get_running_loop().run_in_executor(self._executor, call)
        self._running.add(running)
        running.add_done_callback(self._running.discard)
        # A cancelled await leaves the outcome to nobody: take it, so it is not logged as lost.
        running.add_done_callback(_take_outcome)
        return await asyncio.shield(running)

    append = _store_call(Store.append)
    append_steps = _store_call(Store.append_steps)
    read = _store_call(Store.read)
    records = _store_call(Store.records)
    project = _store_call(Store.project)
    tail = _store_call(Store.tail)
    search = _store_call(Store.search)
    ranking = _store_call(Store.ranking)
    search_sessions = _store_call(Store.search_sessions)
    recall_sessions = _store_call(Store.recall_sessions)
    summary = _store_call(Store.summary)
    count = _store_call(Store.count)
    session_info = _store_call(Store.session_info)
    set_metadata = _store_call(Store.set_metadata)
    delete_steps = _store_call(Store.delete_steps)
    delete_seqs = _store_call(Store.delete_seqs)
    clear = _store_call(Store.clear)
    sessions = _store_call(Store.sessions)
    delete_session = _store_call(Store.delete_session)
    keep_last = _store_call(Store.keep_last)
    expire = _store_call(Store.expire)
    vector_model = _store_call(Store.vector_model)
    index_embeddings = _store_call(Store.index_embeddings)
    read_vectors = _store_call(Store.read_vectors)
    drop_vectors = _store_call(Store.drop_vectors)
    put_record = _store_call(Store.put_record)
    put_records = _store_call(Store.put_records)
    get_record = _store_call(Store.get_record)
    get_records = _store_call(Store.get_records)
    read_records = _store_call(Store.read_records)
    record_keys = _store_call(Store.record_keys)
    delete_record = _store_call(Store.delete_record)
    delete_records = _store_call(Store.delete_records)

    async def pages(
        self,
        session_id: str,
        *,
        size: int = 1000,
        on_unknown_class: OnUnknownClass = "error",
    ) -> AsyncIterator[list[StoredRecord]]:
        """Yield a session's records a page at a time, each page read as :meth:`run` runs calls.

        Raises:
            What :meth:`Store.pages` raises.
        """
        pages: Iterator[list[StoredRecord]] = await self.run(
            functools.partial(
                self.store.pages, session_id, size=size, on_unknown_class=on_unknown_class
            )
        )
        while True:
            page = await self.run(functools.partial(next, pages, None))
            if page is None:
                return
            yield page

    def batch(
        self, session_id: str, *, step_key: str = "step", on_unencodable: OnUnencodable = "error"
    ) -> AsyncWriteBatch:
        """Return a batch of writes to one session, applied in one transaction by ``async with``.

        See :meth:`Store.batch`. Staging calls are plain calls; the
        transaction runs (as :meth:`AsyncStore.run` runs calls) when the block ends.
        """
        return AsyncWriteBatch(
            self, self.store.batch(session_id, step_key=step_key, on_unencodable=on_unencodable)
        )

    async def aclose(self) -> None:
        """Close the store once the calls already made have ended; calling it again does nothing."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        if self.store.closed:
            return
        while self._running:
            await asyncio.wait(list(self._running))
        if self._executor is None:
            await _bridge_module().run_bridged(self.store.close)
            return
        loop = asyncio.get_running_loop()
        # Wait for the calls in flight on a thread of the loop's own, then close.
        await loop.run_in_executor(None, functools.partial(self._executor.shutdown, wait=True))
        await loop.run_in_executor(None, self.store.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AsyncStore {self.store!r}>"


class AsyncWriteBatch:
    """Writes to one session staged by plain calls and applied in one transaction when ``async with`` ends.

    The staging calls (``append``, ``update``, ``delete``, ``clear``,
    ``keep_last``, ``expire``) are :class:`WriteBatch`'s and check and
    encode at once. On a clean exit the transaction runs on the store's
    worker thread or, for PostgreSQL, on the loop's; leaving the block with
    an exception writes nothing. The seqs written are in ``appended``,
    ``updated`` and ``deleted`` afterwards, and the items numbered by
    ``append(..., number_steps=True)`` in ``numbered``.
    """

    def __init__(self, store: AsyncStore, batch: WriteBatch) -> None:
        self._store = store
        self.batch = batch
        self.append = batch.append
        self.update = batch.update
        self.delete = batch.delete
        self.clear = batch.clear
        self.keep_last = batch.keep_last
        self.expire = batch.expire

    @property
    def appended(self) -> list[int]:
        """The seqs given to the appended items, in order (after the block)."""
        return self.batch.appended

    @property
    def numbered(self) -> list[MemoryItem]:
        """The items ``append(..., number_steps=True)`` numbered, as written (after the block)."""
        return self.batch.numbered

    @property
    def updated(self) -> list[int]:
        """The seqs of the updated rows that existed (after the block)."""
        return self.batch.updated

    @property
    def deleted(self) -> list[int]:
        """The seqs removed by ``delete``, ``keep_last`` and ``expire`` (after the block)."""
        return self.batch.deleted

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._store.run(functools.partial(self.batch.__exit__, exc_type, exc, traceback))


class AsyncStoredMemory:
    """A durable session for asyncio programs: writes are awaitable, reads of the in-RAM view are plain.

    Open one with :func:`open_async_memory`. Every call that writes
    (``add_memory_item``, ``delete_memory_item``, ``clear``, ...) or reads
    the store (``refresh``, ``search``, ``recall``) is awaitable and
    returns once the store holds the change and the in-RAM view shows it;
    both change in one step (see :meth:`AsyncStore.run`), so a cancelled
    await leaves them agreeing. ``view`` is the in-RAM :class:`StoredMemory`:
    read it with plain calls (``view.filter_memory_from_keys(...)``,
    ``len(view)``); its writing calls work too but block the loop (on
    PostgreSQL they raise :class:`StoreError`: await the twin instead).
    """

    def __init__(self, async_store: AsyncStore, view: StoredMemory, *, owns_store: bool) -> None:
        self.async_store = async_store
        self.view = view
        self._owns_store = owns_store
        # The call made last on this memory: the next one starts when it has ended.
        self._last: asyncio.Future[Any] | None = None

    async def run(self, call: Callable[[], R]) -> R:
        """Run ``call`` as :meth:`AsyncStore.run` does, after every call made before it on this memory.

        Calls made through one memory run in the order they were made, also
        when an earlier await was cancelled (its call still runs first).
        """
        previous = self._last

        async def in_turn() -> R:
            if previous is not None:
                await asyncio.wait([previous])  # its outcome is its caller's
            return await self.async_store.run(call)

        turn = asyncio.ensure_future(in_turn())
        self._last = turn
        turn.add_done_callback(_take_outcome)
        return await asyncio.shield(turn)

    @property
    def session_id(self) -> str:
        """The session this memory holds."""
        return self.view.session_id

    @property
    def content(self) -> list[MemoryItem]:
        """The items in order (a new list), as ``Memory.content``."""
        return self.view.content

    def __len__(self) -> int:
        return len(self.view)

    def __iter__(self) -> Iterator[MemoryItem]:
        return iter(self.view.content)

    def filter_memory_from_keys(self, keys: list[str]) -> list[dict[str, Any]]:
        """Return the chosen keys of every item, as ``Memory.filter_memory_from_keys``."""
        return self.view.filter_memory_from_keys(keys)

    def filter_memory_from_steps(self, steps: list[Any]) -> list[dict[str, Any]]:
        """Return the fields of the items of these steps, as ``Memory.filter_memory_from_steps``."""
        return self.view.filter_memory_from_steps(steps)

    def get_latest_item(self) -> MemoryItem | None:
        """Return the newest item, or ``None`` when empty."""
        return self.view.get_latest_item()

    def get_record(self, key: str) -> MemoryItem | None:
        """Return the item filed under ``key``, or ``None`` (from RAM), as ``Memory.get_record``."""
        return self.view.get_record(key)

    def record_keys(self, *, prefix: str | None = None) -> list[str]:
        """Return the keys of the memory's records, sorted, as ``Memory.record_keys``."""
        return self.view.record_keys(prefix=prefix)

    put_record = _memory_call(StoredMemory.put_record)
    delete_record = _memory_call(StoredMemory.delete_record)
    add_memory_item = _memory_call(StoredMemory.add_memory_item)
    add_memory_items = _memory_call(StoredMemory.add_memory_items)
    delete_memory_item = _memory_call(StoredMemory.delete_memory_item)
    delete_items = _memory_call(StoredMemory.delete_items)
    clear = _memory_call(StoredMemory.clear)
    save_item = _memory_call(StoredMemory.save_item)
    save_metadata = _memory_call(StoredMemory.save_metadata)
    keep_last = _memory_call(StoredMemory.keep_last)
    expire = _memory_call(StoredMemory.expire)
    refresh = _memory_call(StoredMemory.refresh)
    reload = _memory_call(StoredMemory.reload)
    search = _memory_call(StoredMemory.search)
    recall = _memory_call(StoredMemory.recall)
    index_embeddings = _memory_call(StoredMemory.index_embeddings)
    drop_vectors = _memory_call(StoredMemory.drop_vectors)

    async def aclose(self) -> None:
        """Close the memory, and the store when it was opened from a URL."""
        if self._owns_store:
            await self.async_store.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AsyncStoredMemory {self.session_id!r}: {len(self.view)} items in {self.async_store.store.url!r}>"


async def open_memory_on(
    async_store: AsyncStore,
    session_id: str,
    *,
    owns_store: bool,
    step_key: str,
    max_items: int | None,
    callbacks: Iterable[ChangeCallback],
    on_unencodable: OnUnencodable,
    on_unknown_class: OnUnknownClass,
    metadata: Mapping[str, Any] | None,
) -> AsyncStoredMemory:
    """Read ``session_id`` of an open async store into a durable memory, without blocking the loop."""
    view = await async_store.run(
        functools.partial(
            StoredMemory,
            async_store.store,
            session_id,
            step_key=step_key,
            max_items=max_items,
            callbacks=callbacks,
            on_unencodable=on_unencodable,
            on_unknown_class=on_unknown_class,
            metadata=metadata,
        )
    )
    return AsyncStoredMemory(async_store, view, owns_store=owns_store)


class AsyncOpener(Generic[Closable]):
    """What :func:`open_async_store` and :func:`open_async_memory` return: await it, or ``async with`` it.

    ``async with opener as x:`` opens ``x`` and closes it when the block
    ends; ``x = await opener`` opens it and leaves closing (``await
    x.aclose()``) to you.
    """

    def __init__(self, opening: Callable[[], Awaitable[Closable]]) -> None:
        self._opening: Callable[[], Awaitable[Closable]] = opening
        self._opened: Closable | None = None

    def __await__(self) -> Generator[Any, None, Closable]:
        return self._opening().__await__()

    async def __aenter__(self) -> Closable:
        self._opened = await self._opening()
        return self._opened

    async def __aexit__(self, *exc_info: object) -> None:
        if self._opened is not None:
            await self._opened.aclose()
