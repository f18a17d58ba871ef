"""Search: tokenizer, BM25 against a reference, filters, the incremental index, semantic and hybrid modes, recall."""

from __future__ import annotations

import heapq
import itertools
import math
import random
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Plus

from agents.memory import (
    EmbedderMismatchError,
    EmbeddingError,
    InvalidArgumentError,
    InvalidQueryError,
    Memory,
    MemoryItem,
    MissingDependencyError,
    Window,
    project,
)
from agents.memory._text import item_texts
from agents.memory._vectors import (
    COVERAGE_POWER,
    blend,
    cosines,
    kept_first,
    keyword_leader,
    keyword_scale,
    keyword_share,
    ranked_top,
    top_rows,
)
from agents.memory.search import (
    HYBRID_KEYWORD_WEIGHT,
    EmbedParts,
    HashingEmbedder,
    Hit,
    Tokenizer,
    WordLlamaEmbedder,
    _item_vectors,
    search,
    search_index,
)
from agents.memory.search._item_vectors import ItemVectors, Screen, Vectors, distinct_rows
from agents.memory.stores import open_memory, open_store
from agents.memory.stores.testing import assert_ranks_as_memory

CORPUS = [
    "open the file menu and click export",
    "the export dialog shows a PDF option",
    "type the summary line at the top of the report",
    "click the save button to save the report",
    "the report is saved as report.pdf in the documents folder",
    "close Word and tell the host agent the task is done",
    "the host agent assigns the next task: email the report",
    "open Outlook and attach report.pdf to a new email",
]


EMBEDDER = HashingEmbedder(64)


def corpus_memory() -> Memory:
    return Memory(MemoryItem(step=i, thought=text) for i, text in enumerate(CORPUS))


# -- tokenizer ---------------------------------------------------------------------


def test_tokenizer_folds_case_and_unicode_forms() -> None:
    """Terms are case-folded and NFKC-normalised: STRASSE matches Straße, full-width letters match."""
    tokenize = Tokenizer()
    assert tokenize("Straße") == tokenize("STRASSE") == ["strasse"]
    assert tokenize("\uff21\uff22\uff23 Menu") == ["abc", "menu"]  # full-width ABC


def test_tokenizer_splits_on_punctuation_and_underscores() -> None:
    """Runs of letters and digits of any script are terms; punctuation and _ separate them."""
    assert Tokenizer()("click_input on 'File' (menú) 42x, Ярлык!") == [
        "click",
        "input",
        "on",
        "file",
        "menú",
        "42x",
        "ярлык",
    ]


def test_tokenizer_stems_and_drops_short_terms() -> None:
    """A stemmer maps each term; min_length drops shorter terms."""
    tokenize = Tokenizer(stemmer=lambda word: word.removesuffix("ed"), min_length=2)
    assert tokenize("I clicked a button") == ["click", "button"]


def test_tokenizer_refuses_a_stemmer_that_is_not_callable() -> None:
    """Tokenizer(stemmer=...) names what it got when it is not a function."""
    with pytest.raises(TypeError, match="'english'"):
        Tokenizer(stemmer="english")  # type: ignore[arg-type]  # the wrong type is the test


# -- keyword ranking -------------------------------------------------------------------


class LuceneBM25Plus(BM25Plus):  # type: ignore[misc]  # rank_bm25 ships no type hints
    """rank_bm25's BM25+ with Lucene's IDF, ln(1 + (N - df + 0.5) / (df + 0.5)), over the words an item holds, over 1 + delta.

    The IDF is floored at 0.15 of the IDF of a word one item holds, as
    kvmemory's is (docs/search.md, "Keyword search: BM25+").

    rank_bm25 adds ``delta * idf`` for every query word, held or not (the
    same for every item); BM25+ adds it for the words an item holds. Divided
    by ``1 + delta``, a word held once at the average length scores its IDF.
    """

    def _calc_idf(self, nd: dict[str, int]) -> None:
        floor = 0.15 * math.log1p((self.corpus_size - 0.5) / 1.5)
        self.idf = {
            term: max(math.log1p((self.corpus_size - df + 0.5) / (df + 0.5)), floor)
            for term, df in nd.items()
        }

    def get_scores(self, query: list[str]) -> Any:
        scores = np.zeros(self.corpus_size)
        lengths = np.array(self.doc_len)
        for term in query:
            tf = np.array([doc.get(term, 0) for doc in self.doc_freqs])
            norm = self.k1 * (1 - self.b + self.b * lengths / self.avgdl)
            share = self.delta + tf * (self.k1 + 1) / (norm + tf)
            scores += self.idf.get(term, 0.0) * np.where(tf > 0, share, 0.0)
        return scores / (1 + self.delta)


@pytest.mark.parametrize(
    "query",
    [
        "report",
        "click export",
        "host agent task",
        "pdf report email",
        "save save",
        "the the",
        "the zebra",
    ],
)
@pytest.mark.parametrize("k", [1, 2, 3, len(CORPUS)])
def test_bm25_agrees_with_reference_implementation(query: str, k: int) -> None:
    """The top k and their scores equal rank_bm25's BM25+ (k1=1.2, b=0.75, delta=1) with Lucene's floored IDF and the same tokens."""
    tokenize = Tokenizer()
    reference = LuceneBM25Plus([tokenize(text) for text in CORPUS], k1=1.2, b=0.75, delta=1.0)
    terms = tokenize(query)
    expected = [
        (step, score)
        for step, score in enumerate(reference.get_scores(terms))
        if any(term in tokenize(CORPUS[step]) for term in terms)
    ]
    expected.sort(key=lambda pair: (-round(pair[1], 9), pair[0]))
    hits = corpus_memory().search(query, k=k)
    assert [hit.item["step"] for hit in hits] == [step for step, _ in expected[:k]]
    for hit, (_, score) in zip(hits, expected, strict=False):
        assert hit.score == pytest.approx(score, abs=1e-5)


# An item 1.7 times the average length holding every word of "kettle was stored in", and
# items 0.4 times it holding all but "kettle" (the rarest): plain BM25 ranks the three short
# ones first; BM25+ ranks the item with every word first (docs/search.md, "BM25+").
FILLER = "good morning how was your weekend it was fine we stayed at home because of the rain"
LONG_AND_SHORT = [
    *[FILLER] * 40,
    f"the kettle was stored in the basement. thanks, that helps a lot. {FILLER}",
    "a box was stored in the basement",
    "a lamp was stored in the basement",
    "the form was stored in the basement",
    *[f"no kettle today. {FILLER}"] * 4,
]


def test_a_long_item_holding_every_query_word_outranks_short_items_holding_fewer() -> None:
    """BM25+: an item of 1.7x the average length with every query word ranks above items of 0.4x without the rarest."""
    memory = Memory([MemoryItem(step=i, text=text) for i, text in enumerate(LONG_AND_SHORT)])
    hits = memory.search("kettle was stored in", 3)
    assert [hit.item["step"] for hit in hits] == [40, 41, 42]


def test_hits_are_best_first_with_matched_fields() -> None:
    """A hit carries the item, its score and the fields that hold a query term, nested strings included."""
    memory = Memory(
        [
            MemoryItem(step=1, thought="look for the invoice", action="click"),
            MemoryItem(step=2, thought="found it", observation={"title": ["Invoice 4471"]}),
            MemoryItem(step=3, thought="unrelated", cost=0.5),
        ]
    )
    hits = memory.search("invoice 4471")
    assert [(hit.item["step"], hit.fields) for hit in hits] == [
        (2, ("observation",)),
        (1, ("thought",)),
    ]
    assert isinstance(hits[0], Hit)
    assert hits[0].score > hits[1].score > 0


def test_equal_scores_keep_session_order() -> None:
    """Items with equal scores come in session order."""
    memory = Memory(MemoryItem(step=i, thought="same words") for i in range(5))
    assert [hit.item["step"] for hit in memory.search("words", k=5)] == [0, 1, 2, 3, 4]


def test_keys_restrict_the_fields_searched() -> None:
    """With keys, only those fields are searched and reported."""
    memory = Memory(
        [MemoryItem(step=1, thought="export", action="noop"), MemoryItem(step=2, action="export")]
    )
    hits = memory.search("export", keys=["action"])
    assert [(hit.item["step"], hit.fields) for hit in hits] == [(2, ("action",))]


def test_where_filters_by_equality_step_range_and_predicate() -> None:
    """where keeps items with equal fields, steps in a range, or passing a predicate."""
    memory = Memory(
        MemoryItem(step=i, agent="host" if i % 2 else "app", thought="click the menu")
        for i in range(10)
    )
    assert [h.item["step"] for h in memory.search("menu", k=10, where={"agent": "host"})] == [
        1,
        3,
        5,
        7,
        9,
    ]
    assert [h.item["step"] for h in memory.search("menu", k=10, where={"step": range(2, 5)})] == [
        2,
        3,
        4,
    ]
    hits = memory.search("menu", k=10, where=lambda item: item["step"] > 7)
    assert [h.item["step"] for h in hits] == [8, 9]
    assert memory.search("menu", where={"missing": 1}) == []


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(
        st.lists(st.sampled_from(["apple", "red", "car", "pie"]), max_size=4), max_size=60
    ),
    kinds=st.lists(st.sampled_from("abc"), min_size=60, max_size=60),
    query=st.sampled_from(["apple", "red car", "apple pie red"]),
    k=st.integers(1, 8),
    kind=st.sampled_from("abc"),
)
def test_top_k_with_a_filter_is_the_filtered_full_ranking(
    texts: list[list[str]], kinds: list[str], query: str, k: int, kind: str
) -> None:
    """search(k, where) gives the first k hits of the whole ranking that pass the filter, ties in session order."""
    memory = Memory(
        MemoryItem(step=i, thought=" ".join(words), kind=kinds[i]) for i, words in enumerate(texts)
    )
    everything = memory.search(query, k=len(memory) + 1)
    for where in ({"kind": kind}, None):
        expected = [h for h in everything if where is None or h.item["kind"] == kind][:k]
        assert memory.search(query, k=k, where=where) == expected
    scores = [h.score for h in everything]
    assert scores == sorted(scores, reverse=True)
    for first, second in itertools.pairwise(everything):
        if first.score == second.score:
            assert first.item["step"] < second.item["step"]


@pytest.mark.parametrize(
    "extra",
    [
        [],  # every item holds each word once: the shortest ones all tie at the bound
        ["the button", "click click the button"],  # a shorter item, a higher count
    ],
)
def test_queries_of_common_words_rank_as_scoring_every_item(extra: list[str]) -> None:
    """A query of words most items hold ranks as scoring every item: shorter items first, ties in session order."""
    texts = (
        ["click the button"] * 30 + ["click the button now"] * 5 + ["click the big red button"] * 5
    )
    memory = Memory(MemoryItem(step=i, thought=text) for i, text in enumerate(texts + extra))
    memory[3]["thought"] = "click the red button"
    memory.search(
        "red"
    )  # the index files item 3 under another length, then back: last of its length
    memory[3]["thought"] = "click the button"
    memory[39]["thought"] = "notes"
    for keys in (None, ["thought"], ["thought", "step"]):
        everything = memory.search("click the button", k=len(memory), keys=keys)
        assert len(everything) == len(memory) - 1
        for k in (1, 2, 3, 5, 31, 36):
            assert memory.search("click the button", k=k, keys=keys) == everything[:k]
    if not extra:
        steps = [hit.item["step"] for hit in memory.search("click the button", k=5)]
        assert steps == [0, 1, 2, 3, 4]


def test_lengths_over_many_key_sets_follow_changes() -> None:
    """Queries over more sets of fields than the index keeps lengths for still rank as a fresh memory."""
    memory = Memory(
        MemoryItem(step=i, a="click the button", b="the dialog", **{f"f{i % 10}": "the end"})
        for i in range(40)
    )
    key_sets = [["a"], ["b"], *[["a", f"f{n}"] for n in range(10)]]
    for round_ in range(2):
        for keys in key_sets:
            assert hits_of(memory, "the button", {"keys": keys}) == hits_of(
                Memory(item.copy() for item in memory), "the button", {"keys": keys}
            )
        memory[round_]["a"] = "the button the button"
        memory.delete_memory_item(10 + round_)


# -- the index follows the memory --------------------------------------------------------


def test_index_follows_adds_updates_deletes_and_loads() -> None:
    """Hits reflect items added, changed, deleted and loaded after the index was built."""
    memory = corpus_memory()
    assert memory.search("zebra") == []
    memory.add_memory_item(MemoryItem(step=100, thought="a zebra crossed"))
    assert [h.item["step"] for h in memory.search("zebra")] == [100]
    memory[0]["thought"] = "zebra menu"
    assert sorted(h.item["step"] for h in memory.search("zebra")) == [0, 100]
    memory.delete_memory_item(100)
    assert [h.item["step"] for h in memory.search("zebra")] == [0]
    memory.load([MemoryItem(step=1, thought="no stripes")])
    assert memory.search("zebra") == []
    memory.clear()
    assert memory.search("stripes") == []


def test_queries_do_not_tokenize_unchanged_items_again() -> None:
    """After the first query, later queries tokenize only the query and the items that changed."""
    seen: list[str] = []

    def stem(word: str) -> str:
        seen.append(word)
        return word

    memory = corpus_memory()
    search_index(memory, tokenizer=Tokenizer(stemmer=stem))
    memory.search("zebra")
    seen.clear()
    memory.search("giraffe zebra")
    assert seen == ["giraffe", "zebra"]
    memory[1]["thought"] = "changed text"
    seen.clear()
    memory.search("zebra")
    assert sorted(seen) == ["changed", "text", "zebra"]


operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(["red apple", "green apple pie", "red car"])),
        st.tuples(st.just("set"), st.sampled_from(["apple", "blue car", ""])),
        st.tuples(st.just("note"), st.sampled_from(["apple", "the red one", None])),
        st.tuples(st.just("delete"), st.integers(0, 5)),
        st.tuples(st.just("load"), st.integers(0, 3)),
        st.tuples(st.just("query"), st.none()),
    ),
    max_size=25,
)
QUERIES = [
    ("apple", {}),
    ("red car", {"keys": ["note"]}),
    ("red apple", {"where": {"kind": "b"}}),
    ("apple car", {"mode": "semantic", "embedder": EMBEDDER}),
    ("red pie", {"mode": "hybrid", "embedder": EMBEDDER}),
]


def hits_of(memory: Memory, query: str, options: dict[str, Any]) -> list[tuple[Any, float]]:
    return [(h.item.to_dict(), round(h.score, 6)) for h in memory.search(query, 10, **options)]


@settings(max_examples=60, deadline=None)
@given(ops=operations, bound=st.none() | st.integers(1, 6))
def test_incremental_index_ranks_as_a_fresh_one(
    ops: list[tuple[str, Any]], bound: int | None
) -> None:
    """After any sequence of changes, every mode ranks as on a fresh memory holding the same items.

    Queries come only now and then, so items are also added and changed
    between two queries (the memory tells the index of adds in batches).
    """
    memory = Memory(max_items=bound)
    for query, options in QUERIES:
        memory.add_memory_item(MemoryItem(step=0, thought="apple"))
        hits_of(memory, query, options)
        memory.clear()
    for step, (op, arg) in enumerate(ops, start=1):
        if op == "add":
            memory.add_memory_item(MemoryItem(step=step, thought=arg, kind="ab"[step % 2]))
        elif op == "set" and memory:
            memory[step % len(memory)]["thought"] = arg
        elif op == "note" and memory:
            item = memory[step % len(memory)]
            if arg is not None:
                item["note"] = {"text": [arg]}
            elif "note" in item:
                del item["note"]
        elif op == "delete" and memory:
            memory.delete_memory_item(memory[arg % len(memory)]["step"])
        elif op == "load":
            memory.load([MemoryItem(step=-i, thought="apple car", kind="b") for i in range(arg)])
        if op == "query":
            assert_ranks_as_fresh(memory)
    assert_ranks_as_fresh(memory)


def assert_ranks_as_fresh(memory: Memory) -> None:
    fresh = Memory(item.copy() for item in memory)
    for query, options in QUERIES:
        assert hits_of(memory, query, options) == hits_of(fresh, query, options)


WORDS = ["apple", "red", "car", "blue", "the", "pie", "Straße", "click_input"]


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(
        st.tuples(
            st.lists(st.sampled_from(WORDS), max_size=6),
            st.lists(st.sampled_from(WORDS), max_size=3),
        ),
        max_size=30,
    ),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    keys=st.sampled_from([None, ("thought",), ("note",)]),
)
def test_store_search_ranks_as_memory_search(
    texts: list[tuple[list[str], list[str]]], query: list[str], keys: tuple[str, ...] | None
) -> None:
    """A store's search gives the hits and scores of Memory.search on the same items."""
    items = [
        MemoryItem(step=i, thought=" ".join(thought), note={"text": [" ".join(note)]})
        for i, (thought, note) in enumerate(texts)
    ]
    with tempfile.TemporaryDirectory() as folder, open_store(f"sqlite:///{folder}/s.db") as store:
        store.append("s", items)
        got = store.search("s", " ".join(query), 10, keys=keys)
        want = Memory(items).search(" ".join(query), 10, keys=keys)
    assert [(hit.item["step"], round(hit.score, 9)) for hit in got] == [
        (hit.item["step"], round(hit.score, 9)) for hit in want
    ]


def test_searches_racing_changes_end_consistent() -> None:
    """Searches in one thread while another adds, changes and deletes never fail, and end as a fresh index."""
    memory = corpus_memory()
    errors: list[BaseException] = []

    def change() -> None:
        for i in range(300):
            memory.add_memory_item(MemoryItem(step=100 + i, thought=f"report {i} export"))
            memory[i % len(memory)]["thought"] = f"email {i}"
            if i % 3 == 0:
                memory.delete_memory_item(100 + i)

    def query() -> None:
        try:
            for _ in range(200):
                memory.search("report export email", k=3)
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=change), threading.Thread(target=query)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    fresh = Memory(item.copy() for item in memory)
    assert hits_of(memory, "report export email", {}) == hits_of(fresh, "report export email", {})


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "k", "mode", "match"),
    [
        ("", 5, "keyword", "must not be empty"),
        ("   ", 5, "keyword", "must not be empty"),
        ("?!", 5, "keyword", "no word"),
        ("menu", 0, "keyword", r"k must be an int >= 1 \(how many hits\), got 0"),
        ("menu", -3, "keyword", "got -3"),
        ("menu", 5, "fuzzy", "got 'fuzzy'"),
    ],
)
def test_bad_queries_are_named(query: str, k: int, mode: Any, match: str) -> None:
    """An empty query, k < 1 or an unknown mode raise InvalidQueryError naming the problem."""
    memory = corpus_memory()
    with pytest.raises(InvalidQueryError, match=match):
        memory.search(query, k, mode=mode)


def test_bad_keys_and_filters_are_named() -> None:
    """A bare string as keys, a non-string key and a filter of the wrong type are named."""
    memory = corpus_memory()
    with pytest.raises(InvalidQueryError, match=r"wrap it: \['thought'\]"):
        memory.search("menu", keys="thought")
    with pytest.raises(InvalidQueryError, match="got 3"):
        memory.search("menu", where={3: "x"})  # type: ignore[dict-item]  # the wrong type is the test
    with pytest.raises(InvalidQueryError, match="where must be"):
        memory.search("menu", where=[("step", 1)])  # type: ignore[arg-type]  # the wrong type is the test


class BrokenEmbedder:
    """An embedder that returns a wrong result of a chosen kind."""

    name = "broken"
    dimension = 4

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __call__(self, texts: Sequence[str]) -> Any:
        if self.kind == "shape":
            return np.ones((len(texts), 3), dtype=np.float32)
        out = np.ones((len(texts), 4), dtype=np.float32)
        out[-1, 0] = math.nan
        return out


@pytest.mark.parametrize(("kind", "match"), [("shape", r"shape \(1, 3\)"), ("nan", "NaN")])
def test_bad_embedder_output_is_named_and_changes_nothing(kind: str, match: str) -> None:
    """An embedder returning the wrong shape or NaN raises EmbeddingError; memory and hits are as before."""
    memory = corpus_memory()
    before = memory.to_list_of_dicts()
    with pytest.raises(EmbeddingError, match=match):
        memory.search("report", mode="semantic", embedder=BrokenEmbedder(kind))
    assert memory.to_list_of_dicts() == before
    assert [h.item["step"] for h in memory.search("report", k=1)] == [4]


def test_vectors_of_another_model_are_refused() -> None:
    """A memory embedded with one model refuses a query embedded by another, naming both."""
    memory = corpus_memory()
    memory.index_embeddings(HashingEmbedder(64))
    with pytest.raises(EmbedderMismatchError, match=r"'hashing-3gram-64'.*'hashing-3gram-128'"):
        memory.search("report", mode="semantic", embedder=HashingEmbedder(128))


def test_vectors_of_another_dimension_are_refused() -> None:
    """An embedder reusing a model name with another dimension is refused, naming both dimensions."""

    class Renamed(HashingEmbedder):
        name = "hashing-3gram-64"

    memory = corpus_memory()
    memory.index_embeddings(HashingEmbedder(64))
    with pytest.raises(EmbedderMismatchError, match=r"64 dimensions.*gives 32"):
        memory.search("report", mode="semantic", embedder=Renamed(32))
    assert memory.search("report", mode="semantic", k=1)[0].item["step"] in range(len(CORPUS))


def test_index_embeddings_with_another_model_embeds_again() -> None:
    """index_embeddings(new_model) replaces the vectors, after which that model is queried."""
    memory = corpus_memory()
    memory.index_embeddings(HashingEmbedder(64))
    assert memory.index_embeddings(HashingEmbedder(128)) == len(CORPUS)
    assert memory.search("report", mode="semantic", k=1)[0].item["step"] in (2, 3, 4, 6)


def test_a_query_that_is_not_a_string_is_named() -> None:
    """A query of another type raises InvalidQueryError naming the type."""
    with pytest.raises(InvalidQueryError, match=r"must be a string, got \['report'\] \(list\)"):
        corpus_memory().search(["report"])  # type: ignore[arg-type]  # the wrong type is the test


def test_a_range_filter_matches_only_int_values_in_it() -> None:
    """where={"step": range(...)} keeps int steps in the range and never a float or text step."""
    memory = Memory(
        [
            MemoryItem(step=2, thought="menu"),
            MemoryItem(step=2.5, thought="menu"),
            MemoryItem(step="2", thought="menu"),
        ]
    )
    assert [h.item["step"] for h in memory.search("menu", where={"step": range(5)})] == [2]


def test_index_embeddings_refuses_a_bad_batch_size() -> None:
    """batch_size below 1 raises InvalidQueryError naming it."""
    with pytest.raises(InvalidQueryError, match="batch_size >= 1, got 0"):
        corpus_memory().index_embeddings(HashingEmbedder(), batch_size=0)


def test_index_embeddings_draws_a_progress_bar(capsys: pytest.CaptureFixture[str]) -> None:
    """progress=True draws a bar on stderr that ends at the number of items."""
    corpus_memory().index_embeddings(HashingEmbedder(), batch_size=5, progress=True)
    err = capsys.readouterr().err
    assert err.endswith(f"] {len(CORPUS)}/{len(CORPUS)}\n")
    assert "Embedding items [" in err


def test_a_new_tokenizer_replaces_the_index() -> None:
    """search_index with another tokenizer re-indexes the memory with it; the same one keeps the index."""
    memory = corpus_memory()
    first = search_index(memory)
    assert search_index(memory, tokenizer=Tokenizer()) is first
    assert memory.search("saved", k=1)[0].item["step"] == 4
    search_index(memory, tokenizer=Tokenizer(stemmer=lambda word: word.removesuffix("d")))
    assert [h.item["step"] for h in memory.search("save", k=2)] == [3, 4]
    assert len([o for o in memory.observers if o is not first]) == 1


def test_index_items_hears_untold_adds_once_for_many_keys() -> None:
    """SearchIndex.items returns the items under the keys in their order, items added since the last query among them, the memory's observers told once."""
    memory = corpus_memory()
    index = search_index(memory)
    memory.add_memory_item(MemoryItem(step=100, thought="added after the index"))
    told = []
    real = memory.notify_observers

    def notify() -> None:
        told.append(1)
        real()

    memory.notify_observers = notify  # type: ignore[method-assign]
    keys = [len(CORPUS), 2, 0]
    assert [item["step"] for item in index.items(keys)] == [100, 2, 0]
    assert told == [1]
    assert index.items([]) == []


def test_default_embedder_without_wordllama_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without wordllama installed, WordLlamaEmbedder names the extra kvmemory[semantic]."""
    # A None entry in sys.modules makes `import wordllama` fail, as if it were not installed.
    monkeypatch.setitem(sys.modules, "wordllama", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'kvmemory\[semantic\]'"):
        WordLlamaEmbedder()


# -- semantic and hybrid --------------------------------------------------------------------


def test_hashing_embedder_finds_word_variants() -> None:
    """Semantic search with hashed n-grams finds 'invoices' for the query 'invoice'."""
    memory = Memory(
        [
            MemoryItem(step=1, thought="paid all the invoices today"),
            MemoryItem(step=2, thought="opened the settings panel"),
        ]
    )
    hits = memory.search("invoice", k=1, mode="semantic", embedder=HashingEmbedder())
    assert hits[0].item["step"] == 1
    assert memory.search("invoice") == []


def test_vectors_follow_changes() -> None:
    """A changed item is embedded again; a deleted one is never a semantic hit."""
    memory = corpus_memory()
    embedder = HashingEmbedder()
    memory.index_embeddings(embedder)
    memory[5]["thought"] = "giraffes giraffe"
    assert memory.search("giraffe", k=1, mode="semantic")[0].item["step"] == 5
    memory.delete_memory_item(5)
    assert 5 not in [h.item["step"] for h in memory.search("giraffe", k=8, mode="semantic")]


def test_items_added_after_embedding_are_embedded_once() -> None:
    """Items added after index_embeddings get one vector each, and no item is a hit twice."""
    memory = corpus_memory()
    memory.index_embeddings(HashingEmbedder())
    memory.add_memory_items([MemoryItem(step=10, thought="report"), MemoryItem(step=11)])
    hits = memory.search("report", k=20, mode="semantic")
    steps = [hit.item["step"] for hit in hits]
    assert sorted(steps) == [*range(len(CORPUS)), 10]
    assert memory.index_embeddings() == len(CORPUS) + 1


def test_index_embeddings_reports_progress() -> None:
    """index_embeddings embeds in batches and reports (done, total) after each."""
    memory = corpus_memory()
    calls: list[tuple[int, int]] = []
    count = memory.index_embeddings(
        HashingEmbedder(), batch_size=3, progress=lambda d, t: calls.append((d, t))
    )
    assert count == len(CORPUS)
    assert calls == [(3, 8), (6, 8), (8, 8)]


def test_wordllama_finds_a_paraphrase_offline() -> None:
    """The default model (weights from its wheel, no network) matches a paraphrase that shares no word."""
    memory = Memory(
        [
            MemoryItem(step=1, thought="The physician prescribed medicine for the fever"),
            MemoryItem(step=2, thought="The stock market fell sharply on Monday"),
            MemoryItem(step=3, thought="We parked the automobile in the garage"),
        ]
    )
    hits = memory.search("where did we leave the car", k=1, mode="semantic")
    assert hits[0].item["step"] == 3
    assert (
        memory.search("doctor", k=1, mode="semantic", embedder=WordLlamaEmbedder())[0].item["step"]
        == 1
    )


def test_hybrid_ranks_keyword_and_semantic_matches() -> None:
    """Hybrid mode finds an exact keyword hit first and still returns semantic neighbours."""
    memory = Memory(
        [
            MemoryItem(step=1, thought="error code E4471 in the export"),
            MemoryItem(step=2, thought="the export failed with an error"),
            MemoryItem(step=3, thought="lunch menu for friday"),
        ]
    )
    hits = memory.search("E4471 export failure", k=2, mode="hybrid", embedder=HashingEmbedder())
    assert [h.item["step"] for h in hits] == [1, 2]
    assert 0.0 <= hits[1].score <= hits[0].score <= 1.0


# -- recall ---------------------------------------------------------------------------------------


def test_recall_merges_hits_with_the_recent_window_in_session_order() -> None:
    """recall gives the hits and the last items once each, in session order, ready for project()."""
    memory = corpus_memory()
    items = memory.recall("export dialog", k=2, recent=Window(max_items=2))
    assert [item["step"] for item in items] == [0, 1, 6, 7]
    items = memory.recall("email", k=2, recent=Window(max_items=2))
    assert [item["step"] for item in items] == [6, 7]
    assert project(items, ["step"]) == [{"step": 6}, {"step": 7}]


def test_recall_without_window_gives_hits_in_session_order() -> None:
    """Without recent, recall gives the hits only, oldest first."""
    memory = corpus_memory()
    assert [item["step"] for item in memory.recall("report", k=2)] == [3, 4]


# -- stores and imports --------------------------------------------------------------------------


def test_stored_memory_searches_the_same_as_in_ram(store_url: str) -> None:
    """A memory reopened from any store gives the same hits and scores (to rounding) as the same items in RAM."""
    with open_memory(store_url, "run-1") as memory:
        memory.add_memory_items(corpus_memory().content)
    with open_memory(store_url, "run-1") as reopened:
        got = [(h.item.to_dict(), h.score, h.fields) for h in reopened.search("report pdf", k=4)]
        reopened[0]["thought"] = "report"
        assert reopened.search("report", k=1)[0].item["step"] == 0
    want = [
        (h.item.to_dict(), pytest.approx(h.score, rel=1e-12), h.fields)
        for h in corpus_memory().search("report pdf", k=4)
    ]
    assert got == want


WORDS = ["file", "open", "save", "the", "report", "Straße", "STRASSE", "café", "x_y", "会议"]
text_of = st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join)
ops_of = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(text_of, min_size=1, max_size=4)),
        st.tuples(st.just("update"), st.integers(0, 30), text_of),
        st.tuples(st.just("delete"), st.integers(0, 30)),
    ),
    min_size=1,
    max_size=8,
)


def test_store_search_ranks_as_memory_on_generated_sessions(store_url: str) -> None:
    """On generated sessions with appends, edits and deletes, every store ranks as Memory.search."""
    queries = ("file", "the report", "strasse", "CAFE save", "y", "会议 open", "file file")
    with open_store(store_url) as store:
        store.append("neighbour", [MemoryItem(step=0, a="file report the")])

        @settings(max_examples=25, deadline=None)
        @given(ops=ops_of)
        def check(ops: list[tuple[Any, ...]]) -> None:
            sid = f"s{uuid.uuid4().hex}"
            seqs: list[int] = []
            for op in ops:
                if op[0] == "append":
                    items = [
                        MemoryItem(step=len(seqs) + i, a=t, b={"c": [t]})
                        for i, t in enumerate(op[1])
                    ]
                    seqs += store.append(sid, items)
                elif seqs and op[0] == "update":
                    seq = seqs[op[1] % len(seqs)]
                    with store.batch(sid) as batch:
                        batch.update({seq: MemoryItem(step=-1, note=op[2])})
                elif seqs:
                    store.delete_seqs(sid, [seqs[op[1] % len(seqs)]])
            assert_ranks_as_memory(store, sid, queries)

        check()


def stored_and_ram(url: str) -> tuple[Any, Memory]:
    """Return a stored memory and a RAM memory holding the same generated session."""
    items = [
        MemoryItem(step=i, thought=text, tags=[CORPUS[(i + 2) % len(CORPUS)]], agent=f"a{i % 2}")
        for i, text in enumerate(CORPUS * 3)
    ]
    stored = open_memory(url, "run")
    stored.add_memory_items(items)
    return stored, Memory(MemoryItem(**item.to_dict()) for item in items)


@pytest.mark.parametrize(
    "where",
    [None, {"agent": "a1"}, {"step": range(4, 15)}, lambda item: item["step"] % 5 == 0],
    ids=["none", "equal", "range", "predicate"],
)
def test_stored_memory_search_is_memory_search(store_url: str, where: Any) -> None:
    """StoredMemory.search gives Memory.search's hits (items, order, scores, fields) with any filter."""
    stored, ram = stored_and_ram(store_url)
    with stored:
        for query in ("the report", "click save", "pdf", "agent host task"):
            got = [
                (h.item.to_dict(), h.score, h.fields) for h in stored.search(query, 4, where=where)
            ]
            want = [
                (h.item.to_dict(), pytest.approx(h.score, rel=1e-12), h.fields)
                for h in ram.search(query, 4, where=where)
            ]
            assert got == want, query


def test_stored_memory_asks_an_indexed_store_and_builds_no_index(store_url: str) -> None:
    """On a store with a keyword index, keyword search and recall build no in-RAM search index."""
    stored, ram = stored_and_ram(store_url)
    with stored:
        got = [item.to_dict() for item in stored.recall("report", 2, recent=Window(max_items=2))]
        want = [item.to_dict() for item in ram.recall("report", 2, recent=Window(max_items=2))]
        assert got == want
        if stored.store.keyword_index:
            assert stored.observers == ()
        stored.search("report", keys=["thought"])  # keys: the in-RAM index answers
        assert len(stored.observers) == 1


def test_stored_memory_with_another_tokenizer_searches_in_ram(tmp_path: Any) -> None:
    """A search index made with another tokenizer keeps search in RAM, where that tokenizer ranks."""
    stored, ram = stored_and_ram(f"sqlite://{tmp_path / 'store.db'}")
    with stored:
        tokenizer = Tokenizer(min_length=4)
        search_index(stored, tokenizer=tokenizer)
        search_index(ram, tokenizer=tokenizer)
        got = [(h.item.to_dict(), h.score) for h in stored.search("the report", 3)]
        assert got == [(h.item.to_dict(), h.score) for h in ram.search("the report", 3)]


def test_importing_the_package_leaves_search_unloaded() -> None:
    """import agents.memory does not import the search room (it loads on the first search)."""
    code = "import sys, agents.memory; print('agents.memory.search' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_hybrid_weight_bounds_the_blend() -> None:
    """hybrid_weight=1 ranks by keyword alone when the keyword leader holds every query word; a weight outside 0..1 is named."""
    memory = corpus_memory()
    keyword = [h.item["step"] for h in memory.search("report pdf", 3)]
    blended = search(memory, "report pdf", 3, mode="hybrid", embedder=EMBEDDER, hybrid_weight=1.0)
    assert [h.item["step"] for h in blended] == keyword
    with pytest.raises(
        InvalidQueryError, match="hybrid_weight must be a number from 0 to 1, got 2"
    ):
        search(memory, "report", mode="hybrid", embedder=EMBEDDER, hybrid_weight=2)


def test_search_function_and_method_agree() -> None:
    """agents.memory.search.search(memory, ...) is what memory.search(...) returns."""
    memory = corpus_memory()
    assert search(memory, "report", 3) == memory.search("report", 3)


# -- embedding parts and the hybrid blend (issue 25) ------------------------------------------


def long_steps(fact_at: int) -> Memory:
    """Thirty steps with a 200-word page each; step 17's page holds a fact at word ``fact_at``."""
    rng = random.Random(5)
    filler = ["dialog", "window", "table", "cell", "column", "sheet", "chart", "pane", "ribbon"]
    memory = Memory()
    for step in range(30):
        page = [rng.choice(filler) for _ in range(200)]
        if step == 17:
            page[fact_at:fact_at] = ["the", "invoice", "was", "paid", "in", "Lisbon"]
        memory.add_memory_item(MemoryItem(step=step, thought=f"step {step}", page=" ".join(page)))
    memory.add_memory_item(MemoryItem(step=30, thought="invoices pending"))
    return memory


def test_embed_parts_cuts_each_field_into_windows_of_words() -> None:
    """Each field's strings are one text, cut into windows of chunk_words that overlap; whole adds the item's text."""
    fields = {"a": "one two three four five six", "b": ["x", {"k": "y"}], "n": 3}
    assert EmbedParts(chunk_words=3, overlap=1).texts(fields, None) == [
        "one two three",
        "three four five",
        "five six",
        "x y",
    ]
    assert EmbedParts(chunk_words=4).texts(fields, ("b",)) == ["x y"]
    assert EmbedParts(chunk_words=None, whole=True).texts(fields, None) == [
        "one two three four five six",
        "x y",
        "one two three four five six\nx\ny",
    ]
    assert EmbedParts.WHOLE.texts(fields, None) == ["one two three four five six\nx\ny"]
    assert EmbedParts().texts({"n": 3, "blank": "  "}, None) == []


def _plain_parts(
    parts: EmbedParts, fields: dict[str, Any], keys: tuple[str, ...] | None
) -> list[str]:
    """EmbedParts.texts as a plain loop over item_texts: the model the cut is checked against."""
    pairs = list(item_texts(fields, keys))
    out: list[str] = []
    if parts.fields:
        joined: dict[str, list[str]] = {}
        for name, text in pairs:
            joined.setdefault(name, []).append(text)
        for texts in joined.values():
            words = "\n".join(texts).split()
            start = 0
            while words:
                out.append(" ".join(words[start : start + (parts.chunk_words or len(words))]))
                if parts.chunk_words is None or start + parts.chunk_words >= len(words):
                    break
                start += parts.chunk_words - parts.overlap
    whole = "\n".join(text for _, text in pairs)
    if (parts.whole or not parts.fields) and whole.strip():
        out.append(whole)
    return out


_leaf = st.one_of(
    st.text(st.sampled_from("ab \n\t"), max_size=12),
    st.integers(),
    st.none(),
    st.binary(max_size=2),
)
_value = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("xy"), inner, max_size=2)
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from("abcd"), _value, max_size=4),
    st.one_of(st.none(), st.lists(st.sampled_from("abce"), max_size=5).map(tuple)),
    st.one_of(st.none(), st.integers(1, 4)),
    st.integers(0, 3),
    st.booleans(),
    st.booleans(),
)
def test_embed_parts_cuts_as_a_plain_loop_over_the_items_strings(
    fields: dict[str, Any],
    keys: tuple[str, ...] | None,
    size: int | None,
    overlap: int,
    whole: bool,
    by_field: bool,
) -> None:
    """EmbedParts.texts gives, for any nested fields, keys (repeats included) and cut, the texts of a plain loop over item_texts."""
    parts = EmbedParts(
        chunk_words=size,
        overlap=min(overlap, size - 1) if size else 0,
        whole=whole,
        fields=by_field,
    )
    assert parts.texts(fields, keys) == _plain_parts(parts, fields, keys)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"chunk_words": 0}, "chunk_words=...\\) takes an int >= 1"),
        (
            {"chunk_words": 4, "overlap": 4},
            "overlap=...\\) takes an int from 0 to chunk_words - 1 \\(4\\), got 4",
        ),
        ({"overlap": -1}, "got -1"),
    ],
)
def test_bad_embed_parts_are_named(options: dict[str, Any], match: str) -> None:
    """A window below one word or an overlap as long as the window is refused with its value."""
    with pytest.raises(InvalidArgumentError, match=match):
        EmbedParts(**options)


@pytest.mark.parametrize("fact_at", [0, 97, 200])
def test_semantic_ranks_an_item_by_its_best_part(fact_at: int) -> None:
    """A fact buried in a long page is found by its window's vector, wherever it lies; the score is that window's cosine."""
    memory = long_steps(fact_at)
    query = "invoice paid Lisbon"
    search_index(memory, parts=EmbedParts.WHOLE)
    whole = search(memory, query, 1, mode="semantic", embedder=EMBEDDER)
    assert whole[0].item["step"] == 30  # averaged over 200 words, the fact is lost
    fresh = long_steps(fact_at)  # parts are the default: nothing to ask for
    (hit,) = search(fresh, query, 1, mode="semantic", embedder=EMBEDDER)
    assert search_index(fresh).parts == EmbedParts()
    assert hit.item["step"] == 17
    texts = EmbedParts().texts(hit.item.to_dict(), None)
    vectors = EMBEDDER(texts)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    wanted = EMBEDDER([query])[0]
    assert hit.score == pytest.approx(
        float(np.max(vectors @ (wanted / np.linalg.norm(wanted)))), rel=1e-5
    )


def test_changing_the_parts_embeds_the_items_again() -> None:
    """Setting other parts forgets the vectors cut the old way; the next embedding cuts items the new way."""
    memory = long_steps(50)
    embedder = CountingHashing()
    search_index(memory, parts=EmbedParts.WHOLE)
    assert memory.index_embeddings(embedder) == 31
    assert embedder.texts == 31
    index = search_index(memory, parts=EmbedParts(chunk_words=50))
    assert index.missing_vectors(None) == list(range(31))
    assert memory.index_embeddings(embedder) == 31
    # Each step: its thought and 4 windows of its 200-word page (5 for step 17's 206); step 30: one.
    assert embedder.texts == 31 + 30 * 5 + 1 + 1
    with pytest.raises(InvalidArgumentError, match="takes an EmbedParts"):
        search_index(memory, parts="words")  # type: ignore[arg-type]


class CountingHashing(HashingEmbedder):
    """A hashing embedder that counts the texts it embeds."""

    def __init__(self) -> None:
        super().__init__(64)
        self.texts = 0

    def __call__(self, texts: Sequence[str], /) -> Any:
        self.texts += len(texts)
        return super().__call__(texts)


def test_hybrid_keeps_a_keyword_hit_when_the_query_holds_unknown_words() -> None:
    """Query words no item holds ("which", "when") do not shrink BM25's share: the exact match stays first."""
    memory = Memory(
        [
            MemoryItem(step=i, thought=f"press the button number {i} in the toolbar")
            for i in range(40)
        ]
    )
    memory.add_memory_item(
        MemoryItem(step=40, thought="Noted, while the dialog was open: the car was moved to Lisbon")
    )
    memory.add_memory_item(MemoryItem(step=41, thought="whichstep wasit whenthe carwas movedd"))
    query = "which step was it when the car was moved"
    semantic = search(memory, query, 1, mode="semantic", embedder=EMBEDDER)
    assert semantic[0].item["step"] == 41  # shares letters, not words
    hits = search(memory, query, 2, mode="hybrid", embedder=EMBEDDER)
    assert [hit.item["step"] for hit in hits] == [40, 41]


def test_hybrid_keyword_share_saturates_against_the_corpus() -> None:
    """The keyword half of a hybrid score is x**3 / (1 + x**3), x = bm25 / keyword_scale: 0.5 at twice a rare word's IDF."""
    memory = corpus_memory()
    index = search_index(memory)
    scale = index.keyword_scale()
    assert scale == pytest.approx(2 * math.log1p((len(CORPUS) - 0.5) / 1.5))
    keyword = {hit.item["step"]: hit.score for hit in search(memory, "pdf option", 8)}
    hits = search(memory, "pdf option", 8, mode="hybrid", embedder=EMBEDDER, hybrid_weight=1.0)
    assert {
        hit.item["step"]: hit.score for hit in hits if hit.item["step"] in keyword
    } == pytest.approx(
        {step: (bm25 / scale) ** 3 / (1 + (bm25 / scale) ** 3) for step, bm25 in keyword.items()}
    )


def crowd(n: int, seed: int = 3) -> Memory:
    """Return ``n`` short steps of a few words drawn from a small vocabulary: many alike, some far."""
    rng = random.Random(seed)
    words = ["export", "report", "invoice", "email", "print", "chart", "save", "dialog", "lunch"]
    return Memory(
        MemoryItem(step=i, thought="notes: " + " ".join(rng.sample(words, rng.randint(1, 4))))
        for i in range(n)
    )


@pytest.mark.parametrize("n", [40, 150])
def test_hybrid_discounts_the_cosine_by_the_query_background(n: int) -> None:
    """The semantic half of a hybrid score is the cosine times (1 - c)**2, c the 100th best cosine (the worst in a smaller memory)."""
    memory = crowd(n)
    query = "notes on the email chart"
    cosines = sorted(
        (hit.score for hit in search(memory, query, n, mode="semantic", embedder=EMBEDDER)),
        reverse=True,
    )
    background = max(cosines[min(100, len(cosines)) - 1], 0.0)
    assert 0.0 < background < 1.0  # a crowd, not every item alike
    discount = (1 - background) ** 2
    hits = search(memory, query, 5, mode="hybrid", embedder=EMBEDDER, hybrid_weight=0.0)
    assert [hit.score for hit in hits] == pytest.approx([discount * c for c in cosines[:5]])
    weighted = search(memory, query, 5, mode="hybrid", embedder=EMBEDDER)
    keyword = {h.item["step"]: h.score for h in search(memory, query, n)}
    scale = search_index(memory).keyword_scale()
    semantic = {
        h.item["step"]: h.score
        for h in search(memory, query, n, mode="semantic", embedder=EMBEDDER)
    }
    index = search_index(memory)
    terms = index.tokenizer(query)
    covered = index.coverage(terms, None, keyword_leader(keyword))
    w = HYBRID_KEYWORD_WEIGHT * covered**COVERAGE_POWER

    def plain(step: int) -> float:
        x = keyword.get(step, 0.0) / scale
        return w * x**3 / (1 + x**3) + (1 - w) * discount * max(semantic[step], 0.0)

    kept = kept_first(keyword, semantic, covered)  # ranked first: lifted above the rest
    others = max(plain(step) for step in semantic if step not in kept)
    for hit in weighted:
        step = hit.item["step"]
        lifted = others + (1 - others) * plain(step)
        want = lifted if step in kept and min(map(plain, kept)) <= others else plain(step)
        assert hit.score == pytest.approx(want)


def test_hybrid_keeps_the_exact_match_among_items_whose_best_part_comes_close() -> None:
    """With parts, every long step has a window near the query; the one that holds all its words stays first in hybrid mode."""
    rng = random.Random(5)
    filler = ["the", "car", "bicycle", "was", "moved", "to", "repaired", "by", "table", "cell"]
    memory = Memory()
    for step in range(150):
        page = [rng.choice(filler) for _ in range(60)]
        if step == 77:
            page[30:30] = ["the", "car", "was", "moved", "to", "Lisbon"]
        else:  # another subject with the same relation: close to the query, not the fact
            page[30:30] = ["the", "bicycle", "was", "moved", "to", rng.choice(["Porto", "Oslo"])]
        memory.add_memory_item(MemoryItem(step=step, page=" ".join(page)))
    assert search(memory, "car moved Lisbon", 1)[0].item["step"] == 77
    hits = search(memory, "car moved Lisbon", 1, mode="hybrid", embedder=EMBEDDER)
    assert hits[0].item["step"] == 77


WORDS = ["invoice", "overdue", "penalty", "fee", "report", "the"]


def _plain_coverage(
    texts: list[dict[str, str]], query: list[str], fields: list[str], key: int
) -> float:
    """The coverage rule written plainly: the IDF share of the query's known words that item ``key`` holds."""
    held_by = [{word for field in fields for word in text.get(field, "").split()} for text in texts]
    weight = {}
    for word in dict.fromkeys(query):
        df = sum(word in words for words in held_by)
        if df:
            n = len(texts)  # Lucene's IDF, floored at 0.15 of a one-item word's
            weight[word] = max(
                math.log1p((n - df + 0.5) / (df + 0.5)), 0.15 * math.log1p((n - 0.5) / 1.5)
            )
    total = sum(weight.values())
    return sum(w for word, w in weight.items() if word in held_by[key]) / total if total else 1.0


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(
        st.fixed_dictionaries(
            {
                "a": st.lists(st.sampled_from(WORDS), max_size=5).map(" ".join),
                "b": st.lists(st.sampled_from(WORDS), max_size=3).map(" ".join),
            }
        ),
        min_size=1,
        max_size=12,
    ),
    query=st.lists(st.sampled_from([*WORDS, "lisbon"]), min_size=1, max_size=6),
    only_a=st.booleans(),
    data=st.data(),
)
def test_coverage_is_the_share_of_the_query_idf_an_item_holds(
    texts: list[dict[str, str]], query: list[str], only_a: bool, data: st.DataObject
) -> None:
    """SearchIndex.coverage is the IDF share of the query's distinct known words that the item holds, in the searched fields."""
    memory = Memory([MemoryItem(**text) for text in texts])
    key = data.draw(st.integers(0, len(texts) - 1))
    fields = ["a"] if only_a else ["a", "b"]
    keys = ("a",) if only_a else None
    got = search_index(memory).coverage(query, keys, key)
    assert got == pytest.approx(_plain_coverage(texts, query, fields, key), rel=1e-12, abs=1e-12)


def _part_covered() -> list[MemoryItem]:
    """A keyword leader holding half the query's IDF weight, and a paraphrase holding none of its words."""
    items = [
        MemoryItem(step=i, thought=f"press the button number {i} in the toolbar") for i in range(40)
    ]
    items[3] = MemoryItem(step=3, thought="penalty kick shown on the screen")
    items[5] = MemoryItem(step=5, thought="entry fee listed on the screen")
    items.append(MemoryItem(step=40, thought="the invoice overdue stamp was opened in the editor"))
    items.append(MemoryItem(step=41, thought="invoices overdued: penalties and fees charged"))
    return items


PART_QUERY = "invoice overdue penalty fee"


def test_hybrid_lets_the_semantic_match_win_over_a_keyword_leader_holding_part_of_the_query() -> (
    None
):
    """A keyword leader holding half the query's IDF weight keeps 1/256 of the keyword share: the semantic match comes first."""
    memory = Memory(_part_covered())
    assert search(memory, PART_QUERY, 1)[0].item["step"] == 40
    index = search_index(memory)
    assert index.coverage(index.tokenizer(PART_QUERY), None, 40) == pytest.approx(0.5)
    hits = search(memory, PART_QUERY, 2, mode="hybrid", embedder=EMBEDDER)
    assert [hit.item["step"] for hit in hits] == [41, 40]


@pytest.mark.parametrize(
    "options",
    [{}, {"keys": ["thought"]}, {"where": {"step": {"$ne": 40}}}, {"where": {"step": {"$gte": 3}}}],
    ids=["all", "keys", "where-drops-leader", "where"],
)
def test_store_weighs_a_part_covered_keyword_leader_as_memory_search_does(
    store_url: str, options: dict[str, Any]
) -> None:
    """Stores, one session, many sessions and a stored memory, give Memory.search's hybrid hits when the leader holds part of the query."""
    items = _part_covered()
    want = [
        (hit.item["step"], hit.score)
        for hit in Memory(items).search(PART_QUERY, 4, mode="hybrid", embedder=EMBEDDER, **options)
    ]
    assert want[0][0] == 41
    with open_store(store_url) as store:
        store.append("a", items[:20])
        store.append("b", items[20:])
        store.append("s", items)
        store.index_embeddings("s", EMBEDDER)
        single = store.search("s", PART_QUERY, 4, mode="hybrid", embedder=EMBEDDER, **options)
        many = store.search_sessions(
            PART_QUERY, 4, sessions=["a", "b"], mode="hybrid", embedder=EMBEDDER, **options
        )
        runs: list[Sequence[Any]] = [single, many]
    stored = open_memory(f"memory://{uuid.uuid4().hex}", "s")
    stored.add_memory_items(items)
    runs.append(stored.search(PART_QUERY, 4, mode="hybrid", embedder=EMBEDDER, **options))
    for got in runs:
        assert [hit.item["step"] for hit in got] == [step for step, _ in want]
        assert [hit.score for hit in got] == pytest.approx(
            [score for _, score in want], rel=1e-5, abs=1e-6
        )


def _crowded_elsewhere() -> list[MemoryItem]:
    """Another session's items, holding 'penalty', 'fee' and 'invoice' (in field 'note') many times over."""
    return [
        MemoryItem(step=i, thought=f"penalty fee number {i}", note="invoice") for i in range(30)
    ]


@pytest.mark.parametrize("options", [{}, {"keys": ["thought"]}], ids=["all", "keys"])
def test_store_counts_each_query_word_in_the_searched_session_and_fields_for_coverage(
    store_url: str, options: dict[str, Any]
) -> None:
    """A part-covered hybrid query in a store counts the items holding each query word in the session (and fields) searched, as Memory.search does."""
    items = [
        *_part_covered(),
        MemoryItem(step=42, thought="an invoice without a stamp", note="overdue"),
    ]
    want = [
        (hit.item["step"], hit.score)
        for hit in Memory(items).search(PART_QUERY, 4, mode="hybrid", embedder=EMBEDDER, **options)
    ]
    with open_store(store_url) as store:
        store.append("s", items)
        store.append("t", _crowded_elsewhere())  # the same words, held by another session's items
        got = store.search("s", PART_QUERY, 4, mode="hybrid", embedder=EMBEDDER, **options)
    assert [hit.item["step"] for hit in got] == [step for step, _ in want]
    assert [hit.score for hit in got] == pytest.approx(
        [score for _, score in want], rel=1e-9, abs=1e-12
    )


@pytest.mark.parametrize("weight", [1, 0])
def test_an_explicit_hybrid_weight_of_one_or_zero_ranks_by_one_side_alone(weight: int) -> None:
    """hybrid_weight=1 gives the keyword hits in BM25's order at their keyword share, 0 the semantic ranking, though the leader holds part of the query."""
    memory = Memory(_part_covered())
    index = search_index(memory)
    assert index.coverage(index.tokenizer(PART_QUERY), None, 40) == pytest.approx(0.5)
    got = search(memory, PART_QUERY, 3, mode="hybrid", embedder=EMBEDDER, hybrid_weight=weight)
    if weight:
        alone = [
            (hit.item["step"], keyword_share(hit.score, index.keyword_scale()))
            for hit in search(memory, PART_QUERY, 3)
        ]
    else:
        semantic = search(memory, PART_QUERY, 3, mode="semantic", embedder=EMBEDDER)
        discount = got[0].score / semantic[0].score  # the query's semantic discount
        alone = [(hit.item["step"], hit.score * discount) for hit in semantic]
    assert [hit.item["step"] for hit in got] == [step for step, _ in alone]
    assert [hit.score for hit in got] == pytest.approx([score for _, score in alone], rel=1e-12)


def test_store_ranks_by_the_keyword_side_alone_at_hybrid_weight_one(store_url: str) -> None:
    """Stores, one session and many, give the keyword hits at their keyword share for hybrid_weight=1."""
    items = _part_covered()
    index = search_index(Memory(items))
    want = [
        (hit.item["step"], keyword_share(hit.score, index.keyword_scale()))
        for hit in Memory(items).search(PART_QUERY, 3)
    ]
    assert want[0][0] == 40
    options: dict[str, Any] = {"mode": "hybrid", "embedder": EMBEDDER, "hybrid_weight": 1}
    with open_store(store_url) as store:
        store.append("a", items[:20])
        store.append("b", items[20:])
        store.append("s", items)
        runs: list[Sequence[Any]] = [
            store.search("s", PART_QUERY, 3, **options),
            store.search_sessions(PART_QUERY, 3, sessions=["a", "b"], **options),
        ]
    for got in runs:
        assert [hit.item["step"] for hit in got] == [step for step, _ in want]
        assert [hit.score for hit in got] == pytest.approx(
            [score for _, score in want], rel=1e-9, abs=1e-12
        )


def test_stored_memory_with_parts_ranks_as_memory() -> None:
    """A stored memory whose index cuts items into parts embeds them in RAM and ranks as a plain memory does."""
    memory = long_steps(120)
    stored = open_memory(f"memory://{uuid.uuid4().hex}", "s")
    stored.add_memory_items(list(memory))
    for target in (memory, stored):
        search_index(target, parts=EmbedParts(chunk_words=6, overlap=2))
    for mode in ("semantic", "hybrid"):
        want = search(memory, "invoice paid in Lisbon", 3, mode=mode, embedder=EMBEDDER)
        got = stored.search("invoice paid in Lisbon", 3, mode=mode, embedder=EMBEDDER)
        assert [(h.item["step"], h.score) for h in got] == [(h.item["step"], h.score) for h in want]
        assert got[0].item["step"] == 17


@pytest.mark.parametrize("name", ["vectors-v5.db", "vectors-jsonl"])
def test_whole_item_vectors_of_an_older_store_stay_readable(name: str, tmp_path: Any) -> None:
    """A store embedded whole (the old default) gets parts embedded and stored beside its whole-item vectors, which parts=WHOLE still reads."""
    import shutil
    from pathlib import Path

    source = Path(__file__).parent / "fixtures" / name
    target = tmp_path / name
    if source.is_dir():
        shutil.copytree(source, target)
        url = f"jsonl:///{target}"
    else:
        shutil.copy(source, target)
        url = f"sqlite:///{target}"
    embedder = CountingHashing()
    query = "invoice paid Lisbon"
    with open_store(url) as store:
        items = store.read("run")
        assert store.vector_model("run") is not None
        whole = store.search(
            "run", query, 3, mode="semantic", embedder=embedder, parts=EmbedParts.WHOLE
        )
        assert embedder.texts == 1  # the query: the stored vectors were read, not made again
        ram = Memory(items)
        search_index(ram, parts=EmbedParts.WHOLE)
        want = search(ram, query, 3, mode="semantic", embedder=EMBEDDER)
        assert [(h.item.to_dict(), round(h.score, 5)) for h in whole] == [
            (h.item.to_dict(), round(h.score, 5)) for h in want
        ]
        assert whole[0].item["step"] == 6
        assert store.read_vectors("run", embedder) == {}  # no parts stored yet
    # A read-only handle embeds the parts for each query, storing nothing, and ranks as a writer.
    with open_store(url, read_only=True) as reader:
        looked = reader.search("run", query, 3, mode="semantic", embedder=embedder)
        assert reader.read_vectors("run", embedder) == {}
    assert looked[0].item["step"] == 3
    with open_store(url) as store:
        before = embedder.texts
        parted = store.search("run", query, 3, mode="semantic", embedder=embedder)
        assert embedder.texts > before + 1  # the items' parts were embedded and stored
        assert [(h.seq, h.score) for h in parted] == [(h.seq, h.score) for h in looked]
        default = search(Memory(items), query, 3, mode="semantic", embedder=EMBEDDER)
        assert [(h.item.to_dict(), round(h.score, 5)) for h in parted] == [
            (h.item.to_dict(), round(h.score, 5)) for h in default
        ]
        before = embedder.texts
        again = store.search("run", query, 3, mode="semantic", embedder=embedder)
        assert [h.seq for h in again] == [h.seq for h in parted]
        assert embedder.texts == before + 1  # parts are stored now: only the query
        kept = store.search(
            "run", query, 3, mode="semantic", embedder=embedder, parts=EmbedParts.WHOLE
        )
        assert [h.seq for h in kept] == [h.seq for h in whole]
        assert embedder.texts == before + 2


class _CountingEmbedder(HashingEmbedder):
    """A hashing embedder that records every text it is asked to embed."""

    def __init__(self) -> None:
        super().__init__(64)
        self.texts: list[str] = []

    def __call__(self, texts: Sequence[str], /) -> Any:
        self.texts.extend(texts)
        return super().__call__(texts)


def test_a_part_repeated_across_items_is_embedded_once() -> None:
    """A field text that many steps repeat word for word is embedded once, before and after more steps come."""
    memory = Memory(
        [
            MemoryItem(step=i, status="CONTINUE", thought=f"step {i} opens file{i}")
            for i in range(40)
        ]
    )
    embedder = _CountingEmbedder()
    memory.index_embeddings(embedder)
    memory.add_memory_item(MemoryItem(step=40, status="CONTINUE", thought="step 40 opens file40"))
    memory.search("opens file40", 1, mode="semantic", embedder=embedder)
    assert embedder.texts.count("CONTINUE") == 1
    assert len(embedder.texts) == 1 + 41 + 1  # "CONTINUE", each thought, the query


class _LatentEmbedder:
    """Vectors from 16 latent directions (each word one random mix of them): parts that lie near a few directions."""

    name = "latent-16-256"
    dimension = 256

    def __init__(self) -> None:
        self._mix = np.random.default_rng(3).standard_normal((16, 256)).astype(np.float32)
        self._words: dict[str, Any] = {}

    def __call__(self, texts: Sequence[str], /) -> Any:
        out = np.zeros((len(texts), 16), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.split():
                latent = self._words.get(word)
                if latent is None:
                    seed = sum(ord(ch) * 31**i for i, ch in enumerate(word)) % 2**32
                    latent = self._words[word] = np.random.default_rng(seed).standard_normal(16)
                out[row] += latent
        return out @ self._mix


def _ranked(memory: Memory, embedder: Any, query: str, k: int) -> list[tuple[int, float]]:
    """Return the best ``k`` (step, cosine) from every item's exact cosine, ties in session order."""
    index = search_index(memory)
    scores = index.semantic_scores(embedder, query, None, limit=None)
    best = sorted(scores.items(), key=lambda hit: (-hit[1], hit[0]))[:k]
    items = index.items(key for key, _ in best)
    return [(item["step"], score) for item, (_, score) in zip(items, best, strict=True)]


def test_a_large_session_ranks_parts_as_every_item_scored_exactly() -> None:
    """Over enough parts to be screened first, semantic search gives each item's exact best cosine, also after deletes and changes."""
    rng = random.Random(8)
    vocabulary = [f"w{n}" for n in range(400)]
    memory = Memory(
        [
            MemoryItem(step=i, text=" ".join(rng.choice(vocabulary) for _ in range(24)))
            for i in range(1700)
        ]
    )
    search_index(memory, parts=EmbedParts(chunk_words=2))
    embedder = _LatentEmbedder()
    memory.index_embeddings(embedder)
    queries = [" ".join(rng.choice(vocabulary) for _ in range(3)) for _ in range(12)]
    for round_ in range(2):
        for query in queries:
            for k in (1, 5, 40):
                hits = memory.search(query, k, mode="semantic", embedder=embedder)
                assert [(h.item["step"], h.score) for h in hits] == _ranked(
                    memory, embedder, query, k
                ), (round_, query, k)
        for step in range(0, 1700, 3):
            memory.delete_memory_item(step)
        for step in range(1, 600, 3):
            memory[step]["text"] = " ".join(rng.choice(vocabulary) for _ in range(24))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=40),
    st.integers(1, 6),
    st.booleans(),
)
def test_distinct_rows_holds_rows_equal_bit_for_bit_once(
    picks: list[int], width: int, signed_zero: bool
) -> None:
    """distinct_rows maps every row to the first row equal to it bit for bit (0.0 and -0.0 apart), in order."""
    pool = np.random.default_rng(width).standard_normal((6, width)).astype(np.float32)
    pool[5] = 0.0
    if signed_zero:
        pool[4] = -0.0
    matrix = pool[picks]
    distinct, place = distinct_rows(np, matrix)
    bits = matrix.view(np.uint32)
    firsts = [
        next(i for i in range(len(picks)) if (bits[i] == bits[row]).all())
        for row in range(len(picks))
    ]
    assert distinct.tolist() == sorted(set(firsts))
    assert [distinct[p] for p in place.tolist()] == firsts


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 700), st.integers(0, 2**32 - 1))
def test_the_screen_bounds_each_row_from_above(used: int, seed: int) -> None:
    """Screen.bounds gives one bound to each of the first ``used`` rows, at least the row's exact cosine with the query."""
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((used + 7, 64)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    query = rng.standard_normal(64).astype(np.float32)
    query /= np.linalg.norm(query)
    bound, _ = Screen(np, matrix, used).bounds(np, query, used)
    assert bound.shape == (used,)
    assert (bound >= cosines(matrix[:used], query)).all()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 5), max_size=4), min_size=1, max_size=30),
    st.booleans(),
    st.lists(st.integers(0, 29), max_size=5),
)
def test_vectors_taken_in_bulk_score_as_vectors_put_one_by_one(
    picks: list[list[int]], whole: bool, changed: list[int]
) -> None:
    """Stored vectors taken into an empty index in bulk score as those put one by one, float for float, and after changes alike."""
    rng = np.random.default_rng(len(picks))
    pool = rng.standard_normal((6, 8)).astype(np.float32)
    pool /= np.linalg.norm(pool, axis=1, keepdims=True)  # few rows: items repeat them
    vectors = {
        key: pool[rows[0]] if whole else pool[rows]
        for key, rows in enumerate(picks)
        if rows or not whole
    }
    items = {key: MemoryItem(step=key) for key in range(len(picks))}
    bulk, one_by_one = ItemVectors(EmbedParts()), ItemVectors(EmbedParts())
    embedder = HashingEmbedder(8)
    assert bulk.adopt(embedder, None, vectors, items) == len(vectors)
    one_by_one.table(embedder, None, items).put(list(vectors), list(vectors.values()))
    tables = [bulk.tables[None], one_by_one.tables[None]]
    queries = rng.standard_normal((3, 8)).astype(np.float32)
    for key in changed:  # the same writes after: an item changed, then given new vectors
        new = pool[[key % 6, (key + 1) % 6]]
        for table in tables:
            table.drop(key)
            table.put([key], [new])
    for query in queries / np.linalg.norm(queries, axis=1, keepdims=True):
        for limit in (None, 1, 3):
            assert tables[0].scores(query, limit) == tables[1].scores(query, limit)


@pytest.mark.parametrize(
    ("rows", "screened"),
    [(_item_vectors.SCREEN_ROWS - 1, False), (_item_vectors.SCREEN_ROWS, True)],
)
def test_a_table_is_screened_from_screen_rows_distinct_vectors(rows: int, screened: bool) -> None:
    """A table of fewer than SCREEN_ROWS distinct part vectors is scored without a screen; one of that many is screened."""
    matrix = np.random.default_rng(5).standard_normal((rows, 64)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    table = Vectors.of_rows("m", EmbedParts(), np.arange(rows) // 4, matrix)
    table.prepare(screen=True)
    assert (table.screen is not None) is screened


def test_a_first_screened_query_imports_no_more_of_numpy() -> None:
    """The first query scored through a screen imports no numpy module (np.union1d's first call imported numpy.ma: 13-25 ms of a 4 ms query)."""
    code = """
import sys
import numpy as np
from agents.memory._vectors import EmbedParts
from agents.memory.search._item_vectors import SCREEN_ROWS, Vectors
rng = np.random.default_rng(5)
centers = rng.standard_normal((64, 64))  # clustered, as texts are: the screen pays
picked = centers[rng.integers(0, 64, SCREEN_ROWS)]
matrix = (picked + 0.3 * rng.standard_normal((SCREEN_ROWS, 64))).astype(np.float32)
matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
table = Vectors.of_rows("m", EmbedParts.WHOLE, np.arange(SCREEN_ROWS), matrix)
table.prepare(screen=True)
assert table.screen is not None
for name in [name for name in sys.modules if name.startswith("numpy.ma")]:
    del sys.modules[name]  # imported by the set-up's np.unique: as a session opened without it
before = set(sys.modules)
query = matrix[7]
found = table.scores(query, 5, [3, 11])
assert table._screened(np, query, 5, [3, 11]) is not None  # the screen answered
table.screens = False
assert found == table.scores(query, 5, [3, 11])
print(sorted(name for name in set(sys.modules) - before if name.startswith("numpy")))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"


@settings(max_examples=25, deadline=None)
@given(
    st.integers(8, 160),
    st.lists(
        st.lists(st.lists(st.sampled_from(CORPUS), min_size=1, max_size=3), max_size=40),
        min_size=1,
        max_size=4,
    ),
    st.integers(1, 12),
)
def test_embedding_screens_a_table_once_it_holds_screen_rows_and_queries_rank_as_without(
    threshold: int, batches: list[list[list[str]]], limit: int
) -> None:
    """After each embedding a table is screened exactly when it holds SCREEN_ROWS distinct vectors, and its queries give the unscreened scores."""
    vectors = ItemVectors(EmbedParts())
    items: dict[int, MemoryItem] = {}
    queries = EMBEDDER(["click export to save the report as PDF", "email the host agent"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_item_vectors, "SCREEN_ROWS", threshold)
        for batch in batches:
            added = []
            for lines in batch:  # each item a few lines of the corpus, with its own number
                key = len(items)
                items[key] = MemoryItem(step=key, thought=f"item {key}", page="\n".join(lines))
                added.append((key, items[key]))
            vectors.added(added)
            table = vectors.embed(EMBEDDER, None, items, batch_size=16, progress=None)
            assert (table.screen is not None) is (table.used >= threshold)
            for query in queries:
                screened = table.scores(query, limit)
                table.screens = False
                every = table.scores(query, limit)
                table.screens = True
                assert screened == every


def test_a_screened_table_returns_every_item_tied_at_the_cut_with_its_exact_cosine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past 16,384 part vectors (the screen's threshold lowered to that), items that share their best part are all returned, scored as without the screen."""
    monkeypatch.setattr(_item_vectors, "SCREEN_ROWS", 16384)
    rng = np.random.default_rng(11)
    low = rng.standard_normal((17000, 8)) @ rng.standard_normal((8, 64))  # near a few directions
    rows = (low + 0.3 * rng.standard_normal((17000, 64))).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    query = rows[0]
    table = Vectors("m", 64, EmbedParts())
    blocks = [rows[1 + 17 * item : 18 + 17 * item] for item in range(999)]
    shared = [
        np.vstack([block[:8], query[None, :]]) for block in blocks[:30]
    ]  # 30 items hold the query
    table.put(list(range(999)), shared + blocks[30:])
    table.prepare()
    assert table.screen is not None
    for limit in (1, 5, 40):
        screened = table.scores(query, limit, among=[500, 998])
        table.screens = False
        whole = table.scores(query, limit, among=[500, 998])
        table.screens = True
        assert screened == whole
        assert set(range(30)) <= set(screened)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([-math.inf, -0.5, 0.0, 0.25, 0.5, 1.0]), max_size=40),
    st.integers(1, 45),
    st.randoms(use_true_random=False),
)
def test_ranked_top_picks_what_a_heap_picks_ties_in_key_order(
    values: list[float], limit: int, rng: random.Random
) -> None:
    """ranked_top gives the best limit (key, value) as heapq.nsmallest over (-value, key) does, ties and -inf included."""
    keys = list(range(0, 3 * len(values), 3))
    rng.shuffle(keys)
    sims = np.asarray(values, dtype=np.float32)
    pairs = [(key, float(sim)) for key, sim in zip(keys, sims.tolist(), strict=True)]
    want = heapq.nsmallest(
        limit, [hit for hit in pairs if hit[1] > -math.inf], key=lambda hit: (-hit[1], hit[0])
    )
    assert ranked_top(np.asarray(keys, dtype=np.int64), sims, limit) == want


def test_every_score_of_a_table_is_what_scores_gives_every_item() -> None:
    """Vectors.every_score holds each living item's best cosine, float for float as scores() gives it, and -inf for a dropped one."""
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((600, 16)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    table = Vectors("m", 16, EmbedParts())
    table.put(list(range(0, 400, 2)), [rows[3 * item : 3 * item + 3] for item in range(200)])
    table.drop(10)
    table.drop(20)
    keys, best = table.every_score(rows[7])
    every = dict(zip(keys.tolist(), best.tolist(), strict=True))
    living = {key: value for key, value in every.items() if value > -math.inf}
    assert living == table.scores(rows[7])
    assert set(every) - set(living) <= {10, 20, -1}
    assert len(living) == 198


# -- rank protection in the hybrid blend (issue 34, s38) -----------------------------------------

_SCORES = st.dictionaries(
    st.integers(0, 40), st.floats(0.01, 30.0, allow_nan=False), min_size=1, max_size=30
)
_COSINES = st.dictionaries(
    st.integers(0, 40), st.floats(-0.5, 1.0, allow_nan=False), min_size=1, max_size=30
)


def _best(scores: dict[int, float], n: int) -> list[int]:
    """Return the ``n`` best keys, ties to the smaller key, as search ranks."""
    return [key for key, _ in heapq.nsmallest(n, scores.items(), key=lambda hit: (-hit[1], hit[0]))]


@settings(max_examples=300, deadline=None)
@given(
    keyword=_SCORES,
    semantic=_COSINES,
    w=st.floats(0.05, 0.95),
)
def test_blend_keeps_every_item_both_sides_rank_among_their_best_five_in_its_best_five(
    keyword: dict[int, float], semantic: dict[int, float], w: float
) -> None:
    """With a keyword leader holding every query word, an item both sides rank among their best five is among the hybrid's best five, scores within 0..1."""
    scores = blend(keyword, keyword_scale(3000), semantic, w, 1.0)
    shared = set(_best(keyword, 5)) & set(_best(semantic, 5))
    assert shared <= set(_best(scores, 5))
    assert all(0.0 <= score <= 1.0 for score in scores.values())


@settings(max_examples=300, deadline=None)
@given(
    keyword=_SCORES,
    semantic=_COSINES,
    w=st.floats(0.05, 0.95),
    lead=st.floats(1.25, 4.0),
)
def test_blend_keeps_a_keyword_leader_holding_every_word_and_standing_out_in_its_best_five(
    keyword: dict[int, float], semantic: dict[int, float], w: float, lead: float
) -> None:
    """A keyword leader holding every query word, its runner-up at most 0.8 of its BM25, is among the hybrid's best five."""
    runner_up = max(keyword.values())
    keyword = {**keyword, 99: runner_up * lead}
    scores = blend(keyword, keyword_scale(3000), semantic, w, 1.0)
    assert 99 in _best(scores, 5)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([-np.inf, -np.inf, -np.inf, 0.0, 0.25, 0.5, 1.0]), max_size=60),
    st.one_of(st.none(), st.integers(1, 70)),
)
def test_top_rows_gives_the_best_positions_and_every_tie_with_the_last(
    values: list[float], limit: int | None
) -> None:
    """top_rows returns, ascending, the positions of the ``limit`` highest values and every value tied with the last, never a -inf."""
    sims = np.asarray(values, dtype=np.float32)
    valid = sorted((v for v in values if v > -np.inf), reverse=True)
    if limit is None or limit >= len(valid):
        expected = [i for i, v in enumerate(values) if v > -np.inf]
    else:
        expected = [i for i, v in enumerate(values) if v >= valid[limit - 1]]
    assert top_rows(sims, limit).tolist() == expected


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(8192, 20000),
    st.integers(1, 120),
    st.sampled_from([0.0, 0.1, 0.9]),
    st.integers(2, 1000),
)
def test_top_rows_of_a_long_array_gives_what_sorting_gives(
    seed: int, size: int, limit: int, unset: float, levels: int
) -> None:
    """Over 8,192 values (read first in a sample), top_rows still returns the positions of the limit highest and every tie with the last, never a -inf."""
    rng = np.random.default_rng(seed)
    sims = (rng.integers(0, levels, size) / levels).astype(np.float32)  # few levels: many ties
    sims[rng.random(size) < unset] = -np.inf
    valid = np.sort(sims[sims > -np.inf])[::-1]
    if limit >= len(valid):
        expected = np.flatnonzero(sims > -np.inf)
    else:
        expected = np.flatnonzero(sims >= valid[limit - 1])
    assert top_rows(sims, limit).tolist() == expected.tolist()


def _screen_table(
    rng: np.random.Generator,
    items: int,
    parts: int,
    spread: float,
    crowd: int,
    dropped: Sequence[int],
) -> tuple[Vectors, np.ndarray, np.ndarray]:
    """Return a table of ``items`` items of 1 to ``parts`` unit part vectors near 8 directions by ``spread`` (some shared, ``crowd`` of them near one direction), with ``dropped`` gone; its rows and that direction."""
    low = rng.standard_normal((items * parts, 8)) @ rng.standard_normal((8, 64))
    rows = (low + spread * rng.standard_normal((items * parts, 64))).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    near = rows[1]
    for item in range(
        crowd
    ):  # many items close to one direction: its best lie past the first scored
        rows[item * parts] = near + 0.05 * rng.standard_normal(64)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    blocks = []
    for item in range(items):
        count = int(rng.integers(1, parts + 1))
        block = rows[item * parts : item * parts + count].copy()
        if item % 7 == 3:
            block[-1] = rows[0]  # a part many items share: ties at the cut
        blocks.append(block)
    table = Vectors("m", 64, EmbedParts())
    table.put(list(range(items)), blocks)
    for key in dropped:
        table.drop(key)
    return table, rows, near


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1000, 3000),
    st.sampled_from([1, 4]),
    st.sampled_from([0.05, 0.3, 3.0]),
    st.sampled_from([0, 300]),
    st.sampled_from(["crowd", "row", "near", "random"]),
    st.integers(1, 20),
    st.sampled_from([0.0, 0.1, 1.0]),
    st.lists(st.integers(0, 2999), max_size=60),
    st.lists(st.integers(0, 2999), max_size=4),
)
def test_a_screened_query_returns_what_scoring_every_row_returns(
    seed: int,
    items: int,
    parts: int,
    spread: float,
    crowd: int,
    query_kind: str,
    limit: int,
    keeps: float,
    dropped: list[int],
    among: list[int],
) -> None:
    """Whether the sample says the screen pays or not (and whichever way it is forced), the screened table gives every row's exact answer: same keys, same floats, ties whole."""
    rng = np.random.default_rng(seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_item_vectors, "SCREEN_ROWS", 64)
        patch.setattr(_item_vectors, "SCREEN_KEEPS", keeps)
        table, rows, near = _screen_table(rng, items, parts, spread, crowd, dropped)
        table.prepare(screen=True)
        assert table.screen is not None
        if query_kind == "crowd":
            query = near
        elif query_kind == "row":
            query = rows[int(rng.integers(0, len(rows)))]
        else:
            scale = 0.3 if query_kind == "near" else 100.0
            query = rows[int(rng.integers(0, len(rows)))] + scale * rng.standard_normal(64)
            query = (query / np.linalg.norm(query)).astype(np.float32)
        screened = table.scores(query, limit, among=among)
        table.screens = False
        every = table.scores(query, limit, among=among)
    assert screened == every
