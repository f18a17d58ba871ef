"""Repeated filtered semantic walks of a JSONL handle that has not read the log: a rare filter's walks, once they cost what reading the log does, have it read whole, and the next queries rank only the rows that pass; the hits of Memory.search throughout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_stores_jsonl_first_filtered import (
    EMBEDDER,
    PARTS,
    QUERIES,
    memory_hits,
    read_whole,
    search,
    steps,
    whole_log_hits,
    written,
)

from agents.memory import MemoryItem
from agents.memory.search import EmbedParts, Filter
from agents.memory.stores import JSONLStore
from agents.memory.stores._jsonl import filter_reads

RARE = {"step": {"$in": [3, 150]}}  # two rows of 200


def asked(store: JSONLStore) -> int:
    """Return how many rows of session ``s`` this handle's walks asked about at the log's version (rare filters only)."""
    offsets = store.backend._offsets("s")
    assert offsets is not None
    return store.backend._read_values.judged("s", (offsets.header, offsets.offset))


@pytest.mark.parametrize("parts", PARTS)
def test_repeated_rare_walks_read_the_log_whole_then_rank_only_the_passing_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: EmbedParts
) -> None:
    """With no value file, the same rare-filter query asked again walks (the log unread) until the walks have cost what reading the log does; then the log is read whole and the filter no longer walks. Every answer is the whole-log handle's."""
    written(tmp_path, steps(200))
    monkeypatch.setattr(filter_reads, "JUDGED_PER_READ", 1)  # a walk costs its rows asked about
    want = whole_log_hits(tmp_path, "cat", "semantic", parts, RARE)
    (tmp_path / "s.values").unlink()  # saved by the whole-log handle: else judged from it
    with JSONLStore(tmp_path) as store:
        assert search(store, "cat", "semantic", parts, RARE) == want
        assert not read_whole(store)
        assert asked(store) > 0
        walks = 1
        while not read_whole(store):
            assert store.backend.walks_filtered("s", Filter(RARE).tree, store.count("s") // 16)
            assert search(store, "cat", "semantic", parts, RARE) == want
            walks += 1
            assert walks < 200, "the walks never read the log whole"
        assert walks > 2  # not before the walks cost the floor's rows
        assert not store.backend.walks_filtered("s", Filter(RARE).tree, store.count("s") // 16)
        assert search(store, "cat", "semantic", parts, RARE) == want
    if parts == PARTS[0]:
        assert [(s, f) for _, s, f in want] == memory_hits(tmp_path, "cat", "semantic", RARE)


def test_walks_of_a_filter_many_rows_pass_are_not_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter half the rows pass settles in the walk's first slice: its walks are not counted, and the log stays unread however often it is asked."""
    written(tmp_path, steps(200))
    monkeypatch.setattr(filter_reads, "JUDGED_PER_READ", 1)
    where = {"team": {"$in": ["red", "blue"]}}
    want = whole_log_hits(tmp_path, "cat", "semantic", PARTS[1], where)
    with JSONLStore(tmp_path) as store:
        for _ in range(100):  # 100 slices of 64: past the floor of 4,096 rows, were they counted
            assert search(store, "cat", "semantic", PARTS[1], where) == want
        assert not read_whole(store)
        assert asked(store) == 0


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    groups=st.lists(st.integers(0, 99), min_size=16, max_size=60),
    chosen=st.lists(st.integers(0, 99), min_size=1, max_size=2),
    queries=st.lists(st.sampled_from(QUERIES), min_size=3, max_size=10),
    append_at=st.integers(0, 10),
    reopen_at=st.integers(0, 10),
    parts=st.sampled_from(PARTS),
)
def test_rare_walks_and_the_switch_against_memory_search(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    groups: list[int],
    chosen: list[int],
    queries: list[str],
    append_at: int,
    reopen_at: int,
    parts: EmbedParts,
) -> None:
    """Any session and rare $in filter, walks counted as costly as reads (so that the log is read whole part way): each query's hits and floats equal the whole-log handle's and Memory.search's, across a close and reopen and a second handle appending."""
    monkeypatch.setattr(filter_reads, "JUDGED_PER_READ", 1)
    monkeypatch.setattr(filter_reads, "WHOLE_FLOOR", 64)
    folder = tmp_path_factory.mktemp("s")
    items = steps(len(groups))
    for item, group in zip(items, groups, strict=True):
        item["g"] = group
    written(folder, items)
    where: Any = {"g": {"$in": chosen}}
    store = JSONLStore(folder)
    try:
        for i, query in enumerate(queries):
            if i == reopen_at:
                store.close()
                store = JSONLStore(folder)
            if i == append_at:
                with JSONLStore(folder) as other:
                    other.append("s", [MemoryItem(step=999, action=query, note="cat", g=chosen[0])])
                    for cut in PARTS:
                        other.index_embeddings("s", EMBEDDER, parts=cut)
            got = search(store, query, "semantic", parts, where)
            assert got == whole_log_hits(folder, query, "semantic", parts, where)
            if parts == PARTS[0]:
                want = memory_hits(folder, query, "semantic", where)
                assert [(s, f) for _, s, f in got] == want
    finally:
        store.close()
