"""``Backend.filter_few``: the rows that may pass a filter where few may, capped, so a filter most rows pass costs a few rows, not the session's."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from agents.memory import Memory, MemoryItem
from agents.memory.search import EmbedParts, Filter, HashingEmbedder, search_index
from agents.memory.stores import open_store
from agents.memory.stores._core.filter_values import JudgedFilters
from agents.memory.stores._sql.dialect import SQLRows

WHERES: list[Any] = [
    {"a": 0},  # about one row in four passes
    {"a": {"$in": [0, 1, 2]}},  # most rows
    {"b": "rare"},  # one row
    {"b": "none"},  # no row
    {"a": {"$gte": 1}},  # a range
    {"$or": [{"a": 3}, {"b": "rare"}]},
]


def _capped(candidates: set[int] | None, most: int) -> set[int] | None:
    """Return what ``filter_few`` must answer: ``filter_candidates``'s set where it holds ``most`` at most."""
    return None if candidates is None or len(candidates) > most else candidates


def test_filter_few_is_filter_candidates_capped_across_commits(store_url: str) -> None:
    """Each store's ``filter_few`` answers ``filter_candidates``'s set where it holds ``most`` seqs at most, else ``None``, for caps asked in any order, before and after a write (SQLite's kept answers included)."""
    with open_store(store_url) as store:
        store.append(
            "s", [MemoryItem(step=i, a=i % 4, b="rare" if i == 7 else "x") for i in range(24)]
        )
        backend = store.backend
        for round_ in range(2):
            for where in WHERES:
                tree = Filter(where).tree
                # Caps asked before the whole answer is kept (rising, falling), then after.
                caps = [0, 5, 1, 6, 12, 7, 30, 24, 25, 6]
                answers = [backend.filter_few("s", tree, most) for most in caps]
                candidates = backend.filter_candidates("s", tree)
                assert answers == [_capped(candidates, most) for most in caps], (where, round_)
                assert [backend.filter_few("s", tree, most) for most in caps] == answers
            store.append("s", [MemoryItem(step=24 + i, a=0, b="rare") for i in range(6)])


def test_a_filter_most_rows_pass_reads_few_candidates_on_postgres(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hybrid search on PostgreSQL whose ``$eq`` filter 99% of 800 steps pass has the index name ``800 // 16 + 1`` rows at most (every passing row before), and ranks as Memory.search."""
    from agents.memory.stores import PostgresStore

    embedder = HashingEmbedder(32)
    session = [
        {
            "step": i,
            "text": f"alpha {'beta ' * (i % 3)}gamma {i}",
            "agent": "host" if i % 100 else "reviewer",
        }
        for i in range(800)
    ]
    where = {"agent": "host"}
    with PostgresStore(postgres_url) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        backend = store.backend
        assert backend.filter_named(Filter(where).tree)
        returned: list[int] = []
        real = backend.query_indexed

        def counted(sql: str, params: Any) -> list[Any]:
            rows = real(sql, params)
            returned.append(len(rows))
            return rows

        monkeypatch.setattr(backend, "query_indexed", counted)
        for mode in ("semantic", "hybrid"):
            returned.clear()
            hits = store.search("s", "alpha beta", 5, mode=mode, where=where, embedder=embedder)  # type: ignore[arg-type]
            memory = Memory(MemoryItem(**fields) for fields in session)
            want = memory.search("alpha beta", 5, mode=mode, where=where, embedder=embedder)  # type: ignore[arg-type]
            assert [(h.item.to_dict(), h.score) for h in hits] == [
                (h.item.to_dict(), pytest.approx(h.score, rel=1e-5, abs=1e-6)) for h in want
            ]
            if mode == "hybrid":
                assert returned, "the index was not asked"
            assert max(returned, default=0) <= 800 // 16 + 1, (mode, returned)


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
@pytest.mark.parametrize("where", [{"a": 0}, {"b": "rare"}])
def test_a_filtered_query_counts_the_session_once(
    store_url: str, mode: str, where: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filtered semantic or hybrid query over whole-item vectors asks ``Backend.count`` once for its vectors' side (embedding, ``walks_filtered``, ``filter_few`` share it), and ranks as Memory.search."""
    embedder = HashingEmbedder(32)
    session = [
        {
            "step": i,
            "text": f"alpha {'beta ' * (i % 3)}gamma {i}",
            "a": i % 4,
            "b": "rare" * (i == 7),
        }
        for i in range(48)
    ]
    memory = Memory(MemoryItem(**fields) for fields in session)
    search_index(memory, parts=EmbedParts.WHOLE)
    want = memory.search("alpha beta", 3, mode=mode, where=where, embedder=embedder)  # type: ignore[arg-type]
    with open_store(store_url) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        asked: list[str] = []
        backend = type(store.backend)
        real = backend.count

        def count(self: Any, session_id: str) -> int:
            asked.append(sys._getframe(1).f_code.co_filename)
            return real(self, session_id)

        monkeypatch.setattr(backend, "count", count)
        for query in range(2):  # the first embeds the items, the second finds them embedded
            asked.clear()
            hits = store.search(
                "s",
                "alpha beta",
                3,
                mode=mode,
                where=where,
                embedder=embedder,
                parts=EmbedParts.WHOLE,
            )  # type: ignore[arg-type]
            assert [(h.item.to_dict(), h.score) for h in hits] == [
                (h.item.to_dict(), pytest.approx(h.score, rel=1e-5, abs=1e-6)) for h in want
            ]
            from_vectors = [name for name in asked if name.endswith("vectors.py")]
            assert len(from_vectors) == 1, (query, asked)


class KeptCappedAnswers(RuleBasedStateMachine):
    """SQLite's kept answers (``JudgedFilters``): ``filter_few`` and ``filter_candidates`` asked in any order, with appends and deletes by this handle and a second one between, always answer as the filter judged afresh in SQL."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.TemporaryDirectory()
        url = f"sqlite://{self.folder.name}/store.db"
        self.store = open_store(url)
        self.other = open_store(url)
        self.store.append("s", [MemoryItem(step=0, a=0)])

    @rule(values=st.lists(st.integers(0, 1), min_size=1, max_size=8), second=st.booleans())
    def append(self, values: list[int], second: bool) -> None:
        (self.other if second else self.store).append("s", [MemoryItem(a=v) for v in values])

    @rule(seqs=st.lists(st.integers(1, 60), min_size=1, max_size=12), second=st.booleans())
    def delete(self, seqs: list[int], second: bool) -> None:
        (self.other if second else self.store).delete_seqs("s", seqs)

    @rule(
        value=st.integers(0, 1),
        caps=st.lists(st.integers(0, 16), min_size=1, max_size=5),
        whole=st.booleans(),
    )
    def ask(self, value: int, caps: list[int], whole: bool) -> None:
        backend = self.store.backend
        tree = Filter({"a": {"$in": [value, 9]}}).tree
        fresh = SQLRows.filter_candidates(backend, "s", tree)  # judged in SQL, nothing kept
        if whole:
            assert backend.filter_candidates("s", tree) == fresh
        for most in caps:
            assert backend.filter_few("s", tree, most) == _capped(fresh, most), (most, fresh)

    def teardown(self) -> None:
        self.store.close()
        self.other.close()
        self.folder.cleanup()


TestKeptCappedAnswers = KeptCappedAnswers.TestCase
TestKeptCappedAnswers.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_kept_more_than_most_is_forgotten_at_the_next_commit() -> None:
    """``JudgedFilters.few`` answers "more than ``most``" from memory under one stamp only: after a commit that deletes rows, the capped answer is judged again."""
    judged = JudgedFilters()
    tree = Filter({"a": 1}).tree
    rows = set(range(1, 11))

    def judge(most: int) -> Callable[[], set[int] | None]:
        return lambda: None if len(rows) > most else set(rows)

    def unasked() -> set[int] | None:
        raise AssertionError("judged again under the same stamp")

    assert judged.few("s", tree, 1, 5, judge(5)) is None
    assert judged.few("s", tree, 1, 3, unasked) is None  # more than 5 is more than 3
    assert judged.few("s", tree, 1, 9, judge(9)) is None  # more than 5 says nothing of 9
    rows = {2, 3}  # a commit deleted rows
    assert judged.few("s", tree, 2, 1, judge(1)) is None
    assert judged.few("s", tree, 2, 4, judge(4)) == {2, 3}
    assert judged.few("s", tree, 2, 2, unasked) == {2, 3}  # the whole answer, kept
    assert judged.judged("s", tree, 2, unasked) == {2, 3}
