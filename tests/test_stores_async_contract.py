"""The whole store contract through the async API, on every store kvmemory ships.

:class:`~agents.memory.stores.testing.AsyncStoreContract` (shipped, for
backend authors too) gives every test of the contract suite the sync store
API over an :class:`AsyncStore`, each call awaited on an event loop that
runs in a thread of its own (PostgreSQL: on psycopg's asyncio driver; the
others: on the store's worker thread), and adds the async-only checks. The
keyed-record suite runs through the same adapter.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.memory.stores import AsyncStore, Store, open_async_store
from agents.memory.stores.testing import (
    AWAITED,
    AsyncStoreContract,
    AwaitedStore,
    KeyedRecordContract,
    LoopThread,
    MakeAsyncStore,
    MakeStore,
    VectorStoreContract,
)


@pytest.fixture(scope="module")
def runner() -> Iterator[LoopThread]:
    """One event loop in a thread for the module's tests outside the shipped suite."""
    loop = LoopThread()
    yield loop
    loop.close()


class TestAsyncStoreContract(AsyncStoreContract, VectorStoreContract):
    """The contract suite on each of the four stores, every call made through the async API."""

    @pytest.fixture
    def make_async_store(self, store_url: str) -> MakeAsyncStore:
        """Open async handles on one fresh store of each kind by its URL."""

        def make(*, read_only: bool = False) -> Awaitable[AsyncStore]:
            return open_async_store(store_url, read_only=read_only)

        return make


class TestAsyncKeyedRecordContract(KeyedRecordContract):
    """The keyed-record suite on each of the four stores, every call made through the async API."""

    @pytest.fixture
    def make_store(self, store_url: str, runner: LoopThread) -> MakeStore:
        """Open handles on one fresh store with open_async_store, wrapped for the suite."""

        def make(*, read_only: bool = False) -> Store:
            opened = runner.call(_open(store_url, read_only=read_only))
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
