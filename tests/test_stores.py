"""The store contract: every store means the same thing by the same call.

The suite itself ships in the package (``agents.memory.stores.testing``) so
that backend authors can run it too; here it runs against the in-process
store, SQLite, the JSONL log and PostgreSQL (a real server; see
``conftest.py``).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.memory import MemoryItem
from agents.memory.stores import Store, open_store
from agents.memory.stores.testing import (
    KeyedRecordContract,
    MakeStore,
    VectorStoreContract,
    session_hits,
    union_hits,
)

_WORDS = ("invoice", "format", "the", "report", "ann", "pdf")


class TestKeyedRecordContract(KeyedRecordContract):
    """The keyed-record suite on each of the four stores kvmemory ships."""

    @pytest.fixture
    def make_store(self, store_url: str) -> MakeStore:
        """Open handles on one fresh store of each kind by its URL."""

        def make(*, read_only: bool = False) -> Store:
            return open_store(store_url, read_only=read_only)

        return make


class TestStoreContract(VectorStoreContract):
    """The contract suite on each of the four stores kvmemory ships."""

    @pytest.fixture
    def make_store(self, store_url: str) -> MakeStore:
        """Open handles on one fresh store of each kind by its URL."""

        def make(*, read_only: bool = False) -> Store:
            return open_store(store_url, read_only=read_only)

        return make

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        sessions=st.dictionaries(
            st.sampled_from(["a", "b", "b-2", "c"]),
            st.lists(st.lists(st.sampled_from(_WORDS), max_size=8), max_size=12),
            max_size=4,
        ),
        query=st.lists(st.sampled_from(_WORDS), min_size=1, max_size=4),
        k=st.integers(min_value=1, max_value=8),
        chosen=st.none() | st.lists(st.sampled_from(["a", "b", "b-2", "c", "zz"]), max_size=3),
        prefix=st.none() | st.sampled_from(["b", "a", "q"]),
    )
    def test_search_sessions_is_memory_search_over_any_sessions(
        self,
        store: Store,
        sessions: dict[str, list[list[str]]],
        query: list[str],
        k: int,
        chosen: list[str] | None,
        prefix: str | None,
    ) -> None:
        """For any sessions, query, k and scope, store-wide hits equal Memory.search over the union (scores ==)."""
        for sid in store.sessions():
            store.delete_session(sid)
        for sid, texts in sessions.items():
            store.append(
                sid, [MemoryItem(step=i, note=" ".join(words)) for i, words in enumerate(texts)]
            )
        scope = [
            sid
            for sid in store.sessions()
            if (chosen is None or sid in chosen) and (prefix is None or sid.startswith(prefix))
        ]
        text = " ".join(query)
        got = store.search_sessions(text, k, sessions=chosen, prefix=prefix)
        assert session_hits(got) == union_hits(store, scope, text, k)
