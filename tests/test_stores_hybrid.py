"""A store's hybrid search ranks its keyword side only as deep as the blend needs, and ranks as Memory.search does."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.memory import Memory, MemoryItem
from agents.memory.search import HashingEmbedder
from agents.memory.stores import open_store

WORDS = ("the", "file", "report", "chart", "invoice", "window", "saved", "moved", "closed")


def common_word_session(n: int) -> list[dict[str, Any]]:
    """Return ``n`` steps that all hold "the", with rarer words spread over them."""
    return [
        {
            "step": i,
            "text": f"the {WORDS[1 + i % 8]} was {WORDS[1 + (i * 7) % 8]} the {i % 37}",
        }
        for i in range(n)
    ]


def hits_of(found: Any) -> list[tuple[Any, float]]:
    """Return ``(step, score)`` of each hit."""
    return [(hit.item["step"], hit.score) for hit in found]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_hybrid_search_ranks_the_keyword_side_only_as_deep_as_the_blend_needs(
    kind: str, durable_url: Any
) -> None:
    """Every item holds a query word: the backend is asked for a ranking far shorter than the session, and the hits are Memory.search's."""
    embedder = HashingEmbedder(32)
    session = common_word_session(3000)
    with open_store(durable_url(kind)) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        backend = store.backend
        asked: list[int] = []
        top = backend.keyword_top

        def counted_top(sid: str, terms: Any, k: int) -> Any:
            asked.append(k)
            return top(sid, terms, k)

        # The real backend's call, counted on the way through.
        backend.keyword_top = counted_top  # type: ignore[method-assign]
        hits = store.search("s", "the invoice report", 5, mode="hybrid", embedder=embedder)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("the invoice report", 5, mode="hybrid", embedder=embedder)
    assert hits_of(hits) == hits_of(want)
    assert asked
    assert max(asked) < len(session)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_hybrid_search_of_tied_items_walks_every_keyword_hit_and_ties_by_step(
    kind: str, durable_url: Any
) -> None:
    """Items alike tie in both sides: no bound settles, the walk goes on to every hit, and the ties keep session order."""
    embedder = HashingEmbedder(32)
    session = [{"step": i, "text": "alpha beta"} for i in range(900)]
    session += [{"step": 900 + i, "text": f"gamma {i}"} for i in range(100)]
    with open_store(durable_url(kind)) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        hits = store.search("s", "alpha beta", 7, mode="hybrid", embedder=embedder)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("alpha beta", 7, mode="hybrid", embedder=embedder)
    assert hits_of(hits) == hits_of(want)
    assert [step for step, _ in hits_of(hits)] == list(range(7))


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    texts=st.lists(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join),
        min_size=1,
        max_size=400,
    ),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
    k=st.integers(min_value=1, max_value=12),
)
def test_a_sqlite_hybrid_search_ranks_as_memory_search_however_deep_it_walks(
    tmp_path_factory: pytest.TempPathFactory, texts: list[str], query: str, k: int
) -> None:
    """Sessions of few words (many ties, every depth of walk): the store's hybrid hits and scores are Memory.search's."""
    embedder = HashingEmbedder(16)
    session = [{"step": i, "text": text} for i, text in enumerate(texts)]
    path = tmp_path_factory.mktemp("hybrid") / "store.db"
    with open_store(f"sqlite://{path}") as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        hits = store.search("s", query, k, mode="hybrid", embedder=embedder)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search(query, k, mode="hybrid", embedder=embedder)
    assert hits_of(hits) == hits_of(want)


def test_a_sqlite_hybrid_query_whose_leader_misses_a_word_ranks_no_word_alone(
    durable_url: Any,
) -> None:
    """The keyword leader lacks a query word: the words' document frequencies come from one keyword_frequencies call, no one-word ranking, and the hits are Memory.search's."""
    embedder = HashingEmbedder(32)
    session = common_word_session(600)
    with open_store(durable_url("sqlite")) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        backend = store.backend
        asked: list[list[str]] = []
        top = backend.keyword_top

        def counted_top(sid: str, terms: Any, k: int) -> Any:
            asked.append(list(terms))
            return top(sid, terms, k)

        # The real backend's call, counted on the way through.
        backend.keyword_top = counted_top  # type: ignore[method-assign]
        hits = store.search("s", "the invoice window", 5, mode="hybrid", embedder=embedder)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("the invoice window", 5, mode="hybrid", embedder=embedder)
    assert hits_of(hits) == hits_of(want)
    assert all(len(terms) == 3 for terms in asked)


def test_sqlite_keyword_frequencies_count_the_items_holding_each_term(durable_url: Any) -> None:
    """SQLiteBackend.keyword_frequencies gives each term's item count in the session (another session's items not counted); an unknown term counts 0 or is left out."""
    with open_store(durable_url("sqlite")) as store:
        store.append("s", [MemoryItem(**fields) for fields in common_word_session(200)])
        store.append("other", [MemoryItem(text="invoice invoice the")] * 5)
        counted = store.backend.keyword_frequencies("s", ["the", "invoice", "unheard"])
    session = common_word_session(200)
    assert counted is not None
    assert {term: n for term, n in counted.items() if n} == {
        "the": 200,
        "invoice": sum("invoice" in fields["text"].split() for fields in session),
    }
