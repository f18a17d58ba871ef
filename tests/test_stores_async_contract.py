"""The whole store contract through the async API, on SQLite and PostgreSQL.

``AwaitedStore`` gives the contract suite the sync store API, and answers
each call by awaiting the :class:`AsyncStore` call of the same name on an
event loop that runs in a thread of its own (PostgreSQL: on psycopg's
asyncio driver; SQLite: on the store's worker thread). So every test of
:class:`StoreContract` exercises the awaitable calls, their batches and
pages, and the durable memories built on them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agents.memory.stores import AsyncStore, Store, open_async_store
from agents.memory.stores.testing import KeyedRecordContract, MakeStore, StoreContract

T = TypeVar("T")

# The AsyncStore calls the contract reaches, each awaited in turn.
AWAITED = frozenset(
    {
        "append",
        "append_steps",
        "read",
        "records",
        "project",
        "tail",
        "search",
        "ranking",
        "search_sessions",
        "recall_sessions",
        "summary",
        "count",
        "session_info",
        "set_metadata",
        "delete_steps",
        "delete_seqs",
        "clear",
        "sessions",
        "delete_session",
        "keep_last",
        "expire",
        "vector_model",
        "index_embeddings",
        "read_vectors",
        "drop_vectors",
        "put_record",
        "put_records",
        "get_record",
        "get_records",
        "read_records",
        "record_keys",
        "delete_record",
        "delete_records",
    }
)
# Attributes that do no I/O: read from the sync store underneath.
PLAIN = frozenset({"url", "read_only", "closed", "keyword_index", "backend"})


class LoopThread:
    """An event loop running in a thread; ``call`` awaits a coroutine there and returns its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self.thread.start()

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class AwaitedBatch:
    """A write batch whose ``with`` block ends by awaiting the async batch's ``async with`` exit."""

    def __init__(self, runner: LoopThread, batch: Any) -> None:
        self._runner = runner
        self._batch = batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def __enter__(self) -> Any:
        return self._runner.call(self._batch.__aenter__())

    def __exit__(self, *exc_info: Any) -> None:
        self._runner.call(self._batch.__aexit__(*exc_info))


class AwaitedStore:
    """The sync store API over an :class:`AsyncStore`: each call awaited on the loop thread."""

    def __init__(self, runner: LoopThread, store: AsyncStore) -> None:
        self._runner = runner
        self.async_store = store

    # StoredMemory and the contract check for a Store: this one stands in for it.
    @property  # type: ignore[misc]
    def __class__(self) -> type[Store]:
        return Store

    def __getattr__(self, name: str) -> Any:
        if name in AWAITED:
            call: Callable[..., Awaitable[Any]] = getattr(self.async_store, name)

            async def awaited(*args: Any, **kwargs: Any) -> Any:
                return await call(*args, **kwargs)

            return lambda *args, **kwargs: self._runner.call(awaited(*args, **kwargs))
        if name in PLAIN:
            return getattr(self.async_store.store, name)
        msg = f"AwaitedStore has no {name!r}: add it to AWAITED or PLAIN if AsyncStore answers it."
        raise AttributeError(msg)

    def pages(self, session_id: str, **options: Any) -> Iterator[Any]:
        # The first page is awaited at once: a bad argument raises here, as the sync call does
        # (an async generator raises it at the first ``async for`` step instead).
        pages: AsyncIterator[Any] = self.async_store.pages(session_id, **options)
        try:
            first = self._runner.call(_next(pages))
        except StopAsyncIteration:
            return iter(())
        return self._rest(first, pages)

    def _rest(self, first: Any, pages: AsyncIterator[Any]) -> Iterator[Any]:
        yield first
        while True:
            try:
                yield self._runner.call(_next(pages))
            except StopAsyncIteration:
                return

    def batch(self, session_id: str, **options: Any) -> AwaitedBatch:
        return AwaitedBatch(self._runner, self.async_store.batch(session_id, **options))

    def close(self) -> None:
        self._runner.call(self.async_store.aclose())

    def __enter__(self) -> AwaitedStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<AwaitedStore {self.async_store!r}>"


async def _next(pages: AsyncIterator[T]) -> T:
    return await pages.__anext__()


@pytest.fixture(scope="module")
def runner() -> Iterator[LoopThread]:
    """One event loop in a thread for the module's tests."""
    loop = LoopThread()
    yield loop
    loop.close()


@pytest.fixture(params=["sqlite", "postgres"])
def async_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Return a URL for a fresh SQLite file or PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'store.db'}"
    request.applymarker(pytest.mark.postgres)
    return str(request.getfixturevalue("postgres_url"))


class TestAsyncStoreContract(StoreContract):
    """The contract suite, every call made through the async API."""

    @pytest.fixture
    def make_store(self, async_url: str, runner: LoopThread) -> MakeStore:
        """Open handles on one fresh store with open_async_store, wrapped for the suite."""

        def make(*, read_only: bool = False) -> Store:
            opened = runner.call(_open(async_url, read_only=read_only))
            return AwaitedStore(runner, opened)  # type: ignore[return-value]  # stands in for one

        return make


class TestAsyncKeyedRecordContract(KeyedRecordContract):
    """The keyed-record suite, every call made through the async API."""

    @pytest.fixture
    def make_store(self, async_url: str, runner: LoopThread) -> MakeStore:
        """Open handles on one fresh store with open_async_store, wrapped for the suite."""

        def make(*, read_only: bool = False) -> Store:
            opened = runner.call(_open(async_url, read_only=read_only))
            return AwaitedStore(runner, opened)  # type: ignore[return-value]  # stands in for one

        return make


async def _open(url: str, *, read_only: bool) -> AsyncStore:
    return await open_async_store(url, read_only=read_only)


def test_awaited_store_reaches_the_async_calls(tmp_path: Path, runner: LoopThread) -> None:
    """The adapter answers through the AsyncStore (no sync call of the store underneath is made)."""
    opened = runner.call(_open(str(tmp_path / "a.db"), read_only=False))
    with AwaitedStore(runner, opened) as store:
        assert isinstance(store, Store)
        assert set(AWAITED) <= set(dir(AsyncStore))
        with pytest.raises(AttributeError, match="add it to AWAITED"):
            _ = store.rebuild_keyword_index


def test_async_stored_memory_puts_records(tmp_path: Path, runner: LoopThread) -> None:
    """An AsyncStoredMemory awaits put_record and delete_record and reads records from RAM."""
    from agents.memory import MemoryItem
    from agents.memory.stores import open_async_memory

    async def scenario() -> tuple[Any, list[str], bool, list[str]]:
        url = str(tmp_path / "records.db")
        async with open_async_memory(url, "s") as memory:
            await memory.put_record("lang", {"value": "fr"})
            await memory.put_record("lang", {"value": "de"})
            found = memory.get_record("lang")
            keys = memory.record_keys()
            gone = await memory.delete_record("lang")
            return found, keys, gone, memory.record_keys()

    found, keys, gone, after = runner.call(scenario())
    assert found == MemoryItem(key="lang", value="de")
    assert (keys, gone, after) == (["lang"], True, [])
