"""A filtered hybrid query over a coded session (int8, over the kept-vector budget): Memory.search's hits and floats, each keyword depth ranked once and each item's vectors read once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from coded_sessions import (
    EMBEDDER,
    QUERIES,
    coded_handle,
    coded_up,
    expected,
    found,
    kept_tables,
    kept_types,
    steps,
    written,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.memory import Memory, MemoryItem
from agents.memory._vectors import checked_vectors
from agents.memory.stores import Store
from agents.memory.stores._search.compact import CompactVectors
from agents.memory.stores._search.hybrid import held_ranking

# Each test twice: the coded rows bounded by simsimd, then by numpy (simsimd refused).
pytestmark = pytest.mark.usefixtures("int8_kernel")

N = 400


def filters(n: int) -> st.SearchStrategy[dict[str, Any]]:
    """Filters of fields passing from one step in ``n`` to every step: ranges of ``step``, ``$eq`` and ``$in`` of ``team``, ``$or`` of two ranges, a range and a team."""
    span = st.integers(0, n).flatmap(lambda start: st.tuples(st.just(start), st.integers(1, n)))
    ranges = span.map(lambda at: {"step": {"$gte": at[0], "$lt": at[0] + at[1]}})
    teams = st.sampled_from([{"team": "red"}, {"team": {"$in": ["red", "blue"]}}])
    return st.one_of(
        ranges,
        teams,
        st.builds(lambda a, b: {"$or": [a, b]}, ranges, ranges),
        st.builds(lambda a, b: {**a, **b}, ranges, teams),
    )


@pytest.fixture(params=["sqlite", "postgres"])
def coded(
    request: pytest.FixtureRequest,
    durable_url: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[Store, list[MemoryItem]]]:
    """Yield a handle on session ``s`` of ``N`` steps kept coded, and the steps."""
    if request.param == "postgres":
        request.applymarker(pytest.mark.postgres)
    url = durable_url(request.param)
    items = steps(N, 3)
    written(url, items)
    with coded_handle(url, items, monkeypatch) as store:
        coded_up(store, QUERIES[0], 5, "semantic")
        assert kept_types(store) == [CompactVectors]
        yield store, items


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    where=filters(N),
    k=st.integers(1, 30),
    query=st.sampled_from([*QUERIES, "pay", "window chart"]),
)
def test_a_filtered_hybrid_query_of_a_coded_session_ranks_as_memory_search(
    coded: tuple[Store, list[MemoryItem]], where: dict[str, Any], k: int, query: str
) -> None:
    """Every filter, from one step passing to all of them, gives Memory.search's hits and floats over a coded session, twice (the second from the kept table)."""
    store, items = coded
    want = expected(items, query, k, "hybrid", where)
    assert found(store, query, k, "hybrid", where) == want
    assert found(store, query, k, "hybrid", where) == want


def spied(store: Store, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[list[int]]]:
    """Record the depths the backend's keyword ranking is asked for, and the seqs whose vectors are read, call by call."""
    backend: Any = store._engine.backend
    depths: list[int] = []
    seqs: list[list[int]] = []
    keyword_top, vectors_of = backend.keyword_top, backend.vectors_of

    def top(sid: str, terms: Sequence[str], depth: int) -> Any:
        depths.append(depth)
        return keyword_top(sid, terms, depth)

    def vectors(sid: str, filed: str, wanted: Sequence[int]) -> Any:
        seqs.append(list(wanted))
        return vectors_of(sid, filed, wanted)

    monkeypatch.setattr(backend, "keyword_top", top)
    monkeypatch.setattr(backend, "vectors_of", vectors)
    return depths, seqs


@pytest.mark.parametrize(
    "where",
    [
        {"step": {"$lt": N // 8}},
        {"step": {"$gte": 40, "$lt": 90}},
        {"team": "red"},
        "the best fail",
    ],
    ids=["one in eight", "one in eight, a range", "one in four", "the best hits fail"],
)
def test_a_filtered_hybrid_query_ranks_each_keyword_depth_and_reads_each_vector_once(
    coded: tuple[Store, list[MemoryItem]], where: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter that few steps pass (up to one in four) blends them beside the query's walk, and a walk that deepens (the best hits fail the filter) keeps what it ranked and read: no keyword depth ranked twice, each item's vectors read once (but those the coded bounds could not rule out at the first ranking)."""
    store, items = coded
    depths, seqs = spied(store, monkeypatch)
    for query in QUERIES:
        keep = where
        if where == "the best fail":  # most steps pass, none of the best 40
            best = Memory(items).search(query, 40, mode="hybrid", embedder=EMBEDDER)
            keep = {"step": {"$nin": [hit.item["step"] for hit in best]}}
        depths.clear()
        seqs.clear()
        assert found(store, query, 3, "hybrid", keep) == expected(items, query, 3, "hybrid", keep)
        assert len(depths) == len(set(depths)), depths
        # The first ranking reads the pool and those the coded bounds could not rule out,
        # keeping the pool: only those may be read again, once.
        first = set(seqs[0]) if seqs else set()
        reads = Counter(seq for read in seqs for seq in read)
        assert all(count <= 1 + (seq in first) for seq, count in reads.items()), reads


@given(
    hits=st.integers(0, 50),
    depths=st.lists(st.integers(1, 60), min_size=1, max_size=8),
    unranked=st.booleans(),
)
def test_a_held_ranking_answers_each_depth_as_the_backend_does_and_asks_each_once(
    hits: int, depths: list[int], unranked: bool
) -> None:
    """held_ranking gives what the backend's ranking gives at every depth asked, asking it only past the deepest it asked (and not at all once it held every hit)."""
    ranking = [(float(100 - at // 3), at) for at in range(hits)]  # ties, by key
    asked: list[int] = []

    def rank(depth: int) -> list[tuple[float, int]] | None:
        asked.append(depth)
        return None if unranked else ranking[:depth]

    held = held_ranking(rank)
    for depth in depths:
        assert held(depth) == (None if unranked else ranking[:depth])
    assert asked == sorted(set(asked))
    assert all(len(ranking) >= depth for depth in asked[:-1])


@pytest.mark.parametrize(
    "where",
    [{"step": {"$lt": N // 8}}, {"step": {"$lt": N // 4}}, {"team": "red"}],
    ids=["one in eight", "one in four", "one in four, by team"],
)
def test_a_filtered_hybrid_query_reads_the_vectors_of_no_passing_row_its_bounds_rule_out(
    coded: tuple[Store, list[MemoryItem]], where: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows that pass past the walk are bounded from the coded table first: those whose blend cannot reach the k-th best passing score have no vectors read (before, every passing keyword hit's were: 30 to 80 rows a query here)."""
    store, items = coded
    _, seqs = spied(store, monkeypatch)
    for query in QUERIES:
        seqs.clear()
        assert found(store, query, 3, "hybrid", where) == expected(items, query, 3, "hybrid", where)
        past_the_pool = sum(len(read) for read in seqs[1:])  # the first ranking reads the pool
        assert past_the_pool < 10, seqs


def test_the_coded_ceilings_bound_each_items_exact_cosine_from_above(
    coded: tuple[Store, list[MemoryItem]],
) -> None:
    """CompactVectors.ceilings bounds each item's exact best cosine from above (rows coded since the table was built too), and gives none for a key without a vector."""
    store, _ = coded
    store.append("s", steps(12, 5))  # coded into the table's rows after those built
    found(store, QUERIES[1], 5, "semantic")
    (table,) = kept_tables(store)
    assert isinstance(table, CompactVectors)
    assert len(table.more)
    keys = sorted(table.slot_of)
    for text in [*QUERIES, "pay", "window chart"]:
        query = checked_vectors(EMBEDDER, [text])[0]
        exact = table.scores_of(query, keys)
        ceilings = table.ceilings(query, [*keys, -1])
        assert sorted(ceilings) == sorted(exact) == keys
        assert all(ceilings[key] >= exact[key] for key in keys)


@pytest.mark.parametrize(
    "where",
    [{"step": {"$lt": N // 8}}, {"team": "red"}],
    ids=["one in eight", "one in four, by team"],
)
def test_a_filtered_hybrid_query_asks_the_store_nothing_twice(
    coded: tuple[Store, list[MemoryItem]], where: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter that walks the blend's first depth, then blends the rows that may pass, reads the item count, the keyword evidence (the leader's words, the words' frequencies, the best hits' terms) and each row's BM25 once: no backend call repeats its arguments (before, the second blend asked six of them again and the count twice more)."""
    store, items = coded
    backend: Any = store._engine.backend
    calls: list[tuple[str, Any]] = []
    among: list[list[int]] = []  # the rows whose BM25 each keyword_among call asks
    names = ["count", "keyword_frequencies", "keyword_held", "keyword_among", "read_seqs"]
    for name in names:
        call = getattr(backend, name)

        def noted(*args: Any, name: str = name, call: Any = call) -> Any:
            calls.append((name, repr(args)))
            if name == "keyword_among":
                among.append(list(args[2]))
            return call(*args)

        monkeypatch.setattr(backend, name, noted)
    for query in QUERIES:
        calls.clear()
        among.clear()
        assert found(store, query, 3, "hybrid", where) == expected(items, query, 3, "hybrid", where)
        named = [name for name, _ in calls]
        assert named.count("count") == 1, calls
        assert named.count("keyword_frequencies") <= 1, calls
        assert len(calls) == len(set(calls)), Counter(calls).most_common(3)
        bm25_asked = Counter(seq for seqs in among for seq in seqs)
        assert all(times == 1 for times in bm25_asked.values()), bm25_asked.most_common(3)
