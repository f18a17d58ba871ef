"""PostgreSQL's leaf table (schema version 13): ranges named by btree indexes keep every row the filter passes, through every write, and older tables still read."""

from __future__ import annotations

import enum
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agents.memory import Memory, MemoryItem
from agents.memory.search import Filter
from agents.memory.stores import PostgresStore

psycopg = pytest.importorskip("psycopg")

from postgres_checks import leave_v12_tables, rows_read, skip_without_flushed_counters  # noqa: E402  # after the skip: it needs psycopg

pytestmark = pytest.mark.postgres


class Level(enum.IntEnum):
    """An int enum: a number to the filter, a tagged value to the codec."""

    HIGH = 2


LONG = "p" * 70  # longer than the leaf table keeps: ordered by its first 64 characters
SCALARS = (
    0,
    1,
    2,
    2.5,
    -1,
    1e-320,
    2**60,
    2**60 + 1.0,
    True,
    False,
    None,
    "2",
    "b",
    "ba",
    LONG,
    LONG + "a",
    LONG + "b",
    "x\x00",
)
STORED = (*SCALARS, Decimal(2), Level.HIGH, [2], (2,), float("inf"), float("nan"), {"b": 2})
BOUNDS = (0, 1, 2, 2.5, -1, 1e-320, 2**60, "b", "ba", LONG, LONG + "a", "")

stored = st.sampled_from(STORED)
values = st.one_of(stored, stored.map(lambda v: {"b": v}), stored.map(lambda v: {1: "k", "b": v}))
conditions = st.one_of(
    st.builds(
        lambda f, op, v: {f: {op: v}},
        st.sampled_from(("a", "m.b", "m")),
        st.sampled_from(("$gt", "$gte", "$lt", "$lte")),
        st.sampled_from(BOUNDS),
    ),
    st.builds(
        lambda f, lo, hi: {f: {"$gte": lo, "$lte": hi}},
        st.sampled_from(("a", "m.b")),
        st.sampled_from(BOUNDS),
        st.sampled_from(BOUNDS),
    ),
    st.builds(lambda lo: {"a": range(lo, lo + 100)}, st.integers(-2, 2)),
    st.builds(lambda v: {"a": v}, st.sampled_from(SCALARS)),
)
filters = st.one_of(
    conditions,
    st.builds(lambda a, b: {"$and": [a, b]}, conditions, conditions),
    st.builds(lambda a, b: {"$or": [a, b]}, conditions, conditions),
)


@st.composite
def fields(draw: st.DrawFn) -> dict[str, Any]:
    """One step's fields: mixed values at ``a``, ``m`` (a dict, plain or tagged) and ``m.b`` (a whole field name)."""
    out: dict[str, Any] = {"note": "the" + " x" * draw(st.integers(0, 3))}
    for name in ("a", "m", "m.b"):
        if draw(st.booleans()):
            out[name] = draw(values)
    if draw(st.integers(0, 9)) == 0:
        out["$kv"] = "z"  # the codec wraps the item: its fields sit under "fields"
    return out


# An operation: ("append", fields), ("update", position, fields), ("delete", position), by one
# handle or the other.
operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), fields(), st.booleans()),
        st.tuples(st.just("update"), st.integers(0, 99), fields(), st.booleans()),
        st.tuples(st.just("delete"), st.integers(0, 99), st.booleans()),
    ),
    max_size=6,
)


def expected_ranking(store: PostgresStore, sid: str, where: Any, k: int) -> list[tuple[int, float]]:
    """``Memory.search``'s ``(seq, score)`` over the session's items as stored now (each item's ``uid`` names its seq)."""
    records = store.records(sid)
    memory = Memory()
    for record in records:
        memory.add_memory_item(record.item)
    seq_of = {record.item.get_value("uid"): record.seq for record in records}
    return [
        (seq_of[hit.item.get_value("uid")], hit.score)
        for hit in memory.search("the", k, where=where)
    ]


def assert_named_as_filter_keeps(store: PostgresStore, sid: str, where: Any) -> None:
    """The rows SQL names keep every row the filter passes; the keyword search gives Memory.search's hits and scores."""
    keep = Filter(where)
    passing = {record.seq for record in store.records(sid) if keep(record.item)}
    named = store.backend.filter_candidates(sid, keep.tree)
    assert named is None or passing <= named, (where, passing - (named or set()))
    for k in (1, 4, 100):
        got = store.search(sid, "the", k, mode="keyword", where=where)
        assert [(hit.seq, hit.score) for hit in got] == expected_ranking(store, sid, where, k)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(first=st.lists(fields(), min_size=1, max_size=24), ops=operations, where=filters)
# A bound's own value passes $gte and $lte; a long string ties with its bound on 64 characters.
@example(first=[{"note": "the", "a": 2}], ops=[], where={"a": {"$gte": 2, "$lte": 2}})
@example(first=[{"note": "the", "a": LONG + "a"}], ops=[], where={"a": {"$gt": LONG}})
@example(first=[{"note": "the", "a": LONG}], ops=[], where={"a": {"$lt": LONG + "a"}})
@example(first=[{"note": "the", "m": {1: "k", "b": 2}}], ops=[], where={"m.b": {"$gte": 2}})
@example(first=[{"note": "the", "a": 1e-320}], ops=[], where={"a": {"$gt": 0}})
@example(first=[{"note": "the", "a": Level.HIGH}], ops=[], where={"a": {"$lte": 2}})
def test_ranges_named_by_the_leaves_keep_what_the_filter_keeps_through_writes(
    postgres_url: str, first: list[dict[str, Any]], ops: list[tuple[Any, ...]], where: Any
) -> None:
    """After appends, updates and deletes by two handles, the rows a range names keep every row Filter passes, and searches rank as Memory.search."""
    sid = uuid.uuid4().hex
    uid = iter(range(10**6))
    with (
        PostgresStore(postgres_url, pgvector=False) as store,
        PostgresStore(postgres_url, pgvector=False) as other,
    ):
        seqs = store.append(sid, [MemoryItem(uid=next(uid), **f) for f in first])
        for op in ops:
            writer = other if op[-1] else store
            if op[0] == "append":
                seqs += writer.append(sid, [MemoryItem(uid=next(uid), **op[1])])
            elif op[0] == "update" and seqs:
                with writer.batch(sid) as batch:
                    batch.update({seqs[op[1] % len(seqs)]: MemoryItem(uid=next(uid), **op[2])})
            elif op[0] == "delete" and seqs:
                writer.delete_seqs(sid, [seqs.pop(op[1] % len(seqs))])
        assert_named_as_filter_keeps(store, sid, where)
        assert_named_as_filter_keeps(other, sid, where)


def leaves_of(url: str, sid: str) -> list[tuple[Any, ...]]:
    """The session's rows of the leaf table, sorted."""
    with psycopg.connect(url, autocommit=True) as con:
        return sorted(
            con.execute(
                "SELECT seq, path, num, txt FROM kvmemory_leaves WHERE session_id = %s", (sid,)
            ).fetchall()
        )


def test_the_leaves_hold_each_number_and_string_by_path_and_go_with_their_rows(
    postgres_url: str,
) -> None:
    """A row's numbers and strings are kept by dotted path (strings cut to 64 characters, tagged values as markers), replaced by an update and gone with a delete or a cleared session."""
    with PostgresStore(postgres_url, pgvector=False) as store:
        (seq,) = store.append(
            "s", [MemoryItem(w=0.5, t=LONG + "z", m={"b": 3, "c": [1]}, f=True, n=float("nan"))]
        )
        assert leaves_of(postgres_url, "s") == [
            (seq, "m.b", 3.0, None),
            (seq, "n", None, None),
            (seq, "t", None, LONG[:64]),
            (seq, "w", 0.5, None),
        ]
        with store.batch("s") as batch:
            batch.update({seq: MemoryItem(w=7)})
        assert leaves_of(postgres_url, "s") == [(seq, "w", 7.0, None)]
        (second,) = store.append("s", [MemoryItem(w=8)])
        store.delete_seqs("s", [seq])
        assert leaves_of(postgres_url, "s") == [(second, "w", 8.0, None)]
        store.clear("s")
        assert leaves_of(postgres_url, "s") == []
        store.append("s", [MemoryItem(w=9)])
        store.delete_session("s")
        assert leaves_of(postgres_url, "s") == []


def test_a_rare_range_reads_the_rows_it_names_not_the_session(postgres_url: str) -> None:
    """A range 3 of 3,000 rows pass (numbers and strings) is named by the leaves: the filter reads a handful of rows, not the session's 3,000 JSONB copies."""
    skip_without_flushed_counters(postgres_url)
    chosen = [
        MemoryItem(step=i, note="the", w=i / 1000, day=f"2024-{i % 12 + 1:02}-{i % 28 + 1:02}")
        for i in range(3000)
    ]
    with PostgresStore(postgres_url, pgvector=False, min_size=1, max_size=1) as store:
        store.append("s", chosen)
        with psycopg.connect(postgres_url, autocommit=True) as con:
            con.execute("VACUUM ANALYZE kvmemory_items")
            con.execute("VACUUM ANALYZE kvmemory_leaves")
        for where, passing in (
            ({"w": {"$gte": 1.5, "$lt": 1.5025}}, {1501, 1502, 1503}),
            ({"w": {"$gt": 2.9965}}, {2998, 2999, 3000}),
            ({"day": {"$gt": "2024-12-28"}}, set()),
        ):
            tree = Filter(where).tree
            assert store.backend.filter_named(tree)
            before = rows_read(store)
            named = store.backend.filter_candidates("s", tree)
            read = rows_read(store) - before
            assert named == passing, where
            assert read < 50, (where, read)


def test_a_range_the_leaves_name_whole_reads_no_row_of_the_session(postgres_url: str) -> None:
    """A filter of ranges alone (numbers, strings, 10% to 50% of 3,000 rows pass, $and and $or of them) is answered from the leaf table's indexes: no row's JSONB copy is read, and the answer keeps every row that passes."""
    skip_without_flushed_counters(postgres_url)
    chosen = [
        MemoryItem(step=i, note="the", w=(i * 7919 % 1000) / 1000, m={"v": i % 12}, day=f"{i}")
        for i in range(3000)
    ]
    with PostgresStore(postgres_url, pgvector=False, min_size=1, max_size=1) as store:
        seqs = store.append("s", chosen)
        with psycopg.connect(postgres_url, autocommit=True) as con:
            con.execute("VACUUM ANALYZE kvmemory_items")
            con.execute("VACUUM ANALYZE kvmemory_leaves")
        # Each filter, and the rows SQL over the copies keeps: numbers widened, a bound's own too.
        for where, wide in (
            ({"w": {"$lt": 0.1}}, {"w": {"$lte": 0.1}}),
            ({"w": {"$gte": 0.2, "$lt": 0.5}}, {"w": {"$gte": 0.2, "$lte": 0.5}}),
            (
                {"$and": [{"w": {"$lt": 0.5}}, {"m.v": {"$lte": 5}}]},
                {"$and": [{"w": {"$lte": 0.5}}, {"m.v": {"$lte": 5}}]},
            ),
            (
                {"$or": [{"w": {"$lt": 0.1}}, {"m.v": {"$gt": 9}}]},
                {"$or": [{"w": {"$lte": 0.1}}, {"m.v": {"$gte": 9}}]},
            ),
            # Strings shorter than the leaves keep are compared whole, strictly.
            ({"day": {"$gt": "2700"}}, {"day": {"$gt": "2700"}}),
            ({"day": {"$gte": "1", "$lt": "15"}}, {"day": {"$gte": "1", "$lt": "15"}}),
        ):
            keep, kept = Filter(where), Filter(wide)
            before = rows_read(store)
            named = store.backend.filter_candidates("s", keep.tree)
            few = store.backend.filter_few("s", keep.tree, 3000)
            read = rows_read(store) - before
            assert named == {seq for seq, item in zip(seqs, chosen, strict=True) if kept(item)}, (
                where
            )
            assert few == named, where
            assert read < 10, (where, read)
        # A string longer than the leaves keep, and a range beside a condition the leaves cannot
        # name: the rows named are judged.
        for where, wide in (
            ({"w": {"$lt": 0.1}, "note": {"$ne": "a"}}, {"w": {"$lte": 0.1}}),
            ({"day": {"$gt": "2" + "0" * 70}}, {"day": {"$gt": "2" + "0" * 70}}),
        ):
            kept = Filter(wide)
            before = rows_read(store)
            named = store.backend.filter_candidates("s", Filter(where).tree)
            assert named == {seq for seq, item in zip(seqs, chosen, strict=True) if kept(item)}, (
                where
            )
            assert rows_read(store) - before >= 300, where


def schema_version(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as con:
        return int(con.execute("SELECT max(version) FROM kvmemory_schema").fetchone()[0])


def test_v12_tables_read_only_scan_for_ranges_then_are_migrated(postgres_url: str) -> None:
    """v12 tables opened read-only answer ranges by reading the rows' copies and stay version 12; opened writable they gain the leaves of every stored row, name ranges from them and keep them through writes."""
    uid = iter(range(10**6))
    chosen = [
        MemoryItem(uid=next(uid), note="the", w=i % 7, m={"b": str(i % 5)}) for i in range(60)
    ]
    where = [{"w": {"$gte": 5}}, {"m.b": {"$lt": "2"}}, {"$or": [{"w": {"$lt": 1}}, {"w": 6}]}]
    with PostgresStore(postgres_url, pgvector=False) as store:
        store.append("s", chosen)
    leave_v12_tables(postgres_url)
    with PostgresStore(postgres_url, pgvector=False, read_only=True) as reader:
        for one in where:
            assert not reader.backend.filter_named(Filter(one).tree)
            assert_named_as_filter_keeps(reader, "s", one)
    assert schema_version(postgres_url) == 12
    with PostgresStore(postgres_url, pgvector=False) as store:
        assert schema_version(postgres_url) == PostgresStore.schema_version == 14
        assert len(leaves_of(postgres_url, "s")) == 4 * 60  # m.b, note, uid, w
        store.append("s", [MemoryItem(uid=next(uid), note="the", w=6, m={"b": "0"})])
        for one in where:
            assert store.backend.filter_named(Filter(one).tree)
            assert_named_as_filter_keeps(store, "s", one)


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_semantic_and_hybrid_searches_with_a_named_range_rank_as_memory_search(
    postgres_url: str, mode: str
) -> None:
    """A semantic or hybrid search whose range the leaves name (1%, 0.1%, none, strings, on a dotted path) gives Memory.search's hits and float scores."""
    from agents.memory.search import HashingEmbedder

    embedder = HashingEmbedder()
    words = ("the report", "open file", "chart dialog", "the invoice moved")
    chosen = [
        MemoryItem(
            uid=i,
            note=f"{words[i % 4]} {i % 13}",
            w=(i * 7919 % 1000) / 1000,
            meta={"day": f"2024-{i % 12 + 1:02}-{i % 28 + 1:02}"},
        )
        for i in range(1000)
    ]
    memory = Memory()
    for item in chosen:
        memory.add_memory_item(item)
    with PostgresStore(postgres_url, pgvector=False) as store:
        seqs = store.append("s", chosen)
        store.index_embeddings("s", embedder)
        for where in (
            {"w": {"$gte": 0.25, "$lt": 0.26}},
            {"w": {"$gte": 0.25, "$lt": 0.251}},
            {"w": {"$gt": 1.5}},
            {"meta.day": {"$gte": "2024-12-20", "$lte": "2024-12-22"}},
            {"$or": [{"w": {"$lt": 0.004}}, {"meta.day": {"$gt": "2024-12-27"}}]},
            # Common ranges, named by the leaves alone (a bound's own value among them: $lt).
            {"w": {"$lt": 0.1}},
            {"w": {"$lt": 0.3}},
            {"$and": [{"w": {"$lt": 0.5}}, {"meta.day": {"$lte": "2024-06-30"}}]},
            {"$or": [{"w": {"$lt": 0.1}}, {"w": {"$gte": 0.8}}]},
        ):
            assert store.backend.filter_named(Filter(where).tree), where
            for query in ("the report", "invoice moved 7"):
                expected = [
                    (seqs[int(hit.item.get_value("uid"))], hit.score)
                    for hit in memory.search(query, 5, mode=mode, where=where, embedder=embedder)
                ]
                got = store.search("s", query, 5, mode=mode, where=where, embedder=embedder)
                assert [(hit.seq, hit.score) for hit in got] == expected, (where, query)
