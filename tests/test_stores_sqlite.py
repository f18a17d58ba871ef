"""The SQLite store: migrations, foreign files, read-only inspection, permissions, damaged rows."""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
import stat
import struct
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from agents.memory import MemoryItem
from agents.memory.exceptions import (
    CorruptStoreError,
    InvalidStoreURLError,
    MissingDependencyError,
    SchemaVersionError,
    StoreError,
    StoreNotFoundError,
)
from agents.memory.search import Embedder, HashingEmbedder, Tokenizer
from agents.memory.stores import SQLiteStore, StoreHit, _sqlite, open_memory, open_store
from agents.memory.stores._sqlite import SCHEMA_VERSION, _ratio_to_fts5
from agents.memory.stores.testing import (
    COMMON_WORD_QUERIES,
    VECTOR_MODES,
    CountingEmbedder,
    assert_ranks_as_memory,
    common_words_session,
    ranking_corpus,
)

# The layout kvmemory wrote as schema version 1, statement for statement.
V1_DDL = (
    """CREATE TABLE IF NOT EXISTS kvmemory_sessions (
        session_id TEXT PRIMARY KEY,
        step_key TEXT NOT NULL,
        created REAL NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS kvmemory_items (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        step TEXT,
        created REAL NOT NULL,
        data BLOB NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS kvmemory_items_session ON kvmemory_items (session_id, seq)",
    "CREATE INDEX IF NOT EXISTS kvmemory_items_step ON kvmemory_items (session_id, step)",
    "CREATE INDEX IF NOT EXISTS kvmemory_items_created ON kvmemory_items (session_id, created)",
)


def write_v1_store(path: Path) -> None:
    """Write a schema-v1 store by hand: two sessions, three items, one deleted seq."""
    con = sqlite3.connect(path)
    for statement in V1_DDL:
        con.execute(statement)
    con.execute("INSERT INTO kvmemory_sessions VALUES ('a', 'step', 1700000000.0)")
    con.execute("INSERT INTO kvmemory_sessions VALUES ('b', 'Step', 1700000001.0)")
    rows = [
        (1, "a", "1", 1700000000.5, b'{"step":1,"action":"open"}'),
        (2, "a", "2", 1700000000.6, b'{"step":2,"action":"type"}'),
        (4, "b", "7", 1700000001.5, b'{"Step":7}'),
    ]
    con.executemany("INSERT INTO kvmemory_items VALUES (?, ?, ?, ?, ?)", rows)
    # AUTOINCREMENT remembers seq 5 was handed out (and deleted) before the upgrade.
    con.execute("UPDATE sqlite_sequence SET seq = 5 WHERE name = 'kvmemory_items'")
    con.execute("PRAGMA user_version = 1")
    con.commit()
    con.close()


def user_version(path: Path) -> int:
    """Return the PRAGMA user_version of a database file."""
    con = sqlite3.connect(path)
    try:
        return int(con.execute("PRAGMA user_version").fetchone()[0])
    finally:
        con.close()


def test_v1_store_is_migrated_to_the_current_schema_without_loss(tmp_path: Path) -> None:
    """A v1 file opened writable gets the current schema; every session, item and seq is kept."""
    path = tmp_path / "old.db"
    write_v1_store(path)
    with SQLiteStore(path) as store:
        assert store.sessions() == ["a", "b"]
        records = store.records("a")
        assert [(r.seq, r.item.to_dict()) for r in records] == [
            (1, {"step": 1, "action": "open"}),
            (2, {"step": 2, "action": "type"}),
        ]
        assert [r.seq for r in store.records("b")] == [4]
        info = store.session_info("b")
        assert info is not None
        assert (info.step_key, info.metadata, info.created.timestamp()) == (
            "Step",
            {},
            1700000001.0,
        )
        store.set_metadata("a", {"agent": "planner"})
        assert store.append("a", [MemoryItem(step=3)]) == [6]
    assert user_version(path) == SQLiteStore.schema_version


def test_v1_store_opened_read_only_is_refused_and_unchanged(tmp_path: Path) -> None:
    """Read-only inspection never migrates: a v1 file is refused and keeps every byte."""
    path = tmp_path / "old.db"
    write_v1_store(path)
    before = path.read_bytes()
    with pytest.raises(
        SchemaVersionError, match=f"read-only it cannot be migrated to {SQLiteStore.schema_version}"
    ):
        open_store(path, read_only=True)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["old.db"]


def test_read_only_inspection_creates_no_files(tmp_path: Path) -> None:
    """Reading a closed store read-only leaves the directory and the file exactly as they were."""
    path = tmp_path / "runs.db"
    with open_store(path) as store:
        store.append("s", [MemoryItem(step=1)])
    before = path.read_bytes()
    with open_store(f"sqlite://{path}?mode=ro") as reader:
        assert reader.sessions() == ["s"]
        assert reader.count("s") == 1
    assert [p.name for p in tmp_path.iterdir()] == ["runs.db"]
    assert path.read_bytes() == before


def test_open_memory_with_mode_ro_reopens_and_searches_a_closed_file(tmp_path: Path) -> None:
    """open_memory on a ?mode=ro URL reopens a session, searches it and leaves the file untouched."""
    path = tmp_path / "agent.db"
    with open_memory(path, "s") as memory:
        memory.add_memory_items([MemoryItem(step=1, action="open the file"), MemoryItem(step=2)])
    before = path.read_bytes()
    with open_memory(f"sqlite://{path}?mode=ro", "s", max_items=1) as reader:
        assert [item.to_dict() for item in reader.content] == [{"step": 2}]
        assert reader.refresh() == 0
        reader.reload()
        assert reader.search("file") == []  # the item holding it is beyond max_items
    with open_memory(f"sqlite://{path}?mode=ro", "s") as reader:
        assert [hit.item["step"] for hit in reader.search("file")] == [1]
    assert [p.name for p in tmp_path.iterdir()] == ["agent.db"]
    assert path.read_bytes() == before


def test_read_only_missing_file_is_not_created(tmp_path: Path) -> None:
    """A missing file opened read-only raises StoreNotFoundError and is not created."""
    with pytest.raises(StoreNotFoundError, match="does not exist"):
        open_store(tmp_path / "typo.db", read_only=True)
    assert list(tmp_path.iterdir()) == []


def test_foreign_database_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    """A SQLite database of another program (user_version 0) is refused and keeps every byte."""
    path = tmp_path / "app.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE mine (x)")
    con.execute("INSERT INTO mine VALUES (1)")
    con.commit()
    con.close()
    before = path.read_bytes()
    for read_only in (False, True):
        with pytest.raises(
            CorruptStoreError, match=r"is not a kvmemory store: it holds other tables \(mine"
        ):
            open_store(path, read_only=read_only)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["app.db"]


def test_database_with_a_user_version_but_no_store_tables_is_refused(tmp_path: Path) -> None:
    """A database with user_version 1 but without kvmemory's tables is not taken for a store."""
    path = tmp_path / "app.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE other (x)")
    con.execute("PRAGMA user_version = 1")
    con.commit()
    con.close()
    before = path.read_bytes()
    with pytest.raises(CorruptStoreError, match="not a kvmemory store"):
        open_store(path)
    assert path.read_bytes() == before


def test_new_files_are_private_to_their_owner(tmp_path: Path) -> None:
    """A new store file and its -wal and -shm files are created 0600."""
    path = tmp_path / "runs.db"
    with open_store(path) as store:
        store.append("s", [MemoryItem(step=1)])
        names = sorted(p.name for p in tmp_path.iterdir())
        assert names == ["runs.db", "runs.db-shm", "runs.db-wal"]
        for name in names:
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name


@pytest.mark.parametrize(
    "url", ["sqlite:///tmp/a\x00b.db", "/tmp/a\x00b.db", "sqlite:///tmp/a%00b.db"]
)
def test_nul_byte_in_path_is_refused(url: str) -> None:
    """A path holding a NUL character is refused by name instead of being cut at it."""
    with pytest.raises(InvalidStoreURLError, match="holds a NUL character"):
        open_store(url)


def test_row_of_the_wrong_type_is_named_by_seq(tmp_path: Path) -> None:
    """A row whose data is a number (not JSON text) raises CorruptStoreError naming its seq."""
    path = tmp_path / "runs.db"
    with open_store(path) as store:
        seqs = store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
    con = sqlite3.connect(path)
    con.execute("UPDATE kvmemory_items SET data = 42 WHERE seq = ?", (seqs[1],))
    con.commit()
    con.close()
    with (
        open_store(path) as store,
        pytest.raises(CorruptStoreError, match=f"Item {seqs[1]} of session 's'.*holds a int"),
    ):
        store.read("s")


def test_damaged_session_metadata_is_a_store_error(tmp_path: Path) -> None:
    """Session metadata that is not a JSON object raises CorruptStoreError naming the session."""
    path = tmp_path / "runs.db"
    with open_store(path) as store:
        store.set_metadata("s", {"a": 1})
    con = sqlite3.connect(path)
    con.execute("UPDATE kvmemory_sessions SET metadata = X'5b315d'")  # [1]
    con.commit()
    con.close()
    with (
        open_store(path) as store,
        pytest.raises(CorruptStoreError, match=r"metadata of session 's'.*expected an object"),
    ):
        store.session_info("s")


def write_v2_store(path: Path) -> None:
    """Write a schema-v2 store by hand (v1 plus session metadata): one session, two items."""
    write_v1_store(path)
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE kvmemory_sessions ADD COLUMN metadata BLOB NOT NULL DEFAULT x'7b7d'")
    con.execute("PRAGMA user_version = 2")
    con.commit()
    con.close()


def test_v2_store_is_migrated_and_gets_vectors(tmp_path: Path) -> None:
    """A v2 file opened writable gains the vector tables, keeps its items, and embeds and searches them."""
    path = tmp_path / "old.db"
    write_v2_store(path)
    embedder = HashingEmbedder(32)
    with SQLiteStore(path) as store:
        assert [r.item.to_dict() for r in store.records("a")] == [
            {"step": 1, "action": "open"},
            {"step": 2, "action": "type"},
        ]
        assert store.index_embeddings("a", embedder) == 2
        hits = store.search("a", "open", 1, mode="semantic", embedder=embedder)
        assert [(hit.seq, hit.item["action"]) for hit in hits] == [(1, "open")]
    assert user_version(path) == SQLiteStore.schema_version


def test_damaged_vector_row_is_named_by_store_session_and_seq(tmp_path: Path) -> None:
    """A vector row of the wrong byte length raises CorruptStoreError naming the store, session and seq."""
    path = tmp_path / "runs.db"
    embedder = HashingEmbedder(32)
    with open_store(path) as store:
        seqs = store.append("s", [MemoryItem(step=1, note="a"), MemoryItem(step=2, note="b")])
        store.index_embeddings("s", embedder)
    con = sqlite3.connect(path)
    con.execute("UPDATE kvmemory_vectors SET vector = x'00000000' WHERE seq = ?", (seqs[1],))
    con.commit()
    con.close()
    message = f"item {seqs[1]} of session 's' of sqlite:///{path} holds 4 bytes; expected 128"
    with open_store(path) as store, pytest.raises(CorruptStoreError, match=message):
        store.search("s", "a", mode="semantic", embedder=embedder)


# -- the keyword index (schema version 3) ------------------------------------------------

# Schema version 2: version 1 and the session metadata column, as kvmemory wrote it.
V2_DDL = (
    *V1_DDL,
    "ALTER TABLE kvmemory_sessions ADD COLUMN metadata BLOB NOT NULL DEFAULT x'7b7d'",
)
# Schema version 3 added the tables of stored vectors.
V3_VECTOR_DDL = (
    """CREATE TABLE IF NOT EXISTS kvmemory_embedders (
        session_id TEXT PRIMARY KEY,
        model TEXT NOT NULL,
        dimension INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS kvmemory_vectors (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        fields TEXT NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (session_id, seq, fields)
    )""",
)


def write_corpus_store(path: Path, version: int) -> list[MemoryItem]:
    """Write a store of schema version 2 or 3 by hand holding the ranking corpus in session 'a' (and one item in 'b')."""
    items = ranking_corpus()
    con = sqlite3.connect(path)
    for statement in V2_DDL:
        con.execute(statement)
    con.execute("INSERT INTO kvmemory_sessions VALUES ('a', 'step', 1700000000.0, x'7b7d')")
    con.execute("INSERT INTO kvmemory_sessions VALUES ('b', 'step', 1700000000.0, x'7b7d')")
    rows = [("a", str(item["step"]), 1700000000.5, item.to_json_bytes()) for item in items]
    rows.append(("b", "1", 1700000000.5, b'{"step":1,"note":"file"}'))
    con.executemany(
        "INSERT INTO kvmemory_items (session_id, step, created, data) VALUES (?, ?, ?, ?)", rows
    )
    if version == 3:
        for statement in V3_VECTOR_DDL:
            con.execute(statement)
    con.execute(f"PRAGMA user_version = {version}")
    con.commit()
    con.close()
    return items


@pytest.mark.parametrize("version", [2, 3])
def test_older_store_is_migrated_and_searched_by_its_new_index(
    tmp_path: Path, version: int
) -> None:
    """A v2 or v3 file opened writable gets the keyword index over its items and ranks as Memory.search."""
    path = tmp_path / "old.db"
    write_corpus_store(path, version)
    with SQLiteStore(path) as store:
        assert store.keyword_index
        assert_ranks_as_memory(store, "a")
        assert_ranks_as_memory(store, "b")
    assert user_version(path) == SCHEMA_VERSION


def test_v3_store_opened_read_only_searches_by_scanning(tmp_path: Path) -> None:
    """A v3 file (before the keyword index) opened read-only is not migrated; it searches by reading the session, ranking the same."""
    path = tmp_path / "old.db"
    write_corpus_store(path, 3)
    before = path.read_bytes()
    with SQLiteStore(path, read_only=True) as store:
        assert not store.keyword_index
        assert_ranks_as_memory(store, "a")
    assert path.read_bytes() == before
    assert user_version(path) == 3


def test_search_reads_only_the_items_it_finds(tmp_path: Path) -> None:
    """The index answers the search: a damaged item that holds no query word is never read."""
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        seqs = store.append("s", ranking_corpus())
        assert store.keyword_index
    con = sqlite3.connect(path)
    con.execute("UPDATE kvmemory_items SET data = x'7b' WHERE seq = ?", (seqs[9],))  # "the the the"
    con.commit()
    con.close()
    with SQLiteStore(path) as store:
        assert [hit.item["step"] for hit in store.search("s", "report", 2)] == [7, 6]
        with pytest.raises(CorruptStoreError, match=f"Item {seqs[9]}"):
            store.search("s", "report", keys=["thought"])  # keys read the session


def damage(path: Path, *statements: str) -> bytes:
    """Run SQL on a store file outside kvmemory and return the file's bytes afterwards."""
    con = sqlite3.connect(path)
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()
    return path.read_bytes()


@pytest.mark.parametrize(
    ("sessions", "word"),
    [(1, "zebra"), (2, "zebra"), (2, "the")],
    ids=["bm25", "postings", "along-bm25"],
)
def test_a_damaged_index_row_is_named_with_the_fix_and_nothing_changes(
    tmp_path: Path, sessions: int, word: str
) -> None:
    """An FTS row for an item the session does not hold makes search raise, naming the store and the repair."""
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        store.append("s", ranking_corpus())
        if sessions == 2:
            store.append("t", [MemoryItem(step=1)])
    key = sqlite3.connect(path).execute("SELECT key FROM kvmemory_search WHERE session_id = 's'")
    (prefix,) = key.fetchone()
    before = damage(
        path, f"INSERT INTO kvmemory_fts (rowid, terms) VALUES (999, '{prefix}\u00b7{word}')"
    )
    with SQLiteStore(path) as store:
        with pytest.raises(
            CorruptStoreError, match=r"runs\.db.*keyword index.*rebuild_keyword_index"
        ):
            store.search("s", word)
        assert store.read("s") == ranking_corpus()
    assert path.read_bytes() == before
    with SQLiteStore(path) as store:
        store.rebuild_keyword_index()
        assert 999 not in [hit.seq for hit in store.search("s", word)]
        assert_ranks_as_memory(store, "s")


@pytest.mark.parametrize("query", COMMON_WORD_QUERIES)
def test_session_bm25_is_within_the_bound_on_fts5_bm25(tmp_path: Path, query: str) -> None:
    """Every item's BM25 in its session is at most the bound times FTS5's bm25() over the whole table.

    Searching a session of a store of several sessions reads items in the
    order of FTS5's bm25() and stops by this bound.
    """
    with SQLiteStore(tmp_path / "runs.db") as store:
        store.append("short", common_words_session())
        store.append("long", common_words_session(seed=2, items=300, length=(30, 60)))
    con = sqlite3.connect(tmp_path / "runs.db")
    n_rows, n_tokens = con.execute("SELECT sum(items), sum(terms) FROM kvmemory_search").fetchone()
    terms = Tokenizer()(query)
    for session in ("short", "long"):
        key, n_items, total = con.execute(
            "SELECT key, items, terms FROM kvmemory_search WHERE session_id = ?", (session,)
        ).fetchone()
        names = [f"{key}\u00b7{term}" for term in terms]
        marks = ", ".join("?" * len(names))
        dfs = dict(
            con.execute(f"SELECT term, doc FROM kvmemory_fts_row WHERE term IN ({marks})", names)
        )
        if not dfs:
            continue
        ratio = _ratio_to_fts5(n_items, total / n_items, n_rows, n_tokens / n_rows, dfs.values())
        engine = dict(
            con.execute(
                "SELECT rowid, -bm25(kvmemory_fts) FROM kvmemory_fts WHERE kvmemory_fts MATCH ?",
                (" OR ".join(f'"{name}"' for name in names),),
            )
        )
        hits = store_ranking(tmp_path / "runs.db", session, query)
        assert hits
        for seq, score in hits:
            assert score <= ratio * engine[seq] * (1 + 1e-12), (session, seq)
    con.close()


def store_ranking(path: Path, session: str, query: str) -> list[tuple[int, float]]:
    """Return every (seq, score) of a session's ranking for ``query``."""
    with SQLiteStore(path) as store:
        return store.ranking(session, query, store.count(session))


def test_a_missing_index_is_named_on_search_and_write_and_can_be_rebuilt(tmp_path: Path) -> None:
    """With the FTS table dropped, search and writes raise naming the repair, and write nothing."""
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        store.append("s", ranking_corpus())
    damage(path, "DROP TABLE kvmemory_fts")
    with SQLiteStore(path) as store:
        with pytest.raises(CorruptStoreError, match="rebuild_keyword_index"):
            store.search("s", "file")
        with pytest.raises(CorruptStoreError, match="rebuild_keyword_index"):
            store.append("s", [MemoryItem(step=99, note="file")])
        assert store.count("s") == len(ranking_corpus())
        store.rebuild_keyword_index()
        store.append("s", [MemoryItem(step=99, note="file")])
        assert_ranks_as_memory(store, "s")


def test_rebuilding_the_index_of_a_read_only_store_is_refused(tmp_path: Path) -> None:
    """rebuild_keyword_index on a read-only handle raises and changes nothing."""
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        store.append("s", [MemoryItem(step=1, note="file")])
    with SQLiteStore(path, read_only=True) as store, pytest.raises(StoreError, match="read-only"):
        store.rebuild_keyword_index()


def test_older_store_with_a_damaged_row_still_migrates(tmp_path: Path) -> None:
    """A row that cannot be decoded does not stop the migration: it is indexed without text, the others searched."""
    path = tmp_path / "old.db"
    write_corpus_store(path, 3)
    damage(path, "UPDATE kvmemory_items SET data = x'7b' WHERE seq = 1")  # step 0 of 'a'
    with SQLiteStore(path) as store:
        assert store.keyword_index
        assert [hit.item["step"] for hit in store.search("a", "report", 2)] == [7, 6]
        assert store.ranking("a", "large") == []  # only step 0 held "large"


# -- the sqlite-vec extension ---------------------------------------------------------------
#
# scripts/test runs these tests a second time in a virtual environment made from
# Debian's python3, whose sqlite3 can load extensions, with the sqlite-vec extra
# installed, and sets KVMEMORY_TEST_SQLITE_VEC=1 there: the tests that need the
# extension then fail instead of skipping when it did not load.

SQLITE_VEC_REQUIRED = os.environ.get("KVMEMORY_TEST_SQLITE_VEC") == "1"
WORDS = (
    "open",
    "save",
    "export",
    "report",
    "email",
    "invoice",
    "folder",
    "dialog",
    "click",
    "type",
    "search",
    "agent",
    "task",
    "menu",
    "file",
    "print",
    "close",
    "window",
    "button",
    "summary",
    "draft",
    "send",
    "attach",
    "table",
    "chart",
)
REPEATED = "save the report in the folder"
SESSIONS = {"a": (1, 300), "b": (2, 120), "c": (3, 9)}
QUERIES = ("save the report", "email the invoice", "print the chart table", "zebra", REPEATED)


@pytest.fixture
def sqlite_vec(tmp_path: Path) -> None:
    """Skip where the sqlite-vec extension cannot be loaded (fail where this run requires it)."""
    pytest.importorskip("numpy")
    with SQLiteStore(tmp_path / "probe.db") as store:
        if store.uses_sqlite_vec:
            return
    if SQLITE_VEC_REQUIRED:
        pytest.fail("KVMEMORY_TEST_SQLITE_VEC=1, but the sqlite-vec extension did not load")
    pytest.skip("the sqlite-vec extension cannot be loaded by this Python (see docs/search.md)")


class GaussianEmbedder:
    """Seeded random vectors, one per distinct text, so that only equal texts tie; zeros for a text without words."""

    name = "gaussian-48"
    dimension = 48

    def __call__(self, texts: Sequence[str]) -> Any:
        import numpy as np

        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            if any(char.isalnum() for char in text):
                seed = int.from_bytes(
                    hashlib.blake2b(text.encode(), digest_size=8).digest(), "little"
                )
                out[row] = np.random.default_rng(seed).standard_normal(self.dimension)
        return out


def generated_items(seed: int, n: int) -> list[MemoryItem]:
    """Return ``n`` steps of a few words each, with repeated texts, texts without words and items without text."""
    rng = random.Random(seed)
    items = []
    for step in range(n):
        if step % 17 == 5:
            items.append(MemoryItem(step=step, thought="-- ... --"))  # text, but a zero vector
        elif step % 23 == 7:
            items.append(MemoryItem(step=step, cost=0.5))  # no text: never a semantic hit
        elif step % 11 == 3:
            items.append(MemoryItem(step=step, thought=REPEATED))  # equal vectors: exact ties
        else:
            words = rng.sample(WORDS, rng.randint(2, 6))
            items.append(MemoryItem(step=step, thought=" ".join(words), note=rng.choice(WORDS)))
    return items


def write_sessions(path: Path, embedder: Embedder) -> None:
    """Write the generated sessions to a store and embed them."""
    with SQLiteStore(path) as store:
        for sid, (seed, n) in SESSIONS.items():
            store.append(sid, generated_items(seed, n))
            store.index_embeddings(sid, embedder)


def assert_same_hits(got: list[StoreHit], want: list[StoreHit]) -> None:
    """The same items in the same order, scores equal to float32 rounding."""
    assert [hit.seq for hit in got] == [hit.seq for hit in want]
    assert [hit.score for hit in got] == pytest.approx([hit.score for hit in want], abs=1e-6)


def searches(path: Path, embedder: Embedder) -> Iterator[tuple[list[StoreHit], list[StoreHit]]]:
    """Yield the hits of each session, mode, query and k with the extension and without it."""
    with (
        SQLiteStore(path, sqlite_vec=True) as vec,
        SQLiteStore(path, sqlite_vec=False) as exact,
    ):
        assert vec.uses_sqlite_vec
        assert not exact.uses_sqlite_vec
        for sid in SESSIONS:
            for mode in VECTOR_MODES:
                for query in QUERIES:
                    for k in (1, 5, 40):
                        got = vec.search(sid, query, k, mode=mode, embedder=embedder)
                        yield got, exact.search(sid, query, k, mode=mode, embedder=embedder)


@pytest.mark.usefixtures("sqlite_vec")
def test_sqlite_vec_ranks_as_exact_numpy_search(tmp_path: Path) -> None:
    """With the extension, semantic and hybrid hits of several sessions are the numpy path's, ties in session order."""
    path = tmp_path / "runs.db"
    embedder = GaussianEmbedder()
    write_sessions(path, embedder)
    for got, want in searches(path, embedder):
        assert_same_hits(got, want)
    with SQLiteStore(path, sqlite_vec=True) as store:
        hits = store.search("a", REPEATED, 40, mode="semantic", embedder=embedder)
    assert [hit.item["thought"] for hit in hits[:20]] == [REPEATED] * 20
    assert [hit.seq for hit in hits[:20]] == sorted(hit.seq for hit in hits[:20])
    assert len({hit.score for hit in hits[:20]}) == 1


@pytest.mark.usefixtures("sqlite_vec")
def test_sqlite_vec_agrees_to_rounding_where_cosines_tie_in_exact_arithmetic(
    tmp_path: Path,
) -> None:
    """HashingEmbedder's small-integer vectors tie often in exact arithmetic: the two paths round those ties apart, nothing more."""
    path = tmp_path / "runs.db"
    embedder = HashingEmbedder(64)
    write_sessions(path, embedder)
    for got, want in searches(path, embedder):
        assert len(got) == len(want)
        # Position by position the scores agree, so items trade places only within a tie.
        assert [hit.score for hit in got] == pytest.approx([hit.score for hit in want], abs=1e-6)
        cut = want[-1].score + 1e-6
        assert {hit.seq for hit in got if hit.score > cut} == {
            hit.seq for hit in want if hit.score > cut
        }


@pytest.mark.usefixtures("sqlite_vec")
def test_sqlite_vec_follows_updates_and_deletes(tmp_path: Path) -> None:
    """After items change and go (their vectors with them), both paths still rank alike."""
    path = tmp_path / "runs.db"
    embedder = GaussianEmbedder()
    write_sessions(path, embedder)
    with SQLiteStore(path) as store:
        seqs = [record.seq for record in store.records("a")]
        with store.batch("a") as batch:
            batch.update(
                {seq: MemoryItem(step=-seq, thought="email the invoice") for seq in seqs[::7]}
            )
            batch.delete(seqs[1::9])
        store.delete_steps("b", [0, 1, 2, 3])
        store.index_embeddings("a", embedder)
    for got, want in searches(path, embedder):
        assert_same_hits(got, want)
    changed = set(seqs[::7]) - set(seqs[1::9])
    with SQLiteStore(path, sqlite_vec=True) as store:
        hits = store.search("a", "email the invoice", 300, mode="semantic", embedder=embedder)
    assert {hit.seq for hit in hits if hit.score > 0.999} == changed
    assert not {hit.seq for hit in hits} & set(seqs[1::9])


@pytest.mark.usefixtures("sqlite_vec")
def test_sqlite_vec_search_reads_no_vector_into_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the extension, SQLite computes the cosines: the vectors are never read page by page."""
    embedder = GaussianEmbedder()
    with SQLiteStore(tmp_path / "runs.db", sqlite_vec=True) as store:
        store.append("a", generated_items(1, 50))
        store.index_embeddings("a", embedder)
        want = store.search("a", "save the report", 5, mode="hybrid", embedder=embedder)

        def refuse(*args: object) -> None:
            raise AssertionError("vectors were read into Python")

        monkeypatch.setattr(store, "_vector_pages", refuse)
        assert store.search("a", "save the report", 5, mode="hybrid", embedder=embedder) == want
        assert store.search("a", "report", 5, mode="semantic", embedder=embedder)


@pytest.mark.usefixtures("sqlite_vec")
@pytest.mark.parametrize("writer_uses_it", [True, False])
def test_a_store_is_read_alike_with_and_without_sqlite_vec(
    tmp_path: Path, writer_uses_it: bool
) -> None:
    """Vectors written with the extension are read without it, and the other way round; nothing is embedded again."""
    path = tmp_path / "runs.db"
    embedder = CountingEmbedder()
    with SQLiteStore(path, sqlite_vec=writer_uses_it) as store:
        assert store.uses_sqlite_vec is writer_uses_it
        store.append("a", generated_items(1, 60))
        store.search("a", "save the report", 5, mode="semantic", embedder=embedder)
        written = store.read_vectors("a", embedder)
    embedder.texts = 0
    with SQLiteStore(path, sqlite_vec=not writer_uses_it) as store:
        assert store.uses_sqlite_vec is not writer_uses_it
        again = store.read_vectors("a", embedder)
        assert again.keys() == written.keys()
        assert all((again[seq] == vector).all() for seq, vector in written.items())
        store.search("a", "save the report", 5, mode="semantic", embedder=embedder)
        store.append("a", [MemoryItem(step=99, thought="print the chart")])
        store.index_embeddings("a", embedder)
    assert embedder.texts == 2  # the query and the one new item
    with SQLiteStore(path, sqlite_vec=True) as vec, SQLiteStore(path, sqlite_vec=False) as exact:
        for mode in VECTOR_MODES:
            got = vec.search("a", "print the chart", 10, mode=mode, embedder=embedder)
            assert got[0].item["step"] == 99
            want = exact.search("a", "print the chart", 10, mode=mode, embedder=embedder)
            assert [hit.seq for hit in got[:1]] == [hit.seq for hit in want[:1]]


@pytest.mark.usefixtures("sqlite_vec")
def test_read_only_handle_with_sqlite_vec_ranks_as_numpy_with_items_not_yet_embedded(
    tmp_path: Path,
) -> None:
    """A read-only handle embeds the items without a vector for each query and ranks them with the stored ones, ties in session order."""
    path = tmp_path / "runs.db"
    embedder = GaussianEmbedder()
    with SQLiteStore(path) as store:
        store.append("a", generated_items(1, 150))
        embedded = store.index_embeddings("a", embedder)
        store.append("a", generated_items(4, 150))  # stored without vectors
    with (
        SQLiteStore(path, read_only=True, sqlite_vec=True) as vec,
        SQLiteStore(path, read_only=True, sqlite_vec=False) as exact,
    ):
        for mode in VECTOR_MODES:
            for query in QUERIES:
                for k in (1, 5, 40):
                    got = vec.search("a", query, k, mode=mode, embedder=embedder)
                    assert_same_hits(got, exact.search("a", query, k, mode=mode, embedder=embedder))
        assert len(vec.read_vectors("a", embedder)) == embedded  # the searches stored nothing


@pytest.mark.usefixtures("sqlite_vec")
def test_damaged_vector_row_is_named_with_sqlite_vec(tmp_path: Path) -> None:
    """A vector row of the wrong length is damage with the extension too, named by store, session and seq."""
    path = tmp_path / "runs.db"
    embedder = HashingEmbedder(32)
    with SQLiteStore(path) as store:
        seqs = store.append("s", [MemoryItem(step=1, note="a"), MemoryItem(step=2, note="b")])
        store.index_embeddings("s", embedder)
    con = sqlite3.connect(path)
    con.execute("UPDATE kvmemory_vectors SET vector = x'0000803f' WHERE seq = ?", (seqs[0],))
    con.commit()
    con.close()
    message = f"item {seqs[0]} of session 's' of sqlite:///{path} holds 4 bytes; expected 128"
    with SQLiteStore(path, sqlite_vec=True) as store:
        for mode in VECTOR_MODES:
            with pytest.raises(CorruptStoreError, match=message):
                store.search("s", "b", 1, mode=mode, embedder=embedder)


@pytest.mark.usefixtures("sqlite_vec")
def test_sqlite_vec_reading_another_byte_order_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The extension is used only where it reads kvmemory's little-endian vectors as written."""
    swapped = tuple(
        struct.pack(">2f", *struct.unpack("<2f", vector)) for vector in _sqlite._PROBE_VECTORS
    )
    monkeypatch.setattr(_sqlite, "_PROBE_VECTORS", swapped)
    with SQLiteStore(tmp_path / "runs.db") as store:
        assert not store.uses_sqlite_vec
    with pytest.raises(StoreError, match="another byte order"):
        SQLiteStore(tmp_path / "runs.db", sqlite_vec=True)


def test_sqlite_vec_is_used_where_this_run_requires_it(tmp_path: Path) -> None:
    """Where scripts/test requires the extension, a store opened by URL, with no option, uses it."""
    if not SQLITE_VEC_REQUIRED:
        pytest.skip("only in the run that requires sqlite-vec (KVMEMORY_TEST_SQLITE_VEC=1)")
    with open_store(f"sqlite:///{tmp_path}/runs.db") as store:
        assert isinstance(store, SQLiteStore)
        assert store.uses_sqlite_vec
    with open_store(f"sqlite:///{tmp_path}/runs.db?sqlite_vec=on") as store:
        assert isinstance(store, SQLiteStore)
        assert store.uses_sqlite_vec


def test_without_the_sqlite_vec_package_search_falls_back_and_on_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the package a store searches with numpy; requiring it raises naming the extra."""
    monkeypatch.setitem(sys.modules, "sqlite_vec", None)  # what a missing package looks like
    with SQLiteStore(tmp_path / "runs.db") as store:
        assert not store.uses_sqlite_vec
    with pytest.raises(MissingDependencyError, match=r"pip install 'kvmemory\[sqlite-vec\]'"):
        open_store(f"sqlite:///{tmp_path}/runs.db?sqlite_vec=on")


@pytest.mark.skipif(
    hasattr(sqlite3.Connection, "enable_load_extension"),
    reason="this Python's sqlite3 can load extensions",
)
def test_python_that_cannot_load_extensions_searches_with_numpy(tmp_path: Path) -> None:
    """A Python built without extension loading falls back silently; requiring the extension names why it cannot."""
    pytest.importorskip("sqlite_vec")
    with SQLiteStore(tmp_path / "runs.db") as store:
        assert not store.uses_sqlite_vec
    with pytest.raises(StoreError, match=r"built without extension loading.*can load extensions"):
        SQLiteStore(tmp_path / "runs.db", sqlite_vec=True)


def test_sqlite_vec_off_in_the_url_never_loads_it(tmp_path: Path) -> None:
    """?sqlite_vec=off searches with numpy; an unknown value is refused naming the option."""
    with open_store(f"sqlite:///{tmp_path}/runs.db?sqlite_vec=off") as store:
        assert isinstance(store, SQLiteStore)
        assert not store.uses_sqlite_vec
    with pytest.raises(InvalidStoreURLError, match=r"sqlite_vec='yes'.*'auto', 'on' or 'off'"):
        open_store(f"sqlite:///{tmp_path}/runs.db?sqlite_vec=yes")


def test_step_filters_read_through_the_step_index(tmp_path: Path) -> None:
    """read, project, tail and records with steps query the (session_id, step) index, never the session scan."""
    path = tmp_path / "plan.db"
    with open_store(path) as store:
        store.append("s", [MemoryItem(step=i, action=f"a{i}", n=i) for i in range(300)])
        store.append("other", [MemoryItem(step=i) for i in range(300)])
        statements: list[str] = []
        store.backend.connection.set_trace_callback(statements.append)
        wanted = list(range(100, 110))
        assert [i["n"] for i in store.read("s", steps=wanted)] == wanted
        assert [f["n"] for f in store.project("s", ["n"], steps=wanted)] == wanted
        assert [r.item["n"] for r in store.tail("s", 3, steps=wanted)] == wanted[-3:]
        assert [r.item["n"] for r in store.records("s", steps=wanted, after=1)] == wanted
        store.backend.connection.set_trace_callback(None)
    reads = [sql for sql in statements if sql.startswith("SELECT") and "step IN" in sql]
    assert len(reads) == 4
    con = sqlite3.connect(path)
    try:
        for sql in reads:
            plan = " ".join(row[3] for row in con.execute("EXPLAIN QUERY PLAN " + sql))
            assert "USING INDEX kvmemory_items_step (session_id=? AND step=?" in plan, plan
            assert "kvmemory_items_session" not in plan, plan
    finally:
        con.close()


def test_append_takes_terms_from_the_items_without_decoding_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append tokenizes the items it was given: no stored row is decoded to find its terms."""
    decoded: list[int] = []
    real = _sqlite.decode_pairs

    def counting(rows: Any, *args: Any, **kwargs: Any) -> Any:
        rows = list(rows)
        decoded.append(len(rows))
        return real(rows, *args, **kwargs)

    monkeypatch.setattr(_sqlite, "decode_pairs", counting)
    with open_store(tmp_path / "a.db") as store:
        seqs = store.append("s", [MemoryItem(step=i, note=f"save file {i}") for i in range(50)])
        with store.batch("s") as batch:
            batch.update({seqs[0]: MemoryItem(step=0, note="export report")})
        assert decoded == []
        assert [hit.seq for hit in store.search("s", "export")] == [seqs[0]]
        assert len(store.search("s", "file", 100)) == 49


def test_v4_file_is_migrated_to_index_inserts_by_batch(tmp_path: Path) -> None:
    """A v4 file (inserts indexed by a trigger) reads read-only as it is, and is migrated to v5 without loss."""
    path = tmp_path / "v4.db"
    with open_store(path) as store:
        store.append("s", [MemoryItem(step=1, note="open the report")])
    con = sqlite3.connect(path, isolation_level=None)
    con.executescript(
        """
        CREATE TRIGGER kvmemory_items_search_insert AFTER INSERT ON kvmemory_items BEGIN
            INSERT INTO kvmemory_search (session_id) VALUES (new.session_id)
                ON CONFLICT (session_id) DO NOTHING;
        END;
        PRAGMA user_version = 4;
        """
    )
    con.close()
    with open_store(path, read_only=True) as reader:
        assert reader.keyword_index
        assert [hit.item["step"] for hit in reader.search("s", "report")] == [1]
    with open_store(path) as store:
        store.append("s", [MemoryItem(step=2, note="save the report")])
        assert [hit.item["step"] for hit in store.search("s", "report", 5)] == [1, 2]
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
        assert con.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'"
            " AND name = 'kvmemory_items_search_insert'"
        ).fetchone() == (0,)
    finally:
        con.close()


@pytest.mark.parametrize("writer_stays", [True, False], ids=["writer-open", "writer-closed"])
def test_read_only_handle_on_an_idle_file_sees_later_writers(
    tmp_path: Path, writer_stays: bool
) -> None:
    """A read-only memory opened on a closed file refreshes and searches what a later writer commits."""
    path = tmp_path / "agent.db"
    with open_store(path) as store:
        store.append("s", [MemoryItem(step=1, note="open")])
    with open_memory(f"sqlite://{path}?mode=ro", "s") as reader:
        assert len(reader) == 1
        writer = open_store(path)
        writer.append("s", [MemoryItem(step=2, note="export the report")])
        writer.append("new", [MemoryItem(step=1)])
        if not writer_stays:
            writer.close()
        assert reader.refresh() == 1
        assert [hit.item["step"] for hit in reader.search("report")] == [2]
        assert reader.store.sessions() == ["new", "s"]
        writer.close()


def test_read_only_handle_on_an_empty_file_sees_the_store_created_later(tmp_path: Path) -> None:
    """A read-only handle on an empty file reads the sessions a writer creates afterwards."""
    path = tmp_path / "empty.db"
    path.touch()
    with open_store(path, read_only=True) as reader:
        assert reader.sessions() == []
        with open_store(path) as writer:
            writer.append("s", [MemoryItem(step=1, note="saved")])
        assert reader.sessions() == ["s"]
        assert [hit.item["step"] for hit in reader.search("s", "saved")] == [1]
