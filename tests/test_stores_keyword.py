"""The terms a store indexes are the terms Memory.search counts, and stores rank them as Memory.search does."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.memory import Memory, MemoryItem
from agents.memory._item import item_fields
from agents.memory._text import Tokenizer, item_texts
from agents.memory.stores import open_store
from agents.memory.stores._core.terms import item_terms, texts_of

TOKENIZER = Tokenizer()
SESSIONS = itertools.count()

text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
ascii_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=30)
leaf = st.one_of(
    text, ascii_text, st.integers(), st.floats(allow_nan=False), st.booleans(), st.none()
)
values = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), values, max_size=6))
def test_item_terms_are_the_tokenizer_terms_of_every_string(fields: dict[str, Any]) -> None:
    """item_terms gives the default tokenizer's terms of every string of every field, in order."""
    item = MemoryItem(**fields)
    texts = [t for _, t in item_texts(item_fields(item), None)]
    assert texts_of(item_fields(item)) == texts
    terms = [term for t in texts for term in TOKENIZER(t)]
    assert item_terms(item) == (" ".join(terms), len(terms))


def test_item_terms_of_unicode_and_subclassed_values() -> None:
    """Non-ASCII text is normalized and case-folded; str subclasses, sets and frozensets count."""

    class Label(str):
        pass

    item = MemoryItem(a="STRASSE Straße ﬁle", b=Label("Café_Bar"), c={"x", "y"}, d=frozenset({"z"}))
    text, n = item_terms(item)
    assert text.split(" ")[:4] == ["strasse", "strasse", "file", "café"]
    assert sorted(text.split(" ")[5:]) == ["x", "y", "z"]
    assert n == 8


def test_item_terms_of_ascii_text_with_long_runs_between_words() -> None:
    """Runs of separators of every length (up to thousands) give single spaces, counted as the tokenizer counts."""
    runs = [" ", ".,;", "\n\t", "  -- ", "!" * 1001, " " * 4096, "'\"()[]{}" * 9]
    words = [f"w{n}" for n in range(70)]
    text = "".join(runs[n % len(runs)] * (n % 5 + 1) + word for n, word in enumerate(words))
    for fields in (
        {"a": text},
        {"a": text + "  ...  "},
        {"a": "?!" * 3000},
        {"a": text, "b": [text]},
    ):
        item = MemoryItem(**fields)
        terms = [term for t in texts_of(item_fields(item)) for term in TOKENIZER(t)]
        assert item_terms(item) == (" ".join(terms), len(terms))


COMMON = ("is", "the", "to", "with")
RARE = ("zeta", "ticket", "orbit")


def step_items(seed: int, n_items: int, repeats: int) -> list[MemoryItem]:
    """Return items whose notes hold each common word in most items and each rare word in few.

    "is" is in two items of three (more than half); the other common words in
    30-80% of the items; a rare word in about one in twenty. A word is written
    up to ``repeats`` times; some items also have an ``extra`` field.
    """
    rng = random.Random(seed)
    shares = {word: rng.uniform(0.3, 0.8) for word in COMMON[1:]}
    items = []
    for n in range(n_items):
        words = ["is"] * (n % 3 != 0)
        words += [w for w, share in shares.items() if rng.random() < share]
        words += [w for w in RARE if rng.random() < 0.05]
        words = [w for w in words for _ in range(rng.randint(1, repeats))]
        words += ["filler"] * rng.randint(0, 12)
        rng.shuffle(words)
        extra = {"extra": rng.choice(COMMON + RARE)} if rng.random() < 0.3 else {}
        items.append(MemoryItem(n=n, note=" ".join(words), **extra))
    return items


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32),
    n_items=st.integers(1, 150),
    repeats=st.integers(1, 3),
    query=st.lists(st.sampled_from((*COMMON, *RARE, "missing")), min_size=1, max_size=6),
    k=st.integers(1, 12),
    keys=st.sampled_from([None, ("note",)]),
)
def test_store_ranking_with_common_words_is_memory_search(
    store_url: str,
    seed: int,
    n_items: int,
    repeats: int,
    query: list[str],
    k: int,
    keys: tuple[str, ...] | None,
) -> None:
    """Queries of words most items hold give Memory.search's top k and scores, in every store, beside another session."""
    items = step_items(seed, n_items, repeats)
    with open_store(store_url) as store:
        session = f"s{next(SESSIONS)}"
        store.append(session, items)
        store.append(f"{session}-other", items[: len(items) // 2] * 3)
        memory = Memory()
        memory.add_memory_items(store.read(session))
        text = " ".join(query)
        got = [(hit.item["n"], hit.score) for hit in store.search(session, text, k, keys=keys)]
        want = [(hit.item["n"], hit.score) for hit in memory.search(text, k, keys=keys)]
        assert got == want


def test_store_weighs_a_word_every_item_holds_at_the_idf_floor(store_url: str) -> None:
    """A word every item holds weighs 0.15 of the IDF of a word one item holds, in every store as in Memory.search."""
    items = [MemoryItem(n=n, text=f"the note {n}") for n in range(10)]
    floor = 0.15 * math.log1p((10 - 0.5) / 1.5)  # Lucene's IDF would give log1p(0.5 / 10.5)
    with open_store(store_url) as store:
        session = f"s{next(SESSIONS)}"
        store.append(session, items)
        got = [(hit.item["n"], hit.score) for hit in store.search(session, "the", 3)]
    want = [(hit.item["n"], hit.score) for hit in Memory(items).search("the", 3)]
    assert got == want
    assert [score for _, score in got] == pytest.approx([floor] * 3)


def test_store_ranks_a_long_item_holding_every_query_word_above_short_items_holding_fewer(
    store_url: str,
) -> None:
    """Every store ranks by BM25+ as Memory.search does: the long item holding every query word comes first, same scores."""
    filler = "good morning how was your weekend it was fine we stayed at home because of the rain"
    texts = [
        *[filler] * 40,
        f"the kettle was stored in the basement. thanks, that helps a lot. {filler}",
        "a box was stored in the basement",
        "a lamp was stored in the basement",
        "the form was stored in the basement",
        *[f"no kettle today. {filler}"] * 4,
    ]
    items = [MemoryItem(n=n, text=text) for n, text in enumerate(texts)]
    with open_store(store_url) as store:
        session = f"s{next(SESSIONS)}"
        store.append(session, items)
        got = [
            (hit.item["n"], hit.score) for hit in store.search(session, "kettle was stored in", 3)
        ]
    want = [(hit.item["n"], hit.score) for hit in Memory(items).search("kettle was stored in", 3)]
    assert [n for n, _ in got] == [40, 41, 42]
    assert got == want
