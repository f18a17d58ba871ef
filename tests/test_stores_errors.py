"""Bad input to stores: each gives a clear error and changes nothing."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from agents.memory import (
    CorruptStoreError,
    InvalidSessionIdError,
    InvalidStoreURLError,
    MemoryItem,
    MissingDependencyError,
    SchemaVersionError,
    StoreNotFoundError,
)
from agents.memory.exceptions import (
    InvalidQueryError,
    SkippedRecordWarning,
    StoreArgumentError,
    StoreError,
)
from agents.memory.search import HashingEmbedder
from agents.memory.stores import (
    Backend,
    SQLiteStore,
    Store,
    open_memory,
    open_store,
)
from agents.memory.stores._ram import SpaceBackend


def test_unknown_scheme_is_refused() -> None:
    """An unknown URL scheme names the scheme and the forms that work."""
    with pytest.raises(InvalidStoreURLError, match=r"'redis'.*sqlite:///"):
        open_store("redis://localhost/0")


def test_unknown_option_is_refused(tmp_path: Path) -> None:
    """An unknown URL option names the option and the known ones, and creates no file."""
    path = tmp_path / "a.db"
    with pytest.raises(InvalidStoreURLError, match=r"'journal'.*synchronous"):
        open_store(f"sqlite://{path}?journal=off")
    assert not path.exists()


def test_bad_synchronous_value_is_refused(tmp_path: Path) -> None:
    """synchronous must be full, normal or off."""
    with pytest.raises(InvalidStoreURLError, match="synchronous='fast'"):
        open_store(f"sqlite://{tmp_path / 'a.db'}?synchronous=fast")


def test_bare_path_opens_sqlite(tmp_path: Path) -> None:
    """A path without a scheme opens a SQLite store."""
    with open_store(tmp_path / "plain.db") as store:
        assert isinstance(store, SQLiteStore)


def test_missing_file_read_only_is_not_found(tmp_path: Path) -> None:
    """Opening a missing file read-only raises StoreNotFoundError and creates nothing."""
    path = tmp_path / "missing.db"
    with pytest.raises(StoreNotFoundError, match=r"missing\.db"):
        open_store(f"sqlite://{path}?mode=ro")
    assert not path.exists()


def test_read_only_store_refuses_writes(tmp_path: Path) -> None:
    """A store opened read-only reads, and refuses a write with a message naming the fix."""
    url = f"sqlite://{tmp_path / 'a.db'}"
    with open_store(url) as store:
        store.append("s", [MemoryItem(step=1)])
    with open_store(url + "?mode=ro") as store:
        assert store.count("s") == 1
        with pytest.raises(Exception, match="read-only"):
            store.append("s", [MemoryItem(step=2)])
        assert store.count("s") == 1


@pytest.mark.parametrize("bad", ["../escape", "a/b", "x'; DROP TABLE kvmemory_items; --", 'q"'])
def test_session_id_with_separator_or_quote_creates_nothing(tmp_path: Path, bad: str) -> None:
    """A session id with a path separator or quote is refused before any file is made."""
    directory = tmp_path / "logs"
    with pytest.raises(InvalidSessionIdError, match="ession id"):
        open_memory(f"jsonl://{directory}", bad)
    assert not directory.exists()


def test_corrupt_database_file_is_reported_and_kept(tmp_path: Path) -> None:
    """A file that is not a database raises CorruptStoreError and is left byte for byte."""
    path = tmp_path / "notes.db"
    payload = b"these are someone's notes, not a database" * 50
    path.write_bytes(payload)
    with pytest.raises(CorruptStoreError, match=r"notes\.db"):
        open_store(path)
    assert path.read_bytes() == payload


def test_newer_sqlite_schema_is_refused(tmp_path: Path) -> None:
    """A SQLite file with a newer schema version is refused with the upgrade hint."""
    path = tmp_path / "new.db"
    con = sqlite3.connect(path)
    con.execute("PRAGMA user_version = 99")
    con.close()
    with pytest.raises(SchemaVersionError, match=r"version 99.*upgrade kvmemory"):
        open_store(path)


def test_foreign_sqlite_database_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    """A SQLite database with other tables (user_version 0) raises CorruptStoreError and keeps every byte."""
    path = tmp_path / "app.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE mine (x)")
    con.execute("INSERT INTO mine VALUES (1)")
    con.commit()
    con.close()
    before = path.read_bytes()
    with pytest.raises(
        CorruptStoreError, match=r"app\.db' is not a kvmemory store: it holds other tables \(mine"
    ):
        open_store(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_empty_sqlite_file_becomes_a_store(tmp_path: Path) -> None:
    """An empty file (as touch leaves it) gets the current layout on open."""
    path = tmp_path / "new.db"
    path.touch()
    with open_store(path) as store:
        store.append("s", [MemoryItem(step=1)])
    con = sqlite3.connect(path)
    try:
        version = con.execute("PRAGMA user_version").fetchone()[0]
    finally:
        con.close()
    assert version == SQLiteStore.schema_version == 10


def test_newer_jsonl_store_is_refused(tmp_path: Path) -> None:
    """A JSONL store directory marked with a newer layout version is refused."""
    directory = tmp_path / "logs"
    directory.mkdir()
    (directory / "kvmemory-store.json").write_bytes(
        b'{"format":"kvmemory.jsonl-store","version":7}'
    )
    with pytest.raises(SchemaVersionError, match="version 7"):
        open_store(f"jsonl://{directory}")


def test_jsonl_truncated_last_line_is_skipped_and_reported(tmp_path: Path) -> None:
    """A truncated last line warns, every complete line before it is kept, and appends go on."""
    url = f"jsonl://{tmp_path / 'logs'}"
    with open_store(url) as store:
        store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
    log = tmp_path / "logs" / "s.jsonl"
    with log.open("ab") as stream:
        stream.write(b'{"seq":3,"t":1.0,"s":"3","item":{"step":')
    with open_store(url) as store:
        with pytest.warns(SkippedRecordWarning, match="truncated line 4"):
            assert [i["step"] for i in store.read("s")] == [1, 2]
        store.append("s", [MemoryItem(step=3)])
    with open_store(url) as store:
        assert [i["step"] for i in store.read("s")] == [1, 2, 3]


def test_jsonl_damaged_middle_line_is_an_error(tmp_path: Path) -> None:
    """A damaged line before the end raises CorruptStoreError naming the file and line."""
    url = f"jsonl://{tmp_path / 'logs'}"
    with open_store(url) as store:
        store.append("s", [MemoryItem(step=1)])
        store.append("s", [MemoryItem(step=2)])
    log = tmp_path / "logs" / "s.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[1] = b"garbage"
    log.write_bytes(b"\n".join(lines))
    with open_store(url) as store, pytest.raises(CorruptStoreError, match="line 2 of JSONL log"):
        store.read("s")


def test_jsonl_compaction_keeps_live_items_and_seqs(tmp_path: Path) -> None:
    """Once deletes outnumber live items the log is rewritten with only live items; seqs are not reused."""
    url = f"jsonl://{tmp_path / 'logs'}"
    log = tmp_path / "logs" / "s.jsonl"
    with open_store(url) as store:
        seqs = store.append("s", [MemoryItem(step=i) for i in range(100)])
        store.keep_last("s", 10)
        assert len(log.read_bytes().splitlines()) == 1 + 10
        new = store.append("s", [MemoryItem(step=100)])
    assert new[0] > seqs[-1]
    with open_store(url) as store:
        assert [i["step"] for i in store.read("s")] == list(range(90, 101))


def test_jsonl_explicit_compaction_drops_tombstones(tmp_path: Path) -> None:
    """compact() rewrites a log holding a few deletes into header plus live items."""
    url = f"jsonl://{tmp_path / 'logs'}"
    log = tmp_path / "logs" / "s.jsonl"
    with open_store(url) as store:
        store.append("s", [MemoryItem(step=i) for i in range(5)])
        store.delete_steps("s", [0])
        assert b'"del"' in log.read_bytes()
        store.compact("s")  # type: ignore[attr-defined]  # JSONLStore's own call
        assert b'"del"' not in log.read_bytes()
        assert [i["step"] for i in store.read("s")] == [1, 2, 3, 4]


def test_missing_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without psycopg installed, a postgresql:// URL names the extra to install."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(MissingDependencyError, match=r"kvmemory\[postgres\]"):
        open_store("postgresql://nobody@127.0.0.1:1/none")


def test_unreachable_postgres_is_a_store_error_with_hidden_password() -> None:
    """A server that does not answer gives StoreError without printing the password."""
    from agents.memory import StoreError
    from agents.memory.stores._postgres.backend import PostgresStore

    with pytest.raises(StoreError, match="server is running") as info:
        PostgresStore("postgresql://u:secret@127.0.0.1:1/db?connect_timeout=1", timeout=2)
    assert "secret" not in str(info.value)


@pytest.mark.postgres
def test_newer_postgres_schema_is_refused(postgres_url: str) -> None:
    """A PostgreSQL schema with a newer version is refused."""
    import psycopg

    with open_store(postgres_url):
        pass
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute("UPDATE kvmemory_schema SET version = 42")
    with pytest.raises(SchemaVersionError, match="version 42"):
        open_store(postgres_url)


def test_sqlite_directory_missing_is_a_store_error(tmp_path: Path) -> None:
    """A SQLite path in a missing directory raises StoreError naming the path."""
    from agents.memory import StoreError

    path = tmp_path / "nope" / "a.db"
    with pytest.raises(StoreError, match=r"a\.db"):
        open_store(path)
    assert not os.path.exists(path.parent)


def test_damaged_row_is_named_and_nothing_is_loaded(tmp_path: Path) -> None:
    """A stored item whose bytes are not JSON raises CorruptStoreError naming its seq."""
    path = tmp_path / "damaged.db"
    with open_store(str(path)) as store:
        seqs = store.append("s1", [MemoryItem(step=1), MemoryItem(step=2), MemoryItem(step=3)])
    con = sqlite3.connect(path)
    with con:
        con.execute("UPDATE kvmemory_items SET data = ? WHERE seq = ?", (b'{"step": 2,', seqs[1]))
    con.close()
    with open_store(str(path)) as store:
        with pytest.raises(
            CorruptStoreError, match=rf"Item {seqs[1]} of session 's1' .* is damaged"
        ):
            store.read("s1")
        assert store.count("s1") == 3


class NoVectorBackend(SpaceBackend):
    """The in-process backend with the vector operations left at Backend's defaults (a backend written before them)."""

    keeps_vectors = False
    vector_model = Backend.vector_model
    vector_pages = Backend.vector_pages
    vector_count = Backend.vector_count
    claim_vector_model = Backend.claim_vector_model
    put_vectors = Backend.put_vectors
    delete_vectors = Backend.delete_vectors
    drop_vectors = Backend.drop_vectors


def test_backend_without_vectors_refuses_only_index_embeddings() -> None:
    """A backend without vector primitives writes, deletes and searches (semantic too); index_embeddings is a named StoreError."""
    with Store(NoVectorBackend()) as store:
        seqs = store.append("s", [MemoryItem(step=1, note="report"), MemoryItem(step=2)])
        with store.batch("s") as batch:
            batch.update({seqs[0]: MemoryItem(step=1, note="the report")})
            batch.delete([seqs[1]])
        assert [hit.seq for hit in store.search("s", "report")] == [seqs[0]]
        hits = store.search("s", "report", mode="semantic", embedder=HashingEmbedder())
        assert [hit.seq for hit in hits] == [seqs[0]]
        with pytest.raises(StoreError, match="keeps no vectors"):
            store.index_embeddings("s", HashingEmbedder())
        assert store.vector_model("s") is None
        assert store.drop_vectors("s") == 0
        store.clear("s")
        assert store.count("s") == 0


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"batch_size": 0}, "batch_size >= 1, got 0"),
        ({"keys": "note"}, "single string 'note'"),
    ],
)
def test_bad_index_embeddings_arguments_are_named(options: dict[str, Any], match: str) -> None:
    """A batch size below 1 or a bare string of keys is refused by name, embedding nothing."""
    with open_store("memory://") as store:
        store.append("s", [MemoryItem(step=1, note="report")])
        with pytest.raises((StoreArgumentError, InvalidQueryError), match=match):
            store.index_embeddings("s", HashingEmbedder(), **options)
        assert store.vector_model("s") is None


def test_something_that_is_not_an_embedder_is_refused() -> None:
    """An embedder without a name and an int dimension is refused by name."""
    with open_store("memory://") as store:
        store.append("s", [MemoryItem(step=1, note="report")])
        with pytest.raises(StoreArgumentError, match="embedder must be an Embedder"):
            store.index_embeddings("s", len)  # type: ignore[arg-type]  # not an embedder is the test
        with pytest.raises(StoreArgumentError, match="embedder must be an Embedder"):
            store.search("s", "report", mode="hybrid", embedder=object())  # type: ignore[arg-type]  # not an embedder is the test


def test_index_embeddings_on_a_read_only_store_is_refused(tmp_path: Path) -> None:
    """index_embeddings on a read-only handle raises StoreError and stores nothing."""
    path = tmp_path / "runs.db"
    with open_store(path) as store:
        store.append("s", [MemoryItem(step=1, note="report")])
    with open_store(path, read_only=True) as reader, pytest.raises(StoreError, match="read-only"):
        reader.index_embeddings("s", HashingEmbedder())
    with open_store(path) as store:
        assert store.vector_model("s") is None


def test_semantic_store_search_without_numpy_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without numpy, a semantic store search names the extra that installs it and stores nothing."""
    with open_store("memory://") as store:
        store.append("s", [MemoryItem(step=1, note="report")])
        # A None entry in sys.modules makes `import numpy` fail, as if it were not installed.
        monkeypatch.setitem(sys.modules, "numpy", None)
        with pytest.raises(MissingDependencyError, match=r"pip install 'kvmemory\[semantic\]'"):
            store.search("s", "report", mode="semantic", embedder=HashingEmbedder())
        monkeypatch.undo()
        assert store.vector_model("s") is None
