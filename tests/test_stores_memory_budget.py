"""A StoredMemory whose session's vectors pass the store's kept-vector budget leaves them in the store: hits and floats stay Memory.search's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from coded_sessions import WORDS, steps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.memory import Memory, MemoryItem
from agents.memory.search import HashingEmbedder, Tokenizer, search_index
from agents.memory.stores import Store, StoredMemory, open_store

EMBEDDER = HashingEmbedder(32)
QUERIES = ["pay the invoice for March", "close the report window", "chart saved OK"]
SMALL = 4096
"""A budget far below a session of 300 steps cut into parts (32-wide: some 100 KB of float32)."""


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

    def whole(args: tuple[Any, ...], options: dict[str, Any], _: Any) -> None:
        if options.get("seqs") is None:
            reads.append(args)

    noting(monkeypatch, store, "read_vectors", whole)
    store.reads = reads  # type: ignore[attr-defined]  # the test's note
    return store


def noting(
    monkeypatch: pytest.MonkeyPatch,
    owner: object,
    name: str,
    note: Callable[[tuple[Any, ...], dict[str, Any], Any], object],
) -> None:
    """Have ``owner.name`` answer as before, then call ``note(args, options, answer)``: the test's note of each call (undone after the test)."""
    call = getattr(owner, name)

    def noted(*args: Any, **options: Any) -> Any:
        answer = call(*args, **options)
        note(args, options, answer)
        return answer

    monkeypatch.setattr(owner, name, noted)


def noted_among(monkeypatch: pytest.MonkeyPatch, store: Store) -> list[int]:
    """Return the list that notes how many rows each ``Store.cosines`` call of ``store`` asks for (``among``)."""
    asked: list[int] = []
    noting(
        monkeypatch,
        store,
        "cosines",
        lambda _, options, __: asked.append(len(options.get("among", ()))),
    )
    return asked


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
    opened: Callable[[int], StoredMemory], monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Under the budget the vectors are taken as the session opens and RAM answers: the store is not asked."""
    memory = opened(1 << 30)
    index = search_index(memory)
    assert index.missing_vectors(None) == []
    assert index.vector_model() == EMBEDDER.name
    asked: list[Any] = []
    noting(monkeypatch, memory.store, "search", lambda args, _, __: asked.append(args))
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


# -- over the budget: keys, filter functions, queries without a word, index_embeddings --------

FIELDS = ["thought", "observation", "status", "team"]


def step_odd(item: MemoryItem) -> bool:
    """A filter function: odd steps."""
    return bool(item["step"] % 2)


def one_in_seven(item: MemoryItem) -> bool:
    """A filter function few items pass (the store's ranking is walked deeper)."""
    return item["step"] % 7 == 3


def says_pay(item: MemoryItem) -> bool:
    """A filter function of a field's text."""
    return "pay" in str(item.get_value("thought", ""))


def none_pass(item: MemoryItem) -> bool:
    """A filter function no item passes."""
    return False


FILTERS: list[Any] = [
    None,
    {"team": "red"},
    {"step": 150},  # rare: past the walk of the memory's own items, the store's filtered ranking
    {"step": {"$in": [7, 8, 250]}},
    step_odd,
    one_in_seven,
    says_pay,
    none_pass,
]
query_words = st.lists(st.sampled_from([*WORDS, "?", "--", "...", "zebra"]), min_size=1, max_size=5)
field_keys = st.none() | st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3, unique=True)


def hits_of(memory: Memory, query: str, k: int, **options: Any) -> list[Any]:
    """Return ``(step, score, fields)`` of a query's hits."""
    return [
        (hit.item["step"], hit.score, hit.fields)
        for hit in memory.search(query, k, embedder=EMBEDDER, **options)
    ]


def holds_no_vector(memory: StoredMemory) -> None:
    """Assert that the memory's index holds no vector and no vector was read whole from the store."""
    index = search_index(memory)
    assert index.vector_model() is None
    for keys in [None, *([field] for field in FIELDS)]:
        assert len(index.missing_vectors(None if keys is None else tuple(keys))) == len(memory)
    assert memory.store.reads == []  # type: ignore[attr-defined]  # the test's note


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    words=query_words,
    k=st.integers(1, 8),
    mode=st.sampled_from(["semantic", "hybrid"]),
    keys=field_keys,
    where=st.sampled_from(FILTERS),
)
def test_over_the_budget_keys_filter_functions_and_wordless_queries_are_answered_by_the_store(
    opened: Callable[[int], StoredMemory],
    words: list[str],
    k: int,
    mode: str,
    keys: list[str] | None,
    where: Any,
) -> None:
    """Over the budget, with keys, a filter function or a query holding no word: Memory.search's hits and floats, no vector in RAM."""
    memory = stored_over_budget(opened)
    query = " ".join(words)
    got = hits_of(memory, query, k, mode=mode, keys=keys, where=where)
    want = hits_of(plain_copy(memory), query, k, mode=mode, keys=keys, where=where)
    assert got == want
    holds_no_vector(memory)


_HELD: list[tuple[Callable[[int], StoredMemory], StoredMemory, Memory]] = []


def stored_over_budget(opened: Callable[[int], StoredMemory]) -> StoredMemory:
    """Return the over-budget memory the ``opened`` fixture made for this test (one per test, not per example)."""
    if not _HELD or _HELD[0][0] is not opened:
        memory = opened(SMALL)
        _HELD[:] = [(opened, memory, Memory(list(memory.content)))]
    return _HELD[0][1]


def plain_copy(memory: StoredMemory) -> Memory:
    """Return the plain Memory of the same items made beside ``memory``: the reference."""
    assert _HELD[0][1] is memory
    return _HELD[0][2]


def test_over_the_budget_a_filter_function_is_asked_of_the_memorys_own_items(
    opened: Callable[[int], StoredMemory],
) -> None:
    """A semantic query's filter function gets the items the memory holds (as in keyword mode), not copies read from the store."""
    memory = opened(SMALL)
    own = {id(item) for item in memory.content}
    asked: list[int] = []

    def noting(item: MemoryItem) -> bool:
        asked.append(id(item))
        return one_in_seven(item)

    got = hits_of(memory, QUERIES[0], 5, mode="semantic", where=noting)
    assert got == hits_of(
        Memory(list(memory.content)), QUERIES[0], 5, mode="semantic", where=one_in_seven
    )
    assert asked
    assert set(asked) <= own
    holds_no_vector(memory)


def test_over_the_budget_a_hybrid_query_with_a_filter_function_is_answered_by_the_store(
    opened: Callable[[int], StoredMemory], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hybrid query with a filter function: Memory.search's hits, the cosines from the store (Store.cosines), no vector in RAM; a filter many items pass reads the cosines of a few keyword hits, not of every one."""
    memory = opened(SMALL)
    plain = Memory(list(memory.content))
    asked = noted_among(monkeypatch, memory.store)
    for where in (step_odd, one_in_seven, none_pass):
        for query in QUERIES:
            options = {"mode": "hybrid", "where": where}
            assert hits_of(memory, query, 6, **options) == hits_of(plain, query, 6, **options)
    holds_no_vector(memory)
    asked.clear()
    hits_of(memory, "report", 3, mode="hybrid", where=step_odd)  # a word most steps hold
    holding = search_index(memory).keyword_scores(["report"], None)[0]
    assert len(holding) > 150
    assert asked
    assert max(asked) < len(holding)  # every hit's cosine: the full blend's


def test_over_the_budget_a_hybrid_query_with_keys_takes_its_cosines_from_the_store(
    opened: Callable[[int], StoredMemory], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hybrid query with keys and no filter or a rare one: the keyword side from the memory's index, the cosines from the store (Store.cosines); no vector in RAM."""
    memory = opened(SMALL)
    plain = Memory(list(memory.content))
    asked = noted_among(monkeypatch, memory.store)
    for keys in (["thought"], ["observation", "status"]):
        for query in [*QUERIES, "-- ? --", "zebra"]:
            options = {"mode": "hybrid", "keys": keys}
            assert hits_of(memory, query, 6, **options) == hits_of(plain, query, 6, **options)
    assert asked
    rare: list[Any] = [{"step": 150}, {"step": {"$in": [7, 8, 250]}}]  # few pass: their cosines
    for where in rare:
        asked.clear()
        for query in QUERIES:
            options = {"mode": "hybrid", "keys": ["thought"], "where": where}
            assert hits_of(memory, query, 6, **options) == hits_of(plain, query, 6, **options)
        assert asked
    holds_no_vector(memory)
    got = [
        item["step"]
        for item in memory.recall(QUERIES[0], 4, embedder=EMBEDDER, mode="hybrid", keys=["thought"])
    ]
    want = [
        item["step"]
        for item in plain.recall(QUERIES[0], 4, embedder=EMBEDDER, mode="hybrid", keys=["thought"])
    ]
    assert got == want
    holds_no_vector(memory)


def test_over_the_budget_a_hybrid_query_with_keys_and_a_common_filter_takes_no_vector(
    opened: Callable[[int], StoredMemory],
) -> None:
    """A hybrid query with keys and a filter many items pass: Memory.search's hits, the cosines from the store, no vector in RAM (its keys' vectors were taken before)."""
    memory = opened(SMALL)
    plain = Memory(list(memory.content))
    for query in QUERIES:
        options = {"mode": "hybrid", "keys": ["thought"], "where": {"team": "red"}}
        assert hits_of(memory, query, 6, **options) == hits_of(plain, query, 6, **options)
    holds_no_vector(memory)
    for mode in ("semantic", "hybrid"):
        assert answers(memory, mode) == reference(list(memory.content), mode)
    holds_no_vector(memory)


@pytest.mark.parametrize("keys", [None, ["thought"], ["observation", "status"]])
def test_index_embeddings_over_the_budget_leaves_the_vectors_in_the_store(
    opened: Callable[[int], StoredMemory], keys: list[str] | None
) -> None:
    """index_embeddings over the budget embeds in the store, counts as Memory.index_embeddings, and takes no vector into RAM."""
    memory = opened(SMALL)
    items = list(memory.content)
    plain = Memory(items)
    assert memory.index_embeddings(EMBEDDER, keys=keys) == plain.index_embeddings(
        EMBEDDER, keys=keys
    )
    holds_no_vector(memory)
    for mode in ("semantic", "hybrid") if keys is None else ("semantic",):
        for query in QUERIES:
            # The memory's embedder, remembered by index_embeddings.
            got = [
                (h.item["step"], h.score, h.fields)
                for h in memory.search(query, 6, mode=mode, keys=keys)
            ]  # type: ignore[arg-type]
            assert got == hits_of(plain, query, 6, mode=mode, keys=keys)
    holds_no_vector(memory)


def test_index_embeddings_under_the_budget_takes_the_vectors(
    opened: Callable[[int], StoredMemory],
) -> None:
    """Under the budget index_embeddings still gives the index every vector (RAM answers)."""
    memory = opened(1 << 30)
    assert memory.index_embeddings(EMBEDDER, keys=["thought"]) == Memory(
        list(memory.content)
    ).index_embeddings(EMBEDDER, keys=["thought"])
    assert search_index(memory).missing_vectors(("thought",)) == []


def test_a_session_grown_past_the_budget_while_open_answers_keys_and_filter_functions_from_the_store(
    opened: Callable[[int], StoredMemory], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the budget with keys (vectors in RAM), then grown past it: the memory forgets them and the store answers alike."""
    memory = opened(1 << 30)
    options: list[dict[str, Any]] = [
        {"mode": "semantic", "keys": ["thought"]},
        {"mode": "hybrid", "where": {"team": "red"}},
        {"mode": "semantic", "where": one_in_seven},
    ]
    for option in options:
        assert hits_of(memory, QUERIES[1], 6, **option) == hits_of(
            Memory(list(memory.content)), QUERIES[1], 6, **option
        )
    assert search_index(memory).missing_vectors(("thought",)) == []
    monkeypatch.setattr(memory.store._vectors._cache, "_budget", SMALL)
    memory.add_memory_items(steps(30, seed=9, first=300))
    for option in options:
        assert hits_of(memory, QUERIES[1], 6, **option) == hits_of(
            Memory(list(memory.content)), QUERIES[1], 6, **option
        )
    index = search_index(memory)
    assert index.vector_model() is None
    assert len(index.missing_vectors(("thought",))) == len(memory) == 330


def test_over_the_budget_recall_and_a_reopened_handle_answer_keys_and_functions_from_the_store(
    opened: Callable[[int], StoredMemory],
) -> None:
    """recall with keys or a filter function over the budget, and the same queries on a second handle opened after: Memory's answers, no vector in RAM."""
    memory = opened(SMALL)
    plain = Memory(list(memory.content))
    options: list[dict[str, Any]] = [
        {"mode": "semantic", "keys": ["observation"]},
        {"mode": "semantic", "where": says_pay},
        {"mode": "hybrid", "where": {"team": "blue"}},
    ]
    for option in options:
        got = [item["step"] for item in memory.recall(QUERIES[0], 4, embedder=EMBEDDER, **option)]
        want = [item["step"] for item in plain.recall(QUERIES[0], 4, embedder=EMBEDDER, **option)]
        assert got == want
    holds_no_vector(memory)
    memory.add_memory_items(steps(12, seed=11, first=300))
    again = opened(SMALL)
    assert len(again) == 312
    for option in options:
        assert hits_of(again, QUERIES[2], 5, **option) == hits_of(
            Memory(list(again.content)), QUERIES[2], 5, **option
        )
    holds_no_vector(again)


def coded_budget(memory: StoredMemory) -> int:
    """Return a budget below the session's distinct part vectors as float32 and above them coded (int8): the store keeps them coded."""
    from agents.memory.search import EmbedParts

    texts = {text for item in memory.content for text in EmbedParts().texts(item.to_dict(), None)}
    return 2 * EMBEDDER.dimension * len(texts)


@pytest.fixture
def coded_url(url: str) -> str:
    """Return the URL of session ``s`` in each store that keeps vectors coded over the budget (SQLite, PostgreSQL)."""
    if url.startswith("memory"):
        pytest.skip("a RAM store's handle keeps its vectors as they are: nothing is coded")
    return url


@attrs.define
class Coded:
    """A memory whose vectors its store keeps coded over the budget, the plain Memory of its items, and the store's calls noted since ``clear``.

    Attributes:
        memory: The StoredMemory (one a test: hypothesis's examples share it).
        plain: ``Memory`` of the same items: the reference.
        cosines: How many rows each ``Store.cosines`` call asked for (``among``).
        ceilings: What each ``Store.cosine_ceilings`` call gave.
        walks: The ``where`` of each ``Store.search`` call (the store's own walk).
        vector_reads: The arguments of each read of stored vectors (``backend.vectors_of``).
    """

    memory: StoredMemory
    plain: Memory
    cosines: list[int] = attrs.Factory(list)
    ceilings: list[Any] = attrs.Factory(list)
    walks: list[Any] = attrs.Factory(list)
    vector_reads: list[Any] = attrs.Factory(list)

    def clear(self) -> None:
        """Forget the calls noted so far."""
        for noted in (self.cosines, self.ceilings, self.walks, self.vector_reads):
            noted.clear()

    def kept_coded(self) -> bool:
        """Return whether the store's handle keeps a table of the session's vectors coded."""
        kept = [entry[1] for entry in self.memory.store._vectors._cache._tables.values()]
        return any(type(table).__name__ == "CompactVectors" for table in kept)


@pytest.fixture
def coded(
    coded_url: str, opened: Callable[[int], StoredMemory], monkeypatch: pytest.MonkeyPatch
) -> Coded:
    """Open session ``s`` at a budget its vectors pass as float32 and fit coded, read them until kept coded, then note the store's calls."""
    memory = opened(SMALL)
    plain = Memory(list(memory.content))
    budget = coded_budget(memory)
    memory.close()
    memory = opened(budget)
    for _ in range(2):  # read page by page, then coded and kept
        hits_of(memory, "pay the invoice", 3, mode="semantic")
    store = memory.store
    found = Coded(memory, plain, noted_among(monkeypatch, store))
    assert found.kept_coded()
    noting(
        monkeypatch, store, "cosine_ceilings", lambda _, __, bounds: found.ceilings.append(bounds)
    )
    noting(
        monkeypatch,
        store,
        "search",
        lambda _, options, __: found.walks.append(options.get("where")),
    )
    noting(
        monkeypatch,
        store.backend,
        "vectors_of",
        lambda args, _, __: found.vector_reads.append(args),
    )
    return found


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    words=st.lists(st.sampled_from(["?", "--", "...", "!"]), min_size=1, max_size=3),
    k=st.integers(1, 8),
    mode=st.sampled_from(["semantic", "hybrid"]),
    where=st.sampled_from(FILTERS),
)
def test_over_the_budget_a_wordless_query_reads_no_coded_vector(
    coded: Coded, words: list[str], k: int, mode: str, where: Any
) -> None:
    """Kept coded, a query holding no word (a zero vector: every cosine 0.0) gets Memory.search's hits and floats without reading a stored vector."""
    memory = coded.memory
    query = " ".join(words)
    assert coded.kept_coded()
    coded.clear()
    got = hits_of(memory, query, k, mode=mode, where=where)
    assert got == hits_of(coded.plain, query, k, mode=mode, where=where)
    assert all(score == 0.0 for _, score, _ in got)
    assert coded.vector_reads == []
    holds_no_vector(memory)


SHUT = ["none", "keyword hits", "the walk's candidates"]
"""Filter functions that no keyword hit passes, or none of the walk's candidates (:func:`shut_out`)."""


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(words=query_words, k=st.integers(1, 8), keys=field_keys, shut=st.sampled_from(SHUT))
def test_over_the_budget_hybrid_queries_that_no_keyword_hit_passes_are_memory_search_hits_and_floats(
    opened: Callable[[int], StoredMemory],
    words: list[str],
    k: int,
    keys: list[str] | None,
    shut: str,
) -> None:
    """Over the budget (no bounds of the cosines), a hybrid query with a filter function no keyword hit passes, or none of the walk's candidates: Memory.search's hits and floats, the passing ones from the semantic side, no vector in RAM."""
    memory = stored_over_budget(opened)
    plain = plain_copy(memory)
    query = " ".join(words)
    where = shut_out(shut, plain, query, k, keys)
    got = hits_of(memory, query, k, mode="hybrid", keys=keys, where=where)
    assert got == hits_of(plain, query, k, mode="hybrid", keys=keys, where=where)
    holds_no_vector(memory)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(words=query_words, k=st.integers(1, 8), keys=field_keys, shut=st.sampled_from(SHUT))
def test_kept_coded_hybrid_queries_that_no_keyword_hit_passes_are_memory_search_hits_and_floats(
    coded: Coded, words: list[str], k: int, keys: list[str] | None, shut: str
) -> None:
    """Kept coded (the cosines bounded from the codes), a hybrid query with a filter function no keyword hit passes, or none of the walk's candidates: Memory.search's hits and floats."""
    query = " ".join(words)
    where = shut_out(shut, coded.plain, query, k, keys)
    got = hits_of(coded.memory, query, k, mode="hybrid", keys=keys, where=where)
    assert got == hits_of(coded.plain, query, k, mode="hybrid", keys=keys, where=where)
    holds_no_vector_over_budget(coded.memory, keys)


def shut_out(
    shut: str, plain: Memory, query: str, k: int, keys: list[str] | None
) -> Callable[[MemoryItem], bool]:
    """Return a filter function that no keyword hit of ``query`` passes (``none``: no item; ``keyword hits``: the items holding none of its words), or (``the walk's candidates``) only the keyword hits past the walk's first depth and outside the semantic pool.

    The last leaves the walk's own candidates without a ``k``-th passing
    score: the keyword hits it passes, scored past the walk, are the hits.
    """
    from agents.memory.search import HYBRID_POOL

    if shut == "none":
        return none_pass
    terms = Tokenizer()(query)
    index = search_index(plain)
    scores = index.keyword_scores(terms, None if keys is None else tuple(keys))[0]
    hits = {item["step"] for item in index.items(scores)}
    if shut == "keyword hits":
        return lambda item: item["step"] not in hits
    pool = max(10 * k, HYBRID_POOL)
    ranked = sorted(scores, key=lambda key: (-scores[key], key))
    semantic = index.semantic_scores(
        EMBEDDER, query, None if keys is None else tuple(keys), limit=pool
    )
    past = {
        item["step"] for item in index.items(key for key in ranked[pool:] if key not in semantic)
    }
    return lambda item: item["step"] in past


WALKED = ["report", "OK window", "pay the invoice"]
"""Queries whose walk stops at its first depth with keyword hits left past it."""


@pytest.mark.parametrize("query", WALKED)
def test_over_the_budget_a_hybrid_query_that_no_keyword_hit_passes_reads_the_walks_cosines_only(
    opened: Callable[[int], StoredMemory], monkeypatch: pytest.MonkeyPatch, query: str
) -> None:
    """Over the budget (no bounds of the cosines), a hybrid query with a filter function no keyword hit passes asks the store for the cosines of the walk's keyword hits only, not every keyword hit's: the filter is asked first."""
    memory = opened(SMALL)
    plain = Memory(list(memory.content))
    asked = noted_among(monkeypatch, memory.store)
    reads_the_walks_cosines_only(memory, plain, asked, query)
    holds_no_vector(memory)


@pytest.mark.parametrize("query", WALKED)
def test_kept_coded_a_hybrid_query_that_no_keyword_hit_passes_reads_the_walks_cosines_only(
    coded: Coded, query: str
) -> None:
    """Kept coded (the cosines bounded), a hybrid query with a filter function no keyword hit passes, with no k-th passing score to prune by, asks the store for the cosines of the walk's keyword hits only."""
    reads_the_walks_cosines_only(coded.memory, coded.plain, coded.cosines, query)
    assert coded.ceilings
    assert all(isinstance(found, dict) for found in coded.ceilings)
    holds_no_vector(coded.memory)


def reads_the_walks_cosines_only(
    memory: StoredMemory, plain: Memory, asked: list[int], query: str
) -> None:
    """Assert that ``query`` with a filter function no keyword hit passes gets Memory.search's hits, the store asked (``asked``: ``among`` of each ``Store.cosines`` call) for the walk's first depth of cosines at most."""
    from agents.memory.search import HYBRID_POOL

    terms = Tokenizer()(query)
    holding = search_index(memory).keyword_scores(terms, None)[0]
    assert len(holding) > HYBRID_POOL  # more keyword hits than the walk's first depth
    for where in (none_pass, shut_out("keyword hits", plain, query, 5, None)):
        for round_ in range(2):  # asked again: what the handle kept from the first
            asked.clear()
            options = {"mode": "hybrid", "where": where}
            assert hits_of(memory, query, 5, **options) == hits_of(plain, query, 5, **options)
            assert asked, round_
            assert sum(asked) <= HYBRID_POOL, (where, round_)  # the walk's first depth


def test_store_cosines_are_memory_search_floats_and_bad_arguments_are_refused(url: str) -> None:
    """Store.cosines gives the index's cosines by seq (best limit with ties, and among); a vector of another shape or a bad limit is refused by name."""
    from agents.memory._vectors import checked_vectors
    from agents.memory.exceptions import StoreArgumentError

    with open_store(url) as store:
        seqs = [record.seq for record in store.records("s")]
        plain = Memory([record.item for record in store.records("s")])
        vector = checked_vectors(EMBEDDER, [QUERIES[0]])[0]
        index = search_index(plain)
        want = index.semantic_scores(EMBEDDER, QUERIES[0], ("thought",), limit=7, among=[3])
        got = store.cosines("s", vector, 7, embedder=EMBEDDER, keys=["thought"], among=[seqs[3]])
        key_of = {seq: at for at, seq in enumerate(seqs)}
        assert {key_of[seq]: cosine for seq, cosine in got.items()} == want
        with pytest.raises(StoreArgumentError, match=r"cosines\(\).*32 finite numbers"):
            store.cosines("s", vector[:5], 7, embedder=EMBEDDER)
        with pytest.raises(StoreArgumentError, match=r"limit as an int >= 1, got 0"):
            store.cosines("s", vector, 0, embedder=EMBEDDER)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    words=query_words,
    k=st.integers(1, 8),
    keys=st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3, unique=True),
    where=st.sampled_from([None, {"step": 150}, {"step": {"$in": [7, 8, 250]}}]),
)
def test_over_the_budget_hybrid_queries_with_keys_are_memory_search_hits_and_floats(
    opened: Callable[[int], StoredMemory],
    words: list[str],
    k: int,
    keys: list[str],
    where: Any,
) -> None:
    """Over the budget, a hybrid query with keys (no filter, or one few items pass): Memory.search's hits, floats and fields, no vector in RAM."""
    memory = stored_over_budget(opened)
    query = " ".join(words)
    got = hits_of(memory, query, k, mode="hybrid", keys=keys, where=where)
    assert got == hits_of(plain_copy(memory), query, k, mode="hybrid", keys=keys, where=where)
    holds_no_vector(memory)


def test_over_the_budget_a_hybrid_query_with_keys_leaves_out_rows_another_handle_appended(
    url: str, opened: Callable[[int], StoredMemory]
) -> None:
    """Rows another handle appended (not refreshed) neither rank nor crowd the semantic pool: Memory.search's hits and floats over the memory's own items."""
    memory = opened(SMALL)
    with open_store(url) as other:
        other.append("s", steps(80, seed=13, first=300))
        other.index_embeddings("s", EMBEDDER)
    assert len(memory) == 300
    plain = Memory(list(memory.content))
    for keys in (["thought"], ["observation", "status"]):
        for query in QUERIES:
            options = {"mode": "hybrid", "keys": keys}
            assert hits_of(memory, query, 6, **options) == hits_of(plain, query, 6, **options)
    holds_no_vector(memory)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    words=query_words,
    k=st.integers(1, 8),
    keys=field_keys,
    where=st.sampled_from(
        [step_odd, one_in_seven, says_pay, none_pass, {"team": "red"}, {"team": "blue"}]
    ),
)
def test_kept_coded_hybrid_queries_with_a_filter_many_pass_are_memory_search_hits_and_floats(
    coded: Coded, words: list[str], k: int, keys: list[str] | None, where: Any
) -> None:
    """Kept coded, a hybrid query with a filter function (or keys and a filter of fields): Memory.search's hits, floats and fields, the cosines bounded from the codes; no vector in RAM over the budget."""
    memory = coded.memory
    query = " ".join(words)
    got = hits_of(memory, query, k, mode="hybrid", keys=keys, where=where)
    assert got == hits_of(coded.plain, query, k, mode="hybrid", keys=keys, where=where)
    holds_no_vector_over_budget(memory, keys)


def holds_no_vector_over_budget(memory: StoredMemory, asked: list[str] | None) -> None:
    """Assert that the memory's index holds no vector of the keys whose stored vectors pass the budget (those ``asked`` too), and read none whole.

    The budget is asked per set of keys (``Store.vectors_over_budget``): at
    a budget that the session's part vectors over all fields pass but one
    field's fit (``coded_budget``: ``team`` holds two texts), a query with
    those keys has the index take their vectors, as under the budget; RAM
    answers it then. Those of the keys over the budget stay in the store.
    """
    index = search_index(memory)
    store = memory.store
    for keys in [None, *((field,) for field in FIELDS), None if asked is None else tuple(asked)]:
        if store.vectors_over_budget("s", keys=keys, parts=index.parts):
            assert len(index.missing_vectors(keys)) == len(memory), keys
    assert store.reads == []  # type: ignore[attr-defined]  # the test's note


def test_kept_coded_a_hybrid_query_with_a_filter_function_reads_the_cosines_that_can_rank(
    coded: Coded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept coded, a hybrid query with a filter many items pass asks the store for bounds of its passing keyword hits (Store.cosine_ceilings) and the exact cosines of fewer of them than it does unbounded."""
    memory = coded.memory
    for query in QUERIES:
        got = hits_of(memory, query, 3, mode="hybrid", where=step_odd)
        assert got == hits_of(coded.plain, query, 3, mode="hybrid", where=step_odd)
    assert coded.ceilings
    assert all(isinstance(found, dict) for found in coded.ceilings)
    counts = []
    for bounded in (True, False):
        if not bounded:  # the store's bounds, then none
            monkeypatch.setattr(memory.store, "cosine_ceilings", lambda *a, **o: None)
        coded.clear()
        got = hits_of(memory, "report", 3, mode="hybrid", where=step_odd)
        assert got == hits_of(coded.plain, "report", 3, mode="hybrid", where=step_odd)
        counts.append(sum(coded.cosines))
    assert counts[0] < counts[1]
    holds_no_vector(memory)


def test_store_cosine_ceilings_bound_the_cosines(
    coded_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store.cosine_ceilings: at least each item's cosine (Store.cosines) once kept coded, None under the budget, bad vectors refused."""
    from agents.memory._vectors import checked_vectors
    from agents.memory.exceptions import StoreArgumentError
    from agents.memory.search import EmbedParts

    with open_store(coded_url) as plain:
        assert plain.cosines("s", checked_vectors(EMBEDDER, ["pay"])[0], 3, embedder=EMBEDDER)
        vector = checked_vectors(EMBEDDER, ["pay the invoice"])[0]
        assert plain.cosine_ceilings("s", vector, [1, 2], embedder=EMBEDDER) is None
    memory = StoredMemory(open_store(coded_url), "s")
    budget = coded_budget(memory)
    memory.close()
    with budgeted(open_store(coded_url), monkeypatch, budget) as store:
        seqs = list(range(1, 301))
        for _ in range(2):  # read page by page, then coded and kept
            exact = store.cosines("s", vector, 3, embedder=EMBEDDER, among=seqs, parts=EmbedParts())
        upper = store.cosine_ceilings("s", vector, seqs, embedder=EMBEDDER, parts=EmbedParts())
        assert upper is not None
        assert set(upper) == set(exact)
        assert all(upper[seq] >= exact[seq] for seq in exact)
        with pytest.raises(StoreArgumentError):
            store.cosine_ceilings("s", [0.0], seqs, embedder=EMBEDDER)


_WIDE: list[Memory] = []


@settings(max_examples=40, deadline=None)
@given(
    words=query_words,
    k=st.integers(1, 8),
    where=st.sampled_from([step_odd, one_in_seven, says_pay, none_pass, {"team": "red"}]),
    slack=st.sampled_from([0.0, 0.05]),
)
def test_search_with_given_cosines_and_bounds_is_memory_search(
    words: list[str], k: int, where: Any, slack: float
) -> None:
    """search(cosines=, bounds=) with a filter many items pass (bounds at or above each cosine): the hits and floats of Memory.search, over more keyword hits than the walk reaches."""
    from agents.memory import search

    if not _WIDE:
        _WIDE.append(Memory(steps(1500, seed=3)))
    memory = _WIDE[0]
    index = search_index(memory)
    query = " ".join(words)

    def cosines(pool: int, keys: Any) -> dict[int, float]:
        return index.semantic_scores(EMBEDDER, query, None, limit=pool, among=keys)

    def bounds(keys: Any) -> dict[int, float]:
        exact = index.semantic_scores(EMBEDDER, query, None, limit=1, among=keys)
        return {key: exact[key] + slack for key in keys if key in exact}

    options: dict[str, Any] = {"mode": "hybrid", "where": where, "embedder": EMBEDDER}
    got = search.search(memory, query, k, cosines=cosines, bounds=bounds, **options)
    want = search.search(memory, query, k, **options)
    assert [(h.item["step"], h.score, h.fields) for h in got] == [
        (h.item["step"], h.score, h.fields) for h in want
    ]


@pytest.mark.parametrize("where", [{"team": "blue"}, {"status": {"$in": ["CONTINUE", "FINISH"]}}])
def test_kept_coded_a_hybrid_query_with_a_common_filter_of_fields_takes_the_stores_cosines(
    coded: Coded, where: Any
) -> None:
    """Kept coded, a hybrid query with no keys and a filter of fields most items pass: Memory.search's hits and floats, the keyword side from the memory's index and the cosines from the store, bounded from the codes (Store.cosine_ceilings), not the store's filtered walk (Store.search: at 50,000 steps it blended every keyword hit, 3.5-8.8 s a query)."""
    memory = coded.memory
    for query in [*QUERIES, "report", "OK window"]:
        got = hits_of(memory, query, 5, mode="hybrid", where=where)
        assert got == hits_of(coded.plain, query, 5, mode="hybrid", where=where)
    assert coded.walks == []
    assert coded.ceilings
    assert all(isinstance(found, dict) for found in coded.ceilings)
    holds_no_vector(memory)


# -- over the budget: the stored bytes taken from the coded table, not scanned again -----------


def noted_scans(monkeypatch: pytest.MonkeyPatch, store: Store) -> list[Any]:
    """Return the list that notes each scan of the stored vector bytes (``Backend.vector_bytes``) of ``store``."""
    scans: list[Any] = []
    noting(monkeypatch, store.backend, "vector_bytes", lambda args, _, __: scans.append(args))
    return scans


def stored_bytes(store: Store) -> int:
    """Return the bytes of session ``s``'s stored part vectors (every field), as the backend's scan sums them."""
    from agents.memory._vectors import fields_text
    from agents.memory.search import EmbedParts

    return store.backend.vector_bytes("s", fields_text(None, EmbedParts()))


def test_kept_coded_steps_written_and_queried_scan_no_stored_bytes(
    coded: Coded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept coded, steps written and queried: Memory.search's hits and floats, and the bytes over the budget taken from the table kept at each version, never scanned from the rows again (once each write on main)."""
    memory = coded.memory
    scans = noted_scans(monkeypatch, memory.store)
    for seed in (11, 12):
        memory.add_memory_items(steps(3, seed=seed, first=300 + 3 * (seed - 11)))
        for mode in ("semantic", "hybrid"):
            assert answers(memory, mode) == reference(list(memory.content), mode)
    assert scans == []
    assert memory.store.vectors_over_budget("s") is True
    assert scans == []
    holds_no_vector(memory)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    writes=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(1, 4)),
            st.tuples(st.just("delete"), st.integers(0, 299)),
        ),
        min_size=1,
        max_size=4,
    ),
    off=st.integers(-8, 8),
)
def test_kept_coded_vectors_over_budget_is_the_scanned_bytes_against_the_budget(
    coded: Coded, monkeypatch: pytest.MonkeyPatch, writes: list[tuple[str, int]], off: int
) -> None:
    """Kept coded through additions and deletions, Store.vectors_over_budget answers as the scan of the stored bytes does at budgets about them, without the scan (the table's live parts are the rows' vectors)."""
    memory, store = coded.memory, coded.memory.store
    cache = store._vectors._cache
    for kind, value in writes:
        if kind == "add":
            last = max(item["step"] for item in memory.content)
            memory.add_memory_items(steps(value, seed=value + last, first=last + 1))
        else:
            memory.delete_memory_item(value)
    assert answers(memory, "hybrid") == reference(list(memory.content), "hybrid")
    assert coded.kept_coded()
    scanned = stored_bytes(store)
    scans = noted_scans(monkeypatch, store)
    cache._counts.clear()  # the bytes the query counted at this version: taken again
    coded_at = cache.budget
    for budget in (scanned + off * 4, scanned - 1, scanned):
        monkeypatch.setattr(cache, "_budget", budget)
        assert store.vectors_over_budget("s") is (scanned > budget)
    monkeypatch.setattr(cache, "_budget", coded_at)
    assert scans == []
