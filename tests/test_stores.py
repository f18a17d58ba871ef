"""The store contract: every store means the same thing by the same call.

The suite itself ships in the package (``agents.memory.stores.testing``) so
that backend authors can run it too; here it runs against the in-process
store, SQLite, the JSONL log and PostgreSQL (a real server; see
``conftest.py``).
"""

from __future__ import annotations

import pytest

from agents.memory.stores import Store, open_store
from agents.memory.stores.testing import MakeStore, StoreContract


class TestStoreContract(StoreContract):
    """The contract suite on each of the four stores kvmemory ships."""

    @pytest.fixture
    def make_store(self, store_url: str) -> MakeStore:
        """Open handles on one fresh store of each kind by its URL."""

        def make(*, read_only: bool = False) -> Store:
            return open_store(store_url, read_only=read_only)

        return make
