"""Tests for the statistics an SQLite handle keeps between keyword searches (agents.memory.stores._sqlite.known)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from agents.memory import Memory, MemoryItem
from agents.memory.stores import SQLiteStore
from agents.memory.stores._sqlite.known import KnownStatistics, LazyRead

WORDS = ["zeta", "report", "file", "the", "ticket7"]
"""Words of the items and queries: one most items hold, a few rarer."""
QUERIES = ("zeta", "ticket7", "report file", "the zeta ticket7", "absent")


def noted(step: int, words: list[str]) -> MemoryItem:
    """Return an item of ``step`` noting ``words``."""
    return MemoryItem(step=step, note=" ".join(words))


def ranked(store: SQLiteStore, session_id: str, query: str) -> list[tuple[int, float]]:
    """Return ``(step, score)`` of the store's ranking of every item of the session for ``query``."""
    return [(hit.item.step, hit.score) for hit in store.search(session_id, query, 1000)]


def memory_ranked(items: list[MemoryItem], query: str) -> list[tuple[int, float]]:
    """Return ``(step, score)`` of ``Memory.search`` over ``items`` for ``query``."""
    memory = Memory()
    memory.add_memory_items(items)
    return [(hit.item.step, hit.score) for hit in memory.search(query, 1000)]


def assert_same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    """Assert two rankings hold the same steps with the same scores (ties in either order)."""
    assert sorted(got) == sorted(want), (got, want)
    assert [score for _, score in got] == [score for _, score in want]


def test_a_search_after_another_handle_appends_counts_the_new_rows() -> None:
    """Statistics kept by one handle are forgotten when another handle commits: the new rows' words count."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
            writer.append("s", [noted(i, ["report", "the"]) for i in range(40)])
            assert ranked(reader, "s", "zeta") == []
            assert ranked(reader, "s", "zeta") == []  # from what it kept
            writer.append("s", [noted(100 + i, ["zeta", "the"]) for i in range(40)])
            assert_same(ranked(reader, "s", "zeta"), memory_ranked(writer.read("s"), "zeta"))


def test_a_search_after_another_handle_deletes_ranks_without_the_deleted_rows() -> None:
    """A delete by another handle changes the session's counts and frequencies: the next search ranks as Memory.search."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
            seqs = writer.append(
                "s", [noted(i, ["zeta"] * (1 + i % 3) + ["the"]) for i in range(60)]
            )
            first = ranked(reader, "s", "zeta the")
            with writer.batch("s") as batch:
                batch.delete(seqs[::2])
            again = ranked(reader, "s", "zeta the")
            assert again != first
            assert_same(again, memory_ranked(writer.read("s"), "zeta the"))


def test_a_search_after_another_process_commits_ranks_the_commit() -> None:
    """A commit by another process, between two searches of a handle, is counted by the second."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        with SQLiteStore(path) as reader:
            reader.append("s", [noted(i, ["report", "the"]) for i in range(30)])
            assert ranked(reader, "s", "ticket7") == []
            script = (
                "import sys\n"
                "from agents.memory import MemoryItem\n"
                "from agents.memory.stores import SQLiteStore\n"
                "with SQLiteStore(sys.argv[1]) as store:\n"
                "    store.append('s', [MemoryItem(step=99, note='ticket7 ticket7 the')])\n"
            )
            subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=120)
            assert_same(ranked(reader, "s", "ticket7"), memory_ranked(reader.read("s"), "ticket7"))
            assert ranked(reader, "s", "ticket7")[0][0] == 99


def test_a_search_after_this_handle_writes_counts_its_own_commit() -> None:
    """The handle's own commits (which leave PRAGMA data_version as it was) forget what it kept."""
    with tempfile.TemporaryDirectory() as folder, SQLiteStore(Path(folder) / "runs.db") as store:
        store.append("s", [noted(i, ["report", "the"]) for i in range(30)])
        assert ranked(store, "s", "zeta") == []
        store.append("s", [noted(50, ["zeta"])])
        assert_same(ranked(store, "s", "zeta"), memory_ranked(store.read("s"), "zeta"))


def test_known_statistics_answer_only_at_their_stamp() -> None:
    """What was kept under one stamp is answered without a statement (names kept as absent too), and asking about another stamp forgets nothing."""
    con = sqlite3.connect(":memory:", isolation_level=None)
    known = KnownStatistics()
    read = LazyRead(con)
    read.sessions["s"] = ("1", 3, 9, 3, 9)
    read.terms.update({"1\u00b7a": (2, 2), "1\u00b7b": None})
    known.keep((1, 1, 1), read)
    assert known.settled((1, 1, 1))
    assert not known.settled((1, 2, 1))
    assert known.settled((1, 1, 1))  # asking is only asking
    again = LazyRead(con)
    assert known.sessions(again, ["s"]) == {"s": ("1", 3, 9, 3, 9)}
    assert known.vocabulary(again, ["1\u00b7a", "1\u00b7b"]) == {"1\u00b7a": (2, 2)}
    assert not again.ran
    known.forget()
    assert not known.settled((1, 1, 1))
    con.close()


def test_a_lazy_read_runs_no_statement_until_one_is_needed() -> None:
    """LazyRead begins no transaction when nothing is executed, and one when something is."""
    con = sqlite3.connect(":memory:", isolation_level=None)
    reads = LazyRead(con)
    reads.close()
    assert not reads.ran
    assert not con.in_transaction
    assert reads.execute("SELECT 1").fetchone() == (1,)
    assert reads.ran
    assert con.in_transaction
    reads.close()
    assert not con.in_transaction
    con.close()


class TwoHandles(RuleBasedStateMachine):
    """Two handles of one file, one searching, both writing: every search ranks as Memory.search over the stored items."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.TemporaryDirectory()
        path = Path(self.folder.name) / "runs.db"
        self.searcher = SQLiteStore(path)
        self.writer = SQLiteStore(path)
        self.step = 0

    @initialize()
    def start(self) -> None:
        """Begin with a few items."""
        self.writer.append("s", [noted(i, ["the", "report"]) for i in range(5)])
        self.step = 5

    @rule(
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
        n=st.integers(1, 3),
        by_other=st.booleans(),
    )
    def append(self, words: list[str], n: int, by_other: bool) -> None:
        """Append ``n`` items by either handle."""
        store = self.writer if by_other else self.searcher
        store.append("s", [noted(self.step + i, words) for i in range(n)])
        self.step += n

    @rule(pick=st.integers(0, 1000), by_other=st.booleans())
    def delete(self, pick: int, by_other: bool) -> None:
        """Delete one item by either handle."""
        store = self.writer if by_other else self.searcher
        seqs = [seq for seq, _ in store.records("s")]
        if len(seqs) > 1:
            with store.batch("s") as batch:
                batch.delete([seqs[pick % len(seqs)]])

    @rule(query=st.sampled_from(QUERIES))
    def search(self, query: str) -> None:
        """Search by the searching handle (keeping what it read)."""
        assert_same(ranked(self.searcher, "s", query), memory_ranked(self.writer.read("s"), query))

    @invariant()
    def ranks_as_memory(self) -> None:
        """Every query ranks as Memory.search over the items the other handle reads."""
        items = self.writer.read("s")
        for query in QUERIES:
            assert_same(ranked(self.searcher, "s", query), memory_ranked(items, query))

    def teardown(self) -> None:
        """Close both handles and remove the file."""
        self.searcher.close()
        self.writer.close()
        self.folder.cleanup()


TwoHandles.TestCase.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)
test_two_handles_writing_between_searches_rank_as_memory = TwoHandles.TestCase
