"""Keyword ranking: Lucene's BM25, exactly as a plain model computes it, whatever path the index takes."""

from __future__ import annotations

import math
import random
import re
import sys
import unicodedata
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.memory import Memory, MemoryItem
from agents.memory.search import Tokenizer, search_index

WORDS = [f"w{n}" for n in range(30)]
# Zipf-like: the first words are held by most items, the last by a few.
WEIGHTS = [1.0 / (rank + 1) ** 0.8 for rank in range(len(WORDS))]
KEY_SETS: list[tuple[str, ...] | None] = [None, ("thought",), ("note",), ("thought", "note")]


def model_top(
    memory: Memory, query: str, k: int, keys: tuple[str, ...] | None, kind: str | None
) -> list[tuple[int, float]]:
    """Return ``(step, score)`` of the best ``k``: plain BM25+ with Lucene's IDF floored at 0.15 of the rarest word's, over every item, k1=1.2, b=0.75, delta=1."""
    tokenize = Tokenizer()
    items = list(memory)
    counts = []
    for item in items:
        terms: list[str] = []
        for field, value in item.to_dict().items():
            if (keys is None or field in keys) and isinstance(value, str):
                terms += tokenize(value)
        counts.append((Counter(terms), len(terms)))
    n = len(items)
    total = sum(length for _, length in counts)
    average = total / n if total else 1.0
    words = tokenize(query)
    df = {word: sum(1 for tf, _ in counts if tf[word]) for word in words}
    scored = []
    for position, (item, (tf, length)) in enumerate(zip(items, counts, strict=True)):
        score = 0.0
        held = False
        for word in words:  # query order, repeats counted
            if tf[word]:
                # Lucene's IDF, floored at 0.15 of the IDF of a word one item holds.
                idf = max(
                    math.log1p((n - df[word] + 0.5) / (df[word] + 0.5)),
                    0.15 * math.log1p((n - 0.5) / 1.5),
                )
                # BM25+ with delta 1, over 1 + delta: (k1 + 1) / 2 and delta / (k1 + 1).
                score += (
                    idf
                    * ((1.2 + 1.0) / (1.0 + 1.0))
                    * (
                        tf[word] / (tf[word] + 1.2 * (1.0 - 0.75) + 1.2 * 0.75 / average * length)
                        + 1.0 / (1.2 + 1.0)
                    )
                )
                held = True
        if held and (kind is None or item["kind"] == kind):
            scored.append((-score, position, item["step"], score))
    scored.sort()
    return [(step, score) for _, _, step, score in scored[:k]]


def random_item(rng: random.Random, step: int) -> MemoryItem:
    thought = " ".join(rng.choices(WORDS, WEIGHTS, k=rng.randrange(13)))
    if rng.random() < 0.02:  # a word many times: counts past the ones kept apart
        thought = " ".join([rng.choice(WORDS[:3])] * rng.randrange(40, 70))
    fields: dict[str, Any] = {"step": step, "thought": thought, "kind": rng.choice("abc")}
    if rng.random() < 0.7:
        fields["note"] = " ".join(rng.choices(WORDS, WEIGHTS, k=rng.randrange(5)))
    return MemoryItem(**fields)


queries = st.tuples(
    st.lists(st.sampled_from([*WORDS[:8], *WORDS[-4:], "absent"]), min_size=1, max_size=4),
    st.integers(1, 12),
    st.sampled_from(KEY_SETS),
    st.sampled_from([None, "a"]),
)
changes = st.lists(
    st.tuples(st.sampled_from(["add", "delete", "update", "query"]), st.integers(0, 10**6)),
    max_size=8,
)


def assert_ranks_as_model(memory: Memory, query: tuple[list[str], int, Any, Any]) -> None:
    words, k, keys, kind = query
    text = " ".join(words)
    where = None if kind is None else {"kind": kind}
    hits = memory.search(text, k, keys=keys, where=where)
    assert [(hit.item["step"], hit.score) for hit in hits] == model_top(memory, text, k, keys, kind)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    size=st.sampled_from([0, 5, 60, 400, 900]),
    ops=changes,
    asked=st.lists(queries, min_size=1, max_size=4),
)
def test_keyword_top_k_and_scores_equal_plain_bm25_through_changes(
    seed: int, size: int, ops: list[tuple[str, int]], asked: list[Any]
) -> None:
    """Top k and scores equal a plain exhaustive BM25 after adds, deletes and updates, with keys and where."""
    rng = random.Random(seed)
    memory = Memory(random_item(rng, step) for step in range(size))
    step = size
    for query in asked:
        assert_ranks_as_model(memory, query)
    for op, arg in ops:
        if op == "add":
            memory.add_memory_items([random_item(rng, step + i) for i in range(1 + arg % 300)])
            step += 300
        elif op == "delete" and memory:
            for _ in range(1 + arg % 40):
                if memory:
                    memory.delete_memory_item(memory[rng.randrange(len(memory))]["step"])
        elif op == "update" and memory:
            for _ in range(1 + arg % 40):
                item = memory[rng.randrange(len(memory))]
                item["thought"] = random_item(rng, 0)["thought"]
        else:
            assert_ranks_as_model(memory, asked[arg % len(asked)])
    for query in asked:
        assert_ranks_as_model(memory, query)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32), asked=st.lists(queries, min_size=1, max_size=4))
def test_keyword_ranking_without_numpy_equals_plain_bm25(seed: int, asked: list[Any]) -> None:
    """Without numpy every item holding a term is scored, giving the same hits and floats."""
    rng = random.Random(seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "numpy", None)  # as where the optional extra is missing
        memory = Memory(random_item(rng, step) for step in range(500))
        for query in asked:
            assert_ranks_as_model(memory, query)
        memory.add_memory_items([random_item(rng, 500 + i) for i in range(50)])
        memory.delete_memory_item(3)
        for query in asked:
            assert_ranks_as_model(memory, query)


def test_a_word_in_most_items_still_ranks_them() -> None:
    """A query word held by most items still orders them (Lucene's IDF stays above zero, FTS5's did not)."""
    memory = Memory(
        [MemoryItem(step=0, thought="is it open")]
        + [MemoryItem(step=i, thought="the file is open") for i in range(1, 8)]
        + [MemoryItem(step=8, thought="open it")]
    )
    hits = memory.search("is open", k=3)
    assert [hit.item["step"] for hit in hits] == [0, 1, 2]
    assert hits[0].score > hits[1].score > memory.search("open", k=1)[0].score / 2


def test_a_rarer_word_outweighs_a_commoner_one() -> None:
    """Between items of equal length holding one query word once, the one with the rarer word ranks first."""
    memory = Memory(
        [MemoryItem(step=i, thought="common filler") for i in range(6)]
        + [MemoryItem(step=6, thought="rare filler"), MemoryItem(step=7, thought="common words")]
    )
    hits = memory.search("rare common", k=2)
    assert [hit.item["step"] for hit in hits] == [6, 0]  # then the first of the ties


@pytest.mark.parametrize(("k", "size"), [(1, 1500), (5, 1500), (2000, 1500), (5, 5000)])
def test_ranking_after_changes_to_a_queried_memory_equals_plain_bm25(k: int, size: int) -> None:
    """Items deleted, changed and added after queries over large postings rank as a plain BM25 says."""
    rng = random.Random(k)
    memory = Memory(random_item(rng, step) for step in range(size))
    asked = [
        ([*words], k, keys, kind)
        for words in (
            ["w0"],
            ["w1", "w5"],
            ["w0", "w2", "w29"],
            ["w3", "w3", "w0"],
            ["w12", "w15", "w0"],
        )
        for keys in (None, ("thought",))
        for kind in (None, "b")
    ]
    for query in asked:
        assert_ranks_as_model(memory, query)
    for round_ in range(3):
        for _ in range(30):
            memory.delete_memory_item(memory[rng.randrange(len(memory))]["step"])
            memory[rng.randrange(len(memory))]["thought"] = random_item(rng, 0)["thought"]
        memory.add_memory_items([random_item(rng, 10_000 * (round_ + 1) + i) for i in range(40)])
        for query in asked:
            assert_ranks_as_model(memory, query)


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.characters(max_codepoint=127)) | st.text())
def test_tokenizer_terms_are_runs_of_letters_and_digits_after_nfkc_and_casefold(text: str) -> None:
    """The tokenizer's ASCII path gives the terms its general rule gives: NFKC, casefold, runs of letters and digits."""
    expected = re.findall(r"[^\W_]+", unicodedata.normalize("NFKC", text).casefold())
    assert Tokenizer()(text) == expected


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32), asked=st.lists(queries, min_size=1, max_size=3))
def test_keyword_scores_of_every_item_equal_plain_bm25(seed: int, asked: list[Any]) -> None:
    """SearchIndex.keyword_scores (the hybrid's keyword side) gives every holding item its plain BM25 score."""
    rng = random.Random(seed)
    memory = Memory(random_item(rng, step) for step in range(rng.choice([30, 700])))
    index = search_index(memory)
    for words, _, keys, _ in asked:
        text = " ".join(words)
        scores, rest = index.keyword_scores(Tokenizer()(text), keys)
        items = index.items(scores)
        got = {item["step"]: score for item, score in zip(items, scores.values(), strict=True)}
        assert got == dict(model_top(memory, text, len(memory), keys, None))
        assert rest == 0.0
