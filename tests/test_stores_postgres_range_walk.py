"""A rare filter no index names (a range, ``$ne``, ``$nin``) on PostgreSQL: found down deeper rankings judged by key, exactly as ``Memory.search`` filters."""

from __future__ import annotations

import enum
import uuid
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agents.memory import Memory, MemoryItem
from agents.memory.search import Filter
from agents.memory.stores import PostgresStore

psycopg = pytest.importorskip("psycopg")

from postgres_checks import ranked_by_memory, rows_read, skip_without_flushed_counters  # noqa: E402  # after the skip: it needs psycopg

from agents.memory.stores._postgres import keyword as _keyword  # noqa: E402  # after the skip: the postgres extra

pytestmark = pytest.mark.postgres


class Level(enum.IntEnum):
    """An int enum: a number to the filter, a tagged value to the codec."""

    HIGH = 2


NUMBERS = (0, 1, 2, 3, 1.0, 2.5, -1, True, False, None, "2", 2**60, 2**60 + 1.0)
STORED = (*NUMBERS, Decimal(2), Level.HIGH, [2], "x\x00", float("inf"), float("nan"))

stored = st.sampled_from(STORED)
leaves = st.one_of(stored, stored.map(lambda v: {"b": v}), stored.map(lambda v: {1: "k", "b": v}))
bounds = st.sampled_from((0, 1, 2, 2.5, -1, 2**60))
values = st.sampled_from((0, 1, 2, 2.5, True, None, "2", 2**60))


@st.composite
def items(draw: st.DrawFn) -> list[MemoryItem]:
    """Steps of varied length, most holding the query word, with numbers of every kind at ``a`` and ``m.b``."""
    out = []
    for step in range(draw(st.integers(12, 40))):
        words = "the " * draw(st.integers(1, 4)) if draw(st.integers(0, 5)) else "other"
        fields: dict[str, Any] = {"step": step, "note": words + " x" * draw(st.integers(0, 3))}
        for name in ("a", "m"):
            if draw(st.booleans()):
                fields[name] = draw(leaves)
        if draw(st.integers(0, 9)) == 0:
            fields["$kv"] = "z"  # the codec wraps the item: its fields sit under "fields"
        out.append(MemoryItem(**fields))
    return out


conditions = st.one_of(
    st.builds(
        lambda f, op, v: {f: {op: v}},
        st.sampled_from(("a", "m.b")),
        st.sampled_from(("$gt", "$gte", "$lt", "$lte")),
        bounds,
    ),
    st.builds(lambda f, v: {f: {"$ne": v}}, st.sampled_from(("a", "m.b")), values),
    st.builds(lambda f, lo, hi: {f: {"$gte": lo, "$lt": hi}}, st.just("a"), bounds, bounds),
    st.builds(lambda f, vs: {f: {"$nin": vs}}, st.just("a"), st.lists(values, max_size=2)),
    st.builds(lambda lo: {"a": range(lo, lo + 100)}, st.integers(-2, 2)),
)
filters = st.one_of(
    conditions,
    st.builds(lambda a, b: {"$and": [a, b]}, conditions, conditions),
    st.builds(lambda a, b: {"$or": [a, b]}, conditions, conditions),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(chosen=items(), where=filters, k=st.integers(1, 4))
# A row holding NUL has no JSONB copy; an IntEnum is a tagged 2; True is not 1 to a range.
@example(
    chosen=[MemoryItem(step=i, note="the", a="x\x00" if i == 9 else i) for i in range(16)],
    where={"a": {"$gt": 100}},
    k=2,
)
@example(
    chosen=[MemoryItem(step=i, note="the", a=Level.HIGH if i == 11 else True) for i in range(16)],
    where={"a": {"$gte": 2}},
    k=1,
)
def test_rare_range_filters_walked_down_the_ranking_rank_as_memory_search(
    postgres_url: str, chosen: list[MemoryItem], where: dict[str, Any], k: int
) -> None:
    """A filter no index names, ranked 4k deep, then to the whole session, judged by key in slices 1, 2, 4, ... rows long, ranks as Memory.search: hits and scores (and as much where it reads every row's copy instead)."""
    with PostgresStore(postgres_url, pgvector=False) as store:
        sid = uuid.uuid4().hex  # a fresh session per example (hypothesis replays some)
        store.append(sid, chosen)
        # The walk serves what no index names: $ne, $nin, and ranges on tables without the
        # leaf table (older tables opened read-only), as here.
        store.backend.leaf_index = False
        assert not store.backend.filter_named(Filter(where).tree)
        with (
            mock.patch.object(_keyword, "_RANKED_DEEP", 2),
            mock.patch.object(_keyword, "_RANKED_FIRST", 2),
            mock.patch.object(_keyword, "_JUDGED_FIRST", 1),
            mock.patch.object(_keyword, "_WALK_GROWTH", 2),
            mock.patch.object(_keyword, "_WALKED_SHARE", 1.0),
            mock.patch.object(
                store.backend, "filter_candidates", side_effect=AssertionError("scanned")
            ),
        ):
            got = store.search(sid, "the", k, mode="keyword", where=where)
        assert [(hit.seq, hit.score) for hit in got] == ranked_by_memory(chosen, "the", k, where)
        # Past the share walked, every row's copy is read instead: the same answer.
        with (
            mock.patch.object(_keyword, "_RANKED_DEEP", 2),
            mock.patch.object(_keyword, "_RANKED_FIRST", 2),
            mock.patch.object(_keyword, "_WALKED_SHARE", 0.0),
        ):
            got = store.search(sid, "the", k, mode="keyword", where=where)
        assert [(hit.seq, hit.score) for hit in got] == ranked_by_memory(chosen, "the", k, where)


def test_a_rare_range_filter_reads_rows_down_the_ranking_not_the_session(
    postgres_url: str,
) -> None:
    """A range filter 1% of 6,000 steps pass, past a first ranking of 64, reads the rows ranked down to its 5 hits (under 1,500), where it read every row's JSONB copy (over 6,000)."""
    skip_without_flushed_counters(postgres_url)
    chosen = [
        MemoryItem(step=i, note="the report" + " x" * (i % 7), cost=1.0 if i % 100 == 42 else 0.01)
        for i in range(6000)
    ]
    where = {"cost": {"$gt": 0.5}}
    memory = Memory()
    for item in chosen:
        memory.add_memory_item(item)
    expected = [
        (int(hit.item.get_value("step")) + 1, hit.score)
        for hit in memory.search("the report", 5, where=where)
    ]
    with PostgresStore(postgres_url, pgvector=False, min_size=1, max_size=1) as store:
        store.append("s", chosen)
        with psycopg.connect(postgres_url, autocommit=True) as con:
            con.execute("VACUUM ANALYZE kvmemory_items")
        with (
            mock.patch.object(_keyword, "_RANKED_DEEP", 64),
            mock.patch.object(_keyword, "_RANKED_FIRST", 64),
        ):
            before = rows_read(store)
            got = store.search("s", "the report", 5, mode="keyword", where=where)
            read = rows_read(store) - before
    assert [(hit.seq, hit.score) for hit in got] == expected
    assert read < 1500, read
