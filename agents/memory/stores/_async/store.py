"""Stores and durable memories for asyncio programs: every call that does I/O is awaitable.

Each awaitable call runs the sync store's own code (its checks, encoding,
batches and SQL: there is no second copy to drift), off the program's
event loop, in one of two ways:

* **PostgreSQL** runs on psycopg's asyncio driver (``AsyncConnection`` and
  ``AsyncConnectionPool``, the ``async`` extra) on an event loop of the
  store's own, on a thread of its own: each call runs there in a greenlet,
  and every round trip to the server is an ``await`` on that loop (see
  ``bridge.py``), so the calls of thousands of sessions share one thread
  and the pool's connections. The program's loop awaits one future per call.
* **SQLite, JSONL and in-process stores** run each call on one worker
  thread of the store's own (SQLite writes are serialised anyway; measured
  against aiosqlite, which makes every statement a thread hop, one hop per
  call is cheaper: see docs/stores.md).

Either way the store's Python (encoding, keyword terms, decoding) never
runs on the program's loop, which shares the interpreter with it a switch
interval (5 ms) at a time: ``benchmarks/bench_loop_lag.py`` measures the
lag of a ticker beside each call. (With PostgreSQL's greenlets on the
program's loop, an 18,000-item append froze that loop for 2.2 s.)

A call whose await is cancelled still runs to its end: its transaction
commits or rolls back as a whole, and for an :class:`AsyncStoredMemory`
the in-RAM view changes in the same step as the store, so after a
cancellation the write either happened (in the store and in RAM) or did
not (in neither). Calls made through one memory run in the order they
were made, a cancelled one included; calls on an :class:`AsyncStore` run
concurrently (PostgreSQL) or in turn (the others). Closing waits for every
call made before it, started or still waiting for its turn.

A store (and a memory on it) belongs to the event loop that opened it: a
call awaited in another loop raises :class:`StoreError` at once, saying so;
``aclose()`` closes it from any loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import os
import threading
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
from agents.memory.exceptions import (
    ArgumentTypeError,
    FieldAttributeError,
    ItemNotFoundError,
    StoreArgumentError,
    StoreError,
    missing_dependency,
)
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


def _worker() -> concurrent.futures.ThreadPoolExecutor:
    """Return the one worker thread of a store that is not PostgreSQL."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvmemory-store")


def _abandon(opening: concurrent.futures.Future[Store], store_loop: Any) -> None:
    """Close the store an abandoned opening made, if any, then end the store's loop thread."""

    def close() -> None:
        if not opening.cancelled() and opening.exception() is None:
            with contextlib.suppress(Exception):  # nobody is left to hear it
                store_loop.submit(opening.result().close).result()
        store_loop.stop()

    threading.Thread(target=close, name="kvmemory-postgres-abandon", daemon=True).start()


_ASYNC_WITH = (
    "An async store or memory is opened with `async with`, not `with`: "
    "`async with open_async_store(url) as store:` or "
    "`async with open_async_memory(url, session_id) as memory:` "
    "(or `store = await open_async_store(url)`, then `await store.aclose()`)."
)


def _take_outcome(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class AsyncStore:
    """A store for asyncio programs: the sync store's calls, awaitable.

    Open one with :func:`open_async_store` (``async with``). Each call takes
    the arguments of the :class:`Store` call of the same name and
    returns what it returns, once the write is as durable as the sync call
    makes it. ``store`` is the sync store underneath, for calls that do no
    I/O (``url``, ``closed``, ``keyword_index``); its calls that do I/O
    block the caller's thread, the loop's included (on PostgreSQL each
    server call is awaited on the store's own loop while the caller waits).
    """

    def __init__(
        self,
        store: Store,
        executor: concurrent.futures.ThreadPoolExecutor | None = None,
        *,
        store_loop: Any = None,
    ) -> None:
        self.store = store
        # PostgreSQL: the bridge's StoreLoop, where the calls run; the others: a worker thread.
        self._store_loop = store_loop
        if store_loop is None and executor is None:
            executor = _worker()
        self._executor = executor
        # The calls made and not yet ended (a memory's call waiting for its turn included).
        self._running: set[asyncio.Future[Any]] = set()
        self._closing: asyncio.Future[None] | None = None
        self._closed = False
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # bound by the first call

    @property
    def runs_on_loop(self) -> bool:
        """Whether calls run on an event loop of the store's own (PostgreSQL's asyncio driver), not a plain worker thread.

        Never the program's loop: either way the store's code runs on a thread of its own.
        """
        return self._store_loop is not None

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
            return cls(url, _worker())
        text = os.fspath(url)
        if text.lower().startswith(("postgresql://", "postgres://")):
            bridge = _bridge_module()
            from agents.memory.stores._postgres.pool import DRIVERS, Drivers

            def open_bridged() -> Store:
                DRIVERS.set(Drivers(bridge.connect, bridge.Pool))  # this greenlet's own context
                return open_store(text, read_only=read_only)

            store_loop = bridge.StoreLoop()
            opening = store_loop.submit(open_bridged)
            try:
                store = await asyncio.shield(asyncio.wrap_future(opening))
            except BaseException:
                # Cancelled or failed: close what the opening leaves, then end the loop's thread.
                opening.add_done_callback(lambda done: _abandon(done, store_loop))
                raise
            return cls(store, store_loop=store_loop)
        executor = _worker()
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
        """Run ``call`` (no arguments, the sync store's code) off the event loop, and await its result.

        PostgreSQL runs it on the store's own loop, awaiting each server
        call there; the other stores run it on the store's worker thread.
        Cancelling the await does not stop the call, even one not yet
        started: it runs to its end (so the calls queued behind it keep
        their order), and closing the store waits for it.

        Raises:
            StoreError: if the store is closed, or was opened in another
                event loop; any error of ``call`` is raised by the await too.
        """
        return await asyncio.shield(self.submit(call))

    def submit(
        self, call: Callable[[], R], *, after: asyncio.Future[Any] | None = None
    ) -> asyncio.Future[R]:
        """Make the call :meth:`run` makes, started once ``after`` (a call made before) has ended; return its future.

        The call counts as made now: closing the store waits for it, and it
        runs to its end whatever becomes of the future's awaits.

        Raises:
            StoreError: if the store is closed, or was opened in another event loop.
        """
        self._check_usable()
        if after is None:
            return self._start(call)
        previous = after

        async def in_turn() -> R:
            await asyncio.wait([previous])  # its outcome is its caller's
            return await self._start(call)

        turn = asyncio.ensure_future(in_turn())
        self._track(turn)
        return turn

    def _check_usable(self) -> None:
        """Raise :class:`StoreError` unless a call may be made now, from this loop."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        if loop is not self._loop:
            first = "closed" if self._loop.is_closed() else "still open"
            msg = (
                f"The async store {self.store.url} was opened in another event loop (now "
                f"{first}) than the one awaiting this call; its calls belong to the loop "
                "that opened it. Open it in the loop that uses it (one `async with "
                "open_async_store(...)` or `open_async_memory(...)` inside the coroutine "
                "that asyncio.run() runs). `await store.aclose()` closes it from any loop."
            )
            raise StoreError(msg)
        if self._closing is not None or self._closed:
            msg = (
                f"The async store {self.store.url} is closed; open it again with "
                "`async with open_async_store(url) as store:` (or open_async_memory(url, "
                "session_id) for a memory)."
            )
            raise StoreError(msg)

    def _start(self, call: Callable[[], R]) -> asyncio.Future[R]:
        """Start ``call`` off the loop, counted among the calls closing waits for."""
        running: asyncio.Future[R]
        if self._store_loop is not None:
            running = asyncio.wrap_future(self._store_loop.submit(call))
        else:
            running = asyncio.get_running_loop().run_in_executor(self._executor, call)
        self._track(running)
        return running

    def _track(self, running: asyncio.Future[Any]) -> None:
        """Count ``running`` among the calls made, until it ends."""
        self._running.add(running)
        running.add_done_callback(self._running.discard)
        # A cancelled await leaves the outcome to nobody: take it, so it is not logged as lost.
        running.add_done_callback(_take_outcome)

    append = _store_call(Store.append)
    append_steps = _store_call(Store.append_steps)
    read = _store_call(Store.read)
    read_with_terms = _store_call(Store.read_with_terms)
    read_memory = _store_call(Store.read_memory)
    save_keyword_snapshot = _store_call(Store.save_keyword_snapshot)
    records = _store_call(Store.records)
    project = _store_call(Store.project)
    tail = _store_call(Store.tail)
    search = _store_call(Store.search)
    ranking = _store_call(Store.ranking)
    ranking_at = _store_call(Store.ranking_at)
    keyword_version = _store_call(Store.keyword_version)
    hybrid_ranking = _store_call(Store.hybrid_ranking)
    cosines = _store_call(Store.cosines)
    cosine_ceilings = _store_call(Store.cosine_ceilings)
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
    vectors_over_budget = _store_call(Store.vectors_over_budget)
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
        """Close the store once the calls already made have ended; calling it again does nothing.

        The calls made before it, started or not (a memory's calls wait
        for their turn), and awaited or cancelled, all run first. Called
        from an event loop other than the one that opened the store, it
        closes the store and its pool without waiting for that loop's calls
        (that loop may be closed), once the calls running now have ended.
        """
        if self._loop is not None and asyncio.get_running_loop() is not self._loop:
            if not self._closed:
                self._closed = True
                await self._release()
            return
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        while self._running:
            await asyncio.wait(list(self._running))
        self._closed = True
        await self._release()

    async def _release(self) -> None:
        """Close the sync store and end the store's thread (loop or worker)."""
        if self._store_loop is not None:
            if not self.store.closed and not self._store_loop.stopped:
                await asyncio.wrap_future(self._store_loop.submit(self.store.close))
            await asyncio.to_thread(self._store_loop.stop)
            return
        executor = self._executor
        assert executor is not None  # one of the two is set in __init__
        # Wait for the calls in flight on a thread of the loop's own, then close.
        await asyncio.to_thread(executor.shutdown, wait=True)
        if not self.store.closed:
            await asyncio.to_thread(self.store.close)

    def __enter__(self) -> None:
        raise ArgumentTypeError(_ASYNC_WITH)

    def __exit__(self, *exc_info: object) -> None:
        """Never reached: ``__enter__`` raises."""

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
    ``len(view)``); its writing calls, and a field set on one of its items
    (``item.set_value(...)``, ``item[key] = ...``), are written through on
    every store alike and block the loop for that write. The awaitable
    ways: :meth:`set_value`, :meth:`set_metadata`, and :meth:`run` for any
    sync code (``await memory.run(lambda: ...)``).
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
        This is the awaitable way to run sync code of the in-RAM view that
        writes, without blocking the loop::

            await memory.run(lambda: memory.view.content[0].set_value("done", True))

        Raises:
            StoreError: if the store is closed, or was opened in another
                event loop; any error of ``call`` is raised by the await too.
        """
        turn = self.async_store.submit(self._locked(call), after=self._last)
        self._last = turn
        return await asyncio.shield(turn)

    def _locked(self, call: Callable[[], R]) -> Callable[[], R]:
        """Return ``call`` holding the view's lock, taken without stalling the store's loop.

        On PostgreSQL the call runs on the store's loop thread, where waiting
        for a lock a sync call of the view holds on the program's thread
        would stop the loop that sync call waits on; so the lock is tried,
        and the loop given a turn until it is free.
        """
        if not self.async_store.runs_on_loop:
            return call
        bridge = _bridge_module()
        lock = self.view.lock

        def locked() -> R:
            while not lock.acquire(blocking=False):
                bridge.wait(asyncio.sleep(0.001))
            try:
                return call()
            finally:
                lock.release()

        return locked

    @property
    def metadata(self) -> dict[str, Any]:
        """The session's metadata, as the in-RAM view holds it (a copy); change it with :meth:`set_metadata`."""
        return dict(self.view.metadata)

    async def set_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Replace the session's metadata, in the store and in RAM, without blocking the loop.

        Raises:
            SerializationError: if a value cannot be encoded; nothing changes.
            StoreError: if the store cannot be written.
        """
        value = dict(metadata)

        def assign() -> None:
            self.view.metadata = value

        await self.run(assign)

    async def set_value(self, item: MemoryItem, key: str, value: Any) -> None:
        """Set field ``key`` of ``item`` (an item of this memory) to ``value``, in the store and in RAM, without blocking the loop.

        The awaitable form of ``item.set_value(key, value)`` (or ``item[key] = value``),
        which on an async memory's item writes through on the caller's thread.

        Raises:
            ItemNotFoundError: if ``item`` is not held by this memory.
            SerializationError: if ``value`` cannot be encoded; the store is unchanged.
            StoreError: if the store cannot be written.
        """
        if not any(held is item for held in self.view.content):
            msg = f"{item!r} is not an item of {self!r}; add it with `await memory.add_memory_item(item)`."
            raise ItemNotFoundError(msg)
        await self.run(functools.partial(item.set_value, key, value))

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
        """Close the memory once the calls made on it have ended, and the store when it was opened from a URL."""
        if self._owns_store:
            await self.async_store.aclose()
        elif self._last is not None and self._last.get_loop() is asyncio.get_running_loop():
            await asyncio.wait([self._last])

    def __enter__(self) -> None:
        raise ArgumentTypeError(_ASYNC_WITH)

    def __exit__(self, *exc_info: object) -> None:
        """Never reached: ``__enter__`` raises."""

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

    def __enter__(self) -> None:
        raise ArgumentTypeError(_ASYNC_WITH)

    def __exit__(self, *exc_info: object) -> None:
        """Never reached: ``__enter__`` raises."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or not (
            hasattr(AsyncStore, name) or hasattr(AsyncStoredMemory, name)
        ):
            raise AttributeError(name)  # attribute protocol
        msg = (
            f"{name!r} is an attribute of the opened store or memory, not of its opener: "
            "open it with `async with open_async_memory(url, session_id) as memory:` "
            "(or `async with open_async_store(url) as store:`), or `memory = await "
            f"open_async_memory(...)`, then use `memory.{name}`."
        )
        raise FieldAttributeError(msg)
