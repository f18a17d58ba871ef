"""A StoredMemory whose session's vectors pass the store's kept-vector budget leaves them in the store: hits and floats stay Memory.search's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.memory import Memory, MemoryItem
from agents.memory.search import HashingEmbedder, search_index
from agents.memory.stores import Store, StoredMemory, open_store

EMBEDDER = HashingEmbedder(32)
WORDS = ["open", "close", "report", "chart", "window", "saved", "invoice", "March", "pay", "OK"]
QUERIES = ["pay the invoice for March", "close the report window", "chart saved OK"]
SMALL = 4096
"""A budget far below a session of 300 steps cut into parts (32-wide: some 100 KB of float32)."""


def steps(n: int, seed: int = 0, first: int = 0) -> list[MemoryItem]:
    """Return ``n`` steps of a few fields drawn from a small vocabulary (so they cut into several parts)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(first, first + n):
        fields = {
            "thought": " ".join(rng.choice(WORDS, size=int(rng.integers(1, 12)))),
            "status": str(rng.choice(["CONTINUE", "FINISH"])),
        }
        if i % 3:
            fields["observation"] = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 20))))
        out.append(MemoryItem(step=i, team="red" if i % 4 == 0 else "blue", **fields))
    return out


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def url(request: pytest.FixtureRequest, durable_url: Callable[[str], str]) -> str:
    """Return the URL of session ``s`` (300 steps cut into parts, embedded) in each store that keeps vectors."""
    found = durable_url(request.param)
    with open_store(found) as store:
        store.append("s", steps(300))
        store.index_embeddings("s", EMBEDDER)
    return found


def budgeted(store: Store, monkeypatch: pytest.MonkeyPatch, budget: int) -> Store:
    """Set the handle's kept-vector budget (bytes of float32) and note its whole reads of vectors in ``store.reads``."""
    monkeypatch.setattr(store._vectors._cache, "_budget", budget)
    reads: list[Any] = []
    read = store.read_vectors

    def noted(*args: Any, **options: Any) -> Any:
        if options.get("seqs") is None:
            reads.append(args)
        return read(*args, **options)

    store.read_vectors = noted  # type: ignore[method-assign]  # noted, then read as before
    store.reads = reads  # type: ignore[attr-defined]  # the test's note
    return store


def answers(
    memory: Memory, mode: str, where: Any = None
) -> list[tuple[Any, float, tuple[str, ...]]]:
    """Return ``(step, score, fields)`` of each query's hits."""
    return [
        (hit.item["step"], hit.score, hit.fields)
        for query in QUERIES
        for hit in memory.search(query, 6, mode=mode, embedder=EMBEDDER, where=where)  # type: ignore[arg-type]
    ]


def reference(items: list[MemoryItem], mode: str, where: Any = None) -> list[Any]:
    """Return Memory.search's answers over the same items: the reference."""
    return answers(Memory(items), mode, where)


@pytest.fixture
def opened(url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], StoredMemory]]:
    """Open session ``s`` on a fresh handle of the given budget, its index built ahead and waited for."""
    stores: list[Store] = []

    def open_with(budget: int) -> StoredMemory:
        store = budgeted(open_store(url), monkeypatch, budget)
        stores.append(store)
        memory = StoredMemory(store, "s", index_ahead=True)
        index = search_index(memory)
        index.build_ahead(wait=True)
        return memory

    yield open_with
    for store in stores:
        store.close()


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_over_the_budget_the_store_answers_and_the_memory_holds_no_vector(
    opened: Callable[[int], StoredMemory], mode: str
) -> None:
    """Opened over the budget, built ahead: Memory.search's hits and floats (filtered too), with no vector read whole or held in RAM."""
    memory = opened(SMALL)
    items = list(memory.content)
    assert answers(memory, mode) == reference(items, mode)
    assert answers(memory, mode, {"team": "red"}) == reference(items, mode, {"team": "red"})
    index = search_index(memory)
    assert index.vector_model() is None
    assert len(index.missing_vectors(None)) == len(items)
    assert memory.store.reads == []  # type: ignore[attr-defined]  # the test's note


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_under_the_budget_the_memory_takes_the_vectors_and_answers_in_ram(
    opened: Callable[[int], StoredMemory], mode: str
) -> None:
    """Under the budget the vectors are taken as the session opens and RAM answers: the store is not asked."""
    memory = opened(1 << 30)
    index = search_index(memory)
    assert index.missing_vectors(None) == []
    assert index.vector_model() == EMBEDDER.name
    asked: list[Any] = []
    store_search = memory.store.search
    memory.store.search = lambda *a, **o: asked.append(a) or store_search(*a, **o)  # type: ignore[method-assign]  # noted, then ranked as before
    assert answers(memory, mode) == reference(list(memory.content), mode)
    assert asked == []


def test_a_session_grown_past_the_budget_while_open_leaves_its_vectors_in_the_store(
    opened: Callable[[int], StoredMemory], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps added past the budget: the memory forgets the vectors it held and the store answers, to Memory.search's floats."""
    memory = opened(1 << 30)
    assert search_index(memory).vector_model() == EMBEDDER.name
    assert answers(memory, "semantic") == reference(list(memory.content), "semantic")
    monkeypatch.setattr(
        memory.store._vectors._cache, "_budget", SMALL
    )  # as the session grows past it
    memory.add_memory_items(steps(40, seed=5, first=300))
    for mode in ("semantic", "hybrid"):
        assert answers(memory, mode) == reference(list(memory.content), mode)
    index = search_index(memory)
    assert index.vector_model() is None
    assert len(index.missing_vectors(None)) == len(memory) == 340
    memory.add_memory_items(steps(5, seed=6, first=340))  # later steps are embedded by the store
    for mode in ("semantic", "hybrid"):
        assert answers(memory, mode) == reference(list(memory.content), mode)


def test_a_session_over_the_budget_reopened_is_answered_alike(
    opened: Callable[[int], StoredMemory],
) -> None:
    """Closed and opened again on a fresh handle over the budget: the same answers, no vectors held; under it, they are taken."""
    memory = opened(SMALL)
    first = {mode: answers(memory, mode) for mode in ("semantic", "hybrid")}
    memory.add_memory_items(steps(10, seed=7, first=300))
    grown = {mode: answers(memory, mode) for mode in ("semantic", "hybrid")}
    assert grown != first
    memory.close()
    again = opened(SMALL)
    assert {mode: answers(again, mode) for mode in ("semantic", "hybrid")} == grown
    assert search_index(again).vector_model() is None
    roomy = opened(1 << 30)
    assert search_index(roomy).missing_vectors(None) == []
    assert {mode: answers(roomy, mode) for mode in ("semantic", "hybrid")} == grown


def test_keyword_search_over_the_budget_is_unchanged(opened: Callable[[int], StoredMemory]) -> None:
    """Keyword mode (with keys: the memory's own index) gives Memory.search's hits over the budget."""
    memory = opened(SMALL)
    items = list(memory.content)
    assert answers(memory, "keyword") == reference(items, "keyword")
    for query in QUERIES:
        got = memory.search(query, 6, keys=["thought"])
        want = Memory(items).search(query, 6, keys=["thought"])
        assert [(h.item["step"], h.score) for h in got] == [(h.item["step"], h.score) for h in want]


def test_vectors_over_budget_reads_the_stored_bytes(tmp_path: Path) -> None:
    """Store.vectors_over_budget compares the session's stored vector bytes (over keys, cut as parts) with the handle's budget."""
    from agents.memory.search import EmbedParts

    with open_store(f"sqlite://{tmp_path}/s.db") as store:
        assert store.vectors_over_budget("s") is False  # no session
        store.append("s", steps(50))
        store.index_embeddings("s", EMBEDDER)
        store.index_embeddings("s", EMBEDDER, parts=EmbedParts.WHOLE)
        assert store.vectors_over_budget("s") is False
        store._vectors._cache._budget = 50 * 32 * 4  # 50 whole vectors fit exactly
        assert store.vectors_over_budget("s", parts=EmbedParts.WHOLE) is False
        assert store.vectors_over_budget("s") is True  # cut into parts: several a step
        store.append("s", steps(1, first=50))
        store.index_embeddings("s", EMBEDDER, parts=EmbedParts.WHOLE)
        assert store.vectors_over_budget("s", parts=EmbedParts.WHOLE) is True  # a new version
