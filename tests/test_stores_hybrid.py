"""A store's hybrid search ranks its keyword side only as deep as the blend needs, and ranks as Memory.search does."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agents.memory import Memory, MemoryItem
from agents.memory._hybrid import bounded_blend
from agents.memory._vectors import HYBRID_POOL, blend, keyword_leader, keyword_scale
from agents.memory.search import HashingEmbedder, search, search_index
from agents.memory.stores import open_store
from agents.memory.stores._core.engine import Engine
from agents.memory.stores._search.keyword import KeywordSearch

WORDS = ("the", "file", "report", "chart", "invoice", "window", "saved", "moved", "closed")
# Sessions and queries of those words only (ties and shared words everywhere).
SESSION_TEXTS = st.lists(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join), min_size=1, max_size=400
)
QUERY_TEXT = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)


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
    kind: str, durable_url: Any, backend_calls: Any
) -> None:
    """Every item holds a query word: the backend is asked for a ranking far shorter than the session, and the hits are Memory.search's."""
    embedder = HashingEmbedder(32)
    session = common_word_session(3000)
    with open_store(durable_url(kind)) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        backend = store.backend
        asked = backend_calls(backend, "keyword_top")
        hits = store.search("s", "the invoice report", 5, mode="hybrid", embedder=embedder)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("the invoice report", 5, mode="hybrid", embedder=embedder)
    assert hits_of(hits) == hits_of(want)
    assert asked
    assert max(k for _, _, k in asked) < len(session)


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
    texts=SESSION_TEXTS,
    query=QUERY_TEXT,
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


def test_a_search_of_any_k_up_to_the_largest_ranks_as_memory_search(store_url: str) -> None:
    """k up to 2**63 - 1 (what every search takes): each mode's hits, one session or across, are Memory.search's."""
    embedder = HashingEmbedder(16)
    # A word every item holds and rarer ones: the keyword side ranks the rare ones first.
    session = [{"step": i, "text": f"the {i % 3}"} for i in range(40)]
    memory = Memory(MemoryItem(**fields) for fields in session)
    with open_store(store_url) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])

        @settings(max_examples=30)
        @given(
            query=st.lists(st.sampled_from(["the", "1", "2", "file", "chart"]), min_size=1).map(
                " ".join
            ),
            k=st.sampled_from([2**63 - 1, 2**63 - 2, 2**62 + 1, 2**62, 10**18, 39, 41]),
            mode=st.sampled_from(["keyword", "semantic", "hybrid"]),
        )
        def check(query: str, k: int, mode: Any) -> None:
            want = hits_of(memory.search(query, k, mode=mode, embedder=embedder))
            assert hits_of(store.search("s", query, k, mode=mode, embedder=embedder)) == want
            across = store.search_sessions(query, k, mode=mode, embedder=embedder)
            assert hits_of(across) == want

        check()


def test_a_sqlite_hybrid_query_whose_leader_misses_a_word_ranks_no_word_alone(
    durable_url: Any, backend_calls: Any
) -> None:
    """The keyword leader lacks a query word: the words' document frequencies come from one keyword_frequencies call, no one-word ranking, and the hits are Memory.search's."""
    embedder = HashingEmbedder(32)
    session = common_word_session(600)
    with open_store(durable_url("sqlite")) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        backend = store.backend
        asked = backend_calls(backend, "keyword_top")
        hits = store.search("s", "the invoice window", 5, mode="hybrid", embedder=embedder)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("the invoice window", 5, mode="hybrid", embedder=embedder)
    assert hits_of(hits) == hits_of(want)
    assert all(len(terms) == 3 for _, terms, _ in asked)


COVER_WORDS = ("invoice", "overdue", "penalty", "fee", "report", "the")


def _cover_text(size: int) -> st.SearchStrategy[str]:
    """Draw a field's text: up to ``size`` words of the coverage tests' vocabulary."""
    return st.lists(st.sampled_from(COVER_WORDS), max_size=size).map(" ".join)


def _keyword_side(
    store_url: str, items: list[MemoryItem], query: list[str], keys: tuple[str, ...] | None
) -> tuple[Any, ...]:
    """Return a store's keyword side of a hybrid query over ``items`` in a fresh session (``KeywordSearch.hybrid``)."""
    sid = uuid.uuid4().hex  # the fixture's store outlives one example
    with open_store(store_url) as store:
        store.append(sid, items)
        searched = KeywordSearch(Engine(store.backend, read_only=True))
        return searched.hybrid(sid, query, keys, 0.6, "error")


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    texts=st.lists(st.tuples(_cover_text(5), _cover_text(3)), min_size=1, max_size=12),
    query=st.lists(st.sampled_from([*COVER_WORDS, "lisbon"]), min_size=2, max_size=6),
    only_a=st.booleans(),
)
def test_a_store_gives_the_keyword_leader_the_coverage_memory_search_gives(
    store_url: str, texts: list[tuple[str, str]], query: list[str], only_a: bool
) -> None:
    """The share of the query's IDF weight the keyword leader holds is SearchIndex.coverage's to the last bit, in every store, with keys and without."""
    items = [MemoryItem(step=i, a=a, b=b) for i, (a, b) in enumerate(texts)]
    keys = ("a",) if only_a else None
    got = _keyword_side(store_url, items, query, keys)[2]
    memory = Memory(items)
    ranked = memory.search(" ".join(query), len(items), keys=keys)
    leader = keyword_leader({hit.item["step"]: hit.score for hit in ranked})
    assert got == search_index(memory).coverage(query, keys, leader)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    texts=st.lists(st.tuples(_cover_text(12), _cover_text(3)), min_size=2, max_size=12),
    query=st.lists(st.sampled_from([*COVER_WORDS, "lisbon"]), min_size=2, max_size=6),
    only_a=st.booleans(),
)
def test_a_store_tells_whether_a_hit_holds_the_query_words_together_as_memory_search_does(
    store_url: str, texts: list[tuple[str, str]], query: list[str], only_a: bool
) -> None:
    """Whether one of the best keyword hits holds the query's words within a window of one field is SearchIndex.together's answer, in every store, with keys and without."""
    items = [MemoryItem(step=i, a=a, b=b) for i, (a, b) in enumerate(texts)]
    keys = ("a",) if only_a else None
    got = _keyword_side(store_url, items, query, keys)[3]
    index = search_index(Memory(items))
    keyword = index.keyword_scores(query, keys)[0]
    assert got == (len(keyword) < 2 or index.together(query, keys, keyword))


def _far_together_session() -> list[MemoryItem]:
    """Return a session whose keyword leader holds "invoice overdue penalty" apart, 80 hits two of the words, and one long hit all three side by side."""
    apart = " ".join(["invoice", *["w"] * 4, "overdue", *["w"] * 4, "penalty", *["w"] * 4] * 5)
    pairs = ["invoice overdue", "overdue penalty", "invoice penalty", "penalty invoice"]
    items = [MemoryItem(step=0, text=apart)]
    items += [MemoryItem(step=1 + i, text=f"{pairs[i % 4]} {i}") for i in range(80)]
    filler = " ".join(f"filler{j}" for j in range(200))
    items.append(MemoryItem(step=81, text=f"{filler} the overdue invoice penalty"))
    return items


def test_a_store_finds_the_words_together_in_a_hit_far_below_the_keyword_leader(
    store_url: str,
) -> None:
    """The leader holds the query's words apart and only a long hit far down the ranking holds them side by side: the store finds it (SearchIndex.together's answer), skipping no hit that would pass."""
    items = _far_together_session()
    query = ["invoice", "overdue", "penalty"]
    index = search_index(Memory(items))
    keyword = index.keyword_scores(query, None)[0]
    ranked = sorted(keyword, key=lambda key: (-keyword[key], key))
    assert 1 < ranked.index(81) < 100  # a hit far below the leader
    assert index.together(query, None, keyword)
    assert not index.together(query, None, {key: keyword[key] for key in ranked if key != 81})
    assert _keyword_side(store_url, items, query, None)[3] is True


def test_a_store_reads_only_the_hits_whose_indexed_terms_may_hold_the_words_together(
    store_url: str, backend_calls: Any
) -> None:
    """Where the backend tells each hit's query terms (keyword_held), the store reads the leader (its words apart), then only the hits holding 0.9 of the query's weight (1 of the other 81)."""
    items = _far_together_session()
    keyword = search_index(Memory(items)).keyword_scores(["invoice", "overdue", "penalty"], None)[0]
    assert (
        max(keyword, key=lambda key: (keyword[key], -key)) == 0
    )  # the leader holds the words apart
    with open_store(store_url) as store:
        store.append("s", items)
        seqs = [record.seq for record in store.records("s")]
        read = backend_calls(store.backend, "read_seqs")
        searched = KeywordSearch(Engine(store.backend, read_only=True))
        together = searched.hybrid("s", ["invoice", "overdue", "penalty"], None, 0.6, "error")[3]
        held = store.backend.keyword_held("s", ["penalty"], seqs)
    assert together is True
    if held is None:
        pytest.skip("this backend does not tell a row's terms: the store reads the best hits")
    assert len(read) == 2  # the leader, then the rest at once
    assert list(read[0][1]) == [seqs[0]]
    assert set(read[1][1]) == {seqs[81]}  # the one of the other 81 hits holding all three words


def test_a_keyword_leader_holding_every_query_word_side_by_side_needs_no_word_counts(
    store_url: str, backend_calls: Any
) -> None:
    """The leader holds every query word within one window: the store tells the words stand together without asking each word's document frequency or reading another hit."""
    items = [*_far_together_session(), MemoryItem(step=82, text="overdue invoice penalty")]
    query = ["invoice", "overdue", "penalty"]
    with open_store(store_url) as store:
        store.append("s", items)
        counted = backend_calls(store.backend, "keyword_frequencies")
        read = backend_calls(store.backend, "read_seqs")
        searched = KeywordSearch(Engine(store.backend, read_only=True))
        side = searched.hybrid("s", query, None, 0.6, "error")
    index = search_index(Memory(items))
    keyword = index.keyword_scores(query, None)[0]
    assert max(keyword, key=lambda key: (keyword[key], -key)) == 82  # the leader
    assert (
        side[2:4]
        == (1.0, True)
        == (index.coverage(query, None, 82), index.together(query, None, keyword))
    )
    assert counted == []
    assert len(read) == 1


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


@st.composite
def hybrid_queries(draw: st.DrawFn) -> tuple[dict[int, float], dict[int, float], int, float, float]:
    """Draw a corpus's BM25 by key (some items hold no query word), every item's cosine, k, weight and coverage.

    Scores come from a few values so that ties are common; a lone high BM25
    makes a leader that stands out (kept first by the blend).
    """
    n = draw(st.integers(1, 700))
    levels = st.sampled_from([0.3, 1.0, 2.5, 4.0, 7.5, 12.0])
    keyword = {key: draw(levels) for key in range(n) if draw(st.integers(0, 3))}
    if keyword and draw(st.booleans()):
        keyword[draw(st.sampled_from(sorted(keyword)))] = 40.0
    cosines = {key: draw(st.sampled_from([-0.2, 0.05, 0.3, 0.31, 0.6, 0.9])) for key in range(n)}
    weight = draw(st.sampled_from([0.0, 0.3, 0.5, 0.8, 1.0]))
    coverage = draw(st.sampled_from([1.0, 1.0, 0.9, 0.5]))
    return keyword, cosines, draw(st.integers(1, 20)), weight, coverage


# A keyword leader that stands out (BM25 5 against 4: kept first) but blends below
# other items, so the blend lifts it from the best score of the others; the first
# 100 keyword hits have low cosines and the items tied with them past that depth
# higher ones, so that best score lies past the first keyword ranking.
LIFTED_FROM_PAST_THE_DEPTH = (
    {0: 5.0, **dict.fromkeys(range(1, 201), 4.0)},
    {
        0: -0.2,
        **dict.fromkeys(range(1, 100), -0.2),
        **dict.fromkeys(range(100, 201), 0.3),
        **dict.fromkeys(range(201, 301), 0.31),
    },
    1,
    0.5,
    1.0,
)


def walk_sides(keyword: dict[int, float], cosines: dict[int, float], k: int) -> tuple[Any, ...]:
    """Return what bounded_blend takes of a drawn query: the pool size, the keyword ranking, ``pooled`` and ``among``."""
    pool = max(10 * k, HYBRID_POOL)
    ranked = sorted(((score, key) for key, score in keyword.items()), key=lambda h: (-h[0], h[1]))
    by_cosine = sorted(cosines.items(), key=lambda hit: (-hit[1], hit[0]))
    best = {
        key: cos for key, cos in by_cosine if cos >= by_cosine[min(pool, len(by_cosine)) - 1][1]
    }

    def pooled(among: Any) -> dict[int, float]:
        return {**best, **{key: cosines[key] for key in among}}

    def among(keys: Any) -> dict[int, float]:
        return {key: keyword[key] for key in keys if key in keyword}

    return pool, ranked, pooled, among


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hybrid_queries())
@example(LIFTED_FROM_PAST_THE_DEPTH)
def test_bounded_blend_gives_the_k_best_of_the_full_blend_with_its_scores(
    query: tuple[dict[int, float], dict[int, float], int, float, float],
) -> None:
    """bounded_blend's k best, scores included, are those of blend over every keyword hit (ties, a standing-out leader, items kept first)."""
    keyword, cosines, k, weight, coverage = query
    pool, ranked, pooled, among = walk_sides(keyword, cosines, k)

    scale = keyword_scale(len(cosines))
    full = blend(keyword, scale, pooled(keyword), weight, coverage)
    bounded = bounded_blend(
        k, pool, lambda depth: ranked[:depth], among, pooled, scale, weight, coverage
    )
    assert bounded is not None

    def top(scores: dict[int, float]) -> list[tuple[int, float]]:
        return sorted(scores.items(), key=lambda hit: (-hit[1], hit[0]))[:k]

    assert top(bounded) == top(full)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hybrid_queries(), st.data())
@example(LIFTED_FROM_PAST_THE_DEPTH, None)
def test_bounded_blend_scores_the_keys_asked_besides_as_the_full_blend_does(
    query: tuple[dict[int, float], dict[int, float], int, float, float], data: Any
) -> None:
    """Keys asked besides the walk (a filter's few rows) that are candidates of the full blend get its floats; the others none."""
    keyword, cosines, k, weight, coverage = query
    together = True if data is None else data.draw(st.booleans())
    keys = sorted(cosines)
    also = [] if data is None else data.draw(st.lists(st.sampled_from(keys), unique=True))
    if data is None:
        also = keys[::16]
    pool, ranked, pooled, among = walk_sides(keyword, cosines, k)

    scale = keyword_scale(len(cosines))
    full = blend(keyword, scale, pooled(keyword), weight, coverage, together)
    bounded = bounded_blend(
        k,
        pool,
        lambda depth: ranked[:depth],
        among,
        pooled,
        scale,
        weight,
        coverage,
        together,
        also,
    )
    assert bounded is not None
    assert {key: bounded.get(key) for key in also} == {key: full.get(key) for key in also}


FILTER_WORDS = tuple(f"w{i}" for i in range(30))


def filtered_session(seed: int, n: int, leader: bool) -> list[dict[str, Any]]:
    """Return ``n`` steps of words drawn with a skew (a few common, many rare) and a tag 0-39; with ``leader``, one step repeats the rare words "w28 w29"."""
    rng = random.Random(seed)
    weights = [1.0 / (1 + i) for i in range(len(FILTER_WORDS))]
    session = [
        {
            "step": i,
            "text": " ".join(rng.choices(FILTER_WORDS, weights, k=rng.randint(1, 8))),
            "tag": rng.randrange(40),
        }
        for i in range(n)
    ]
    if leader:
        session[rng.randrange(n)]["text"] = "w28 w29 w28 w29 w0"
    return session


FILTERED_QUERIES: dict[str, Any] = {
    "seed": st.integers(0, 2**32),
    "n": st.integers(16, 1500),
    "wanted": st.integers(0, 3),
    "query": st.lists(st.sampled_from((*FILTER_WORDS, "absent")), min_size=1, max_size=4).map(
        " ".join
    ),
    "k": st.integers(1, 12),
}
"""A filtered hybrid query's strategies: the session's seed and size, the tag the filter keeps, the query and ``k``."""
SLOW_EXAMPLES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@settings(max_examples=12, deadline=None, suppress_health_check=SLOW_EXAMPLES)
@given(leader=st.booleans(), weight=st.sampled_from([0.0, 0.3, 0.6, 0.9, 1.0]), **FILTERED_QUERIES)
def test_a_store_hybrid_search_with_a_filter_few_pass_is_memory_search(
    store_url: str,
    seed: int,
    n: int,
    leader: bool,
    wanted: int,
    query: str,
    k: int,
    weight: float,
) -> None:
    """A filter few rows pass (the bounded walk, those rows scored besides): the store's hits and scores are Memory.search's with where."""
    embedder = HashingEmbedder(16)
    session = filtered_session(seed, n, leader)
    where = {"tag": wanted}
    sid = uuid.uuid4().hex  # the fixture's store outlives one example
    with open_store(store_url) as store:
        store.append(sid, [MemoryItem(**fields) for fields in session])
        hits = store.search(
            sid, query, k, mode="hybrid", where=where, embedder=embedder, hybrid_weight=weight
        )
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = search(
        memory, query, k, mode="hybrid", where=where, embedder=embedder, hybrid_weight=weight
    )
    assert hits_of(hits) == hits_of(want)


@settings(max_examples=8, deadline=None, suppress_health_check=SLOW_EXAMPLES)
@given(weight=st.sampled_from([0.0, 0.6, 1.0]), **FILTERED_QUERIES)
def test_a_filtered_hybrid_search_from_kept_vectors_ranks_the_pool_once_as_memory_search(
    store_url: str, seed: int, n: int, wanted: int, query: str, k: int, weight: float
) -> None:
    """Queries after the first score from the kept table (the pool ranked once, the filter's rows besides): Memory.search's hits and scores."""
    embedder = HashingEmbedder(16)
    session = filtered_session(seed, n, leader=seed % 2 == 0)
    where = {"tag": wanted}
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = search(
        memory, query, k, mode="hybrid", where=where, embedder=embedder, hybrid_weight=weight
    )
    sid = uuid.uuid4().hex  # the fixture's store outlives one example
    with open_store(store_url) as store:
        store.append(sid, [MemoryItem(**fields) for fields in session])
        for _ in range(3):  # the first reads page by page; the next ones keep a table
            hits = store.search(
                sid, query, k, mode="hybrid", where=where, embedder=embedder, hybrid_weight=weight
            )
            assert hits_of(hits) == hits_of(want)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_hybrid_search_with_a_filter_most_items_pass_walks_only_as_deep_as_it_needs(
    kind: str, durable_url: Any, backend_calls: Any
) -> None:
    """Every item holds a query word and 99% pass the filter: no ranking as long as the session is asked, and the hits are Memory.search's."""
    embedder = HashingEmbedder(32)
    session = [
        {**fields, "agent": "reviewer" if i % 100 == 3 else "host"}
        for i, fields in enumerate(common_word_session(3000))
    ]
    where = {"agent": "host"}
    with open_store(durable_url(kind)) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        asked = backend_calls(store.backend, "keyword_top")
        hits = store.search(
            "s", "the invoice report", 5, mode="hybrid", where=where, embedder=embedder
        )
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("the invoice report", 5, mode="hybrid", where=where, embedder=embedder)
    assert hits_of(hits) == hits_of(want)
    assert asked
    assert max(k for _, _, k in asked) < len(session)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    texts=SESSION_TEXTS,
    query=QUERY_TEXT,
    k=st.integers(min_value=1, max_value=12),
    every=st.integers(min_value=1, max_value=60),
)
def test_a_filtered_sqlite_hybrid_search_ranks_as_memory_search_however_deep_it_walks(
    tmp_path_factory: pytest.TempPathFactory, texts: list[str], query: str, k: int, every: int
) -> None:
    """A filter one item in ``every`` fails, or passes: the store's filtered hybrid hits and scores are Memory.search's at each depth it widens to."""
    embedder = HashingEmbedder(16)
    session = [{"step": i, "text": text, "odd": i % every == 0} for i, text in enumerate(texts)]
    path = tmp_path_factory.mktemp("hybrid") / "store.db"
    memory = Memory(MemoryItem(**fields) for fields in session)
    with open_store(f"sqlite://{path}") as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        for where in ({"odd": False}, {"odd": True}):
            hits = store.search("s", query, k, mode="hybrid", where=where, embedder=embedder)
            want = memory.search(query, k, mode="hybrid", where=where, embedder=embedder)
            assert hits_of(hits) == hits_of(want)
