"""The vectors a store handle keeps between semantic queries: reused while unchanged, never stale."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from agents.memory import Memory, MemoryItem
from agents.memory._vectors import checked_vectors, cosines
from agents.memory.search import EmbedParts, HashingEmbedder, _item_vectors, search_index
from agents.memory.stores import Store, open_store
from agents.memory.stores._search.vector_cache import SCREEN_QUERY, Vectors

ROOT = str(Path(__file__).resolve().parent.parent)
KINDS = ["sqlite", "jsonl", "postgres"]
IN_PROCESS_TOO = [*KINDS, "memory"]  # for the tests that need no second process
QUERY = "pay the invoice for March"
EMBEDDER = HashingEmbedder()


def items(n: int) -> list[MemoryItem]:
    """Return ``n`` steps with a thought and an observation each (several parts a step)."""
    verbs = ["open", "close", "save", "print", "rename", "move"]
    things = ["report", "chart", "window", "folder", "draft", "table"]
    return [
        MemoryItem(
            step=i,
            thought=f"{verbs[i % 6]} the {things[(i // 6) % 6]} number {i}",
            observation=f"the {things[i % 6]} is {verbs[(i // 3) % 6]}d now",
        )
        for i in range(n)
    ]


def ranked(store: Store, mode: str = "semantic") -> list[tuple[int, float]]:
    """Return ``(seq, score)`` of the best 8 hits for :data:`QUERY`."""
    hits = store.search("s", QUERY, 8, mode=mode, embedder=EMBEDDER)
    return [(hit.seq, hit.score) for hit in hits]


def both_modes(store: Store) -> dict[str, list[tuple[int, float]]]:
    """Return :func:`ranked` in semantic and in hybrid mode."""
    return {mode: ranked(store, mode) for mode in ("semantic", "hybrid")}


def refuse_vector_reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the store's backend fail any read of a session's vectors page by page."""

    def refuse(*args: object) -> None:
        raise AssertionError("the vectors were read again")

    monkeypatch.setattr(store.backend, "vector_pages", refuse)


def write(url: str, n: int = 60) -> list[int]:
    """Store ``n`` steps in session ``s`` with their vectors; return their seqs."""
    with open_store(url) as store:
        seqs = store.append("s", items(n))
        store.index_embeddings("s", EMBEDDER)
    return seqs


HELD = pytest.mark.parametrize("held", ["queried twice", "read whole"])
"""How a handle came to keep a session's vectors: two queries, or ``Store.read_vectors`` of them all (as a StoredMemory opens)."""


def hold(store: Store, held: str) -> None:
    """Have ``store`` keep session ``s``'s vectors as ``held`` says."""
    if held == "read whole":
        assert len(store.read_vectors("s", EMBEDDER)) == 60
    else:
        ranked(store)  # read page by page
        ranked(store)  # read into the table, kept


@pytest.mark.parametrize("kind", IN_PROCESS_TOO)
@HELD
def test_an_unchanged_session_is_scored_without_reading_its_vectors_again(
    kind: str, held: str, durable_url: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search of an unchanged session reads no vector page from the third query on, or from the first after Store.read_vectors of the whole session (as a StoredMemory opens)."""
    url = durable_url(kind)
    write(url)
    with open_store(url) as fresh:
        want = both_modes(fresh)
    with open_store(url) as store:
        if held == "read whole":
            assert len(store.read_vectors("s", EMBEDDER)) == 60
        else:
            assert both_modes(store) == want  # read, then kept
        refuse_vector_reads(store, monkeypatch)
        assert both_modes(store) == want


@pytest.mark.parametrize("kind", IN_PROCESS_TOO)
@pytest.mark.parametrize("change", ["update last", "update first", "delete", "append"])
def test_a_write_by_a_second_handle_is_seen_by_the_next_search(
    kind: str, change: str, durable_url: Callable[[str], str]
) -> None:
    """A handle that kept a session's vectors ranks by the new ones after another handle changes the session."""
    url = durable_url(kind)
    seqs = write(url)
    with open_store(url) as kept, open_store(url) as other:
        before = ranked(kept)
        assert ranked(kept) == before  # kept now
        if change.startswith("update"):
            # The last vector row is written again in its place (SQLite gives it its rowid back).
            seq = seqs[-1] if change == "update last" else seqs[0]
            with other.batch("s") as batch:
                batch.update({seq: MemoryItem(step=99, thought=QUERY)})
        elif change == "delete":
            other.delete_seqs("s", [before[0][0]])
        else:
            other.append("s", [MemoryItem(step=99, thought=QUERY)])
        other.index_embeddings("s", EMBEDDER)
        after = ranked(kept)
        assert after != before
    with open_store(url) as fresh:
        assert after == ranked(fresh)


@pytest.mark.parametrize("kind", IN_PROCESS_TOO)
def test_kept_vectors_rank_as_memory_search(kind: str, durable_url: Callable[[str], str]) -> None:
    """A search from the kept table gives Memory.search's hits and scores, float for float."""
    url = durable_url(kind)
    write(url)
    memory = Memory(items(60))
    with open_store(url) as store:
        for mode in ("semantic", "hybrid"):
            want = [
                (hit.item["step"], hit.score)
                for hit in memory.search(QUERY, 8, mode=mode, embedder=EMBEDDER)
            ]
            for _ in range(2):  # read, then kept
                hits = store.search("s", QUERY, 8, mode=mode, embedder=EMBEDDER)
                assert [(hit.item["step"], hit.score) for hit in hits] == want


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_whole_item_vectors_the_backend_ranks_itself_are_read_without_keeping_a_table(
    kind: str, durable_url: Callable[[str], str]
) -> None:
    """Store.read_vectors of whole-item vectors that sqlite-vec or pgvector ranks keeps no table, and queries still equal Memory.search."""
    whole = EmbedParts.WHOLE
    with open_store(durable_url(kind)) as store:
        store.append("s", items(60))
        store.index_embeddings("s", EMBEDDER, parts=whole)
        if not (store.uses_sqlite_vec if kind == "sqlite" else store.uses_pgvector):  # type: ignore[attr-defined]  # SQLiteStore, PostgresStore
            pytest.skip(f"the {kind} store ranks no vector itself here (no sqlite-vec or pgvector)")
        assert len(store.read_vectors("s", EMBEDDER, parts=whole)) == 60
        assert store._vectors._cache.sizes() == {}
        memory = Memory(items(60))
        search_index(memory, parts=whole)
        for mode in ("semantic", "hybrid"):
            for keep in (None, {"step": {"$gte": 30}}, {"step": 7}):
                want = memory.search(QUERY, 8, mode=mode, embedder=EMBEDDER, where=keep)
                hits = store.search(
                    "s", QUERY, 8, mode=mode, embedder=EMBEDDER, parts=whole, where=keep
                )
                assert [hit.item["step"] for hit in hits] == [hit.item["step"] for hit in want]
                assert [hit.score for hit in hits] == pytest.approx(
                    [hit.score for hit in want], abs=1e-6
                )
        assert store._vectors._cache.sizes() == {}
        assert store.backend.ranks_vectors("s", "*")


@pytest.mark.parametrize("kind", IN_PROCESS_TOO)
def test_a_kept_table_holds_a_part_vector_that_steps_repeat_once(
    kind: str, durable_url: Callable[[str], str]
) -> None:
    """Steps that repeat an observation word for word share its vector in the kept table: one row per distinct part."""
    url = durable_url(kind)
    write(url)
    steps = items(60)
    distinct = {text for step in steps for text in (step["thought"], step["observation"])}
    memory = Memory(steps)
    want = [
        (hit.item["step"], hit.score)
        for hit in memory.search(QUERY, 8, mode="semantic", embedder=EMBEDDER)
    ]
    with open_store(url) as store:
        for _ in range(SCREEN_QUERY):  # read, kept, then compacted (too small to screen)
            hits = store.search("s", QUERY, 8, mode="semantic", embedder=EMBEDDER)
            assert [(hit.item["step"], hit.score) for hit in hits] == want
        store._vectors._cache.settle()  # the compaction runs on a thread
        assert list(store._vectors._cache.sizes().values()) == [len(distinct)]
        hits = store.search("s", QUERY, 8, mode="semantic", embedder=EMBEDDER)
        assert [(hit.item["step"], hit.score) for hit in hits] == want
    assert len(distinct) < 2 * len(steps)


def test_queries_go_on_with_the_plain_table_while_it_is_compacted_and_a_write_meanwhile_discards_the_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compaction runs on a thread: queries meanwhile rank from the plain table, and a table compacted from a version a write has replaced is not taken (the plain one, updated, is kept)."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    write(url)
    started, release = threading.Event(), threading.Event()
    compacted = Vectors.compacted

    def gated(table: Vectors) -> Vectors:
        started.set()
        release.wait(10)
        return compacted(table)

    monkeypatch.setattr(Vectors, "compacted", gated)
    with open_store(url) as store:
        for _ in range(SCREEN_QUERY):
            ranked(store)
        assert started.wait(10)
        plain = store._vectors._cache.sizes()
        memory = Memory(items(60))
        want = [
            (hit.item["step"], hit.score)
            for hit in memory.search(QUERY, 8, mode="semantic", embedder=EMBEDDER)
        ]
        hits = store.search("s", QUERY, 8, mode="semantic", embedder=EMBEDDER)  # not blocked
        assert [(hit.item["step"], hit.score) for hit in hits] == want
        store.append("s", [MemoryItem(step=99, thought="pay the invoice for March today")])
        store.index_embeddings("s", EMBEDDER)
        assert ranked(store)[0][0] == 61  # the plain table, given the written item's part
        release.set()
        store._vectors._cache.settle()
        # The stale compaction was not taken: the plain table with one more row is kept.
        assert list(store._vectors._cache.sizes().values()) == [121]
    assert list(plain.values()) == [120]


WRITER = textwrap.dedent(
    """
    import sys
    from agents.memory import MemoryItem
    from agents.memory.search import HashingEmbedder
    from agents.memory.stores import open_store

    url, seq, text = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open_store(url) as store:
        with store.batch("s") as batch:
            batch.update({seq: MemoryItem(step=99, thought=text)})
        store.index_embeddings("s", HashingEmbedder())
    """
)


@pytest.mark.parametrize("kind", KINDS)
def test_a_write_by_another_process_is_seen_by_the_next_search(
    kind: str, durable_url: Callable[[str], str]
) -> None:
    """A process that rewrites the session's last item and its vector is seen by a handle that kept the old vectors."""
    url = durable_url(kind)
    seqs = write(url)
    with open_store(url) as kept:
        before = ranked(kept)
        assert ranked(kept) == before  # kept now
        env = {**os.environ, "PYTHONPATH": ROOT}
        subprocess.run(
            [sys.executable, "-c", WRITER, url, str(seqs[-1]), QUERY],
            check=True,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        after = ranked(kept)
    assert after != before
    assert after[0] == (seqs[-1], pytest.approx(1.0))


def test_a_read_only_sqlite_handle_sees_a_writer_that_came_later(tmp_path: Path) -> None:
    """A read-only handle, which opens the file again when a writer appears, drops the vectors it kept."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    seqs = write(url)
    with open_store(f"{url}?mode=ro") as reader:
        before = ranked(reader)
        assert ranked(reader) == before  # kept now
        with open_store(url) as writer:
            with writer.batch("s") as batch:
                batch.update({seqs[-1]: MemoryItem(step=99, thought=QUERY)})
            writer.index_embeddings("s", EMBEDDER)
        after = ranked(reader)
    assert after != before
    assert after[0][0] == seqs[-1]


@pytest.mark.parametrize("kind", IN_PROCESS_TOO)
def test_a_write_by_the_same_handle_is_seen_by_its_next_search(
    kind: str, durable_url: Callable[[str], str]
) -> None:
    """A handle's own update of its session's last item, embedded by the next search, changes that search's ranking."""
    url = durable_url(kind)
    seqs = write(url)
    with open_store(url) as store:
        before = ranked(store)
        assert ranked(store) == before  # kept now
        with store.batch("s") as batch:
            batch.update({seqs[-1]: MemoryItem(step=99, thought=QUERY)})
        after = ranked(store)  # embeds the changed item, then ranks
    assert after != before
    assert after[0] == (seqs[-1], pytest.approx(1.0))


def test_a_large_kept_table_is_screened_and_ranks_as_memory_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past 16,384 part vectors (the screen's threshold lowered to that), from the third query at one version, the kept table is screened as Memory.search's: the same hits and scores."""
    monkeypatch.setattr(_item_vectors, "SCREEN_ROWS", 16384)
    import random

    from agents.memory.search import EmbedParts, search_index

    rng = random.Random(8)
    vocabulary = [f"w{n}" for n in range(400)]
    steps = [
        MemoryItem(step=i, text=" ".join(rng.choice(vocabulary) for _ in range(24)))
        for i in range(1700)
    ]
    parts = EmbedParts(chunk_words=2)
    memory = Memory(steps)
    search_index(memory, parts=parts)
    queries = [" ".join(rng.choice(vocabulary) for _ in range(3)) for _ in range(6)]
    with open_store(f"sqlite://{tmp_path / 'store.db'}") as store:
        store.append("s", steps)
        store.index_embeddings("s", EMBEDDER, parts=parts)
        for round_ in range(SCREEN_QUERY // len(queries) + 2):  # read, kept, then compacted
            for query in queries:
                hits = store.search("s", query, 5, mode="semantic", embedder=EMBEDDER, parts=parts)
                want = memory.search(query, 5, mode="semantic", embedder=EMBEDDER)
                assert [(h.item["step"], h.score) for h in hits] == [
                    (h.item["step"], h.score) for h in want
                ], (round_, query)
            store._vectors._cache.settle()  # the compaction runs on a thread
        kept = store._vectors._cache.sizes()  # what the handle keeps
        screened = store._vectors._cache.screened()
    assert max(kept.values()) >= 16384
    assert screened == list(kept)


def test_a_session_over_the_budget_is_read_page_by_page_and_ranks_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session whose vectors pass the handle's budget is not kept: each query reads it, with the same hits."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    write(url)
    with open_store(url) as store:
        want = ranked(store)
        store._vectors._cache.forget("s")
        monkeypatch.setattr(store._vectors._cache, "_budget", 4096)
        assert ranked(store) == want
        assert ranked(store) == want
        assert store._vectors._cache.sizes() == {}


@pytest.mark.parametrize("kind", IN_PROCESS_TOO)
@HELD
def test_a_session_over_the_budget_whose_distinct_parts_fit_is_kept_and_ranks_as_memory_search(
    kind: str, held: str, durable_url: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Part vectors over the budget as stored but within it once each are kept so: no page is read again, and the hits and scores are Memory.search's."""
    url = durable_url(kind)
    write(url)
    steps = items(60)
    distinct = {text for step in steps for text in (step["thought"], step["observation"])}
    memory = Memory(steps)
    want = {
        mode: [
            (hit.item["step"], hit.score)
            for hit in memory.search(QUERY, 8, mode=mode, embedder=EMBEDDER)
        ]
        for mode in ("semantic", "hybrid")
    }
    with open_store(url) as store:
        # Room for each distinct part vector once, not for the 120 part vectors as stored.
        budget = 4 * EMBEDDER.dimension * len(distinct)
        monkeypatch.setattr(store._vectors._cache, "_budget", budget)
        hold(store, held)
        assert list(store._vectors._cache.sizes().values()) == [len(distinct)]
        refuse_vector_reads(store, monkeypatch)
        for mode, hits in want.items():
            found = store.search("s", QUERY, 8, mode=mode, embedder=EMBEDDER)
            assert [(hit.item["step"], hit.score) for hit in found] == hits
    assert 4 * EMBEDDER.dimension * 2 * len(steps) > budget


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_a_handles_own_write_updates_its_kept_table_reading_only_the_changed_items(
    kind: str, durable_url: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a handle's own update and append, its next search reads the changed items' vectors only, and ranks as a fresh handle does."""
    url = durable_url(kind)
    seqs = write(url)
    with open_store(url) as store:
        ranked(store)
        ranked(store)  # kept now
        with store.batch("s") as batch:
            batch.update({seqs[3]: MemoryItem(step=99, thought=QUERY)})
            batch.append([MemoryItem(step=100, thought="pay the invoices of April")])
        store.index_embeddings("s", EMBEDDER)
        asked: list[list[int]] = []
        vectors_of = store.backend.vectors_of

        def counted(session_id: str, fields: str, wanted: list[int]) -> list[tuple[int, bytes]]:
            asked.append(list(wanted))
            return vectors_of(session_id, fields, wanted)

        monkeypatch.setattr(store.backend, "vectors_of", counted)
        monkeypatch.setattr(store.backend, "vector_pages", None)  # a full read would fail
        after = ranked(store)
    with open_store(url) as fresh:
        assert after == ranked(fresh)
    assert asked == [[seqs[3], seqs[-1] + 1]]
    assert after[0] == (seqs[3], pytest.approx(1.0))


@pytest.mark.parametrize("kind", KINDS)
def test_a_write_by_another_handle_between_two_own_writes_has_the_vectors_read_again(
    kind: str, durable_url: Callable[[str], str]
) -> None:
    """Own writes, then another handle's, then own again: the kept table is not updated from the own writes alone, the search sees all three."""
    url = durable_url(kind)
    seqs = write(url)
    with open_store(url) as store, open_store(url) as other:
        ranked(store)
        ranked(store)  # kept now
        store.append("s", [MemoryItem(step=100, thought="open the chart number 7")])
        store.index_embeddings("s", EMBEDDER)
        with other.batch("s") as batch:
            batch.update({seqs[5]: MemoryItem(step=98, thought=QUERY)})
        other.index_embeddings("s", EMBEDDER)
        store.append("s", [MemoryItem(step=101, thought="close the folder number 9")])
        store.index_embeddings("s", EMBEDDER)
        after = ranked(store)
    with open_store(url) as fresh:
        assert after == ranked(fresh)
    assert after[0] == (seqs[5], pytest.approx(1.0))


class KeptAgainstFresh(RuleBasedStateMachine):
    """A handle that keeps its vectors between queries, written by itself, another handle and another process, ranks as a handle opened afresh, and follows the writes from the change log.

    Once its table is kept, a query after a write of one item reads the
    changed items' vectors only, never the session page by page (the
    backend's log names them, whoever wrote), except on a JSONL log
    written anew meanwhile (a compaction).
    """

    kind = "sqlite"

    def __init__(self) -> None:
        super().__init__()
        self.url = self.make_url()
        self.seqs = write(self.url, 12)
        self.store = open_store(self.url)
        self.other = open_store(self.url)
        self.count = 0
        self.full_reads = 0
        pages = self.store.backend.vector_pages

        def counted(*args: Any) -> Any:
            self.full_reads += 1
            return pages(*args)

        self.store.backend.vector_pages = counted  # type: ignore[method-assign]  # counts full reads
        self.header = self._header()

    def make_url(self) -> str:
        """Return the URL of a fresh store for one example."""
        self.folder = tempfile.mkdtemp(prefix="kvmemory-kept-")
        return f"{self.kind}://{self.folder}/store{'.db' if self.kind == 'sqlite' else ''}"

    def drop_store(self) -> None:
        """Remove the store :meth:`make_url` made."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def teardown(self) -> None:
        self.store.close()
        self.other.close()
        self.drop_store()

    def _handle(self, own: bool) -> Store:
        return self.store if own else self.other

    def _header(self) -> object:
        """Return what tells a JSONL log written anew (its header); ``None`` for the other stores."""
        version = self.store.backend.vectors_version("s", "*")
        return version[0] if self.kind == "jsonl" and isinstance(version, tuple) else None

    @rule(own=st.booleans(), word=st.sampled_from(["invoice", "report", "March", "folder"]))
    def append(self, own: bool, word: str) -> None:
        self.count += 1
        handle = self._handle(own)
        self.seqs += handle.append("s", [MemoryItem(step=200 + self.count, thought=f"pay {word}")])
        handle.index_embeddings("s", EMBEDDER)

    @rule(own=st.booleans(), at=st.integers(0, 1000), text=st.sampled_from([QUERY, "a chart"]))
    def update(self, own: bool, at: int, text: str) -> None:
        handle = self._handle(own)
        with handle.batch("s") as batch:
            batch.update({self.seqs[at % len(self.seqs)]: MemoryItem(step=300, thought=text)})
        handle.index_embeddings("s", EMBEDDER)

    @rule(at=st.integers(0, 1000), text=st.sampled_from([QUERY, "a chart"]))
    def update_from_another_process(self, at: int, text: str) -> None:
        seq = self.seqs[at % len(self.seqs)]
        env = {**os.environ, "PYTHONPATH": ROOT}
        subprocess.run(
            [sys.executable, "-c", WRITER, self.url, str(seq), text],
            check=True,
            env=env,
            stdin=subprocess.DEVNULL,
        )

    @rule(own=st.booleans(), at=st.integers(0, 1000))
    def delete(self, own: bool, at: int) -> None:
        if len(self.seqs) > 2:
            seq = self.seqs.pop(at % len(self.seqs))
            with self._handle(own).batch("s") as batch:
                batch.delete([seq])

    @rule(own=st.booleans())
    def update_without_embedding(self, own: bool) -> None:
        with self._handle(own).batch("s") as batch:
            batch.update({self.seqs[0]: MemoryItem(step=301, thought="save the draft")})

    @rule()
    def search(self) -> None:
        ranked(self.store)

    @invariant()
    def ranks_as_a_fresh_handle_reading_only_the_changed_vectors(self) -> None:
        was_kept = bool(self.store._vectors._cache.sizes())
        self.full_reads = 0
        kept = ranked(self.store)
        header, self.header = self.header, self._header()
        # One item changed since the last query; past one in four the session is read again.
        if was_kept and len(self.seqs) >= 6 and header == self.header:
            assert self.full_reads == 0
        with open_store(self.url) as fresh:
            assert kept == ranked(fresh)


class KeptAgainstFreshJSONL(KeptAgainstFresh):
    """:class:`KeptAgainstFresh` on a JSONL store."""

    kind = "jsonl"


class KeptAgainstFreshPostgres(KeptAgainstFresh):
    """:class:`KeptAgainstFresh` on PostgreSQL: each example in a schema of its own on the test server."""

    kind = "postgres"
    server = ""  # set by the test that runs it

    def make_url(self) -> str:
        psycopg = pytest.importorskip("psycopg")
        self.schema = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.server, autocommit=True) as con:
            con.execute(f"CREATE SCHEMA {self.schema}")
        sep = "&" if "?" in self.server else "?"
        return f"{self.server}{sep}options=-csearch_path%3D{self.schema}"

    def drop_store(self) -> None:
        psycopg = pytest.importorskip("psycopg")
        with psycopg.connect(self.server, autocommit=True) as con:
            con.execute(f"DROP SCHEMA {self.schema} CASCADE")


KEPT_SETTINGS: Final = settings(max_examples=12, stateful_step_count=8, deadline=None)
KeptAgainstFresh.TestCase.settings = KEPT_SETTINGS
KeptAgainstFreshJSONL.TestCase.settings = KEPT_SETTINGS
TestKeptAgainstFresh = KeptAgainstFresh.TestCase
TestKeptAgainstFreshJSONL = KeptAgainstFreshJSONL.TestCase


@pytest.mark.postgres
def test_kept_vectors_on_postgres_rank_as_a_fresh_handle_and_follow_the_change_log(
    postgres_server: str,
) -> None:
    """:class:`KeptAgainstFresh` on PostgreSQL (writes by the handle, another handle, another process)."""
    KeptAgainstFreshPostgres.server = postgres_server
    run_state_machine_as_test(KeptAgainstFreshPostgres, settings=KEPT_SETTINGS)


def _unit_rows(rng: Any, count: int, width: int) -> Any:
    rows = rng.standard_normal((count, width)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _rows_of(parts: dict[int, Any]) -> tuple[list[int], Any]:
    keys = [key for key in sorted(parts) for _ in range(len(parts[key]))]
    return keys, np.concatenate([parts[key] for key in sorted(parts)])


class ChangedAgainstReadAnew(RuleBasedStateMachine):
    """A table brought up to date by ``Vectors.changed`` scores as a table read anew from the same vectors; the table it came from is left as it was."""

    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng(3)
        # A few shared rows, as the fields every step repeats.
        self.shared = _unit_rows(self.rng, 3, 8)
        self.parts = {key: self._block(key) for key in range(10)}
        self.table = Vectors.of_rows("m", EmbedParts(), *_rows_of(self.parts))
        self.query = _unit_rows(self.rng, 1, 8)[0]

    def _block(self, key: int) -> Any:
        own = _unit_rows(self.rng, 1 + key % 3, 8)
        return np.concatenate([own, self.shared[key % 2 : key % 2 + 1]])

    @rule(
        keys=st.lists(st.integers(0, 30), max_size=4), gone=st.lists(st.integers(0, 30), max_size=2)
    )
    def change(self, keys: list[int], gone: list[int]) -> None:
        before = self.table.scores(self.query)
        vectors = {key: self._block(key) for key in keys}
        changed = sorted({*keys, *gone})
        new = self.table.changed(changed, vectors)
        assert self.table.scores(self.query) == before  # the old table is untouched
        for key in changed:
            self.parts.pop(key, None)
        self.parts.update(vectors)
        self.table = new

    @rule()
    def compact(self) -> None:
        self.table = self.table.compacted()

    @invariant()
    def scores_as_read_anew(self) -> None:
        if not self.parts:
            return
        anew = Vectors.of_rows("m", EmbedParts(), *_rows_of(self.parts))
        for limit in (None, 1, 3):
            assert self.table.scores(self.query, limit) == anew.scores(self.query, limit)
        assert self.table.scores(self.query, 2, [5, 7]) == anew.scores(self.query, 2, [5, 7])


ChangedAgainstReadAnew.TestCase.settings = settings(
    max_examples=40, stateful_step_count=12, deadline=None
)
TestChangedAgainstReadAnew = ChangedAgainstReadAnew.TestCase


def test_a_screened_table_brought_up_to_date_scores_as_one_read_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past 16,384 rows (screened, the threshold lowered to that), a compacted table given changed and new items scores as a table read and compacted anew."""
    monkeypatch.setattr(_item_vectors, "SCREEN_ROWS", 16384)
    rng = np.random.default_rng(11)
    parts = {key: _unit_rows(rng, 9, 64) for key in range(2000)}
    table = Vectors.of_rows("m", EmbedParts(), *_rows_of(parts)).compacted()
    changed = [3, 1999, 2000, 2001]
    vectors = {key: _unit_rows(rng, 7, 64) for key in changed[1:]}
    new = table.changed(changed, vectors)
    del parts[3]
    parts.update(vectors)
    anew = Vectors.of_rows("m", EmbedParts(), *_rows_of(parts)).compacted()
    assert new.screen is not None
    for query in _unit_rows(rng, 5, 64):
        assert new.scores(query, 5) == anew.scores(query, 5)
        assert new.scores(query, 5, [3, 10]) == anew.scores(query, 5, [3, 10])


@pytest.mark.parametrize("kind", IN_PROCESS_TOO)
def test_an_unchanged_session_counts_its_vector_rows_once(
    kind: str,
    durable_url: Callable[[str], str],
    backend_calls: Callable[[Any, str], list[tuple[Any, ...]]],
) -> None:
    """A writable handle counts a session's vector rows (is any item without one?) at its first query only while they are unchanged."""
    url = durable_url(kind)
    write(url)
    with open_store(url) as store:
        counts = backend_calls(store.backend, "vector_count")
        first = both_modes(store)
        assert len(counts) == 1
        assert both_modes(store) == first
        assert both_modes(store) == first
        assert len(counts) == 1


@pytest.mark.parametrize("kind", IN_PROCESS_TOO)
@pytest.mark.parametrize("change", ["append", "drop vectors"])
def test_items_left_without_a_vector_by_another_handle_are_embedded_by_the_next_search(
    kind: str, change: str, durable_url: Callable[[str], str]
) -> None:
    """After a handle counted the vector rows, another handle's append (no vector) or drop of the vectors is embedded by its next search, which ranks as a fresh handle."""
    url = durable_url(kind)
    write(url)
    with open_store(url) as kept, open_store(url) as other:
        before = both_modes(kept)
        assert both_modes(kept) == before  # counted, and kept
        if change == "append":
            other.append("s", [MemoryItem(step=99, thought=QUERY)])
        else:
            other.drop_vectors("s")
        after = both_modes(kept)
    with open_store(url) as fresh:
        assert after == both_modes(fresh)
    if change == "append":
        assert after != before


_PARTS_POOL: Final = (
    "open the report",
    "press OK to close the dialog",
    "the chart was exported to the shared folder as a PDF file for March",
    "DONE",
    "save the invoice for March in the folder of the finance team today",
)
"""Field texts items draw from: short ones repeat whole, long ones repeat as windows of 8 words."""


def _own_parts_ranking(fields: dict[int, dict[str, str]], query: str) -> list[tuple[int, float]]:
    """Return ``(step, best cosine)`` of every item, scoring each item's own parts alone (no row shared), best first, ties by step."""
    unit = checked_vectors(EMBEDDER, [query])[0]
    best = {}
    for step, item in fields.items():
        texts = EmbedParts().texts(item, None)
        if texts:
            best[step] = float(cosines(checked_vectors(EMBEDDER, texts), unit).max())
    return sorted(best.items(), key=lambda hit: (-hit[1], hit[0]))


class SharedRowsAgainstOwnParts(RuleBasedStateMachine):
    """Parts that items repeat word for word share one row of the index and of each store's kept table, yet every item scores as its own parts scored alone.

    The same adds, changes and deletes go to a ``Memory`` and to a
    ``memory://``, SQLite and JSONL store; each semantic query's hits and
    scores equal those of a plain model that embeds and scores every
    item's parts apart, float for float, whether a store reads its vectors
    page by page, keeps them as read or has compacted its kept table
    (equal rows held once, after :data:`SCREEN_QUERY` queries).
    """

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="kvmemory-shared-")
        self.stores = [
            open_store(f"memory://{uuid.uuid4().hex}"),
            open_store(f"sqlite://{self.folder}/store.db"),
            open_store(f"jsonl://{self.folder}/logs"),
        ]
        self.memory = Memory()
        self.fields: dict[int, dict[str, str]] = {}
        self.seqs: list[dict[int, int]] = [{} for _ in self.stores]  # step -> seq, per store
        self.next_step = 0

    def teardown(self) -> None:
        for store in self.stores:
            store.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    @rule(picks=st.lists(st.integers(0, len(_PARTS_POOL) - 1), min_size=1, max_size=3))
    def add(self, picks: list[int]) -> None:
        step = self.next_step
        self.next_step += 1
        fields = {f"f{at}": _PARTS_POOL[pick] for at, pick in enumerate(picks)}
        self.fields[step] = fields
        self.memory.add_memory_item(MemoryItem(step=step, **fields))
        for store, seqs in zip(self.stores, self.seqs, strict=True):
            (seqs[step],) = store.append("s", [MemoryItem(step=step, **fields)])
            store.index_embeddings("s", EMBEDDER)

    @rule(at=st.integers(0, 1000), pick=st.integers(0, len(_PARTS_POOL) - 1))
    def change(self, at: int, pick: int) -> None:
        if not self.fields:
            return
        position = at % len(self.fields)  # the memory holds the items in step order
        step = sorted(self.fields)[position]
        self.fields[step] = {**self.fields[step], "f0": _PARTS_POOL[pick]}
        self.memory[position]["f0"] = _PARTS_POOL[pick]
        for store, seqs in zip(self.stores, self.seqs, strict=True):
            with store.batch("s") as batch:
                batch.update({seqs[step]: MemoryItem(step=step, **self.fields[step])})
            store.index_embeddings("s", EMBEDDER)

    @rule(at=st.integers(0, 1000))
    def delete(self, at: int) -> None:
        if not self.fields:
            return
        step = sorted(self.fields)[at % len(self.fields)]
        del self.fields[step]
        self.memory.delete_memory_item(step)
        for store, seqs in zip(self.stores, self.seqs, strict=True):
            with store.batch("s") as batch:
                batch.delete([seqs.pop(step)])

    @rule()
    def query_until_compacted(self) -> None:
        for store in self.stores:
            for _ in range(SCREEN_QUERY):
                store.search("s", QUERY, 3, mode="semantic", embedder=EMBEDDER)
            store._vectors._cache.settle()  # the compaction runs on a thread

    @invariant()
    def every_item_scores_as_its_own_parts_alone(self) -> None:
        if not self.fields:
            return
        k = len(self.fields)
        for query in (QUERY, "close the dialog"):
            want = _own_parts_ranking(self.fields, query)
            hits = self.memory.search(query, k, mode="semantic", embedder=EMBEDDER)
            assert [(hit.item["step"], hit.score) for hit in hits] == want
            for limit in (1, k):
                for store in self.stores:
                    hits = store.search("s", query, limit, mode="semantic", embedder=EMBEDDER)
                    got = [(hit.item["step"], hit.score) for hit in hits]
                    assert got == want[:limit], store.url


SharedRowsAgainstOwnParts.TestCase.settings = settings(
    max_examples=25, stateful_step_count=10, deadline=None
)
TestSharedRowsAgainstOwnParts = SharedRowsAgainstOwnParts.TestCase
