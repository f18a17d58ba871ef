"""The LangGraph adapter: KVMemoryStore and AsyncKVMemoryStore as LangGraph stores, on SQLite files and PostgreSQL.

What LangGraph's own store suites check (the generic ``BaseStore`` tests and
the SQLite store's), in this repository's words: put/get/delete, search with
filters and pagination, namespace scoping at label boundaries, namespace
listings, batches, vector search with index fields, TTL; and what kvmemory
adds: the namespace spelling, keyword and hybrid queries, sessions the CLI shows.
"""

from __future__ import annotations

import asyncio
import io
import math
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from agents.cli import main as cli_main
from agents.integrations.langgraph import (
    AsyncKVMemoryStore,
    KVMemoryStore,
    namespace_to_session,
    session_to_namespace,
)
from agents.memory import MemoryItem
from agents.memory.exceptions import (
    InvalidQueryError,
    InvalidSessionIdError,
    MissingDependencyError,
    SerializationError,
)
from agents.memory.search import Tokenizer
from agents.memory.stores import check_session_id, open_store
from agents.service import SessionService

DURABLE = ("sqlite", "postgres")


@pytest.fixture(params=DURABLE)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Return the URL of a fresh SQLite file or PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'agent.db'}"
    request.applymarker(pytest.mark.postgres)
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(url: str) -> Iterator[KVMemoryStore]:
    """Yield a KVMemoryStore on a fresh durable store."""
    with KVMemoryStore(url) as opened:
        yield opened


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def letters(texts: list[str]) -> list[list[float]]:
    """Embed texts as their letter counts (26 dimensions), deterministic and offline."""
    return [[float(text.lower().count(chr(97 + i))) + 0.01 for i in range(26)] for text in texts]


# -- the namespace spelling --------------------------------------------------------------

labels = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6)


@given(st.lists(labels, min_size=1, max_size=5).map(tuple))
def test_every_namespace_reads_back_from_its_session_id(namespace: tuple[str, ...]) -> None:
    """Any tuple of non-empty labels (dots, slashes, non-ASCII) spells a valid session id that reads back to it."""
    try:
        session_id = namespace_to_session(namespace)
    except InvalidSessionIdError:
        return  # too long to be a session id
    assert check_session_id(session_id) == session_id
    assert session_to_namespace(session_id) == namespace


def test_a_plain_namespace_is_its_labels_joined_by_dots() -> None:
    """("users", "ann", "memories") is the session users.ann.memories."""
    assert namespace_to_session(("users", "ann", "memories")) == "users.ann.memories"


def test_other_characters_are_written_as_hex_code_points() -> None:
    """A dot, a slash, an underscore, a first '-' and a non-ASCII letter are _<hex>_."""
    assert (
        namespace_to_session(("a.b", "c/d", "e_f", "-g", "中"))
        == "a_2e_b.c_2f_d.e_5f_f._2d_g._4e2d_"
    )


def test_a_namespace_prefix_is_a_session_id_prefix() -> None:
    """The id of a namespace starts with the id of its parent and a dot."""
    assert namespace_to_session(("u.1", "x")).startswith(namespace_to_session(("u.1",)) + ".")


@pytest.mark.parametrize("session_id", ["run_1", "a_41_", "a_02e_", "_2d", "a..b", "x_110000_"])
def test_an_id_no_namespace_spells_reads_as_none(session_id: str) -> None:
    """An id spelled otherwise than namespace_to_session writes maps to no namespace."""
    assert session_to_namespace(session_id) is None


def test_a_namespace_too_long_for_a_session_id_is_refused() -> None:
    """A spelling past 128 characters raises, naming the limit."""
    with pytest.raises(InvalidSessionIdError, match="the limit is 128"):
        namespace_to_session(("中" * 40,))


def test_an_empty_label_is_refused_by_the_spelling() -> None:
    """A namespace with an empty label has no session id."""
    with pytest.raises(InvalidSessionIdError, match="non-empty string"):
        namespace_to_session(("a", ""))


# -- put, get, delete --------------------------------------------------------------------


def test_put_then_get_gives_the_value_back(store: KVMemoryStore) -> None:
    """A put item reads back with its namespace, key, value and UTC times."""
    value = {"text": "prefers Danish", "tags": ["lang"], "meta": {"turn": 3, "ok": True}}
    store.put(("users", "ann"), "language", value)
    item = store.get(("users", "ann"), "language")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (("users", "ann"), "language", value)
    assert item.created_at.tzinfo is not None
    assert item.created_at == item.updated_at


def test_a_put_over_a_key_keeps_created_at(store: KVMemoryStore) -> None:
    """Replacing a value keeps the item's created_at and moves its updated_at on."""
    clock = Clock()
    store.operations.clock = clock
    store.put(("users",), "k", {"v": 1})
    clock.now += 60
    store.put(("users",), "k", {"v": 2})
    item = store.get(("users",), "k")
    assert item is not None
    assert item.value == {"v": 2}
    assert (item.updated_at - item.created_at).total_seconds() == 60


def test_get_of_an_unknown_key_or_namespace_is_none(store: KVMemoryStore) -> None:
    """A key never put, or put in another namespace, reads as None."""
    store.put(("a",), "k", {"v": 1})
    assert store.get(("a",), "other") is None
    assert store.get(("b",), "k") is None


def test_delete_removes_the_item(store: KVMemoryStore) -> None:
    """A deleted item reads as None and is no longer found; deleting it again is harmless."""
    store.put(("a",), "k", {"v": 1})
    store.delete(("a",), "k")
    store.delete(("a",), "k")
    assert store.get(("a",), "k") is None
    assert store.search(("a",)) == []


def test_items_survive_closing_the_store(url: str) -> None:
    """A durable store gives the items back after a reopen, created_at included."""
    with KVMemoryStore(url) as first:
        first.put(("users", "ann"), "k", {"v": 1})
        before = first.get(("users", "ann"), "k")
    with KVMemoryStore(url) as second:
        assert second.get(("users", "ann"), "k") == before


def test_labels_with_dots_are_refused_as_langgraph_refuses_them(store: KVMemoryStore) -> None:
    """LangGraph's methods refuse a label with a dot, and the root label 'langgraph', as every LangGraph store does."""
    with pytest.raises(InvalidNamespaceError):
        store.put(("the", "thing.about"), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph", "x"), "k", {"v": 1})


def test_labels_with_slashes_and_non_ascii_letters_work(store: KVMemoryStore) -> None:
    """A label with a slash, spaces or non-ASCII letters is stored and listed as given."""
    namespace = ("użytkownik/ann", "メモ", "a b")
    store.put(namespace, "k", {"v": 1})
    assert store.get(namespace, "k") is not None
    assert store.list_namespaces() == [namespace]


def test_an_unencodable_value_writes_nothing_of_its_batch(store: KVMemoryStore) -> None:
    """A batch whose value cannot be encoded raises and leaves the namespace as it was."""
    store.put(("a",), "kept", {"v": 1})
    with pytest.raises(SerializationError):
        store.batch([PutOp(("a",), "new", {"v": 2}), PutOp(("a",), "bad", {"v": object()})])
    assert [item.key for item in store.search(("a",))] == ["kept"]


# -- search with filters -----------------------------------------------------------------


@pytest.fixture
def products(store: KVMemoryStore) -> KVMemoryStore:
    """Return the store holding four products in ("shop",)."""
    docs = {
        "p1": {
            "color": "red",
            "price": 10,
            "stock": {"n": 5, "where": "a"},
            "tags": ["x"],
            "on": True,
        },
        "p2": {
            "color": "red",
            "price": 20,
            "stock": {"n": 0, "where": "b"},
            "tags": ["y"],
            "on": False,
        },
        "p3": {
            "color": "blue",
            "price": 30,
            "stock": {"n": 2, "where": "a"},
            "tags": ["x"],
            "on": True,
        },
        "p4": {
            "color": "green",
            "price": -5,
            "stock": {"n": 1, "where": "c"},
            "tags": [],
            "on": True,
        },
    }
    for key, value in docs.items():
        store.put(("shop",), key, value)
    return store


def keys(found: list[Any]) -> set[str]:
    """Return the keys of found items."""
    return {item.key for item in found}


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ({"color": "red"}, {"p1", "p2"}),
        ({"color": {"$eq": "blue"}}, {"p3"}),
        ({"color": {"$ne": "red"}}, {"p3", "p4"}),
        ({"price": {"$gt": 10}}, {"p2", "p3"}),
        ({"price": {"$gte": 10}}, {"p1", "p2", "p3"}),
        ({"price": {"$lt": 0}}, {"p4"}),
        ({"price": {"$lte": 10, "$gt": -10}}, {"p1", "p4"}),
        ({"price": {"$lt": math.inf}}, {"p1", "p2", "p3", "p4"}),
        ({"price": {"$lt": 10**100}}, {"p1", "p2", "p3", "p4"}),
        ({"price": {"$eq": math.nan}}, set()),
        ({"on": True}, {"p1", "p3", "p4"}),
        ({"on": False}, {"p2"}),
        ({"tags": ["x"]}, {"p1", "p3"}),
        ({"stock": {"where": "a"}}, {"p1", "p3"}),
        ({"stock.n": {"$gte": 2}}, {"p1", "p3"}),
        ({"color": "red", "price": {"$gt": 15}}, {"p2"}),
        ({"color": "public' OR '1'='1"}, set()),
        ({"no such field": 1}, set()),
    ],
)
def test_search_filters_as_langgraph_filters(
    products: KVMemoryStore, where: dict[str, Any], expected: set[str]
) -> None:
    """Each of LangGraph's filter forms keeps the items LangGraph's stores keep."""
    assert keys(products.search(("shop",), filter=where)) == expected


def test_an_unknown_filter_operator_is_refused(products: KVMemoryStore) -> None:
    """An operator LangGraph does not define raises, naming it."""
    with pytest.raises(InvalidQueryError, match=r"unknown operator '\$regex'"):
        products.search(("shop",), filter={"color": {"$regex": "r.*"}})


def test_search_pages_do_not_overlap(products: KVMemoryStore) -> None:
    """limit and offset cut one ordering into disjoint pages."""
    first = products.search(("shop",), limit=2)
    second = products.search(("shop",), limit=2, offset=2)
    assert len(first) == len(second) == 2
    assert keys(first).isdisjoint(keys(second))
    assert products.search(("shop",), offset=4) == []


def test_search_without_a_query_gives_the_newest_writes_first(store: KVMemoryStore) -> None:
    """Items come newest put first, across namespaces; a re-put moves an item to the front."""
    for key in ("a", "b", "c"):
        store.put(("n", key), key, {"v": key})
    store.put(("n", "a"), "a", {"v": "again"})
    assert [item.key for item in store.search(("n",))] == ["a", "c", "b"]


def test_search_scope_stops_at_label_boundaries(store: KVMemoryStore) -> None:
    """A prefix covers its namespace and those below, not a sibling sharing leading characters."""
    for namespace in [("foo",), ("foo", "child"), ("foobar",), ("Foo",), ("user_1",), ("userX1",)]:
        store.put(namespace, "k", {"v": 1})

    def found(prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        return {item.namespace for item in store.search(prefix, limit=100)}

    assert found(("foo",)) == {("foo",), ("foo", "child")}
    assert found(("fo",)) == set()
    assert found(("user_1",)) == {("user_1",)}
    assert len(found(())) == 6


# -- queries -----------------------------------------------------------------------------


def test_a_query_without_an_index_ranks_by_keywords(store: KVMemoryStore) -> None:
    """Beyond LangGraph: with no index, a query ranks by BM25 over the values, best first, with scores."""
    store.put(("docs",), "a", {"text": "the invoice format is PDF"})
    store.put(("docs",), "b", {"text": "the meeting is on Monday"})
    store.put(("docs",), "c", {"text": "invoice invoice numbers"})
    found = store.search(("docs",), query="invoice")
    assert [item.key for item in found] == ["c", "a"]
    assert found[0].score is not None
    assert found[0].score > found[1].score > 0


def test_a_query_with_an_index_ranks_by_cosine(url: str) -> None:
    """With LangGraph's index configuration, a query ranks by the cosine of the fields' vectors."""
    with KVMemoryStore(url, index={"dims": 26, "embed": letters, "fields": ["text"]}) as store:
        store.put(("docs",), "z", {"text": "zzzz zebra", "other": "aaaa"})
        store.put(("docs",), "a", {"text": "aaaa apple", "other": "zzzz"})
        found = store.search(("docs",), query="zz")
        assert [item.key for item in found] == ["z", "a"]
        assert found[0].score is not None
        assert found[0].score > found[1].score


def test_an_item_ranks_by_its_best_field(url: str) -> None:
    """Each index field gets a vector of its own, and an item ranks by its best one, as in LangGraph."""
    with KVMemoryStore(url, index={"dims": 26, "embed": letters, "fields": ["a", "b"]}) as store:
        store.put(("docs",), "one", {"a": "xxx", "b": "qqq"})
        store.put(("docs",), "two", {"a": "qqq", "b": "xxx"})
        found = store.search(("docs",), query="xxx")
        assert found[0].score == pytest.approx(found[1].score)
        assert found[0].score == pytest.approx(1.0, abs=1e-3)


def test_put_index_fields_override_the_configuration(url: str) -> None:
    """A put's own index fields are embedded instead of the store's; index=False items follow unscored."""
    with KVMemoryStore(url, index={"dims": 26, "embed": letters, "fields": ["nothing"]}) as store:
        store.put(("docs",), "own", {"title": "kkkk"}, index=["title"])
        store.put(("docs",), "none", {"title": "kkkk"}, index=False)
        found = store.search(("docs",), query="kkkk")
        assert [(item.key, item.score is None) for item in found] == [
            ("own", False),
            ("none", True),
        ]


def test_a_hybrid_query_blends_keywords_and_vectors(url: str) -> None:
    """query_mode='hybrid' ranks by kvmemory's blend of BM25 and cosine over the index fields."""
    config = {"dims": 26, "embed": letters, "fields": ["text"]}
    with KVMemoryStore(url, index=config, query_mode="hybrid") as store:  # type: ignore[arg-type]
        store.put(("docs",), "a", {"text": "invoice pdf"})
        store.put(("docs",), "b", {"text": "calendar"})
        assert store.search(("docs",), query="invoice")[0].key == "a"


def test_a_vector_query_mode_needs_an_index() -> None:
    """query_mode='semantic' without an index configuration is refused, naming the fix."""
    with pytest.raises(InvalidQueryError, match="needs an index configuration"):
        KVMemoryStore(query_mode="semantic")


def test_a_blank_query_lists_as_no_query(store: KVMemoryStore) -> None:
    """An empty or blank query is no query: the filtered items, newest first."""
    store.put(("a",), "k", {"v": 1})
    assert keys(store.search(("a",), query="  ")) == {"k"}


def test_a_query_without_words_lists_as_no_query_and_one_with_words_ranks(
    store: KVMemoryStore,
) -> None:
    """A keyword query with no word (punctuation, emoji) lists as no query; one with words ranks as Store.search_sessions."""
    store.put(("a",), "k", {"text": "the invoice format"})
    store.put(("a",), "m", {"text": "meeting on Monday"})
    store.put(("a", "b"), "n", {"text": "invoice numbers"})
    listed = [(item.namespace, item.key) for item in store.search(("a",), limit=10)]
    words = Tokenizer()

    @settings(max_examples=40)
    @given(st.lists(st.sampled_from(["?", "!", " ", "😀", "-", "invoice", "é", "meeting", "中"])))
    def check(parts: list[str]) -> None:
        query = "".join(parts)
        found = store.search(("a",), query=query, limit=10)
        if not query.strip() or not words(query):
            assert [(item.namespace, item.key) for item in found] == listed
            return
        ranked = store.store.search_sessions(query, 10, keys=["value"])
        assert [(item.key, item.score) for item in found] == [
            (hit.item["key"], hit.score) for hit in ranked
        ]

    check()


def test_pages_of_any_limit_and_offset_are_slices_of_the_whole_answer(
    store: KVMemoryStore,
) -> None:
    """search(limit=, offset=) for any sizes (sys.maxsize, past 64 bits) is the slice of the whole answer, with a query or without."""
    for n, text in enumerate(["invoice paid", "menu", "invoice total", "paid menu", "total"]):
        store.put(("a", "b" if n % 2 else "c"), f"k{n}", {"text": text, "n": n})
    sizes = st.sampled_from([0, 1, 2, 3, 7, 2**62, 2**63 - 1, 2**63, 10**30])

    @settings(max_examples=40)
    @given(
        query=st.sampled_from([None, "invoice", "paid menu"]),
        limit=sizes,
        offset=sizes,
        where=st.sampled_from([None, {"n": {"$gte": 1}}]),
    )
    def check(query: str | None, limit: int, offset: int, where: dict[str, Any] | None) -> None:
        whole = store.search(("a",), query=query, filter=where, limit=100)
        page = store.search(("a",), query=query, filter=where, limit=limit, offset=offset)
        assert [(i.namespace, i.key, i.score) for i in page] == [
            (i.namespace, i.key, i.score) for i in whole[offset : offset + limit]
        ]

    check()


# -- namespaces --------------------------------------------------------------------------


@pytest.fixture
def tree(store: KVMemoryStore) -> KVMemoryStore:
    """Return the store holding one item in each of LangGraph's example namespaces."""
    for namespace in [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
        ("users", "123"),
    ]:
        store.put(namespace, "k", {"v": 1})
    return store


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            {"prefix": ("a", "b")},
            [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")],
        ),
        ({"suffix": ("f",)}, [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]),
        ({"prefix": ("a",), "suffix": ("f",)}, [("a", "b", "f"), ("a", "c", "f")]),
        ({"prefix": ("a", "*", "f")}, [("a", "b", "f"), ("a", "c", "f")]),
        ({"suffix": ("*", "f")}, [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]),
        (
            {"prefix": ("a", "b"), "max_depth": 3},
            [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")],
        ),
        ({"max_depth": 1}, [("a",), ("b",), ("users",)]),
        ({"prefix": ("a", "b"), "limit": 2}, [("a", "b", "c"), ("a", "b", "d", "e")]),
        ({"prefix": ("a", "b"), "offset": 2}, [("a", "b", "d", "i"), ("a", "b", "f")]),
        ({"prefix": ("nothing",)}, []),
        ({"prefix": ("users", "12")}, []),
    ],
)
def test_list_namespaces_matches_as_langgraph(
    tree: KVMemoryStore, arguments: dict[str, Any], expected: list[tuple[str, ...]]
) -> None:
    """Prefix, suffix, '*' wildcards, max_depth, limit and offset select LangGraph's namespaces, sorted."""
    assert tree.list_namespaces(**arguments) == expected


def test_an_emptied_namespace_is_not_listed(store: KVMemoryStore) -> None:
    """A namespace whose last item was deleted no longer lists."""
    store.put(("a",), "k", {"v": 1})
    store.put(("b",), "k", {"v": 1})
    store.delete(("a",), "k")
    assert store.list_namespaces() == [("b",)]


def test_items_other_code_appended_to_a_namespace_are_not_found(store: KVMemoryStore) -> None:
    """An item appended to a namespace's session by other code is neither searched nor listed as a LangGraph item."""
    store.put(("notes",), "k", {"text": "invoice"})
    store.store.append("notes", [MemoryItem(step=1, value={"text": "invoice appended"})])
    assert [item.key for item in store.search(("notes",))] == ["k"]
    assert [item.key for item in store.search(("notes",), query="invoice")] == ["k"]


def test_sessions_no_namespace_spells_are_not_listed(url: str) -> None:
    """A store's other sessions (an agent run named run_1) are not namespaces."""
    with KVMemoryStore(url) as store:
        store.store.put_record("run_1", "k", {"v": 1})
        store.put(("a",), "k", {"v": 1})
        assert store.list_namespaces() == [("a",)]


# -- batches -----------------------------------------------------------------------------


def test_a_batch_reads_the_store_as_it_was_and_the_last_write_wins(store: KVMemoryStore) -> None:
    """Gets, searches and listings of a batch see the store before its writes; of two puts to a key, the last stays."""
    store.put(("t",), "k1", {"v": 1})
    results = store.batch(
        [
            PutOp(("t",), "k2", {"v": 2}),
            GetOp(("t",), "k1"),
            GetOp(("t",), "k2"),
            SearchOp(("t",), {"v": 1}),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("t",)),)),
            PutOp(("t",), "k2", {"v": 3}),
            PutOp(("t",), "k1", None),
        ]
    )
    assert results[0] is None
    assert results[1] is not None
    assert results[1].value == {"v": 1}
    assert results[2] is None
    assert [item.key for item in results[3]] == ["k1"]  # type: ignore[union-attr]
    assert results[4] == [("t",)]
    assert store.get(("t",), "k1") is None
    after = store.get(("t",), "k2")
    assert after is not None
    assert after.value == {"v": 3}


def test_a_batch_puts_many_namespaces(store: KVMemoryStore) -> None:
    """One batch of 200 puts over 4 namespaces stores every item."""
    store.batch([PutOp(("bulk", f"n{i % 4}"), f"k{i}", {"i": i}) for i in range(200)])
    assert len(store.search(("bulk",), limit=1000)) == 200
    assert len(store.list_namespaces(prefix=("bulk",))) == 4


# -- TTL -----------------------------------------------------------------------------------


@pytest.fixture
def timed(url: str) -> Iterator[tuple[KVMemoryStore, Clock]]:
    """Yield a store with a TTL configuration that reads time from a hand-moved clock."""
    with KVMemoryStore(url, ttl={"default_ttl": 10, "refresh_on_read": True}) as opened:
        clock = Clock()
        opened.operations.clock = clock
        yield opened, clock


def test_an_expired_item_is_not_read(timed: tuple[KVMemoryStore, Clock]) -> None:
    """Past its TTL an item is neither got nor found, and sweep_ttl deletes it."""
    store, clock = timed
    store.put(("a",), "k", {"v": 1})
    store.put(("a",), "forever", {"v": 2}, ttl=None)
    clock.now += 10 * 60 + 1
    assert store.get(("a",), "k") is None
    assert keys(store.search(("a",))) == {"forever"}
    assert store.sweep_ttl() == 1
    assert store.store.record_keys(namespace_to_session(("a",))) == ["forever"]


def test_a_read_starts_the_ttl_again(timed: tuple[KVMemoryStore, Clock]) -> None:
    """refresh_on_read: a get restarts the item's TTL; refresh_ttl=False does not."""
    store, clock = timed
    store.put(("a",), "read", {"v": 1})
    store.put(("a",), "unread", {"v": 2})
    clock.now += 9 * 60
    assert store.get(("a",), "read") is not None
    assert store.get(("a",), "unread", refresh_ttl=False) is not None
    clock.now += 2 * 60
    assert store.get(("a",), "read") is not None
    assert store.get(("a",), "unread") is None


def test_a_search_starts_the_ttl_again(timed: tuple[KVMemoryStore, Clock]) -> None:
    """Items a search returns get their TTL restarted, as gets do."""
    store, clock = timed
    store.put(("a",), "k", {"v": 1})
    clock.now += 9 * 60
    assert keys(store.search(("a",))) == {"k"}
    clock.now += 2 * 60
    assert keys(store.search(("a",))) == {"k"}


def test_a_put_ttl_overrides_the_default(timed: tuple[KVMemoryStore, Clock]) -> None:
    """ttl= on a put sets that item's TTL in minutes."""
    store, clock = timed
    store.put(("a",), "short", {"v": 1}, ttl=1)
    clock.now += 61
    assert store.get(("a",), "short") is None


# -- asyncio -----------------------------------------------------------------------------


def test_the_async_store_puts_gets_searches_and_lists(url: str) -> None:
    """AsyncKVMemoryStore answers LangGraph's awaitable methods on kvmemory's asyncio store."""

    async def run() -> None:
        async with AsyncKVMemoryStore(url) as store:
            await store.aput(("users", "ann"), "k", {"text": "invoice format"})
            item = await store.aget(("users", "ann"), "k")
            assert item is not None
            assert item.value == {"text": "invoice format"}
            assert keys(await store.asearch(("users",), query="invoice")) == {"k"}
            assert await store.alist_namespaces() == [("users", "ann")]
            await store.adelete(("users", "ann"), "k")
            assert await store.aget(("users", "ann"), "k") is None

    asyncio.run(run())


def test_the_async_store_ranks_by_its_index(url: str) -> None:
    """AsyncKVMemoryStore embeds and ranks with LangGraph's index configuration, as the sync store does."""

    async def run() -> None:
        config = {"dims": 26, "embed": letters, "fields": ["text"]}
        async with AsyncKVMemoryStore(url, index=config) as store:  # type: ignore[arg-type]
            await store.aput(("docs",), "z", {"text": "zzzz"})
            await store.aput(("docs",), "a", {"text": "aaaa"})
            found = await store.asearch(("docs",), query="zz")
            assert [item.key for item in found] == ["z", "a"]

    asyncio.run(run())


def test_the_async_store_refuses_a_sync_call_on_its_loop(url: str) -> None:
    """A sync method called on the event loop's thread raises instead of waiting on itself."""

    async def run() -> None:
        async with AsyncKVMemoryStore(url) as store:
            with pytest.raises(asyncio.InvalidStateError, match="await abatch"):
                store.put(("a",), "k", {"v": 1})

    asyncio.run(run())


def test_the_async_store_answers_sync_calls_from_other_threads(url: str) -> None:
    """A sync method called from another thread runs on the store's loop."""

    async def run() -> None:
        async with AsyncKVMemoryStore(url) as store:
            worker = threading.Thread(target=store.put, args=(("a",), "k", {"v": 1}))
            await asyncio.to_thread(lambda: (worker.start(), worker.join()))
            assert await store.aget(("a",), "k") is not None

    asyncio.run(run())


def test_the_sync_store_answers_awaited_calls(store: KVMemoryStore) -> None:
    """KVMemoryStore's awaitable methods work too (on a worker thread)."""

    async def run() -> None:
        await store.aput(("a",), "k", {"v": 1})
        assert await store.aget(("a",), "k") is not None

    asyncio.run(run())


# -- in a graph, and seen by kvmemory's tools --------------------------------------------


def test_a_graph_reads_and_writes_memories_the_cli_shows(tmp_path: Path) -> None:
    """A StateGraph compiled with the store remembers across runs, and kvmemory show lists the namespace's session."""
    from langgraph.config import get_store
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        user: str
        message: str
        reply: str

    def scripted_model(message: str, remembered: list[str]) -> tuple[str, str | None]:
        """Stand in for a chat model: learn 'I prefer X', answer with what is remembered."""
        if message.startswith("I prefer "):
            return "Noted.", message.removeprefix("I prefer ")
        return f"You prefer {', '.join(remembered) or 'nothing yet'}.", None

    def respond(state: State) -> dict[str, str]:
        store = get_store()
        namespace = ("users", state["user"], "memories")
        remembered = [item.value["preference"] for item in store.search(namespace)]
        reply, learned = scripted_model(state["message"], remembered)
        if learned is not None:
            store.put(namespace, "preference", {"preference": learned})
        return {"reply": reply}

    builder = StateGraph(State)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)
    db = tmp_path / "agent.db"
    with KVMemoryStore(f"sqlite://{db}") as store:
        graph = builder.compile(store=store)
        graph.invoke({"user": "ann", "message": "I prefer Danish", "reply": ""})
        out = graph.invoke({"user": "ann", "message": "What do I prefer?", "reply": ""})
    assert out["reply"] == "You prefer Danish."
    shown = io.StringIO()
    assert cli_main(["show", str(db), "--session", "users.ann.memories"], out=shown) == 0
    assert "Danish" in shown.getvalue()
    with open_store(str(db)) as opened:
        assert opened.sessions() == ["users.ann.memories"]


def test_the_session_service_serve_and_mcp_use_sees_the_memories(url: str) -> None:
    """The session service under kvmemory serve and kvmemory mcp lists a namespace's session and finds its items."""
    with KVMemoryStore(url) as store:
        store.put(("users", "ann", "memories"), "language", {"text": "prefers Danish"})
        service = SessionService(store.store)
        assert service.sessions() == ["users.ann.memories"]
        assert service.overview("users.ann.memories").items == 1
        hits = service.search_sessions("danish", 5)
        assert [hit.item["key"] for hit in hits] == ["language"]


@pytest.mark.parametrize("kind", ["jsonl", "memory"])
def test_the_other_stores_keep_langgraph_items(kind: str, tmp_path: Path) -> None:
    """On the JSONL and in-process stores too, items put, search, list and delete."""
    url = f"jsonl://{tmp_path / 'logs'}" if kind == "jsonl" else "memory://langgraph-test"
    with KVMemoryStore(url) as store:
        store.put(("users", "ann"), "a", {"text": "invoice format", "n": 1})
        store.put(("users", "bob"), "b", {"text": "calendar", "n": 2})
        assert keys(store.search(("users",), filter={"n": {"$gt": 1}})) == {"b"}
        assert keys(store.search(("users",), query="invoice")) == {"a"}
        assert store.list_namespaces() == [("users", "ann"), ("users", "bob")]
        store.delete(("users", "ann"), "a")
        assert store.list_namespaces() == [("users", "bob")]


def test_the_store_classes_name_the_extra_when_langgraph_is_missing() -> None:
    """Without langgraph, the package imports and KVMemoryStore raises naming kvmemory[langgraph]."""
    code = (
        "import sys; sys.modules['langgraph'] = None\n"
        "import agents.integrations.langgraph as lg\n"
        "print(lg.namespace_to_session(('a',)))\n"
        "try:\n    lg.KVMemoryStore\nexcept ImportError as exc:\n    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        "a",
        "MissingDependencyError Optional dependency 'langgraph' is missing; install it with: pip install 'kvmemory[langgraph]'.",
    ]
    assert MissingDependencyError.__name__ in out.stdout


def test_an_in_process_store_works_without_a_url() -> None:
    """KVMemoryStore() with no URL is an in-process store, as LangGraph's InMemoryStore()."""
    with KVMemoryStore() as store:
        store.put(("a",), "k", {"v": 1})
        assert store.get(("a",), "k") is not None
        assert repr(store).startswith("KVMemoryStore('memory://")


# -- against a plain model ---------------------------------------------------------------


class StoreAgainstDict(RuleBasedStateMachine):
    """KVMemoryStore on a SQLite file behaves as a dict of namespace -> key -> (value, created)."""

    namespaces = st.sampled_from([("a",), ("a", "b"), ("a", "b", "c"), ("ab",), ("x_y/z", "é")])

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.TemporaryDirectory()
        self.store = KVMemoryStore(f"sqlite://{self.folder.name}/model.db")
        self.clock = Clock()
        self.store.operations.clock = self.clock
        self.model: dict[tuple[str, ...], dict[str, tuple[dict[str, Any], float]]] = {}

    @rule(namespace=namespaces, key=st.sampled_from(["k1", "k2", "k 3"]), n=st.integers(0, 3))
    def put(self, namespace: tuple[str, ...], key: str, n: int) -> None:
        """Put a value; an existing key keeps its created time."""
        self.clock.now += 1
        value = {"n": n, "text": f"item {n}", "nested": {"n": n}}
        self.store.put(namespace, key, value)
        old = self.model.setdefault(namespace, {}).get(key)
        self.model[namespace][key] = (value, self.clock.now if old is None else old[1])

    @rule(namespace=namespaces, key=st.sampled_from(["k1", "k2", "k 3"]))
    def delete(self, namespace: tuple[str, ...], key: str) -> None:
        """Delete a key, there or not."""
        self.store.batch([PutOp(namespace, key, None)])
        self.model.get(namespace, {}).pop(key, None)

    @rule(namespace=namespaces, key=st.sampled_from(["k1", "k2", "k 3"]))
    def get(self, namespace: tuple[str, ...], key: str) -> None:
        """A get gives the model's value and created time."""
        [item] = self.store.batch([GetOp(namespace, key)])
        held = self.model.get(namespace, {}).get(key)
        if held is None:
            assert item is None
        else:
            assert item is not None
            assert item.value == held[0]
            assert item.created_at.timestamp() == held[1]

    @rule(prefix=st.sampled_from([(), ("a",), ("a", "b"), ("ab",)]), least=st.integers(0, 4))
    def search(self, prefix: tuple[str, ...], least: int) -> None:
        """A filtered search finds exactly the model's items under the prefix."""
        [found] = self.store.batch([SearchOp(prefix, {"nested.n": {"$gte": least}}, limit=100)])
        expected = {
            (namespace, key)
            for namespace, items in self.model.items()
            if namespace[: len(prefix)] == prefix
            for key, (value, _) in items.items()
            if value["n"] >= least
        }
        assert {(item.namespace, item.key) for item in found} == expected  # type: ignore[union-attr]

    @invariant()
    def namespaces_listed(self) -> None:
        """The namespaces listed are those holding items."""
        [listed] = self.store.batch([ListNamespacesOp(limit=100)])
        assert listed == sorted(namespace for namespace, items in self.model.items() if items)

    def teardown(self) -> None:
        self.store.close()
        self.folder.cleanup()


StoreAgainstDict.TestCase.settings = settings(
    max_examples=15, stateful_step_count=20, deadline=None
)
test_the_store_behaves_as_a_dict = StoreAgainstDict.TestCase
