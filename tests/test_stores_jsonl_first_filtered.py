"""The first filtered semantic and hybrid search of a fresh JSONL handle: the ranking from the files beside the log walked, rows judged by their offsets, the hits of Memory.search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.memory import Memory, MemoryItem
from agents.memory.search import EmbedParts, HashingEmbedder
from agents.memory.stores import JSONLStore
from agents.memory.stores._jsonl import filter_reads

EMBEDDER = HashingEmbedder(32)
WORDS = ("cat", "dog", "red", "blue", "open", "save", "file", "menu", "ok", "the")
QUERIES = ("cat", "red dog", "open the file", "ok blue cat the")
MODES = ("semantic", "hybrid")
PARTS = (EmbedParts(), EmbedParts.WHOLE)
FILTERS = (
    {"agent": "x"},
    {"step": {"$gte": 30}},
    {"team": {"$in": ["red", "blue"]}},
    {"missing": 1},
    {"$or": [{"step": 3}, {"agent": "x"}]},
)

Hits = list[tuple[int, float, dict[str, Any]]]


def steps(count: int, start: int = 0) -> list[MemoryItem]:
    """Return ``count`` steps of a few words each; one in seven is agent ``x``'s, teams cycle."""
    out = []
    for i in range(start, start + count):
        words = [WORDS[(i * j + i) % len(WORDS)] for j in range(1 + i % 6)]
        half = len(words) // 2
        out.append(
            MemoryItem(
                step=i,
                action=" ".join(words[:half]),
                note=" ".join(words[half:]),
                agent="x" if i % 7 == 3 else "host",
                team=("red", "blue", "grey", "grey")[i % 4],
            )
        )
    return out


def written(folder: Path, items: list[MemoryItem]) -> None:
    """Write session ``s`` with its vectors (default parts and whole), and its vector and keyword files."""
    with JSONLStore(folder) as store:
        store.append("s", items)
        for parts in PARTS:
            store.index_embeddings("s", EMBEDDER, parts=parts)
            for mode in MODES:
                store.search("s", "cat", 5, mode=mode, embedder=EMBEDDER, parts=parts)


def search(store: JSONLStore, query: str, mode: str, parts: EmbedParts, where: Any) -> Hits:
    """Return a filtered search's (seq, score, fields) through the store, best first."""
    found = store.search("s", query, 5, mode=mode, embedder=EMBEDDER, parts=parts, where=where)
    return [(hit.seq, hit.score, hit.item.to_dict()) for hit in found]


def read_whole(store: JSONLStore) -> bool:
    """Return whether the handle read session ``s``'s log whole."""
    return store.backend._logs.viewed("s")


def memory_hits(
    folder: Path, query: str, mode: str, where: Any
) -> list[tuple[float, dict[str, Any]]]:
    """Return Memory.search's (score, fields) over the session's live items, with the filter."""
    with JSONLStore(folder, read_only=True) as store:
        memory = Memory([record.item for record in store.records("s")])
    found = memory.search(query, 5, mode=mode, embedder=EMBEDDER, where=where)  # type: ignore[arg-type]
    return [(hit.score, hit.item.to_dict()) for hit in found]


def whole_log_hits(folder: Path, query: str, mode: str, parts: EmbedParts, where: Any) -> Hits:
    """Return the filtered search of a writable handle that read the log whole first."""
    with JSONLStore(folder) as store:
        store.backend.read_rows("s")
        return search(store, query, mode, parts, where)


def assert_fresh_equals(
    folder: Path, where: Any, *, walked: tuple[str, ...] = ("semantic",)
) -> None:
    """Assert that a fresh writable handle's filtered queries equal Memory.search's and the whole-log handle's, reading no log whole in the modes ``walked``."""
    for mode in MODES:
        for parts in PARTS:
            for query in QUERIES:
                with JSONLStore(folder) as store:
                    got = search(store, query, mode, parts, where)
                    if mode in walked:
                        assert not read_whole(store), (mode, parts, query, where)
                    again = search(store, query, mode, parts, where)  # the values filed meanwhile
                assert again == got
                if parts == PARTS[0]:
                    want = memory_hits(folder, query, mode, where)
                    assert [(score, fields) for _, score, fields in got] == want
                assert got == whole_log_hits(folder, query, mode, parts, where)


@pytest.mark.parametrize("where", FILTERS)
def test_fresh_filtered_semantic_and_hybrid_equal_memory_search(tmp_path: Path, where: Any) -> None:
    """A fresh handle's filtered semantic query (and hybrid one, where many rows pass) walks the ranking without reading the log whole; hits and floats equal Memory.search's and the whole-log handle's."""
    written(tmp_path, steps(60))
    # Hybrid reads the log whole where few rows may pass (it then ranks only those).
    assert_fresh_equals(tmp_path, where, walked=MODES if where != {"missing": 1} else ("semantic",))


def test_hybrid_with_few_passing_reads_the_log_whole(tmp_path: Path) -> None:
    """A hybrid query whose filter few rows pass (judged on a sample read by offset) reads the log whole and ranks only those rows."""
    written(tmp_path, steps(60))
    with JSONLStore(tmp_path) as store:
        got = search(store, "cat", "hybrid", PARTS[1], {"step": 3})
        assert read_whole(store)
    assert got == whole_log_hits(tmp_path, "cat", "hybrid", PARTS[1], {"step": 3})


def test_another_handle_appending_between_filtered_queries(tmp_path: Path) -> None:
    """Rows another handle appends between two filtered queries of a fresh handle are judged and found."""
    written(tmp_path, steps(60))
    where = {"agent": "x"}
    with JSONLStore(tmp_path) as store:
        before = search(store, "cat red", "semantic", PARTS[1], where)
        with JSONLStore(tmp_path) as other:
            other.append("s", [MemoryItem(step=500, action="cat red", note="cat", agent="x")])
            other.index_embeddings("s", EMBEDDER, parts=PARTS[1])
        after = search(store, "cat red", "semantic", PARTS[1], where)
    assert after != before
    assert any(fields["step"] == 500 for _, _, fields in after)
    assert after == whole_log_hits(tmp_path, "cat red", "semantic", PARTS[1], where)


def test_damaged_vector_file_reads_the_log_whole(tmp_path: Path) -> None:
    """A vector file that does not check out is never trusted: the filtered query reads the log whole and gives the same hits."""
    written(tmp_path, steps(60))
    path = tmp_path / "s.vectors"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    for where in FILTERS[:3]:
        with JSONLStore(tmp_path) as store:
            got = search(store, "red dog", "semantic", PARTS[1], where)
        assert got == whole_log_hits(tmp_path, "red dog", "semantic", PARTS[1], where)


def test_past_the_bound_the_log_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a quarter of the session's rows have been read by their offsets, the filter is judged from the log read whole, with the same hits."""
    written(tmp_path, steps(200))
    monkeypatch.setattr(filter_reads, "WHOLE_FLOOR", 0)
    where = {"missing": 1}  # no row passes: the walk reads row after row
    with JSONLStore(tmp_path) as store:
        assert search(store, "cat", "semantic", PARTS[1], where) == []
        assert read_whole(store)
    where = {"agent": "x"}
    with JSONLStore(tmp_path) as store:
        got = search(store, "cat", "semantic", PARTS[1], where)
    assert got == whole_log_hits(tmp_path, "cat", "semantic", PARTS[1], where)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    groups=st.lists(st.integers(0, 5), min_size=1, max_size=40),
    chosen=st.lists(st.integers(0, 5), min_size=1, max_size=3),
    query=st.sampled_from(QUERIES),
    mode=st.sampled_from(MODES),
    parts=st.sampled_from(PARTS),
)
def test_fresh_filtered_queries_against_memory_search(
    tmp_path_factory: pytest.TempPathFactory,
    groups: list[int],
    chosen: list[int],
    query: str,
    mode: str,
    parts: EmbedParts,
) -> None:
    """Any session, any $in filter over a field: a fresh handle's filtered semantic and hybrid hits and floats equal Memory.search's (close, reopen, query again)."""
    folder = tmp_path_factory.mktemp("s")
    items = steps(len(groups))
    for item, group in zip(items, groups, strict=True):
        item["g"] = group
    written(folder, items)
    where = {"g": {"$in": chosen}}
    with JSONLStore(folder) as store:
        got = search(store, query, mode, parts, where)
    with JSONLStore(folder) as store:
        assert search(store, query, mode, parts, where) == got
    assert got == whole_log_hits(folder, query, mode, parts, where)
    if parts == PARTS[0]:
        assert [(s, f) for _, s, f in got] == memory_hits(folder, query, mode, where)


def test_a_row_another_handle_changes_is_judged_again(tmp_path: Path) -> None:
    """A row filed as failing that another handle updates to pass is judged from its new fields (the values filed are of one version of the log)."""
    written(tmp_path, steps(60))
    where = {"agent": "x"}
    with JSONLStore(tmp_path) as store:
        before = search(store, "cat", "semantic", PARTS[1], where)
        seqs = [seq for seq, _, _ in before]
        failing = next(seq for seq in range(1, 61) if seq not in seqs and (seq - 1) % 7 != 3)
        with JSONLStore(tmp_path) as other, other.batch("s") as batch:
            batch.update({failing: MemoryItem(step=failing - 1, action="cat cat", agent="x")})
        with JSONLStore(tmp_path) as other:
            other.index_embeddings("s", EMBEDDER, parts=PARTS[1])
        after = search(store, "cat", "semantic", PARTS[1], where)
    assert failing in [seq for seq, _, _ in after]
    assert after == whole_log_hits(tmp_path, "cat", "semantic", PARTS[1], where)


@pytest.mark.parametrize("where", FILTERS)
def test_read_only_fresh_handle_filtered_queries(tmp_path: Path, where: Any) -> None:
    """A read-only fresh handle's filtered semantic query walks without reading the log whole; semantic and hybrid hits and floats equal the whole-log handle's."""
    written(tmp_path, steps(60))
    for mode in MODES:
        for parts in PARTS:
            with JSONLStore(tmp_path, read_only=True) as store:
                got = search(store, "red dog", mode, parts, where)
                if mode == "semantic":
                    assert not read_whole(store)
            with JSONLStore(tmp_path, read_only=True) as store:
                store.backend.read_rows("s")
                assert got == search(store, "red dog", mode, parts, where)
