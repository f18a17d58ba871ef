"""Search quality on held-out corpora (benchmarks/corpora_heldout.py): the hybrid rule, in RAM and every store.

The rule: on every held-out set, hybrid recall@5 is never more than 0.02
below the better of keyword and semantic search. The corpora here are small
(a few seconds a family); benchmarks/bench_heldout.py runs the large ones.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from agents.memory import Memory, MemoryItem
from agents.memory.search import WordLlamaEmbedder
from agents.memory.stores import open_store

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ("agent-steps", "chat", "pages", "crowded-steps")
MODES = ("keyword", "semantic", "hybrid")
N_ITEMS = 150
N_FACTS = 30
# The crowded family needs more items than SEMANTIC_REFERENCE (100) close to a query for its
# crowd to show: at 150 items the 100th best cosine is the background of the whole memory.
N_CROWDED_ITEMS = 600


def _benchmark(name: str) -> Any:
    path = ROOT / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


HELDOUT = _benchmark("corpora_heldout")
PAIRED = _benchmark("_paired")


@functools.cache
def _embedder() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


@functools.cache
def _corpus(family: str) -> Any:
    n_items = N_CROWDED_ITEMS if family == "crowded-steps" else N_ITEMS
    return HELDOUT.make_family(family, n_items, N_FACTS, seed=1)


Ranked = dict[tuple[str, str], list[list[tuple[int, float]]]]


@functools.cache
def _ram_ranked(family: str) -> Ranked:
    """Return each (mode, kind)'s ranked ``(item, score)`` lists in RAM, one per fact."""
    corpus = _corpus(family)
    memory = Memory([MemoryItem(**row) for row in corpus.items])
    memory.index_embeddings(_embedder())
    return {
        (mode, kind): [
            [(hit.item["item"], hit.score) for hit in memory.search(query, 5, mode=mode)]
            for query, _ in corpus.queries(kind)
        ]
        for mode in MODES
        for kind in HELDOUT.KINDS
    }


def _recall(ranked: list[list[tuple[int, float]]], answers: list[int]) -> float:
    found = [
        answer in [item for item, _ in hits] for hits, answer in zip(ranked, answers, strict=True)
    ]
    return sum(found) / len(answers)


def _rule_breaks(family: str, ranked: Ranked) -> list[str]:
    """Return the query kinds where the hybrid is more than 0.02 below the better mode, with the figures."""
    corpus = _corpus(family)
    out = []
    for kind in HELDOUT.KINDS:
        answers = [item for _, item in corpus.queries(kind)]
        recall = {mode: _recall(ranked[mode, kind], answers) for mode in MODES}
        if recall["hybrid"] < max(recall["keyword"], recall["semantic"]) - 0.02:
            out.append(f"{family}/{kind}: {recall}")
    return out


# The breaks left with this release's blend (the coverage rule with rank protection) and BM25+
# (docs/search.md, "Held-out corpora"), on the small sets, each one fact of 30. strict: each
# test fails once its break is gone, so the docs are kept true. agent-steps mixed: the fact is
# 4th of six keyword hits within 0.3 BM25 of each other, and semantic search misses it.
AGENT_STEPS_BREAK = pytest.mark.xfail(
    strict=True, reason="agent-steps/mixed: hybrid 0.967 against keyword 1.000 (30 facts)"
)
# The crowd of ledger entries (600 items, 30 facts): with the coverage rule a partial keyword
# match no longer decides paraphrased and mixed queries; a keyword leader standing out is kept
# first, so lexical queries lose 1 fact of 30 (keyword 2nd, BM25 6.47 against the leader's 6.53).
CROWDED_BREAK = pytest.mark.xfail(
    strict=True, reason="crowded-steps/lexical: hybrid 0.967 against keyword 1.000 (30 facts)"
)


@pytest.mark.parametrize(
    "family",
    [
        pytest.param("agent-steps", marks=AGENT_STEPS_BREAK),
        "chat",
        "pages",
        pytest.param("crowded-steps", marks=CROWDED_BREAK),
    ],
)
def test_hybrid_holds_the_rule_on_a_heldout_family_in_ram(family: str) -> None:
    """On each held-out family and query kind, hybrid recall@5 is within 0.02 of the better of keyword and semantic."""
    assert _rule_breaks(family, _ram_ranked(family)) == []


@pytest.mark.parametrize("family", FAMILIES)
def test_store_ranks_a_heldout_family_as_memory_search_does(store_url: str, family: str) -> None:
    """Every store gives Memory.search's hits and scores on a held-out family in each mode, so the rule holds (or breaks) alike."""
    corpus = _corpus(family)
    embedder = _embedder()
    with open_store(store_url) as store:
        session = f"s{uuid.uuid4().hex[:8]}"
        store.append(session, [MemoryItem(**row) for row in corpus.items])
        store.index_embeddings(session, embedder)
        got: Ranked = {
            (mode, kind): [
                [
                    (hit.item["item"], hit.score)
                    for hit in store.search(session, query, 5, mode=mode, embedder=embedder)
                ]
                for query, _ in corpus.queries(kind)
            ]
            for mode in MODES
            for kind in HELDOUT.KINDS
        }
    ram = _ram_ranked(family)
    assert got == ram
    assert _rule_breaks(family, got) == _rule_breaks(family, ram)


# How the keyword bullet is judged (benchmarks/_paired.py): the mean gap to the best peer over
# five seeds, and a sign test on the facts one engine finds and the other misses.


def test_sign_test_finds_eight_facts_lost_and_none_won_significant() -> None:
    """Eight facts lost and none won give the two-sided p of a fair coin landing one way eight times."""
    assert PAIRED.sign_test(0, 8) == pytest.approx(2 / 2**8)


def test_sign_test_of_an_even_split_is_one() -> None:
    """An even split of the differing facts, or none differing, gives p = 1."""
    assert (PAIRED.sign_test(13, 13), PAIRED.sign_test(0, 0)) == (1.0, 1.0)


def test_verdict_calls_a_gap_over_the_target_with_an_even_split_seed_noise() -> None:
    """A mean gap over 0.01 whose facts split 22 won to 29 lost (p 0.40) is seed noise."""
    assert PAIRED.verdict(0.013, 22, 29) == "behind, seed noise"


def test_verdict_calls_a_gap_over_the_target_with_a_lopsided_split_significant() -> None:
    """A mean gap over 0.01 with 0 facts won and 12 lost (p < 0.001) is behind, significant."""
    assert PAIRED.verdict(0.012, 0, 12) == "behind, significant"


def test_verdict_calls_a_gap_at_the_target_within_and_says_when_it_loses_significantly() -> None:
    """A mean gap of exactly 0.01 meets the target; a lopsided split is named beside it."""
    assert (PAIRED.verdict(0.010, 3, 4), PAIRED.verdict(0.010, 0, 8)) == (
        "within 0.01",
        "within 0.01, loses significantly",
    )
