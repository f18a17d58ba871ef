"""The keyword index of a memory:// session: kept by every write of every handle, it ranks as Memory.search does."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule
from two_handles import TwoHandleSession

from agents.memory import Memory, MemoryItem
from agents.memory.stores import InMemoryStore, Store
from agents.memory.stores._core.terms import item_terms

WORDS = ("cat", "dog", "red", "blue", "open", "save", "file", "menu", "ok", "the")
QUERIES = ("cat", "red dog", "open the file", "save save menu", "ok blue cat the")
KINDS = ("a", "b")
FILTERS: tuple[dict[str, Any] | None, ...] = (None, {"kind": "a"}, {"kind": "b"})

Ranked = list[tuple[float, dict[str, Any]]]


def item(words: list[str], step: int, kind: str = "a") -> MemoryItem:
    """Return a step whose text is ``words`` (split over two fields), of kind ``kind``."""
    half = len(words) // 2
    return MemoryItem(
        step=step, kind=kind, action=" ".join(words[:half]), note=" ".join(words[half:])
    )


def ranked(
    store: Store, sid: str, query: str, k: int = 5, *, where: dict[str, Any] | None = None
) -> Ranked:
    """Return a keyword search's (score, fields) through the store, best first."""
    hits = store.search(sid, query, k, mode="keyword", where=where)
    return [(hit.score, hit.item.to_dict()) for hit in hits]


def expected(
    items: list[MemoryItem], query: str, k: int = 5, *, where: dict[str, Any] | None = None
) -> Ranked:
    """Return Memory.search's (score, fields) over ``items`` in order."""
    hits = Memory(items).search(query, k, mode="keyword", where=where)
    return [(hit.score, hit.item.to_dict()) for hit in hits]


def fresh_name() -> str:
    """Return a memory:// name no other test uses."""
    return f"kw-{uuid.uuid4().hex[:12]}"


def test_a_memory_store_keeps_a_keyword_index() -> None:
    """memory:// answers keyword searches from an index it keeps (Store.keyword_index)."""
    with InMemoryStore(fresh_name()) as store:
        assert store.keyword_index


def test_a_keyword_search_reads_only_the_hits() -> None:
    """A keyword search decodes the k hits only, not every item of the session."""
    with InMemoryStore(fresh_name()) as store:
        store.append("s", [item([WORDS[i % 10], "the"], i) for i in range(200)])
        read: list[int] = []
        backend = store.backend
        real = backend.read_seqs

        def counting(session_id: str, seqs: Any) -> list[tuple[int, bytes]]:
            read.extend(seqs)
            return real(session_id, seqs)

        backend.read_seqs = counting  # type: ignore[method-assign]  # count the rows read
        store.search("s", "cat", 5, mode="keyword")
        assert len(read) == 5


def test_a_rolled_back_write_leaves_the_ranking_of_the_rows_kept() -> None:
    """An insert undone by an exception inside the transaction leaves no term behind: the ranking is that of the rows kept."""
    with InMemoryStore(fresh_name()) as store:
        items = [item(["cat", WORDS[i % 10]], i) for i in range(20)]
        store.append("s", items)
        assert ranked(store, "s", "cat red") == expected(items, "cat red")
        backend = store.backend
        row = backend.read_rows("s")[0]
        extra = item(["cat", "cat", "red"], 99)

        def interrupted_write() -> None:
            with backend.transaction("s") as tx:
                backend.insert_rows(tx, "s", [("99", 0.0, row[1])], [item_terms(extra)])
                backend.delete_rows(tx, "s", [row[0] + 1])
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            interrupted_write()
        assert ranked(store, "s", "cat red") == expected(items, "cat red")


def test_keyword_top_sessions_ranks_as_one_memory_of_the_sessions_in_order() -> None:
    """Several memory:// sessions ranked together score as Memory.search over their items one session after the other."""
    with InMemoryStore(fresh_name()) as store:
        one = [item(["cat", WORDS[i % 10]], i) for i in range(12)]
        two = [item(["red", "cat", WORDS[i % 7]], i, "b") for i in range(9)]
        store.append("one", one)
        store.append("two", two)
        best = store.backend.keyword_top_sessions(["one", "two"], ["cat", "red"], 30)
        assert best is not None
        memory = Memory(one + two)
        want = [hit.score for hit in memory.search("cat red", 30, mode="keyword")]
        assert [score for score, _, _ in best] == want
        assert {sid for _, sid, _ in best} == {"one", "two"}


class MemoryKeywordMachine(TwoHandleSession):
    """Two handles on one memory:// name against a plain model; keyword search (with and without filters) equals Memory.search."""

    def __init__(self) -> None:
        super().__init__()
        self.name = fresh_name()
        self.a = InMemoryStore(self.name)
        self.b = InMemoryStore(self.name)

    def items(self) -> list[MemoryItem]:
        return [self.model[seq] for seq in sorted(self.model)]

    @rule(
        which=st.integers(0, 1),
        texts=st.lists(
            st.tuples(st.lists(st.sampled_from(WORDS), max_size=6), st.sampled_from(KINDS)),
            min_size=1,
            max_size=4,
        ),
    )
    def append(self, which: int, texts: list[tuple[list[str], str]]) -> None:
        new = []
        for words, kind in texts:
            self.step += 1
            new.append(item(words, self.step, kind))
        self.appended(which, new)

    @rule(
        which=st.integers(0, 1),
        pick=st.integers(0, 1000),
        words=st.lists(st.sampled_from(WORDS), max_size=6),
        kind=st.sampled_from(KINDS),
    )
    def update(self, which: int, pick: int, words: list[str], kind: str) -> None:
        self.replaced(which, pick, item(words, 10_000 + pick, kind))

    @rule(
        which=st.integers(0, 1),
        query=st.sampled_from(QUERIES),
        where=st.sampled_from(FILTERS),
        k=st.integers(1, 8),
    )
    def search(self, which: int, query: str, where: dict[str, Any] | None, k: int) -> None:
        store = self.handle(which)
        if not self.model:
            assert ranked(store, "s", query, k, where=where) == []
            return
        assert ranked(store, "s", query, k, where=where) == expected(
            self.items(), query, k, where=where
        )

    @invariant()
    def same_items(self) -> None:
        assert [record.seq for record in self.b.records("s")] == sorted(self.model)

    def teardown(self) -> None:
        self.a.close()
        self.b.close()


MemoryKeywordMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None
)
TestMemoryKeywordMachine = MemoryKeywordMachine.TestCase
