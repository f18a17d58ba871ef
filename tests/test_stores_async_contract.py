"""The whole store contract through the async API, on every store kvmemory ships.

:class:`~agents.memory.stores.testing.AsyncStoreContract` (shipped, for
backend authors too) gives every test of the contract suite the sync store
API over an :class:`AsyncStore`, each call awaited on an event loop that
runs in a thread of its own (PostgreSQL: on psycopg's asyncio driver; the
others: on the store's worker thread), and adds the async-only checks.
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path

import pytest

from agents.memory.stores import AsyncStore, Store, open_async_store
from agents.memory.stores.testing import (
    AWAITED,
    AsyncStoreContract,
    AwaitedStore,
    LoopThread,
    MakeAsyncStore,
    VectorStoreContract,
)


class TestAsyncStoreContract(AsyncStoreContract, VectorStoreContract):
    """The contract suite on each of the four stores, every call made through the async API."""

    @pytest.fixture
    def make_async_store(self, store_url: str) -> MakeAsyncStore:
        """Open async handles on one fresh store of each kind by its URL."""

        def make(*, read_only: bool = False) -> Awaitable[AsyncStore]:
            return open_async_store(store_url, read_only=read_only)

        return make


async def _open(url: str) -> AsyncStore:
    return await open_async_store(url)


def test_awaited_store_reaches_the_async_calls(tmp_path: Path) -> None:
    """The adapter answers through the AsyncStore (no sync call of the store underneath is made)."""
    runner = LoopThread()
    try:
        opened = runner.call(_open(str(tmp_path / "a.db")))
        with AwaitedStore(runner, opened) as store:
            assert isinstance(store, Store)
            assert set(AWAITED) <= set(dir(AsyncStore))
            with pytest.raises(AttributeError, match="add it to AWAITED"):
                _ = store.rebuild_keyword_index
    finally:
        runner.close()
