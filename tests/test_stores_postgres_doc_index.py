"""The PostgreSQL store's GIN index over the JSONB copy (schema version 11): the rows a rare filter may pass named from it, exactly as ``Memory.search`` filters."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agents.memory import MemoryItem
from agents.memory.search import Filter
from agents.memory.stores import PostgresStore
from agents.memory.stores._sql.doc_index import index_predicate

psycopg = pytest.importorskip("psycopg")

from postgres_checks import ranked_by_memory, rows_read, skip_without_flushed_counters  # noqa: E402  # after the skip: it needs psycopg

from agents.memory.stores._postgres import keyword as _keyword  # noqa: E402  # after the skip: the postgres extra

pytestmark = pytest.mark.postgres


class Level(enum.IntEnum):
    """An int enum: a number to the filter, a tagged value to the codec."""

    HIGH = 2


class Colour(str, enum.Enum):
    """A str enum: a string to the filter, a tagged value to the codec."""

    RED = "x"


SCALARS = (
    "x",
    "y",
    "x\x00",
    0,
    1,
    2,
    1.0,
    2.5,
    -3,
    True,
    False,
    None,
    2**60,
)
STORED = (
    *SCALARS,
    Decimal(1),
    Level.HIGH,
    Colour.RED,
    (1,),
    [1],
    ["x"],
    dt.date(2024, 1, 2),
    float("inf"),
)

scalars = st.sampled_from(SCALARS)
stored = st.sampled_from(STORED)
leaves = st.one_of(
    stored,
    stored.map(lambda v: {"b": v}),
    stored.map(lambda v: {"b": {"c": v}}),
    stored.map(lambda v: {1: "k", "b": v}),  # a dict the codec tags: Python follows it
    stored.map(lambda v: [{"b": v}]),
)


@st.composite
def items(draw: st.DrawFn) -> list[MemoryItem]:
    """Steps all holding the query word, with values of every kind at ``a``, ``m`` and the whole name ``m.b``."""
    out = []
    for step in range(draw(st.integers(12, 30))):
        fields: dict[str, Any] = {"step": step, "note": "the " * draw(st.integers(1, 3))}
        for name in ("a", "m"):
            if draw(st.booleans()):
                fields[name] = draw(leaves)
        if draw(st.integers(0, 9)) == 0:
            fields["m.b"] = draw(stored)
        if draw(st.integers(0, 9)) == 0:
            fields["$kv"] = "z"  # the codec wraps the item: its fields sit under "fields"
        out.append(MemoryItem(**fields))
    return out


conditions = st.one_of(
    st.builds(lambda f, v: {f: v}, st.sampled_from(("a", "m.b", "m.b.c")), scalars),
    st.builds(
        lambda f, vs: {f: {"$in": vs}},
        st.sampled_from(("a", "m.b")),
        st.lists(scalars, max_size=3),
    ),
    st.builds(
        lambda f, lo: {f: range(lo, lo + 2)}, st.sampled_from(("a", "m.b")), st.integers(-3, 2)
    ),
)
filters = st.one_of(
    conditions,
    st.builds(lambda a, b: {"$and": [a, b]}, conditions, conditions),
    st.builds(lambda a, b: {"$or": [a, b]}, conditions, conditions),
    st.builds(lambda a: {"$and": [a, {"step": {"$gte": 3}}]}, conditions),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(chosen=items(), where=filters)
# A row holding NUL has no JSONB copy; a "$kv" field wraps the item; an IntEnum is a tagged 2.
@example(
    chosen=[
        MemoryItem(step=i, note="the", a="x\x00" if i == 7 else "y", m={"b": 1}) for i in range(12)
    ],
    where={"$and": [{"m.b": 1}, {"a": {"$in": ["x\x00", "z"]}}]},
)
@example(
    chosen=[MemoryItem(step=i, note="the", **{"$kv": "z", "m": {"b": i}}) for i in range(12)],
    where={"m.b": 5},
)
@example(
    chosen=[MemoryItem(step=i, note="the", a=Level.HIGH if i == 3 else 1) for i in range(12)],
    where={"a": 2.0},
)
def test_rare_filters_through_the_doc_index_rank_as_memory_search(
    postgres_url: str, chosen: list[MemoryItem], where: dict[str, Any]
) -> None:
    """The rows the GIN index names keep every row that passes (tagged values, 1 vs 1.0 vs True, NUL, the item wrapper, dotted paths), and a filtered search that asks for them ranks as Memory.search, hits and scores."""
    keep = Filter(where)
    with PostgresStore(postgres_url, pgvector=False) as store:
        sid = uuid.uuid4().hex  # a fresh session per example (hypothesis replays some)
        store.append(sid, chosen)
        backend = store.backend
        assert backend.doc_index
        with mock.patch.object(backend, "query_indexed", wraps=backend.query_indexed) as indexed:
            allowed = backend.filter_candidates(sid, keep.tree)
        passing = {seq for seq, item in enumerate(chosen, 1) if keep(item)}
        assert allowed is None or passing <= allowed, (where, passing - (allowed or set()))
        # Named by the index, not read from every row (2**60 is past what it compares exactly);
        # a range beside an equality is named by the leaf table too (schema version 13).
        assert indexed.called == backend.filter_named(keep.tree), where
        if index_predicate(keep.tree) is not None:
            assert indexed.called, where
        # A ranking of 4 rows judged first: the rest are the index's candidates, scored alone.
        with mock.patch.object(_keyword, "_RANKED_FIRST", 1):
            got = store.search(sid, "the", 1, mode="keyword", where=where)
            assert [(hit.seq, hit.score) for hit in got] == ranked_by_memory(
                chosen, "the", 1, where
            )


def test_a_rare_filter_reads_the_rows_the_index_names_not_the_session(postgres_url: str) -> None:
    """filter_candidates for a filter 3 of 3,000 steps pass reads a few rows (the index's), where it read all 3,000 JSONB copies."""
    skip_without_flushed_counters(postgres_url)
    chosen = [
        MemoryItem(step=i, note="the report", owner="rev" if i % 1000 == 7 else "host")
        for i in range(3000)
    ]
    with PostgresStore(postgres_url, pgvector=False, min_size=1, max_size=1) as store:
        store.append("s", chosen)
        with psycopg.connect(postgres_url, autocommit=True) as con:
            con.execute("VACUUM ANALYZE kvmemory_items")
        before = rows_read(store)
        allowed = store.backend.filter_candidates("s", Filter({"owner": "rev"}).tree)
        read = rows_read(store) - before
        assert allowed == {8, 1008, 2008}
        assert read < 100, read
        got = store.search("s", "the report", 5, where={"owner": "rev"})
        assert [(hit.seq, hit.score) for hit in got] == ranked_by_memory(
            chosen, "the report", 5, {"owner": "rev"}
        )


def write_v10_store(url: str) -> list[MemoryItem]:
    """Leave tables of schema version 10 (no index over the JSONB copy) holding 40 steps; return them."""
    chosen = [
        MemoryItem(
            step=i,
            note="the chart",
            owner="rev" if i in (5, 31) else "host",
            tag=Level.HIGH if i == 9 else 0,
        )
        for i in range(40)
    ]
    with PostgresStore(url, pgvector=False) as store:
        store.append("s", chosen)
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("DROP INDEX kvmemory_items_doc, kvmemory_items_docless")
        con.execute("UPDATE kvmemory_schema SET version = 10")
    return chosen


def doc_indexes(url: str) -> set[str]:
    """Return the names of the indexes over the JSONB copy the tables hold."""
    with psycopg.connect(url, autocommit=True) as con:
        rows = con.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'kvmemory_items'"
            " AND indexname IN ('kvmemory_items_doc', 'kvmemory_items_docless')"
        ).fetchall()
    return {name for (name,) in rows}


def test_v10_store_opened_read_only_filters_by_scanning_then_is_migrated(postgres_url: str) -> None:
    """v10 tables opened read-only filter by reading the rows (no index used) and stay version 10; opened writable they get both indexes, and filter through them, as Memory.search."""
    chosen = write_v10_store(postgres_url)
    where_all = ({"owner": "rev"}, {"tag": 2}, {"owner": {"$in": ["rev", "nobody"]}})
    with PostgresStore(postgres_url, pgvector=False, read_only=True) as reader:
        assert not reader.backend.doc_index
        for where in where_all:
            keep = Filter(where)
            passing = {seq for seq, item in enumerate(chosen, 1) if keep(item)}
            allowed = reader.backend.filter_candidates("s", keep.tree)
            assert allowed is not None
            assert passing <= allowed
            got = reader.search("s", "the chart", 5, where=where)
            assert [(hit.seq, hit.score) for hit in got] == ranked_by_memory(
                chosen, "the chart", 5, where
            )
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [(10,)]
    assert doc_indexes(postgres_url) == set()
    with PostgresStore(postgres_url, pgvector=False) as store:
        assert store.backend.doc_index
        assert doc_indexes(postgres_url) == {"kvmemory_items_doc", "kvmemory_items_docless"}
        for where in where_all:
            keep = Filter(where)
            passing = {seq for seq, item in enumerate(chosen, 1) if keep(item)}
            allowed = store.backend.filter_candidates("s", keep.tree)
            assert allowed is not None
            assert passing <= allowed
            got = store.search("s", "the chart", 5, where=where)
            assert [(hit.seq, hit.score) for hit in got] == ranked_by_memory(
                chosen, "the chart", 5, where
            )
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [
            (PostgresStore.schema_version,)
        ]


@pytest.mark.parametrize(
    "value",
    ['q"uote', "back\\slash", "ctl\x01\x1f\n\t", "emoji 😀 \u2028", "$", "'", -0.0, 1e-7, -3],
)
def test_values_json_paths_must_escape_are_named_by_the_index(
    postgres_url: str, value: object
) -> None:
    """Quotes, backslashes, control characters, astral characters and numbers in every spelling are found through the index, as Python finds them."""
    chosen = [MemoryItem(step=i, note="the", a=value if i == 3 else "other") for i in range(8)]
    keep = Filter({"a": value})
    with PostgresStore(postgres_url, pgvector=False) as store:
        store.append("s", chosen)
        with mock.patch.object(
            store.backend, "query_indexed", wraps=store.backend.query_indexed
        ) as indexed:
            assert store.backend.filter_candidates("s", keep.tree) == {4}
        assert indexed.called


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(chosen=items(), where=filters)
@example(
    chosen=[MemoryItem(step=i, note="the", m={"b": "x" if i == 5 else "y"}) for i in range(12)],
    where={"m.b": "x"},
)
@example(
    chosen=[MemoryItem(step=i, note="the", **{"$kv": "z", "m": {"b": i}}) for i in range(12)],
    where={"m.b": 20},
)
def test_rows_judged_by_key_keep_every_row_that_passes_and_rank_as_memory_search(
    postgres_url: str, chosen: list[MemoryItem], where: dict[str, Any]
) -> None:
    """filter_among judges the rows it is given by the SQL condition alone, never the GIN index's JSON path, and keeps every row that passes; a search that judges its ranking by key ranks as Memory.search, hits and scores (filters 0, 1 or a few rows pass)."""
    keep = Filter(where)
    with PostgresStore(postgres_url, pgvector=False) as store:
        sid = uuid.uuid4().hex
        store.append(sid, chosen)
        backend = store.backend
        with mock.patch.object(backend, "query_rows", wraps=backend.query_rows) as queried:
            among = backend.filter_among(sid, keep.tree, list(range(1, len(chosen) + 1)))
        # The JSON path spells every codec tag at every path (114 alternatives for one dotted
        # $eq): tested on each copy looked up by key it cost more than the condition it narrows.
        assert all("@@" not in call.args[0] for call in queried.call_args_list), where
        passing = {seq for seq, item in enumerate(chosen, 1) if keep(item)}
        assert among is None or passing <= among, (where, passing - (among or set()))
        for k in (1, 3):
            got = store.search(sid, "the", k, mode="keyword", where=where)
            assert [(hit.seq, hit.score) for hit in got] == ranked_by_memory(
                chosen, "the", k, where
            )
