"""The keyword index built ahead on another thread: the same hits and scores as a query-built one, whatever changes meanwhile."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from search_checks import TEXT, item_dicts, nested

from agents.memory import ArgumentTypeError, Memory, MemoryItem
from agents.memory.search import HashingEmbedder, SearchIndex, Tokenizer, search_index
from agents.memory.search._bm25 import Ranker
from agents.memory.search._bulk import file_in_bulk
from agents.memory.search._postings import file_items
from agents.memory.stores import StoredMemory, open_memory, open_store

WORDS = [f"w{i}" for i in range(40)] + ["invoice", "report", "chart", "window", "dialog"]
QUERIES = ["invoice report", "w1 w2 w3", "chart window dialog w7", "w0", "report w39 w5"]


def rows(n: int, seed: int = 1) -> list[dict[str, Any]]:
    """Return ``n`` steps of a few fields of words drawn from a small vocabulary (so some words are in hundreds of steps)."""
    rng = random.Random(seed)
    return [
        {
            "step": i,
            "thought": " ".join(rng.choices(WORDS, k=rng.randint(3, 12))),
            "action": {"name": rng.choice(WORDS), "args": [rng.choice(WORDS)]},
            "observation": " ".join(rng.choices(WORDS, k=rng.randint(0, 20))),
        }
        for i in range(n)
    ]


def answers(memory: Memory, **options: Any) -> list[list[tuple[Any, float, tuple[str, ...]]]]:
    """Return every query's hits as ``(step, score, fields)``."""
    return [
        [
            (hit.item.get_value("step"), hit.score, hit.fields)
            for hit in memory.search(q, 8, **options)
        ]
        for q in QUERIES
    ]


class Gate(Mapping[str, str]):
    """A field value whose texts are read only once the gate is opened: it holds a build ahead mid-way."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.armed = False  # until a build is started, reading it does not wait
        self.reached = threading.Event()
        self.opened = threading.Event()

    def __getitem__(self, key: str) -> str:
        if key != "text":
            raise KeyError(key)
        return self.text

    def __iter__(self) -> Iterator[str]:
        if self.armed:
            self.reached.set()
            self.opened.wait(30)
        return iter(["text"])

    def __len__(self) -> int:
        return 1


def gated(n: int, at: int) -> tuple[list[dict[str, Any]], Gate]:
    """Return ``n`` steps, the one at ``at`` holding an open gate's twin, and a closed gate."""
    data = rows(n)
    gate = Gate("invoice gate w1")
    data[at]["page"] = gate
    return data, gate


def test_build_ahead_gives_the_hits_and_scores_of_an_index_built_by_a_query() -> None:
    """A memory whose index was built ahead answers every query as one whose first query built it."""
    ahead = Memory([MemoryItem(**row) for row in rows(600)])
    plain = Memory([MemoryItem(**row) for row in rows(600)])
    search_index(ahead).build_ahead(wait=True)
    assert answers(ahead) == answers(plain)
    assert answers(ahead, keys=["thought"]) == answers(plain, keys=["thought"])


def test_changes_made_while_the_build_runs_are_searched() -> None:
    """Items added, changed and deleted while a build ahead is held mid-way are searched as they are now."""
    data, gate = gated(600, 300)
    memory = Memory([MemoryItem(**row) for row in data])
    gate.armed = True
    search_index(memory).build_ahead()
    assert gate.reached.wait(30)
    memory.add_memory_item(MemoryItem(step=600, thought="invoice report invoice"))
    memory.content[10].set_value("thought", "chart chart window")  # read by the build already
    memory.content[500].set_value("thought", "w0 w0 w0")  # not read yet
    memory.delete_memory_item(20)
    gate.opened.set()
    final = [item.to_dict() for item in memory.content]
    plain = Memory([MemoryItem(**row) for row in final])
    assert answers(memory) == answers(plain)


def test_a_build_of_content_a_load_replaced_is_thrown_away() -> None:
    """A load while the build is held mid-way: queries rank the loaded items, not those the build read."""
    data, gate = gated(600, 100)
    memory = Memory([MemoryItem(**row) for row in data])
    gate.armed = True
    search_index(memory).build_ahead()
    assert gate.reached.wait(30)
    other = rows(400, seed=2)
    memory.load([MemoryItem(**row) for row in other])
    gate.opened.set()
    assert answers(memory) == answers(Memory([MemoryItem(**row) for row in other]))


def test_a_query_waits_for_the_build_in_flight() -> None:
    """A query made while the build is held gets the full answer once the build is let go."""
    data, gate = gated(600, 599)
    memory = Memory([MemoryItem(**row) for row in data])
    gate.armed = True
    search_index(memory).build_ahead()
    assert gate.reached.wait(30)
    found: list[Any] = []
    query = threading.Thread(target=lambda: found.append(answers(memory)))
    query.start()
    gate.opened.set()
    query.join(60)
    assert found == [answers(Memory([MemoryItem(**row) for row in data]))]


def test_semantic_hits_name_their_fields_before_any_keyword_query() -> None:
    """A semantic hit names the fields holding a query word, with or without a keyword query before it."""
    embedder = HashingEmbedder(32)
    fresh = Memory([MemoryItem(**row) for row in rows(50)])
    searched = Memory([MemoryItem(**row) for row in rows(50)])
    searched.search("invoice", 1)
    assert answers(fresh, mode="semantic", embedder=embedder) == answers(
        searched, mode="semantic", embedder=embedder
    )
    assert any(
        hit[2] for hits in answers(fresh, mode="semantic", embedder=embedder) for hit in hits
    )


def test_a_reopened_session_is_searched_as_the_items_it_holds(tmp_path: Path) -> None:
    """Written, changed and closed, then reopened with its index built ahead: the hits of a plain memory of its items."""
    url = f"jsonl://{tmp_path}/logs"
    with open_memory(url, "s", index_ahead=True) as memory:
        memory.add_memory_items([MemoryItem(**row) for row in rows(600)])
        memory.search("invoice", 3)
        memory.content[5].set_value("thought", "invoice invoice report")
        memory.delete_memory_item(7)
    with open_memory(url, "s", index_ahead=True) as memory:
        plain = Memory([MemoryItem(**item.to_dict()) for item in memory.content])
        assert answers(memory) == answers(plain)


@pytest.mark.parametrize("scheme", ["jsonl", "sqlite"])
def test_a_second_handle_writing_while_the_first_searches(tmp_path: Path, scheme: str) -> None:
    """Another handle appends while the first, its index built ahead, searches; after a refresh it ranks every item."""
    url = f"{scheme}://{tmp_path}/store" + (".db" if scheme == "sqlite" else "")
    embedder = HashingEmbedder(32)
    with open_store(url) as store:
        store.append("s", [MemoryItem(**row) for row in rows(600)])
    with open_memory(url, "s", index_ahead=True) as first, open_memory(url, "s") as second:
        extra = rows(200, seed=3)

        def write() -> None:
            for at in range(0, 200, 20):
                second.add_memory_items([MemoryItem(**row) for row in extra[at : at + 20]])

        writer = threading.Thread(target=write)
        writer.start()
        for _ in range(3):
            first.search("invoice report", 5, mode="hybrid", embedder=embedder)
            first.search("w1 w2", 5, keys=["thought"])
        writer.join(60)
        first.refresh()
        with open_memory(url, "s", index_ahead=False) as fresh:
            for options in ({"keys": ["thought"]}, {"mode": "hybrid", "embedder": embedder}):
                assert answers(first, **options) == answers(fresh, **options)


def test_a_large_session_is_opened_with_its_index_building(tmp_path: Path) -> None:
    """Opening a session of 2,048 items or more starts the build ahead; index_ahead=False does not."""
    url = f"sqlite://{tmp_path}/s.db"
    with open_store(url) as store:
        store.append("s", [MemoryItem(**row) for row in rows(2048)])
    with open_memory(url, "s") as memory:
        assert any(isinstance(o, SearchIndex) for o in memory.observers)
    with open_memory(url, "s", index_ahead=False) as memory:
        assert not any(isinstance(o, SearchIndex) for o in memory.observers)


def test_index_ahead_takes_a_bool_or_none(tmp_path: Path) -> None:
    """index_ahead='yes' is refused, naming the argument and the values it takes."""
    with (
        open_store(f"sqlite://{tmp_path}/s.db") as store,
        pytest.raises(
            ArgumentTypeError, match=r"index_ahead=\.\.\.\) takes True, False or None, got 'yes'"
        ),
    ):
        StoredMemory(store, "s", index_ahead="yes")  # type: ignore[arg-type]


def test_the_build_makes_every_common_terms_arrays_which_rank_after_changes() -> None:
    """The build ahead makes the arrays of every term 256 items or more hold; after changes they rank as a query-built index."""
    memory = Memory([MemoryItem(**row) for row in rows(1200)])
    index = search_index(memory)
    index.build_ahead(wait=True)
    plain = Memory([MemoryItem(**row) for row in rows(1200)])
    plain.search("invoice", 1)
    common = {
        term
        for term, posting in search_index(plain)._keyword.postings.items()
        if len(posting) >= 256
    }
    ranker = index._keyword.ranker
    assert ranker is not None
    assert ranker.ahead is not None
    assert set(ranker.ahead.made) == common
    assert len(common) > 5
    for at in range(0, 60, 3):
        memory.content[at].set_value("thought", "invoice report w1 w1")
    memory.delete_items([memory.content[at] for at in range(100, 140)])
    memory.add_memory_items([MemoryItem(**row) for row in rows(30, seed=5)])
    changed = Memory([MemoryItem(**item.to_dict()) for item in memory.content])
    assert answers(memory) == answers(changed)


def embedded_store(tmp_path: Path, embedder: HashingEmbedder, url: str | None = None) -> str:
    """Return the URL of a store (default SQLite) holding session ``s`` of 600 steps, embedded by ``embedder``."""
    url = url or f"sqlite://{tmp_path}/s.db"
    with open_store(url) as store:
        store.append("s", [MemoryItem(**row) for row in rows(600)])
        store.index_embeddings("s", embedder)
    return url


def test_a_reopened_session_has_its_stored_vectors_taken_ahead(tmp_path: Path) -> None:
    """Opened with its index built ahead, a session holds the store's vectors before any semantic query, ranked alike."""
    embedder = HashingEmbedder(32)
    url = embedded_store(tmp_path, embedder)
    with open_memory(url, "s", index_ahead=True) as memory:
        index = search_index(memory)
        index.build_ahead(wait=True)
        assert index.missing_vectors(None) == []
        assert index.vector_model() == embedder.name
        with open_memory(url, "s", index_ahead=False) as plain:
            for mode in ("semantic", "hybrid"):
                assert answers(memory, mode=mode, embedder=embedder) == answers(
                    plain, mode=mode, embedder=embedder
                )


class HeldSource:
    """Reads a store's vectors for a memory's items, as a StoredMemory's build does, once let go."""

    def __init__(self, url: str, memory: Memory) -> None:
        self.url = url
        self.reached = threading.Event()
        self.opened = threading.Event()
        with open_store(url) as store:
            records = store.records("s")
        held = search_index(memory).keys_of(memory.content)
        self.key_of = {
            r.seq: held[id(item)] for r, item in zip(records, memory.content, strict=True)
        }

    def __call__(self, parts: Any) -> tuple[HashingEmbedder, dict[int, Any]]:
        self.reached.set()
        self.opened.wait(30)
        return self.read(parts)

    def read(self, parts: Any) -> tuple[HashingEmbedder, dict[int, Any]]:
        """Read the vectors cut as ``parts`` cuts items now, without waiting."""
        embedder = HashingEmbedder(32)
        with open_store(self.url) as store:
            stored = store.read_vectors("s", embedder, parts=parts)
        return embedder, {self.key_of[seq]: vector for seq, vector in stored.items()}


def stored_memory(url: str) -> Memory:
    """Return a plain memory of session ``s``'s items, in order."""
    with open_store(url) as store:
        return Memory(store.read("s"))


def test_vectors_read_ahead_leave_out_items_changed_meanwhile(tmp_path: Path) -> None:
    """An item changed while the vectors are read ahead is not given its old vector: it is ranked by its new text."""
    embedder = HashingEmbedder(32)
    url = embedded_store(tmp_path, embedder)
    memory = stored_memory(url)
    source = HeldSource(url, memory)
    index = search_index(memory)
    index.build_ahead(vectors=source)
    assert source.reached.wait(30)
    memory.content[10].set_value("thought", "invoice report chart")
    memory.content[11].set_value("observation", "w1 w2 w3 dialog")
    source.opened.set()
    index.build_ahead(wait=True)
    assert sorted(index.missing_vectors(None)) == sorted(
        index.keys_of(memory.content[10:12]).values()
    )
    plain = Memory([MemoryItem(**item.to_dict()) for item in memory.content])
    assert answers(memory, mode="semantic", embedder=embedder) == answers(
        plain, mode="semantic", embedder=embedder
    )


def test_vectors_read_ahead_of_content_a_load_replaced_are_thrown_away(tmp_path: Path) -> None:
    """A load while the vectors are read ahead: none of them is taken, and queries rank the loaded items."""
    embedder = HashingEmbedder(32)
    url = embedded_store(tmp_path, embedder)
    memory = stored_memory(url)
    source = HeldSource(url, memory)
    index = search_index(memory)
    index.build_ahead(vectors=source)
    assert source.reached.wait(30)
    other = rows(400, seed=2)
    memory.load([MemoryItem(**row) for row in other])
    source.opened.set()
    for thread in threading.enumerate():
        if thread.name == "kvmemory-index-ahead":
            thread.join(30)
    assert len(index.missing_vectors(None)) == 400
    plain = Memory([MemoryItem(**row) for row in other])
    assert answers(memory, mode="semantic", embedder=embedder) == answers(
        plain, mode="semantic", embedder=embedder
    )


def test_no_vectors_are_read_ahead_once_a_semantic_query_embedded_every_item() -> None:
    """A semantic query made while the build is held embeds every item: the build then reads no vectors."""
    data, gate = gated(600, 300)
    memory = Memory([MemoryItem(**row) for row in data])
    asked: list[Any] = []
    gate.armed = True
    search_index(memory).build_ahead(vectors=lambda parts: asked.append(parts))
    assert gate.reached.wait(30)
    gate.armed = False  # the query reads the gated item's text without waiting
    memory.search("invoice", 3, mode="semantic", embedder=HashingEmbedder(32))
    gate.opened.set()
    search_index(memory).build_ahead(wait=True)
    for thread in threading.enumerate():
        if thread.name == "kvmemory-index-ahead":
            thread.join(30)
    assert asked == []


ITEMS = item_dicts(
    nested(st.one_of(TEXT, st.integers(), st.floats(allow_nan=False), st.none())), max_size=40
)


@settings(max_examples=150, deadline=None)
@given(ITEMS, st.randoms(use_true_random=False), st.sampled_from([1, 2]), st.integers(1, 50))
def test_filing_in_bulk_gives_the_postings_of_filing_item_by_item(
    data: list[dict[str, Any]], rng: random.Random, min_length: int, step: int
) -> None:
    """Items filed in bulk, a slice of ``step`` at a time, hold the postings (keys and terms in order), lengths, texts and total of filing one by one."""
    np = pytest.importorskip("numpy")
    keys = rng.sample(range(10_000), len(data))
    pairs = [(key, MemoryItem(**row)) for key, row in zip(keys, data, strict=True)]
    tokenize = Tokenizer(min_length=min_length)
    postings: dict[str, dict[int, int]] = {}
    docs: dict[int, Any] = {}
    lengths: dict[int, int] = {}
    filed, total = file_items(pairs, tokenize, (postings, docs, lengths), None, None)
    bulk = file_in_bulk(np, pairs, tokenize, step=step)
    assert bulk is not None
    assert (bulk.keys, bulk.docs, bulk.lengths, bulk.total) == (filed, docs, lengths, total)
    assert [(term, list(p.items())) for term, p in bulk.postings.items()] == [
        (term, list(p.items())) for term, p in postings.items()
    ]


def test_a_tokenizer_with_a_stemmer_is_filed_item_by_item() -> None:
    """Filing in bulk declines a stemmer's terms (any string): the build files those items one by one."""
    np = pytest.importorskip("numpy")
    pairs = [(0, MemoryItem(thought="clicked clicks"))]
    assert file_in_bulk(np, pairs, Tokenizer(stemmer=lambda word: word[:5])) is None


def test_common_arrays_from_a_bulk_filing_equal_those_read_from_the_postings() -> None:
    """The arrays of the terms 256 items hold, made from a bulk filing's arrays, are those made from its postings."""
    np = pytest.importorskip("numpy")
    pairs = [(3 * i + 1, MemoryItem(**row)) for i, row in enumerate(rows(900))]
    bulk = file_in_bulk(np, pairs, Tokenizer())
    assert bulk is not None
    made = []
    for source in (bulk, None):
        ranker = Ranker(np)
        ranker.next_generation()
        ranker.indexed(bulk.keys)
        ranker.build_common(bulk.postings, bulk.lengths, source)
        assert ranker.ahead is not None
        made.append(ranker.ahead.made)
    assert made[0]
    assert list(made[0]) == list(made[1])
    for term, impacts in made[0].items():
        other = made[1][term]
        for name in ("rows", "tf", "dl", "ordered"):
            assert np.array_equal(getattr(impacts, name), getattr(other, name)), (term, name)
        assert impacts.contrib is not None
        assert other.contrib is not None
        assert np.array_equal(impacts.contrib[2], other.contrib[2])


@pytest.mark.parametrize("scheme", ["sqlite", "postgres"])
def test_semantic_and_hybrid_go_to_the_store_while_the_build_reads_vectors(
    tmp_path: Path, scheme: str, request: pytest.FixtureRequest
) -> None:
    """While a build ahead still reads the stored vectors, the store ranks a StoredMemory's semantic and hybrid queries: no wait, same hits."""
    embedder = HashingEmbedder(32)
    given_url = str(request.getfixturevalue("postgres_url")) if scheme == "postgres" else None
    url = embedded_store(tmp_path, embedder, given_url)
    with (
        open_memory(url, "s", index_ahead=False) as memory,
        open_memory(url, "s", index_ahead=False) as plain,
    ):
        source = HeldSource(url, memory)
        index = search_index(memory)
        index.build_ahead(vectors=source)
        assert source.reached.wait(30)
        for mode in ("semantic", "hybrid"):
            got = answers(memory, mode=mode, embedder=embedder)
            want = answers(plain, mode=mode, embedder=embedder)
            assert [[(s, f) for s, _, f in hits] for hits in got] == [
                [(s, f) for s, _, f in hits] for hits in want
            ]
            scores = [x for hits in got for _, x, _ in hits]
            assert scores == pytest.approx([x for hits in want for _, x, _ in hits], rel=1e-6)
        assert len(index.missing_vectors(None)) == 600  # the store answered: none read into RAM
        assert index.building()
        source.opened.set()
        index.build_ahead(wait=True)
        assert not index.building()
        assert index.missing_vectors(None) == []
        assert answers(memory, mode="hybrid", embedder=embedder) == answers(
            plain, mode="hybrid", embedder=embedder
        )


def test_a_build_ahead_stops_at_its_next_slice_while_paused() -> None:
    """While a query answered elsewhere holds build_paused, the build waits at its next slice; let go, it builds the same index."""
    data, gate = gated(3000, 10)
    memory = Memory([MemoryItem(**row) for row in data])
    plain = Memory([MemoryItem(**row) for row in data])
    index = search_index(memory)
    gate.armed = True
    index.build_ahead()
    assert gate.reached.wait(30)  # mid-way through its first slice
    pause = index._pause
    with index.build_paused():
        gate.opened.set()
        assert pause.parked.wait(30)
        assert index.building()
    index.build_ahead(wait=True)
    assert not index.building()
    assert not pause.parked.is_set()
    assert answers(memory) == answers(plain)


def test_a_search_that_needs_the_build_from_within_a_paused_query_lifts_its_own_hold() -> None:
    """A search in RAM made inside build_paused (as an embedder or filter might) waits for the build with its thread's hold lifted, so both finish."""
    data, gate = gated(3000, 10)
    memory = Memory([MemoryItem(**row) for row in data])
    plain = Memory([MemoryItem(**row) for row in data])
    index = search_index(memory)
    gate.armed = True
    index.build_ahead()
    assert gate.reached.wait(30)
    got: list[Any] = []

    def query() -> None:
        with index.build_paused():
            gate.opened.set()
            assert index._pause.parked.wait(30)
            got.append(answers(memory))  # needs the keyword index the paused build makes

    worker = threading.Thread(target=query, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the query and the build wait for each other"
    assert got == [answers(plain)]
    assert index._pause.holds == 0


def test_a_query_the_store_ranks_holds_the_build_while_it_runs(tmp_path: Path) -> None:
    """A StoredMemory's semantic or hybrid query ranked by the store while the build runs holds the build for its whole ranking."""
    embedder = HashingEmbedder(32)
    url = embedded_store(tmp_path, embedder)
    with (
        open_memory(url, "s", index_ahead=False) as memory,
        open_memory(url, "s", index_ahead=False) as plain,
    ):
        source = HeldSource(url, memory)
        index = search_index(memory)
        holds: list[int] = []

        class Watching(HashingEmbedder):
            """Notes, as the store embeds the query, how many queries hold the build."""

            def __call__(self, texts: Any, /) -> Any:
                holds.append(index._pause.holds)
                return super().__call__(texts)

        index.build_ahead(vectors=source)
        assert source.reached.wait(30)
        for mode in ("semantic", "hybrid"):
            got = memory.search("invoice report", 5, mode=mode, embedder=Watching(32))
            want = plain.search("invoice report", 5, mode=mode, embedder=embedder)
            assert [hit.item["step"] for hit in got] == [hit.item["step"] for hit in want]
        assert holds
        assert set(holds) == {1}
        assert index._pause.holds == 0
        source.opened.set()
        index.build_ahead(wait=True)
        assert not index.building()


def test_a_keyword_query_the_store_ranks_holds_the_build_while_it_runs(tmp_path: Path) -> None:
    """A StoredMemory's keyword query, ranked by the store while the build runs, holds the build for each of its statements."""
    url = embedded_store(tmp_path, HashingEmbedder(32))
    with (
        open_memory(url, "s", index_ahead=False) as memory,
        open_memory(url, "s", index_ahead=False) as plain,
    ):
        source = HeldSource(url, memory)
        index = search_index(memory)
        holds: list[int] = []
        connection = memory.store.backend._file.connection
        index.build_ahead(vectors=source)
        assert source.reached.wait(30)
        connection.set_trace_callback(lambda _: holds.append(index._pause.holds))
        got = memory.search("invoice report", 5)
        connection.set_trace_callback(None)
        want = plain.search("invoice report", 5)
        assert [(hit.item["step"], hit.score) for hit in got] == [
            (hit.item["step"], hit.score) for hit in want
        ]
        assert holds
        assert set(holds) == {1}
        assert index._pause.holds == 0
        source.opened.set()
        index.build_ahead(wait=True)


def test_the_vectors_a_store_hands_over_are_filed_with_the_collector_paused(
    tmp_path: Path,
) -> None:
    """A session's stored vectors taken in bulk are filed with the collector paused (their rows are kept), and it is on again afterwards."""
    import gc

    embedder = HashingEmbedder(32)
    url = embedded_store(tmp_path, embedder)
    memory = stored_memory(url)
    seen: list[bool] = []

    class Watched(dict[int, Any]):
        """The vectors by key, noting whether the collector is on as each is read."""

        def __getitem__(self, key: int) -> Any:
            seen.append(gc.isenabled())
            return super().__getitem__(key)

    _, vectors = HeldSource(url, memory).read(search_index(memory).parts)
    assert search_index(memory).adopt_vectors(embedder, None, Watched(vectors)) == 600
    assert seen
    assert not any(seen)
    assert gc.isenabled()


@pytest.fixture
def held_build(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Hold every build ahead before it files a term, until the event is set (set at the end in any case)."""
    from agents.memory.search import _index

    release = threading.Event()
    built = _index.BuiltPostings

    def held(*args: Any) -> Any:
        release.wait(30)
        return built(*args)

    monkeypatch.setattr(_index, "BuiltPostings", held)
    yield release
    release.set()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def embedded_url(request: pytest.FixtureRequest, durable_url: Any, tmp_path: Path) -> str:
    """Return the URL of session ``s`` (600 steps embedded by ``HashingEmbedder(32)``) in each store that keeps vectors."""
    return embedded_store(tmp_path, HashingEmbedder(32), durable_url(request.param))


def test_a_session_opened_with_its_index_ahead_holds_its_stored_vectors_before_the_build(
    embedded_url: str, held_build: threading.Event
) -> None:
    """Opening a session whose store keeps vectors takes them all before the build ahead files a term."""
    with open_memory(embedded_url, "s", index_ahead=True) as memory:
        index = search_index(memory)
        assert index.building()
        assert index.missing_vectors(None) == []
        assert index.vector_model() == HashingEmbedder(32).name


def test_a_first_semantic_query_while_the_build_runs_is_answered_in_ram_as_a_warm_one(
    embedded_url: str, held_build: threading.Event
) -> None:
    """The first semantic query of a session just opened, its build held, is answered from its vectors in RAM: the hits of a warm query and of Memory.search."""
    embedder = HashingEmbedder(32)
    url = embedded_url
    plain = answers(stored_memory(url), mode="semantic", embedder=embedder)
    with open_memory(url, "s", index_ahead=True) as memory:
        asked: list[str] = []
        store_search = memory.store.search
        memory.store.search = lambda *a, **o: asked.append("store") or store_search(*a, **o)  # type: ignore[method-assign]  # noted, then ranked as before
        first = answers(memory, mode="semantic", embedder=embedder)
        assert search_index(memory).building()
        assert asked == []
        held_build.set()
        search_index(memory).build_ahead(wait=True)
        assert first == answers(memory, mode="semantic", embedder=embedder) == plain


def test_a_first_hybrid_query_while_the_build_runs_takes_its_cosines_from_ram(
    embedded_url: str, held_build: threading.Event
) -> None:
    """The first hybrid query of a session just opened, its build held: the store ranks the keyword side, scoring no vector; hits and scores are Memory.search's to the float."""
    embedder = HashingEmbedder(32)
    url = embedded_url
    plain = answers(stored_memory(url), mode="hybrid", embedder=embedder)
    with open_memory(url, "s", index_ahead=True) as memory, open_store(url) as other:
        asked: list[str] = []
        store = memory.store
        store.search = lambda *a, **o: asked.append("search") or other.search(*a, **o)  # type: ignore[method-assign]  # noted, then ranked by another handle
        store.read_vectors = lambda *a, **o: asked.append("vectors") or other.read_vectors(*a, **o)  # type: ignore[method-assign]  # noted, then read as before
        first = answers(memory, mode="hybrid", embedder=embedder)
        assert search_index(memory).building()
        assert asked == []  # no store search, no vector read: the keyword side only
        held_build.set()
        search_index(memory).build_ahead(wait=True)
        assert first == answers(memory, mode="hybrid", embedder=embedder) == plain


def test_stored_memory_parts_cut_the_index_before_the_vectors_are_read(
    tmp_path: Path, held_build: threading.Event
) -> None:
    """open_memory(parts=EmbedParts.WHOLE) takes the whole-item vectors stored, and ranks as a memory cut whole after opening."""
    from agents.memory.search import EmbedParts

    embedder = HashingEmbedder(32)
    url = f"sqlite://{tmp_path}/s.db"
    with open_store(url) as store:
        store.append("s", [MemoryItem(**row) for row in rows(600)])
        store.index_embeddings("s", embedder, parts=EmbedParts.WHOLE)
    with open_memory(url, "s", index_ahead=True, parts=EmbedParts.WHOLE) as memory:
        assert search_index(memory).parts == EmbedParts.WHOLE
        assert search_index(memory).missing_vectors(None) == []
        held_build.set()
        with open_memory(url, "s", index_ahead=False) as later:
            search_index(later, parts=EmbedParts.WHOLE)
            assert answers(memory, mode="semantic", embedder=embedder) == answers(
                later, mode="semantic", embedder=embedder
            )


def test_stored_memory_parts_takes_an_embed_parts(tmp_path: Path) -> None:
    """StoredMemory(parts=...) refuses what is not an EmbedParts, naming the option."""
    with (
        open_store(f"sqlite://{tmp_path}/s.db") as store,
        pytest.raises(ArgumentTypeError, match="parts"),
    ):
        StoredMemory(store, "s", parts="whole")  # type: ignore[arg-type]  # the wrong type on purpose


def parted_rows(n: int) -> list[dict[str, Any]]:
    """Return ``n`` steps of three fields of distinct words: past 65,536 distinct part vectors from 22,000 steps."""
    return [
        {
            "step": i,
            "thought": f"t{i} w{i % 40}",
            "action": f"a{i}",
            "observation": f"o{i} w{i % 7}",
        }
        for i in range(n)
    ]


class HeldScreen:
    """Holds the making of every screen, once armed, until released; says when one is reached."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from agents.memory.search import _item_vectors

        self.reached, self.released = threading.Event(), threading.Event()
        self.made = 0  # screens made since armed
        made = _item_vectors.Screen.__init__

        def held(screen: Any, *args: Any) -> None:
            self.made += 1
            self.reached.set()
            self.released.wait(30)
            made(screen, *args)

        monkeypatch.setattr(_item_vectors.Screen, "__init__", held)


def test_a_query_while_the_build_screens_the_vectors_is_answered_without_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Vectors taken in bulk are screened by the build off the index's lock: a semantic query meanwhile is answered, its hits and scores those of a memory built without a build ahead."""
    embedder = HashingEmbedder(64)
    data = parted_rows(22_000)
    memory = Memory([MemoryItem(**row) for row in data])
    plain = Memory([MemoryItem(**row) for row in data])
    expected = answers(plain, mode="semantic", embedder=embedder)
    index = search_index(memory)
    vectors = search_index(plain).embed(embedder, None)
    assert vectors.used >= 65_536
    stored = {key: vectors.matrix[rows] for key, rows in vectors.rows_of.items()}
    index.adopt_vectors(embedder, None, stored, screen=False)
    held = HeldScreen(monkeypatch)
    index.build_ahead()
    assert held.reached.wait(30)
    got: list[Any] = []
    query = threading.Thread(
        target=lambda: got.append(answers(memory, mode="semantic", embedder=embedder)),
        daemon=True,
    )
    query.start()
    query.join(30)  # under the lock, the query would wait for the screen held here: 30 s, no answer
    answered = bool(got)
    held.released.set()
    index.build_ahead(wait=True)
    assert answered
    assert got[0] == expected == answers(memory, mode="semantic", embedder=embedder)


def test_items_changed_while_the_build_screens_the_vectors_are_ranked_as_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Items changed, dropped and added while the build screens the vectors off the lock: the screen taken is made again, and the hits and scores are those of a memory of the changed items built without a build ahead."""
    embedder = HashingEmbedder(64)
    memory = Memory([MemoryItem(**row) for row in parted_rows(22_000)])
    source = Memory([MemoryItem(**row) for row in parted_rows(22_000)])
    vectors = search_index(source).embed(embedder, None)
    stored = {key: vectors.matrix[rows] for key, rows in vectors.rows_of.items()}
    index = search_index(memory)
    index.adopt_vectors(embedder, None, stored, screen=False)
    held = HeldScreen(monkeypatch)
    index.build_ahead()
    assert held.reached.wait(30)
    memory.content[10].set_value("thought", "invoice report chart")
    memory.search("w1 w2 w3", 3, mode="semantic", embedder=embedder)  # embeds it anew meanwhile
    memory.content[11].set_value("observation", "w1 w2 w3 dialog")
    memory.delete_items([memory.content[12]])
    memory.add_memory_item(MemoryItem(step=-1, thought="w1 invoice"))
    held.released.set()
    index.build_ahead(wait=True)
    assert held.made == 2  # the one made from the rows before the changes is thrown away
    plain = Memory([MemoryItem(**item.to_dict()) for item in memory.content])
    assert answers(memory, mode="semantic", embedder=embedder) == answers(
        plain, mode="semantic", embedder=embedder
    )


def test_a_build_ahead_without_numpy_files_the_items_and_raises_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without numpy a build ahead files the keyword index and screens nothing (no vectors): its thread raises nothing, and queries rank as before."""
    rows = [{"step": i, "thought": f"opened report {i % 7}"} for i in range(50)]
    model = Memory([MemoryItem(**row) for row in rows])
    search_index(model).build_ahead(wait=True)
    expected = [(hit.item["step"], hit.score) for hit in model.search("report 3", 5)]
    monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy raises ImportError
    memory = Memory([MemoryItem(**row) for row in rows])
    search_index(memory).build_ahead(wait=True)  # an exception in its thread fails the test
    assert not search_index(memory).building()
    assert [(hit.item["step"], hit.score) for hit in memory.search("report 3", 5)] == expected


def test_a_first_filtered_keyword_query_while_the_build_runs_keeps_only_what_passes(
    embedded_url: str, held_build: threading.Event
) -> None:
    """A keyword query the store ranks while the build is held keeps only the items a function filter or a field filter passes: the hits and scores of Memory.search with that filter."""
    plain = stored_memory(embedded_url)

    def odd(item: MemoryItem) -> bool:
        """Pass the odd steps (a function of the item: asked in Python, never pushed to the store)."""
        return bool(item.get_value("step") % 2)

    filters: list[Any] = [odd, {"step": {"$lt": 300}}]
    expected = [answers(plain, where=where) for where in filters]
    assert all(hit[0] % 2 for hits in expected[0] for hit in hits)
    with open_memory(embedded_url, "s", index_ahead=True) as memory:
        first = [answers(memory, where=where) for where in filters]
        assert search_index(memory).building()
    assert first == expected
    assert any(expected[0])
    assert any(expected[1])


def test_a_first_hybrid_query_while_the_build_runs_reads_no_item_from_the_store(
    embedded_url: str, held_build: threading.Event
) -> None:
    """The first hybrid query of a session just opened, its build held: the leader and near hits whose words the blend weighs are the memory's own items, not rows read again; hits and scores are Memory.search's to the float."""
    embedder = HashingEmbedder(32)
    url = embedded_url
    plain = answers(stored_memory(url), mode="hybrid", embedder=embedder)
    with open_memory(url, "s", index_ahead=True) as memory:
        backend = memory.store.backend
        read: list[list[int]] = []
        read_seqs = backend.read_seqs
        backend.read_seqs = lambda sid, seqs: read.append(list(seqs)) or read_seqs(sid, seqs)  # type: ignore[method-assign]  # noted, then read as before
        first = answers(memory, mode="hybrid", embedder=embedder)
        assert search_index(memory).building()
        assert read == []
        held_build.set()
        search_index(memory).build_ahead(wait=True)
        assert first == answers(memory, mode="hybrid", embedder=embedder) == plain
