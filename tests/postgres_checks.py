"""What the PostgreSQL tests share: the server's row counters (the rows of ``kvmemory_items`` a statement reads), ``Memory.search``'s ranking by seq, and the tables taken back a schema version."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agents.memory import Memory, MemoryItem
from agents.memory.stores import PostgresStore


def skip_without_flushed_counters(url: str) -> None:
    """Skip where the server cannot flush its row counters on demand (PostgreSQL 15 and later can)."""
    with psycopg.connect(url, autocommit=True) as con:
        if con.execute("SELECT to_regproc('pg_stat_force_next_flush')").fetchone() == (None,):
            pytest.skip("the server cannot flush its counters on demand (PostgreSQL 15 and later)")


def rows_read(store: PostgresStore) -> int:
    """Return how many rows of kvmemory_items the server has read so far (the counters of the store's connection flushed)."""
    # The next statement's end flushes this connection's counters (PostgreSQL 15 and later).
    store.backend.query_rows("SELECT pg_stat_force_next_flush()")
    store.backend.query_rows("SELECT 1")
    with psycopg.connect(store.backend.pool.conninfo, autocommit=True) as con:
        row = con.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)"
            " FROM pg_stat_user_tables WHERE relid = 'kvmemory_items'::regclass"
        ).fetchone()
    return int(row[0])


def ranked_by_memory(
    chosen: list[MemoryItem], query: str, k: int, where: Any
) -> list[tuple[int, float]]:
    """Return ``Memory.search``'s ``(seq, score)`` over items appended in one batch to a new session (seqs from 1, in order; each item's ``step`` its place)."""
    memory = Memory()
    for item in chosen:
        memory.add_memory_item(item)
    hits = memory.search(query, k, where=where)
    return [(int(hit.item.get_value("step")) + 1, hit.score) for hit in hits]


def leave_v12_tables(url: str) -> None:
    """Take the tables back to schema version 12: no leaf table."""
    with psycopg.connect(url, autocommit=True) as con:
        for event in ("insert", "update", "delete"):
            con.execute(f"DROP TRIGGER kvmemory_leaves_{event} ON kvmemory_items")
        con.execute("DROP TABLE kvmemory_leaves")
        con.execute("DROP FUNCTION kvmemory_leaves_written(), kvmemory_leaves_of(jsonb)")
        con.execute("UPDATE kvmemory_schema SET version = 12")
