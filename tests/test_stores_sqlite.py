"""The SQLite store: migrations, foreign files, read-only inspection, permissions, damaged rows."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import random
import re
import sqlite3
import stat
import struct
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agents.memory import Memory, MemoryItem
from agents.memory._text import bm25_average_length, bm25_term_score
from agents.memory.exceptions import (
    CorruptStoreError,
    InvalidStoreURLError,
    MissingDependencyError,
    SchemaVersionError,
    StoreArgumentError,
    StoreError,
    StoreNotFoundError,
)
from agents.memory.search import Embedder, EmbedParts, HashingEmbedder
from agents.memory.stores import (
    SQLiteStore,
    Store,
    StoreHit,
    open_memory,
    open_store,
)
from agents.memory.stores._sqlite import backend as _sqlite
from agents.memory.stores._sqlite import file as _sqlite_file
from agents.memory.stores._sqlite import schema as _sqlite_schema
from agents.memory.stores._sqlite import scorer as _sqlite_scorer
from agents.memory.stores._sqlite.backend import SCHEMA_VERSION
from agents.memory.stores.testing import (
    VECTOR_MODES,
    CountingEmbedder,
    assert_ranks_as_memory,
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


@pytest.mark.parametrize(
    "open_it", [SQLiteStore, open_store, lambda p: open_store(f"sqlite://{p}")]
)
def test_sqlite_in_memory_name_is_refused_with_pointers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_it: Any
) -> None:
    """':memory:' is refused by name (pointing to memory:// and './:memory:'), and no file of that name is made in the working directory."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidStoreURLError, match=r"':memory:'.*'memory://'.*'\./:memory:'"):
        open_it(":memory:")
    assert list(tmp_path.iterdir()) == []
    with SQLiteStore("./:memory:") as store:  # a file of that name, asked for as one
        store.append("s", [MemoryItem(step=1)])
    with open_store(tmp_path / ":memory:") as store:
        assert [item["step"] for item in store.read_memory("s")] == [1]


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


def test_hybrid_search_takes_its_keyword_side_from_the_index(tmp_path: Path) -> None:
    """A hybrid search ranks keyword matches from the index: a damaged item that neither side ranks high is never read."""
    path = tmp_path / "runs.db"
    embedder = HashingEmbedder(64)
    with SQLiteStore(path) as store:
        seqs = store.append("s", ranking_corpus())
        store.index_embeddings("s", embedder)
    con = sqlite3.connect(path)
    con.execute("UPDATE kvmemory_items SET data = x'7b' WHERE seq = ?", (seqs[9],))  # "the the the"
    con.commit()
    con.close()
    with SQLiteStore(path) as store:
        hits = store.search("s", "report", 2, mode="hybrid", embedder=embedder)
        assert [hit.item["step"] for hit in hits] == [7, 6]
        with pytest.raises(CorruptStoreError, match=f"Item {seqs[9]}"):
            store.search("s", "report", mode="hybrid", embedder=embedder, keys=["action"])


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
# sqlite-vec computes one cosine per vector row, so it ranks vectors of whole items only;
# the tests of that path ask for them (parts, the default, are scored with numpy).
WHOLE = EmbedParts.WHOLE
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
            store.index_embeddings(sid, embedder, parts=WHOLE)


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
                        got = vec.search(sid, query, k, mode=mode, embedder=embedder, parts=WHOLE)
                        yield (
                            got,
                            exact.search(sid, query, k, mode=mode, embedder=embedder, parts=WHOLE),
                        )


@pytest.mark.usefixtures("sqlite_vec")
def test_sqlite_vec_ranks_as_exact_numpy_search(tmp_path: Path) -> None:
    """With the extension, semantic and hybrid hits of several sessions are the numpy path's, ties in session order."""
    path = tmp_path / "runs.db"
    embedder = GaussianEmbedder()
    write_sessions(path, embedder)
    for got, want in searches(path, embedder):
        assert_same_hits(got, want)
    with SQLiteStore(path, sqlite_vec=True) as store:
        hits = store.search("a", REPEATED, 40, mode="semantic", embedder=embedder, parts=WHOLE)
    assert [hit.item["thought"] for hit in hits[:20]] == [REPEATED] * 20
    assert [hit.seq for hit in hits[:20]] == sorted(hit.seq for hit in hits[:20])
    assert len({hit.score for hit in hits[:20]}) == 1


@pytest.mark.usefixtures("sqlite_vec")
def test_parts_on_a_store_with_sqlite_vec_rank_as_without_it(tmp_path: Path) -> None:
    """Parts (the default) are scored with numpy on a store that loads the extension: the same hits as without it."""
    path = tmp_path / "runs.db"
    embedder = GaussianEmbedder()
    with SQLiteStore(path) as store:
        store.append("a", generated_items(1, 120))
    with (
        SQLiteStore(path, sqlite_vec=True) as vec,
        SQLiteStore(path, sqlite_vec=False) as exact,
    ):
        assert vec.uses_sqlite_vec
        for mode in VECTOR_MODES:
            for query in QUERIES:
                got = vec.search("a", query, 5, mode=mode, embedder=embedder)
                assert_same_hits(got, exact.search("a", query, 5, mode=mode, embedder=embedder))
        assert vec.read_vectors("a", embedder, parts=WHOLE) == {}  # only parts were embedded


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
        store.index_embeddings("a", embedder, parts=WHOLE)
    for got, want in searches(path, embedder):
        assert_same_hits(got, want)
    changed = set(seqs[::7]) - set(seqs[1::9])
    with SQLiteStore(path, sqlite_vec=True) as store:
        hits = store.search(
            "a", "email the invoice", 300, mode="semantic", embedder=embedder, parts=WHOLE
        )
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
        store.index_embeddings("a", embedder, parts=WHOLE)
        want = store.search(
            "a", "save the report", 5, mode="hybrid", embedder=embedder, parts=WHOLE
        )

        def refuse(*args: object) -> None:
            raise AssertionError("vectors were read into Python")

        monkeypatch.setattr(store.backend, "vector_pages", refuse)
        monkeypatch.setattr(store.backend, "vectors_of", refuse)
        assert (
            store.search("a", "save the report", 5, mode="hybrid", embedder=embedder, parts=WHOLE)
            == want
        )
        assert store.search("a", "report", 5, mode="semantic", embedder=embedder, parts=WHOLE)


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
        store.search("a", "save the report", 5, mode="semantic", embedder=embedder, parts=WHOLE)
        written = store.read_vectors("a", embedder, parts=WHOLE)
    embedder.texts = 0
    with SQLiteStore(path, sqlite_vec=not writer_uses_it) as store:
        assert store.uses_sqlite_vec is not writer_uses_it
        again = store.read_vectors("a", embedder, parts=WHOLE)
        assert again.keys() == written.keys()
        assert all((again[seq] == vector).all() for seq, vector in written.items())
        store.search("a", "save the report", 5, mode="semantic", embedder=embedder, parts=WHOLE)
        store.append("a", [MemoryItem(step=99, thought="print the chart")])
        store.index_embeddings("a", embedder, parts=WHOLE)
    assert embedder.texts == 2  # the query and the one new item
    with SQLiteStore(path, sqlite_vec=True) as vec, SQLiteStore(path, sqlite_vec=False) as exact:
        for mode in VECTOR_MODES:
            got = vec.search("a", "print the chart", 10, mode=mode, embedder=embedder, parts=WHOLE)
            assert got[0].item["step"] == 99
            want = exact.search(
                "a", "print the chart", 10, mode=mode, embedder=embedder, parts=WHOLE
            )
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
        embedded = store.index_embeddings("a", embedder, parts=WHOLE)
        store.append("a", generated_items(4, 150))  # stored without vectors
    with (
        SQLiteStore(path, read_only=True, sqlite_vec=True) as vec,
        SQLiteStore(path, read_only=True, sqlite_vec=False) as exact,
    ):
        for mode in VECTOR_MODES:
            for query in QUERIES:
                for k in (1, 5, 40):
                    got = vec.search("a", query, k, mode=mode, embedder=embedder, parts=WHOLE)
                    assert_same_hits(
                        got, exact.search("a", query, k, mode=mode, embedder=embedder, parts=WHOLE)
                    )
        assert (
            len(vec.read_vectors("a", embedder, parts=WHOLE)) == embedded
        )  # the searches stored nothing


@pytest.mark.usefixtures("sqlite_vec")
def test_damaged_vector_row_is_named_with_sqlite_vec(tmp_path: Path) -> None:
    """A vector row of the wrong length is damage with the extension too, named by store, session and seq."""
    path = tmp_path / "runs.db"
    embedder = HashingEmbedder(32)
    with SQLiteStore(path) as store:
        seqs = store.append("s", [MemoryItem(step=1, note="a"), MemoryItem(step=2, note="b")])
        store.index_embeddings("s", embedder, parts=WHOLE)
    con = sqlite3.connect(path)
    con.execute("UPDATE kvmemory_vectors SET vector = x'0000803f' WHERE seq = ?", (seqs[0],))
    con.commit()
    con.close()
    message = f"item {seqs[0]} of session 's' of sqlite:///{path} holds 4 bytes; expected 128"
    with SQLiteStore(path, sqlite_vec=True) as store:
        for mode in VECTOR_MODES:
            with pytest.raises(CorruptStoreError, match=message):
                store.search("s", "b", 1, mode=mode, embedder=embedder, parts=WHOLE)


@pytest.mark.usefixtures("sqlite_vec")
def test_sqlite_vec_reading_another_byte_order_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The extension is used only where it reads kvmemory's little-endian vectors as written."""
    swapped = tuple(
        struct.pack(">2f", *struct.unpack("<2f", vector)) for vector in _sqlite_file._PROBE_VECTORS
    )
    monkeypatch.setattr(_sqlite_file, "_PROBE_VECTORS", swapped)
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
    real = _sqlite_schema.decode_pairs

    def counting(rows: Any, *args: Any, **kwargs: Any) -> Any:
        rows = list(rows)
        decoded.append(len(rows))
        return real(rows, *args, **kwargs)

    monkeypatch.setattr(_sqlite_schema, "decode_pairs", counting)
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
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 10
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


# -- rows folded into the FTS table in batches (schema version 6) ------------------------


def fold_state(path: Path) -> tuple[int, int]:
    """Return (rows not yet in the FTS table, rows in all) of a store file."""
    con = sqlite3.connect(path)
    try:
        (through,) = con.execute("SELECT through FROM kvmemory_fts_mark").fetchone()
        pending, total = con.execute(
            "SELECT count(*) FILTER (WHERE seq > ?), count(*) FROM kvmemory_items", (through,)
        ).fetchone()
        return int(pending), int(total)
    finally:
        con.close()


def check_fts_integrity(path: Path) -> None:
    """Raise unless the FTS table holds exactly the FTS rows of the rows it has folded."""
    con = sqlite3.connect(path)
    try:
        (through,) = con.execute("SELECT through FROM kvmemory_fts_mark").fetchone()
        # FTS5 compares its index with its content (the view over every row): fold
        # a copy of the pending rows first, in a transaction rolled back after.
        con.execute("BEGIN")
        con.execute(_sqlite_schema.FOLD, (through, 2**62))
        con.execute("INSERT INTO kvmemory_fts (kvmemory_fts) VALUES ('integrity-check')")
        con.execute("ROLLBACK")
    finally:
        con.close()


def test_one_item_commits_leave_rows_pending_that_every_handle_finds_and_ranks(
    tmp_path: Path,
) -> None:
    """Items committed one by one wait to be folded; writer and read-only handles rank them as Memory.search."""
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        store.append("b", [MemoryItem(step=1, note="the other file")] * 3)
        memory = open_memory(f"sqlite:///{path}", "a")
        for item in ranking_corpus():
            memory.add_memory_item(item)
        assert fold_state(path) == (len(ranking_corpus()) + 3,) * 2  # a small batch waits too
        with SQLiteStore(path, read_only=True) as reader:
            assert_ranks_as_memory(reader, "a")
            assert_ranks_as_memory(reader, "b")
        assert fold_state(path) == (len(ranking_corpus()) + 3,) * 2  # reading wrote nothing
        memory.close()  # the writer folds what is pending as it closes
        assert fold_state(path)[0] == 0
        assert_ranks_as_memory(store, "a")
    check_fts_integrity(path)


def test_a_writable_handle_folds_pending_rows_before_it_searches(tmp_path: Path) -> None:
    """A search on a writable handle folds the pending rows first, then ranks from the FTS table alone."""
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        for item in ranking_corpus():
            store.append("s", [item])
        assert fold_state(path) == (len(ranking_corpus()),) * 2
        assert_ranks_as_memory(store, "s")
        assert fold_state(path) == (0, len(ranking_corpus()))
    check_fts_integrity(path)


def test_a_write_folds_the_pending_rows_of_every_session_at_the_threshold(
    tmp_path: Path,
) -> None:
    """Once FOLD_AT rows are pending, the next insert folds them all; a large batch is folded at once."""
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    try:
        for i in range(_sqlite_schema.FOLD_AT - 1):
            store.append("a" if i % 2 else "b", [MemoryItem(step=i, note=f"file {i % 5}")])
        assert fold_state(path) == (_sqlite_schema.FOLD_AT - 1, _sqlite_schema.FOLD_AT - 1)
        store.append("c", [MemoryItem(step=0, note="file")])
        assert fold_state(path) == (0, _sqlite_schema.FOLD_AT)
        store.append("c", [MemoryItem(step=1, note="report")])
        assert fold_state(path) == (1, _sqlite_schema.FOLD_AT + 1)
        store.append(
            "c", [MemoryItem(step=i, note="report") for i in range(_sqlite_schema.FOLD_AT)]
        )
        assert fold_state(path)[0] == 0
        check_fts_integrity(path)
        for session in ("a", "b", "c"):
            assert_ranks_as_memory(store, session, ("file", "report file", "file 3"))
    finally:
        store.close()


def test_a_lazy_keyword_fold_leaves_appends_pending_until_the_handle_searches(
    tmp_path: Path,
) -> None:
    """With keyword_fold="lazy" no write folds, the handle's search does, and the scores equal a batched store's."""
    lazy_path, batched_path = tmp_path / "lazy.db", tmp_path / "batched.db"
    with (
        open_store(f"sqlite://{lazy_path}?keyword_fold=lazy") as lazy,
        SQLiteStore(batched_path) as batched,
    ):
        assert (lazy.keyword_fold, batched.keyword_fold) == ("lazy", "batched")
        for store in (lazy, batched):
            for i in range(_sqlite_schema.FOLD_AT + 5):
                store.append("a", [MemoryItem(step=i, note=f"file {i % 5} report {i % 3}")])
            store.append("a", [MemoryItem(step=i, note="file") for i in range(100)])
        rows = _sqlite_schema.FOLD_AT + 105
        assert fold_state(lazy_path) == (rows, rows)
        for query in ("file", "report file", "file 3"):
            assert lazy.search("a", query, 200) == batched.search("a", query, 200)
        assert fold_state(lazy_path)[0] == 0
        check_fts_integrity(lazy_path)


def test_a_lazy_keyword_fold_folds_the_pending_rows_as_the_store_closes(tmp_path: Path) -> None:
    """A store with keyword_fold="lazy" adds its pending rows to the FTS table when it closes."""
    path = tmp_path / "lazy.db"
    with SQLiteStore(path, keyword_fold="lazy") as store:
        store.append("a", [MemoryItem(step=i, note="report") for i in range(100)])
        assert fold_state(path) == (100, 100)
    assert fold_state(path) == (0, 100)
    check_fts_integrity(path)


def test_a_keyword_fold_other_than_batched_or_lazy_is_refused(tmp_path: Path) -> None:
    """An unknown keyword_fold, as a URL option or an argument, is refused before the file is created."""
    with pytest.raises(
        InvalidStoreURLError, match=r"keyword_fold='soon' in .* must be 'batched' or 'lazy'"
    ):
        open_store(f"sqlite://{tmp_path}/a.db?keyword_fold=soon")
    with pytest.raises(StoreArgumentError, match="keyword_fold must be 'batched' or 'lazy'"):
        SQLiteStore(tmp_path / "b.db", keyword_fold="soon")  # type: ignore[arg-type]
    assert not list(tmp_path.iterdir())


def test_updates_and_deletes_of_pending_and_folded_rows_keep_the_index_exact(
    tmp_path: Path,
) -> None:
    """Changing and deleting rows on either side of the mark keeps FTS rows and counts exact."""
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        folded = store.append("s", [MemoryItem(step=i, note=f"file {i}") for i in range(70)])
        pending = [
            store.append("s", [MemoryItem(step=100 + i, note="report")])[0] for i in range(5)
        ]
        assert fold_state(path) == (5, 75)
        with store.batch("s") as batch:
            batch.update({folded[0]: MemoryItem(step=0, note="open the report")})
            batch.update({pending[0]: MemoryItem(step=100, note="open the file")})
            batch.delete([folded[1], pending[1]])
        assert fold_state(path) == (4, 73)
        check_fts_integrity(path)
        assert_ranks_as_memory(store, "s", ("file", "report", "open the report", "file 3"))
        store.keep_last("s", 60)
        check_fts_integrity(path)
        assert_ranks_as_memory(store, "s", ("file", "report", "open"))
        store.delete_session("s")
        store.append("s", [MemoryItem(step=1, note="file")])
        check_fts_integrity(path)
        assert_ranks_as_memory(store, "s", ("file",))


def test_searching_while_another_process_commits_ranks_one_snapshot(tmp_path: Path) -> None:
    """A search whose snapshot another connection changes is answered from one snapshot all the same."""
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        store.append("s", [MemoryItem(step=i, note=f"file report {i % 3}") for i in range(80)])
        writer = SQLiteStore(path)
        backend = store.backend
        assert isinstance(backend, _sqlite.SQLiteBackend)
        real = backend._keywords._indexed_top
        calls = 0

        def commit_meanwhile(*args: Any) -> Any:
            nonlocal calls
            calls += 1
            writer.append("s", [MemoryItem(step=100 + calls, note="file file file")])
            return real(*args)

        try:
            backend._keywords._indexed_top = commit_meanwhile  # type: ignore[method-assign]
            hits = store.search("s", "file", 100)
            # The search's one read transaction began before the commit: it ranks the 80 items.
            assert calls == 1
            assert len(hits) == 80
            assert 101 not in [hit.item["step"] for hit in hits]
            backend._keywords._indexed_top = real  # type: ignore[method-assign]
            assert [hit.item["step"] for hit in store.search("s", "file", 1)] == [101]
            assert_ranks_as_memory(store, "s", ("file", "report 2"))
        finally:
            writer.close()


def write_v5_store(path: Path) -> None:
    """Turn a new store file into the layout of schema version 5 (every insert indexed at once)."""
    con = sqlite3.connect(path, isolation_level=None)
    con.executescript(
        """
        DROP TRIGGER kvmemory_items_search_delete;
        DROP TRIGGER kvmemory_items_search_update;
        DROP TABLE kvmemory_fts_mark;
        CREATE TRIGGER kvmemory_items_search_delete AFTER DELETE ON kvmemory_items BEGIN
            INSERT INTO kvmemory_fts (kvmemory_fts, rowid, terms) SELECT 'delete', old.seq,
                CASE WHEN old.n_terms = 0 THEN '' ELSE key || '·' ||
                replace(old.terms, ' ', ' ' || key || '·') END
                FROM kvmemory_search WHERE session_id = old.session_id;
            UPDATE kvmemory_search SET items = items - 1, terms = terms - old.n_terms
                WHERE session_id = old.session_id;
        END;
        CREATE TRIGGER kvmemory_items_search_update AFTER UPDATE OF terms, n_terms ON kvmemory_items
        BEGIN
            INSERT INTO kvmemory_fts (kvmemory_fts, rowid, terms) SELECT 'delete', old.seq,
                CASE WHEN old.n_terms = 0 THEN '' ELSE key || '·' ||
                replace(old.terms, ' ', ' ' || key || '·') END
                FROM kvmemory_search WHERE session_id = old.session_id;
            INSERT INTO kvmemory_fts (rowid, terms) SELECT new.seq,
                CASE WHEN new.n_terms = 0 THEN '' ELSE key || '·' ||
                replace(new.terms, ' ', ' ' || key || '·') END
                FROM kvmemory_search WHERE session_id = new.session_id;
            UPDATE kvmemory_search SET terms = terms - old.n_terms + new.n_terms
                WHERE session_id = new.session_id;
        END;
        PRAGMA user_version = 5;
        """
    )
    con.close()


def test_v5_file_reads_read_only_as_it_is_and_is_migrated_to_fold_few_inserts(
    tmp_path: Path,
) -> None:
    """A v5 file (every insert indexed) is searched read-only unchanged, and migrated to v6 with every row folded."""
    path = tmp_path / "v5.db"
    with SQLiteStore(path) as store:
        store.append("s", ranking_corpus())
    write_v5_store(path)
    before = path.read_bytes()
    with SQLiteStore(path, read_only=True) as reader:
        assert reader.keyword_index
        assert_ranks_as_memory(reader, "s")
    assert path.read_bytes() == before
    assert user_version(path) == 5
    with SQLiteStore(path) as store:
        assert (
            user_version(path) == SCHEMA_VERSION == 10
        )  # through v6, v7 (record keys), v8 (change log)
        assert fold_state(path) == (0, len(ranking_corpus()))
        store.append("s", [MemoryItem(step=10, note="the report file")])
        assert fold_state(path) == (1, len(ranking_corpus()) + 1)
        with store.batch("s") as batch:
            batch.delete([seq for seq, _ in store.records("s")][:2])
        check_fts_integrity(path)
        assert_ranks_as_memory(store, "s")


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["append", "batch", "update", "delete", "search", "reopen"]),
            st.integers(0, 10_000),
        ),
        max_size=14,
    )
)
def test_property_any_writes_keep_the_fts_table_exact_and_the_ranking(
    ops: list[tuple[str, int]],
) -> None:
    """After any appends, batches, updates, deletes, searches and reopens, the FTS table is exact and search ranks as Memory."""
    words = ["file", "report", "open", "the", "save", "dialog"]

    def item(n: int) -> MemoryItem:
        return MemoryItem(step=n, note=" ".join(words[(n >> k) % 6] for k in range(n % 5)))

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        store = SQLiteStore(path)
        try:
            for op, n in ops:
                seqs = [seq for seq, _ in store.records("s")]
                if op == "append":
                    store.append("s" if n % 3 else "t", [item(n)])
                elif op == "batch":
                    store.append("s", [item(n + i) for i in range(n % 90)])
                elif op == "update" and seqs:
                    with store.batch("s") as batch:
                        batch.update({seqs[n % len(seqs)]: item(n + 1)})
                elif op == "delete" and seqs:
                    with store.batch("s") as batch:
                        batch.delete([seqs[n % len(seqs)]])
                elif op == "search":
                    with SQLiteStore(path, read_only=True) as reader:
                        assert_ranks_as_memory(reader, "s", ("file", "the report"))
                elif op == "reopen":
                    store.close()
                    store = SQLiteStore(path)
            check_fts_integrity(path)
            assert_ranks_as_memory(store, "s", ("file", "the report", "open dialog save"))
            check_fts_integrity(path)
        finally:
            store.close()


WORD_ROWS = st.lists(
    st.lists(st.sampled_from(["is", "the", "to", "zeta", "filler"]), max_size=30),
    min_size=1,
    max_size=40,
)
"""Rows of a few words, most of them common, for the scorer's bounds."""
WORD_QUERY = st.lists(st.sampled_from(["is", "the", "to", "zeta"]), min_size=1, max_size=5)
"""Queries of those words, repeats allowed."""


@settings(max_examples=60, deadline=None)
@given(rows=WORD_ROWS, query=WORD_QUERY)
def test_each_terms_share_is_at_most_the_bound_the_scorer_prunes_by(
    rows: list[list[str]], query: list[str]
) -> None:
    """No item's share of a query term passes the bound by which search leaves items unscored."""
    held = [Counter(words) for words in rows]
    vocab = {
        term: (sum(1 for c in held if c[term]), sum(c[term] for c in held))
        for term in dict.fromkeys(query)
        if any(c[term] for c in held)
    }
    assume(vocab)
    total = sum(len(words) for words in rows)
    scorer = _sqlite_scorer.FTSScorer(
        sqlite3.connect(":memory:"), "s", "", query, vocab, len(rows), total
    )
    average = bm25_average_length(total, len(rows))
    for counts, words in zip(held, rows, strict=True):
        for term in vocab:
            if counts[term]:
                share = bm25_term_score(scorer.lifts[term], counts[term], len(words), average)
                assert share <= scorer._bound(term, len(words)) <= scorer._bound(term)


@pytest.mark.parametrize("query", ["zeta the", "alpha beta the", "the alpha zeta beta"])
def test_a_word_every_item_holds_is_scored_without_reading_its_postings(
    tmp_path: Path, query: str
) -> None:
    """Where rarer words settle the top k, the postings of a word every item holds are not read (their rows' terms count it): Memory.search's hits and scores."""
    rng = random.Random(7)
    items = []
    for n in range(400):
        words = ["the"] * rng.randint(3, 8) + ["filler"] * rng.randint(0, 6)
        words += [word for word in ("alpha", "beta") if rng.random() < 0.3]
        words += ["zeta"] * (n % 80 == 0)
        rng.shuffle(words)
        items.append(MemoryItem(n=n, note=" ".join(words)))
    with SQLiteStore(tmp_path / "common.db") as store:
        store.append("s", items)
        store.append("other", items[:50])
        statements: list[str] = []
        store.backend.connection.set_trace_callback(statements.append)
        got = [(hit.item["n"], hit.score) for k in (1, 5) for hit in store.search("s", query, k)]
        store.backend.connection.set_trace_callback(None)
    want = [(hit.item["n"], hit.score) for k in (1, 5) for hit in Memory(items).search(query, k)]
    assert got == want
    postings = [sql for sql in statements if "kvmemory_fts_instance" in sql]
    assert postings
    assert not [sql for sql in postings if "·the'" in sql or '·the"' in sql], postings


def _seqs_read_in_full(statements: Sequence[str]) -> int:
    """Return how many rows the scorer's statements read the terms of, or a query word's postings for (the seqs bound in each)."""
    read = 0
    for sql in statements:
        if "FROM kvmemory_items WHERE seq IN" in sql or "AND doc IN" in sql:
            lists = re.findall(r"json_each\('(\[[^']*\])'\)", sql)
            read += len(json.loads(lists[-1] if "AND doc IN" in sql else lists[0]))
    return read


@pytest.mark.parametrize("query", ["pram was", "pram damaged"])
def test_words_most_items_hold_leave_most_rows_holding_a_rare_word_unscored(
    tmp_path: Path, query: str
) -> None:
    """A word most items hold weighs the IDF floor, yet the rows holding the rare query word are scored in full only while their bound can reach the k-th (a third of them at most): Memory.search's hits and scores."""
    rng = random.Random(5)
    items = []
    for n in range(4000):
        words = ["was"] * (rng.random() < 0.95) + ["damaged"] * (rng.random() < 0.4)
        words += [f"w{rng.randint(0, 300)}" for _ in range(rng.randint(3, 25))]
        words += ["pram"] * (rng.random() < 0.08) * rng.randint(1, 2)
        rng.shuffle(words)
        items.append(MemoryItem(n=n, note=" ".join(words)))
    holders = sum("pram" in item["note"].split() for item in items)
    with SQLiteStore(tmp_path / "crowded.db") as store:
        store.append("s", items)
        for k in (1, 5):
            statements: list[str] = []
            store.backend.connection.set_trace_callback(statements.append)
            got = [(hit.item["n"], hit.score) for hit in store.search("s", query, k)]
            store.backend.connection.set_trace_callback(None)
            want = [(hit.item["n"], hit.score) for hit in Memory(items).search(query, k)]
            assert got == want
            assert 0 < _seqs_read_in_full(statements) < holders / 3, (holders, statements)


@settings(max_examples=100, deadline=None)
@given(
    words=st.lists(st.sampled_from(["a", "ab", "b", "ba", "the", "th"]), max_size=25),
    query=st.lists(st.sampled_from(["a", "b", "the", "zeta"]), min_size=1, max_size=4),
)
def test_terms_counted_in_a_rows_kept_text_equal_its_words_counted(
    words: list[str], query: list[str]
) -> None:
    """Counting terms in a row's kept text (repeats side by side, words that hold others) gives each word's count."""
    held = Counter(words)
    want = {term: held[term] for term in query if held[term]}
    got = _sqlite_scorer._counts(" ".join(words), _sqlite_scorer._patterns(query))
    assert got == want


def noted_items(
    seed: int, n: int, words_of: Callable[[random.Random], list[str]], start: int = 0
) -> list[MemoryItem]:
    """Return items ``start`` to ``start + n``, each noting the words ``words_of`` draws, shuffled."""
    rng = random.Random(seed)
    items = []
    for i in range(start, start + n):
        words = words_of(rng)
        rng.shuffle(words)
        items.append(MemoryItem(n=i, note=" ".join(words)))
    return items


def common_words_items(seed: int, n: int) -> list[MemoryItem]:
    """Return ``n`` items of a few words most of them hold, many alike (ties), a few rarer ones."""

    def words_of(rng: random.Random) -> list[str]:
        words = ["the"] * rng.randint(1, 3) + ["dialog"] * rng.choice([1, 1, 2])
        words += ["ok"] * (rng.random() < 0.9) + ["chart"] * rng.choice([0, 1, 1, 3])
        return words + ["filler"] * rng.choice([0, 0, 4, 9]) + ["zeta"] * (rng.random() < 0.05)

    return noted_items(seed, n, words_of)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    query=st.lists(
        st.sampled_from(["the", "dialog", "ok", "chart", "zeta", "filler"]), min_size=1, max_size=5
    ),
    k=st.sampled_from([1, 3, 10]),
    sessions=st.sampled_from([1, 2]),
)
def test_words_most_items_hold_rank_from_fts5_order_as_memory_search(
    seed: int, query: list[str], k: int, sessions: int
) -> None:
    """Ranked from FTS5's bm25() order (items alike, one session or two), search gives Memory.search's hits and scores."""
    items = common_words_items(seed, 300)
    text = " ".join(query)
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as folder:
        patch.setattr(_sqlite_scorer, "_FTS5_FROM", 0)
        with SQLiteStore(Path(folder) / "common.db") as store:
            store.append("s", items)
            if sessions == 2:
                store.append("other", items[:40])
            got = [(hit.item["n"], hit.score) for hit in store.search("s", text, k)]
    want = [(hit.item["n"], hit.score) for hit in Memory(items).search(text, k)]
    assert got == want


def test_a_query_of_common_words_reads_fts5_order_not_every_posting(tmp_path: Path) -> None:
    """Words every item holds are ranked from one FTS5 bm25() pass: no statement counts their postings."""
    items = common_words_items(3, 5000)
    with SQLiteStore(tmp_path / "common.db") as store:
        store.append("s", items)
        statements: list[str] = []
        store.backend.connection.set_trace_callback(statements.append)
        got = [(hit.item["n"], hit.score) for hit in store.search("s", "the dialog", 5)]
        store.backend.connection.set_trace_callback(None)
    assert got == [(hit.item["n"], hit.score) for hit in Memory(items).search("the dialog", 5)]
    assert [sql for sql in statements if "bm25(kvmemory_fts)" in sql]
    assert not [sql for sql in statements if "kvmemory_fts_instance" in sql]


@settings(max_examples=40, deadline=None)
@given(
    rows=WORD_ROWS,
    query=WORD_QUERY,
    other=st.lists(st.sampled_from(["is", "the", "filler"]), max_size=60),
)
def test_no_items_score_passes_its_bound_from_fts5s_bm25(
    rows: list[list[str]], query: list[str], other: list[str]
) -> None:
    """No item's score passes the bound the scorer reads from its FTS5 bm25() (the session alone or not)."""
    items = [MemoryItem(note=" ".join(words)) for words in rows]
    with tempfile.TemporaryDirectory() as folder, SQLiteStore(Path(folder) / "b.db") as store:
        store.append("s", items)
        if other:
            store.append("t", [MemoryItem(note=" ".join(other))])
        store.search("s", "is")  # a writable handle folds its pending rows into the FTS table
        con = store.backend.connection
        stats = con.execute(
            "SELECT key, items, terms FROM kvmemory_search WHERE session_id = 's'"
        ).fetchone()
        rows_all, tokens_all = con.execute(
            "SELECT sum(items), sum(terms) FROM kvmemory_search"
        ).fetchone()
        prefix = f"{stats[0]}{_sqlite_schema.MARK}"
        vocab = {}
        for term in dict.fromkeys(query):
            found = con.execute(
                "SELECT doc, cnt FROM kvmemory_fts_row WHERE term = ?", (prefix + term,)
            ).fetchone()
            if found:
                vocab[term] = (int(found[0]), int(found[1]))
        assume(vocab)
        scorer = _sqlite_scorer.FTSScorer(con, ["s"], [prefix], query, vocab, stats[1], stats[2])
        scorer.table = (int(rows_all), int(tokens_all))
        matched, others = scorer._fts5_terms(scorer.order)
        bound = scorer._fts5_bound(matched, others)
        assert bound is not None
        fts5 = dict(
            con.execute(
                "SELECT rowid, -bm25(kvmemory_fts) FROM kvmemory_fts WHERE kvmemory_fts MATCH ?",
                (scorer._match(matched),),
            ).fetchall()
        )
        exact = scorer._exact(list(fts5), len(fts5), scorer.order)
    for score, seq in exact:
        assert score <= bound(fts5[seq]) * (1 + 1e-12)  # equal to rounding where the bound is tight


def test_reopening_a_large_session_runs_no_collection_until_its_index_is_built(
    tmp_path: Path,
) -> None:
    """Reopen (read, decode, items, step index) allocates under one collector pause: no collection walks the growing heap."""
    url = f"sqlite://{tmp_path}/big.db"
    rows = [MemoryItem(step=i, tags=[{"a": [1, 2]}] * 4, note=f"n{i}") for i in range(3000)]
    # No keyword snapshot saved as the writer closes: its thread would allocate (and collect)
    # while the reopen is watched.
    with open_memory(url + "?keyword_snapshot=off", "s") as memory:
        memory.add_memory_items(rows)
    collections: list[str] = []

    def record(phase: str, info: dict[str, int]) -> None:
        collections.append(phase)

    gc.collect()
    gc.callbacks.append(record)
    try:
        # Without the keyword index built ahead: its thread allocates (and collects) on its own.
        with open_memory(url, "s", index_ahead=False) as memory:
            first = memory.items_of_step(0)
            during = len(collections)
            assert len(memory) == 3000
    finally:
        gc.callbacks.remove(record)
    assert first[0].to_dict() == rows[0].to_dict()
    assert gc.isenabled()
    assert during <= 2, collections  # at most the one collection as the pause ends (start, stop)


# -- record keys (schema version 7) -------------------------------------------------------


def write_v6_store(path: Path) -> None:
    """Write a store of schema version 6 (before record keys) by its own migrations, holding two items."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("BEGIN")
        for step in _sqlite_schema.MIGRATIONS[:6]:
            step(con)
        con.execute("INSERT INTO kvmemory_sessions VALUES ('s', 'step', 1700000000.0, x'7b7d')")
        con.executemany(
            "INSERT INTO kvmemory_items (session_id, step, created, data) VALUES ('s', ?, ?, ?)",
            [
                ("1", 1700000000.5, b'{"step":1,"key":"lang","note":"open the report"}'),
                ("2", 1700000001.5, b'{"step":2,"note":"save the file"}'),
            ],
        )
        _sqlite_schema.build_keyword_index(con)
        con.execute("PRAGMA user_version = 6")
        con.execute("COMMIT")
    finally:
        con.close()


def test_v6_file_is_migrated_to_record_keys(tmp_path: Path) -> None:
    """A v6 file opened writable gets the key column; its items stay items (not records) and records can be put."""
    path = tmp_path / "v6.db"
    write_v6_store(path)
    with open_store(path) as store:
        assert store.record_keys("s") == []
        assert store.get_record("s", "lang") is None
        seq = store.put_record("s", "lang", {"value": "fr", "note": "french report"})
        assert store.get_record("s", "lang") == MemoryItem(
            key="lang", value="fr", note="french report"
        )
        assert [item["step"] for item in store.read("s")[:2]] == [1, 2]
        assert [hit.seq for hit in store.search("s", "report", 5)][-1] in (seq, 1)
        assert len(store.search("s", "report", 5)) == 2
    assert user_version(path) == SCHEMA_VERSION == 10
    con = sqlite3.connect(path)
    try:
        indexes = {row[1] for row in con.execute("PRAGMA index_list(kvmemory_items)")}
        assert "kvmemory_items_key" in indexes
    finally:
        con.close()


def test_v6_file_opened_read_only_reads_without_records(tmp_path: Path) -> None:
    """A v6 file opened read-only is not migrated: its items read as before and it holds no records."""
    path = tmp_path / "v6.db"
    write_v6_store(path)
    before = path.read_bytes()
    with open_store(path, read_only=True) as reader:
        assert [item["step"] for item in reader.read("s")] == [1, 2]
        assert reader.record_keys("s") == []
        assert reader.read_records("s") == []
        assert reader.get_record("s", "lang") is None
    assert path.read_bytes() == before
    assert user_version(path) == 6


def test_record_lookup_uses_the_key_index(tmp_path: Path) -> None:
    """SQLite answers a record lookup by probing the (session_id, key) index per key, not by scanning the session."""
    path = tmp_path / "k.db"
    with open_store(path) as store:
        store.put_record("s", "a", {"v": 1})
    con = sqlite3.connect(path)
    try:
        plan = " ".join(
            str(row[-1])
            for row in con.execute(
                "EXPLAIN QUERY PLAN SELECT key, seq, created, data FROM kvmemory_items"
                " WHERE session_id = ? AND key IN (SELECT value FROM json_each(?))",
                ("s", '["a"]'),
            )
        )
    finally:
        con.close()
    # One probe of the index per key (not a walk of the session's keyed rows).
    assert "USING INDEX kvmemory_items_key (session_id=? AND key=?)" in plan


def test_rows_of_ints_and_bytes_are_passed_through_and_others_made_pairs() -> None:
    """SQLite's (int, bytes) rows are returned as they are; a driver's memoryview becomes bytes and its seq an int."""
    from agents.memory.stores._sql.dialect import _pairs

    rows = [(1, b"ab"), (2, b"")]
    assert _pairs(rows) is rows
    assert _pairs(((1, b"ab"),)) == [(1, b"ab")]
    mixed = _pairs([(1, b"ab"), (True, memoryview(b"cd"))])
    assert mixed == [(1, b"ab"), (1, b"cd")]
    assert [type(data) for _, data in mixed] == [bytes, bytes]
    assert [type(seq) for seq, _ in mixed] == [int, int]


_PROCESS_WRITE = """
import sys
from agents.memory import MemoryItem
from agents.memory.stores import open_store

with open_store(sys.argv[1]) as store:
    with store.batch("s") as batch:
        batch.update({int(sys.argv[2]): MemoryItem(step=1, note=sys.argv[3])})
"""


def test_a_handle_opened_and_closed_beside_another_keeps_its_locks_for_other_processes(
    tmp_path: Path,
) -> None:
    """Opening and closing a second handle of the same file in this process leaves the first one's locks: another process's later writes are read, never a WAL deleted under it."""
    path = tmp_path / "store.db"
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root}
    with open_store(path) as kept:
        seq = kept.append("s", [MemoryItem(step=1, note="first")])[0]
        for note in ("second", "third"):
            with open_store(path) as passing:  # opened and closed while `kept` is open
                passing.read("s")
            subprocess.run(
                [sys.executable, "-c", _PROCESS_WRITE, str(path), str(seq), note],
                check=True,
                env=env,
                stdin=subprocess.DEVNULL,
            )
            assert kept.read("s") == [MemoryItem(step=1, note=note)]


def write_v7_store(path: Path) -> list[int]:
    """Leave a store of schema version 7 (before the vector change log) holding session 's' with vectors; return its seqs."""
    with open_store(path) as store:
        seqs = store.append(
            "s", [MemoryItem(step=i, thought=f"open the report {i}") for i in range(20)]
        )
        store.index_embeddings("s", HashingEmbedder(32))
    con = sqlite3.connect(path, isolation_level=None)
    try:
        for event in ("insert", "update", "delete"):
            con.execute(f"DROP TRIGGER kvmemory_vectors_logged_{event}")
        con.execute("DROP TABLE kvmemory_vector_changes")  # its prune trigger goes with it
        con.execute("PRAGMA user_version = 7")
    finally:
        con.close()
    return seqs


def _change_hits(store: Store) -> list[tuple[int, float]]:
    hits = store.search("s", "the report 7", 5, mode="semantic", embedder=HashingEmbedder(32))
    return [(hit.seq, hit.score) for hit in hits]


def test_v7_file_is_migrated_to_the_vector_change_log(tmp_path: Path) -> None:
    """A v7 file opened writable gets the change log: another handle's vector write is named by vector_changes, and a kept handle ranks as a fresh one."""
    path = tmp_path / "v7.db"
    seqs = write_v7_store(path)
    with open_store(path) as kept, open_store(path) as other:
        assert user_version(path) == SCHEMA_VERSION == 10
        since = kept.backend.vectors_version("s", "*")
        assert since == 0  # no write logged yet
        _change_hits(kept)
        _change_hits(kept)  # kept now
        with other.batch("s") as batch:
            batch.update({seqs[4]: MemoryItem(step=4, thought="the report 7")})
        other.index_embeddings("s", HashingEmbedder(32))
        now = kept.backend.vectors_version("s", "*")
        assert kept.backend.vector_changes("s", "*", since, now) == {seqs[4]}
        after = _change_hits(kept)
    with open_store(path) as fresh:
        assert after == _change_hits(fresh)
    assert after[0][0] == seqs[4]


def test_v7_file_opened_read_only_keeps_its_stamp_and_cannot_tell_changes(tmp_path: Path) -> None:
    """A v7 file opened read-only is not migrated: its vector version is the file's stamp, vector_changes answers None, and a write is still seen."""
    path = tmp_path / "v7.db"
    seqs = write_v7_store(path)
    with open_store(path, read_only=True) as reader:
        before = _change_hits(reader)
        assert _change_hits(reader) == before
        since = reader.backend.vectors_version("s", "*")
        assert isinstance(since, tuple)
        con = sqlite3.connect(path, isolation_level=None)
        try:  # a writer that is not kvmemory: the file stays at version 7
            con.execute(
                "UPDATE kvmemory_vectors SET vector = (SELECT vector FROM kvmemory_vectors"
                " WHERE seq = ?) WHERE seq = ?",
                (seqs[7], seqs[0]),
            )
        finally:
            con.close()
        now = reader.backend.vectors_version("s", "*")
        assert reader.backend.vector_changes("s", "*", since, now) is None
        assert _change_hits(reader) != before
    assert user_version(path) == 7


def test_the_vector_change_log_keeps_the_newest_rows_of_a_session_and_marks_the_cut(
    tmp_path: Path,
) -> None:
    """Past CHANGES_KEPT rows a session's log is pruned: a version from before the cut gets None, a recent one the seqs written since."""
    path = tmp_path / "store.db"
    with open_store(path) as store:
        store.append("s", [MemoryItem(step=1, thought="x")])
        backend = store.backend
        since = backend.vectors_version("s", "*")
        total = _sqlite_schema.CHANGES_KEPT + 2048
        with backend._file.transaction() as con:
            con.executemany(
                "INSERT OR REPLACE INTO kvmemory_vectors (session_id, seq, fields, vector)"
                " VALUES ('s', ?, '*', x'')",
                [(n % 3000,) for n in range(total)],
            )
        middle = backend.vectors_version("s", "*")
        with backend._file.transaction() as con:
            con.execute("DELETE FROM kvmemory_vectors WHERE seq = 5")
        now = backend.vectors_version("s", "*")
        rows = backend.query_rows("SELECT count(*) FROM kvmemory_vector_changes")[0][0]
        assert backend.vector_changes("s", "*", since, now) is None
        assert backend.vector_changes("s", "*", middle, now) == {5}
    assert _sqlite_schema.CHANGES_KEPT < rows <= _sqlite_schema.CHANGES_KEPT + 1024 + 1


def test_a_filter_judged_again_after_another_handle_writes_sees_the_write(tmp_path: Path) -> None:
    """filter_candidates is kept until the next commit: a row another handle (or this one) changes is judged again."""
    from agents.memory.search import Filter

    path = tmp_path / "judged.db"
    tree = Filter({"agent": "reviewer"}).tree
    with SQLiteStore(path) as a, SQLiteStore(path) as b:
        seqs = a.append("s", [MemoryItem(step=i, agent="coder") for i in range(20)])
        assert a.backend.filter_candidates("s", tree) == set()
        with b.batch("s") as batch:
            batch.update({seqs[3]: MemoryItem(step=3, agent="reviewer")})
        assert a.backend.filter_candidates("s", tree) == {seqs[3]}
        assert a.backend.filter_candidates("s", tree) == {seqs[3]}  # from memory, the same
        with a.batch("s") as batch:
            batch.update({seqs[5]: MemoryItem(step=5, agent="reviewer")})
        assert a.backend.filter_candidates("s", tree) == {seqs[3], seqs[5]}


# -- lengths in the session index (schema version 9) -------------------------------------


def tied_items(seed: int, n: int, share: float, start: int = 0) -> list[MemoryItem]:
    """Return ``n`` items that each hold "is" once (all, or about ``share`` of them), of a few lengths (many ties), some a rarer word."""

    def words_of(rng: random.Random) -> list[str]:
        words = ["is"] * (rng.random() < share) + ["filler"] * rng.choice([0, 0, 0, 2, 5])
        return words + ["zeta"] * (rng.random() < 0.05) + ["word"] * rng.choice([0, 0, 0, 1, 3])

    return noted_items(seed, n, words_of, start)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    share=st.sampled_from([1.0, 0.8]),
    query=st.sampled_from(["is", "is zeta", "is is", "word", "filler is"]),
    k=st.sampled_from([1, 3, 10]),
    change=st.sampled_from(["none", "delete", "update", "other session", "other handle"]),
    fts5_from=st.sampled_from([0, 4096]),
)
def test_items_tied_on_a_word_each_holds_once_rank_as_memory_search(
    seed: int, share: float, query: str, k: int, change: str, fts5_from: int
) -> None:
    """Many items tied on a word each holds once (every item or most) rank as Memory.search, after deletes, updates, another session or another handle's writes, by FTS5's order or SQL."""
    items = tied_items(seed, 400, share)
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as folder:
        patch.setattr(_sqlite_scorer, "_FTS5_FROM", fts5_from)
        path = Path(folder) / "ties.db"
        with SQLiteStore(path) as store:
            seqs = store.append("s", items)
            if change == "delete":
                with store.batch("s") as batch:
                    batch.delete(seqs[:7])
            elif change == "update":
                with store.batch("s") as batch:
                    batch.update({seqs[3]: MemoryItem(n=3, note="is is word")})
            elif change == "other session":
                store.append("t", items[:50])
            elif change == "other handle":
                with SQLiteStore(path) as other:
                    other.append("s", tied_items(seed + 1, 9, share, start=400))
            got = [(hit.item["n"], hit.score) for hit in store.search("s", query, k)]
            want = [(hit.item["n"], hit.score) for hit in Memory(store.read("s")).search(query, k)]
        with SQLiteStore(path, read_only=True) as reader:
            again = [(hit.item["n"], hit.score) for hit in reader.search("s", query, k)]
    assert got == want
    assert again == want


def traced_search(
    path: Path, items: list[MemoryItem], query: str, other: int = 0
) -> tuple[list[tuple[Any, float]], list[str]]:
    """Store ``items`` in a session (and the first ``other`` in another), fold them, search ``query`` (k 5); return the hits and the statements the search ran."""
    with SQLiteStore(path) as store:
        store.append("s", items)
        if other:
            store.append("t", items[:other])
        store.search("s", query)  # folds the pending rows
        statements: list[str] = []
        store.backend.connection.set_trace_callback(statements.append)
        got = [(hit.item["n"], hit.score) for hit in store.search("s", query, 5)]
        store.backend.connection.set_trace_callback(None)
    return got, statements


@pytest.mark.parametrize(("query", "other"), [("is", 0), ("is", 100), ("is is", 100)])
def test_a_word_every_item_holds_once_is_ranked_by_length_without_postings(
    tmp_path: Path, query: str, other: int
) -> None:
    """A word every item holds once is ranked from the lengths in the session index (another session in the file or not): none of its postings is read."""
    items = tied_items(5, 5000, 1.0)
    got, statements = traced_search(tmp_path / "ties.db", items, query, other)
    assert got == [(hit.item["n"], hit.score) for hit in Memory(items).search(query, 5)]
    assert not [sql for sql in statements if "bm25(" in sql or "kvmemory_fts_instance" in sql]


def test_many_items_tied_on_a_word_each_holds_once_read_their_lengths_not_their_terms(
    tmp_path: Path,
) -> None:
    """Past the spare rows, the items tied with the k-th on a word each holds once are scored from their lengths: no row's terms are read."""
    items = tied_items(6, 6000, 0.8)  # 4,800 postings: past them FTS5 ranks a word alone
    got, statements = traced_search(tmp_path / "ties.db", items, "is")
    assert got == [(hit.item["n"], hit.score) for hit in Memory(items).search("is", 5)]
    assert [sql for sql in statements if "bm25(" in sql]
    assert not [sql for sql in statements if ", terms FROM kvmemory_items" in sql]


def downgrade_to_v8(path: Path) -> None:
    """Give a store file the session index of schema version 8 (without the lengths) and that version."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("DROP INDEX kvmemory_items_session")
        con.execute("CREATE INDEX kvmemory_items_session ON kvmemory_items (session_id, seq)")
        con.execute("PRAGMA user_version = 8")
    finally:
        con.close()


def session_index_columns(path: Path) -> list[str]:
    """Return the columns of a store file's session index, in order."""
    con = sqlite3.connect(path)
    try:
        return [row[2] for row in con.execute("PRAGMA index_info(kvmemory_items_session)")]
    finally:
        con.close()


def test_v8_file_reads_read_only_and_is_migrated_to_lengths_in_the_session_index(
    tmp_path: Path,
) -> None:
    """A v8 file ranks as Memory.search read-only (unchanged) and, opened writable, gets the lengths in its session index."""
    path = tmp_path / "v8.db"
    items = tied_items(7, 300, 1.0)
    with SQLiteStore(path) as store:
        store.append("s", items)
    downgrade_to_v8(path)
    want = [(hit.item["n"], hit.score) for hit in Memory(items).search("is", 5)]
    before = path.read_bytes()
    with SQLiteStore(path, read_only=True) as reader:
        assert [(hit.item["n"], hit.score) for hit in reader.search("s", "is", 5)] == want
    assert path.read_bytes() == before
    with SQLiteStore(path) as store:
        assert [(hit.item["n"], hit.score) for hit in store.search("s", "is", 5)] == want
    assert user_version(path) == SCHEMA_VERSION == 10
    assert session_index_columns(path) == ["session_id", "seq", "n_terms"]


def test_a_failed_migration_to_v9_leaves_the_v8_file_as_it_was(tmp_path: Path) -> None:
    """A migration to v9 that fails after dropping the old index rolls back: version 8, its index and every item kept."""
    path = tmp_path / "v8.db"
    items = tied_items(8, 50, 1.0)
    with SQLiteStore(path) as store:
        store.append("s", items)
    downgrade_to_v8(path)

    def fail_after_drop(con: sqlite3.Connection) -> None:
        con.execute("DROP INDEX kvmemory_items_session")
        msg = "disk I/O error (simulated)"
        raise sqlite3.OperationalError(msg)

    steps = (*_sqlite_schema.MIGRATIONS[:8], fail_after_drop)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_sqlite_file, "MIGRATIONS", steps)
        with pytest.raises(StoreError, match="simulated"):
            SQLiteStore(path)
    assert user_version(path) == 8
    assert session_index_columns(path) == ["session_id", "seq"]
    with SQLiteStore(path) as store:
        assert [item["n"] for item in store.read("s")] == list(range(50))
    assert session_index_columns(path) == ["session_id", "seq", "n_terms"]


@pytest.mark.parametrize("read_only", [False, True])
def test_a_directory_given_as_a_sqlite_path_is_refused_naming_the_fix(
    tmp_path: Path, read_only: bool
) -> None:
    """A directory is no SQLite file: opening it says so and names the fix, and writes nothing into it."""
    with pytest.raises(
        StoreError, match=r"it is a directory, not a file; pass the path of a SQLite"
    ):
        open_store(tmp_path, read_only=read_only)
    with pytest.raises(
        StoreError, match=r"not a file; pass the path of a SQLite file, or 'jsonl://DIR'"
    ):
        open_store(f"sqlite://{tmp_path}", read_only=read_only)
    assert list(tmp_path.iterdir()) == []
