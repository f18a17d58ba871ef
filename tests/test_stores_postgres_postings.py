"""The PostgreSQL store's posting blocks: kept equal to the rows by every write, ranked as ``Memory.search``, migrated from version 8."""

from __future__ import annotations

import itertools
import multiprocessing
import subprocess
import sys
import textwrap
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from agents.memory import Memory, MemoryItem
from agents.memory.exceptions import CorruptStoreError
from agents.memory.search import Filter
from agents.memory.stores import PostgresStore

psycopg = pytest.importorskip("psycopg")

from postgres_checks import rows_read, skip_without_flushed_counters  # noqa: E402  # after the skip: it needs psycopg

from agents.memory.stores._postgres import postings as _postings  # noqa: E402  # after the skip: the postgres extra

pytestmark = pytest.mark.postgres

WORDS = ("the", "report", "dialog", "file", "open", "ok", "zeta", "chart")
LONG = "q" * 1200  # filed under its digest (longer than a block key keeps)
QUERIES = ("the", "the report", "file ok ok", "zeta chart dialog", LONG, f"open {LONG} the")

texts = st.lists(st.sampled_from((*WORDS, LONG)), min_size=0, max_size=8).map(" ".join)


def postings_of_rows(url: str) -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    """Return every (session, term key, seq, count, length) the rows' counts hold, and every one the blocks and the unfolded rows hold together.

    The blocks' postings of stale rows do not count; the rows above their
    session's mark and the stale rows still there count from the rows.
    Also checks what the fold keeps: no block holds a posting above its
    session's mark, each stale row logs exactly the postings the blocks
    hold for it, no block is empty or disagrees with its ``n``, ``lo``, ``hi``,
    and its packed copies (schema version 12) are its arrays' elements.
    """
    with psycopg.connect(url, autocommit=True) as con:
        rows = con.execute(
            "SELECT i.session_id, kvmemory_posting_key(e.key), i.seq, e.value::int, i.n_terms"
            " FROM kvmemory_items AS i CROSS JOIN LATERAL jsonb_each_text(i.tf) AS e"
        ).fetchall()
        blocks = con.execute(
            "SELECT p.session_id, p.term, u.s, u.f, u.l FROM kvmemory_postings AS p"
            " CROSS JOIN LATERAL unnest(p.seqs, p.tfs, p.lens) AS u(s, f, l)"
        ).fetchall()
        marks = dict(con.execute("SELECT session_id, seq FROM kvmemory_postings_folded").fetchall())
        stale = con.execute(
            "SELECT g.session_id, kvmemory_posting_key(e.key), g.seq, e.value::int"
            " FROM kvmemory_postings_stale AS g CROSS JOIN LATERAL jsonb_each_text(g.tf) AS e"
        ).fetchall()
        stale_seqs = set(
            con.execute("SELECT session_id, seq FROM kvmemory_postings_stale").fetchall()
        )
        sizes = con.execute(
            "SELECT count(*) FROM kvmemory_postings WHERE n <> cardinality(seqs) OR n = 0"
            " OR lo <> (SELECT min(s) FROM unnest(seqs) AS s)"
            " OR hi <> (SELECT max(s) FROM unnest(seqs) AS s)"
        ).fetchone()
        # The packed copies against array_send's elements without their frames (an independent packing).
        unframed = "decode(regexp_replace(substr(encode(array_send({}), 'hex'), 41), '.{{8}}(.{{{}}})', '\\1', 'g'), 'hex')"
        copies = con.execute(
            f"SELECT count(*) FROM kvmemory_postings WHERE seqs_packed IS DISTINCT FROM {unframed.format('seqs', 16)}"
            f" OR tfs_packed IS DISTINCT FROM {unframed.format('tfs', 8)}"
            f" OR lens_packed IS DISTINCT FROM {unframed.format('lens', 8)}"
        ).fetchone()
    assert copies == (0,), "a block's packed copies disagree with its arrays"
    assert len(blocks) == len(set(blocks)), "a posting is filed twice"
    assert sizes == (0,), "a block is empty, or its n, lo or hi disagrees with its postings"
    assert all(seq <= marks.get(sid, 0) for sid, _, seq, _, _ in blocks), (
        "a block holds a row above the mark"
    )
    assert all(seq <= marks.get(sid, 0) for sid, seq in stale_seqs), "a stale row above the mark"
    held_for_stale = {(sid, t, seq, f) for sid, t, seq, f, _ in blocks if (sid, seq) in stale_seqs}
    assert held_for_stale == set(stale), "a stale row logs other postings than the blocks hold"
    unfolded = {
        (sid, t, seq, f, n)
        for sid, t, seq, f, n in rows
        if seq > marks.get(sid, 0) or (sid, seq) in stale_seqs
    }
    folded = {posting for posting in blocks if (posting[0], posting[2]) not in stale_seqs}
    assert not folded & unfolded, "a posting is both in a block and unfolded"
    return set(rows), folded | unfolded


def unfolded_counts(url: str) -> dict[str, int]:
    """Return each session's unfolded rows as the fold counts them: seqs reserved above its mark, plus its stale rows."""
    with psycopg.connect(url, autocommit=True) as con:
        rows = con.execute(
            "SELECT x.session_id, x.next_seq - coalesce(f.seq, 0)"
            " + (SELECT count(*) FROM kvmemory_postings_stale AS g WHERE g.session_id = x.session_id)"
            " FROM kvmemory_sessions AS x"
            " LEFT JOIN kvmemory_postings_folded AS f ON f.session_id = x.session_id"
        ).fetchall()
    return {str(sid): int(n) for sid, n in rows}


def folding_every(url: str, rows: int) -> str:
    """Return ``url`` with its connections folding a session's unfolded rows past ``rows`` (``kvmemory.fold_rows``)."""
    return f"{url}%20-ckvmemory.fold_rows%3D{rows}"


def ranked_by_memory(
    items: dict[int, MemoryItem], query: str, k: int, where: dict[str, Any] | None = None
) -> list[tuple[int, float]]:
    """Return ``Memory.search``'s ``(seq, score)`` over the items (added in seq order), with a filter where given."""
    memory = Memory()
    seq_of_step = {}
    for seq, item in sorted(items.items()):
        memory.add_memory_item(item)
        seq_of_step[item.step] = seq
    return [(seq_of_step[hit.item.step], hit.score) for hit in memory.search(query, k, where=where)]


class TwoHandlesAgainstMemory(RuleBasedStateMachine):
    """Two handles append (one step, a batch), update, delete and clear one session; the blocks and unfolded rows stay the rows' and every ranking is ``Memory.search``'s."""

    url: str
    fold_rows: int

    @initialize()
    def open_handles(self) -> None:
        """Open two handles on a fresh schema."""
        self.handles = [PostgresStore(self.url, pgvector=False) for _ in range(2)]
        self.session = f"s{next(_SESSIONS)}"
        self.items: dict[int, MemoryItem] = {}
        self.steps = itertools.count()
        # A second session, searched with the first store-wide (its id sorts before it).
        self.other = f"o{self.session}"
        beside = [
            MemoryItem(step=-1 - j, note=" ".join(WORDS[j % 5 : j % 7 + 1])) for j in range(9)
        ]
        self.other_items = dict(
            zip(self.handles[0].append(self.other, beside), beside, strict=True)
        )
        self.handles[0].delete_seqs(self.other, [min(self.other_items)])  # stale once folded
        del self.other_items[min(self.other_items)]

    def _item(self, text: str) -> MemoryItem:
        return MemoryItem(step=next(self.steps), note=text)

    @rule(handle=st.integers(0, 1), text=texts)
    def append_one(self, handle: int, text: str) -> None:
        """Append one step."""
        item = self._item(text)
        (seq,) = self.handles[handle].append(self.session, [item])
        self.items[seq] = item

    @rule(handle=st.integers(0, 1), batch=st.lists(texts, min_size=1, max_size=30))
    def append_batch(self, handle: int, batch: list[str]) -> None:
        """Append a batch of steps."""
        items = [self._item(text) for text in batch]
        seqs = self.handles[handle].append(self.session, items)
        self.items.update(zip(seqs, items, strict=True))

    @precondition(lambda self: self.items)
    @rule(handle=st.integers(0, 1), data=st.data())
    def update(self, handle: int, data: st.DataObject) -> None:
        """Replace the fields of some steps (their step kept)."""
        chosen = data.draw(st.lists(st.sampled_from(sorted(self.items)), min_size=1, unique=True))
        new = {seq: MemoryItem(step=self.items[seq].step, note=data.draw(texts)) for seq in chosen}
        with self.handles[handle].batch(self.session) as batch:
            batch.update(new)
        self.items.update(new)

    @precondition(lambda self: self.items)
    @rule(handle=st.integers(0, 1), data=st.data())
    def delete(self, handle: int, data: st.DataObject) -> None:
        """Delete some steps by seq."""
        chosen = data.draw(st.lists(st.sampled_from(sorted(self.items)), min_size=1, unique=True))
        self.handles[handle].delete_seqs(self.session, chosen)
        for seq in chosen:
            del self.items[seq]

    @rule(handle=st.integers(0, 1), text=texts)
    def update_and_append_together(self, handle: int, text: str) -> None:
        """Delete the oldest step and append one in one transaction."""
        item = self._item(text)
        oldest = min(self.items) if self.items else None
        with self.handles[handle].batch(self.session) as batch:
            if oldest is not None:
                batch.delete([oldest])
            batch.append([item])
        if oldest is not None:
            del self.items[oldest]
        self.items[batch.appended[0]] = item

    @rule(handle=st.integers(0, 1))
    def clear(self, handle: int) -> None:
        """Delete every step (rarely drawn often: hypothesis shrinks towards it)."""
        self.handles[handle].clear(self.session)
        self.items.clear()

    @invariant()
    def blocks_hold_the_rows(self) -> None:
        """The blocks and the unfolded rows hold exactly the postings of the rows' counts; no write leaves more unfolded rows than the limit."""
        if not hasattr(self, "handles"):
            return
        rows, blocks = postings_of_rows(self.url)
        assert blocks == rows
        assert all(n <= self.fold_rows for n in unfolded_counts(self.url).values())

    @invariant()
    def every_query_ranks_as_memory(self) -> None:
        """Each query's hits, scores and tie order equal ``Memory.search``'s, from either handle."""
        if not hasattr(self, "handles"):
            return
        k = max(len(self.items), 1)
        for query, handle in zip(QUERIES, itertools.cycle(self.handles), strict=False):
            got = [
                (hit.seq, hit.score)
                for hit in handle.search(self.session, query, k, mode="keyword")
            ]
            assert got == ranked_by_memory(self.items, query, k), query
            top3 = [
                (hit.seq, hit.score)
                for hit in handle.search(self.session, query, 3, mode="keyword")
            ]
            assert top3 == got[:3], query
            with mock.patch.dict(sys.modules, {"numpy": None}):  # as without numpy: pure Python
                plain = handle.search(self.session, query, k, mode="keyword")
            assert [(hit.seq, hit.score) for hit in plain] == got, query

    @invariant()
    def every_filtered_query_ranks_as_memory(self) -> None:
        """Each filtered query (a filter keeping few steps, one keeping many) gives ``Memory.search``'s hits and scores, from either handle."""
        if not hasattr(self, "handles"):
            return
        steps = sorted(item.step for item in self.items.values())
        wheres = (
            {"step": {"$in": steps[::5]}},
            {"step": {"$gte": steps[len(steps) // 3]}} if steps else {"step": 0},
        )
        k = 3
        for where, handle in zip(wheres, self.handles, strict=True):
            for query in QUERIES[:4]:
                got = handle.search(self.session, query, k, mode="keyword", where=where)
                expected = ranked_by_memory(self.items, query, k, where)
                assert [(hit.seq, hit.score) for hit in got] == expected, (query, where)

    @invariant()
    def store_wide_queries_rank_as_memory(self) -> None:
        """A store-wide search of the two sessions gives ``Memory.search``'s hits and scores over their union (session-id order, then seq), from either handle."""
        if not hasattr(self, "handles"):
            return
        memory = Memory()
        origin: dict[int, tuple[str, int]] = {}
        for sid, items in sorted(((self.session, self.items), (self.other, self.other_items))):
            for seq, item in sorted(items.items()):
                memory.add_memory_item(item)
                origin[item.step] = (sid, seq)
        scope = [self.session, self.other]
        for query, handle in zip(QUERIES, itertools.cycle(self.handles), strict=False):
            got = handle.search_sessions(query, 6, sessions=scope)
            expected = [(*origin[hit.item.step], hit.score) for hit in memory.search(query, 6)]
            assert [(hit.session_id, hit.seq, hit.score) for hit in got] == expected, query
            with mock.patch.dict(sys.modules, {"numpy": None}):  # as without numpy: pure Python
                plain = handle.search_sessions(query, 6, sessions=scope)
            assert [(hit.session_id, hit.seq, hit.score) for hit in plain] == expected, query

    def teardown(self) -> None:
        """Close the handles."""
        for handle in getattr(self, "handles", ()):
            handle.close()


_SESSIONS = itertools.count()


@pytest.mark.parametrize("fold_rows", [4, _postings.FOLD_ROWS])
def test_two_handles_keep_the_blocks_equal_to_the_rows_and_rank_as_memory(
    postgres_url: str, fold_rows: int
) -> None:
    """Appends (one step, batches), updates, deletes and clears by two handles, folded every few rows or not at all, leave the blocks and unfolded rows equal to the rows; every ranking equals Memory.search's."""
    TwoHandlesAgainstMemory.url = (
        folding_every(postgres_url, fold_rows) if fold_rows != _postings.FOLD_ROWS else postgres_url
    )
    TwoHandlesAgainstMemory.fold_rows = fold_rows
    machine = TwoHandlesAgainstMemory.TestCase
    machine.settings = settings(
        max_examples=25,
        stateful_step_count=12,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    machine().runTest()


def _append_in_a_process(url: str, session: str, worker: int) -> None:
    """Append steps one by one and in batches, and delete some, from a process of its own."""
    with PostgresStore(url, pgvector=False) as store:
        for j in range(12):
            text = " ".join(WORDS[(worker + j + i) % len(WORDS)] for i in range(j % 5 + 1))
            if j % 3 == 0:
                store.append(session, [MemoryItem(step=100_000 * worker + j, note=text)])
            else:
                seqs = store.append(
                    session,
                    [MemoryItem(step=100_000 * worker + 100 * j + i, note=text) for i in range(7)],
                )
                store.delete_seqs(session, seqs[:2])


def test_two_processes_writing_one_session_leave_the_blocks_equal_to_the_rows(
    postgres_url: str,
) -> None:
    """Two processes appending (one step and batches) and deleting in one session at once, folding every few rows, leave the blocks and unfolded rows equal to the rows, and rank as Memory.search."""
    postgres_url = folding_every(postgres_url, 5)  # folds while the other process writes
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_append_in_a_process, args=(postgres_url, "s", worker))
        for worker in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    rows, blocks = postings_of_rows(postgres_url)
    assert blocks == rows
    with PostgresStore(postgres_url, pgvector=False) as store:
        items = {record.seq: record.item for record in store.records("s")}
        for query in QUERIES:
            got = [(hit.seq, hit.score) for hit in store.search("s", query, 200, mode="keyword")]
            assert got == ranked_by_memory(items, query, 200), query


def test_one_step_appends_fill_a_few_blocks_per_term(postgres_url: str) -> None:
    """Many one-step appends, folded every 9 rows, leave each term at most one block per BLOCK_ROOM postings (plus one), not a block per fold."""
    appends = _postings.BLOCK_ROOM + 40
    url = folding_every(postgres_url, 8)
    with PostgresStore(url, pgvector=False) as store:
        for step in range(appends):
            store.append("s", [MemoryItem(step=step, note="the report")])
    with psycopg.connect(url, autocommit=True) as con:
        rows = con.execute(
            "SELECT term, count(*), sum(n) FROM kvmemory_postings GROUP BY term ORDER BY term"
        ).fetchall()
    folded = appends - unfolded_counts(url)["s"]
    assert folded == appends // 9 * 9
    assert rows == [("report", 2, folded), ("the", 2, folded)]


def block_rows(url: str) -> list[tuple[Any, ...]]:
    """Return every block row as the server keeps it (its physical place too: a block written again moves)."""
    with psycopg.connect(url, autocommit=True) as con:
        return con.execute(
            "SELECT ctid::text, session_id, term, n FROM kvmemory_postings ORDER BY 1"
        ).fetchall()


def test_one_step_writes_leave_the_blocks_alone_until_a_fold(postgres_url: str) -> None:
    """One-step appends and deletes below the limit write no block (the rows above the mark and the stale rows are read instead); the write that passes it folds them all at once; every ranking between equals Memory.search's."""
    url = folding_every(postgres_url, 6)
    items = {seq + 1: MemoryItem(step=seq, note=f"the file {seq % 3}") for seq in range(12)}
    with PostgresStore(url, pgvector=False) as store:
        store.append("s", list(items.values()))  # 12 rows: past the limit, folded at once
        assert unfolded_counts(url) == {"s": 0}
        before = block_rows(url)
        for step in range(12, 15):
            (seq,) = store.append("s", [MemoryItem(step=step, note="the report")])
            items[seq] = MemoryItem(step=step, note="the report")
        store.delete_seqs("s", [2])
        del items[2]
        with store.batch("s") as batch:
            batch.update({3: MemoryItem(step=2, note="zeta")})
        items[3] = MemoryItem(step=2, note="zeta")
        assert block_rows(url) == before
        assert unfolded_counts(url) == {"s": 5}
        for query in ("the", "file report zeta", "report"):
            got = [(hit.seq, hit.score) for hit in store.search("s", query, 20, mode="keyword")]
            assert got == ranked_by_memory(items, query, 20), query
        (seq,) = store.append("s", [MemoryItem(step=15, note="the chart")])
        items[seq] = MemoryItem(step=15, note="the chart")
        store.append("s", [MemoryItem(step=16, note="the chart")])  # the 7th: folds
        items[seq + 1] = MemoryItem(step=16, note="the chart")
        assert unfolded_counts(url) == {"s": 0}
        assert block_rows(url) != before
        rows, blocks = postings_of_rows(url)
        assert blocks == rows
        for query in ("the", "file report zeta chart"):
            got = [(hit.seq, hit.score) for hit in store.search("s", query, 20, mode="keyword")]
            assert got == ranked_by_memory(items, query, 20), query


def write_v8_store(url: str) -> dict[str, dict[int, MemoryItem]]:
    """Leave tables of schema version 8 (no posting blocks) written by appends, updates and deletes in three sessions; return each live session's items by seq."""
    with PostgresStore(url, pgvector=False) as store, psycopg.connect(url, autocommit=True) as con:
        _postings.drop_posting_triggers(con)
        con.execute(
            "DROP TABLE kvmemory_postings, kvmemory_postings_folded, kvmemory_postings_stale"
        )
        con.execute("DROP FUNCTION kvmemory_postings_inserted, kvmemory_postings_deleted")
        con.execute("DROP FUNCTION kvmemory_postings_updated, kvmemory_posting_key")
        con.execute("DROP FUNCTION kvmemory_postings_fold, kvmemory_postings_fold_rows")
        con.execute("UPDATE kvmemory_schema SET version = 8")
        # Written with the version 8 layout: no trigger files a posting.
        for sid in ("a", "b", "gone"):
            notes = [" ".join(WORDS[(i * j) % len(WORDS)] for j in range(i % 6)) for i in range(40)]
            store.append(sid, [MemoryItem(step=i, note=note) for i, note in enumerate(notes)])
            for i in range(40, 45):
                store.append(sid, [MemoryItem(step=i, note=f"the {LONG} zeta")])
            store.delete_seqs(sid, [3, 4, 30])
            with store.batch(sid) as batch:
                batch.update({7: MemoryItem(step=7, note="chart chart the"), 8: MemoryItem(step=8)})
        store.delete_session("gone")
        return {sid: {r.seq: r.item for r in store.records(sid)} for sid in ("a", "b")}


def test_a_damaged_row_of_v8_tables_is_named_on_a_filtered_search(postgres_url: str) -> None:
    """Tables of version 8 opened read-only rank from the rows: a row whose tsvector holds a term its counts lack makes a filtered search raise, naming the repair; the tables, migrated and rebuilt, rank as Memory.search."""
    sessions = write_v8_store(postgres_url)
    damaged = min(
        seq
        for seq, item in sessions["a"].items()
        if "the" in str(item.get_value("note") or "").split()
    )
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(
            "UPDATE kvmemory_items SET tf = '{}' WHERE session_id = 'a' AND seq = %s", (damaged,)
        )
    with PostgresStore(postgres_url, pgvector=False, read_only=True) as store:
        with pytest.raises(CorruptStoreError, match=r"keyword index.*rebuild_keyword_index"):
            store.search("a", "the", where={"step": range(100)})
        assert {r.seq: r.item for r in store.records("a")} == sessions["a"]
    with PostgresStore(postgres_url, pgvector=False) as store:
        store.rebuild_keyword_index()
        got = store.search("a", "the", 50, mode="keyword", where={"step": range(100)})
    expected = ranked_by_memory(sessions["a"], "the", 50, {"step": range(100)})
    assert [(hit.seq, hit.score) for hit in got] == expected


def test_v8_store_is_migrated_to_posting_blocks_and_ranks_the_same(postgres_url: str) -> None:
    """v8 tables opened read-only rank from the rows and stay version 8; opened writable, every session's blocks are filled from its rows and rank as Memory.search."""
    sessions = write_v8_store(postgres_url)
    with PostgresStore(postgres_url, read_only=True, pgvector=False) as reader:
        for sid, items in sessions.items():
            for query in QUERIES:
                got = [
                    (hit.seq, hit.score) for hit in reader.search(sid, query, 50, mode="keyword")
                ]
                assert got == ranked_by_memory(items, query, 50), (sid, query)
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [(8,)]
        assert con.execute("SELECT to_regclass('kvmemory_postings')").fetchone() == (None,)
    with PostgresStore(postgres_url, pgvector=False) as store:
        rows, blocks = postings_of_rows(postgres_url)
        assert blocks == rows
        assert {sid for sid, *_ in blocks} == {"a", "b"}
        for sid, items in sessions.items():
            for query in QUERIES:
                got = [(hit.seq, hit.score) for hit in store.search(sid, query, 50, mode="keyword")]
                assert got == ranked_by_memory(items, query, 50), (sid, query)
        # Kept by the triggers from then on.
        store.append("a", [MemoryItem(step=99, note="zeta zeta report")])
        rows, blocks = postings_of_rows(postgres_url)
        assert blocks == rows
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [
            (PostgresStore.schema_version,)
        ]


def test_a_keyword_ranking_reads_the_blocks_not_the_rows_of_a_common_word(
    postgres_url: str,
) -> None:
    """Ranking and counting a session of 400 folded steps by words every step holds reads no row of kvmemory_items (the server's row counters): the rows' ranking read all 400."""
    skip_without_flushed_counters(postgres_url)
    url = folding_every(postgres_url, 64)  # the batch is folded as it is written
    with PostgresStore(url, pgvector=False, min_size=1, max_size=1) as store:
        store.append("s", [MemoryItem(step=i, note=f"the report {i}") for i in range(400)])
        before = rows_read(store)
        best = store.backend.keyword_top("s", ["the", "report"], 5)
        frequencies = store.backend.keyword_frequencies("s", ["the", "report", "7"])
        after = rows_read(store)
    assert best is not None
    assert [seq for _, seq in best] == [1, 2, 3, 4, 5]
    assert frequencies == {"the": 400, "report": 400, "7": 1}
    assert after - before == 0


def test_a_damaged_block_is_named_with_the_fix_and_rebuilt(postgres_url: str) -> None:
    """A block whose arrays disagree (altered outside kvmemory) makes a keyword search raise naming rebuild_keyword_index; the rebuild restores the ranking."""
    items = {seq + 1: MemoryItem(step=seq, note=f"the file {seq}") for seq in range(20)}
    with PostgresStore(folding_every(postgres_url, 8), pgvector=False) as store:
        store.append("s", list(items.values()))
        with psycopg.connect(postgres_url, autocommit=True) as con:
            con.execute("UPDATE kvmemory_postings SET tfs = tfs[2:] WHERE term = 'file'")
        with pytest.raises(CorruptStoreError, match=r"'file'.*rebuild_keyword_index"):
            store.search("s", "the file", 5, mode="keyword")
        store.rebuild_keyword_index()
        rows, blocks = postings_of_rows(postgres_url)
        assert blocks == rows
        got = [(hit.seq, hit.score) for hit in store.search("s", "the file", 5, mode="keyword")]
        assert got == ranked_by_memory(items, "the file", 5)


@pytest.mark.parametrize("summed", ["numpy", "python"])
def test_a_session_of_sparse_high_seqs_ranks_as_memory(postgres_url: str, summed: str) -> None:
    """Seqs far above the session's postings (a long-lived session) rank as Memory.search, with numpy's sparse path and in pure Python."""
    with PostgresStore(postgres_url, pgvector=False) as store:
        store.append("s", [MemoryItem(step=-1, note="the")])
        with psycopg.connect(postgres_url, autocommit=True) as con:
            con.execute("UPDATE kvmemory_sessions SET next_seq = 5000000 WHERE session_id = 's'")
        notes = [" ".join(WORDS[(i * j) % len(WORDS)] for j in range(i % 7)) for i in range(60)]
        seqs = store.append("s", [MemoryItem(step=i, note=note) for i, note in enumerate(notes)])
        items = {1: MemoryItem(step=-1, note="the")}
        items.update(
            (seq, MemoryItem(step=i, note=note))
            for i, (seq, note) in enumerate(zip(seqs, notes, strict=True))
        )
        hidden = {"numpy": None} if summed == "python" else {}  # import numpy raises ImportError
        with mock.patch.dict(sys.modules, hidden):
            for query in QUERIES:
                got = [(hit.seq, hit.score) for hit in store.search("s", query, 8, mode="keyword")]
                assert got == ranked_by_memory(items, query, 8), query


def _filtered_items(start: int, n: int) -> list[MemoryItem]:
    """Return steps ``start`` to ``start + n``: the first 1,100 hold "alpha beta" (ranked first), the others "alpha" alone, each of its own length."""
    return [
        MemoryItem(
            step=step,
            note=" ".join(["alpha", *(["beta"] if step < 1100 else []), *["pad"] * (step % 7)]),
        )
        for step in range(start, start + n)
    ]


FILTERS = (
    {"step": {"$lt": 600}},  # many, at the top of the ranking
    {"step": {"$in": [1500, 2501, 3502, 4003, 5004, 5555, 10]}},  # few, down the ranking
    {"step": {"$gte": 1100}},  # many, none at the top: found down longer rankings
    {"step": 4242},  # one
)


@pytest.mark.parametrize("fold_rows", [64, _postings.FOLD_ROWS])
def test_filtered_rankings_from_the_blocks_equal_memory_search(
    postgres_url: str, fold_rows: int
) -> None:
    """A filtered keyword search ranks as Memory.search (hits and scores to the float) with rows folded and unfolded, stale rows (updated, deleted after a fold), filters keeping few or many rows down or at the top of the ranking, and another session beside."""
    url = folding_every(postgres_url, fold_rows)
    with PostgresStore(url, pgvector=False) as store:
        items: dict[int, MemoryItem] = {}
        for start in range(0, 6000, 1500):
            batch = _filtered_items(start, 1500)
            items.update(zip(store.append("s", batch), batch, strict=True))
        store.append("other", _filtered_items(0, 50))  # the same terms in another session
        for _ in range(2):
            for where in FILTERS:
                for query in ("alpha beta", "beta pad", "alpha"):
                    got = store.search("s", query, 5, mode="keyword", where=where)
                    expected = ranked_by_memory(items, query, 5, where)
                    assert [(hit.seq, hit.score) for hit in got] == expected, (query, where)
            # Stale rows: some deleted, some updated (rows at the top, down it, and filtered).
            seqs = sorted(items)
            gone = [seqs[0], seqs[1500], seqs[4242], seqs[5555]]
            store.delete_seqs("s", gone)
            for seq in gone:
                del items[seq]
            new = {
                seq: MemoryItem(step=items[seq].step, note="beta beta pad")
                for seq in (seqs[3], seqs[2501], seqs[5004])
            }
            with store.batch("s") as batch:
                batch.update(new)
            items.update(new)
            more = _filtered_items(6000, 3)
            items.update(zip(store.append("s", more), more, strict=True))  # unfolded


def test_a_filtered_ranking_reads_the_blocks_not_the_rows_of_a_common_word(
    postgres_url: str,
) -> None:
    """A filtered search keeping half of 3,000 folded steps, by words every step holds, reads the rows the blocks rank first (by key), not every row holding a word (the rows' ranking read all 3,000)."""
    skip_without_flushed_counters(postgres_url)
    url = folding_every(postgres_url, 64)  # the batch is folded as it is written
    items = {seq + 1: MemoryItem(step=seq, note=f"the report {seq}") for seq in range(3000)}
    where = {"step": {"$lt": 1500}}
    with PostgresStore(url, pgvector=False, min_size=1, max_size=1) as store:
        store.append("s", list(items.values()))
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(
            "ANALYZE kvmemory_items"
        )  # as autovacuum would: the planner knows the session's size
    with PostgresStore(url, pgvector=False, min_size=1, max_size=1) as store:
        before = rows_read(store)
        best = store.backend.keyword_top_where("s", ["the", "report"], 5, Filter.of(where).tree)
        after = rows_read(store)
        hits = store.search("s", "the report", 5, mode="keyword", where=where)
    assert best is not None
    assert [(hit.seq, hit.score) for hit in hits] == ranked_by_memory(items, "the report", 5, where)
    assert [seq for _, seq in best] == [hit.seq for hit in hits]
    assert after - before <= 64


def test_a_store_wide_ranking_reads_the_blocks_not_the_rows_of_a_common_word(
    postgres_url: str,
) -> None:
    """Ranking three sessions of 300 folded steps as one corpus, by words every step holds, reads no row of kvmemory_items (the rows' ranking read all 900), and ranks as Memory.search over their union."""
    skip_without_flushed_counters(postgres_url)
    url = folding_every(postgres_url, 64)  # each batch is folded as it is written
    memory = Memory()
    origin = {}
    with PostgresStore(url, pgvector=False, min_size=1, max_size=1) as store:
        for sid in ("a", "b", "c"):
            items = [
                MemoryItem(step=len(origin) + i, note=f"the report {sid} {'x ' * (i % 3)}")
                for i in range(300)
            ]
            for seq, item in zip(store.append(sid, items), items, strict=True):
                memory.add_memory_item(item)
                origin[item.step] = (sid, seq)
        before = rows_read(store)
        best = store.backend.keyword_top_sessions(["c", "a", "b"], ["the", "report"], 5)
        after = rows_read(store)
    expected = [(hit.score, *origin[hit.item.step]) for hit in memory.search("the report", 5)]
    assert best == expected
    assert after - before == 0


_COMMON = ("the", "to", "file", "report")  # "the" and "to" in every step, the others in many
_RARE = ("zeta", "chart", "dialog")  # in a few steps each


@st.composite
def _pruned_sessions(draw: st.DrawFn) -> tuple[list[str], list[int], list[int], str, int]:
    """Draw step notes where common words fill every step and rare ones a few, rows to update and delete, a query and ``k`` (up to past the steps holding a query word)."""
    n = draw(st.integers(8, 40))
    notes = []
    for _ in range(n):
        words = ["the", "to", *draw(st.lists(st.sampled_from(_COMMON), max_size=6))]
        words += ["pad"] * draw(st.integers(0, 30))  # lengths far apart: shares far apart
        if draw(st.integers(0, 5)) == 0:
            words += draw(st.lists(st.sampled_from(_RARE), min_size=1, max_size=3))
        notes.append(" ".join(draw(st.permutations(words))))
    changed = draw(st.lists(st.integers(0, n - 1), max_size=4, unique=True))
    deleted = draw(st.lists(st.integers(0, n - 1), max_size=4, unique=True))
    words = st.sampled_from((*_COMMON, *_RARE))
    query = " ".join(draw(st.lists(words, min_size=1, max_size=5)))
    return notes, changed, deleted, query, draw(st.integers(1, n + 3))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(drawn=_pruned_sessions())
# Steps holding only common words rank first: the rare word's few holders are too long.
@example(
    drawn=(
        [f"zeta {'pad ' * 200}the to file report" for _ in range(8)]
        + ["the to file report " * 3 for _ in range(20)],
        [],
        [],
        "zeta the to file report",
        5,
    )
)
# A rare word whose few short holders lead: the common word's best cannot reach them.
@example(
    drawn=(
        ["zeta the report"] * 3 + ["the to file report pad pad pad pad"] * 37,
        [],
        [],
        "zeta the",
        2,
    )
)
def test_a_ranking_that_leaves_common_words_unread_equals_memory_search(
    postgres_url: str, drawn: tuple[list[str], list[int], list[int], str, int]
) -> None:
    """A ranking that reads only the rare words' blocks and looks the common words up in the candidate rows (MaxScore) gives Memory.search's hits, scores and ties, with every step holding common words, k past the candidates, unfolded and stale rows (updated, deleted after a fold)."""
    notes, changed, deleted, query, k = drawn
    session = f"p{next(_SESSIONS)}"
    used = [0, 0]  # rankings the pruning gave up on, answered

    def counting(*args: Any, **kwargs: Any) -> Any:
        found = pruned(*args, **kwargs)
        used[found is not None] += 1
        return found

    pruned = _postings._prune
    # Terms of more than a third of the steps' postings are common here: their blocks are
    # read only where needed.
    with (
        mock.patch.object(_postings, "_FIRST_READ", len(notes) // 3),
        mock.patch.object(_postings, "_LOOKED_UP_FIRST", 0),  # the k best alone, then the rest
        mock.patch.object(_postings, "_prune", counting),
        PostgresStore(folding_every(postgres_url, 6), pgvector=False) as store,
    ):
        half = len(notes) // 2
        seqs = store.append(
            session, [MemoryItem(step=i, note=t) for i, t in enumerate(notes[:half])]
        )
        seqs += store.append(
            session, [MemoryItem(step=i + half, note=t) for i, t in enumerate(notes[half:])]
        )
        items = {
            seq: MemoryItem(step=i, note=t)
            for i, (seq, t) in enumerate(zip(seqs, notes, strict=True))
        }
        new = {seqs[i]: MemoryItem(step=i, note=f"zeta the {notes[i]} zeta") for i in changed}
        with store.batch(session) as batch:  # folded rows updated become stale
            batch.update(new)
        items.update(new)
        gone = [seqs[i] for i in deleted]
        store.delete_seqs(session, gone)
        for seq in gone:
            items.pop(seq)
        got = [(hit.seq, hit.score) for hit in store.search(session, query, k, mode="keyword")]
        with mock.patch.dict(sys.modules, {"numpy": None}):  # as without numpy: pure Python
            plain = [(h.seq, h.score) for h in store.search(session, query, k, mode="keyword")]
        # Store-wide, beside a session emptied (sorted first: it is not read) and another one.
        emptied, beside = f"a{session}", f"o{session}"
        store.append(emptied, [MemoryItem(step=0, note="zeta the")])
        store.clear(emptied)
        others = [MemoryItem(step=1000 + i, note=t) for i, t in enumerate(notes[::3])]
        memory = Memory()
        origin: dict[int, tuple[str, int]] = {}
        for sid, of in sorted(
            (
                (session, items),
                (beside, dict(zip(store.append(beside, others), others, strict=True))),
            )
        ):
            for seq, item in sorted(of.items()):
                memory.add_memory_item(item)
                origin[item.step] = (sid, seq)
        wide = store.search_sessions(query, k, sessions=[session, emptied, beside])
    assert got == ranked_by_memory(items, query, k)
    assert plain == got
    expected = [(*origin[hit.item.step], hit.score) for hit in memory.search(query, k)]
    assert [(hit.session_id, hit.seq, hit.score) for hit in wide] == expected
    _PRUNED[0] += used[0]
    _PRUNED[1] += used[1]


_PRUNED = [0, 0]  # rankings the pruning gave up on, and answered


def test_the_pruned_rankings_were_drawn() -> None:
    """The sessions above had rankings that the pruning answered (the rare words' blocks alone), and others it left to the whole read (each sure by an explicit example: random draws alone missed one now and then)."""
    if sum(_PRUNED) == 0:
        pytest.skip("the pruned rankings' test did not run first")
    assert _PRUNED[0]
    assert _PRUNED[1]


@pytest.mark.parametrize("numpy", ["installed", "missing"])
def test_numpy_is_imported_as_the_store_opens_not_in_its_first_query(
    numpy: str, postgres_url: str
) -> None:
    """A fresh process's PostgreSQL handle imports numpy (which sums every ranking's blocks) as it opens, so that its first keyword query does not; without numpy it opens and ranks in Python; either way as Memory.search."""
    pytest.importorskip("numpy")
    items = [MemoryItem(step=i, note=f"{WORDS[i % 8]} {WORDS[i * 3 % 8]} ok") for i in range(40)]
    with PostgresStore(postgres_url) as store:
        store.append("s", items)
    # numpy unimportable: a finder that refuses it (psycopg takes a None in sys.modules for numpy)
    hide = "sys.meta_path.insert(0, Refuse())" if numpy == "missing" else ""
    script = f"""
        import sys

        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name == "numpy" or name.startswith("numpy."):
                    raise ImportError(name)

        {hide}
        from agents.memory.stores import open_store
        assert "numpy" not in sys.modules, "imported before the store opens: the test proves nothing"
        with open_store({postgres_url!r}) as store:
            opened = "numpy" in sys.modules
            hits = store.search("s", "the report ok", 5)
        print(opened, [(hit.item.step, hit.score) for hit in hits])
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], check=True, capture_output=True, text=True
    )
    opened, hits = done.stdout.split(" ", 1)
    assert opened == str(numpy == "installed")
    expected = [(hit.item.step, hit.score) for hit in Memory(items).search("the report ok", 5)]
    assert hits.strip() == repr(expected)
