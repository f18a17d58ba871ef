"""Search quality on held-out corpora (benchmarks/corpora_heldout.py): the hybrid rule, in RAM and every store.

The rule: on every held-out set, hybrid recall@5 is never more than 0.02
below the better of keyword and semantic search. benchmarks/bench_heldout.py
judges it on 3,000 items and 120 facts a set, median of seeds 1-3.

The resolution here follows from the rule, chosen before the sets were run:

- Facts: 120 a family, seed 1. One fact is then 0.008 of recall, two
  0.017 (within the rule), three 0.025 (a break): the rule's 0.02 is
  resolved as the benchmark resolves it on each of its seeds. At the old 30
  facts one fact was 0.033, so a single miss broke a rule that allows 0.02.
  A median over seeds does not help: with 40 facts a seed every seed's
  recall is a multiple of 0.025, and so is their median, so one fact would
  still break it. 51 facts is the least at which one fact is below 0.02;
  120 matches the benchmark's per-seed count at little more cost in RAM.
- Items: 1,200 a family (one item in ten holds a fact; the benchmark one
  in 25, the old sets one in five), so the filler that echoes the facts'
  words (each filler sentence picks any subject or relation) still
  outnumbers the facts; crowded-steps 2,400 (``N_CROWDED_ITEMS``), one fact
  in twenty items as before. The 3,000 items of the benchmark would cost
  about 2.7x these in RAM (pages most), bringing the file to the 2x limit.
- Time: the rule in RAM takes about 15 s for the four families at a load
  of 4 on two cores; the file as a whole took 1.4x the CPU time of the old
  sets (34 s against 25 s, the same load), under the 2x it may take.

The store-equals-RAM test keeps the old small sets (``STORE_ITEMS``): the
``memory://`` and JSONL stores keep no keyword index and tokenize every
item a query (about 39 ms a query at 600 items, against 0.4 ms in RAM), so
the 1,080 queries of a 600-item, 120-fact family took 38-42 s in each of
them, and the test checks hits and scores equal, which does not depend on
the sets' resolution.
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
N_ITEMS = 1200
N_FACTS = 120
# The crowded family needs more items than SEMANTIC_REFERENCE (100) close to a query for its
# crowd to show: at 150 items the 100th best cosine is the background of the whole memory; from
# 600 the crowd shows. 2,400 keeps one fact in twenty items, as the 600 items of 30 facts did.
N_CROWDED_ITEMS = 2400
# The sets every store ranks (its test checks hits and scores equal to Memory.search's; see the
# module docstring for why not the sets above).
STORE_ITEMS = 150
STORE_FACTS = 30
STORE_CROWDED_ITEMS = 600


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
def _corpus(family: str, small: bool = False) -> Any:
    """Return the family's rule set, or with ``small`` the set every store ranks."""
    if small:
        n_items = STORE_CROWDED_ITEMS if family == "crowded-steps" else STORE_ITEMS
        return HELDOUT.make_family(family, n_items, STORE_FACTS, seed=1)
    n_items = N_CROWDED_ITEMS if family == "crowded-steps" else N_ITEMS
    return HELDOUT.make_family(family, n_items, N_FACTS, seed=1)


Ranked = dict[tuple[str, str], list[list[tuple[int, float]]]]


@functools.cache
def _ram_ranked(family: str, small: bool = False) -> Ranked:
    """Return each (mode, kind)'s ranked ``(item, score)`` lists in RAM, one per fact."""
    corpus = _corpus(family, small)
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


# crowded-steps mixed, seed 1, 2,400 items, broke under the coverage blend with rank protection
# alone (hybrid 0.108 against semantic 0.142): the keyword leader was a crowd item holding every
# query word scattered over its ledger entries. Since the blend reads whether one of the best 100
# keyword hits holds the query's words within 5 terms of one field (docs/search.md, "Proximity
# over the default blend"), it gives 0.142 there.


@pytest.mark.parametrize(
    "family",
    [
        "agent-steps",
        "chat",
        "pages",
        "crowded-steps",
    ],
)
def test_hybrid_holds_the_rule_on_a_heldout_family_in_ram(family: str) -> None:
    """On each held-out family and query kind, hybrid recall@5 is within 0.02 of the better of keyword and semantic."""
    assert _rule_breaks(family, _ram_ranked(family)) == []


@pytest.mark.parametrize("family", FAMILIES)
def test_store_ranks_a_heldout_family_as_memory_search_does(store_url: str, family: str) -> None:
    """Every store gives Memory.search's hits and scores on a small held-out set of a family in each mode and query kind."""
    corpus = _corpus(family, small=True)
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
    assert got == _ram_ranked(family, small=True)


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
