"""The PostgreSQL posting blocks' packed copies (schema version 12): sent as they lie by a ranking, kept equal to the arrays by every write, and older tables read from the arrays as the server sends them."""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest

from agents.memory import Memory, MemoryItem
from agents.memory.stores import PostgresStore

psycopg = pytest.importorskip("psycopg")

from postgres_checks import leave_v12_tables  # noqa: E402  # after the skip: it needs psycopg

from agents.memory.stores._postgres import postings as _postings  # noqa: E402  # after the skip: the postgres extra

pytestmark = pytest.mark.postgres

WORDS = ("the", "report", "dialog", "file", "open", "ok", "zeta", "chart")
QUERIES = ("the", "the report", "file ok ok", "zeta chart dialog", "open the file 17", "rare9 the")
PACKED = ("seqs_packed", "tfs_packed", "lens_packed")


def _text(i: int) -> str:
    """Return step ``i``'s note: common words (some in every step), a number and now and then a rare word."""
    words = ["the", *(WORDS[(i * j) % len(WORDS)] for j in range(1, i % 5 + 2)), str(i % 40)]
    if i % 37 == 0:
        words.append(f"rare{i % 10}")
    return " ".join(words)


def folding_every(url: str, rows: int) -> str:
    """Return ``url`` with its connections folding a session's unfolded rows past ``rows`` (``kvmemory.fold_rows``)."""
    return f"{url}%20-ckvmemory.fold_rows%3D{rows}"


def ranked_by_memory(items: dict[int, MemoryItem], query: str, k: int) -> list[tuple[int, float]]:
    """Return ``Memory.search``'s ``(seq, score)`` over the items (added in seq order; each item's ``step`` unique)."""
    memory = Memory()
    seq_of = {}
    for seq, item in sorted(items.items()):
        memory.add_memory_item(item)
        seq_of[item.get_value("step")] = seq
    return [(seq_of[hit.item.get_value("step")], hit.score) for hit in memory.search(query, k)]


def packed_columns(url: str) -> set[str]:
    """Return the packed copies' columns the blocks' table holds."""
    with psycopg.connect(url, autocommit=True) as con:
        rows = con.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'kvmemory_postings'::regclass"
            " AND attnum > 0 AND NOT attisdropped AND attname LIKE '%\\_packed'"
        ).fetchall()
    return {name for (name,) in rows}


def copies_disagreeing(url: str) -> int:
    """Return how many blocks hold packed copies other than their arrays' elements, each in its big-endian bytes (8 a seq, 4 a count or a length)."""
    with psycopg.connect(url, autocommit=True) as con:
        blocks = con.execute(
            "SELECT seqs, tfs, lens, seqs_packed, tfs_packed, lens_packed FROM kvmemory_postings"
        ).fetchall()
    assert blocks
    return sum(
        (
            struct.pack(f">{len(seqs)}q", *seqs),
            struct.pack(f">{len(tfs)}i", *tfs),
            struct.pack(f">{len(lens)}i", *lens),
        )
        != (bytes(a), bytes(b), bytes(c))
        for seqs, tfs, lens, a, b, c in blocks
    )


def schema_version(url: str) -> int:
    """Return the version the tables record."""
    with psycopg.connect(url, autocommit=True) as con:
        return int(con.execute("SELECT version FROM kvmemory_schema").fetchone()[0])


def leave_v11_tables(url: str) -> None:
    """Take the tables back to schema version 11: blocks without packed copies (nor a leaf table)."""
    leave_v12_tables(url)
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(
            "ALTER TABLE kvmemory_postings DROP COLUMN seqs_packed, DROP COLUMN tfs_packed,"
            " DROP COLUMN lens_packed"
        )
        con.execute(
            "DROP FUNCTION kvmemory_bigints_packed(bigint[]), kvmemory_ints_packed(integer[])"
        )
        con.execute("UPDATE kvmemory_schema SET version = 11")


def write_session(url: str) -> dict[int, MemoryItem]:
    """Write 300 steps in batches, folded every 16 rows, delete and update a few (stale rows); return the live items by seq."""
    with PostgresStore(folding_every(url, 16), pgvector=False) as store:
        seqs: list[int] = []
        for at in range(0, 300, 50):
            batch = [MemoryItem(step=i, note=_text(i)) for i in range(at, at + 50)]
            seqs += store.append("s", batch)
        store.delete_seqs("s", seqs[3:40:4])
        with store.batch("s") as batch:
            batch.update({seqs[50]: MemoryItem(step=50, note="zeta zeta chart rare9")})
        return {record.seq: record.item for record in store.records("s")}


@pytest.fixture
def statements() -> Iterator[list[str]]:
    """Collect the text of every statement the store's connections run."""
    seen: list[str] = []
    original = psycopg.Connection.execute

    def execute(self: Any, query: Any, params: Any = None, **options: Any) -> Any:
        seen.append(str(query))
        return original(self, query, params, **options)

    with mock.patch.object(psycopg.Connection, "execute", execute):
        yield seen


def assert_ranks_as_memory(store: PostgresStore, items: dict[int, MemoryItem]) -> None:
    """Every query, shallow and deep, with numpy and without, pruned or read whole, gives Memory.search's hits and scores."""
    for first_read in (_postings._FIRST_READ, 40):  # 40: common words left unread first
        with mock.patch.object(_postings, "_FIRST_READ", first_read):
            for query in QUERIES:
                for k in (3, 60):
                    expected = ranked_by_memory(items, query, k)
                    got = store.search("s", query, k, mode="keyword")
                    assert [(hit.seq, hit.score) for hit in got] == expected, (query, k)
                    with mock.patch.dict(sys.modules, {"numpy": None}):
                        plain = store.search("s", query, k, mode="keyword")
                    assert [(hit.seq, hit.score) for hit in plain] == expected, (query, k)


def test_a_ranking_sends_the_blocks_packed_copies_and_ranks_as_memory(
    postgres_url: str, statements: list[str]
) -> None:
    """On tables of the current version every block holds its arrays' packed copies; rankings read those, never converting the arrays, and give Memory.search's hits and scores."""
    items = write_session(postgres_url)
    assert packed_columns(postgres_url) == set(PACKED)
    assert copies_disagreeing(postgres_url) == 0
    statements.clear()
    with PostgresStore(postgres_url, pgvector=False) as store:
        assert_ranks_as_memory(store, items)
    ranking = [sql for sql in statements if "kvmemory_postings AS p" in sql]
    assert any("p.seqs_packed" in sql for sql in ranking)
    assert not any("array_send(p." in sql for sql in ranking)


def test_the_packed_copies_follow_every_write(postgres_url: str) -> None:
    """One-step appends, batches, updates below and above the mark, deletes and a cleared session, folded every few rows, leave each block's packed copies equal to its arrays; rankings stay Memory.search's."""
    items = write_session(postgres_url)
    with PostgresStore(folding_every(postgres_url, 4), pgvector=False) as store:
        for step in range(300, 320):
            (seq,) = store.append("s", [MemoryItem(step=step, note=_text(step))])
            items[seq] = MemoryItem(step=step, note=_text(step))
            if step % 3 == 0:
                low = min(items)
                store.delete_seqs("s", [low])
                del items[low]
            if step % 4 == 0:
                changed = sorted(items)[len(items) // 2]
                item = MemoryItem(step=items[changed].get_value("step"), note="open open the ok")
                with store.batch("s") as batch:
                    batch.update({changed: item})
                items[changed] = item
            assert copies_disagreeing(postgres_url) == 0
        store.append("t", [MemoryItem(step=i, note=_text(i)) for i in range(30)])
        store.clear("t")
        assert copies_disagreeing(postgres_url) == 0
        assert_ranks_as_memory(store, items)


def test_v11_tables_read_only_convert_the_arrays_then_are_migrated(
    postgres_url: str, statements: list[str]
) -> None:
    """v11 tables (blocks without packed copies) opened read-only rank by converting the arrays and stay version 11; opened writable they gain the copies, read them, keep them through writes, and rank as Memory.search throughout."""
    items = write_session(postgres_url)
    leave_v11_tables(postgres_url)
    statements.clear()
    with PostgresStore(postgres_url, pgvector=False, read_only=True) as reader:
        assert_ranks_as_memory(reader, items)
    ranking = [sql for sql in statements if "kvmemory_postings AS p" in sql]
    assert any("array_send(p.seqs)" in sql for sql in ranking)
    assert not any("_packed" in sql for sql in ranking)
    assert schema_version(postgres_url) == 11
    assert packed_columns(postgres_url) == set()
    statements.clear()
    with PostgresStore(folding_every(postgres_url, 8), pgvector=False) as store:
        assert schema_version(postgres_url) == PostgresStore.schema_version == 14
        assert packed_columns(postgres_url) == set(PACKED)
        assert copies_disagreeing(postgres_url) == 0
        assert_ranks_as_memory(store, items)
        ranking = [sql for sql in statements if "kvmemory_postings AS p" in sql]
        assert any("p.seqs_packed" in sql for sql in ranking)
        assert not any("array_send(p." in sql for sql in ranking)
        more = [MemoryItem(step=1000 + i, note=_text(i)) for i in range(20)]
        items.update(zip(store.append("s", more), more, strict=True))
        store.delete_seqs("s", [min(items)])
        del items[min(items)]
        assert copies_disagreeing(postgres_url) == 0
        assert_ranks_as_memory(store, items)
