"""An SQLite session's coded file against the vector change log it was saved at: a database file put back to an older backup, then written again, must not have the file served or caught up; what JSONL shares is tested in test_stores_coded_file."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from coded_sessions import (
    EMBEDDER,
    FIELDS,
    QUERIES,
    closed_saves,
    coded_handle,
    expected,
    file_of,
    found,
    kept_types,
    more_steps,
    saved,
    steps,
    written,
)

from agents.memory import MemoryItem
from agents.memory.stores import open_store
from agents.memory.stores._search.compact import CompactVectors
from agents.memory.stores._sqlite.backend import SQLiteBackend

# Each test twice: the coded rows bounded by simsimd, then by numpy (simsimd refused).
pytestmark = pytest.mark.usefixtures("int8_kernel")


def newest_change(db: Path) -> int:
    """Return the id of the newest row of the file's vector change log."""
    con = sqlite3.connect(db)
    try:
        return int(con.execute("SELECT max(id) FROM kvmemory_vector_changes").fetchone()[0])
    finally:
        con.close()


def put_back(backup: Path, db: Path) -> None:
    """Copy ``backup`` over ``db`` (no handle open), its WAL and shared-memory files removed."""
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(backup, db)


@pytest.mark.parametrize("then", ["at", "past"])
def test_a_backup_put_back_and_written_again_to_the_files_version_is_not_taken_for_it(
    then: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database put back to an older backup (the coded file left beside it), then other steps written until the change log's newest id is the file's saved one (``at``) or one past it (``past``), the first rows (the file's key) unchanged: a fresh handle's semantic and hybrid hits are Memory.search's over the session now."""
    db = tmp_path / "store.db"
    url = f"sqlite://{db}"
    items = steps(60, 3)
    written(url, items)
    assert not Path(f"{db}-wal").exists()
    shutil.copyfile(db, tmp_path / "backup.db")
    lost = more_steps(70, 5)
    written(url, lost)
    saved(url, [*items, *lost], monkeypatch)
    with open_store(url) as store:
        at = file_of(store).saved_version()
    assert at is not None
    old = newest_change(db)
    put_back(tmp_path / "backup.db", db)
    other = [
        MemoryItem(**{**item.to_dict(), "step": 2000 + i})
        for i, item in enumerate(steps(old - newest_change(db), 41))
    ]
    if then == "past":
        other += steps(1, 42, first=3000)
    written(url, other)
    assert newest_change(db) == old + (then == "past")
    now = [*items, *other]
    with coded_handle(url, now, monkeypatch) as store:
        for query in QUERIES:
            for mode in ("semantic", "hybrid"):
                assert found(store, query, 9, mode) == expected(now, query, 9, mode, None)


def downgrade_to_v9(db: Path) -> None:
    """Give a store file the vector change log of schema version 9 (ids alone, no nonce) and that version."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("DROP INDEX kvmemory_vector_changes_session")
        con.execute("ALTER TABLE kvmemory_vector_changes DROP COLUMN nonce")
        con.execute(
            "CREATE INDEX kvmemory_vector_changes_session ON kvmemory_vector_changes (session_id, id)"
        )
        for event, row in (("INSERT", "new"), ("UPDATE", "new"), ("DELETE", "old")):
            con.execute(f"DROP TRIGGER kvmemory_vectors_logged_{event.lower()}")
            con.execute(
                f"CREATE TRIGGER kvmemory_vectors_logged_{event.lower()} AFTER {event} ON"
                " kvmemory_vectors BEGIN INSERT INTO kvmemory_vector_changes (session_id, seq)"
                f" VALUES ({row}.session_id, {row}.seq); END"
            )
        con.execute("PRAGMA user_version = 9")
    finally:
        con.close()


def test_a_v9_file_keeps_its_ids_read_only_and_is_migrated_to_nonced_versions(
    tmp_path: Path,
) -> None:
    """A v9 file opened read-only versions by id and names the changes between ids, unchanged; migrated, its version is (id, nonce) of the same newest row, and an id alone is neither current nor caught up."""
    db = tmp_path / "store.db"
    url = f"sqlite://{db}"
    seqs = written(url, steps(60, 3))
    downgrade_to_v9(db)
    before = db.read_bytes()
    with open_store(url, read_only=True) as reader:
        since = reader.backend.vectors_version("s", FIELDS)
        assert since == newest_change(db)
        assert reader.backend.vector_changes("s", FIELDS, since - 3, since) == set(seqs[-3:])
    assert db.read_bytes() == before
    with open_store(url) as store:  # migrated
        now = store.backend.vectors_version("s", FIELDS)
        assert isinstance(now, tuple)
        assert now[0] == since
        assert type(now[1]) is int
        assert now != since
        assert store.backend.vector_changes("s", FIELDS, since, now) is None
        assert store.backend.vector_changes("s", FIELDS, since - 3, now) is None
        assert store.backend.vector_changes("s", FIELDS, now, now) == set()
        store.append("s", steps(2, 9, first=500))
        store.index_embeddings("s", EMBEDDER)
        later = store.backend.vectors_version("s", FIELDS)
        assert store.backend.vector_changes("s", FIELDS, now, later) == {seqs[-1] + 1, seqs[-1] + 2}


def test_a_coded_file_saved_at_an_id_alone_is_built_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coded file saved at a version of the id alone (before schema version 10) is neither served nor caught up: the first queries build the table again (hits as Memory.search) and save it at (id, nonce)."""
    db = tmp_path / "store.db"
    url = f"sqlite://{db}"
    items = steps(60, 3)
    written(url, items)
    with monkeypatch.context() as patch:
        patch.setattr(SQLiteBackend, "vectors_version", lambda self, sid, fields: newest_change(db))
        saved(url, items, monkeypatch)
    with coded_handle(url, items, monkeypatch) as store:
        assert file_of(store).saved_version() == newest_change(db)
        assert found(store, QUERIES[1], 9, "hybrid") == expected(
            items, QUERIES[1], 9, "hybrid", None
        )
        assert kept_types(store) != [CompactVectors]  # not taken from the file
        for mode in ("semantic", "hybrid"):
            for query in QUERIES:
                assert found(store, query, 9, mode) == expected(items, query, 9, mode, None)
    closed_saves()
    with open_store(url) as store:
        assert file_of(store).saved_version() == store.backend.vectors_version("s", FIELDS)
