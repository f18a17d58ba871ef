"""The bounded hybrid walk (agents.memory._hybrid) gives the k best of blending every hit, in RAM as in the stores."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import agents.memory._vectors as vectors
from agents.memory import Memory, MemoryItem
from agents.memory._hybrid import Pruning, bounded_blend
from agents.memory._vectors import (
    HYBRID_POOL,
    EmbedParts,
    blend,
    checked_weight,
    keyword_leader,
    keyword_scale,
    stands_out,
)
from agents.memory.search import HashingEmbedder, search, search_index

Scores = dict[int, float]
NEAR = 1e-7
"""How far apart two drawn scores may be: near-ties put an item past the walk's depth just above the cut."""


def best(scores: Scores, k: int) -> list[tuple[int, float]]:
    """Return the ``k`` best ``(key, score)``: highest first, ties by key."""
    return sorted(scores.items(), key=lambda hit: (-hit[1], hit[0]))[:k]


def pool_of(cosines: Scores, pool: int) -> Scores:
    """Return the best ``pool`` cosines and every one tied with the last, as the semantic side gives them."""
    ranked = sorted(cosines.values(), reverse=True)
    if len(ranked) <= pool:
        return dict(cosines)
    cut = ranked[pool - 1]
    return {key: cos for key, cos in cosines.items() if cos >= cut}


@st.composite
def score_sets(draw: st.DrawFn) -> dict[str, Any]:
    """Draw a query's BM25 by key and cosine by key (either side may be empty, some items have no vector), k, weight, coverage and together.

    The values come from a few levels and their near-twins (``NEAR`` apart),
    so that ties and near-ties are common, where a wrong bound shows.
    """
    n = draw(st.integers(0, 600))
    base = draw(st.sampled_from([0.5, 2.5, 7.5]))
    bm25 = st.sampled_from([0.3, 1.0, base, base + NEAR, 4.0, 12.0, 12.0 + NEAR])
    cos = st.sampled_from([-0.2, 0.05, 0.3, 0.3 + NEAR, 0.31, 0.6, 0.6 + NEAR, 0.9])
    keyword_share_of = draw(st.sampled_from([0, 1, 2, 3]))  # 0: no keyword hit
    keyword = {key: draw(bm25) for key in range(n) if keyword_share_of > draw(st.integers(0, 2))}
    if keyword and draw(st.booleans()):
        keyword[draw(st.sampled_from(sorted(keyword)))] = 40.0  # a leader that stands out
    embedded = draw(st.sampled_from([0, 1, 3]))  # 0: no vector at all
    cosines = {key: draw(cos) for key in range(n) if embedded > draw(st.integers(0, 2))}
    return {
        "keyword": keyword,
        "cosines": cosines,
        "k": draw(st.sampled_from([1, 2, 5, 13, 40, 700])),  # 700: more than every hit
        "weight": draw(st.sampled_from([0.0, 0.3, 0.6, 0.8, 1.0])),
        "coverage": draw(st.sampled_from([1.0, 1.0, 0.9, 0.5])),
        "together": draw(st.booleans()),
    }


# The walk's first depth (HYBRID_POOL keyword hits) holds 100 items blending to
# 0.6 * share(b) + r * 0.3; item 150, tied on BM25 (so past the depth) and outside the
# semantic pool (100 items without a query word, NEAR nearer the query), blends a
# hair higher and ranks first: a bound a hair too low stops the walk before it.
PAST_THE_DEPTH_BY_A_HAIR = {
    "keyword": dict.fromkeys(range(151), 7.5),
    "cosines": {
        **dict.fromkeys(range(150), 0.3),
        150: 0.3 + NEAR / 2,
        **dict.fromkeys(range(200, 300), 0.3 + NEAR),
    },
    "k": 1,
    "weight": 0.6,
    "coverage": 1.0,
    "together": True,
}


# A keyword leader that stands out (BM25 5 against 4: kept first) but blends below the
# others, so the blend lifts it from the best score of the others, which lies past the
# first depth (the items tied at BM25 4 past it have higher cosines): the walk must
# hold the k best and the SHARED_TOP it may lift.
LIFTED_FROM_PAST_THE_DEPTH = {
    "keyword": {0: 5.0, **dict.fromkeys(range(1, 201), 4.0)},
    "cosines": {
        **dict.fromkeys(range(100), -0.2),
        **dict.fromkeys(range(100, 201), 0.3),
        **dict.fromkeys(range(201, 301), 0.31),
    },
    "k": 1,
    "weight": 0.5,
    "coverage": 1.0,
    "together": True,
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(score_sets())
@example(PAST_THE_DEPTH_BY_A_HAIR)
@example(LIFTED_FROM_PAST_THE_DEPTH)
def test_bounded_blend_gives_the_full_blends_k_best_and_floats(drawn: dict[str, Any]) -> None:
    """bounded_blend's k best are those of blending every hit, scores to the float and ties by key, and each candidate it scores has the full blend's float."""
    keyword, cosines, k = drawn["keyword"], drawn["cosines"], drawn["k"]
    weight, coverage, together = drawn["weight"], drawn["coverage"], drawn["together"]
    pool = max(10 * k, HYBRID_POOL)
    held = pool_of(cosines, pool)
    ranked = sorted(((score, key) for key, score in keyword.items()), key=lambda h: (-h[0], h[1]))
    scale = keyword_scale(max(len(cosines), len(keyword)))

    def pooled(among: Any) -> Scores:
        return {**held, **{key: cosines[key] for key in among if key in cosines}}

    def among(keys: Any) -> Scores:
        return {key: keyword[key] for key in keys if key in keyword}

    # The plain model: every keyword hit blended with the pool and its own cosine.
    full = blend(keyword, scale, pooled(keyword), weight, coverage, together)
    bounded = bounded_blend(
        k, pool, lambda depth: ranked[:depth], among, pooled, scale, weight, coverage, together
    )
    assert bounded is not None
    assert best(bounded, k) == best(full, k)
    assert {key: full[key] for key in bounded} == bounded


@st.composite
def crowded_sets(draw: st.DrawFn) -> dict[str, Any]:
    """Draw as :func:`score_sets` does, but a crowd: hundreds of keyword hits past the walk's first depth, most with a vector, a small ``k``, a weight strictly between the ends (where rows past the walk can be left out)."""
    n = draw(st.integers(250, 700))
    base = draw(st.sampled_from([0.5, 2.5, 7.5]))
    bm25 = st.sampled_from([0.3, 1.0, base, base + NEAR, 4.0, 12.0, 12.0 + NEAR])
    cos = st.sampled_from([-0.2, 0.05, 0.3, 0.3 + NEAR, 0.31, 0.6, 0.6 + NEAR, 0.9])
    keyword = {key: draw(bm25) for key in range(n) if draw(st.integers(0, 5))}
    if draw(st.booleans()):
        keyword[draw(st.sampled_from(sorted(keyword)))] = 40.0
    cosines = {key: draw(cos) for key in range(n) if draw(st.integers(0, 5))}
    return {
        "keyword": keyword,
        "cosines": cosines,
        "k": draw(st.sampled_from([1, 2, 5, 13])),
        "weight": draw(st.sampled_from([0.3, 0.6, 0.8])),
        "coverage": draw(st.sampled_from([1.0, 1.0, 0.9])),
        "together": draw(st.booleans()),
    }


def pruned_and_full(
    drawn: dict[str, Any],
    may: list[int],
    passes: set[int],
    slack: float | None,
    bm25_asked: list[int] | None = None,
) -> tuple[Scores, Scores, list[int]]:
    """Return a pruned walk's blend of a drawn query asked besides for ``may`` (``passes`` the rows that pass; cosines bounded ``slack`` above, ``None``: not bounded), the full blend, and the keys whose cosines the walk asked for (those whose BM25 it asked: noted in ``bm25_asked``)."""
    keyword, cosines, k = drawn["keyword"], drawn["cosines"], drawn["k"]
    weight, coverage, together = drawn["weight"], drawn["coverage"], drawn["together"]
    pool = max(10 * k, HYBRID_POOL)
    held = pool_of(cosines, pool)
    ranked = sorted(((score, key) for key, score in keyword.items()), key=lambda h: (-h[0], h[1]))
    scale = keyword_scale(max(len(cosines), len(keyword)))
    asked: list[int] = []

    def pooled(among: Any) -> Scores:
        wanted = list(among)
        asked.extend(wanted)
        return {**held, **{key: cosines[key] for key in wanted if key in cosines}}

    def among(keys: Any) -> Scores:
        if bm25_asked is not None:
            bm25_asked.extend(keys)
        return {key: keyword[key] for key in keys if key in keyword}

    def ceilings(keys: Any) -> Scores | None:
        if slack is None:
            return None
        return {key: cosines[key] + slack for key in keys if key in cosines}

    def floor(scores: Scores) -> tuple[float, int] | None:
        hits = best({key: s for key, s in scores.items() if key in passes}, k)
        return (hits[-1][1], hits[-1][0]) if len(hits) == k else None

    full = blend(keyword, scale, pooled(keyword), weight, coverage, together)
    asked.clear()
    args = (scale, weight, coverage, together, may, Pruning(ceilings, floor))
    pruned = bounded_blend(k, pool, lambda depth: ranked[:depth], among, pooled, *args)
    assert pruned is not None
    return pruned, full, asked


def passing(scores: Scores, passes: set[int], k: int) -> list[tuple[int, float]]:
    """Return the ``k`` best of ``scores`` among ``passes``."""
    return best({key: s for key, s in scores.items() if key in passes}, k)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(score_sets(), crowded_sets()), st.data())
def test_a_pruned_walk_gives_the_full_blends_k_best_that_pass_and_their_floats(
    drawn: dict[str, Any], data: st.DataObject
) -> None:
    """With Pruning, the rows asked besides that cannot rank are left out unscored, and the k best that pass (rows that may pass, some not) are the full blend's, floats and ties by key included."""
    keys = sorted({*drawn["keyword"], *drawn["cosines"]})
    rng = random.Random(data.draw(st.integers(0, 2**16)))
    share = data.draw(st.sampled_from([0.05, 0.3, 0.5, 1.0]))
    may = [key for key in keys if rng.random() < share]  # the rows a filter may pass
    passes = {key for key in may if rng.random() < 0.8}  # some that may pass fail
    slack = data.draw(st.sampled_from([None, 0.0, NEAR, 0.01, 0.3]))
    pruned, full, _ = pruned_and_full(drawn, may, passes, slack)
    assert passing(pruned, passes, drawn["k"]) == passing(full, passes, drawn["k"])
    assert {key: full[key] for key in pruned} == pruned


# Where no keyword hit holds the words together, every row below both backgrounds
# blends to exactly 0: four leaders (BM25 40) and ten close items (cosine 0.9) blend
# above it, the walk stops at its first depth (the hits at BM25 1.0, keys 200 on), and
# the rows that pass all blend to 0, so they rank by key: row 10, past the walk (BM25
# 0.3), comes before the walk's own 250 and 260.
TIED_AT_ZERO = {
    "keyword": {
        **dict.fromkeys(range(200), 0.3),
        **dict.fromkeys(range(200, 400), 1.0),
        **dict.fromkeys(range(400, 404), 40.0),
    },
    "cosines": {
        **dict.fromkeys(range(404), -0.2),
        **dict.fromkeys(range(500, 510), 0.9),
        **dict.fromkeys(range(510, 700), 0.3),
    },
    "k": 2,
    "weight": 0.6,
    "coverage": 1.0,
    "together": False,
}


def test_a_pruned_walk_scores_a_row_past_it_that_ties_the_floor_at_zero_with_a_smaller_key() -> (
    None
):
    """A row past the walk whose ceiling is 0 ties a floor of 0: it is scored where its key comes first, left out where it comes after."""
    passes = {10, 250, 260, 390}
    pruned, full, asked = pruned_and_full(TIED_AT_ZERO, sorted(passes), passes, 0.0)
    assert passing(full, passes, 2) == [(10, 0.0), (250, 0.0)]
    assert passing(pruned, passes, 2) == passing(full, passes, 2)
    assert 10 in asked
    assert 390 not in asked


# As TIED_AT_ZERO, with a fifth leader: the keyword background is the leaders' share, so
# the walk's last BM25 (1.0) is below it by far more than rounding.
BELOW_THE_LEADERS = {
    **TIED_AT_ZERO,
    "keyword": {**TIED_AT_ZERO["keyword"], **dict.fromkeys(range(400, 405), 40.0)},
}


def test_a_pruned_walk_asks_no_bm25_of_a_row_past_it_that_blends_to_0_after_a_floor_of_0() -> None:
    """A row past the walk that blends to 0 at any BM25 up to the walk's last (below the keyword background, its cosine's bound below the crowd's): after a floor of 0 (by key) its BM25 is never asked (a filter 5% of 30,000 steps pass asked it of every passing row); before it, it is scored."""
    passes = {10, 250, 260, 390, *range(300, 340)}
    bm25_asked: list[int] = []
    drawn = BELOW_THE_LEADERS
    pruned, full, _ = pruned_and_full(drawn, sorted(passes), passes, 0.0, bm25_asked)
    assert passing(full, passes, 2) == [(10, 0.0), (250, 0.0)]
    assert passing(pruned, passes, 2) == passing(full, passes, 2)
    assert 10 in bm25_asked
    assert not {390, *range(300, 340)} & set(bm25_asked)


def test_a_pruned_walk_with_no_floor_yet_asks_the_bm25_of_the_best_bounded_rows_first() -> None:
    """Fewer than k rows that pass in the walk (no floor) and a hundred past it: the BM25 of the best bounded 16 is asked first, and the floor they give leaves the rest unasked (a filter 1% of 30,000 steps pass asked it of all ~310 rows)."""
    passes = {10, *range(20, 120)}
    bm25_asked: list[int] = []
    drawn = BELOW_THE_LEADERS
    pruned, full, _ = pruned_and_full(drawn, sorted(passes), passes, 0.0, bm25_asked)
    assert passing(full, passes, 2) == [(10, 0.0), (20, 0.0)]
    assert passing(pruned, passes, 2) == passing(full, passes, 2)
    assert {key: full[key] for key in pruned} == pruned
    assert sorted(set(bm25_asked) & passes) == [10, *range(20, 35)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(score_sets(), crowded_sets()), st.data())
def test_blend_zeros_holds_only_where_every_item_below_the_bounds_blends_to_exactly_0(
    drawn: dict[str, Any], data: st.DataObject
) -> None:
    """Where blend_zeros says a (BM25, cosine) bound blends to 0, every candidate at or below it that the blend does not lift scores exactly 0.0, at near-ties of BM25 and cosine too."""
    keyword, cosines = drawn["keyword"], drawn["cosines"]
    weight, coverage, together = drawn["weight"], drawn["coverage"], drawn["together"]
    scale = keyword_scale(max(len(cosines), len(keyword), 1))
    full = blend(keyword, scale, cosines, weight, coverage, together)
    zero = vectors.blend_zeros(keyword, scale, cosines, weight, coverage, together)
    lifted = vectors.kept_first(keyword, cosines, coverage) if 0.0 < weight < 1.0 else set()
    bm25s = sorted({0.0, *keyword.values()})
    cosine_bounds = sorted({-1.0, 0.0, *cosines.values()})
    for _ in range(20):
        bm25 = data.draw(st.sampled_from(bm25s)) * data.draw(st.sampled_from([1.0, 1.0 + NEAR]))
        cosine = data.draw(st.sampled_from(cosine_bounds)) + data.draw(st.sampled_from([0, NEAR]))
        if not zero(bm25, cosine):
            continue
        for key, score in full.items():
            if (
                key not in lifted
                and keyword.get(key, 0.0) <= bm25
                and cosines.get(key, 0.0) <= cosine
            ):
                assert score == 0.0, (key, score, bm25, cosine)


# -- Memory.search in hybrid mode -----------------------------------------------------

WORDS = tuple(f"w{i}" for i in range(24))
SKEW = [1.0 / (1 + i) for i in range(len(WORDS))]
COSINES = (0.2, 0.3, 0.3 + 3e-7, 0.3 + 6e-7, 0.5, 0.5 + 3e-7, 0.8)
"""The cosines :class:`AngleEmbedder` gives, with near-twins: a step's word ``aN`` sets its cosine to ``COSINES[N]``."""


class AngleEmbedder:
    """Embeds a text holding the word ``aN`` at cosine ``COSINES[N]`` to a text without one (the queries): cosines a test sets, ties and near-ties included."""

    name = "angle-test"
    dimension = 4

    def __call__(self, texts: Any) -> Any:
        """Return one float32 vector a text."""
        import numpy as np

        out = np.zeros((len(texts), 4), dtype=np.float32)
        for row, text in enumerate(texts):
            level = next((w for w in text.split() if w[:1] == "a" and w[1:].isdigit()), None)
            cos = 1.0 if level is None else COSINES[int(level[1:])]
            out[row] = (cos, (1.0 - cos * cos) ** 0.5, 0.0, 0.0)
        return out


def random_session(seed: int, n: int) -> list[dict[str, Any]]:
    """Return ``n`` steps of skewed words (a few held by most steps) and a cosine's word, some with a second field, each with a tag 0-39."""
    rng = random.Random(seed)
    steps = []
    for i in range(n):
        words = rng.choices(WORDS, SKEW, k=rng.randint(0, 6))
        fields: dict[str, Any] = {
            "step": i,
            "text": " ".join([*words, f"a{rng.randrange(len(COSINES))}"]),
            "tag": rng.randrange(40),
        }
        if rng.random() < 0.4:
            fields["note"] = " ".join(rng.choices(WORDS, SKEW, k=rng.randint(1, 4)))
        steps.append(fields)
    return steps


def past_the_depth_session() -> list[dict[str, Any]]:
    """Return PAST_THE_DEPTH_BY_A_HAIR as steps: 150 tied keyword hits at cosine 0.3, a 151st a hair nearer, 100 steps without a query word nearer still."""
    hits = [{"step": i, "text": "w0 w1 a1", "tag": 7} for i in range(150)]
    hits.append({"step": 150, "text": "w0 w1 a2", "tag": 7})
    return [*hits, *({"step": 151 + i, "text": "w9 w9 a3", "tag": 7} for i in range(100))]


def reference_hybrid(
    memory: Memory,
    query: str,
    k: int,
    keys: tuple[str, ...] | None,
    tag: int | None,
    weight: float | None,
    embedder: Any,
) -> list[tuple[int, float]]:
    """Return ``(step, score)`` of the ``k`` best of blending every keyword hit (how Memory.search ranked before the bounded walk), among the items the filter keeps."""
    index = search_index(memory)
    terms = index.tokenizer(query)
    w = checked_weight(weight)
    keyword = index.keyword_scores(terms, keys, skip_common=True)[0] if terms else {}
    pool = max(10 * k, HYBRID_POOL)
    semantic = index.semantic_scores(embedder, query, keys, limit=pool, among=keyword)
    leader = keyword_leader(keyword)
    covered = index.coverage(terms, keys, leader) if leader is not None else 1.0
    together = not stands_out(keyword, w) or index.together(terms, keys, keyword)
    blended = blend(keyword, index.keyword_scale(), semantic, w, covered, together)
    order = index.keys_of(memory)
    items = {order[id(item)]: item for item in memory}
    passing = {
        key: score
        for key, score in blended.items()
        if tag is None or items[key]["tag"] == tag or (tag < 0 and items[key]["tag"] >= -tag)
    }
    return [(items[key]["step"], score) for key, score in best(passing, k)]


HYBRID_CASES: dict[str, Any] = {
    "seed": st.integers(-1, 2**32),  # -1: past_the_depth_session
    "n": st.integers(1, 900),
    "query": st.lists(st.sampled_from((*WORDS[:4], *WORDS[-6:], "absent")), min_size=1, max_size=4),
    "k": st.sampled_from([1, 3, 5, 12, 60, 1000]),
    "keys": st.sampled_from([None, ("text",), ("note",)]),
    "tag": st.sampled_from([None, None, 7, -4]),  # 7: few pass (one in 40); -4: most pass
    "weight": st.sampled_from([None, None, 0.0, 0.3, 1.0]),
    "whole": st.booleans(),
}
"""A random session and hybrid query: the seed and size, the query's words, k, the searched fields, the filter, the weight, and whole-item vectors or parts."""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**HYBRID_CASES)
@example(-1, 0, ["w0", "w1"], 1, None, None, None, True)
@example(-1, 0, ["w0", "w1"], 1, None, None, None, False)
def test_memory_hybrid_search_is_the_full_blends_k_best(
    seed: int,
    n: int,
    query: list[str],
    k: int,
    keys: tuple[str, ...] | None,
    tag: int | None,
    weight: float | None,
    whole: bool,
) -> None:
    """search() in hybrid mode (Memory.search's) gives the k best of blending every keyword hit: same items, same floats, ties by step, with filters, fields, parts or whole vectors."""
    embedder = AngleEmbedder()
    steps = past_the_depth_session() if seed < 0 else random_session(seed, n)
    memory = Memory(MemoryItem(**fields) for fields in steps)
    search_index(memory, parts=EmbedParts.WHOLE if whole else EmbedParts())
    text = " ".join(query)
    where: Any = None
    if tag is not None:
        where = {"tag": tag} if tag >= 0 else {"tag": {"$gte": -tag}}
    hits = search(
        memory,
        text,
        k,
        keys=keys,
        mode="hybrid",
        where=where,
        embedder=embedder,
        hybrid_weight=weight,
    )
    want = reference_hybrid(memory, text, k, keys, tag, weight, embedder)
    assert [(hit.item["step"], hit.score) for hit in hits] == want


def test_a_hybrid_query_of_a_common_word_blends_only_the_items_that_can_reach_the_top(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every step holds "w0": the query maps the BM25 of a few hundred of its 3,000 hits to the blend's scale, not of every one, and ranks as blending all of them."""
    steps = random_session(3, 3000)
    memory = Memory(MemoryItem(**{**fields, "text": f"w0 {fields['text']}"}) for fields in steps)
    embedder = HashingEmbedder(16)
    want = reference_hybrid(memory, "w0 w5 w9", 5, None, None, None, embedder)
    shared = vectors.keyword_share
    calls = []

    def counted(bm25: float, scale: float) -> float:
        calls.append(bm25)
        return shared(bm25, scale)

    monkeypatch.setattr(vectors, "keyword_share", counted)
    hits = memory.search("w0 w5 w9", 5, mode="hybrid", embedder=embedder)
    assert [(hit.item["step"], hit.score) for hit in hits] == want
    assert 0 < len(calls) < 1000
