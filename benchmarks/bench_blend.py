"""Hybrid blends side by side: recall@5 of candidate blend rules over the same candidates, tuning and held-out apart.

Each corpus (the tuning ones and the held-out families of
benchmarks/bench_heldout.py) is built, embedded (wordllama over parts,
the default) and asked every query once; what a blend sees is kept per
query: the BM25 of every keyword hit, the corpus's keyword scale and the
best ``HYBRID_POOL`` cosines (with those of the keyword hits), exactly the
arguments ``Memory.search`` and the stores pass to
``agents.memory._vectors.blend``. Each blend rule named in ``RULES`` then
ranks those candidates (ties by session order, as search does), so rules
are compared on identical inputs in seconds. The candidates are cached
under ``--cache`` (a corpus, size and seed a file).

The ``proximity`` rule also reads evidence from outside those arguments:
for each of the query's best ``PROXIMITY_TOP`` keyword hits, the share of
the query's IDF weight that its best window of ``PROXIMITY_WINDOW``
consecutive terms of one field holds (:func:`near_shares`). That evidence
comes from a keyword-only pass over the same corpus, cached beside the
candidates (``near-...`` files). The ``windowed8``, ``windowed16`` and
``windowed32`` rules are the library blend with the keyword leader's share
of the query's IDF weight within its best window of 8, 16 or 32 terms of
one field as its coverage (:func:`collect_windows`, ``windows-...`` files;
tried, not adopted: docs/search.md, "Windowed coverage").

The ``nk...`` rules (:data:`PROX_RULES`) read both: the default blend
where some hit holds the words together (the evidence of ``--window``
terms), a fallback elsewhere; ``nkq0.9 --window 5`` is the library's blend.

Run: .venv/bin/python benchmarks/bench_blend.py [--items 3000] [--facts 120] [--seeds 1,2,3]
     [--rules current,proximity,coverage,kept,shared5,leader0.8,nkq0.9,...] [--corpora tuning|held-out|NAME,...]
     [--window 5]
     (every rule: RULES, NEAR_RULES, COVER_RULES, PROX_RULES, windowed8/16/32; --rules all runs all but windowed)
"""

from __future__ import annotations

import argparse
import heapq
import math
import os
import pickle
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import corpora_heldout as heldout
from bench_heldout import TUNING_KEYWORD, TUNING_RULE, corpus, load, number

from agents.memory import Memory, MemoryItem, _vectors
from agents.memory._item import item_fields
from agents.memory._text import bm25_weight, field_texts, window_weight
from agents.memory.search import Tokenizer, WordLlamaEmbedder, search_index

MODES = ("keyword", "semantic", "hybrid")

# One query: (answer key, keyword top-5 keys, semantic top-5 keys, BM25 by key, cosines by key, scale)
Query = tuple[int, list[int], list[int], dict[int, float], dict[int, float], float]
# What a query's words cover, per query: the share of the IDF weight of its distinct known
# terms that its best keyword hit holds (SearchIndex.coverage; 1.0 without keyword hits).
Cover = float
Rule = Callable[[dict[int, float], float, dict[int, float], float], dict[int, float]]
# One query's proximity evidence: the best window's share of the query's IDF weight, by key
Near = dict[int, float]
CoverRule = Callable[[dict[int, float], float, dict[int, float], float, Cover], dict[int, float]]
NearRule = Callable[[dict[int, float], float, dict[int, float], float, Near], dict[int, float]]
ProxRule = Callable[
    [dict[int, float], float, dict[int, float], float, Cover, Near], dict[int, float]
]

PROXIMITY_WINDOW = 8
PROXIMITY_TOP = 100
PROXIMITY_GATE = 0.9
# The windows of ``windowed`` coverage tried: the leader's share within its best window of W terms
WINDOWS = (8, 16, 32)


def collect(
    name: str, n_items: int, n_facts: int, seed: int, cache: Path
) -> dict[str, list[Query]]:
    """Return, per query kind, what each query's blend is given (cached in ``cache``)."""
    return collect_all(name, n_items, n_facts, seed, cache)[0]


def covers(name: str, n_items: int, n_facts: int, seed: int, cache: Path) -> dict[str, list[Cover]]:
    """Return, per query kind, what each query's words cover (:data:`Cover`), in the order of :func:`collect`."""
    return collect_all(name, n_items, n_facts, seed, cache)[1]


def collect_all(
    name: str, n_items: int, n_facts: int, seed: int, cache: Path
) -> tuple[dict[str, list[Query]], dict[str, list[Cover]]]:
    """Return what each query's blend is given and what its words cover (cached in ``cache``)."""
    path = cache / f"{name}-{n_items}-{n_facts}-{seed}.v3.pickle"
    if path.exists():
        with path.open("rb") as file:
            return pickle.load(file)  # type: ignore[no-any-return]
    embedder = WordLlamaEmbedder()
    rows, sets = corpus(name, n_items, n_facts, seed)
    memory = Memory([MemoryItem(**row) for row in rows])
    memory.index_embeddings(embedder)
    index = search_index(memory)
    keys = index.keys_of(list(memory))
    by_number = {
        number_: keys[id(item)] for number_, item in zip(number_of(memory), memory, strict=True)
    }
    scale = index.keyword_scale()
    out: dict[str, list[Query]] = {}
    cover_out: dict[str, list[Cover]] = {}
    for kind, queries in sets.items():
        got = []
        cover_got: list[Cover] = []
        for query, answer in queries:
            terms = index.tokenizer(query)
            keyword = index.keyword_scores(terms, None)[0] if terms else {}
            leader = _vectors.keyword_leader(keyword)
            cover_got.append(1.0 if leader is None else index.coverage(terms, None, leader))
            semantic = index.semantic_scores(
                embedder, query, None, limit=_vectors.HYBRID_POOL, among=keyword
            )
            tops = [
                [by_number[n] for n in number(memory.search(query, 5, mode=mode))]
                for mode in ("keyword", "semantic")
            ]
            got.append((by_number[answer], tops[0], tops[1], keyword, semantic, scale))
        out[kind] = got
        cover_out[kind] = cover_got
    cache.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as file:
        pickle.dump((out, cover_out), file)
    return out, cover_out


def near_shares(
    fields: list[list[str]], weights: dict[str, float], window: int = PROXIMITY_WINDOW
) -> float:
    """Return the most of ``weights`` (a query's terms and IDF weights) that one window of ``window`` consecutive terms of one field holds, as a share of their sum.

    ``fields`` holds each field's terms in order. A term counts once in a
    window however often it occurs there; 1.0 when every query term the
    memory holds stands within ``window`` terms of the others in one field.
    """
    total = sum(weights.values())
    if total <= 0.0:
        return 1.0
    return max((window_weight(terms, weights, window) for terms in fields), default=0.0) / total


def collect_near(
    name: str, n_items: int, n_facts: int, seed: int, cache: Path, window: int = PROXIMITY_WINDOW
) -> dict[str, list[Near]]:
    """Return, per query kind, each query's :func:`near_shares` of its best ``PROXIMITY_TOP`` keyword hits (cached).

    A keyword-only pass over the corpus :func:`collect` builds (same keys):
    no embedding. The query's IDF weights are the index's (``bm25_weight``
    of each query term some item holds).
    """
    tail = "" if window == PROXIMITY_WINDOW else f"-w{window}"
    path = cache / f"near-{name}-{n_items}-{n_facts}-{seed}{tail}.pickle"
    if path.exists():
        with path.open("rb") as file:
            return pickle.load(file)  # type: ignore[no-any-return]
    rows, sets = corpus(name, n_items, n_facts, seed)
    memory = Memory([MemoryItem(**row) for row in rows])
    index = search_index(memory)
    keys = index.keys_of(list(memory))
    tokenize: Tokenizer = index.tokenizer
    items = {keys[id(item)]: item for item in memory}
    df: dict[str, int] = {}
    terms_of: dict[int, list[list[str]]] = {}
    for key, item in items.items():
        terms_of[key] = [tokenize(text) for _, text in field_texts(item_fields(item))]
        for term in {term for terms in terms_of[key] for term in terms}:
            df[term] = df.get(term, 0) + 1
    out: dict[str, list[Near]] = {}
    for kind, queries in sets.items():
        got = []
        for query, _ in queries:
            terms = tokenize(query)
            weights = {term: bm25_weight(len(items), df[term]) for term in terms if term in df}
            keyword = index.keyword_scores(terms, None)[0] if terms else {}
            best = heapq.nsmallest(
                PROXIMITY_TOP, keyword.items(), key=lambda hit: (-hit[1], hit[0])
            )
            got.append({key: near_shares(terms_of[key], weights, window) for key, _ in best})
        out[kind] = got
    cache.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as file:
        pickle.dump(out, file)
    return out


def collect_windows(
    name: str, n_items: int, n_facts: int, seed: int, cache: Path, data: dict[str, list[Query]]
) -> dict[str, list[dict[int, float]]]:
    """Return, per query kind, each query's windowed coverage by window (:data:`WINDOWS`), in the order of ``data`` (cached).

    The keyword leader of each query of ``data`` (:func:`collect`'s, ties to
    the oldest item) is the one ``SearchIndex.coverage`` reads; its windowed
    coverage is :func:`near_shares` of its fields over the query's IDF weights
    (those ``query_coverage`` sums: each distinct query term some item holds).
    A keyword-only pass (no embedding); the leader and its coverage anywhere
    are checked against the cached ones, so a stale cache fails here.
    """
    path = cache / f"windows-{name}-{n_items}-{n_facts}-{seed}.pickle"
    if path.exists():
        with path.open("rb") as file:
            return pickle.load(file)  # type: ignore[no-any-return]
    rows, sets = corpus(name, n_items, n_facts, seed)
    memory = Memory([MemoryItem(**row) for row in rows])
    index = search_index(memory)
    keys = index.keys_of(list(memory))
    tokenize: Tokenizer = index.tokenizer
    items = {keys[id(item)]: item for item in memory}
    df: dict[str, int] = {}
    for item in items.values():
        for term in {term for _, text in field_texts(item_fields(item)) for term in tokenize(text)}:
            df[term] = df.get(term, 0) + 1
    out: dict[str, list[dict[int, float]]] = {}
    for kind, queries in sets.items():
        got = []
        for (query, _), cached in zip(queries, data[kind], strict=True):
            terms = tokenize(query)
            keyword = index.keyword_scores(terms, None)[0] if terms else {}
            leader = _vectors.keyword_leader(keyword)
            if leader != _vectors.keyword_leader(cached[3]):
                raise SystemExit(f"{name} seed {seed} {kind}: stale cache (leader of {query!r})")
            if leader is None:
                got.append(dict.fromkeys(WINDOWS, 1.0))
                continue
            weights = {
                term: bm25_weight(len(items), df[term])
                for term in dict.fromkeys(terms)
                if term in df
            }
            fields = [tokenize(text) for _, text in field_texts(item_fields(items[leader]))]
            got.append({size: near_shares(fields, weights, size) for size in WINDOWS})
        out[kind] = got
    cache.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as file:
        pickle.dump(out, file)
    return out


def number_of(memory: Memory) -> list[int]:
    """Return the item numbers of a memory's items, in session order."""
    out = []
    for item in memory:
        fields = item.to_dict()
        out.append(fields["item"] if "item" in fields else fields["step"])
    return out


def top5(scores: dict[int, float]) -> list[int]:
    """Return the five best keys, ties by key (session order), as search ranks."""
    return [key for key, _ in sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))[:5]]


def recalls(
    queries: list[Query],
    rule: str,
    near: list[Near],
    cover: list[Cover],
    windows: list[dict[int, float]] | None = None,
) -> dict[str, float]:
    """Return recall@5 of keyword, semantic and the named rule's hybrid over ``queries``.

    A rule of :data:`NEAR_RULES` is also given each query's proximity evidence
    (from ``near``), one of :data:`COVER_RULES` its :data:`Cover` (from ``cover``),
    ``windowedW`` the library blend with the leader's windowed coverage of
    ``W`` terms (from ``windows``, :func:`collect_windows`) as its :data:`Cover`.
    """
    hits = dict.fromkeys(MODES, 0)
    for at, (answer, keyword_top, semantic_top, keyword, semantic, scale) in enumerate(queries):
        hits["keyword"] += answer in keyword_top
        hits["semantic"] += answer in semantic_top
        if rule in PROX_RULES:
            scores = PROX_RULES[rule](keyword, scale, semantic, 0.6, cover[at], near[at])
        elif rule in NEAR_RULES:
            scores = NEAR_RULES[rule](keyword, scale, semantic, 0.6, near[at])
        elif rule.startswith("windowed") and windows is not None:
            scores = kept(keyword, scale, semantic, 0.6, windows[at][int(rule[8:])])
        elif rule in COVER_RULES:
            scores = COVER_RULES[rule](keyword, scale, semantic, 0.6, cover[at])
        else:
            scores = RULES[rule](keyword, scale, semantic, 0.6)
        hits["hybrid"] += answer in top5(scores)
    return {mode: count / len(queries) for mode, count in hits.items()}


# -- the rules compared -----------------------------------------------------------------------


def current(
    keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float
) -> dict[int, float]:
    """The blend of the last release: ``w K + (1 - w) (1 - c100)^2 max(cos, 0)`` (``coverage`` with every ``q = 1``)."""
    return _vectors.blend(keyword, scale, semantic, w)


def standout(
    keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float
) -> dict[int, float]:
    """Each side's stand-out over the query's own background, rescaled to the room above it (tried, not adopted).

    ``w (k - k10) / (1 - k10) + (1 - w) (cos - c100) / (1 - c100)``, both
    clipped at 0: ``k`` the keyword share, ``k10`` that of the query's 10th
    best keyword hit (0 with fewer hits), ``c100`` the cosine of its 100th
    best item. Chosen on the tuning corpora (it holds the rule on all 23
    sets there); on the held-out families it falls 0.116 below keyword on
    crowded-steps lexical queries and 0.042 on pages lexical (docs/search.md).
    """
    background = 0.0
    if len(keyword) >= 10:
        background = _vectors.keyword_share(heapq.nlargest(10, keyword.values())[-1], scale)
    return _stand_out(keyword, scale, semantic, w, background)


def _window(values: list[float], size: int) -> tuple[float, float]:
    """Return a side's leader and its ``size``-th best value (0 with fewer values)."""
    top = heapq.nlargest(size, values)
    if not top:
        return 0.0, 0.0
    return top[0], top[-1] if len(top) == size else 0.0


def _stretched(value: float, lead: float, floor: float) -> float:
    """Return ``value`` stretched over its side's window: 0 at or below ``floor``, ``lead`` at the leader."""
    if value <= floor:
        return 0.0
    if value >= lead:
        return lead
    return lead * (value - floor) / (lead - floor)


def window(
    keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float
) -> dict[int, float]:
    """Each side min-max stretched over its own top 10, the leader keeping its absolute value (tried, not adopted).

    A side's value is the keyword share ``K`` or ``max(cos, 0)``; its part is
    ``L * clip((x - T) / (L - T), 0, 1)``, ``L`` the side's best value for the
    query and ``T`` its 10th best (0 with fewer); the score is
    ``0.999 (w Kpart + (1 - w) Spart) + 0.001 (w K + (1 - w) cos)`` (the trace
    orders candidates outside both windows). Chosen on the tuning corpora
    over z-score fusion, min-max over 5, 10 or 20, reciprocal-rank fusion
    with and without confidence weights, and an agreement gate: it held
    the rule on all 23 tuning sets (worst 0.017 below). Held out, it fails:
    pages lexical 0.900 against keyword 0.967, crowded-steps lexical 0.758
    against 0.883 (docs/search.md). A lexical match whose words many items
    share has a low keyword leader ``L``, so the stretched semantic side outvotes it;
    ``tests/test_search.py::test_hybrid_keeps_the_exact_match_among_items_whose_best_part_comes_close``
    shows the same on a small tuning-side memory.
    """
    shares = {key: _vectors.keyword_share(bm25, scale) for key, bm25 in keyword.items()}
    near = {key: max(cosine, 0.0) for key, cosine in semantic.items()}
    k_lead, k_floor = _window(list(shares.values()), 10)
    s_lead, s_floor = _window(list(near.values()), 10)
    out = {}
    for key in dict.fromkeys([*keyword, *semantic]):
        share, cosine = shares.get(key, 0.0), near.get(key, 0.0)
        parts = w * _stretched(share, k_lead, k_floor) + (1.0 - w) * _stretched(
            cosine, s_lead, s_floor
        )
        out[key] = 0.999 * parts + 0.001 * (w * share + (1.0 - w) * cosine)
    return out


def zscore(
    keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float
) -> dict[int, float]:
    """Each side as a z-score over its own best 100 (spread at least 0.05), below 0 as 0 (tried on tuning only).

    The keyword side's best 100 shares are padded with 0 where fewer items
    match. On the tuning corpora it broke crowded paraphrased (0.033 against
    0.100) and mixed (0.200 against 0.308): on crowded steps the keyword
    leader stands about two spreads above its crowd, as the semantic answer
    does, so the heavier keyword weight wins.
    """
    shares = {key: _vectors.keyword_share(bm25, scale) for key, bm25 in keyword.items()}
    k_top = heapq.nlargest(100, shares.values())
    k_top += [0.0] * (100 - len(k_top))
    s_top = heapq.nlargest(100, semantic.values()) or [0.0]
    k_mean, k_spread = statistics.fmean(k_top), max(statistics.pstdev(k_top), 0.05)
    s_mean, s_spread = statistics.fmean(s_top), max(statistics.pstdev(s_top), 0.05)
    return {
        key: w * max((shares.get(key, 0.0) - k_mean) / k_spread, 0.0)
        + (1.0 - w) * max((semantic.get(key, 0.0) - s_mean) / s_spread, 0.0)
        for key in dict.fromkeys([*keyword, *semantic])
    }


def agree(
    keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float
) -> dict[int, float]:
    """The release blend where the two top 10s share an item, else :func:`window` (tried on tuning only).

    On the tuning corpora it broke crowded paraphrased (0.033 against 0.100)
    and mixed (0.242 against 0.308): on crowded steps the two sides often
    share an item of the crowd, so agreement does not tell a confident query.
    """
    first = set(top_n(keyword, 10)) & set(top_n(semantic, 10))
    return (current if first else window)(keyword, scale, semantic, w)


def pick(
    keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float
) -> dict[int, float]:
    """Per query, the side whose leader stands out more, the other side as a tiebreak (tried on tuning only).

    A side's stand-out is ``(L - T10) / (L - T100)``: its leader's lead over
    its 10th best, in units of its best 100's range (keyword shares padded
    with 0). On the tuning corpora it broke 11 of 23 sets (worst 0.142
    below): a hard choice loses every query where the other side was right.
    ``w`` is not used.
    """
    shares = {key: _vectors.keyword_share(bm25, scale) for key, bm25 in keyword.items()}
    near = {key: max(cosine, 0.0) for key, cosine in semantic.items()}

    def stand_out(values: list[float]) -> float:
        top = heapq.nlargest(100, values)
        top += [0.0] * (100 - len(top))
        return (top[0] - top[9]) / max(top[0] - top[99], 1e-9)

    first, second = (shares, near)
    if stand_out(list(shares.values())) < stand_out(list(semantic.values())):
        first, second = near, shares
    return {
        key: first.get(key, 0.0) + 0.001 * second.get(key, 0.0)
        for key in dict.fromkeys([*keyword, *semantic])
    }


def top_n(scores: dict[int, float], n: int) -> list[int]:
    """Return the ``n`` best keys, ties by key."""
    return [key for _, key in heapq.nsmallest(n, ((-v, key) for key, v in scores.items()))]


def _stand_out(
    keyword: dict[int, float],
    scale: float,
    semantic: dict[int, float],
    w: float,
    background: float,
) -> dict[int, float]:
    """``w max(k - background, 0) / (1 - background) + (1 - w) max(cos - c100, 0) / (1 - c100)`` for every candidate."""
    cut = heapq.nlargest(_vectors.SEMANTIC_REFERENCE, semantic.values()) if semantic else [0.0]
    c = min(max(cut[-1], 0.0), 1.0)
    out = {}
    for key in dict.fromkeys([*keyword, *semantic]):
        share = _vectors.keyword_share(keyword.get(key, 0.0), scale)
        lead = max(share - background, 0.0) / (1.0 - background)
        rise = max(semantic.get(key, 0.0) - c, 0.0) / (1.0 - c) if c < 1.0 else 0.0
        out[key] = w * lead + (1.0 - w) * rise
    return out


KEYWORD_CROWD = 0.8
KEYWORD_BACKGROUND = 5


def crowd(
    keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float
) -> dict[int, float]:
    """``standout`` only where the keyword side is a crowd, ``current`` elsewhere (tried, not adopted).

    A crowd: the query's second best BM25 is at least ``KEYWORD_CROWD`` (0.8)
    of its best, so no keyword hit leads. There each side counts by its
    stand-out over the query's own background, the keyword one being the
    share of the ``KEYWORD_BACKGROUND``-th (5th) best hit:
    ``w max(k - k5, 0) / (1 - k5) + (1 - w) max(cos - c100, 0) / (1 - c100)``.
    Chosen on the tuning corpora only (0.75 to 0.85 with the 5th hit hold all
    23 sets there, worst 0.017 below); on the held-out families it breaks
    pages lexical, 0.084 below keyword (docs/search.md, "Held-out corpora"):
    lexical queries over pages that share their words have no keyword
    leader either, so the gate fires where keyword search is right.
    """
    if not 0.0 < w < 1.0 or len(keyword) < 2:
        return current(keyword, scale, semantic, w)
    best = heapq.nlargest(KEYWORD_BACKGROUND, keyword.values())
    if best[0] <= 0.0 or best[1] < KEYWORD_CROWD * best[0]:
        return current(keyword, scale, semantic, w)
    background = 0.0
    if len(best) == KEYWORD_BACKGROUND:
        background = _vectors.keyword_share(best[-1], scale)
    return _stand_out(keyword, scale, semantic, w, background)


def proximity(
    keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float, near: Near
) -> dict[int, float]:
    """The release blend where some keyword hit holds the query's words together, else each side's stand-out (tried; holds every set, not yet the default).

    Evidence from outside the scores: ``near`` gives, for the query's best
    ``PROXIMITY_TOP`` (100) keyword hits, the share of the query's IDF weight
    that the hit's best window of ``PROXIMITY_WINDOW`` (8) consecutive terms
    of one field holds (:func:`near_shares`). Where the best hit's share is at
    least ``PROXIMITY_GATE`` (0.9), a real lexical match exists and
    :func:`current` ranks. Elsewhere every keyword hit holds the query's
    words scattered (over two notes of a step, a page's sentences) or only
    some of them, and each side counts by its stand-out over the query's own
    background, as :func:`crowd` does there (the 5th keyword hit's share, the
    100th cosine). Unlike the BM25 crowd, proximity tells a true lexical
    match among many items sharing its words (pages lexical, crowded
    lexical: gate closed) from a scattered one (crowded mixed: gate open).

    Chosen on the tuning corpora only: gates 0.8, 0.9 and 0.99 over windows
    of 8 hold all 23 tuning sets (worst 0.017 below, as the release blend
    outside crowded); discounting each hit's keyword share by its own window
    share (``keyword_share(bm25 * p ** a)``, windows of 4 to 16, fields, parts
    of 8 words; with and without lifting the semantic discount) did not mend
    crowded paraphrased and mixed (0.067 to 0.158 against 0.100 / 0.308).
    ``tests/test_search.py``'s hybrid tests passed with it in ``Memory.search``.
    Held out, run once (3,000 items, 120 facts, median of seeds 1 to 3): it
    holds every set, worst shortfall 0.000 against the release blend's 0.058;
    crowded-steps mixed 0.100 (semantic 0.100, release 0.042); every other
    set as the release blend but agent-steps mixed 0.425 (release 0.433,
    keyword 0.383). docs/search.md, "Held-out corpora", has both tables.
    On the small sets of ``tests/test_search_heldout.py`` (30 facts) its three
    strict expected failures stay (crowded-steps mixed 0.233 against the
    current 0.200 and semantic 0.333; the rest as the current blend).
    Not the default: the stores must compute the same evidence, and in a
    scratch ``Memory.search`` it cost 1.29x to 1.57x a hybrid query (only hits
    whose matched terms hold 0.9 of the query's weight tokenized, the walk
    stopping at the first hit reaching the gate; 2.3x to 2.6x without).
    """
    if not 0.0 < w < 1.0 or len(keyword) < 2 or max(near.values(), default=1.0) >= PROXIMITY_GATE:
        return current(keyword, scale, semantic, w)
    best = heapq.nlargest(KEYWORD_BACKGROUND, keyword.values())
    background = 0.0
    if len(best) == KEYWORD_BACKGROUND:
        background = _vectors.keyword_share(best[-1], scale)
    return _stand_out(keyword, scale, semantic, w, background)


NEAR_RULES: dict[str, NearRule] = {"proximity": proximity}


def near_kept(gate: float, fallback: str) -> ProxRule:
    """The default blend (:func:`kept`) where some keyword hit holds the query's words together, else a fallback (``nearkept...``).

    ``p`` is the best :func:`near_shares` among the query's best
    ``PROXIMITY_TOP`` keyword hits (1.0 without hits). Where ``p >= gate`` the
    default blend ranks as it does (``p`` is read over windows of
    ``--window`` terms, 8 by default). Elsewhere, ``fallback``: ``standout``
    ranks by each side's stand-out (as :func:`proximity`); ``cover`` ranks by
    the default blend with ``min(q, p)`` as its coverage (the keyword weight
    ``w min(q, p)**8``, no rank protection below 1); ``quoted`` by each
    side's stand-out with the keyword weight ``w q**8`` (the library's
    ``blend`` with ``together=False``, ``_vectors.stand_out``).

    Adopted as the library's blend (p40): ``nkq0.9`` with ``--window 5``,
    chosen on the tuning corpora (every set holds on every seed of 1 to 3,
    worst 0.017; with 8 terms crowded broke on 2 seeds, the blend before on
    3); held out every set holds on every seed (worst 0.008, the blend
    before 0.033 and 2 broken). docs/search.md, "Proximity over the default
    blend".
    """

    def rule(
        keyword: dict[int, float],
        scale: float,
        semantic: dict[int, float],
        w: float,
        cover: Cover,
        near: Near,
    ) -> dict[int, float]:
        p = max(near.values(), default=1.0)
        if p >= gate or not 0.0 < w < 1.0:
            return kept(keyword, scale, semantic, w, cover)
        if fallback == "cover":
            return kept(keyword, scale, semantic, w, min(cover, p))
        if fallback == "quoted":
            return _vectors.blend(keyword, scale, semantic, w, cover, together=False)
        if len(keyword) < 2:
            return kept(keyword, scale, semantic, w, cover)
        return proximity(keyword, scale, semantic, w, near)

    return rule


PROX_RULES: dict[str, ProxRule] = {
    f"nk{fallback[0]}{gate}": near_kept(gate, fallback)
    for fallback in ("standout", "cover", "quoted")
    for gate in (0.8, 0.9, 0.99, 1.0)
}
"""The default blend with proximity evidence (:data:`Near`) as well as :data:`Cover`, by name: ``nks0.9`` falls back to stand-out, ``nkc0.9`` to the blend with ``min(q, p)`` as coverage, ``nkq0.9`` to stand-out with the keyword weight ``w q**8``."""


def coverage(
    keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float, cover: Cover
) -> dict[int, float]:
    """The release blend with the keyword share ``w * q**8`` and the semantic one ``1 - w * q**8`` (the default from c37 to s38; :func:`kept` adds rank protection).

    ``q`` is the query's coverage (``SearchIndex.coverage`` of its keyword
    leader, :data:`Cover`): the share of the IDF of its distinct known
    terms that its best keyword hit (ties to the oldest item) holds. A
    lexical query's leader holds every word (``q = 1``: the release blend);
    where the leader misses some of the query's words, the keyword side is a
    partial match and the semantic side takes over its weight.

    Chosen on the tuning corpora only (3,000 items, 120 facts, median of
    seeds 1 to 3), over: the keyword weight times ``q**p`` with the semantic
    weight kept or given what the keyword side loses, ``p`` from 1 to 32; a
    hard gate at ``q >= 0.95`` or 0.99; ``q`` the best of the top 1, 3, 5 or 10
    hits; terms no item holds counted at 0.05 to 1 of their IDF. Counting
    unknown terms breaks the lexical question sets (a question's own words,
    "what", "about", are unknown: the fact's coverage falls to 0.37), so they
    are left out. From ``p = 8`` on, and with either gate, every variant
    reaches the same worst: crowded mixed 0.283 against semantic 0.308 (release
    0.158), 0.025 below, the only tuning set broken; crowded paraphrased
    0.083 against 0.100 (release 0.017). On 44 of crowded mixed's 120
    queries (seed 1) the leader holds every word of the query, scattered
    over an item of the crowd, so coverage cannot tell it from a real match.

    Run once on the held-out families (``--corpora held-out``): it holds
    every set, worst crowded-steps mixed 0.083 against semantic 0.100 (release
    0.042), and equals the release blend on the other 11 sets (lexical ones
    included: a true lexical leader covers the whole query). Worst shortfall:
    tuning 0.025 (release 0.150), held-out 0.017 (release 0.058); never below
    the release blend on any of the 35 sets. Adopted as the default
    (``agents.memory._vectors.blend`` with ``coverage``), though it breaks
    one tuning set by 0.025 (the release blend broke it by 0.150). In RAM it
    costs about 4 ms of a 53 to 64 ms hybrid query over 3,000 items at load
    14 (finding the leader among every keyword hit and one postings lookup
    a query term); docs/search.md, "Held-out corpora".
    """
    w = w * min(max(cover, 0.0), 1.0) ** _vectors.COVERAGE_POWER
    rest = (1.0 - w) * _vectors.semantic_discount(semantic)
    return {
        key: w * _vectors.keyword_share(keyword.get(key, 0.0), scale)
        + rest * max(semantic.get(key, 0.0), 0.0)
        for key in dict.fromkeys([*keyword, *semantic])
    }


def _first(scores: dict[int, float], kept: set[int]) -> dict[int, float]:
    """Return ``scores`` with the ``kept`` keys lifted above every other key, in their own order (as ``blend`` lifts them)."""
    if not kept:
        return scores
    others = max((score for key, score in scores.items() if key not in kept), default=0.0)
    if min(scores[key] for key in kept) > others:
        return scores
    return {
        key: others + (1.0 - others) * max(score, 1e-9) if key in kept else score
        for key, score in scores.items()
    }


def _shared(keyword: dict[int, float], semantic: dict[int, float], n: int) -> set[int]:
    """Return the keys both sides rank among their best ``n`` (ties to the smaller key)."""
    return set(top_n(keyword, n)) & set(top_n(semantic, n))


def _standing_leader(keyword: dict[int, float], cover: Cover, lead: float) -> set[int]:
    """Return the keyword leader when it holds every query word and the runner-up's BM25 is at most ``lead`` of its own."""
    best = heapq.nlargest(2, keyword.values())
    if not best or cover < 1.0 or (len(best) == 2 and best[1] > lead * best[0]):
        return set()
    leader = _vectors.keyword_leader(keyword)
    return set() if leader is None else {leader}


def kept(
    keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float, cover: Cover
) -> dict[int, float]:
    """The coverage blend, with the items both sides rank among their best 5 and a standing-out keyword leader ranked first (``_vectors.kept_first``).

    The library's ``blend`` since issue 34 (s38); this is ``_vectors.blend``
    itself, :func:`coverage` being the blend before it. Only where the
    leader holds every query word (``q = 1``). Chosen on the tuning corpora
    (docs/search.md, "Rank protection"), which show neither failure it
    mends: each constant is the most permissive that costs no tuning set
    (``shared10`` lost 27 crowded facts, ``leader0.9`` one small-set one).
    Every tuning set at 3,000 items (seeds 1 to 5, crowded 1 to 10) and at
    the test sets' size (150 items, crowded 600, 30 facts, seeds 1 to 5,
    crowded 1 to 10) as :func:`coverage` by the median; over all their facts
    it won 0 and lost 1 (short-steps lexical, seed 1). Held out, run once
    (3,000 items, seeds 1 to 6): the same answer as :func:`coverage` on every
    query. On the small held-out test sets it mends pages mixed (0.900
    against semantic 0.867) and one of crowded-steps lexical's two misses.
    """
    return _vectors.blend(keyword, scale, semantic, w, cover)


def shared(n: int) -> CoverRule:
    """The coverage blend with the items both sides rank among their best ``n`` ranked first, where the leader holds every query word (``shared3``, ``shared5``, ``shared10``)."""

    def rule(
        keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float, cover: Cover
    ) -> dict[int, float]:
        kept = _shared(keyword, semantic, n) if cover >= 1.0 else set()
        return _first(coverage(keyword, scale, semantic, w, cover), kept)

    return rule


def leader(lead: float) -> CoverRule:
    """The coverage blend with a keyword leader holding every query word ranked first when the runner-up's BM25 is at most ``lead`` of its own (``leader0.7`` .. ``leader0.9``)."""

    def rule(
        keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float, cover: Cover
    ) -> dict[int, float]:
        scores = coverage(keyword, scale, semantic, w, cover)
        return _first(scores, _standing_leader(keyword, cover, lead))

    return rule


def group(drop: float, size: int) -> CoverRule:
    """The coverage blend with the keyword hits above the first drop ranked first (``group0.7``, ``group0.7x3``; tried, not adopted).

    The best ``size`` or fewer keyword hits, cut where the next hit's BM25 is
    at most ``drop`` of the last one's, when the leader holds every query
    word. With up to 5 hits it lost 27 facts and won 5 on the small tuning
    sets (paraphrased queries whose leader holds every known word of the
    query: a group of partial matches pushed the semantic answer out); up to
    3 hits: 1 won, 1 lost.
    """

    def rule(
        keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float, cover: Cover
    ) -> dict[int, float]:
        scores = coverage(keyword, scale, semantic, w, cover)
        if cover < 1.0 or not keyword:
            return scores
        best = top_n(keyword, size + 1)
        values = [keyword[key] for key in best]
        for cut in range(1, min(size, len(best)) + 1):
            if cut == len(values) or values[cut] <= drop * values[cut - 1]:
                return _first(scores, set(best[:cut]))
        return scores

    return rule


def fused(share: float, c: int = 60) -> CoverRule:
    """The coverage blend mixed with reciprocal-rank fusion: ``(1 - s) blend + s (1/(c + rk) + 1/(c + rs)) (c + 1) / 2`` (``fused0.1``, ``fused0.2``; tried, not adopted).

    ``rk``, ``rs``: the item's rank on each side (absent: no term). At 3,000
    items (seeds 1 to 3) it broke thought paraphrased (0.833 and 0.800
    against semantic 0.883) and crowded paraphrased, and lost 0.01 to 0.03 on
    crowded lexical; pure rank fusion weighted by the coverage
    (``w q^8 / (60 + rk) + (1 - w q^8) / (60 + rs)``) fell to 0.44 on thought
    paraphrased.
    """

    def rule(
        keyword: dict[int, float], scale: float, semantic: dict[int, float], w: float, cover: Cover
    ) -> dict[int, float]:
        scores = coverage(keyword, scale, semantic, w, cover)
        k_rank = {key: at for at, key in enumerate(top_n(keyword, 200), 1)}
        s_rank = {key: at for at, key in enumerate(top_n(semantic, 200), 1)}
        out = {}
        for key, score in scores.items():
            rrf = (1.0 / (c + k_rank[key]) if key in k_rank else 0.0) + (
                1.0 / (c + s_rank[key]) if key in s_rank else 0.0
            )
            out[key] = (1.0 - share) * score + share * rrf * (c + 1) / 2.0
        return out

    return rule


COVER_RULES: dict[str, CoverRule] = {
    "coverage": coverage,
    "kept": kept,
    "shared3": shared(3),
    "shared5": shared(5),
    "shared10": shared(10),
    "leader0.7": leader(0.7),
    "leader0.8": leader(0.8),
    "leader0.9": leader(0.9),
    "group0.7": group(0.7, 5),
    "group0.7x3": group(0.7, 3),
    "fused0.1": fused(0.1),
    "fused0.2": fused(0.2),
}
"""Rules that also read what the query's words cover (:data:`Cover`), by name."""


RULES: dict[str, Rule] = {
    "current": current,
    "standout": standout,
    "crowd": crowd,
    "window": window,
    "zscore": zscore,
    "agree": agree,
    "pick": pick,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--items", type=int, default=3000)
    parser.add_argument("--facts", type=int, default=120)
    parser.add_argument(
        "--rules", default="current,proximity,coverage,kept,shared5,leader0.8,standout,crowd"
    )
    parser.add_argument("--corpora", default="tuning,held-out")
    parser.add_argument(
        "--window", type=int, default=PROXIMITY_WINDOW, help="proximity window, terms"
    )
    parser.add_argument("--cache", default=os.environ.get("BLEND_CACHE", "/tmp/bench_blend"))
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    names: list[str] = []
    for name in args.corpora.split(","):
        if name == "tuning":
            names += [*TUNING_KEYWORD, *TUNING_RULE]
        elif name == "held-out":
            names += list(heldout.FAMILIES)
        else:
            names.append(name)
    rules = (
        [*RULES, *NEAR_RULES, *COVER_RULES, *PROX_RULES]
        if args.rules == "all"
        else args.rules.split(",")
    )
    started = time.perf_counter()
    print(f"== blends: recall@5, {args.items} items, {args.facts} facts, seeds {seeds}; {load()}")
    print(
        f"{'corpus':<24}{'queries':<22}{'keyword':>9}{'semantic':>9}"
        + "".join(f"{r:>12}" for r in rules)
    )
    worst = dict.fromkeys(rules, -math.inf)
    worst_seed = dict.fromkeys(rules, -math.inf)
    breaks = dict.fromkeys(rules, 0)
    for name in names:
        data = [collect_all(name, args.items, args.facts, seed, Path(args.cache)) for seed in seeds]
        near: list[dict[str, list[Near]]] = [{} for _ in seeds]
        if any(rule in NEAR_RULES or rule in PROX_RULES for rule in rules):
            near = [
                collect_near(name, args.items, args.facts, seed, Path(args.cache), args.window)
                for seed in seeds
            ]
        windows: list[dict[str, list[dict[int, float]]]] = [{} for _ in seeds]
        if any(rule.startswith("windowed") for rule in rules):
            windows = [
                collect_windows(name, args.items, args.facts, seed, Path(args.cache), queries)
                for seed, (queries, _) in zip(seeds, data, strict=True)
            ]
        tag = "held-out " if name in heldout.FAMILIES else "tuning "
        for kind in data[0][0]:
            per_rule = {}
            for rule in rules:
                got = [
                    recalls(
                        queries[kind],
                        rule,
                        seed_near.get(kind, []),
                        cover[kind],
                        seed_windows.get(kind),
                    )
                    for (queries, cover), seed_near, seed_windows in zip(
                        data, near, windows, strict=True
                    )
                ]
                per_rule[rule] = {mode: statistics.median(g[mode] for g in got) for mode in MODES}
                for g in got:
                    seed_gap = max(g["keyword"], g["semantic"]) - g["hybrid"]
                    worst_seed[rule] = max(worst_seed[rule], seed_gap)
                    breaks[rule] += seed_gap > 0.02 + 1e-9
            base = per_rule[rules[0]]
            better = max(base["keyword"], base["semantic"])
            cells = ""
            for rule in rules:
                gap = per_rule[rule]["hybrid"] - better
                worst[rule] = max(worst[rule], -gap)
                cells += f"{per_rule[rule]['hybrid']:>11.3f}{'!' if gap < -0.02 - 1e-9 else ' '}"
            print(
                f"{tag + name:<24}{kind:<22}{base['keyword']:>9.3f}{base['semantic']:>9.3f}{cells}",
                flush=True,
            )
    print(
        "worst shortfall below the better of keyword and semantic: "
        + ", ".join(f"{r} {worst[r]:+.3f}" for r in rules)
    )
    print(
        "worst one seed's shortfall (sets x seeds broken): "
        + ", ".join(f"{r} {worst_seed[r]:+.3f} ({breaks[r]})" for r in rules)
    )
    print(
        f"! marks a hybrid more than 0.02 below; done in {time.perf_counter() - started:.0f} s; {load()}"
    )


if __name__ == "__main__":
    main()
