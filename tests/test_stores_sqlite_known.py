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
from agents.memory.search import Tokenizer
from agents.memory.stores import SQLiteStore
from agents.memory.stores._sqlite.backend import SQLiteBackend
from agents.memory.stores._sqlite.known import KnownStatistics, SnapshotRead

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
    read = SnapshotRead(con)
    read.sessions["s"] = ("1", 3, 9, 3, 9)
    read.terms.update({"1\u00b7a": (2, 2), "1\u00b7b": None})
    known.keep((1, 1, 1), read)
    assert known.settled((1, 1, 1))
    assert not known.settled((1, 2, 1))
    assert known.settled((1, 1, 1))  # asking is only asking
    again = SnapshotRead(con)
    assert known.sessions(again, ["s"]) == {"s": ("1", 3, 9, 3, 9)}
    assert known.vocabulary(again, ["1\u00b7a", "1\u00b7b"]) == {"1\u00b7a": (2, 2)}
    assert not con.in_transaction  # no statement ran
    known.forget()
    assert not known.settled((1, 1, 1))
    con.close()


def test_a_snapshot_read_begins_one_transaction_and_ends_it() -> None:
    """SnapshotRead begins no transaction until asked, one at the first statement, and ends it on close."""
    con = sqlite3.connect(":memory:", isolation_level=None)
    reads = SnapshotRead(con)
    reads.close()
    assert not con.in_transaction
    assert reads.execute("SELECT 1").fetchone() == (1,)
    assert con.in_transaction
    reads.begin()  # once begun, begun
    reads.close()
    assert not con.in_transaction
    con.close()


def backend_of(store: SQLiteStore) -> SQLiteBackend:
    """Return the SQLite backend of ``store``."""
    backend = store.backend
    assert isinstance(backend, SQLiteBackend)
    return backend


def among_ranked(
    store: SQLiteStore, session_id: str, query: str, steps: set[int]
) -> list[tuple[int, float]]:
    """Return ``(step, score)`` of the items of ``steps`` the store's index scores for ``query`` (``Backend.keyword_among``)."""
    by_seq = {seq: item.step for seq, item in store.records(session_id)}
    seqs = sorted(seq for seq, step in by_seq.items() if step in steps)
    scored = backend_of(store).keyword_among(session_id, Tokenizer()(query), seqs)
    assert scored is not None
    return [(by_seq[seq], score) for score, seq in scored]


def memory_among(items: list[MemoryItem], query: str, steps: set[int]) -> list[tuple[int, float]]:
    """Return ``(step, score)`` of ``Memory.search`` over ``items`` for ``query``, of the items of ``steps`` only (the whole session's statistics)."""
    return [hit for hit in memory_ranked(items, query) if hit[0] in steps]


def frequencies(store: SQLiteStore, session_id: str, query: str) -> dict[str, int]:
    """Return the store's document frequency of each of ``query``'s terms in the session (``Backend.keyword_frequencies``)."""
    counted = backend_of(store).keyword_frequencies(session_id, Tokenizer()(query))
    assert counted is not None
    return counted


def memory_frequencies(items: list[MemoryItem], query: str) -> dict[str, int]:
    """Return how many of ``items`` ``Memory.search`` finds for each of ``query``'s terms alone."""
    return {term: len(memory_ranked(items, term)) for term in Tokenizer()(query)}


def sessions_ranked(
    store: SQLiteStore, sessions: list[str], query: str
) -> list[tuple[str, int, float]]:
    """Return ``(session, step, score)`` of the store's one ranking of ``sessions`` for ``query``."""
    hits = store.search_sessions(query, 1000, sessions=sessions)
    return [(hit.session_id, hit.item.step, hit.score) for hit in hits]


def memory_sessions(
    store: SQLiteStore, sessions: list[str], query: str
) -> list[tuple[str, int, float]]:
    """Return ``(session, step, score)`` of ``Memory.search`` over one memory holding ``sessions`` in id order."""
    memory = Memory()
    owner = {}
    for sid in sorted(set(sessions)):
        items = store.read(sid)
        owner.update({id(item): sid for item in items})
        memory.add_memory_items(items)
    return [(owner[id(hit.item)], hit.item.step, hit.score) for hit in memory.search(query, 1000)]


def assert_same_across(
    got: list[tuple[str, int, float]], want: list[tuple[str, int, float]]
) -> None:
    """Assert two rankings of several sessions hold the same items with the same scores, in the same order."""
    assert got == want, (got, want)


def test_scoring_chosen_rows_after_another_handle_appends_counts_the_new_rows() -> None:
    """Keyword_among after another handle's commit ranks with the new counts and frequencies, not those kept."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
            writer.append(
                "s", [noted(i, ["zeta", "the"] if i % 4 else ["report"]) for i in range(40)]
            )
            chosen = set(range(0, 40, 3))
            first = among_ranked(reader, "s", "zeta report", chosen)
            assert_same(first, memory_among(writer.read("s"), "zeta report", chosen))
            assert among_ranked(reader, "s", "zeta report", chosen) == first  # from what it kept
            writer.append("s", [noted(100 + i, ["report", "report"]) for i in range(40)])
            writer.search("s", "zeta", 1)  # folds the new rows: the reader meets none pending
            again = among_ranked(reader, "s", "zeta report", chosen)
            assert again != first
            assert_same(again, memory_among(writer.read("s"), "zeta report", chosen))


def test_frequencies_after_another_handle_writes_count_the_new_rows() -> None:
    """Keyword_frequencies, answered from what a search kept, counts another handle's appends and deletes once committed."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
            seqs = writer.append("s", [noted(i, ["zeta", "the"]) for i in range(30)])
            writer.search("s", "zeta", 1)
            ranked(reader, "s", "zeta report")  # keeps the statistics of both terms
            assert frequencies(reader, "s", "zeta report") == {"zeta": 30, "report": 0}
            writer.append("s", [noted(100 + i, ["report"]) for i in range(70)])
            writer.search("s", "zeta", 1)  # folds them
            assert frequencies(reader, "s", "zeta report") == {"zeta": 30, "report": 70}
            ranked(reader, "s", "zeta report")
            with writer.batch("s") as batch:
                batch.delete(seqs[:10])
            assert frequencies(reader, "s", "zeta report") == memory_frequencies(
                writer.read("s"), "zeta report"
            )


def test_a_search_of_many_sessions_after_another_handle_appends_counts_the_new_rows() -> None:
    """Search_sessions after another handle's commit ranks with every session's new counts, not those kept."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
            writer.append("a", [noted(i, ["zeta", "the"]) for i in range(20)])
            writer.append("b", [noted(i, ["report", "zeta"]) for i in range(30)])
            writer.search("a", "zeta", 1)
            first = sessions_ranked(reader, ["a", "b"], "zeta report")
            assert sessions_ranked(reader, ["a", "b"], "zeta report") == first
            writer.append("b", [noted(100 + i, ["zeta"] * 3) for i in range(40)])
            writer.search("a", "zeta", 1)
            again = sessions_ranked(reader, ["a", "b"], "zeta report")
            assert again != first
            assert_same_across(again, memory_sessions(writer, ["a", "b"], "zeta report"))


OTHER_PROCESS = (
    "import sys\n"
    "from agents.memory import MemoryItem\n"
    "from agents.memory.stores import SQLiteStore\n"
    "with SQLiteStore(sys.argv[1]) as store:\n"
    "    store.append(sys.argv[2], [MemoryItem(step=900 + i, note='ticket7 ticket7 the') for i in range(70)])\n"
)
"""Append 70 items holding "ticket7" to a session (argv[2]) of a file (argv[1]), enough to fold them."""


def test_chosen_rows_frequencies_and_many_sessions_after_another_process_commits() -> None:
    """A commit by another process, between two of keyword_among, keyword_frequencies and search_sessions, is counted by the second."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        with SQLiteStore(path) as reader:
            reader.append("a", [noted(i, ["report", "the"]) for i in range(30)])
            reader.append("b", [noted(i, ["ticket7", "zeta"]) for i in range(30)])
            chosen = set(range(0, 30, 2))
            query = "ticket7 report"
            before = (
                among_ranked(reader, "a", query, chosen),
                frequencies(reader, "a", query),
                sessions_ranked(reader, ["a", "b"], query),
            )
            assert before[1] == {"ticket7": 0, "report": 30}
            script = [sys.executable, "-c", OTHER_PROCESS, str(path), "a"]
            subprocess.run(script, check=True, timeout=120)
            assert frequencies(reader, "a", query) == {"ticket7": 70, "report": 30}
            items = reader.read("a")
            assert_same(
                among_ranked(reader, "a", query, chosen), memory_among(items, query, chosen)
            )
            assert among_ranked(reader, "a", query, chosen) != before[0]
            assert_same_across(
                sessions_ranked(reader, ["a", "b"], query),
                memory_sessions(reader, ["a", "b"], query),
            )


class OneFileTwoHandles(RuleBasedStateMachine):
    """Two handles of one SQLite file: ``searcher`` reads (and writes), ``writer`` writes; ``step`` numbers new items."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.TemporaryDirectory()
        path = Path(self.folder.name) / "runs.db"
        self.searcher = SQLiteStore(path)
        self.writer = SQLiteStore(path)
        self.step = 0

    def teardown(self) -> None:
        """Close both handles and remove the file."""
        self.searcher.close()
        self.writer.close()
        self.folder.cleanup()


class TwoHandles(OneFileTwoHandles):
    """Two handles of one file, one searching, both writing: every search ranks as Memory.search over the stored items."""

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


TwoHandles.TestCase.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)
test_two_handles_writing_between_searches_rank_as_memory = TwoHandles.TestCase


class TwoHandlesEveryRead(OneFileTwoHandles):
    """Two handles of one file writing two sessions, one reading by every keyword path: each read equals Memory.search's over the stored items."""

    @initialize()
    def start(self) -> None:
        """Begin with a few items in each session."""
        self.writer.append("s", [noted(i, ["the", "report"]) for i in range(5)])
        self.writer.append("t", [noted(50 + i, ["zeta", "the"]) for i in range(5)])
        self.step = 100

    @rule(
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
        n=st.integers(1, 40),
        session=st.sampled_from(["s", "t"]),
        by_other=st.booleans(),
    )
    def append(self, words: list[str], n: int, session: str, by_other: bool) -> None:
        """Append ``n`` items to a session by either handle (past FOLD_AT, the write folds them)."""
        store = self.writer if by_other else self.searcher
        store.append(session, [noted(self.step + i, words) for i in range(n)])
        self.step += n

    @rule(pick=st.integers(0, 1000), session=st.sampled_from(["s", "t"]), by_other=st.booleans())
    def delete(self, pick: int, session: str, by_other: bool) -> None:
        """Delete one item of a session by either handle."""
        store = self.writer if by_other else self.searcher
        seqs = [seq for seq, _ in store.records(session)]
        if len(seqs) > 1:
            with store.batch(session) as batch:
                batch.delete([seqs[pick % len(seqs)]])

    @rule(query=st.sampled_from(QUERIES), session=st.sampled_from(["s", "t"]))
    def search(self, query: str, session: str) -> None:
        """Rank one session (keeping what it read)."""
        want = memory_ranked(self.writer.read(session), query)
        assert_same(ranked(self.searcher, session, query), want)

    @rule(query=st.sampled_from(QUERIES), every=st.integers(1, 4))
    def among(self, query: str, every: int) -> None:
        """Score chosen rows of a session (every ``every``-th step)."""
        items = self.writer.read("s")
        chosen = {item.step for item in items[::every]}
        want = memory_among(items, query, chosen)
        assert_same(among_ranked(self.searcher, "s", query, chosen), want)

    @rule(query=st.sampled_from(QUERIES), session=st.sampled_from(["s", "t"]))
    def frequencies(self, query: str, session: str) -> None:
        """Count the items of a session holding each query term."""
        want = memory_frequencies(self.writer.read(session), query)
        assert frequencies(self.searcher, session, query) == want

    @rule(query=st.sampled_from(QUERIES), both=st.booleans())
    def search_sessions(self, query: str, both: bool) -> None:
        """Rank one or both sessions as one corpus."""
        sessions = ["s", "t"] if both else ["t"]
        want = memory_sessions(self.writer, sessions, query)
        assert_same_across(sessions_ranked(self.searcher, sessions, query), want)


TwoHandlesEveryRead.TestCase.settings = settings(
    max_examples=30, stateful_step_count=20, deadline=None
)
test_every_keyword_read_between_two_handles_writes_ranks_as_memory = TwoHandlesEveryRead.TestCase
