"""``Backend.filter_few``: the rows that may pass a filter where few may, capped, so a filter most rows pass costs a few rows, not the session's."""

from __future__ import annotations

from typing import Any

import pytest

from agents.memory import Memory, MemoryItem
from agents.memory.search import Filter, HashingEmbedder
from agents.memory.stores import open_store

WHERES: list[Any] = [
    {"a": 0},  # about one row in four passes
    {"a": {"$in": [0, 1, 2]}},  # most rows
    {"b": "rare"},  # one row
    {"b": "none"},  # no row
    {"a": {"$gte": 1}},  # a range
    {"$or": [{"a": 3}, {"b": "rare"}]},
]


def _capped(candidates: set[int] | None, most: int) -> set[int] | None:
    """Return what ``filter_few`` must answer: ``filter_candidates``'s set where it holds ``most`` at most."""
    return None if candidates is None or len(candidates) > most else candidates


def test_filter_few_is_filter_candidates_capped_across_commits(store_url: str) -> None:
    """Each store's ``filter_few`` answers ``filter_candidates``'s set where it holds ``most`` seqs at most, else ``None``, for caps asked in any order, before and after a write (SQLite's kept answers included)."""
    with open_store(store_url) as store:
        store.append(
            "s", [MemoryItem(step=i, a=i % 4, b="rare" if i == 7 else "x") for i in range(24)]
        )
        backend = store.backend
        for round_ in range(2):
            for where in WHERES:
                tree = Filter(where).tree
                # Caps asked before the whole answer is kept (rising, falling), then after.
                caps = [0, 5, 1, 6, 12, 7, 30, 24, 25, 6]
                answers = [backend.filter_few("s", tree, most) for most in caps]
                candidates = backend.filter_candidates("s", tree)
                assert answers == [_capped(candidates, most) for most in caps], (where, round_)
                assert [backend.filter_few("s", tree, most) for most in caps] == answers
            store.append("s", [MemoryItem(step=24 + i, a=0, b="rare") for i in range(6)])


def test_a_filter_most_rows_pass_reads_few_candidates_on_postgres(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hybrid search on PostgreSQL whose ``$eq`` filter 99% of 800 steps pass has the index name ``800 // 16 + 1`` rows at most (every passing row before), and ranks as Memory.search."""
    from agents.memory.stores import PostgresStore

    embedder = HashingEmbedder(32)
    session = [
        {
            "step": i,
            "text": f"alpha {'beta ' * (i % 3)}gamma {i}",
            "agent": "host" if i % 100 else "reviewer",
        }
        for i in range(800)
    ]
    where = {"agent": "host"}
    with PostgresStore(postgres_url) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        backend = store.backend
        assert backend.filter_named(Filter(where).tree)
        returned: list[int] = []
        real = backend.query_indexed

        def counted(sql: str, params: Any) -> list[Any]:
            rows = real(sql, params)
            returned.append(len(rows))
            return rows

        monkeypatch.setattr(backend, "query_indexed", counted)
        for mode in ("semantic", "hybrid"):
            returned.clear()
            hits = store.search("s", "alpha beta", 5, mode=mode, where=where, embedder=embedder)  # type: ignore[arg-type]
            memory = Memory(MemoryItem(**fields) for fields in session)
            want = memory.search("alpha beta", 5, mode=mode, where=where, embedder=embedder)  # type: ignore[arg-type]
            assert [(h.item.to_dict(), h.score) for h in hits] == [
                (h.item.to_dict(), pytest.approx(h.score, rel=1e-5, abs=1e-6)) for h in want
            ]
            if mode == "hybrid":
                assert returned, "the index was not asked"
            assert max(returned, default=0) <= 800 // 16 + 1, (mode, returned)
