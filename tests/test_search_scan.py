"""A memory's first keyword query answered from its items' terms joined (``_scan.TextScan``): the hits and scores of the postings."""

from __future__ import annotations

import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from search_checks import ITEMS, QUERY_WORDS, TEXT, item_dicts, nested

from agents.memory import Memory, MemoryItem
from agents.memory._item import item_fields
from agents.memory._text import field_texts, joined_item_terms, joined_spaced_terms
from agents.memory.search import Tokenizer, search_index
from agents.memory.search import _index as index_module
from agents.memory.search import _scan as scan_module
from agents.memory.search._bm25 import exhaustive_top
from agents.memory.search._postings import KeywordPostings
from agents.memory.search._scan import TextScan
from agents.memory.stores import open_store

# ASCII only and without NUL: the items are lowered and translated in one pass over their join.
ASCII_VALUE = nested(
    st.one_of(st.text(alphabet="ab cAB1_-.\n\t", max_size=30), st.integers(), st.none())
)
ASCII_ITEMS = item_dicts(ASCII_VALUE, min_size=1, max_size=30)


@pytest.fixture
def scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Answer the first query of any memory from its joined terms (not only of 2,048 items or more)."""
    monkeypatch.setattr(index_module, "_SCAN_ITEMS", 1)


@settings(max_examples=200, deadline=None)
@given(ITEMS, QUERY_WORDS, st.integers(1, 8), st.sampled_from([1, 2]), st.randoms())
def test_a_scan_ranks_as_the_postings_filed_item_by_item(
    data: list[dict[str, Any]],
    words: list[str],
    k: int,
    min_length: int,
    rng: random.Random,
) -> None:
    """The joined terms give the lengths, total, hits and float scores of the postings filed one by one, scored exhaustively."""
    np = pytest.importorskip("numpy")
    keys = sorted(rng.sample(range(10_000), len(data)))
    pairs = [(key, MemoryItem(**row)) for key, row in zip(keys, data, strict=True)]
    tokenize = Tokenizer(min_length=min_length)
    keyword = KeywordPostings()
    keyword.file(pairs, tokenize)  # one by one, as a query files a few items
    scan = TextScan.of(np, pairs, tokenize)
    assert scan is not None
    assert dict(zip(scan.keys, scan.lengths.tolist(), strict=True)) == keyword.lengths.of
    assert scan.total == keyword.total
    n_items = len(pairs) + 3  # items without text count too
    query, sizes, average = keyword.query_terms(words, None, n_items, tokenize)
    assert scan.top(words, n_items, k) == exhaustive_top(query, sizes.of, average, k)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(TEXT, st.text(alphabet="ab AB1_-.\n\t\x00\x1f", max_size=20)), max_size=8),
    st.sampled_from([1, 2]),
)
def test_joined_spaced_terms_split_into_each_texts_terms(texts: list[str], min_length: int) -> None:
    """Split at whitespace, the joined terms are each text's terms followed by a NUL, ASCII texts joined in one pass or not."""
    tokenize = Tokenizer(min_length=min_length)
    joined = joined_spaced_terms(tokenize, texts)
    assert joined is not None
    assert joined.split() == [term for text in texts for term in [*tokenize(text), "\x00"]]


@settings(max_examples=300, deadline=None)
@given(st.one_of(ITEMS, ASCII_ITEMS), st.sampled_from([1, 2]))
def test_joined_item_terms_split_into_each_items_terms(
    data: list[dict[str, Any]], min_length: int
) -> None:
    """Split at whitespace, the joined item terms are the terms of each item's field texts followed by a NUL, whatever the items' characters."""
    tokenize = Tokenizer(min_length=min_length)
    fields = [item_fields(MemoryItem(**row)) for row in data]
    joined = joined_item_terms(tokenize, fields)
    assert joined is not None
    assert joined.startswith(b" ")
    texts = ["\n".join([text for _, text in field_texts(one)]) for one in fields]
    expected = [term for text in texts for term in [*tokenize(text), "\x00"]]
    assert joined.decode().split() == expected


def test_joined_item_terms_of_a_stemming_tokenizer_are_none() -> None:
    """A stemmer may return any string: no join is made for it."""
    fields = [item_fields(MemoryItem(thought="clicked clicks"))]
    assert joined_item_terms(Tokenizer(stemmer=lambda word: word[:5]), fields) is None


@settings(max_examples=100, deadline=None)
@given(ASCII_ITEMS, QUERY_WORDS, st.integers(1, 8))
def test_a_scan_of_ascii_items_ranks_as_the_postings_filed_item_by_item(
    data: list[dict[str, Any]], words: list[str], k: int
) -> None:
    """Items joined in one ASCII pass give the hits and float scores of the postings filed one by one."""
    np = pytest.importorskip("numpy")
    pairs = [(key, MemoryItem(**row)) for key, row in enumerate(data)]
    tokenize = Tokenizer()
    keyword = KeywordPostings()
    keyword.file(pairs, tokenize)
    scan = TextScan.of(np, pairs, tokenize)
    assert scan is not None
    assert dict(zip(scan.keys, scan.lengths.tolist(), strict=True)) == keyword.lengths.of
    n_items = len(pairs) + 1
    query, sizes, average = keyword.query_terms(words, None, n_items, tokenize)
    assert scan.top(words, n_items, k) == exhaustive_top(query, sizes.of, average, k)


@settings(max_examples=100, deadline=None)
@given(st.one_of(ITEMS, ASCII_ITEMS), QUERY_WORDS, st.integers(1, 9))
def test_a_scan_finds_the_same_words_whatever_slice_it_reads_at_a_time(
    data: list[dict[str, Any]], words: list[str], size: int
) -> None:
    """Words found a few bytes of the join at a time give the lengths and ranking of one slice."""
    np = pytest.importorskip("numpy")
    pairs = [(key, MemoryItem(**row)) for key, row in enumerate(data)]
    whole = TextScan.of(np, pairs, Tokenizer())
    kept = scan_module._SLICE
    scan_module._SLICE = size
    try:
        sliced = TextScan.of(np, pairs, Tokenizer())
    finally:
        scan_module._SLICE = kept
    assert whole is not None
    assert sliced is not None
    assert sliced.lengths.tolist() == whole.lengths.tolist()
    assert sliced.top(words, len(pairs), 5) == whole.top(words, len(pairs), 5)


# Words of one byte to more than eight (a wide read and a byte by byte one), words that
# share their first bytes, and none.
KEPT_WORD = st.sampled_from(
    [
        "a",
        "b",
        "ab",
        "é",
        "abc",
        "abcd",
        "abcde",
        "abcdef",
        "abcdeg",
        "abcdefg",
        "abcdefgh",
        "abcdefghij",
        "1",
    ]
)
KEPT_TERMS = st.lists(
    st.lists(KEPT_WORD, max_size=6).map(" ".join)
    # Spaces a store's row could hold beside single ones: an item's terms cut all the same.
    | st.lists(KEPT_WORD, max_size=4).map(lambda words: "  ".join(words) + " "),
    min_size=1,
    max_size=20,
)
KEPT_QUERY = st.lists(
    st.sampled_from(
        [
            "a",
            "b",
            "ab",
            "ba",
            "é",
            "abc",
            "abcd",
            "abcde",
            "abcdef",
            "abcdefg",
            "abcdefgh",
            "abcdefghij",
            "abcdex",
            "1",
            "zz",
        ]
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(
    KEPT_TERMS,
    st.lists(KEPT_QUERY, min_size=1, max_size=3),
    st.sampled_from([2, 3, 1 << 20]),
    st.sampled_from([1, 12]),
)
def test_a_scan_of_kept_terms_ranks_as_the_postings_of_their_words(
    terms: list[str], queries: list[list[str]], size: int, compared: int
) -> None:
    """Terms as a store keeps them, with items without terms and runs of spaces, give the lengths, hits and float scores of their words filed one by one, query after query (a query's words picked by comparisons or by a table)."""
    np = pytest.importorskip("numpy")
    pairs = [(key, MemoryItem(terms=kept)) for key, kept in enumerate(terms)]
    keyword = KeywordPostings()
    keyword.file(pairs, str.split)  # type: ignore[arg-type]  # the words between spaces
    data = scan_module.kept_terms_joined(terms)
    assert data is not None
    kept = scan_module._SLICE
    scan_module._SLICE = size
    try:
        scan = TextScan(np, [key for key, _ in pairs], data, spaced=True)
    finally:
        scan_module._SLICE = kept
    lengths = dict(zip(scan.keys, scan.lengths.tolist(), strict=True))
    assert lengths == {key: keyword.lengths.of.get(key, 0) for key, _ in pairs}
    kept, scan_module._COMPARED = scan_module._COMPARED, compared
    try:
        for words in queries:
            query, sizes, average = keyword.query_terms(words, None, len(pairs), str.split)
            assert scan.top(words, len(pairs), 5) == exhaustive_top(query, sizes.of, average, 5)
    finally:
        scan_module._COMPARED = kept


def test_a_tokenizer_with_a_stemmer_is_not_scanned() -> None:
    """A stemmer's terms may be any string: the query files the items instead."""
    np = pytest.importorskip("numpy")
    pairs = [(0, MemoryItem(thought="clicked clicks"))]
    assert TextScan.of(np, pairs, Tokenizer(stemmer=lambda word: word[:5])) is None


def hits(memory: Memory, query: str, k: int = 5) -> list[tuple[Any, float]]:
    """Return the query's hits as ``(step, score)``."""
    return [(hit.item.get_value("step"), hit.score) for hit in memory.search(query, k)]


STEPS = st.lists(
    st.lists(st.sampled_from(["a", "b", "c", "d", "ab", "é"]), max_size=6), max_size=25
)
ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("query"), QUERY_WORDS),
        st.tuples(st.just("add"), st.lists(st.sampled_from(["a", "c", "zz"]), max_size=4)),
        st.tuples(st.just("delete"), st.integers(0, 30)),
        st.tuples(st.just("change"), st.integers(0, 30)),
    ),
    min_size=1,
    max_size=8,
)


# ACTIONS and loads of as many items, with other words (Memory.load).
LOADS = st.lists(
    st.one_of(
        ACTIONS.map(lambda actions: actions[0]),
        st.tuples(st.just("load"), st.lists(st.sampled_from(["a", "c", "zz"]), max_size=4)),
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(STEPS, ACTIONS)
def test_queries_and_changes_after_a_scanned_first_query_match_a_built_index(
    scanned: None, texts: list[list[str]], actions: list[tuple[str, Any]]
) -> None:
    """Queries, adds, deletes and field changes after a first query answered by a scan give the hits and scores of an index built ahead of any query."""
    rows = [{"step": i, "thought": " ".join(words)} for i, words in enumerate(texts)]
    memories = [Memory([MemoryItem(**row) for row in rows]) for _ in range(2)]
    search_index(memories[1]).build_ahead(wait=True)  # the model: filed before any query
    assert hits(memories[0], "a b") == hits(memories[1], "a b")
    for action, value in actions:
        for memory in memories:
            if action == "add":
                memory.add_memory_item(MemoryItem(step=len(memory), thought=" ".join(value)))
            elif action == "delete" and value < len(memory):
                memory.delete_memory_item(value)
            elif action == "change" and value < len(memory):
                memory.content[value].set_value("thought", "zz c")
        if action == "query":
            query = " ".join(value)
            assert hits(memories[0], query) == hits(memories[1], query)


def test_the_first_query_starts_the_build_and_later_ones_match_it(scanned: None) -> None:
    """A memory read whole is filed on another thread after its first query; the queries after give the same hits and scores as before."""
    rows = [{"step": i, "thought": f"opened report {i % 7} window {i % 3}"} for i in range(300)]
    memory = Memory([MemoryItem(**row) for row in rows])
    first = hits(memory, "report 3 window")
    index = search_index(memory)
    index.build_ahead(wait=True)  # the one the first query started
    assert not index.building()
    assert hits(memory, "report 3 window") == first
    assert first[0][0] == 3


@pytest.mark.parametrize("options", [{"keys": ["thought"]}, {"where": {"step": {"$lt": 400}}}])
def test_a_first_query_filing_many_items_in_bulk_ranks_as_filing_them_one_by_one(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    """A first query with keys or a filter files 1,024 items or more in bulk: the hits and scores of filing them one by one."""
    rows = [
        {"step": i, "thought": f"opened report {i % 7} window {i % 3}", "note": f"w{i % 11}"}
        for i in range(1100)
    ]
    queries = ("report 3 window", "w4 opened", "window 2")

    def found() -> list[list[tuple[Any, float]]]:
        memory = Memory([MemoryItem(**row) for row in rows])
        return [
            [(hit.item.get_value("step"), hit.score) for hit in memory.search(query, 6, **options)]
            for query in queries
        ]

    in_bulk = found()
    monkeypatch.setattr(index_module, "_BULK", 10**9)  # one by one
    assert in_bulk == found()
    assert all(in_bulk)


# -- a store's kept terms handed to the index (Store.read_memory, SearchIndex.take_terms) ------


def stored(folder: str, rows: list[dict[str, Any]], scheme: str = "sqlite") -> str:
    """Return the URL of a store in ``folder`` holding ``rows`` as the session ``s``."""
    url = f"{scheme}://{folder}/store" + (".db" if scheme == "sqlite" else "")
    if scheme == "memory":
        url = f"memory://{os.path.basename(folder)}"
    with open_store(url) as store:
        store.append("s", [MemoryItem(**row) for row in rows])
    return url


@settings(max_examples=60, deadline=None)
@given(ITEMS)
def test_the_terms_sqlite_keeps_are_the_tokenizers_terms_of_each_item(
    data: list[dict[str, Any]],
) -> None:
    """Split at spaces, each kept term string is the default tokenizer's terms of the item's field texts joined."""
    tokenize = Tokenizer()
    with tempfile.TemporaryDirectory() as folder, open_store(stored(folder, data)) as store:
        items, terms = store.read_with_terms("s")
    assert terms is not None
    texts = ["\n".join([text for _, text in field_texts(item_fields(item))]) for item in items]
    assert [kept.split(" ") if kept else [] for kept in terms] == [tokenize(t) for t in texts]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ITEMS, st.lists(QUERY_WORDS, min_size=1, max_size=4))
def test_a_memory_read_with_its_kept_terms_ranks_as_one_built_from_its_items(
    scanned: None, data: list[dict[str, Any]], queries: list[list[str]]
) -> None:
    """The first query from the kept terms, and those after, give the hits and float scores of a memory built from the same items."""
    rows = [{"step": i, **row} for i, row in enumerate(data)]
    with tempfile.TemporaryDirectory() as folder, open_store(stored(folder, rows)) as store:
        memory = store.read_memory("s")
    model = Memory([MemoryItem(**row) for row in rows])
    search_index(model).build_ahead(wait=True)
    for words in queries:
        assert hits(memory, " ".join(words)) == hits(model, " ".join(words))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.lists(KEPT_WORD.filter(str.isalnum), max_size=5), min_size=1, max_size=12),
    st.lists(
        st.tuples(st.sampled_from(["append", "delete"]), st.lists(KEPT_WORD, max_size=4)),
        max_size=4,
    ),
    st.lists(KEPT_QUERY, min_size=1, max_size=3),
)
def test_a_session_read_again_after_appends_and_deletes_ranks_as_one_built_in_ram(
    scanned: None,
    texts: list[list[str]],
    changes: list[tuple[str, list[str]]],
    queries: list[list[str]],
) -> None:
    """Read after each append or delete written to the store (closed and opened again between), a session's first and later queries give the hits and float scores of a memory built in RAM from the same items."""
    rows = [{"step": i, "thought": " ".join(words)} for i, words in enumerate(texts)]
    with tempfile.TemporaryDirectory() as folder:
        url = stored(folder, rows)
        for at, (change, words) in enumerate(changes):
            with open_store(url) as store:
                if change == "append":  # a step no other item holds
                    rows.append({"step": 100 + at, "thought": " ".join(words)})
                    store.append("s", [MemoryItem(**rows[-1])])
                elif rows:
                    gone = rows.pop(len(words) % len(rows))
                    assert store.delete_steps("s", [gone["step"]]) == 1
            with open_store(url) as store:
                memory = store.read_memory("s")
            model = Memory([MemoryItem(**row) for row in rows])
            search_index(model).build_ahead(wait=True)
            for query in queries:
                assert hits(memory, " ".join(query)) == hits(model, " ".join(query))


def test_read_memory_hands_the_kept_terms_to_the_index(
    scanned: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session read by Store.read_memory is scanned from the terms it kept, without reading the items' texts."""
    rows = [{"step": i, "thought": f"opened report {i % 7}"} for i in range(40)]
    with open_store(stored(str(tmp_path), rows)) as store:
        memory = store.read_memory("s")

    def unread(*args: Any) -> None:
        raise AssertionError("the items' texts were read")

    monkeypatch.setattr(scan_module, "joined_item_terms", unread)
    assert hits(memory, "report 3")[0][0] == 3


def test_read_memory_finds_the_kept_terms_words_as_it_reads(
    scanned: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store.read_memory finds the words of the kept terms with the read: the first query finds none, and ranks as a memory built from the items."""
    pytest.importorskip("numpy")
    rows = [{"step": i, "thought": f"opened report {i % 7} window {i % 3}"} for i in range(60)]
    with open_store(stored(str(tmp_path), rows)) as store:
        memory = store.read_memory("s")
    model = Memory([MemoryItem(**row) for row in rows])
    search_index(model).build_ahead(wait=True)

    def unmade(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the first query found the words")

    monkeypatch.setattr(TextScan, "__init__", unmade)
    assert hits(memory, "report 3 window") == hits(model, "report 3 window")
    assert hits(memory, "report 3")[0][0] == 3


def test_without_numpy_read_memory_keeps_no_terms_and_ranks_alike(
    scanned: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without numpy nothing is joined at the read (no query could scan it): the first query files the items, with the hits and scores of a memory built from them."""
    rows = [{"step": i, "thought": f"opened report {i % 7}"} for i in range(40)]
    model = Memory([MemoryItem(**row) for row in rows])
    search_index(model).build_ahead(wait=True)
    expected = hits(model, "report 3")
    monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy raises ImportError

    def unjoined(*args: Any) -> None:
        raise AssertionError("the kept terms were joined")

    monkeypatch.setattr(scan_module, "kept_terms_joined", unjoined)
    with open_store(stored(str(tmp_path), rows)) as store:
        items, terms = store.read_with_terms("s")
        memory = Memory(items)
    assert terms is not None
    assert search_index(memory).take_terms(items, terms) is False
    assert hits(memory, "report 3") == expected


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(STEPS, LOADS)
def test_changes_before_the_first_query_drop_the_kept_terms(
    scanned: None, texts: list[list[str]], actions: list[tuple[str, Any]]
) -> None:
    """Loads (as many items, other words), adds, deletes and field changes made after the read, before and between queries, give the hits and scores of a memory built from the items."""
    rows = [{"step": i, "thought": " ".join(words)} for i, words in enumerate(texts)]
    with tempfile.TemporaryDirectory() as folder, open_store(stored(folder, rows)) as store:
        read = store.read_memory("s")
    memories = [read, Memory([MemoryItem(**row) for row in rows])]
    search_index(memories[1]).build_ahead(wait=True)  # the model: filed before any query
    for action, value in actions:
        for memory in memories:
            if action == "load":
                words = " ".join(value)
                memory.load([MemoryItem(step=i, thought=words) for i in range(len(memory))])
            elif action == "add":
                memory.add_memory_item(MemoryItem(step=len(memory), thought=" ".join(value)))
            elif action == "delete" and len(memory):
                memory.delete_memory_item(value % len(memory))
            elif action == "change" and len(memory):
                memory.content[value % len(memory)].set_value("thought", "zz c")
        if action == "query":
            query = " ".join(value)
            assert hits(memories[0], query) == hits(memories[1], query)
    assert hits(memories[0], "zz c a") == hits(memories[1], "zz c a")


@pytest.mark.parametrize(
    ("case", "taken"),
    [
        ("as read", True),
        ("a stemming tokenizer", False),
        ("other items", False),
        ("one term string short", False),
        ("a tab in a term string", False),
        ("a NUL in a term string", False),
        ("a no-break space in a term string", False),
        ("filed already", False),
    ],
)
def test_take_terms_takes_only_terms_it_can_vouch_for(case: str, taken: bool) -> None:
    """take_terms keeps the terms of the memory's own items, for the default tokenizer, cut at single spaces, before any filing; else it keeps nothing."""
    items = [MemoryItem(step=i, thought=f"opened report {i}") for i in range(3)]
    terms = [f"{i} opened report {i}" for i in range(3)]
    memory = Memory(items)
    index = search_index(memory)
    if case == "a stemming tokenizer":
        index = search_index(memory, tokenizer=Tokenizer(stemmer=lambda word: word[:3]))
    elif case == "other items":
        items = [MemoryItem(**item_fields(item)) for item in items]
    elif case == "one term string short":
        terms = terms[:2]
    elif case == "a tab in a term string":
        terms[1] = "1 opened\treport 1"
    elif case == "a NUL in a term string":
        terms[1] = "1 opened\x00report 1"
    elif case == "a no-break space in a term string":
        terms[1] = "1 opened\u00a0report 1"
    elif case == "filed already":
        memory.search("report", keys=["thought"])
    assert index.take_terms(items, terms) is taken


@pytest.mark.parametrize("scheme", ["jsonl", "memory"])
def test_a_store_that_keeps_no_terms_reads_a_memory_all_the_same(
    scanned: None, tmp_path: Path, scheme: str
) -> None:
    """Without kept terms, Store.read_memory gives the memory of Memory(store.read(...)), searched alike."""
    rows = [{"step": i, "thought": f"opened report {i % 7}"} for i in range(40)]
    with open_store(stored(str(tmp_path), rows, scheme)) as store:
        assert store.read_with_terms("s")[1] is None
        memory = store.read_memory("s")
        model = Memory(store.read("s"))
    assert [item.to_dict() for item in memory.content] == [item.to_dict() for item in model.content]
    assert hits(memory, "report 3") == hits(model, "report 3")


def test_a_load_before_the_first_query_drops_the_kept_terms(scanned: None, tmp_path: Path) -> None:
    """Items loaded in place of those read are searched by their own terms, not the store's."""
    rows = [{"step": i, "thought": f"opened report {i}"} for i in range(5)]
    with open_store(stored(str(tmp_path), rows)) as store:
        memory = store.read_memory("s")
    memory.load([MemoryItem(step=i, thought=f"closed window {i}") for i in range(5)])
    assert hits(memory, "report") == []
    assert hits(memory, "window 3")[0][0] == 3
